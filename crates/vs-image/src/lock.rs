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

/// An image as a loader found it, e.g. from `docker image inspect`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundImage {
    /// The image ID: the config digest (classic store) or the manifest
    /// digest (containerd store).
    pub id: Digest,
    /// The image's layer diff_ids (Docker's `RootFS.Layers`).
    pub diff_ids: Vec<Digest>,
}

impl FoundImage {
    /// Reads `Id` and `RootFS.Layers` from one object of `docker image
    /// inspect` output (the Engine API's image inspect has the same keys).
    pub fn from_docker_inspect(v: &serde_json::Value) -> Result<Self, Error> {
        let bad = |reason: &str| Error::Malformed {
            path: "docker image inspect".into(),
            reason: reason.to_owned(),
        };
        let id: Digest = v
            .get("Id")
            .and_then(|i| i.as_str())
            .ok_or_else(|| bad("no Id"))?
            .parse()?;
        let layers = v
            .get("RootFS")
            .and_then(|r| r.get("Layers"))
            .and_then(|l| l.as_array())
            .ok_or_else(|| bad("no RootFS.Layers"))?;
        let diff_ids = layers
            .iter()
            .map(|l| {
                l.as_str()
                    .ok_or_else(|| bad("a layer is not a string"))?
                    .parse()
            })
            .collect::<Result<_, Error>>()?;
        Ok(Self { id, diff_ids })
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

    /// Compares an inspected image with its pin; errors name both digests.
    pub fn check_report(&self, report: &InspectReport, lock_path: &Path) -> Result<(), Error> {
        let name = report
            .name
            .as_deref()
            .ok_or_else(|| Error::malformed(&report.path, "the image has no name"))?;
        let pinned = self.image(name, lock_path)?;
        let found_inputs = report.sbom.as_ref().map(|s| &s.inputs);
        let mismatch = |field: &str, p: String, found: String| match found_inputs {
            // Pinned with its inputs: say which changed (or that none did).
            Some(f) if !pinned.inputs.is_empty() => Error::InputsChanged {
                image: name.to_owned(),
                field: field.to_owned(),
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
            _ => Error::PinMismatch {
                image: name.to_owned(),
                field: field.to_owned(),
                pinned: p,
                found,
            },
        };
        if pinned.config_digest != report.config_digest {
            return Err(mismatch(
                "config digest",
                pinned.config_digest.to_string(),
                report.config_digest.to_string(),
            ));
        }
        if let (Some(p), Some(f)) = (&pinned.manifest_digest, &report.manifest_digest)
            && p != f
        {
            return Err(mismatch("manifest digest", p.to_string(), f.to_string()));
        }
        let found: Vec<Digest> = report.layers.iter().map(|l| l.diff_id.clone()).collect();
        if let Err(Error::PinMismatch {
            field,
            pinned: p,
            found: f,
            ..
        }) = check_layers(name, &pinned.diff_ids, &found)
        {
            return Err(mismatch(&field, p, f));
        }
        if let (Some(a), Some(found)) =
            (pinned.archives.get(&report.format), &report.archive_digest)
            && &a.digest != found
        {
            return Err(mismatch(
                &format!("{} file digest", report.format),
                a.digest.to_string(),
                found.to_string(),
            ));
        }
        Ok(())
    }

    /// The loader's check: the found image's ID must be the pinned config
    /// or manifest digest and its layers the pinned diff_ids.
    pub fn check_found(
        &self,
        image: &str,
        found: &FoundImage,
        lock_path: &Path,
    ) -> Result<IdKind, Error> {
        let pinned = self.image(image, lock_path)?;
        let kind = if found.id == pinned.config_digest {
            IdKind::Config
        } else if pinned.manifest_digest.as_ref() == Some(&found.id) {
            IdKind::Manifest
        } else {
            let want = match &pinned.manifest_digest {
                Some(m) => format!("{} (config) or {m} (manifest)", pinned.config_digest),
                None => format!("{} (config)", pinned.config_digest),
            };
            return Err(Error::PinMismatch {
                image: image.to_owned(),
                field: "image id".to_owned(),
                pinned: want,
                found: found.id.to_string(),
            });
        };
        check_layers(image, &pinned.diff_ids, &found.diff_ids)?;
        Ok(kind)
    }
}

fn check_layers(image: &str, pinned: &[Digest], found: &[Digest]) -> Result<(), Error> {
    if pinned == found {
        return Ok(());
    }
    let (field, p, f) = match pinned.iter().zip(found).position(|(a, b)| a != b) {
        Some(i) => (
            format!("layer {}", i + 1),
            pinned[i].to_string(),
            found[i].to_string(),
        ),
        None => (
            "layer count".to_owned(),
            pinned.len().to_string(),
            found.len().to_string(),
        ),
    };
    Err(Error::PinMismatch {
        image: image.to_owned(),
        field,
        pinned: p,
        found: f,
    })
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
            },
        );
        l
    }

    #[test]
    fn either_id_is_accepted_layers_must_match() {
        let l = lock();
        let p = Path::new("images.lock");
        assert_eq!(
            l.check_found(
                "editor",
                &FoundImage {
                    id: d('b'),
                    diff_ids: vec![d('c'), d('d')]
                },
                p
            )
            .unwrap(),
            IdKind::Config
        );
        assert_eq!(
            l.check_found(
                "editor",
                &FoundImage {
                    id: d('a'),
                    diff_ids: vec![d('c'), d('d')]
                },
                p
            )
            .unwrap(),
            IdKind::Manifest
        );
        let e = l
            .check_found(
                "editor",
                &FoundImage {
                    id: d('e'),
                    diff_ids: vec![],
                },
                p,
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&d('e').to_string()) && e.contains(&d('b').to_string()),
            "{e}"
        );
        let e = l
            .check_found(
                "editor",
                &FoundImage {
                    id: d('b'),
                    diff_ids: vec![d('c'), d('e')],
                },
                p,
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("layer 2")
                && e.contains(&d('d').to_string())
                && e.contains(&d('e').to_string()),
            "{e}"
        );
        assert!(
            l.check_found(
                "agent",
                &FoundImage {
                    id: d('b'),
                    diff_ids: vec![]
                },
                p
            )
            .is_err()
        );
    }

    #[test]
    fn reads_docker_inspect_output() {
        let v = serde_json::json!({"Id": d('b').to_string(), "RootFS": {"Type": "layers", "Layers": [d('c').to_string(), d('d').to_string()]}});
        let f = FoundImage::from_docker_inspect(&v).unwrap();
        assert_eq!(
            lock().check_found("editor", &f, Path::new("l")).unwrap(),
            IdKind::Config
        );
        assert!(FoundImage::from_docker_inspect(&serde_json::json!({"Id": "nope"})).is_err());
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
