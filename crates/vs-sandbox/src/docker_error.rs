//! Why the Docker backend failed: [`DockerError`]. The backend is the
//! crate vs-docker, above this one; its error lives here so that the
//! crate's error (`crate::error::SandboxError::Docker`) names it, and a
//! caller matches it as one `SandboxError` whichever backend failed.

use std::path::PathBuf;

/// When the run's container ended, as [`DockerError::ContainerEnded`]
/// says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndPhase {
    /// While it started or ran its first, attached command: the image
    /// is the likely cause.
    Start,
    /// While a framework command ran in it through `execute`.
    Command,
}

impl EndPhase {
    fn what(self) -> &'static str {
        match self {
            Self::Start => "exited at start",
            Self::Command => "ended while the command ran",
        }
    }

    fn advice(self) -> &'static str {
        match self {
            Self::Start => {
                "check that the image has /bin/sh (and the command server, when used) and that it starts"
            }
            Self::Command => "the command has no result",
        }
    }
}

/// Why the Docker backend failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DockerError {
    /// An Engine API call failed.
    #[error("docker engine: {operation} failed: {message}")]
    Engine {
        /// The call.
        operation: &'static str,
        /// The Engine's (or the client's) message.
        message: String,
    },
    /// The run's container's main process ended: right after it started
    /// (a broken image), or while one of the framework's commands ran in
    /// it (killed, out of memory), which then has no result of its own.
    #[error(
        "the run's container {container} {} ({}){}; {}",
        phase.what(),
        exit_code.map_or_else(|| "exit code unknown".to_owned(), |c| format!("exit code {c}")),
        if output.is_empty() { String::new() } else { format!(", after printing: {output}") },
        phase.advice()
    )]
    ContainerEnded {
        /// The container ID.
        container: String,
        /// When it ended.
        phase: EndPhase,
        /// Its main process's exit code, when the Engine reported it.
        exit_code: Option<i64>,
        /// The end of what it printed.
        output: String,
    },
    /// The pinned image is not in the Engine.
    #[error(
        "image {image} is not loaded: expected {expected}, found {found}; load it with `vibesys image load ARCHIVE` (scripts/images.sh builds the pinned images into target/images/NAME.tar)"
    )]
    ImageMissing {
        /// The image name in the lock.
        image: String,
        /// The pinned digest(s).
        expected: String,
        /// What the Engine holds under the image's name.
        found: String,
    },
    /// The Engine's image differs from the pin (the error names both
    /// digests).
    #[error("{source}")]
    ImageMismatch {
        /// What [`vs_pin::Pin::check`] found.
        source: Box<vs_pin::Error>,
    },
    /// An Engine call did not answer in time.
    #[error("docker engine: {operation} did not answer within {seconds} s")]
    Timeout {
        /// The call.
        operation: &'static str,
        /// The time allowed.
        seconds: u64,
    },
    /// The Engine answered something this client cannot read.
    #[error("docker engine: {operation} answered something unreadable: {reason}")]
    EngineAnswer {
        /// The call.
        operation: &'static str,
        /// What is wrong with the answer.
        reason: String,
    },
    /// `load` was given something that is not an archive file.
    #[error(
        "{path:?} is not an archive file: `image load` takes an oci-archive, docker-archive or the default hybrid archive"
    )]
    NotAnArchive {
        /// The path given.
        path: PathBuf,
    },
    /// An archive could not be read while it was streamed.
    #[error("cannot read {path:?}: {source}")]
    Read {
        /// The archive.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The Engine refused an archive.
    #[error(
        "the Engine refused {path:?}: {message} (Docker's classic image store loads docker-archives and the default hybrid archive, not plain oci-archives)"
    )]
    LoadRefused {
        /// The archive.
        path: PathBuf,
        /// The Engine's message.
        message: String,
    },
    /// After a load the Engine reported no image that could be checked.
    #[error("the Engine did not report image {image} after loading {path:?} (it said: {reported})")]
    NotLoaded {
        /// The image name in the lock.
        image: String,
        /// The archive.
        path: PathBuf,
        /// The references the Engine reported, comma-separated.
        reported: String,
    },
    /// The run id cannot name a container.
    #[error(
        "invalid run id {value:?}: use 1 to 64 letters, digits, `_`, `.` or `-`, starting with a letter or digit"
    )]
    InvalidRunId {
        /// The value given.
        value: String,
    },
    /// The command server cannot be used.
    #[error("the command server {path:?} cannot be used: {reason}")]
    CommandServer {
        /// The executable given.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A mask could not be created.
    #[error("cannot prepare the mask {path:?}: {source}")]
    Mask {
        /// The mask path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}
