//! `--run-environment`, as every command that takes it reads it.

use clap::Args;
use vs_runtime::RunEnvironment;

/// The run-environment selection shared by `build` and `run-env show`.
#[derive(Debug, Args)]
pub struct RunEnvArgs {
    /// Where the run executes: docker (default), host, slurm, modal, skypilot.
    #[arg(long = "run-environment", value_name = "ENV")]
    run_environment: Option<String>,
    /// Shorthand for --run-environment modal.
    #[arg(long, conflicts_with = "run_environment")]
    modal: bool,
    /// Retired: rejected with the replacement named.
    #[arg(long, hide = true)]
    docker: bool,
}

impl RunEnvArgs {
    /// `--run-environment slurm-gpu`: slurm with agent GPU jobs on.
    pub(crate) fn slurm_gpu_alias(&self) -> bool {
        self.run_environment.as_deref() == Some(vs_runtime::environment::SLURM_GPU_ALIAS)
    }

    /// The selected environment (`RunEnvironment::select`).
    pub(crate) fn resolve(&self) -> anyhow::Result<Option<RunEnvironment>> {
        let value = self.run_environment.as_deref();
        Ok(RunEnvironment::select(value, self.modal, self.docker)?)
    }
}
