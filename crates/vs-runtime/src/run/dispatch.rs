//! Where a run's evaluation is dispatched, by environment: the one place
//! that decides it.
//!
//! `docker` and `host` evaluate locally (the run's container through
//! `DockerSandbox::execute`, or `LocalShellRunner`). `slurm` evaluates
//! through the broker's trusted gates, `modal` and `skypilot` through
//! their services: none of these is wired into `vibesys run` in this
//! build, and each is refused here, by name, before anything runs.

use crate::environment::RunEnvironment;
use crate::error::{Result, RuntimeError};

/// How a run's `check` and `measure` reach where they execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvaluationRoute {
    /// In the run's own container or on the host, through a local command
    /// runner supplied by the caller.
    Local,
}

/// The evaluation route of `environment`; an error naming the
/// environment where this build cannot evaluate a run.
///
/// REMOTE DISPATCH: `modal` and `skypilot` are wired here once their
/// dispatch (vs-runtime, branch remote-envs) is merged; `slurm` once the
/// broker's trusted gates are driven by `vibesys run`.
pub fn evaluation_route(environment: RunEnvironment) -> Result<EvaluationRoute> {
    match environment {
        RunEnvironment::Docker | RunEnvironment::Host => Ok(EvaluationRoute::Local),
        RunEnvironment::Slurm => Err(RuntimeError::RunEnvironmentUnavailable {
            name: environment.name(),
            reason: "`vibesys run` does not drive the broker's trusted gates yet; use `vibesys broker serve` and `vibesys broker gate`, or --run-environment docker or host".to_owned(),
        }),
        RunEnvironment::Modal | RunEnvironment::Skypilot => {
            Err(RuntimeError::RunEnvironmentUnavailable {
                name: environment.name(),
                reason: format!(
                    "dispatch of a run's evaluation to {} is not available in this build; use --run-environment docker or host",
                    environment.name()
                ),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn local_environments_evaluate_locally_and_the_others_are_named() {
        for env in [RunEnvironment::Docker, RunEnvironment::Host] {
            assert_eq!(evaluation_route(env).unwrap(), EvaluationRoute::Local);
        }
        for env in [
            RunEnvironment::Slurm,
            RunEnvironment::Modal,
            RunEnvironment::Skypilot,
        ] {
            let e = evaluation_route(env).unwrap_err().to_string();
            assert!(e.contains(env.name()) && e.contains("not available"), "{e}");
        }
    }
}
