//! The errors of the gate's baseline of protected paths.

use std::path::PathBuf;

/// Why the gate's baseline of protected paths cannot be recorded or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// A protected path lies outside the project.
    #[error("protected path {path} is outside the project {project}")]
    OutsideProject {
        /// The path as given.
        path: PathBuf,
        /// The project root.
        project: PathBuf,
    },
    /// A protected path does not exist when the baseline is recorded.
    #[error("protected path {path} does not exist")]
    ProtectedPathMissing {
        /// The path as given.
        path: PathBuf,
    },
    /// A protected path is the empty string.
    #[error("a protected path is empty; name the project itself as \".\"")]
    EmptyProtectedPath,
    /// No protected path was given.
    #[error("nothing to protect: pass --protect PATH or set [gate] protect in vibesys.toml")]
    NothingProtected,
    /// A path or symlink target is not valid UTF-8 and cannot be recorded.
    #[error("{path} is not valid UTF-8 and cannot be recorded")]
    NonUtf8Path {
        /// The path (lossily shown).
        path: PathBuf,
    },
    /// No gate baseline exists for the run.
    #[error("no gate baseline for run {run} at {path}; run `vibesys gate baseline` first")]
    BaselineMissing {
        /// The run id.
        run: String,
        /// Where the baseline was expected.
        path: PathBuf,
    },
    /// The gate baseline was written in another schema version (schema 1
    /// held SHA-256 digests; this vibesys reads schema 2, BLAKE3).
    #[error(
        "gate baseline {path} has schema_version {found}, which this vibesys does not read (it reads schema_version {expected}: BLAKE3 digests; schema_version 1 held SHA-256 digests): record the baseline again with this vibesys (`vibesys gate baseline`) before the agent runs"
    )]
    BaselineVersion {
        /// The baseline path.
        path: PathBuf,
        /// The version the file declares.
        found: u32,
        /// The version this vibesys reads and writes.
        expected: u32,
    },
    /// The gate baseline exists but is invalid.
    #[error("invalid gate baseline {path}: {reason}")]
    InvalidBaseline {
        /// The baseline path.
        path: PathBuf,
        /// Why it is invalid.
        reason: String,
    },
}
