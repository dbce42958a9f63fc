//! The errors of the modal and skypilot run environments.

use std::path::PathBuf;

/// What can go wrong when an evaluation is dispatched to a service.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The operator's `vibesys.toml` has an invalid `[check]`, `[measure]`,
    /// `[skypilot]` or `[modal]` value; `key` names it.
    #[error("invalid {path}: {key}: {reason}")]
    InvalidConfig {
        /// The configuration file.
        path: PathBuf,
        /// The offending key (`skypilot.region`, `modal`, ...).
        key: String,
        /// Why it is refused.
        reason: String,
    },
    /// `[check]` or `[measure]` is missing from the operator's `vibesys.toml`.
    #[error(
        "{path} has no [{table}] table; declare argv = [...] (and optionally timeout_secs) under [{table}]"
    )]
    EvaluationNotConfigured {
        /// The configuration file.
        path: PathBuf,
        /// `check` or `measure`.
        table: &'static str,
    },
    /// The service's client is not installed where vibesys looks for it.
    #[error(
        "the {service} client is not installed: {program} not found; install it with scripts/remote-clients.sh (VIBESYS_TOOLS={tools})"
    )]
    ClientMissing {
        /// `Modal` or `SkyPilot`.
        service: &'static str,
        /// The executable looked for.
        program: PathBuf,
        /// The tool directory.
        tools: PathBuf,
    },
    /// The tool directory lies inside the project, where an agent could
    /// write the client that vibesys runs on the host.
    #[error(
        "refusing the tool directory {tools}: it is inside the project {project}, where the agent can write; set VIBESYS_TOOLS to a directory outside every project"
    )]
    ToolsInsideProject {
        /// The tool directory.
        tools: PathBuf,
        /// The project.
        project: PathBuf,
    },
    /// The workdir to send holds the run's record (or lies inside it).
    #[error(
        "refusing to send {workdir} to the service: it overlaps the run record {runs}; pass a checkout of the measured commit"
    )]
    WorkdirHoldsRecord {
        /// The workdir.
        workdir: PathBuf,
        /// The runs directory.
        runs: PathBuf,
    },
    /// The client refused because a login or credential is missing.
    #[error(
        "{service} refused: missing {missing}; run `{fix}` on the host (the client said: {said})"
    )]
    NotLoggedIn {
        /// `Modal` or `SkyPilot`.
        service: &'static str,
        /// What is missing.
        missing: &'static str,
        /// The command that fixes it.
        fix: String,
        /// The client's own words (one line, bounded).
        said: String,
    },
    /// The client could not reach the service or its catalog.
    #[error(
        "{service} could not reach the network ({said}); check this host's connection to the service"
    )]
    Unreachable {
        /// `Modal` or `SkyPilot`.
        service: &'static str,
        /// The client's own words (one line, bounded).
        said: String,
    },
    /// The client failed for another reason.
    #[error(
        "{program} exited with {status} before the evaluation reported a result: {said}; its output is in {log}"
    )]
    ClientFailed {
        /// The client executable.
        program: String,
        /// Its exit status.
        status: String,
        /// The last line it printed (bounded).
        said: String,
        /// Where its whole (bounded) output was kept.
        log: PathBuf,
    },
    /// The client ran longer than the evaluation's time limit.
    #[error("{program} ran longer than {secs} s and was stopped; its output is in {log}")]
    TimedOut {
        /// The client executable.
        program: String,
        /// The limit.
        secs: u64,
        /// Where its output was kept.
        log: PathBuf,
    },
    /// The client was interrupted (SIGINT or SIGTERM) and stopped.
    #[error("interrupted; {program} was stopped{teardown}")]
    Interrupted {
        /// The client executable.
        program: String,
        /// What was torn down.
        teardown: String,
    },
    /// The evaluation's result could not be read back.
    #[error("invalid result from {service}: {reason}")]
    InvalidResult {
        /// `Modal` or `SkyPilot`.
        service: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// Starting or waiting for the client failed.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The client executable.
        program: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}
