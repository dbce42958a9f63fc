//! Where a run's evaluation is dispatched, by environment: the one place
//! that decides it.
//!
//! `docker` and `host` evaluate locally (the run's container through
//! `DockerSandbox::execute`, or `LocalShellRunner`). `modal` and
//! `skypilot` dispatch each candidate's committed commit to their service
//! through [`crate::remote::dispatch`]. `slurm` evaluates locally too, in
//! the sense that the caller supplies the runner: the CLI's runner sends
//! each command to the run's broker over its framework socket as a job in
//! the candidate's worktree (confined on a compute node).

use crate::environment::RunEnvironment;
use crate::error::Result;

/// How a run's `check` and `measure` reach where they execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvaluationRoute {
    /// Through a command runner supplied by the caller: the run's
    /// container, the host, or (slurm) the run's broker.
    Local,
    /// To a service, through [`crate::remote::dispatch`] with the
    /// candidate's committed commit.
    Remote(crate::remote::Service),
}

/// The evaluation route of `environment`; an error naming the
/// environment where this build cannot evaluate a run.
///
/// `modal` and `skypilot` go to their service; `slurm` goes through the
/// caller's runner (the broker's framework socket).
pub fn evaluation_route(environment: RunEnvironment) -> Result<EvaluationRoute> {
    match environment {
        RunEnvironment::Docker | RunEnvironment::Host | RunEnvironment::Slurm => {
            Ok(EvaluationRoute::Local)
        }
        RunEnvironment::Modal => Ok(EvaluationRoute::Remote(crate::remote::Service::Modal)),
        RunEnvironment::Skypilot => Ok(EvaluationRoute::Remote(crate::remote::Service::Skypilot)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_environment_has_its_route() {
        for env in [
            RunEnvironment::Docker,
            RunEnvironment::Host,
            RunEnvironment::Slurm,
        ] {
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
    }
}
