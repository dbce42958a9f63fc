//! `vibesys image load PATH`: stream an image archive into the Docker
//! Engine (no registry, no `docker` CLI) and check what it holds against
//! `images/images.lock`.
//!
//! Order: read the archive's own metadata (config and manifest digests,
//! diff_ids) and compare it with the lock, refusing a mismatch before
//! anything is uploaded; if the Engine already holds the pinned image
//! (checked by ID and layers) it is a no-op; otherwise the archive is
//! streamed in 1 MiB chunks (memory stays flat whatever its size) and the
//! image the Engine reports is checked again: its ID must be the pinned
//! config digest (classic store) or manifest digest (containerd store) and
//! its `RootFS.Layers` the pinned diff_ids.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::Serialize;
use vs_image::{FoundImage, IdKind, Lock};
use vs_sandbox::docker::{DockerError, Engine};

/// What `image load` did (the `--json` output).
#[derive(Debug, Serialize)]
pub struct LoadReport {
    /// The image name in the lock.
    pub image: String,
    /// The ID the Engine runs it by.
    pub id: String,
    /// Which pinned digest the ID is.
    pub id_kind: IdKind,
    /// False when the image was already present (nothing uploaded).
    pub loaded: bool,
    /// Bytes streamed to the Engine.
    pub bytes: u64,
}

/// Loads `path` into the Engine; see the module docs.
pub fn load(path: &Path, lock_path: &Path) -> anyhow::Result<LoadReport> {
    let report = vs_image::inspect(path, false)
        .with_context(|| format!("cannot read image archive {}", path.display()))?;
    if !path.is_file() {
        bail!(
            "{} is not an archive file: `image load` takes an oci-archive, docker-archive or the default hybrid archive",
            path.display()
        );
    }
    let lock = Lock::load(lock_path)?;
    lock.check_report(&report, lock_path)?;
    let name = report.name.clone().context("the archive names no image")?;
    let tag = report.tag.clone().unwrap_or_else(|| "latest".to_owned());
    let engine = Engine::connect()?;
    // The pinned image present in the Engine (tagged), as a report.
    let settle = |loaded: bool, bytes: u64| -> anyhow::Result<Option<LoadReport>> {
        let Some((id, kind)) = present(&engine, &lock, &name, lock_path)? else {
            return Ok(None);
        };
        engine.block_on(ensure_tag(&engine, &id, &name, &tag));
        Ok(Some(LoadReport {
            image: name.clone(),
            id,
            id_kind: kind,
            loaded,
            bytes,
        }))
    };
    if let Some(done) = settle(false, 0)? {
        return Ok(done);
    }
    let (bytes, loaded_refs) = engine.block_on(stream_archive(&engine, path))?;
    // What did the Engine load? Prefer the pinned IDs; fall back to the
    // references it reported, so a mismatch names what was found.
    if let Some(done) = settle(true, bytes)? {
        return Ok(done);
    }
    for r in &loaded_refs {
        if let Ok(img) = engine.block_on(engine.docker().inspect_image(r)) {
            let found = found_image(&img)?;
            // Refuse (and name both digests); leave nothing unpinned behind.
            let err = lock.check_found(&name, &found, lock_path).err();
            let _ = engine.block_on(
                engine.docker().remove_image(
                    &found.id.to_string(),
                    Some(
                        bollard::query_parameters::RemoveImageOptionsBuilder::new()
                            .force(true)
                            .build(),
                    ),
                    None,
                ),
            );
            if let Some(e) = err {
                return Err(e.into());
            }
        }
    }
    bail!(
        "the Engine did not report image {name} after loading {} (it said: {})",
        path.display(),
        loaded_refs.join(", ")
    )
}

/// The pinned image when the Engine holds it under a pinned ID with the
/// pinned layers (the same check `DockerSandbox` makes before it starts a
/// container); `None` when it is absent, an error when it differs.
fn present(
    engine: &Engine,
    lock: &Lock,
    name: &str,
    lock_path: &Path,
) -> anyhow::Result<Option<(String, IdKind)>> {
    let pin = crate::docker_cmd::pin_from_lock(lock, name, lock_path)?;
    match engine.check_pinned(&pin) {
        Ok(id) => {
            let kind = if id == pin.config_digest {
                IdKind::Config
            } else {
                IdKind::Manifest
            };
            Ok(Some((id, kind)))
        }
        Err(vs_sandbox::SandboxError::Docker(DockerError::ImageMissing { .. })) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// What the Engine reports for an image, in the form the lock compares.
fn found_image(img: &bollard::models::ImageInspect) -> anyhow::Result<FoundImage> {
    Ok(FoundImage::from_docker_inspect(&serde_json::to_value(
        img,
    )?)?)
}

async fn ensure_tag(engine: &Engine, id: &str, name: &str, tag: &str) {
    let opts = bollard::query_parameters::TagImageOptionsBuilder::new()
        .repo(name)
        .tag(tag)
        .build();
    let _ = engine.docker().tag_image(id, Some(opts)).await;
}

/// Streams the file to `/images/load`; returns the bytes sent and the
/// references the Engine said it loaded.
async fn stream_archive(engine: &Engine, path: &Path) -> anyhow::Result<(u64, Vec<String>)> {
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let reader_path: PathBuf = path.to_path_buf();
    let reader = std::thread::spawn(move || -> u64 {
        let mut file = file;
        let mut total = 0u64;
        loop {
            let mut buf = vec![0u8; 1 << 20];
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    buf.truncate(n);
                    total += n as u64;
                    if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.blocking_send(Err(std::io::Error::new(
                        e.kind(),
                        format!("reading {}: {e}", reader_path.display()),
                    )));
                    break;
                }
            }
        }
        total
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let opts = bollard::query_parameters::ImportImageOptionsBuilder::new()
        .quiet(true)
        .build();
    let mut stream = engine.docker().import_image_stream(opts, body, None);
    let mut refs = Vec::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| {
            anyhow::anyhow!(
                "the Engine refused {}: {e} (Docker's classic image store loads docker-archives and the default hybrid archive, not plain oci-archives)",
                path.display()
            )
        })?;
        if let Some(s) = info.stream {
            for line in s.lines() {
                if let Some(r) = line
                    .strip_prefix("Loaded image: ")
                    .or_else(|| line.strip_prefix("Loaded image ID: "))
                {
                    refs.push(r.trim().to_owned());
                }
            }
        }
    }
    let total = reader.join().unwrap_or(0);
    Ok((total, refs))
}

/// Arguments of `vibesys image load`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// An image archive built by `vibesys image build` (the default hybrid
    /// archive or a docker-archive).
    path: PathBuf,
    /// The lock file.
    #[arg(long, default_value = "images/images.lock")]
    lock: PathBuf,
    /// Print what was done as JSON: {"image", "id", "id_kind", "loaded", "bytes"}.
    #[arg(long)]
    json: bool,
}

/// Runs `vibesys image load`.
pub fn run(args: LoadArgs) -> anyhow::Result<u8> {
    let report = load(&args.path, &args.lock)?;
    if args.json {
        crate::output::print_json(&serde_json::to_value(&report)?)?;
    } else {
        crate::output::print_text(&format!(
            "{} {} as {} ({} digest){}\n",
            if report.loaded {
                "loaded"
            } else {
                "already loaded:"
            },
            report.image,
            report.id,
            match report.id_kind {
                IdKind::Config => "config",
                IdKind::Manifest => "manifest",
            },
            if report.loaded {
                format!(", {} bytes streamed", report.bytes)
            } else {
                String::new()
            }
        ))?;
    }
    Ok(0)
}
