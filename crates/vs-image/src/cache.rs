//! The optional cache of built layers, keyed by their inputs.
//!
//! Layout: `<dir>/vs-image-v1/layers/<key>.json` (what the layer is),
//! `<dir>/vs-image-v1/blobs/sha256/<hex>`,
//! `<dir>/vs-image-v1/files/<key>` (the content digests of a group's files,
//! see `known`), and `<dir>/vs-image-v1/outputs/<key>.json` (what the
//! builder last wrote at an archive output path, see `archive::edit`; a
//! layer written straight into an archive has no blob here, its bytes are
//! read from the archives recorded there). Everything is best effort: an
//! unwritable or damaged cache is skipped, never an error, so builds work
//! in the Nix sandbox with no writable home.

use std::path::{Path, PathBuf};

use crate::digest::Digest;
use crate::known::{KnownDigests, SeenDigests};
use crate::layer::LayerMeta;

/// The largest layer or output record read.
const MAX_META: u64 = 1 << 20;
/// The largest file-digest record read (a group of ~1M files).
const MAX_KNOWN: u64 = 64 << 20;

/// The bytes of the record at `path`: a regular file, not through a
/// symlink, of at most `max` bytes, checked and read on one descriptor
/// (a size checked by path and then read by path again could be a file
/// swapped or grown in between). `None` for anything else.
fn read_record(path: &Path, max: u64) -> Option<Vec<u8>> {
    crate::textfile::read_bounded(path, max, rustix::fs::OFlags::NOFOLLOW).ok()
}

pub(crate) struct Cache {
    layers: PathBuf,
    blobs: PathBuf,
    files: PathBuf,
    outputs: PathBuf,
}

impl Cache {
    /// Opens (creating) the cache below `dir`; `None` when not writable.
    pub(crate) fn open(dir: &Path) -> Option<Self> {
        let base = dir.join("vs-image-v1");
        let layers = base.join("layers");
        let blobs = base.join("blobs").join("sha256");
        let files = base.join("files");
        let outputs = base.join("outputs");
        for d in [&layers, &blobs, &files, &outputs] {
            if let Err(e) = std::fs::create_dir_all(d) {
                tracing::debug!("layer cache {} not usable: {e}", d.display());
                return None;
            }
        }
        // A read-only directory can exist; probe for writability.
        match tempfile::tempfile_in(&layers) {
            Ok(_) => Some(Self {
                layers,
                blobs,
                files,
                outputs,
            }),
            Err(e) => {
                tracing::debug!("layer cache {} not writable: {e}", layers.display());
                None
            }
        }
    }

    /// A cached layer for `key`: what it is, and its blob file when that
    /// is present with the right size (a layer written straight into an
    /// archive has none: its bytes are in that archive, see
    /// `archive::OldArchive`).
    pub(crate) fn lookup(&self, key: &Digest) -> Option<(LayerMeta, Option<PathBuf>)> {
        let bytes = read_record(&self.layers.join(format!("{}.json", key.hex())), MAX_META)?;
        let meta: LayerMeta = serde_json::from_slice(&bytes).ok()?;
        let blob = self.blobs.join(meta.digest.hex());
        let present =
            std::fs::metadata(&blob).is_ok_and(|bm| bm.is_file() && bm.len() == meta.size);
        Some((meta, present.then_some(blob)))
    }

    /// Records a built layer and, when given, its blob file; failures are
    /// logged and ignored.
    pub(crate) fn store(&self, key: &Digest, meta: &LayerMeta, blob: Option<&Path>) {
        if let Err(e) = self.try_store(key, meta, blob) {
            tracing::debug!("not caching layer {}: {e}", meta.digest);
        }
    }

    fn try_store(
        &self,
        key: &Digest,
        meta: &LayerMeta,
        blob: Option<&Path>,
    ) -> std::io::Result<()> {
        let dest = self.blobs.join(meta.digest.hex());
        if let Some(blob) = blob
            && !dest.exists()
        {
            link_or_copy(blob, &dest)?;
        }
        let bytes = serde_json::to_vec(meta).map_err(std::io::Error::other)?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.layers)?;
        std::io::Write::write_all(&mut tmp, &bytes)?;
        tmp.persist(self.layers.join(format!("{}.json", key.hex())))
            .map_err(|e| e.error)?;
        Ok(())
    }
}

impl Cache {
    /// The content digests of a group's files stored under `key`, if any.
    pub(crate) fn known(&self, key: &Digest) -> Option<KnownDigests> {
        KnownDigests::decode(&read_record(&self.files.join(key.hex()), MAX_KNOWN)?)
    }

    /// Stores the content digests of a group's files under `key`
    /// (atomically); failures are logged and ignored.
    pub(crate) fn store_known(&self, key: &Digest, seen: &SeenDigests) {
        let store = || -> std::io::Result<()> {
            let mut tmp = tempfile::NamedTempFile::new_in(&self.files)?;
            std::io::Write::write_all(&mut tmp, seen.encoded())?;
            tmp.persist(self.files.join(key.hex()))
                .map_err(|e| e.error)?;
            Ok(())
        };
        if let Err(e) = store() {
            tracing::debug!("not caching file digests {key}: {e}");
        }
    }

    /// The record of an output stored under `key`, if any.
    pub(crate) fn output(&self, key: &Digest) -> Option<Vec<u8>> {
        read_record(&self.outputs.join(format!("{}.json", key.hex())), MAX_META)
    }

    /// The records of outputs, the most recently written first, at most
    /// `max` of them.
    pub(crate) fn output_records(&self, max: usize) -> Vec<Vec<u8>> {
        let Ok(dir) = std::fs::read_dir(&self.outputs) else {
            return Vec::new();
        };
        let mut found: Vec<(std::time::SystemTime, PathBuf)> = dir
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                let modified = m.modified().ok()?;
                (m.is_file() && m.len() <= MAX_META).then(|| (modified, e.path()))
            })
            .collect();
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        found
            .into_iter()
            .take(max)
            .filter_map(|(_, p)| read_record(&p, MAX_META))
            .collect()
    }

    /// Stores the record of an output under `key` (atomically); failures
    /// are logged and ignored.
    pub(crate) fn store_output(&self, key: &Digest, bytes: &[u8]) {
        let store = || -> std::io::Result<()> {
            let mut tmp = tempfile::NamedTempFile::new_in(&self.outputs)?;
            std::io::Write::write_all(&mut tmp, bytes)?;
            tmp.persist(self.outputs.join(format!("{}.json", key.hex())))
                .map_err(|e| e.error)?;
            Ok(())
        };
        if let Err(e) = store() {
            tracing::debug!("not recording output {key}: {e}");
        }
    }
}

/// Hard-links `src` to `dest`, or copies through a temporary file when a
/// link is not possible (another file system). Either way `dest` ends up
/// with the published file mode (a link shares the inode, so the cached
/// copy gets it too).
pub(crate) fn link_or_copy(src: &Path, dest: &Path) -> std::io::Result<()> {
    if std::fs::hard_link(src, dest).is_ok() {
        return crate::perm::publish_file(&std::fs::File::open(dest)?);
    }
    let dir = dest.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    let mut f = std::fs::File::open(src)?;
    std::io::copy(&mut f, tmp.as_file_mut())?;
    crate::perm::publish_file(tmp.as_file())?;
    tmp.persist(dest).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record is a regular file within its bound, never what a symlink
    /// names, and a FIFO neither blocks the read nor is read.
    #[test]
    fn records_are_bounded_regular_files_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let ok = t.path().join("ok.json");
        std::fs::write(&ok, b"{}").unwrap();
        assert_eq!(read_record(&ok, 2), Some(b"{}".to_vec()));
        assert_eq!(read_record(&ok, 1), None);
        let link = t.path().join("link.json");
        std::os::unix::fs::symlink(&ok, &link).unwrap();
        assert_eq!(read_record(&link, MAX_META), None);
        let fifo = t.path().join("fifo.json");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(read_record(&fifo, MAX_META), None);
        assert_eq!(read_record(&t.path().join("missing"), MAX_META), None);
    }
}
