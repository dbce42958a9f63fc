//! The errors of a trusted build.

use std::path::PathBuf;

/// Why a trusted build did not happen, was rejected, or its record cannot
/// be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// `vibesys.toml` has no `[build]` table.
    #[error("{path} has no [build] table; declare argv = [...] and outputs = [...] under [build]")]
    BuildNotConfigured {
        /// The configuration file.
        path: PathBuf,
    },
    /// The build command could not be confined; nothing ran.
    #[error("cannot confine the build: {source}")]
    Confinement {
        /// The confinement error.
        #[source]
        source: vs_sandbox::SandboxError,
    },
    /// The build command exited unsuccessfully.
    #[error(
        "the build command exited with status {exit_code}; nothing was recorded; its output ended with:\n{log}"
    )]
    BuildFailed {
        /// The exit status (128+N for signal N).
        exit_code: i32,
        /// The tail of what the build printed (bounded).
        log: String,
    },
    /// The build command ran longer than its `timeout_secs`.
    #[error("the build command ran longer than {secs} s and was killed; nothing was recorded")]
    BuildTimedOut {
        /// The limit in seconds.
        secs: u64,
    },
    /// The build changed, added or removed evaluator-owned (protected) paths.
    #[error(
        "the build changed protected paths: {}; nothing was recorded",
        crate::gate_difference::describe_differences(differences)
    )]
    ProtectedPathsChanged {
        /// Every difference, sorted by path.
        differences: Vec<crate::gate_difference::GateDifference>,
    },
    /// A declared output failed verification.
    #[error("declared output {path} rejected: {reason}")]
    OutputRejected {
        /// The declared output path (relative to the checkout).
        path: String,
        /// Why it was rejected.
        reason: String,
    },
    /// No build record exists for the run and commit.
    #[error(
        "no trusted build of commit {commit} in run {run} at {path}; run `vibesys build` first"
    )]
    BuildRecordMissing {
        /// The run id.
        run: String,
        /// The commit.
        commit: String,
        /// Where the record was expected.
        path: PathBuf,
    },
    /// A build record exists but is invalid.
    #[error("invalid build record {path}: {reason}")]
    InvalidBuildRecord {
        /// The record path.
        path: PathBuf,
        /// Why it is invalid.
        reason: String,
    },
    /// The build record declares no output of that name.
    #[error("the build of commit {commit} has no declared output {name:?}")]
    UnknownOutput {
        /// The requested output.
        name: String,
        /// The commit.
        commit: String,
    },
    /// A verified artifact no longer has the recorded content.
    #[error(
        "artifact of output {name} at {path} changed after verification: recorded sha256 {expected}, found {found}"
    )]
    ArtifactChanged {
        /// The declared output.
        name: String,
        /// The artifact path.
        path: PathBuf,
        /// The recorded sha256.
        expected: String,
        /// What was found (a sha256 or a file type).
        found: String,
    },
}
