//! The errors of a run: its task, request, record and commit phase.

use std::path::PathBuf;

/// Why a run cannot start, resume or be read: its task, its request, its
/// record and lock, the commit phase of its candidates.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The task of a run is missing a required table.
    #[error(
        "{path} has no [{section}]: a run needs [task] (objective, protected) and [check] (argv, exit 0 = correct); see docs/cli.md"
    )]
    TaskNotConfigured {
        /// The configuration file.
        path: PathBuf,
        /// The missing table.
        section: &'static str,
    },
    /// The task of a run is malformed.
    #[error("invalid task in {path}: {reason}")]
    InvalidTask {
        /// The configuration file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A `run start` request is out of range.
    #[error("{reason}")]
    InvalidRunRequest {
        /// What is wrong.
        reason: String,
    },
    /// A run id already has a record directory.
    #[error("run {run} already exists")]
    RunExists {
        /// The run.
        run: String,
    },
    /// No record of a run.
    #[error("no run {run}: {path} does not exist")]
    RunNotFound {
        /// The run.
        run: String,
        /// Where its record was looked for.
        path: PathBuf,
    },
    /// No run at all.
    #[error("no run has been started in this project ({path} holds none)")]
    NoRuns {
        /// The runs directory.
        path: PathBuf,
    },
    /// A run or candidate record is malformed.
    #[error("invalid run record {path}: {reason}")]
    InvalidRunRecord {
        /// The record.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Another vibesys holds the run's lock.
    #[error("run {run} is in progress in another vibesys (its lock is held)")]
    RunInProgress {
        /// The run.
        run: String,
    },
    /// The task changed since the run started.
    #[error(
        "the task of run {run} changed since it started (vibesys.toml sha256 {recorded} then, {current} now); a resume evaluates with the task it started with: restore it, or start a new run"
    )]
    TaskChanged {
        /// The run.
        run: String,
        /// The recorded digest.
        recorded: String,
        /// The current digest.
        current: String,
    },
    /// A file of a candidate's worktree is larger than the commit phase
    /// reads (`[task] commit_max_file_bytes`).
    #[error(
        "{path} is {size} bytes, more than the commit phase reads ({limit} bytes, [task] commit_max_file_bytes); nothing was committed"
    )]
    CommitFileTooLarge {
        /// The file, relative to the worktree.
        path: String,
        /// Its apparent size.
        size: u64,
        /// The limit.
        limit: u64,
    },
    /// The files of a candidate's worktree are larger together than the
    /// commit phase reads (`[task] commit_max_total_bytes`).
    #[error(
        "the candidate's files are more than {limit} bytes together ([task] commit_max_total_bytes; {path} passed it); nothing was committed"
    )]
    CommitTotalTooLarge {
        /// The file that took the total over the limit.
        path: String,
        /// The limit.
        limit: u64,
    },
    /// The commit phase ran longer than `[task] commit_timeout_secs`.
    #[error(
        "the commit phase ran longer than {secs} s ([task] commit_timeout_secs) and was stopped; nothing was committed"
    )]
    CommitTimedOut {
        /// The limit in seconds.
        secs: u64,
    },
}
