//! The errors of choosing a run environment.

/// Why a run environment cannot be chosen or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnvironmentError {
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
}
