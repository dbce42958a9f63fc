//! Which host mechanism confines a run's agent or a trusted build: the
//! operator's choice (a flag, `VIBESYS_AGENT_SANDBOX`) put to the
//! confinement resolver ([`OperatorChoice::resolve`]) with enforcement
//! required, checked before anything is recorded, checked out or run.

use vs_sandbox::controls::SANDBOX_ENV;
use vs_sandbox::{
    ConfineMode, Enforcement, OperatorChoice, Purpose, RunPlace, SandboxError,
    SandboxUnavailableError,
};

use crate::environment::RunEnvironment;
use crate::run::accelerator::AcceleratorBackend;

/// Why no host mechanism was chosen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfineChoiceError {
    /// The choice is invalid or refused for this place.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The choice would leave the agent unconfined.
    #[error(transparent)]
    Unconfined(#[from] SandboxUnavailableError),
    /// A host-only accelerator backend runs only under the platform's own
    /// mechanism.
    #[error(
        "refusing to run: the accelerator backend {backend} runs the agent under Seatbelt (auto); {SANDBOX_ENV}={mode} does not confine it"
    )]
    HostOnlyBackend {
        /// The backend's name.
        backend: &'static str,
        /// The mechanism asked for.
        mode: &'static str,
    },
}

/// The host mechanism of a run's agent, from the operator's `choice`
/// (`VIBESYS_AGENT_SANDBOX`: [`OperatorChoice::from_env`]); a run never
/// runs its agent unconfined. A host-only
/// accelerator `backend` (Metal) runs under the platform's own mechanism
/// (`auto`: Seatbelt on macOS) only.
pub fn agent_host_mode(
    backend: AcceleratorBackend,
    choice: OperatorChoice,
) -> Result<ConfineMode, ConfineChoiceError> {
    let resolved = choice.resolve(Purpose::Agent, RunPlace::Host, Enforcement::Required)?;
    if backend.is_host_only() && !matches!(resolved.mode, ConfineMode::Auto | ConfineMode::Off) {
        return Err(ConfineChoiceError::HostOnlyBackend {
            backend: backend.name(),
            mode: resolved.mode.name(),
        });
    }
    // SandboxUnavailableError: a run never launches an agent unconfined.
    resolved.refuse_unconfined()?;
    Ok(resolved.mode)
}

/// The host mechanism of a trusted build in `environment`, from the
/// operator's `choice` (the flag, `auto`, `bwrap` or `landlock`, and
/// `VIBESYS_AGENT_SANDBOX`); a build never runs unconfined.
pub fn build_host_mode(
    choice: OperatorChoice,
    environment: RunEnvironment,
) -> Result<ConfineMode, ConfineChoiceError> {
    let resolved = choice.resolve(
        Purpose::Build,
        environment.confine_place(environment.name()),
        Enforcement::Required,
    )?;
    Ok(resolved.mode)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn an_unconfined_agent_is_refused() {
        let off = OperatorChoice::read(ConfineMode::Auto, Some(OsStr::new("off"))).unwrap();
        let refused = agent_host_mode(AcceleratorBackend::default(), off);
        assert!(refused.is_err(), "{refused:?}");
    }
}
