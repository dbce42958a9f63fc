//! The one error type of vs-image.

use std::path::PathBuf;

/// Everything that can go wrong while building, reading or pinning an image.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An I/O operation on a path failed.
    #[error("cannot {op} {path}: {source}")]
    Io {
        /// What was being done (`read`, `write`, `create`, ...).
        op: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The image spec could not be parsed.
    #[error("invalid image spec {path}: {message}")]
    SpecParse {
        /// The spec file.
        path: PathBuf,
        /// What the TOML parser reported.
        message: String,
    },
    /// A field of the image spec has an invalid value.
    #[error("invalid image spec: {field}: {reason}")]
    SpecInvalid {
        /// The offending field.
        field: String,
        /// Why it is invalid.
        reason: String,
    },
    /// A references-graph file is malformed.
    #[error("invalid references graph {path} line {line}: {reason}")]
    Graph {
        /// The graph file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// An input path is not acceptable (relative, not UTF-8, missing ...).
    #[error("invalid input path {path}: {reason}")]
    InputPath {
        /// The offending path.
        path: PathBuf,
        /// Why it is refused.
        reason: String,
    },
    /// A file type that cannot go into an image (device, socket, fifo).
    #[error(
        "refusing {kind} {path}: only regular files, directories and symlinks go into an image"
    )]
    UnsupportedFileType {
        /// The offending path.
        path: PathBuf,
        /// `device`, `socket`, `fifo`.
        kind: &'static str,
    },
    /// A link (or entry name) that would escape the image root.
    #[error("{what} {path} -> {target} escapes the root")]
    Escapes {
        /// `symlink`, `hardlink` or `entry`.
        what: &'static str,
        /// The link or entry path.
        path: String,
        /// Its target.
        target: String,
    },
    /// A blob's content does not hash to its name or descriptor.
    #[error("blob {blob}: digest mismatch: expected {expected}, found {found}")]
    DigestMismatch {
        /// The blob (digest or archive member name).
        blob: String,
        /// The expected digest.
        expected: String,
        /// The computed digest.
        found: String,
    },
    /// A blob's size does not match its descriptor.
    #[error("blob {blob}: size mismatch: expected {expected} bytes, found {found}")]
    SizeMismatch {
        /// The blob.
        blob: String,
        /// The size in the descriptor.
        expected: u64,
        /// The actual size.
        found: u64,
    },
    /// A descriptor points at a blob that is not there.
    #[error("{referenced_by} references missing blob {digest}")]
    MissingBlob {
        /// The missing blob digest or path.
        digest: String,
        /// Which document references it.
        referenced_by: String,
    },
    /// A layer contains an entry that is not safe to unpack.
    #[error("layer {layer}: unsafe entry {entry}: {reason}")]
    UnsafeEntry {
        /// The layer digest.
        layer: String,
        /// The tar entry name.
        entry: String,
        /// Why it is refused.
        reason: String,
    },
    /// The archive a rebuild kept layers from changed while they were read
    /// (an edit of it failed half-way, or another process wrote it): the
    /// build is made again without it.
    #[error("the archive {path} changed while the rebuild read its layers")]
    OldArchiveChanged {
        /// The output path.
        path: PathBuf,
    },
    /// An image archive or layout is malformed.
    #[error("malformed image {path}: {reason}")]
    Malformed {
        /// The archive or layout.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A JSON document could not be (de)serialised.
    #[error("invalid JSON in {what}: {source}")]
    Json {
        /// The document.
        what: String,
        /// The parser error.
        #[source]
        source: serde_json::Error,
    },
    /// oci-spec refused to build an OCI document.
    #[error("cannot build {what}: {source}")]
    OciSpec {
        /// The document.
        what: String,
        /// What oci-spec reported.
        #[source]
        source: oci_spec::OciSpecError,
    },
    /// A string is not a valid `sha256:<64 hex>` digest.
    #[error("invalid digest {value:?}: expected sha256:<64 lowercase hex digits>")]
    InvalidDigest {
        /// The offending string.
        value: String,
    },
    /// The lock file is malformed.
    #[error("invalid lock file {path}: {reason}")]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The lock has no entry for this image.
    #[error("image {image} is not pinned in {lock}")]
    NotPinned {
        /// The image name.
        image: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// A found image does not match its pin.
    #[error("image {image}: {field} {found} does not match the pinned {pinned}")]
    PinMismatch {
        /// The image name.
        image: String,
        /// The compared field (`image id`, `config digest`, `layers`, ...).
        field: String,
        /// The pinned value.
        pinned: String,
        /// The found value.
        found: String,
    },
    /// A checked image does not match its pin, and the lock recorded the
    /// image's packages: `changes` says which differ (or that none does).
    #[error("image {image}: {field} {found} does not match the pinned {pinned}; {changes}")]
    InputsChanged {
        /// The image name.
        image: String,
        /// The compared field.
        field: String,
        /// The pinned value.
        pinned: String,
        /// The found value.
        found: String,
        /// The packages that changed, e.g. `deb:git 1:2.39.5-0+deb12u2 -> 1:2.39.5-0+deb12u3`.
        changes: String,
    },
    /// An external tool failed.
    #[error("{tool} failed: {reason}")]
    Tool {
        /// The tool.
        tool: &'static str,
        /// What went wrong (exit status, stderr tail, install hint).
        reason: String,
    },
    /// A registry refused a request, could not be reached, or answered
    /// something that is not what was asked for.
    #[error("registry {reference}: {reason}")]
    Registry {
        /// The image reference (or registry) involved.
        reference: String,
        /// What went wrong.
        reason: String,
    },
    /// The operator stopped a transfer ([`crate::registry::TransferProgress::cancelled`]);
    /// what it had written is removed.
    #[error("interrupted: nothing was written to {out}")]
    Interrupted {
        /// The output that was not written.
        out: PathBuf,
    },
    /// An image reference is not acceptable here.
    #[error("invalid image reference {reference:?}: {reason}")]
    Reference {
        /// The reference as given.
        reference: String,
        /// Why it is refused.
        reason: String,
    },
}

impl From<vs_pin::Error> for Error {
    /// The pin crate's errors are this crate's variants of the same name,
    /// so that a caller matches one type.
    fn from(e: vs_pin::Error) -> Self {
        match e {
            vs_pin::Error::InvalidDigest { value } => Self::InvalidDigest { value },
            vs_pin::Error::PinMismatch {
                image,
                field,
                pinned,
                found,
            } => Self::PinMismatch {
                image,
                field,
                pinned,
                found,
            },
        }
    }
}

impl Error {
    /// Shorthand for [`Error::Io`].
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn malformed(path: impl Into<PathBuf>, reason: impl Into<String>) -> Self {
        Self::Malformed {
            path: path.into(),
            reason: reason.into(),
        }
    }
}
