//! `images/images.lock`: the pinned digests of each image (each entry a
//! [`vs_pin::LockedImage`], whose [`vs_pin::Pin::check`] is the check a
//! loader runs on an image it found, in Docker or elsewhere).
//!
//! Plain TOML, readable by Nix:
//!
//! ```toml
//! version = 1
//! [images.editor]
//! tag = "latest"
//! manifest_digest = "sha256:..."
//! config_digest = "sha256:..."
//! diff_ids = ["sha256:...", ...]
//! [images.editor.archives.archive]
//! path = "../out/editor.tar"   # relative to the lock file
//! digest = "sha256:..."
//! ```

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use vs_pin::{FoundId, FoundImage, LockedArchive, LockedImage};

use crate::digest::Digest;
use crate::error::Error;
use crate::read::InspectReport;

/// The lock file format version written by this crate.
pub const LOCK_VERSION: u32 = 1;

/// The whole lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// Format version (1).
    pub version: u32,
    /// Images by name.
    #[serde(default)]
    pub images: BTreeMap<String, LockedImage>,
}

impl Default for Lock {
    fn default() -> Self {
        Self {
            version: LOCK_VERSION,
            images: BTreeMap::new(),
        }
    }
}

impl InspectReport {
    /// The image this report describes, as [`vs_pin::Pin::check`] takes it.
    pub fn found_image(&self) -> FoundImage {
        FoundImage {
            id: FoundId::Documents {
                config: self.config_digest.clone(),
                manifest: self.manifest_digest.clone(),
            },
            diff_ids: self.layers.iter().map(|l| l.diff_id.clone()).collect(),
        }
    }
}

const MAX_LOCK: u64 = 16 << 20;

impl Lock {
    /// Reads a lock file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = crate::textfile::read_text(path, MAX_LOCK, |reason| Error::Lock {
            path: path.to_owned(),
            reason,
        })?;
        let lock: Lock = toml::from_str(&text).map_err(|e| Error::Lock {
            path: path.to_owned(),
            reason: e.message().to_owned(),
        })?;
        if lock.version != LOCK_VERSION {
            return Err(Error::Lock {
                path: path.to_owned(),
                reason: format!("unsupported version {}", lock.version),
            });
        }
        Ok(lock)
    }

    /// Reads a lock file, or an empty lock when it does not exist.
    pub fn load_or_default(path: &Path) -> Result<Self, Error> {
        if path.exists() {
            Self::load(path)
        } else {
            Ok(Self::default())
        }
    }

    /// Writes the lock atomically (temporary file + rename).
    pub fn save(&self, path: &Path) -> Result<(), Error> {
        let text = toml::to_string_pretty(self).map_err(|e| Error::Lock {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
        let dir = crate::files::parent_of(path);
        let mut tmp = tempfile::NamedTempFile::new_in(&dir)
            .map_err(|e| Error::io("create temporary file in", &dir, e))?;
        tmp.write_all(b"# Written by `vibesys image pin`; checked by `vibesys image verify`.\n")
            .and_then(|()| tmp.write_all(text.as_bytes()))
            .map_err(|e| Error::io("write", path, e))?;
        crate::perm::publish_file(tmp.as_file()).map_err(|e| Error::io("chmod", path, e))?;
        tmp.persist(path)
            .map_err(|e| Error::io("rename into place", path, e.error))?;
        Ok(())
    }

    /// The pinned entry of `image`.
    pub fn image(&self, image: &str, lock_path: &Path) -> Result<&LockedImage, Error> {
        self.images.get(image).ok_or_else(|| Error::NotPinned {
            image: image.to_owned(),
            lock: lock_path.to_owned(),
        })
    }

    /// Records an inspected (and verified) image. `archive` is the file's
    /// path relative to the lock file, for archive formats.
    pub fn pin(&mut self, report: &InspectReport, archive: Option<String>) -> Result<(), Error> {
        let name = report.name.clone().ok_or_else(|| {
            Error::malformed(&report.path, "the image has no name to pin it under")
        })?;
        let tag = report.tag.clone().unwrap_or_else(|| "latest".to_owned());
        let diff_ids: Vec<Digest> = report.layers.iter().map(|l| l.diff_id.clone()).collect();
        let same = self.images.get(&name).is_some_and(|old| {
            old.config_digest == report.config_digest
                && old.diff_ids == diff_ids
                && old.tag == tag
                && match (&old.manifest_digest, &report.manifest_digest) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                }
        });
        if !same {
            self.images.insert(
                name.clone(),
                LockedImage {
                    tag,
                    manifest_digest: None,
                    config_digest: report.config_digest.clone(),
                    diff_ids,
                    archives: BTreeMap::new(),
                    inputs: BTreeMap::new(),
                    // A new pin: the old pushes are of another image.
                    pushed: Vec::new(),
                },
            );
        }
        let Some(entry) = self.images.get_mut(&name) else {
            return Err(Error::NotPinned {
                image: name,
                lock: PathBuf::new(),
            });
        };
        if report.manifest_digest.is_some() {
            entry.manifest_digest = report.manifest_digest.clone();
        }
        if let Some(sbom) = &report.sbom {
            entry.inputs = sbom.inputs.clone();
        }
        if let (Some(path), Some(digest)) = (archive, report.archive_digest.clone()) {
            entry
                .archives
                .insert(report.format.clone(), LockedArchive { path, digest });
        }
        Ok(())
    }

    /// Compares an inspected image with its pin ([`vs_pin::Pin::check`]), and its
    /// file with the pinned archive digest; errors name both digests and,
    /// when the lock recorded the image's packages, which of them changed.
    pub fn check_report(&self, report: &InspectReport, lock_path: &Path) -> Result<(), Error> {
        let name = report
            .name
            .as_deref()
            .ok_or_else(|| Error::malformed(&report.path, "the image has no name"))?;
        let pinned = self.image(name, lock_path)?;
        let found_inputs = report.sbom.as_ref().map(|s| &s.inputs);
        let explain = |e: Error| match (e, found_inputs) {
            // Pinned with its inputs: say which changed (or that none did).
            (
                Error::PinMismatch {
                    image,
                    field,
                    pinned: p,
                    found,
                },
                Some(f),
            ) if !pinned.inputs.is_empty() => Error::InputsChanged {
                image,
                field,
                pinned: p,
                found,
                changes: match crate::packages::describe_changes(&pinned.inputs, f, 30) {
                    c if c.is_empty() => format!(
                        "no package of the {} the lock records changed: the builder or files outside the package databases differ",
                        pinned.inputs.len()
                    ),
                    c => format!("the inputs changed: {}", c.join(", ")),
                },
            },
            (e, _) => e,
        };
        pinned
            .pin(name)
            .check(&report.found_image())
            .map_err(|e| explain(e.into()))?;
        if let (Some(a), Some(found)) =
            (pinned.archives.get(&report.format), &report.archive_digest)
            && &a.digest != found
        {
            return Err(explain(Error::PinMismatch {
                image: name.to_owned(),
                field: format!("{} file digest", report.format),
                pinned: a.digest.to_string(),
                found: found.to_string(),
            }));
        }
        Ok(())
    }
}

/// `target` relative to directory `base` (both made absolute first).
pub fn relative_to(target: &Path, base: &Path) -> Result<String, Error> {
    let abs = |p: &Path| std::path::absolute(p).map_err(|e| Error::io("resolve", p, e));
    let t = abs(target)?;
    let b = abs(base)?;
    let tc: Vec<Component<'_>> = t.components().collect();
    let bc: Vec<Component<'_>> = b.components().collect();
    let common = tc.iter().zip(&bc).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..bc.len() {
        out.push("..");
    }
    for c in &tc[common..] {
        out.push(c.as_os_str());
    }
    out.to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::InputPath {
            path: target.to_owned(),
            reason: "not valid UTF-8".to_owned(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(c: char) -> Digest {
        format!("sha256:{}", c.to_string().repeat(64))
            .parse()
            .unwrap()
    }

    fn lock() -> Lock {
        let mut l = Lock::default();
        l.images.insert(
            "editor".into(),
            LockedImage {
                tag: "latest".into(),
                manifest_digest: Some(d('a')),
                config_digest: d('b'),
                diff_ids: vec![d('c'), d('d')],
                archives: BTreeMap::new(),
                inputs: BTreeMap::new(),
                pushed: Vec::new(),
            },
        );
        l
    }

    #[test]
    fn round_trips_through_toml() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("images.lock");
        lock().save(&p).unwrap();
        assert_eq!(Lock::load(&p).unwrap(), lock());
        assert_eq!(
            relative_to(Path::new("/a/b/c.tar"), Path::new("/a/d")).unwrap(),
            "../b/c.tar"
        );
    }
}
