//! The one error type of vs-agent.

/// Why a session could not be launched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// An operator-named extra variable is not a valid name.
    #[error("invalid environment variable name {name:?} (expected [A-Za-z_][A-Za-z0-9_]*)")]
    InvalidEnvName {
        /// The name as given.
        name: String,
    },
    /// An operator-named extra variable is a remote run environment's
    /// credential (Modal, SkyPilot, a cloud SkyPilot drives).
    #[error(
        "refusing to pass {name} to the agent: it is a credential of the modal or skypilot run environment (or a cloud SkyPilot drives), which stays on the host where vibesys runs the service's client"
    )]
    RemoteCredential {
        /// The name as given.
        name: String,
    },
    /// Confinement could not be planned or is unavailable.
    #[error(transparent)]
    Sandbox(#[from] vs_sandbox::SandboxError),
    /// Provider knowledge rejected the request.
    #[error(transparent)]
    Provider(#[from] agentshim::AgentShimError),
    /// The session cannot run in this mode from here.
    #[error("sessions with --confine {mode} are not available here: {reason}")]
    UnsupportedMode {
        /// The mode.
        mode: &'static str,
        /// Why.
        reason: String,
    },
    /// The session's private directory could not be made or written.
    #[error("cannot prepare the session directory {path:?}: {source}")]
    SessionDir {
        /// The path.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A provider's file cannot be copied for the session.
    #[error("cannot make the session's private copy of {path:?}: it {reason}")]
    PrivateCopy {
        /// The user's file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// The operator's provider settings name a command that lies where a
    /// session may write.
    #[error(
        "refusing the session: {file:?} names {command:?}, which lies in {entry:?}, writable in a session (the provider's CLI writes there): the agent could rewrite what your next run of the CLI executes; move it elsewhere (outside the state directory, or anywhere in it but the entries the CLI writes)"
    )]
    NamedCommandWritable {
        /// The settings file.
        file: std::path::PathBuf,
        /// The path it names.
        command: std::path::PathBuf,
        /// The writable entry it lies in.
        entry: std::path::PathBuf,
    },
    /// A provider settings file cannot be read to check what it names.
    #[error("cannot check {path:?} for the commands it names: {reason}")]
    Settings {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        reason: String,
    },
    /// Preparing a provider state directory failed.
    #[error("cannot prepare provider state {path:?}: {source}")]
    State {
        /// The path.
        path: std::path::PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}
