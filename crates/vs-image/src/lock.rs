//! `images/images.lock`: the pinned digests of each image, and the check a
//! loader runs on an image it found (in Docker or elsewhere).
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

/// One pinned image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedImage {
    /// Tag.
    pub tag: String,
    /// Image manifest digest (the image ID with Docker's containerd store).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_digest: Option<Digest>,
    /// Image config digest (the image ID with Docker's classic store).
    pub config_digest: Digest,
    /// Uncompressed layer digests, bottom first.
    pub diff_ids: Vec<Digest>,
    /// Archive files of this image by format (`archive`, `oci-archive`, ...).
    #[serde(default)]
    pub archives: BTreeMap<String, LockedArchive>,
    /// The packages the image's SBOM listed when it was pinned, by key
    /// (`deb:git`, `pypi:claude-agent-sdk`) and version: when a digest
    /// moves, `verify` names the packages that changed.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, String>,
    /// The registry references (`HOST/REPO@sha256:...`) `vibesys image
    /// push --lock` pushed this image to, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pushed: Vec<String>,
}

/// One pinned archive file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedArchive {
    /// Path relative to the lock file's directory.
    pub path: String,
    /// sha256 of the file.
    pub digest: Digest,
}

/// The digests one image is pinned to, borrowed from a [`LockedImage`] (or
/// a loader's own copy of them): what a found image must match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin<'a> {
    /// The image name in the lock.
    pub image: &'a str,
    /// The config digest (the image ID with Docker's classic store).
    pub config_digest: &'a Digest,
    /// The manifest digest (the image ID with the containerd store).
    pub manifest_digest: Option<&'a Digest>,
    /// The layer diff_ids, bottom first.
    pub diff_ids: &'a [Digest],
}

/// How a found image identifies itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoundId {
    /// An image ID as a container engine reports it (Docker's `Id`): the
    /// config digest (classic store) or the manifest digest (containerd
    /// store).
    Engine(Digest),
    /// The digests of the image's own documents, as [`crate::inspect`]
    /// reads them from an archive or a layout.
    Documents {
        /// The config digest.
        config: Digest,
        /// The manifest digest, when the format has a manifest blob.
        manifest: Option<Digest>,
    },
}

/// An image as a loader or a reader found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundImage {
    /// Its identity.
    pub id: FoundId,
    /// Its layer diff_ids, bottom first (Docker's `RootFS.Layers`).
    pub diff_ids: Vec<Digest>,
}

impl FoundImage {
    /// The image an inspect report describes.
    pub fn of_report(report: &InspectReport) -> Self {
        Self {
            id: FoundId::Documents {
                config: report.config_digest.clone(),
                manifest: report.manifest_digest.clone(),
            },
            diff_ids: report.layers.iter().map(|l| l.diff_id.clone()).collect(),
        }
    }
}

/// Which pinned digest an image ID matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum IdKind {
    /// The config digest.
    Config,
    /// The manifest digest.
    Manifest,
}

impl Pin<'_> {
    /// The pinned IDs as an error names them: `C (config) or M (manifest)`.
    pub fn expected_ids(&self) -> String {
        match self.manifest_digest {
            Some(m) => format!("{} (config) or {m} (manifest)", self.config_digest),
            None => format!("{} (config)", self.config_digest),
        }
    }

    /// The one pin check. An engine's image ID may be the pinned config
    /// digest (classic store) or the pinned manifest digest (containerd
    /// store); an image's own documents must have the pinned config digest
    /// and, when both are known, the pinned manifest digest; the layers must
    /// equal the pinned diff_ids. A mismatch is [`Error::PinMismatch`]
    /// naming both values. Returns which pinned digest identified it.
    pub fn check(&self, found: &FoundImage) -> Result<IdKind, Error> {
        let mismatch = |field: &str, pinned: String, found: String| Error::PinMismatch {
            image: self.image.to_owned(),
            field: field.to_owned(),
            pinned,
            found,
        };
        let kind = match &found.id {
            FoundId::Engine(id) if id == self.config_digest => IdKind::Config,
            FoundId::Engine(id) if self.manifest_digest == Some(id) => IdKind::Manifest,
            FoundId::Engine(id) => {
                return Err(mismatch("image id", self.expected_ids(), id.to_string()));
            }
            FoundId::Documents { config, manifest } => {
                if config != self.config_digest {
                    return Err(mismatch(
                        "config digest",
                        self.config_digest.to_string(),
                        config.to_string(),
                    ));
                }
                if let (Some(p), Some(f)) = (self.manifest_digest, manifest)
                    && p != f
                {
                    return Err(mismatch("manifest digest", p.to_string(), f.to_string()));
                }
                IdKind::Config
            }
        };
        if self.diff_ids == found.diff_ids.as_slice() {
            return Ok(kind);
        }
        let (pinned, found) = (self.diff_ids, &found.diff_ids);
        Err(match pinned.iter().zip(found).position(|(a, b)| a != b) {
            Some(i) => mismatch(
                &format!("layer {}", i + 1),
                pinned[i].to_string(),
                found[i].to_string(),
            ),
            None => mismatch(
                "layer count",
                pinned.len().to_string(),
                found.len().to_string(),
            ),
        })
    }
}

impl LockedImage {
    /// Records that the image was pushed to `reference` (once; sorted).
    pub fn record_push(&mut self, reference: &str) {
        if !self.pushed.iter().any(|r| r == reference) {
            self.pushed.push(reference.to_owned());
            self.pushed.sort();
        }
    }

    /// The pin of this entry, which the lock holds under `image`.
    pub fn pin<'a>(&'a self, image: &'a str) -> Pin<'a> {
        Pin {
            image,
            config_digest: &self.config_digest,
            manifest_digest: self.manifest_digest.as_ref(),
            diff_ids: &self.diff_ids,
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

    /// Compares an inspected image with its pin ([`Pin::check`]), and its
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
            .check(&FoundImage::of_report(report))
            .map_err(explain)?;
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
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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

    fn engine(id: char, layers: &[char]) -> FoundImage {
        FoundImage {
            id: FoundId::Engine(d(id)),
            diff_ids: layers.iter().map(|c| d(*c)).collect(),
        }
    }

    #[test]
    fn either_id_is_accepted_layers_must_match() {
        let l = lock();
        let pin = l
            .image("editor", Path::new("images.lock"))
            .unwrap()
            .pin("editor");
        assert_eq!(
            pin.check(&engine('b', &['c', 'd'])).unwrap(),
            IdKind::Config
        );
        assert_eq!(
            pin.check(&engine('a', &['c', 'd'])).unwrap(),
            IdKind::Manifest
        );
        let e = pin.check(&engine('e', &[])).unwrap_err().to_string();
        assert!(
            e.contains(&d('e').to_string())
                && e.contains(&d('b').to_string())
                && e.contains(&d('a').to_string()),
            "{e}"
        );
        let e = pin
            .check(&engine('b', &['c', 'e']))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("layer 2")
                && e.contains(&d('d').to_string())
                && e.contains(&d('e').to_string()),
            "{e}"
        );
        let e = pin.check(&engine('b', &['c'])).unwrap_err().to_string();
        assert!(e.contains("layer count"), "{e}");
        assert!(l.image("agent", Path::new("images.lock")).is_err());
    }

    #[test]
    fn documents_must_carry_the_pinned_config_and_manifest_digests() {
        let l = lock();
        let pin = l.images["editor"].pin("editor");
        let docs = |config: char, manifest: Option<char>| FoundImage {
            id: FoundId::Documents {
                config: d(config),
                manifest: manifest.map(d),
            },
            diff_ids: vec![d('c'), d('d')],
        };
        assert_eq!(pin.check(&docs('b', Some('a'))).unwrap(), IdKind::Config);
        assert_eq!(pin.check(&docs('b', None)).unwrap(), IdKind::Config);
        // The manifest digest is no stand-in for the config digest here.
        let e = pin.check(&docs('a', Some('a'))).unwrap_err().to_string();
        assert!(e.contains("config digest"), "{e}");
        let e = pin.check(&docs('b', Some('e'))).unwrap_err().to_string();
        assert!(
            e.contains("manifest digest")
                && e.contains(&d('a').to_string())
                && e.contains(&d('e').to_string()),
            "{e}"
        );
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
