//! The one error type of vs-runtime.

use std::io;
use std::path::PathBuf;

/// Result alias of vs-runtime.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Everything that can go wrong in vs-runtime; each variant names its cause.
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
    /// git could not be started.
    #[error("cannot run git: {source}; install git")]
    GitUnavailable {
        /// The spawn error.
        #[source]
        source: io::Error,
    },
    /// A git command failed.
    #[error("git {args} in {dir} failed ({status}): {stderr}")]
    Git {
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
    GitConfigRefused {
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
    GitOverridesIgnored {
        /// Where git would have run.
        dir: PathBuf,
    },
    /// The repository's configuration has more entries than vibesys reads.
    #[error("refusing to run git in {dir}: its configuration has more than {limit} entries")]
    GitConfigTooLarge {
        /// Where git would have run.
        dir: PathBuf,
        /// The limit.
        limit: usize,
    },
    /// A git revision given by the caller is not acceptable.
    #[error("invalid git revision {rev:?}: {reason}")]
    InvalidRevision {
        /// The rejected revision.
        rev: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// `.vibesys/state` has not been initialized.
    #[error("run state is not initialized in {project}; run `vibesys state init` first")]
    StateNotInitialized {
        /// The project root.
        project: PathBuf,
    },
    /// Another process held the repository's worktree lock for too long.
    #[error(
        "the worktree lock {path} stayed held for {seconds} s: another vibesys process is adding or removing worktrees of this repository (or a process holds the lock without doing so); retry when it is done"
    )]
    WorktreeLockBusy {
        /// The lock file.
        path: PathBuf,
        /// How long vibesys waited.
        seconds: u64,
    },
    /// A candidate worktree already exists.
    #[error("candidate worktree {path} already exists")]
    WorktreeExists {
        /// The worktree path.
        path: PathBuf,
    },
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
    /// `vibesys.toml` is invalid where vs-runtime reads it.
    #[error("invalid {path}: {reason}")]
    InvalidConfig {
        /// The configuration file.
        path: PathBuf,
        /// Why it is invalid.
        reason: String,
    },
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
    /// An unknown run environment name.
    #[error("unknown run environment {value:?}; expected docker, host, slurm, modal or skypilot")]
    UnknownRunEnvironment {
        /// The rejected value.
        value: String,
    },
    /// A run environment name or flag that was replaced.
    #[error("{given} is no longer accepted; use {replacement}")]
    RetiredRunEnvironment {
        /// What was given (`--docker`, `--run-environment local`).
        given: String,
        /// The replacement to use.
        replacement: String,
    },
    /// The run environment cannot run anything in this build.
    #[error("the {name} run environment is not available here: {reason}")]
    RunEnvironmentUnavailable {
        /// The environment.
        name: &'static str,
        /// What is missing.
        reason: String,
    },
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
