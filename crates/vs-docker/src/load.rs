//! Loading an image archive into the Docker Engine (no registry, no
//! `docker` CLI) and checking what the Engine then holds against the
//! image's pin.
//!
//! Order: the caller has read the archive's own metadata (config and
//! manifest digests, diff_ids) and compared it with `images/images.lock`,
//! refusing a mismatch before anything is uploaded (`vibesys image load`:
//! vs-image's `inspect` and `Lock::check_report`; the image reader is not a
//! dependency of this crate). If the Engine already holds the pinned image
//! (checked by ID and layers) it is a no-op; otherwise the archive is
//! streamed in 1 MiB chunks (memory stays flat whatever its size) and the
//! image the Engine reports is checked again, whatever the caller checked:
//! its ID must be the pinned config digest (classic store) or manifest
//! digest (containerd store) and its `RootFS.Layers` the pinned diff_ids
//! ([`vs_pin::Pin::check`]). A refused image is removed only when the
//! Engine did not hold it before the upload, and a tag the upload moved
//! off another image is put back: a failed load changes nothing the
//! operator had.

use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};

use bollard::query_parameters::{
    ImportImageOptionsBuilder, ListImagesOptionsBuilder, RemoveImageOptionsBuilder,
    TagImageOptionsBuilder,
};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::Serialize;
use vs_pin::{Digest, IdKind};

use vs_sandbox::error::SandboxError;

use crate::DockerError;
use crate::engine::{Engine, engine_err, found_image};
use crate::plan::ImagePin;

/// What [`load`] did (`vibesys image load --json` prints it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadReport {
    /// The image name in the lock.
    pub image: String,
    /// The ID the Engine runs it by.
    pub id: Digest,
    /// Which pinned digest the ID is.
    pub id_kind: IdKind,
    /// False when the image was already present (nothing uploaded).
    pub loaded: bool,
    /// Bytes streamed to the Engine.
    pub bytes: u64,
}

impl std::fmt::Display for LoadReport {
    /// One line: loaded (or already there) as which ID, and the bytes sent.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.id_kind {
            IdKind::Config => "config",
            IdKind::Manifest => "manifest",
        };
        if self.loaded {
            writeln!(
                f,
                "loaded {} as {} ({kind} digest), {} bytes streamed",
                self.image, self.id, self.bytes
            )
        } else {
            writeln!(
                f,
                "already loaded: {} as {} ({kind} digest)",
                self.image, self.id
            )
        }
    }
}

/// Loads the archive at `path`, an image the caller checked against
/// `pin` (see the module docs), and tags it `pin.name:tag`.
pub fn load(path: &Path, pin: &ImagePin, tag: &str) -> Result<LoadReport, SandboxError> {
    if !path.is_file() {
        return Err(DockerError::NotAnArchive {
            path: path.to_owned(),
        }
        .into());
    }
    let name = pin.name.clone();
    let engine = Engine::connect()?;
    // The pinned image present in the Engine (tagged), as a report.
    let settle = |loaded: bool, bytes: u64| -> Result<Option<LoadReport>, SandboxError> {
        let Some((id, id_kind)) = engine.find_pinned(pin)? else {
            return Ok(None);
        };
        ensure_tag(&engine, &id, &name, tag);
        Ok(Some(LoadReport {
            image: name.clone(),
            id,
            id_kind,
            loaded,
            bytes,
        }))
    };
    if let Some(done) = settle(false, 0)? {
        return Ok(done);
    }
    // What the Engine held before: a refused load removes only what it
    // added, and puts back the tags it moved.
    let before = engine.block_on(image_index(&engine))?;
    let (bytes, loaded_refs) = engine.block_on(stream_archive(&engine, path))?;
    // What did the Engine load? Prefer the pinned IDs; fall back to the
    // references it reported, so a mismatch names what was found.
    if let Some(done) = settle(true, bytes)? {
        return Ok(done);
    }
    for r in &loaded_refs {
        let Ok(img) = engine.block_on(engine.docker().inspect_image(r)) else {
            continue;
        };
        let found = found_image(&img)?;
        // Refuse (and name both digests); leave nothing unpinned behind,
        // and nothing the Engine held before changed.
        let refused = pin.pin().check(&found).err();
        if let Some(id) = img.id.as_ref().filter(|id| !before.ids.contains(*id)) {
            let opts = RemoveImageOptionsBuilder::new().force(true).build();
            let _ = engine.block_on(engine.docker().remove_image(id, Some(opts), None));
        }
        if let Some(old) = before.tags.get(r.as_str())
            && img.id.as_ref() != Some(old)
            && let Some((repo, tag)) = split_reference(r)
        {
            let opts = TagImageOptionsBuilder::new().repo(repo).tag(tag).build();
            let _ = engine.block_on(engine.docker().tag_image(old, Some(opts)));
        }
        if let Some(e) = refused {
            return Err(DockerError::ImageMismatch {
                source: Box::new(e),
            }
            .into());
        }
    }
    Err(DockerError::NotLoaded {
        image: name,
        path: path.to_owned(),
        reported: loaded_refs.join(", "),
    }
    .into())
}

/// The Engine's images: every ID, and each `repository:tag` with its ID.
struct ImageIndex {
    ids: HashSet<String>,
    tags: HashMap<String, String>,
}

async fn image_index(engine: &Engine) -> Result<ImageIndex, SandboxError> {
    let opts = ListImagesOptionsBuilder::new().all(true).build();
    let images = engine
        .docker()
        .list_images(Some(opts))
        .await
        .map_err(|e| engine_err("list images", e))?;
    let mut index = ImageIndex {
        ids: HashSet::new(),
        tags: HashMap::new(),
    };
    for img in images {
        for t in &img.repo_tags {
            if !t.contains("<none>") {
                index.tags.insert(t.clone(), img.id.clone());
            }
        }
        index.ids.insert(img.id);
    }
    Ok(index)
}

/// `repository:tag` split at the tag's colon (a registry's port is part of
/// the repository); `None` for an ID or a reference without a tag.
fn split_reference(r: &str) -> Option<(&str, &str)> {
    let (repo, tag) = r.rsplit_once(':')?;
    (!repo.is_empty() && !tag.is_empty() && !tag.contains('/') && !r.starts_with("sha256:"))
        .then_some((repo, tag))
}

/// Tags the image `id` as `name:tag` (best effort: the image is used by
/// ID, the tag only helps a person find it).
fn ensure_tag(engine: &Engine, id: &Digest, name: &str, tag: &str) {
    let opts = TagImageOptionsBuilder::new().repo(name).tag(tag).build();
    let _ = engine.block_on(engine.docker().tag_image(&id.to_string(), Some(opts)));
}

/// Streams the file to `/images/load`; returns the bytes sent and the
/// references the Engine said it loaded.
async fn stream_archive(engine: &Engine, path: &Path) -> Result<(u64, Vec<String>), SandboxError> {
    let file = std::fs::File::open(path).map_err(|source| DockerError::Read {
        path: path.to_owned(),
        source,
    })?;
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
    let opts = ImportImageOptionsBuilder::new().quiet(true).build();
    let mut stream = engine.docker().import_image_stream(opts, body, None);
    let mut refs = Vec::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| DockerError::LoadRefused {
            path: path.to_owned(),
            message: e.to_string(),
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

#[cfg(test)]
mod tests {
    use super::split_reference;

    #[test]
    fn references_split_at_the_tag() {
        assert_eq!(
            split_reference("vibesys-editor:latest"),
            Some(("vibesys-editor", "latest"))
        );
        assert_eq!(
            split_reference("localhost:5000/a/b:v1"),
            Some(("localhost:5000/a/b", "v1"))
        );
        assert_eq!(split_reference("localhost:5000/a/b"), None);
        assert_eq!(split_reference("sha256:0123abcd"), None);
        assert_eq!(split_reference("name"), None);
        assert_eq!(split_reference(":x"), None);
    }
}
