//! The errors of setting up and reading the project's run state.

use std::path::PathBuf;

/// Why the project's run state (`.vibesys/state`) cannot be set up or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The project directory lies inside another project's run state.
    #[error(
        "{path} is inside the run state of the project {project} (a candidate worktree or the run record), whose task and record vibesys does not take from a candidate; run vibesys on {project}"
    )]
    ProjectInsideRunState {
        /// The directory given.
        path: PathBuf,
        /// The project owning that run state.
        project: PathBuf,
    },
    /// The project directory does not exist or is not a directory.
    #[error("project directory {path} does not exist or is not a directory")]
    ProjectNotADirectory {
        /// The project path as given.
        path: PathBuf,
    },
    /// `project.json` exists but is not a valid project record.
    #[error("invalid project record {path}: {reason}")]
    InvalidProjectRecord {
        /// The record path.
        path: PathBuf,
        /// Why it is invalid.
        reason: String,
    },
    /// Private files can be recovered from the project's git history.
    #[error(
        "refusing to initialize run state: private files can be recovered from git history: {}; purge them from every ref and the reflog first",
        paths.join(", ")
    )]
    PrivateFilesInHistory {
        /// Repository-relative paths, sorted.
        paths: Vec<String>,
    },
    /// `.vibesys/state` has not been initialized.
    #[error("run state is not initialized in {project}; run `vibesys state init` first")]
    StateNotInitialized {
        /// The project root.
        project: PathBuf,
    },
    /// A run record that git tracks: a commit wrote it, not vibesys.
    #[error(
        "refusing {path}: git tracks {tracked}, so a commit (possibly the agent's) wrote it, not vibesys; remove it from the index (git rm --cached) and record it again"
    )]
    RecordTrackedByGit {
        /// The record refused.
        path: PathBuf,
        /// The tracked path, repository-relative.
        tracked: String,
    },
}
