//! `internal-host-job`: an agent job's confinement on the Slurm compute
//! node, from what its broker decided ([`HostJob`]): the project's policy,
//! the job's network, bubblewrap always required.

use std::ffi::OsString;
use std::path::PathBuf;

use vs_sandbox::config::{CONFIG_FILE, ConfigError, PolicyConfig};
use vs_sandbox::egress::ProxyError;
use vs_sandbox::helper::{HostJob, JobNetwork};
use vs_sandbox::{
    AnySandbox, ConfineMode, Enforcement, PolicyError, SandboxError, Workspace, launch, select,
};

use super::{BrokerError, HostJobConfinement, allocated_gpu_devices};
use crate::error::RuntimeError;
use crate::settings::{PolicyFlags, ProjectSettings, StatePaths};

/// Why an agent job was not started on its compute node.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostJobError {
    /// The project's `vibesys.toml` names an allow-list the broker did
    /// not start with: the job is refused rather than run open.
    #[error(
        "{config} names an egress allow-list ([sandbox] allow_hosts) the run's broker did not start with; restart the broker (the session or the run) to apply it"
    )]
    StaleAllowList {
        /// The project's `vibesys.toml`.
        config: PathBuf,
    },
    /// This executable, the confinement helper, cannot be located.
    #[error("cannot locate the vibesys executable (needed as the sandbox helper)")]
    HelperExe(#[source] std::io::Error),
    /// The selection did not give bubblewrap.
    #[error("an agent job is confined by bubblewrap, which was not selected")]
    NotBwrap,
    /// The project's `vibesys.toml` is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The workspace cannot be opened.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The project's settings are invalid.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The egress proxy did not start.
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    /// The job's devices or plan were refused.
    #[error(transparent)]
    Broker(#[from] BrokerError),
    /// The sandbox could not be selected or launched.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
}

/// Runs the agent job confined ([`HostJobConfinement`], enforcement always
/// required) with `host_env` as the caller's environment and this
/// executable as the confinement helper; returns the job's exit status
/// (low 8 bits).
pub fn run(job: &HostJob, host_env: &[(OsString, OsString)]) -> Result<u8, HostJobError> {
    let mut project = job_settings(job)?;
    if job.network == JobNetwork::Off {
        project.network = false;
    }
    // The allow-list's one door, outside the job's bubblewrap: lives as
    // long as the job; each refused host is named on the job's stderr.
    let proxy = project.start_egress(ConfineMode::Bwrap)?;
    let helper = std::env::current_exe().map_err(HostJobError::HelperExe)?;
    let mut request = project.sandbox_request(&job.argv[0], host_env, Some(&job.cwd), helper);
    request.egress = project.egress_door(proxy.as_ref());
    request.devices = Vec::new();
    request.bwrap_program = job.bwrap.clone();
    let Some(AnySandbox::Host(sandbox)) =
        select(request, ConfineMode::Bwrap, Enforcement::Required)?
    else {
        return Err(HostJobError::NotBwrap);
    };
    let step_gpus = std::env::var("SLURM_STEP_GPUS")
        .or_else(|_| std::env::var("SLURM_JOB_GPUS"))
        .ok();
    let devices = allocated_gpu_devices(&job.gpu_devices, step_gpus.as_deref())?;
    let confinement = HostJobConfinement::new(&sandbox, &devices, &job.env)?;
    let code = launch::run_bwrap(confinement.plan(), &job.argv, sandbox.process_limit())?;
    drop(proxy);
    Ok(u8::try_from(code & 0xff).unwrap_or(1))
}

/// The job's settings: the project's policy with the broker's network, the
/// task's protected paths read-only, as on the host for its workspace.
fn job_settings(job: &HostJob) -> Result<ProjectSettings, HostJobError> {
    let mut config = PolicyConfig::load(&job.project)?;
    // The network is the broker's (decided once from the operator's
    // settings): an allow-list the file names now but the broker did not
    // pass would be dropped, so the job is refused rather than run open.
    if job.network == JobNetwork::Open && !config.allow_hosts.is_empty() {
        return Err(HostJobError::StaleAllowList {
            config: job.project.join(CONFIG_FILE),
        });
    }
    config.allow_hosts = match &job.network {
        JobNetwork::AllowList(hosts) => hosts.clone(),
        JobNetwork::Open | JobNetwork::Off => Vec::new(),
    };
    // The task's protected paths are read-only in every job.
    let protected = crate::settings::task_protected_paths(&job.project)?;
    let workspace = Workspace::open(&job.workspace)?;
    let settings = if crate::run::evaluation::is_eval_checkout(&job.project, workspace.root()) {
        // A candidate's evaluation (check, measure) in its fresh checkout:
        // the same policy as on the host.
        ProjectSettings::for_checkout(workspace, config, &protected)?
    } else if job.workspace != job.project {
        // A run's candidate worktree: as when `vibesys run` confines the
        // candidate's agent.
        ProjectSettings::for_candidate(workspace, config, &protected, &[])?
    } else {
        let mut flags = PolicyFlags::default();
        crate::settings::add_protected(workspace.root(), &mut config, &mut flags, &protected);
        ProjectSettings::with_config(workspace, config, &flags, StatePaths::Prepare)?
    };
    Ok(settings)
}
