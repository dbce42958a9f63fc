//! The connection to the Docker Engine (bollard over its Unix socket) and
//! the lookup of a pinned image (which [`vs_pin::Pin::check`] decides).

use std::future::Future;
use std::path::PathBuf;

use bollard::Docker;
use bollard::errors::Error as BollardError;
use bollard::models::ImageInspect;
use vs_pin::{Digest, FoundId, FoundImage, IdKind};

use vs_sandbox::controls::SandboxUnavailableError;
use vs_sandbox::error::SandboxError;

use crate::DockerError;
use crate::plan::ImagePin;

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

/// Most bytes of a `/_ping` answer read (its headers are a few hundred).
const PING_LIMIT: usize = 8 * 1024;

/// How long the Engine may take to answer `/_ping`.
const PING_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What `GET /_ping` told.
#[derive(Debug)]
enum Ping {
    /// Its `Api-Version` header.
    Version(bollard::ClientVersion),
    /// No usable answer (no socket, no header): bollard negotiates by
    /// `/version`, and names what is wrong if that fails too.
    NoVersion,
    /// Connected, but nothing answered within the timeout: the Engine is
    /// unavailable (asking `/version` would only wait again).
    Silent,
}

/// Asks the Engine at `socket` for `GET /_ping`, waiting at most `limit`
/// for each read and write.
fn ping(socket: &std::path::Path, limit: std::time::Duration) -> Ping {
    use std::io::{ErrorKind, Read, Write};
    let Ok(mut stream) = std::os::unix::net::UnixStream::connect(socket) else {
        return Ping::NoVersion;
    };
    let silent =
        |e: &std::io::Error| matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut);
    if stream.set_read_timeout(Some(limit)).is_err()
        || stream.set_write_timeout(Some(limit)).is_err()
    {
        return Ping::NoVersion;
    }
    if let Err(e) =
        stream.write_all(b"GET /_ping HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n")
    {
        return if silent(&e) {
            Ping::Silent
        } else {
            Ping::NoVersion
        };
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") && answer.len() < PING_LIMIT {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if silent(&e) => return Ping::Silent,
            Err(_) => return Ping::NoVersion,
        }
    }
    parse_ping_version(&answer).map_or(Ping::NoVersion, Ping::Version)
}

/// The API version in the headers of a `/_ping` answer with status 200.
fn parse_ping_version(answer: &[u8]) -> Option<bollard::ClientVersion> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?;
    if status.split(' ').nth(1) != Some("200") {
        return None;
    }
    let value = lines.find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("api-version")
            .then(|| value.trim())
    })?;
    let (major, minor) = value.split_once('.')?;
    Some(bollard::ClientVersion {
        major_version: major.parse().ok()?,
        minor_version: minor.parse().ok()?,
    })
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
        // The Engine's API version from `/_ping` (a header, answered at
        // once); bollard's negotiation asks `/version`, which the Engine
        // answers only after running `runc --version` and `docker-init
        // --version` (~8 ms of every connection here). Either way the
        // client speaks the lower of the two versions.
        let docker = match ping(&endpoint, PING_TIMEOUT) {
            Ping::Version(server) => {
                let version = if server < *bollard::API_DEFAULT_VERSION {
                    server
                } else {
                    *bollard::API_DEFAULT_VERSION
                };
                Docker::connect_with_unix(&path, API_TIMEOUT_SECS, &version)
                    .map_err(|e| unavailable(&endpoint, e.to_string()))?
            }
            Ping::Silent => {
                return Err(unavailable(
                    &endpoint,
                    format!("no answer to /_ping within {} s", PING_TIMEOUT.as_secs()),
                ));
            }
            Ping::NoVersion => {
                let docker = Docker::connect_with_unix(
                    &path,
                    API_TIMEOUT_SECS,
                    bollard::API_DEFAULT_VERSION,
                )
                .map_err(|e| unavailable(&endpoint, e.to_string()))?;
                rt.block_on(async {
                    tokio::time::timeout(
                        std::time::Duration::from_secs(10),
                        docker.negotiate_version(),
                    )
                    .await
                })
                .map_err(|_| unavailable(&endpoint, "no answer within 10 s".into()))?
                .map_err(|e| unavailable(&endpoint, e.to_string()))?
            }
        };
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

    /// The Engine's version (`GET /version`), waiting at most `timeout`.
    pub fn version(&self, timeout: std::time::Duration) -> Result<String, DockerError> {
        match self.block_on(async { tokio::time::timeout(timeout, self.docker.version()).await }) {
            Ok(Ok(v)) => Ok(v.version.unwrap_or_else(|| "unknown".to_owned())),
            Ok(Err(e)) => Err(DockerError::Engine {
                operation: "version",
                message: e.to_string(),
            }),
            Err(_) => Err(DockerError::Timeout {
                operation: "version",
                seconds: timeout.as_secs(),
            }),
        }
    }

    /// Finds the pinned image: by config digest (classic store), then by
    /// manifest digest (containerd store); [`vs_pin::Pin::check`] decides
    /// whether it matches. Returns the ID to run it by; a missing image is
    /// [`DockerError::ImageMissing`], naming what the Engine holds under
    /// the pinned name.
    pub fn check_pinned(&self, pin: &ImagePin) -> Result<String, SandboxError> {
        self.block_on(check_pinned(&self.docker, pin))
    }

    /// The pinned image when the Engine holds it (its ID and which pinned
    /// digest that is), `None` when it holds neither pinned ID; an image
    /// under a pinned ID that does not match the pin is an error.
    pub fn find_pinned(&self, pin: &ImagePin) -> Result<Option<(Digest, IdKind)>, SandboxError> {
        self.block_on(find_pinned(&self.docker, pin))
    }
}

/// The Engine's answer about an image, as the pin check reads it.
pub(crate) fn found_image(img: &ImageInspect) -> Result<FoundImage, DockerError> {
    let bad = |reason: String| DockerError::EngineAnswer {
        operation: "inspect image",
        reason,
    };
    let id = img
        .id
        .as_deref()
        .ok_or_else(|| bad("no Id".to_owned()))?
        .parse::<Digest>()
        .map_err(|e| bad(format!("Id: {e}")))?;
    let diff_ids = img
        .root_fs
        .as_ref()
        .and_then(|r| r.layers.as_ref())
        .ok_or_else(|| bad("no RootFS.Layers".to_owned()))?
        .iter()
        .map(|l| {
            l.parse::<Digest>()
                .map_err(|e| bad(format!("RootFS.Layers: {e}")))
        })
        .collect::<Result<_, _>>()?;
    Ok(FoundImage {
        id: FoundId::Engine(id),
        diff_ids,
    })
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

/// See [`Engine::find_pinned`].
pub(crate) async fn find_pinned(
    docker: &Docker,
    pin: &ImagePin,
) -> Result<Option<(Digest, IdKind)>, SandboxError> {
    let candidates = std::iter::once(&pin.config_digest).chain(&pin.manifest_digest);
    for id in candidates {
        match docker.inspect_image(&id.to_string()).await {
            Ok(img) => {
                let found = found_image(&img)?;
                if found.id != FoundId::Engine(id.clone()) {
                    // An ID prefix or a name matched another image.
                    continue;
                }
                let kind = pin
                    .pin()
                    .check(&found)
                    .map_err(|e| DockerError::ImageMismatch {
                        source: Box::new(e),
                    })?;
                return Ok(Some((id.clone(), kind)));
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(engine_err("inspect image", e)),
        }
    }
    Ok(None)
}

/// See [`Engine::check_pinned`].
pub(crate) async fn check_pinned(docker: &Docker, pin: &ImagePin) -> Result<String, SandboxError> {
    if let Some((id, _)) = find_pinned(docker, pin).await? {
        return Ok(id.to_string());
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
        expected: pin.pin().expected_ids(),
        found,
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::{Ping, parse_ping_version, ping};
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    #[test]
    fn a_socket_that_answers_a_ping_gives_its_version_and_a_silent_one_is_silent() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("engine.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            // First connection: a real answer; second: read, never answer.
            let (mut c, _) = listener.accept().unwrap();
            let mut buf = [0u8; 256];
            let _ = c.read(&mut buf).unwrap();
            c.write_all(b"HTTP/1.1 200 OK\r\nApi-Version: 1.43\r\n\r\nOK")
                .unwrap();
            drop(c);
            let (mut c, _) = listener.accept().unwrap();
            let _ = c.read(&mut buf).unwrap();
            std::thread::sleep(Duration::from_millis(800));
        });
        match ping(&sock, Duration::from_secs(5)) {
            Ping::Version(v) => assert_eq!((v.major_version, v.minor_version), (1, 43)),
            other => panic!("{other:?}"),
        }
        let started = Instant::now();
        assert!(matches!(
            ping(&sock, Duration::from_millis(200)),
            Ping::Silent
        ));
        assert!(started.elapsed() < Duration::from_millis(700));
        server.join().unwrap();
        // Nothing listening: bollard is left to say what is wrong.
        assert!(matches!(
            ping(&dir.path().join("absent.sock"), Duration::from_millis(200)),
            Ping::NoVersion
        ));
    }

    fn version(answer: &str) -> Option<(usize, usize)> {
        parse_ping_version(answer.as_bytes()).map(|v| (v.major_version, v.minor_version))
    }

    #[test]
    fn the_api_version_is_read_from_a_ping_answer_and_nothing_else() {
        let ok = "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\nContent-Length: 2\r\n\r\nOK";
        assert_eq!(version(ok), Some((1, 41)));
        let lower = "HTTP/1.1 200 OK\r\nserver: Docker\r\napi-version:1.47 \r\n\r\n";
        assert_eq!(version(lower), Some((1, 47)));
        // Not a 200, no header, a malformed value, no end of headers.
        for bad in [
            "HTTP/1.1 500 Internal Server Error\r\nApi-Version: 1.41\r\n\r\n",
            "HTTP/1.1 200 OK\r\nServer: Docker\r\n\r\n",
            "HTTP/1.1 200 OK\r\nApi-Version: 1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nApi-Version: one.two\r\n\r\n",
            "HTTP/1.1 200 OK\r\nApi-Version: 1.41\r\n",
            "",
        ] {
            assert_eq!(version(bad), None, "{bad:?}");
        }
    }
}
