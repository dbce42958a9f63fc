//! The pin of one image (its entry in `images/images.lock`) and the one
//! check a loader runs on an image it found (in a container engine, or
//! read from an archive).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::Error;

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
    /// The digests of the image's own documents, as vs-image's `inspect`
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

#[cfg(test)]
mod tests {
    use super::*;

    fn d(c: char) -> Digest {
        format!("sha256:{}", c.to_string().repeat(64))
            .parse()
            .unwrap()
    }

    fn editor() -> LockedImage {
        LockedImage {
            tag: "latest".into(),
            manifest_digest: Some(d('a')),
            config_digest: d('b'),
            diff_ids: vec![d('c'), d('d')],
            archives: BTreeMap::new(),
            inputs: BTreeMap::new(),
            pushed: Vec::new(),
        }
    }

    fn engine(id: char, layers: &[char]) -> FoundImage {
        FoundImage {
            id: FoundId::Engine(d(id)),
            diff_ids: layers.iter().map(|c| d(*c)).collect(),
        }
    }

    #[test]
    fn either_id_is_accepted_layers_must_match() {
        let l = editor();
        let pin = l.pin("editor");
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
    }

    #[test]
    fn documents_must_carry_the_pinned_config_and_manifest_digests() {
        let l = editor();
        let pin = l.pin("editor");
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
}
