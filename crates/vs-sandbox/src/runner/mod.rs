//! Command runners: execute one command, return a bounded result.
//!
//! A runner isolates nothing (that is agent confinement's job, see the
//! `*Sandbox` types). It owns three things: the command gets exactly the
//! environment it is given, its output never grows vibesys's memory past a
//! fixed cap, and a timeout or a cancellation kills the command's whole
//! process tree and returns promptly.
//!
//! [`LocalShellRunner`] runs commands on the host. How it finds every
//! descendant, including ones that left the process group or the session,
//! is described on that type.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub(crate) mod b64;
mod capture;
#[cfg(target_os = "linux")]
mod linux;

pub(crate) use capture::HeadTail;
pub use capture::{BoundedCapture, CapturedOutput};

/// Executes one command and returns a bounded [`CommandResult`].
pub trait CommandRunner {
    /// Runs `command` to completion, timeout or cancellation.
    ///
    /// A command that runs and fails is a successful call: its status is in
    /// the result. An error means the command could not be started or its
    /// outcome could not be observed.
    fn run(&self, command: &CommandSpec) -> Result<CommandResult, RunnerError>;
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Program and arguments. A program without `/` is looked up in the
    /// `PATH` of the command's own environment (or, if it has none, in
    /// [`DEFAULT_SEARCH_PATH`]); never in vibesys's own `PATH` unless the
    /// environment is inherited.
    pub argv: Vec<OsString>,
    /// Working directory of the command.
    pub cwd: PathBuf,
    /// The command's environment. Only these variables reach it unless
    /// [`CommandSpec::inherit_env`] is set.
    pub env: BTreeMap<OsString, OsString>,
    /// Start from vibesys's own environment, with [`CommandSpec::env`]
    /// applied on top. Off by default: nothing is inherited implicitly.
    pub inherit_env: bool,
    /// Bytes written to the command's stdin, which is then closed. `None`
    /// connects stdin to `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    /// Kill the command's process tree after this long.
    pub timeout: Option<Duration>,
    /// Kill the command's process tree when this token is cancelled.
    pub cancel: Option<CancellationToken>,
}

impl CommandSpec {
    /// A command with an empty environment, no stdin, no timeout.
    pub fn new<I, S>(argv: I, cwd: impl Into<PathBuf>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: cwd.into(),
            env: BTreeMap::new(),
            inherit_env: false,
            stdin: None,
            timeout: None,
            cancel: None,
        }
    }

    /// Sets one environment variable.
    #[must_use]
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Starts from vibesys's own environment (see [`CommandSpec::inherit_env`]).
    #[must_use]
    pub fn inherit_env(mut self, inherit: bool) -> Self {
        self.inherit_env = inherit;
        self
    }

    /// Sets the bytes delivered on stdin.
    #[must_use]
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Sets the timeout.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets the cancellation token.
    #[must_use]
    pub fn cancel_token(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

/// Where a program without `/` is looked up when the command's environment
/// has no `PATH`.
pub const DEFAULT_SEARCH_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Cancels the commands it was given to, from any thread. Clones share
/// one flag.
#[derive(Debug, Clone, Default)]
pub struct CancellationToken {
    cancelled: Arc<AtomicBool>,
}

impl CancellationToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels: running commands holding this token are killed (tree and
    /// all) within a few tens of milliseconds; commands started later are
    /// killed right after they start.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// Whether [`CancellationToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::SeqCst)
    }
}

/// The outcome of one command. Serialises to a stable JSON object (for
/// `--json`): `exit_code`, `signal`, `timed_out`, `cancelled`,
/// `duration_secs`, `stdout`, `stderr` (see [`CapturedOutput`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    /// The exit code, or 128 + N when the command was killed by signal N
    /// (the shell convention).
    pub exit_code: i32,
    /// The signal that killed the command, if one did.
    pub signal: Option<i32>,
    /// The timeout expired and the process tree was killed.
    pub timed_out: bool,
    /// The cancellation token fired and the process tree was killed.
    pub cancelled: bool,
    /// Wall-clock time from start to the end of output collection.
    #[serde(rename = "duration_secs", with = "duration_secs")]
    pub duration: Duration,
    /// What the command wrote to stdout, bounded.
    pub stdout: CapturedOutput,
    /// What the command wrote to stderr, bounded.
    pub stderr: CapturedOutput,
}

impl CommandResult {
    /// Exit code 0, not timed out, not cancelled.
    pub fn success(&self) -> bool {
        self.exit_code == 0 && self.signal.is_none() && !self.timed_out && !self.cancelled
    }
}

mod duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

/// Why a command could not be run or observed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// The argv was empty.
    #[error("the command is empty")]
    EmptyCommand,
    /// An argument, environment entry or path contained a NUL byte.
    #[error("{what} contains a nul byte: {value:?}")]
    NulByte {
        /// Which part of the command.
        what: &'static str,
        /// The offending value, lossily.
        value: String,
    },
    /// An environment variable name was empty or contained `=`.
    #[error("invalid environment variable name {name:?}")]
    InvalidEnvName {
        /// The offending name, lossily.
        name: String,
    },
    /// The program was not found, or is not an executable file.
    #[error("program {program:?} not found as an executable file in {search_path:?}")]
    ProgramNotFound {
        /// The program as given.
        program: String,
        /// Where it was looked for.
        search_path: String,
    },
    /// The working directory is not a usable directory.
    #[error("working directory {path:?} is not usable: {source}")]
    WorkingDirectory {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// `execve` of the program failed in the child.
    #[error("cannot execute {program:?}: {source}")]
    Exec {
        /// The resolved program path.
        program: PathBuf,
        /// The error `execve` returned.
        #[source]
        source: io::Error,
    },
    /// A system call the runner itself needs failed.
    #[error("{operation} failed: {source}")]
    Os {
        /// What the runner was doing.
        operation: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The supervisor process ended without reporting the command's status.
    #[error("the process supervisor ended without reporting the command's status ({detail})")]
    SupervisorLost {
        /// What is known about how it ended.
        detail: String,
    },
    /// The connection to a container's command server is gone (the server
    /// or the container ended); no later command can run there.
    #[error("the container's command server is unreachable: {detail}")]
    CommandServerLost {
        /// What is known about how it ended.
        detail: String,
    },
    /// The command server inside a container could not start or observe
    /// the command (its runner's error, as text).
    #[error("in the container: {message}")]
    InContainer {
        /// The server's message.
        message: String,
    },
    /// The command was handed to another place (a Slurm job through the
    /// run's broker) that refused it or could not report its status.
    #[error("{place}: {message}")]
    Dispatched {
        /// Where the command was sent.
        place: String,
        /// What that place said.
        message: String,
    },
    /// This runner does not exist on this operating system.
    #[error("{runner} is not supported on {os}")]
    Unsupported {
        /// The runner type.
        runner: &'static str,
        /// The operating system.
        os: &'static str,
    },
}

/// Default cap per stream: 1 MiB, half head and half tail.
pub const DEFAULT_OUTPUT_CAP: usize = 1024 * 1024;

/// Runs commands directly on the host. It isolates nothing.
///
/// # Process-tree kill
///
/// Each run forks a small **supervisor** process that marks itself a child
/// subreaper (`PR_SET_CHILD_SUBREAPER`) and then forks the command, in a
/// process group of its own. A subreaper adopts every orphaned descendant,
/// so a grandchild that called `setsid` or double-forked away from its
/// parent still ends up as the supervisor's child instead of init's: the
/// tree cannot leave it. On timeout or cancellation vibesys sends the
/// supervisor `SIGTERM`; it `SIGKILL`s the command's process group, then
/// repeatedly `SIGKILL`s every child listed in
/// `/proc/thread-self/children` and reaps, until it has no child left.
/// When the command exits on its own, descendants it left behind are
/// killed the same way: a run leaves no process behind.
///
/// Why this and not the alternatives: a process group alone misses
/// `setsid`; walking `/proc` for descendants misses double-forked orphans
/// (their parent is init by then); making vibesys itself the subreaper
/// would adopt orphans of every concurrent run and of unrelated children
/// into one process, with no way to tell them apart; a cgroup needs a
/// writable, delegated cgroup v2 tree, which unprivileged users and HPC
/// nodes often lack. One supervisor per run needs nothing but Linux >= 3.17.
///
/// The supervisor runs only async-signal-safe system calls between `fork`
/// and its exit (vibesys is multi-threaded). It has `PR_SET_PDEATHSIG` set,
/// so if vibesys dies the tree is killed too. Not covered: processes the
/// command asks an unrelated daemon to start (systemd, at, a Docker
/// daemon); they are not its descendants.
///
/// After the supervisor is gone, vibesys keeps reading output for at most
/// a short grace period, so a stray holder of the pipe (a descendant that
/// passed its descriptor to an unrelated process) cannot block the call.
///
/// # Output
///
/// stdout and stderr are read concurrently on the calling thread with
/// `poll`, while stdin is written, so no stream can deadlock another. Each
/// keeps its first `cap / 2` and last `cap - cap / 2` bytes; the rest is
/// counted and dropped as it arrives, so memory stays flat whatever the
/// command prints.
#[derive(Debug, Clone)]
pub struct LocalShellRunner {
    output_cap: usize,
    #[cfg_attr(
        not(target_os = "linux"),
        expect(dead_code, reason = "only the Linux runner runs commands")
    )]
    drain_grace: Duration,
}

impl Default for LocalShellRunner {
    fn default() -> Self {
        Self::new()
    }
}

impl LocalShellRunner {
    /// A runner with the default output cap ([`DEFAULT_OUTPUT_CAP`]).
    pub fn new() -> Self {
        Self {
            output_cap: DEFAULT_OUTPUT_CAP,
            drain_grace: Duration::from_millis(500),
        }
    }

    /// Sets how many bytes of each stream are kept (half head, half tail).
    #[must_use]
    pub fn with_output_cap(mut self, bytes_per_stream: usize) -> Self {
        self.output_cap = bytes_per_stream;
        self
    }

    /// The number of bytes kept per stream.
    pub fn output_cap(&self) -> usize {
        self.output_cap
    }
}

impl CommandRunner for LocalShellRunner {
    #[cfg(target_os = "linux")]
    fn run(&self, command: &CommandSpec) -> Result<CommandResult, RunnerError> {
        linux::run(command, self.output_cap, self.drain_grace)
    }

    #[cfg(not(target_os = "linux"))]
    fn run(&self, _command: &CommandSpec) -> Result<CommandResult, RunnerError> {
        Err(RunnerError::Unsupported {
            runner: "LocalShellRunner",
            os: std::env::consts::OS,
        })
    }
}
