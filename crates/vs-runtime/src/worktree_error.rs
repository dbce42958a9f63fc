//! The errors of adding a candidate's worktree.

use std::path::PathBuf;

/// Why a candidate's worktree cannot be added.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorktreeError {
    /// Another process held the repository's worktree lock for too long.
    #[error(
        "the worktree lock {path} stayed held for {seconds} s: another vibesys process is adding or removing worktrees of this repository (or a process holds the lock without doing so); retry when it is done"
    )]
    LockBusy {
        /// The lock file.
        path: PathBuf,
        /// How long vibesys waited.
        seconds: u64,
    },
    /// A candidate worktree already exists.
    #[error("candidate worktree {path} already exists")]
    Exists {
        /// The worktree path.
        path: PathBuf,
    },
}
