//! The error type of vs-runtime: [`RuntimeError`] holds the errors every
//! operation shares (identifiers, I/O, state files, configuration,
//! confinement) and, one variant each, the error types of the operations
//! (run state, git, worktrees, the gate, builds, run environments, runs),
//! each declared beside the module that raises it.

use std::io;
use std::path::PathBuf;

/// Result alias of vs-runtime.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Everything that can go wrong in vs-runtime; each variant names its
/// cause. An operation's own errors convert into it (`?`) with their
/// messages unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuntimeError {
    /// An identifier (run id, candidate id) does not match its grammar.
    #[error("invalid {what} {value:?}: {reason} (expected ^[a-z0-9][a-z0-9._-]{{0,127}}$)")]
    InvalidId {
        /// Which kind of identifier.
        what: &'static str,
        /// The rejected value.
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// An I/O operation on a path failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done ("read", "create directory", ...).
        op: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// A state path that must be a real directory is something else.
    #[error("{path} must be a directory, found {found}; refusing to use it")]
    NotADirectory {
        /// The offending path.
        path: PathBuf,
        /// What was found instead ("symlink", "file", ...).
        found: &'static str,
    },
    /// A state file that must be a regular file is something else.
    #[error("{path} must be a regular file, found {found}; refusing to use it")]
    NotAFile {
        /// The offending path.
        path: PathBuf,
        /// What was found instead.
        found: &'static str,
    },
    /// A file is larger than vibesys will read.
    #[error("{path} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The offending path.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// A git revision given by the caller is not acceptable.
    #[error("invalid git revision {rev:?}: {reason}")]
    InvalidRevision {
        /// The rejected revision.
        rev: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// `vibesys.toml` is invalid where vs-runtime reads it.
    #[error("invalid {path}: {reason}")]
    InvalidConfig {
        /// The configuration file.
        path: PathBuf,
        /// Why it is invalid.
        reason: String,
    },
    /// Setting up and reading the project's run state (`.vibesys/state`).
    #[error(transparent)]
    State(#[from] crate::state_error::StateError),
    /// Running git on the project or a candidate's worktree.
    #[error(transparent)]
    Git(#[from] crate::git_error::GitError),
    /// Adding a candidate's worktree.
    #[error(transparent)]
    Worktree(#[from] crate::worktree_error::WorktreeError),
    /// Recording and checking the gate's baseline of protected paths.
    #[error(transparent)]
    Gate(#[from] crate::gate_error::GateError),
    /// A trusted build: configuring, running and verifying it, and reading its record.
    #[error(transparent)]
    Build(#[from] crate::build_error::BuildError),
    /// Choosing where a run's candidates run.
    #[error(transparent)]
    Environment(#[from] crate::environment_error::EnvironmentError),
    /// A run: its task, its request, its record and lock, and the commit phase of its candidates.
    #[error(transparent)]
    Run(#[from] crate::run_error::RunError),
    /// The project's policy (its files or flags) is invalid.
    #[error(transparent)]
    Policy(#[from] vs_sandbox::PolicyError),
    /// `vibesys.toml` cannot be read or is invalid.
    #[error(transparent)]
    Config(#[from] vs_sandbox::config::ConfigError),
    /// Confinement cannot be set up; nothing ran.
    #[error(transparent)]
    Sandbox(#[from] vs_sandbox::SandboxError),
    /// Dispatching an evaluation to Modal or SkyPilot failed.
    #[error(transparent)]
    Remote {
        /// What went wrong.
        #[from]
        source: crate::remote::error::RemoteError,
    },
}

impl RuntimeError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
