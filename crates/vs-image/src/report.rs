//! What a build produced: the report `image build --json` prints.

use std::path::PathBuf;

use serde::Serialize;

use crate::digest::Digest;
use crate::options::OutputFormat;

/// One layer of a finished build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuiltLayer {
    /// Blob digest.
    pub digest: Digest,
    /// Uncompressed digest (`rootfs.diff_ids`).
    pub diff_id: Digest,
    /// Blob size in bytes.
    pub size: u64,
    /// Whether the layer came from the cache.
    pub cached: bool,
    /// The groups (store paths, host trees, `extra files`) in the layer.
    pub groups: Vec<String>,
}

/// What a build produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuildReport {
    /// Image name.
    pub name: String,
    /// Image tag.
    pub tag: String,
    /// Output format.
    pub format: OutputFormat,
    /// Output path.
    pub out: PathBuf,
    /// Image manifest digest (none for squashfs).
    pub manifest_digest: Option<Digest>,
    /// Image config digest, the Docker image ID with the classic store
    /// (none for squashfs).
    pub config_digest: Option<Digest>,
    /// SBOM document digest (none for squashfs).
    pub sbom_digest: Option<Digest>,
    /// Layers, bottom first.
    pub layers: Vec<BuiltLayer>,
    /// Digest of the output file (squashfs only; for archives `inspect
    /// --verify` and `pin` compute it).
    pub archive_digest: Option<Digest>,
}
