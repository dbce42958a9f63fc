//! Which host mechanism confines a run's agent or a trusted build: the
//! operator's choice (a flag, `VIBESYS_AGENT_SANDBOX`) put to the
//! confinement resolver ([`OperatorChoice::resolve`]) with enforcement
//! required, checked before anything is recorded, checked out or run.

use std::ffi::OsStr;

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

/// The host mechanism of a run's agent, from `VIBESYS_AGENT_SANDBOX`
/// (`variable`); a run never runs its agent unconfined. A host-only
/// accelerator `backend` (Metal) runs under the platform's own mechanism
/// (`auto`: Seatbelt on macOS) only.
pub fn agent_host_mode(
    backend: AcceleratorBackend,
    variable: Option<&OsStr>,
) -> Result<ConfineMode, ConfineChoiceError> {
    let resolved = OperatorChoice::read(ConfineMode::Auto, variable)?.resolve(
        Purpose::Agent,
        RunPlace::Host,
        Enforcement::Required,
    )?;
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
/// `flag` (`auto`, `bwrap`, `landlock`) and `VIBESYS_AGENT_SANDBOX`
/// (`variable`); a build never runs unconfined.
pub fn build_host_mode(
    flag: ConfineMode,
    variable: Option<&OsStr>,
    environment: RunEnvironment,
) -> Result<ConfineMode, ConfineChoiceError> {
    let resolved = OperatorChoice::read(flag, variable)?.resolve(
        Purpose::Build,
        environment.confine_place(environment.name()),
        Enforcement::Required,
    )?;
    Ok(resolved.mode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unconfined_agent_is_refused() {
        let refused = agent_host_mode(AcceleratorBackend::default(), Some(OsStr::new("off")));
        assert!(refused.is_err(), "{refused:?}");
    }
}
