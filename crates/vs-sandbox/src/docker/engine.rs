//! The connection to the Docker Engine (bollard over its Unix socket) and
//! the pinned-image check.

use std::future::Future;
use std::path::PathBuf;

use bollard::Docker;
use bollard::errors::Error as BollardError;

use crate::controls::SandboxUnavailableError;
use crate::error::SandboxError;

use super::DockerError;
use super::plan::ImagePin;

/// How long one API call may take before it is abandoned (seconds). Loads
/// of large archives and long-running execs are streams and not bounded by
/// this.
const API_TIMEOUT_SECS: u64 = 600;

/// A connected Engine client with the single-threaded runtime that drives
/// it. Every call blocks the caller until the Engine answers.
pub struct Engine {
    rt: tokio::runtime::Runtime,
    docker: Docker,
    endpoint: PathBuf,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// The Engine's socket: `DOCKER_HOST` when it is a `unix://` address,
/// else `/var/run/docker.sock`.
pub fn engine_socket() -> PathBuf {
    match std::env::var("DOCKER_HOST") {
        Ok(h) if h.starts_with("unix://") => PathBuf::from(&h["unix://".len()..]),
        _ => PathBuf::from("/var/run/docker.sock"),
    }
}

fn unavailable(endpoint: &std::path::Path, reason: String) -> SandboxError {
    SandboxUnavailableError::new(
        "docker",
        format!(
            "no Docker Engine answers at {}: {reason}",
            endpoint.display()
        ),
        "start the Docker Engine (or set DOCKER_HOST=unix://...), or use --confine bwrap",
    )
    .into()
}

impl Engine {
    /// Connects to the Engine and negotiates the API version. An Engine
    /// that does not answer is [`SandboxUnavailableError`].
    pub fn connect() -> Result<Self, SandboxError> {
        let endpoint = engine_socket();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| SandboxError::Os {
                what: "cannot start the Docker client runtime".into(),
                source,
            })?;
        let path = endpoint.to_string_lossy().into_owned();
        let docker =
            Docker::connect_with_unix(&path, API_TIMEOUT_SECS, bollard::API_DEFAULT_VERSION)
                .map_err(|e| unavailable(&endpoint, e.to_string()))?;
        let docker = rt
            .block_on(async {
                tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    docker.negotiate_version(),
                )
                .await
            })
            .map_err(|_| unavailable(&endpoint, "no answer within 10 s".into()))?
            .map_err(|e| unavailable(&endpoint, e.to_string()))?;
        Ok(Self {
            rt,
            docker,
            endpoint,
        })
    }

    /// The bollard client.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The socket this client talks to.
    pub fn endpoint(&self) -> &std::path::Path {
        &self.endpoint
    }

    /// Runs a future on this client's runtime.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Spawns a task on this client's runtime (it runs while some thread
    /// is inside [`Engine::block_on`]).
    pub(crate) fn spawn(
        &self,
        f: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    ) -> tokio::task::JoinHandle<()> {
        self.rt.spawn(f)
    }

    /// Finds the pinned image: by config digest (classic store), then by
    /// manifest digest (containerd store); its layers must equal the
    /// pinned diff_ids. Returns the ID to run it by.
    pub fn check_pinned(&self, pin: &ImagePin) -> Result<String, SandboxError> {
        self.block_on(check_pinned(&self.docker, pin))
    }
}

/// Whether an Engine error means "no such object".
pub(crate) fn is_not_found(e: &BollardError) -> bool {
    matches!(
        e,
        BollardError::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// An Engine call failed.
pub(crate) fn engine_err(operation: &'static str, e: BollardError) -> SandboxError {
    DockerError::Engine {
        operation,
        message: e.to_string(),
    }
    .into()
}

/// See [`Engine::check_pinned`].
pub(crate) async fn check_pinned(docker: &Docker, pin: &ImagePin) -> Result<String, SandboxError> {
    let mut candidates = vec![pin.config_digest.clone()];
    candidates.extend(pin.manifest_digest.clone());
    for id in &candidates {
        match docker.inspect_image(id).await {
            Ok(img) => {
                let found_id = img.id.clone().unwrap_or_default();
                if &found_id != id {
                    // An ID prefix or a name matched another image.
                    continue;
                }
                let layers = img.root_fs.and_then(|r| r.layers).unwrap_or_default();
                if layers != pin.diff_ids {
                    let (field, expected, found) = first_layer_difference(&pin.diff_ids, &layers);
                    return Err(DockerError::ImageMismatch {
                        image: pin.name.clone(),
                        field,
                        expected,
                        found,
                    }
                    .into());
                }
                return Ok(found_id);
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(engine_err("inspect image", e)),
        }
    }
    // Name what the Engine holds under the pinned name, if anything.
    let reference = format!("{}:{}", pin.name, pin.tag);
    let found = match docker.inspect_image(&reference).await {
        Ok(img) => format!("{reference} is {}", img.id.unwrap_or_default()),
        Err(e) if is_not_found(&e) => format!("no image {reference}"),
        Err(e) => return Err(engine_err("inspect image", e)),
    };
    Err(DockerError::ImageMissing {
        image: pin.name.clone(),
        expected: match &pin.manifest_digest {
            Some(m) => format!("{} (config) or {m} (manifest)", pin.config_digest),
            None => format!("{} (config)", pin.config_digest),
        },
        found,
    }
    .into())
}

fn first_layer_difference(pinned: &[String], found: &[String]) -> (String, String, String) {
    match pinned.iter().zip(found).position(|(a, b)| a != b) {
        Some(i) => (
            format!("layer {}", i + 1),
            pinned[i].clone(),
            found[i].clone(),
        ),
        None => (
            "layer count".into(),
            pinned.len().to_string(),
            found.len().to_string(),
        ),
    }
}
