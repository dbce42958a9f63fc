//! The errors of running git.

use std::io;
use std::path::PathBuf;

/// Why git could not run, or was refused, on the project or a candidate's
/// worktree.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GitError {
    /// git could not be started.
    #[error("cannot run git: {source}; install git")]
    Unavailable {
        /// The spawn error.
        #[source]
        source: io::Error,
    },
    /// A git command failed.
    #[error("git {args} in {dir} failed ({status}): {stderr}")]
    Failed {
        /// Where git ran.
        dir: PathBuf,
        /// The git arguments.
        args: String,
        /// The exit status.
        status: String,
        /// git's standard error (truncated).
        stderr: String,
    },
    /// The repository's configuration holds a key the framework's git
    /// cannot neutralize; git was not run.
    #[error(
        "refusing to run git in {dir}: its configuration sets {key} (in {origin}): {reason}; remove it (git config --unset-all {key}) and run again"
    )]
    ConfigRefused {
        /// Where git would have run.
        dir: PathBuf,
        /// The configuration key.
        key: String,
        /// Where git read it (`file:.git/config`, ...).
        origin: String,
        /// Why it is refused.
        reason: String,
    },
    /// git did not apply vibesys's command-scope overrides.
    #[error(
        "refusing to run git in {dir}: it ignores the overrides vibesys passes in GIT_CONFIG_COUNT; install git 2.31 or later"
    )]
    OverridesIgnored {
        /// Where git would have run.
        dir: PathBuf,
    },
    /// The repository's configuration has more entries than vibesys reads.
    #[error("refusing to run git in {dir}: its configuration has more than {limit} entries")]
    ConfigTooLarge {
        /// Where git would have run.
        dir: PathBuf,
        /// The limit.
        limit: usize,
    },
}
