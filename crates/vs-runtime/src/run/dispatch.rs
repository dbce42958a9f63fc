//! Where a run's evaluation is dispatched, by environment: the one place
//! that decides it.
//!
//! `docker` and `host` evaluate locally (the run's container through
//! `DockerSandbox::execute`, or `LocalShellRunner`). `modal` and
//! `skypilot` dispatch each candidate's committed commit to their service
//! through [`crate::remote::dispatch`]. `slurm` would evaluate through the
//! broker's trusted gates: it is not wired into `vibesys run` in this
//! build and is refused here, by name, before anything runs.

use crate::environment::RunEnvironment;
use crate::error::{Result, RuntimeError};

/// How a run's `check` and `measure` reach where they execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvaluationRoute {
    /// In the run's own container or on the host, through a local command
    /// runner supplied by the caller.
    Local,
    /// To a service, through [`crate::remote::dispatch`] with the
    /// candidate's committed commit.
    Remote(crate::remote::Service),
}

/// The evaluation route of `environment`; an error naming the
/// environment where this build cannot evaluate a run.
///
/// REMOTE DISPATCH: `modal` and `skypilot` go to their service; `slurm`
/// is wired here once the broker's trusted gates are driven by
/// `vibesys run`.
pub fn evaluation_route(environment: RunEnvironment) -> Result<EvaluationRoute> {
    match environment {
        RunEnvironment::Docker | RunEnvironment::Host => Ok(EvaluationRoute::Local),
        RunEnvironment::Slurm => Err(RuntimeError::RunEnvironmentUnavailable {
            name: environment.name(),
            reason: "`vibesys run` does not drive the broker's trusted gates yet; use `vibesys broker serve` and `vibesys broker gate`, or --run-environment docker or host".to_owned(),
        }),
        RunEnvironment::Modal => Ok(EvaluationRoute::Remote(crate::remote::Service::Modal)),
        RunEnvironment::Skypilot => Ok(EvaluationRoute::Remote(crate::remote::Service::Skypilot)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_environment_has_its_route_and_slurm_is_named() {
        for env in [RunEnvironment::Docker, RunEnvironment::Host] {
            assert_eq!(evaluation_route(env).unwrap(), EvaluationRoute::Local);
        }
        assert_eq!(
            evaluation_route(RunEnvironment::Modal).unwrap(),
            EvaluationRoute::Remote(crate::remote::Service::Modal)
        );
        assert_eq!(
            evaluation_route(RunEnvironment::Skypilot).unwrap(),
            EvaluationRoute::Remote(crate::remote::Service::Skypilot)
        );
        let e = evaluation_route(RunEnvironment::Slurm)
            .unwrap_err()
            .to_string();
        assert!(e.contains("slurm") && e.contains("not available"), "{e}");
    }
}
