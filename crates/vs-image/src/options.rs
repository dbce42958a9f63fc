//! What a build is asked for: output format, compression, the source of
//! the contents, and the progress callback.

use std::path::PathBuf;

use oci_spec::image::MediaType;
use serde::Serialize;

use crate::spec::ImageSpec;

/// Output format of a build.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutputFormat {
    /// One tar that is both an oci-archive and a docker-archive (default).
    Archive,
    /// An OCI image layout directory.
    Oci,
    /// An OCI image layout as a tar.
    OciArchive,
    /// A Docker `docker save` style tar.
    DockerArchive,
    /// A flattened rootfs as a squashfs image (needs `mksquashfs`).
    Squashfs,
}

impl OutputFormat {
    /// The CLI name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Archive => "archive",
            Self::Oci => "oci",
            Self::OciArchive => "oci-archive",
            Self::DockerArchive => "docker-archive",
            Self::Squashfs => "squashfs",
        }
    }
}

/// Layer compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// Plain tar (default; fastest to build and load locally).
    None,
    /// gzip level 6 (pure-Rust miniz_oxide backend, pinned).
    Gzip,
    /// zstd level 3, single-threaded.
    Zstd,
}

impl Compression {
    /// The CLI name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
        }
    }

    pub(crate) fn media_type(self) -> MediaType {
        match self {
            Self::None => MediaType::ImageLayer,
            Self::Gzip => MediaType::ImageLayerGzip,
            Self::Zstd => MediaType::ImageLayerZstd,
        }
    }
}

/// Where the contents come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The spec's `[host]` section.
    Spec,
    /// A root directory whose tree becomes `/`.
    Root(PathBuf),
    /// Absolute host paths kept at their location.
    Paths(Vec<String>),
    /// A Nix `exportReferencesGraph` file: every store path it lists.
    ReferencesGraph(PathBuf),
}

/// Everything a build needs, resolved and validated by the caller.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// The image spec.
    pub spec: ImageSpec,
    /// Output path (file, or directory for `oci`).
    pub out: PathBuf,
    /// Output format.
    pub format: OutputFormat,
    /// Contents.
    pub source: Source,
    /// Layer compression.
    pub compression: Compression,
    /// Timestamp of every entry and document (`SOURCE_DATE_EPOCH`).
    pub source_date_epoch: u64,
    /// Layer cache directory; `None` disables the cache.
    pub cache: Option<PathBuf>,
}

/// Build progress, reported from worker threads.
pub trait Progress: Sync {
    /// The build will write `layers` layers holding `bytes` of file content.
    fn begin(&self, layers: usize, bytes: u64) {
        let _ = (layers, bytes);
    }
    /// One layer is done (`bytes` of content; `cached` if reused).
    fn layer_done(&self, bytes: u64, cached: bool) {
        let _ = (bytes, cached);
    }
}

impl Progress for () {}
