//! The one error type of vs-sandbox.

use std::path::PathBuf;

use serde::Serialize;

/// Why a policy was rejected. Every variant names the offending path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// The path string was empty.
    #[error("policy path is empty")]
    Empty,
    /// The path was absolute; policy paths are workspace-relative.
    #[error("policy path {path:?} is absolute; paths are relative to the workspace")]
    Absolute {
        /// The offending path.
        path: PathBuf,
    },
    /// The path contained a `..` component.
    #[error("policy path {path:?} contains `..`")]
    ParentComponent {
        /// The offending path.
        path: PathBuf,
    },
    /// The path was not valid UTF-8 or contained a NUL byte or newline.
    #[error("policy path {path:?} contains a NUL byte, a newline or invalid UTF-8")]
    BadCharacters {
        /// The offending path.
        path: PathBuf,
    },
    /// The same path was listed twice.
    #[error("policy path {path:?} is listed twice ({first} and {second})")]
    Duplicate {
        /// The offending path.
        path: PathBuf,
        /// The list of the first occurrence.
        first: &'static str,
        /// The list of the second occurrence.
        second: &'static str,
    },
    /// Two entries nest in a way the policy does not allow.
    #[error(
        "{inner_kind} path {inner:?} lies below {outer_kind} path {outer:?}; only a hidden path may sit below a read-only path"
    )]
    Overlap {
        /// The enclosing path.
        outer: PathBuf,
        /// Which list the enclosing path is in.
        outer_kind: &'static str,
        /// The nested path.
        inner: PathBuf,
        /// Which list the nested path is in.
        inner_kind: &'static str,
    },
    /// Two entries resolve (through symlinks) to paths that overlap.
    #[error(transparent)]
    ResolvedOverlap(Box<ResolvedOverlap>),
    /// The path does not exist in the workspace.
    #[error("policy path {path:?} does not exist in workspace {workspace:?}")]
    NotFound {
        /// The offending path.
        path: PathBuf,
        /// The workspace.
        workspace: PathBuf,
    },
    /// A symlink made the path leave the workspace.
    #[error("policy path {path:?} resolves to {resolved:?}, outside workspace {workspace:?}")]
    EscapesWorkspace {
        /// The offending path.
        path: PathBuf,
        /// Where it resolves.
        resolved: PathBuf,
        /// The workspace.
        workspace: PathBuf,
    },
    /// The path resolves to the workspace root itself.
    #[error("policy path {path:?} resolves to the workspace root {workspace:?} itself")]
    IsWorkspaceRoot {
        /// The offending path.
        path: PathBuf,
        /// The workspace.
        workspace: PathBuf,
    },
    /// `[sandbox] widen` names a path that is not a default protection.
    #[error(
        "[sandbox] widen names {path:?}, which is not a default protection of this project (defaults: agent.toml, .env, .env.* at the root; .git, vibesys.toml, .vibesys)"
    )]
    NotADefault {
        /// The path named.
        path: PathBuf,
    },
    /// A protected file has a second hard link: its content could be read
    /// or changed through the other name.
    #[error(
        "policy path {path:?} is a {access} file with {links} hard links{}; its content would stay reachable through the other name: remove the extra link or copy the file (cp --remove-destination)",
        other.as_ref().map(|o| format!(" (another is {o:?}, in the project)")).unwrap_or_else(|| " (the others lie outside the project)".into())
    )]
    HardLinked {
        /// The offending path.
        path: PathBuf,
        /// `read-only` or `hidden`.
        access: &'static str,
        /// The link count.
        links: u64,
        /// Another name of the file inside the workspace, when one was found.
        other: Option<PathBuf>,
    },
    /// A file inside a hidden directory has a second hard link: its content
    /// could be read through the other name.
    #[error(
        "hidden directory {dir:?} holds {file:?}, a file with {links} hard links{}; its content would stay readable through the other name: remove the extra link or copy the file (cp --remove-destination)",
        other.as_ref().map(|o| format!(" (another is {o:?}, in the project)")).unwrap_or_else(|| " (no other name was found in the project)".into())
    )]
    HiddenHardLinked {
        /// The hidden directory, as written in the policy.
        dir: PathBuf,
        /// The file, relative to the workspace.
        file: PathBuf,
        /// The link count.
        links: u64,
        /// Another name of the file inside the workspace, when one was found.
        other: Option<PathBuf>,
    },
    /// A hidden directory holds more entries than the hard-link check walks.
    #[error(
        "hidden directory {dir:?} holds more than {limit} entries, more than vibesys checks for hard-linked files: move what it holds out of the project, or hide smaller directories"
    )]
    HiddenTooLarge {
        /// The hidden directory, as written in the policy.
        dir: PathBuf,
        /// The bound on the walk.
        limit: usize,
    },
    /// The path is neither a regular file nor a directory.
    #[error(
        "policy path {path:?} (resolving to {resolved:?}) is a {found}, not a regular file or directory"
    )]
    UnsupportedType {
        /// The offending path.
        path: PathBuf,
        /// Where it resolves.
        resolved: PathBuf,
        /// What was found (fifo, socket, device...).
        found: &'static str,
    },
    /// The workspace itself is unusable.
    #[error("workspace {path:?} is not a usable directory: {reason}")]
    BadWorkspace {
        /// The workspace path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// An I/O error while resolving a path.
    #[error("cannot resolve policy path {path:?}: {source}")]
    Io {
        /// The offending path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// Two policy entries that overlap once symlinks are resolved.
#[derive(Debug, thiserror::Error)]
#[error(
    "{first_kind} path {first:?} and {second_kind} path {second:?} overlap after resolving symlinks (they resolve to {first_resolved:?} and {second_resolved:?})"
)]
pub struct ResolvedOverlap {
    /// The first entry as written.
    pub first: PathBuf,
    /// Its list.
    pub first_kind: &'static str,
    /// Where it resolves, relative to the workspace.
    pub first_resolved: PathBuf,
    /// The second entry as written.
    pub second: PathBuf,
    /// Its list.
    pub second_kind: &'static str,
    /// Where it resolves, relative to the workspace.
    pub second_resolved: PathBuf,
}

/// Every failure vs-sandbox reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The project path policy is invalid.
    #[error("invalid policy: {0}")]
    Policy(#[from] PolicyError),
    /// The requested confinement cannot be had here.
    #[error(transparent)]
    Unavailable(#[from] SandboxUnavailableError),
    /// `VIBESYS_AGENT_SANDBOX` (or `--confine`) holds a value we do not know.
    #[error(
        "unknown sandbox mode {value:?} in {source_name}; expected one of auto, bwrap, landlock, or 0/false/off/no to disable (case and spaces ignored; Docker is chosen with --confine docker)"
    )]
    UnknownMode {
        /// The value as given.
        value: String,
        /// Where it came from (variable or flag).
        source_name: &'static str,
    },
    /// The resolver refused the combination asked for.
    #[error(transparent)]
    Refused(#[from] ConfineRefusal),
    /// A backend cannot confine this workspace safely.
    #[error("{backend} cannot confine workspace {workspace:?}: {reason}")]
    UnsafeWorkspace {
        /// The backend.
        backend: &'static str,
        /// The workspace.
        workspace: PathBuf,
        /// Why.
        reason: String,
    },
    /// A path the plan binds changed between the check and the mount (a
    /// concurrent process swapped it): nothing was started.
    #[error(
        "refusing to confine: {path:?} {reason}; a process may be racing the sandbox set-up (nothing was started)"
    )]
    RaceDetected {
        /// The path.
        path: PathBuf,
        /// What was found.
        reason: String,
    },
    /// A host device node asked for cannot be bound (not a character
    /// device below `/dev/`, or reached through a symlink): nothing was
    /// started.
    #[error("refusing to bind device {path:?}: it {reason}")]
    Device {
        /// The device path as given.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The command to confine was empty or unusable.
    #[error("invalid command: {0}")]
    InvalidCommand(String),
    /// The Docker backend failed.
    #[error(transparent)]
    Docker(#[from] crate::docker_error::DockerError),
    /// A command runner failed to run or observe a command.
    #[error(transparent)]
    Runner(#[from] crate::runner::RunnerError),
    /// The backend is not compiled for this operating system.
    #[error("the {backend} backend is not supported on this operating system")]
    UnsupportedPlatform {
        /// The backend.
        backend: &'static str,
    },
    /// The backend cannot apply what the request asks for.
    #[error("the {backend} backend cannot confine this: {reason}")]
    Unsupported {
        /// The backend.
        backend: &'static str,
        /// What it cannot do, and what to use instead.
        reason: String,
    },
    /// An operating-system call failed while preparing confinement.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A combination the confinement resolver (`crate::resolve`) refuses,
/// with the words the operator reads; `variable` is
/// `VIBESYS_AGENT_SANDBOX`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfineRefusal {
    /// `--confine` other than `auto`/`docker` where the run environment
    /// runs the agent in its container.
    #[error(
        "--confine applies to the host run environment; --run-environment {environment} runs the session in a container"
    )]
    FlagInContainer {
        /// The run environment, as written.
        environment: String,
    },
    /// Confinement disabled where the run environment runs the agent in
    /// its container.
    #[error(
        "refusing the session: agent confinement is disabled ({variable}=off) and the {environment} run environment never runs an agent unconfined"
    )]
    AgentUnconfined {
        /// The operator's variable.
        variable: &'static str,
        /// The run environment, as written.
        environment: String,
    },
    /// Confinement disabled for a build.
    #[error(
        "refusing to build: agent confinement is disabled ({variable}=off) and a candidate build never runs unconfined, with or without --no-require-enforcement; unset {variable} or set it to auto, bwrap or landlock"
    )]
    BuildUnconfined {
        /// The operator's variable.
        variable: &'static str,
    },
    /// Docker asked for a build on the host.
    #[error(
        "{variable}=docker does not apply to builds in the host run environment; use --confine bwrap or landlock, or --run-environment docker"
    )]
    BuildDockerOnHost {
        /// The operator's variable.
        variable: &'static str,
    },
    /// A host mechanism asked for a build the run environment confines in
    /// its container.
    #[error(
        "--confine {flag} applies to the host run environment; the {environment} run environment confines the build in its container (pass --run-environment host to use it)"
    )]
    BuildFlagInContainer {
        /// The flag given (`bwrap`, `landlock`).
        flag: &'static str,
        /// The run environment.
        environment: String,
    },
}

/// The requested confinement cannot be had; the agent is not launched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("sandbox unavailable: {mechanism}: {reason}; {fix}")]
pub struct SandboxUnavailableError {
    /// The mechanism that was asked for.
    pub mechanism: String,
    /// What is missing.
    pub reason: String,
    /// How to fix it.
    pub fix: String,
}

impl SandboxUnavailableError {
    /// Builds the error.
    pub fn new(
        mechanism: impl Into<String>,
        reason: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            mechanism: mechanism.into(),
            reason: reason.into(),
            fix: fix.into(),
        }
    }
}
