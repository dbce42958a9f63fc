//! `vibesys run start` and `run resume` on this machine, as library calls:
//! every check that refuses a run before anything is written ([`start`],
//! [`resume`]), then the run itself on a [`LocalHost`] whose progress
//! goes to the caller's [`RunObserver`] ([`execute`]).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use vs_sandbox::runner::CancellationToken;
use vs_sandbox::{
    ConfineMode, Confinement, OperatorChoice, config::list_errors, egress::AllowList,
};

use crate::confine_choice::{ConfineChoiceError, agent_host_mode};
use crate::environment::{Availability, RunEnvironment};
use crate::error::RuntimeError;
use crate::id::RunId;
use crate::run::accelerator::AcceleratorBackend;
use crate::run::dispatch::{EvaluationRoute, evaluation_route};
use crate::run::status::{RunStatus, run_status};
use crate::run::{
    AgentOutcome, CandidateContext, CandidateRecord, EvalPlace, Evaluator, HostError, ImageRecord,
    PhaseRecord, RunHost, RunRecord, RunState, RunStore, StartRequest,
};
use crate::run_host::{LocalHost, Placement, PlacementRequest};
use crate::state::{STATE_DIR, StateLayout};
use crate::task::EvalCommand;

/// Why a run could not be started, resumed or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The current directory (the default project) cannot be read.
    #[error("cannot read the current directory")]
    CurrentDir(#[source] std::io::Error),
    /// The missing run state could not be prepared.
    #[error("cannot prepare the run state (vibesys state init)")]
    PrepareState(#[source] RuntimeError),
    /// An `--allow-host` pattern is invalid.
    #[error("invalid --allow-host: {0}")]
    AllowHost(String),
    /// `custom` without its command.
    #[error("--provider custom needs the agent command after --")]
    CustomNeedsCommand,
    /// A command given for a provider vibesys launches itself.
    #[error("a command after -- is only for --provider custom; {provider} is launched by vibesys")]
    CommandOnlyForCustom {
        /// The provider asked for.
        provider: String,
    },
    /// An argument of the custom command is not UTF-8.
    #[error("agent argument {0:?} is not UTF-8")]
    NonUtf8Argument(OsString),
    /// The slurm cluster does not answer.
    #[error("the slurm run environment is not available here: {reason}")]
    SlurmUnavailable {
        /// Why.
        reason: String,
    },
    /// The provider is unknown.
    #[error(transparent)]
    Provider(#[from] agentshim::AgentShimError),
    /// The host's confinement is refused.
    #[error(transparent)]
    Confinement(#[from] ConfineChoiceError),
    /// The run environment refused (image, container, broker).
    #[error(transparent)]
    Host(#[from] HostError),
    /// The run state or the run's records.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// Who watches a run: its notices (one line each, as they happen) and
/// each candidate's progress.
pub trait RunObserver: Sync {
    /// Something the operator should read (`run RUN started: ...`).
    fn notice(&self, text: &str);
    /// A candidate's phase started.
    fn phase_started(&self, candidate: u32, phase: &str);
    /// A candidate's phase ended.
    fn phase_ended(&self, candidate: u32, phase: &str, record: &PhaseRecord);
    /// A candidate's attempt ended, its record saved.
    fn candidate_finished(&self, record: &CandidateRecord);
}

/// Stops a run: every candidate's process tree and container; the run
/// stays resumable.
#[derive(Debug, Clone, Default)]
pub struct RunStop(CancellationToken);

impl RunStop {
    /// A stop not yet asked for.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the run to stop.
    pub fn stop(&self) {
        self.0.cancel();
    }
}

/// What `run start` asks for, as parsed.
#[derive(Debug)]
pub struct StartSettings<'a> {
    /// `--run-environment` (default docker).
    pub requested: Option<RunEnvironment>,
    /// `--provider`.
    pub provider: &'a str,
    /// The command after `--` (for `custom`).
    pub command: &'a [OsString],
    /// `--prompt`.
    pub prompt: Option<String>,
    /// `--candidates`.
    pub candidates: u32,
    /// `--jobs`.
    pub jobs: u32,
    /// `--image`.
    pub image: Option<&'a str>,
    /// `--allow-host`.
    pub allow_hosts: &'a [String],
    /// The vibesys executable (the confinement helper).
    pub helper: &'a Path,
}

/// A run recorded and placed, ready for [`execute`].
#[derive(Debug)]
pub struct PreparedRun {
    store: RunStore,
    record: RunRecord,
    placement: Placement,
}

/// A run as it ended: its state and its status table.
#[derive(Debug)]
pub struct FinishedRun {
    /// `interrupted` when stopped (resumable).
    pub state: RunState,
    /// Its candidates, best first.
    pub status: RunStatus,
}

/// The project directory: `project`, else the current directory.
pub fn project_dir(project: Option<&Path>) -> Result<PathBuf, LaunchError> {
    match project {
        Some(p) => Ok(p.to_path_buf()),
        None => std::env::current_dir().map_err(LaunchError::CurrentDir),
    }
}

/// The run state of `project` (default: the current directory).
pub fn open_layout(project: Option<&Path>) -> Result<StateLayout, LaunchError> {
    Ok(StateLayout::open(&project_dir(project)?)?)
}

/// Prepares the project's run state when it is missing, as `vibesys
/// state init` does. The notice to show when it was prepared now (later
/// runs find it prepared).
pub fn prepare_state(layout: &StateLayout) -> Result<Option<String>, LaunchError> {
    if layout.read_project()?.is_some() {
        return Ok(None);
    }
    let outcome = layout.init().map_err(LaunchError::PrepareState)?;
    Ok(Some(format!(
        "prepared the run state in {} (as `vibesys state init` does; project id {})",
        layout.project().join(STATE_DIR).display(),
        outcome.project.project_id
    )))
}

fn prepare_state_noting(
    layout: &StateLayout,
    observer: &dyn RunObserver,
) -> Result<(), LaunchError> {
    if let Some(notice) = prepare_state(layout)? {
        observer.notice(&notice);
    }
    Ok(())
}

/// The agent's argv as recorded: CMD for `custom`, else a placeholder
/// naming the provider (the launch is derived per run id, the same way on
/// resume); the provider's name is checked here.
fn agent_argv(provider: &str, command: &[OsString]) -> Result<(String, Vec<String>), LaunchError> {
    let is_custom = provider.trim().eq_ignore_ascii_case("custom");
    if is_custom && command.is_empty() {
        return Err(LaunchError::CustomNeedsCommand);
    }
    if !is_custom && !command.is_empty() {
        return Err(LaunchError::CommandOnlyForCustom {
            provider: provider.to_owned(),
        });
    }
    if !is_custom {
        let name = provider.parse::<agentshim::Provider>()?.name();
        return Ok((name.clone(), vec![name]));
    }
    let argv = command
        .iter()
        .map(|a| {
            a.to_str()
                .map(str::to_owned)
                .ok_or_else(|| LaunchError::NonUtf8Argument(a.clone()))
        })
        .collect::<Result<_, _>>()?;
    Ok(("custom".to_owned(), argv))
}

/// The host's mechanism, for the host run environment only.
fn host_mode(
    environment: RunEnvironment,
    backend: AcceleratorBackend,
) -> Result<Option<ConfineMode>, LaunchError> {
    match environment {
        RunEnvironment::Host => {
            let choice =
                OperatorChoice::from_env(ConfineMode::Auto).map_err(ConfineChoiceError::from)?;
            Ok(Some(agent_host_mode(backend, choice)?))
        }
        _ => Ok(None),
    }
}

/// Starts a run: chooses its environment, refuses it before anything is
/// written when it cannot start (invalid request, no cluster, host
/// confinement refused, no pinned image loaded; modal and skypilot aside,
/// whose state is prepared for their check), then prepares the run state
/// and records the run. Notices go to `observer`.
pub fn start(
    layout: &StateLayout,
    settings: StartSettings<'_>,
    observer: &dyn RunObserver,
) -> Result<PreparedRun, LaunchError> {
    // The one decision of where the agent goes: the request, unless the
    // project's accelerator backend is host-only (no flag chooses that).
    let choice = crate::run::choose_environment(layout, settings.requested)?;
    if let Some(why) = &choice.why {
        observer.notice(why);
    }
    let environment = choice.environment;
    // modal, skypilot: the service's client and plan are checked first
    // (they read the task from the prepared state).
    if matches!(evaluation_route(environment)?, EvaluationRoute::Remote(_)) {
        prepare_state_noting(layout, observer)?;
        crate::run::preflight(layout, environment)?;
    }
    AllowList::parse(settings.allow_hosts)
        .map_err(|errors| LaunchError::AllowHost(list_errors(&errors)))?;
    let (provider, agent_argv) = agent_argv(settings.provider, settings.command)?;
    // slurm: the cluster must answer before anything is recorded.
    if environment == RunEnvironment::Slurm
        && let Availability::NotAvailable { reason } = RunEnvironment::Slurm.describe().availability
    {
        return Err(LaunchError::SlurmUnavailable { reason });
    }
    // modal and skypilot: the agent works in the local editor container
    // (never with devices); only the evaluation goes to the service. The
    // pinned image must be loaded before anything is recorded.
    let placement = Placement::for_run(PlacementRequest {
        environment,
        image: settings.image,
        host_mode: host_mode(environment, choice.backend)?,
        project: layout.project(),
        helper: settings.helper,
        check_loaded: true,
    })?;
    let image = placement.image().map(|pin| ImageRecord {
        name: pin.name.clone(),
        config_digest: pin.config_digest.to_string(),
    });
    prepare_state_noting(layout, observer)?;
    let (store, record) = crate::run::prepare_run(
        layout,
        StartRequest {
            environment,
            image,
            provider,
            agent_argv,
            agent_env: BTreeMap::new(),
            prompt: settings.prompt,
            candidates: settings.candidates,
            jobs: settings.jobs,
            cuda_visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
            accelerator_backend: choice.backend,
            allow_hosts: settings.allow_hosts.to_vec(),
        },
    )?;
    observer.notice(&format!(
        "run {} started: {} candidate(s) in the {} run environment, record in {}",
        record.run_id,
        record.candidates,
        record.environment,
        store.dir().display()
    ));
    Ok(PreparedRun {
        store,
        record,
        placement,
    })
}

/// Opens `run` to continue its unfinished candidates in the environment
/// and image it recorded.
pub fn resume(
    layout: &StateLayout,
    run: &RunId,
    helper: &Path,
    observer: &dyn RunObserver,
) -> Result<PreparedRun, LaunchError> {
    let (store, record) = crate::run::open_for_resume(layout, run)?;
    let host_mode = host_mode(record.environment, record.accelerators.backend)?;
    observer.notice(&format!(
        "resuming run {} in the {} run environment (as recorded)",
        record.run_id, record.environment
    ));
    let image = record.image.as_ref().map(|i| i.config_digest.clone());
    let placement = Placement::for_run(PlacementRequest {
        environment: record.environment,
        image: image.as_deref(),
        host_mode,
        project: layout.project(),
        helper,
        check_loaded: false,
    })?;
    Ok(PreparedRun {
        store,
        record,
        placement,
    })
}

/// Runs a prepared run's unfinished candidates on this machine until they
/// end or `stop` is asked for; `helper` is the vibesys executable,
/// `host_env` the caller's environment.
pub fn execute(
    layout: &StateLayout,
    prepared: PreparedRun,
    helper: PathBuf,
    host_env: Vec<(OsString, OsString)>,
    observer: &dyn RunObserver,
    stop: &RunStop,
) -> Result<FinishedRun, LaunchError> {
    let PreparedRun {
        store,
        mut record,
        placement,
    } = prepared;
    let host = ObservedHost {
        host: LocalHost::new(layout, &record, placement, helper, host_env)?,
        observer,
    };
    let outcome = crate::run::execute_run(&store, &mut record, &host, &stop.0)?;
    Ok(FinishedRun {
        state: outcome.state,
        status: run_status(layout, Some(&record.run_id))?,
    })
}

/// A [`LocalHost`] whose progress goes to an observer.
struct ObservedHost<'a> {
    host: LocalHost,
    observer: &'a dyn RunObserver,
}

impl RunHost for ObservedHost<'_> {
    fn agent_turn(
        &self,
        c: &CandidateContext<'_>,
        cancel: &CancellationToken,
    ) -> Result<AgentOutcome, HostError> {
        self.host.agent_turn(c, cancel)
    }

    fn build_confinement(
        &self,
        c: &CandidateContext<'_>,
        checkout: &Path,
    ) -> Result<Box<dyn Confinement>, HostError> {
        self.host.build_confinement(c, checkout)
    }

    fn evaluator(
        &self,
        c: &CandidateContext<'_>,
        place: EvalPlace<'_>,
        command: &EvalCommand,
    ) -> Result<Evaluator, HostError> {
        self.host.evaluator(c, place, command)
    }

    fn phase_started(&self, candidate: u32, phase: &str) {
        self.observer.phase_started(candidate, phase);
    }

    fn progress(&self, candidate: u32, phase: &str, record: &PhaseRecord) {
        self.observer.phase_ended(candidate, phase, record);
    }

    fn candidate_finished(&self, record: &CandidateRecord) {
        self.observer.candidate_finished(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_needs_its_command_and_only_it_takes_one() {
        assert!(matches!(
            agent_argv("custom", &[]),
            Err(LaunchError::CustomNeedsCommand)
        ));
        assert!(matches!(
            agent_argv("codex", &["x".into()]),
            Err(LaunchError::CommandOnlyForCustom { .. })
        ));
        let (name, argv) = agent_argv(" Custom ", &["a".into(), "b".into()]).unwrap();
        assert_eq!(
            (name.as_str(), argv),
            ("custom", vec!["a".into(), "b".into()])
        );
    }
}
