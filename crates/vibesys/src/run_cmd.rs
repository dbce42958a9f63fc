//! `vibesys run start|status|resume`: the run entry point. Parses, builds
//! the run environment's [`RunHost`] (how the agent is confined, which
//! runner evaluates) and calls `vs_runtime::run`, which does the rest.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use vs_runtime::run::accelerator::AcceleratorBackend;
use vs_runtime::run::{
    AgentOutcome, CandidateContext, CandidateState, EvalPlace, Evaluator, HostError, ImageRecord,
    PhaseRecord, PhaseStatus, RunHost, RunRecord, RunState, StartRequest,
    status::{RunStatus, metric_value, run_status},
};
use vs_runtime::run_host::{LocalHost, Placement, PlacementRequest};
use vs_runtime::task::EvalCommand;
use vs_runtime::{RunEnvironment, RunId, StateLayout};
use vs_sandbox::controls::SANDBOX_ENV;
use vs_sandbox::runner::CancellationToken;
use vs_sandbox::{ConfineMode, Confinement, Enforcement};

use crate::env_args::RunEnvArgs;
use crate::output::{print_json, print_text};
use crate::project::{helper_exe, host_env};

/// Exit status of a run stopped by Ctrl-C or SIGTERM (resumable).
const EXIT_INTERRUPTED: u8 = 130;

/// `vibesys run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(subcommand)]
    command: RunCommand,
}

#[derive(Debug, Subcommand)]
enum RunCommand {
    /// Start a run: N candidates, each an agent's turn in its own worktree, then the gate, the trusted build, check and measure.
    Start(StartArgs),
    /// Show a run's candidates, best first (the newest run without ID).
    Status {
        /// The run id (default: the newest run).
        #[arg(value_name = "ID")]
        run: Option<String>,
        /// The project directory (default: the current directory).
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
        /// Print run.json and every candidate record as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Continue a run's unfinished candidates in the environment it recorded.
    Resume {
        /// The run id.
        #[arg(value_name = "ID")]
        run: String,
        /// The project directory (default: the current directory).
        #[arg(long, value_name = "DIR")]
        project: Option<PathBuf>,
    },
}

/// Arguments of `vibesys run start`.
#[derive(Debug, Args)]
#[command(after_help = "\
The task comes from the project's own vibesys.toml (never a candidate's copy):
  [task]    objective = \"...\"  protected = [\"evaluator\", ...]  (read-only to the agent, gated)
  [check]   argv = [...]  timeout_secs = 600      (trusted: exit 0 = correct)
  [measure] argv = [...]  timeout_secs = 600  metric = \"NAME\"  goal = \"min\"|\"max\"
            (trusted: prints one JSON object of metrics; optional)
  [gate]    protect = [...]                       (gated only: changes fail the candidate)
  [build]   argv = [...]  outputs = [...]         (optional: the trusted build)
Unknown keys are an error. Missing run state is prepared first (as `vibesys state init`,
said once on stderr); a run that cannot start (no pinned image loaded, no cluster, ...) is
refused before anything is written. The run's record is .vibesys/state/runs/ID/ (run.json first,
candidates/N.json, logs/); the agent reads the objective at
.vibesys/state/agent-visible/ID/objective.md (also VIBESYS_OBJECTIVE; VIBESYS_RUN_ID and
VIBESYS_CANDIDATE are set too). Each candidate works in its own worktree;
the agent is confined with enforcement required (docker, modal, skypilot, slurm: a
container from the pinned editor image, never with devices for modal, skypilot and slurm;
slurm also mounts the candidate's own agent socket of the run's Slurm broker; host:
bubblewrap or Landlock). Then, outside confinement, vibesys commits its changes (hardened
git, bounded by [task] commit_timeout_secs, commit_max_file_bytes, commit_max_total_bytes;
kept as refs/vibesys/runs/ID/N), checks the protected paths against the baseline, runs
[build] confined, and runs check and measure confined in a fresh checkout of the commit
holding the build's verified outputs, with a fresh empty HOME and no network unless
[check]/[measure] network = true: in a fresh container through the command server
(docker), under bubblewrap or Landlock (host), as Slurm jobs through the run's broker
(slurm: needs a static vibesys, vibesys-static beside this one or
VIBESYS_COMMAND_SERVER), or on the service with the
candidate's commit (modal, skypilot: the client from scripts/remote-clients.sh,
[modal]/[skypilot] of vibesys.toml, [measure] required; its record in runs/ID/remote/N/;
a refusal such as a missing login fails that candidate, naming it). Progress goes to
stderr: a live line per candidate on a terminal, a plain line per phase when piped.
Ctrl-C stops every candidate; `vibesys run resume ID` continues.
[vibesys] accelerator_backend = \"metal\" (Metal exists only on a macOS host): on macOS the
agent runs in host under Seatbelt, whatever --run-environment says; elsewhere in docker,
whose container start fails naming why.

Exit status: 0 the run finished (see the table for each candidate); 130 interrupted
(resumable); 125 vibesys could not run it.")]
pub struct StartArgs {
    /// codex, claude, gemini, or `custom` (the command after --).
    #[arg(long, value_name = "NAME")]
    provider: String,
    /// How many candidates.
    #[arg(long, default_value_t = 1, value_name = "N")]
    candidates: u32,
    /// How many candidates run at once.
    #[arg(long, default_value_t = 1, value_name = "N")]
    jobs: u32,
    #[command(flatten)]
    env: RunEnvArgs,
    /// The prompt (default: read the objective file).
    #[arg(long, value_name = "TEXT")]
    prompt: Option<String>,
    /// The editor image (a lock name, name:tag or pinned ID; default VIBESYS_DOCKER_IMAGE or vibesys-editor).
    #[arg(long, value_name = "REF")]
    image: Option<String>,
    /// The project directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// Restrict the agent's network to this host (repeatable; adds to
    /// [sandbox] allow_hosts; the provider's API host joins): HOST,
    /// HOST:PORT, *.DOMAIN or an address. Refused hosts are counted in
    /// `run status` and listed in its --json.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    allow_host: Vec<String>,
    /// For `custom`: the agent command.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

/// Runs `vibesys run`.
pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    match args.command {
        RunCommand::Start(a) => start(a),
        RunCommand::Status { run, project, json } => status(run, project, json),
        RunCommand::Resume { run, project } => resume(&run, project),
    }
}

fn layout_of(project: Option<PathBuf>) -> anyhow::Result<StateLayout> {
    let dir = match project {
        Some(p) => p,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    Ok(StateLayout::open(&dir)?)
}

/// Prepares the project's run state when it is missing, as `vibesys
/// state init` does, and says so (once: later runs find it prepared).
/// True when it was prepared now.
pub(crate) fn prepare_state(layout: &StateLayout) -> anyhow::Result<bool> {
    if layout.read_project()?.is_some() {
        return Ok(false);
    }
    let outcome = layout
        .init()
        .context("cannot prepare the run state (vibesys state init)")?;
    eprintln!(
        "vibesys: prepared the run state in {} (as `vibesys state init` does; project id {})",
        layout
            .project()
            .join(vs_runtime::state::STATE_DIR)
            .display(),
        outcome.project.project_id
    );
    Ok(true)
}

fn start(args: StartArgs) -> anyhow::Result<u8> {
    let requested = args.env.resolve()?;
    let layout = layout_of(args.project.clone())?;
    // The one decision of where the agent goes: the request, unless the
    // project's accelerator backend is host-only (no flag chooses that).
    let choice = vs_runtime::run::choose_environment(&layout, requested)?;
    if let Some(why) = &choice.why {
        eprintln!("vibesys: {why}");
    }
    let environment = choice.environment;
    let backend = choice.backend;
    let remote = matches!(
        vs_runtime::run::dispatch::evaluation_route(environment)?,
        vs_runtime::run::dispatch::EvaluationRoute::Remote(_)
    );
    // modal, skypilot: the service's client and plan are checked first
    // (they read the task from the prepared state).
    if remote {
        prepare_state(&layout)?;
        vs_runtime::run::preflight(&layout, environment)?;
    }
    vs_sandbox::egress::AllowList::parse(&args.allow_host).map_err(|errors| {
        anyhow::anyhow!(
            "invalid --allow-host: {}",
            vs_sandbox::config::list_errors(&errors)
        )
    })?;
    let is_custom = args.provider.trim().eq_ignore_ascii_case("custom");
    if is_custom && args.command.is_empty() {
        bail!("--provider custom needs the agent command after --");
    }
    if !is_custom && !args.command.is_empty() {
        bail!(
            "a command after -- is only for --provider custom; {} is launched by vibesys",
            args.provider
        );
    }
    let provider_name = if is_custom {
        "custom".to_owned()
    } else {
        args.provider.parse::<agentshim::Provider>()?.name()
    };
    let agent_argv: Vec<String> = if is_custom {
        args.command
            .iter()
            .map(|a| {
                a.to_str()
                    .map(str::to_owned)
                    .with_context(|| format!("agent argument {a:?} is not UTF-8"))
            })
            .collect::<anyhow::Result<_>>()?
    } else {
        Vec::new()
    };
    // slurm: the cluster must answer before anything is recorded.
    if environment == RunEnvironment::Slurm
        && let vs_runtime::environment::Availability::NotAvailable { reason } =
            RunEnvironment::Slurm.describe().availability
    {
        bail!("the slurm run environment is not available here: {reason}");
    }
    // The host's confinement must work before anything is recorded.
    let host_mode = match environment {
        RunEnvironment::Host => Some(host_mode(backend)?),
        _ => None,
    };
    // modal and skypilot: the agent works in the local editor container
    // (never with devices); only the evaluation goes to the service. The
    // pinned image must be loaded before anything is recorded.
    let placement = Placement::for_run(PlacementRequest {
        environment,
        image: args.image.as_deref(),
        host_mode,
        project: layout.project(),
        helper: &helper_exe()?,
        check_loaded: true,
    })
    .map_err(anyhow::Error::from_boxed)?;
    let image = placement.image().map(|pin| ImageRecord {
        name: pin.name.clone(),
        config_digest: pin.config_digest.to_string(),
    });
    // Checked and refused above: nothing was written (modal and skypilot
    // aside, whose state is prepared for their check). Now the run state.
    prepare_state(&layout)?;
    // The prompt's default names the objective by its path in the worktree.
    let request = StartRequest {
        environment,
        image,
        provider: provider_name,
        agent_argv,
        agent_env: BTreeMap::new(),
        prompt: args.prompt.clone(),
        candidates: args.candidates,
        jobs: args.jobs,
        cuda_visible_devices: std::env::var("CUDA_VISIBLE_DEVICES").ok(),
        accelerator_backend: backend,
        allow_hosts: args.allow_host.clone(),
    };
    let request = finish_request(request)?;
    let (store, mut record) = vs_runtime::run::prepare_run(&layout, request)?;
    eprintln!(
        "vibesys: run {} started: {} candidate(s) in the {} run environment, record in {}",
        record.run_id,
        record.candidates,
        record.environment,
        store.dir().display()
    );
    let host = CliHost::new(&layout, &record, placement)?;
    execute(&layout, &store, &mut record, &host)
}

/// Fills in the agent's argv for a provider (custom keeps CMD); the
/// launch is derived again, the same way, on resume.
fn finish_request(mut request: StartRequest) -> anyhow::Result<StartRequest> {
    if request.provider != "custom" {
        // Validated here, derived per run id later: record a placeholder
        // argv naming the provider.
        request.agent_argv = vec![request.provider.clone()];
    }
    Ok(request)
}

/// The host mechanism from VIBESYS_AGENT_SANDBOX; a run never runs its
/// agent unconfined. A host-only accelerator backend (Metal) runs under
/// the platform's own mechanism (`auto`: Seatbelt on macOS) only.
fn host_mode(backend: AcceleratorBackend) -> anyhow::Result<ConfineMode> {
    let resolved = vs_sandbox::OperatorChoice::read(
        ConfineMode::Auto,
        std::env::var_os(SANDBOX_ENV).as_deref(),
    )?
    .resolve(
        vs_sandbox::Purpose::Agent,
        vs_sandbox::RunPlace::Host,
        Enforcement::Required,
    )?;
    if backend.is_host_only() && !matches!(resolved.mode, ConfineMode::Auto | ConfineMode::Off) {
        bail!(
            "refusing to run: the accelerator backend {} runs the agent under Seatbelt (auto); {SANDBOX_ENV}={} does not confine it",
            backend.name(),
            resolved.mode.name()
        );
    }
    // SandboxUnavailableError: a run never launches an agent unconfined.
    resolved.refuse_unconfined()?;
    Ok(resolved.mode)
}

fn resume(run: &str, project: Option<PathBuf>) -> anyhow::Result<u8> {
    let layout = layout_of(project)?;
    let run = RunId::new(run)?;
    let (store, mut record) = vs_runtime::run::open_for_resume(&layout, &run)?;
    let host_mode = match record.environment {
        RunEnvironment::Host => Some(host_mode(record.accelerators.backend)?),
        _ => None,
    };
    let image = record.image.as_ref().map(|i| i.config_digest.clone());
    eprintln!(
        "vibesys: resuming run {} in the {} run environment (as recorded)",
        record.run_id, record.environment
    );
    let placement = Placement::for_run(PlacementRequest {
        environment: record.environment,
        image: image.as_deref(),
        host_mode,
        project: layout.project(),
        helper: &helper_exe()?,
        check_loaded: false,
    })
    .map_err(anyhow::Error::from_boxed)?;
    let host = CliHost::new(&layout, &record, placement)?;
    execute(&layout, &store, &mut record, &host)
}

fn execute(
    layout: &StateLayout,
    store: &vs_runtime::run::RunStore,
    record: &mut RunRecord,
    host: &CliHost,
) -> anyhow::Result<u8> {
    let cancel = CancellationToken::new();
    let signals = stop_on_signals(cancel.clone())?;
    let outcome = vs_runtime::run::execute_run(store, record, host, &cancel);
    signals.close();
    let outcome = outcome?;
    let status = run_status(layout, Some(&record.run_id))?;
    print_text(&table(&status))?;
    if outcome.state == RunState::Interrupted {
        eprintln!(
            "vibesys: run {} stopped; continue it with: vibesys run resume {}",
            record.run_id, record.run_id
        );
        return Ok(EXIT_INTERRUPTED);
    }
    Ok(0)
}

/// Ctrl-C and SIGTERM cancel the run: every candidate's process tree and
/// container is stopped and `run.json` stays resumable.
fn stop_on_signals(cancel: CancellationToken) -> anyhow::Result<signal_hook::iterator::Handle> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("cannot install the Ctrl-C handler")?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!("vibesys: stopping every candidate (the run stays resumable)");
            cancel.cancel();
        }
    });
    Ok(handle)
}

fn status(run: Option<String>, project: Option<PathBuf>, json: bool) -> anyhow::Result<u8> {
    let layout = layout_of(project)?;
    let run = run.map(|r| RunId::new(&r)).transpose()?;
    let status = run_status(&layout, run.as_ref())?;
    if json {
        print_json(&serde_json::to_value(&status)?)?;
    } else {
        print_text(&table(&status))?;
    }
    Ok(0)
}

/// The status table, best first.
fn table(status: &RunStatus) -> String {
    let run = &status.run;
    let state = match run.state {
        RunState::Running => "running",
        RunState::Interrupted => "interrupted",
        RunState::Finished => "finished",
    };
    let mut out = format!(
        "run {}  {}  environment {}  provider {}  {state}\n",
        run.run_id, run.created_at, run.environment, run.provider
    );
    let _ = writeln!(
        out,
        "{:<3} {:<8} {:<6} {:<7} {:<7} {:<7} {:<8} {:>9}  metrics / error",
        "#", "state", "agent", "gate", "build", "check", "measure", "time(s)"
    );
    for c in &status.candidates {
        let phase = |name: &str| match c.phases.get(name).map(|p| p.status) {
            Some(PhaseStatus::Passed) => "pass",
            Some(PhaseStatus::Failed) => "FAIL",
            Some(PhaseStatus::Skipped) => "-",
            Some(PhaseStatus::Stopped) => "stopped",
            None => "",
        };
        let state = match c.state {
            CandidateState::Passed => "passed",
            CandidateState::Failed => "failed",
            CandidateState::Running => "running",
            CandidateState::Pending => "pending",
        };
        let secs: f64 = c.phases.values().map(|p| p.duration_secs).sum();
        let agent = match c.phases.get("agent").map(|p| p.status) {
            Some(PhaseStatus::Stopped) => "stop".to_owned(),
            _ => c.agent_exit.map(|e| e.to_string()).unwrap_or_default(),
        };
        let tail = match (&c.error, &c.metrics) {
            // An error can quote what a confined command wrote.
            (Some(e), _) => crate::run_progress::terminal_safe_cut(e, 160),
            (None, Some(m)) => {
                let mut s = serde_json::Value::Object(m.clone()).to_string();
                if let Some(v) = metric_value(run, c) {
                    s = format!("{v} | {s}");
                }
                crate::run_progress::terminal_safe_cut(&s, 160)
            }
            _ => String::new(),
        };
        let tail = match c.egress_denials.len() {
            0 => tail,
            n => format!("[egress refused {n}] {tail}"),
        };
        let _ = writeln!(
            out,
            "{:<3} {:<8} {:<6} {:<7} {:<7} {:<7} {:<8} {:>9.2}  {}",
            c.candidate,
            state,
            agent,
            phase("gate"),
            phase("build"),
            phase("check"),
            phase("measure"),
            secs,
            tail
        );
    }
    out
}

/// The run environment's side of a run: the library's [`LocalHost`],
/// with the progress shown on stderr.
struct CliHost {
    host: LocalHost,
    progress: crate::run_progress::RunProgress,
}

impl CliHost {
    fn new(layout: &StateLayout, record: &RunRecord, placement: Placement) -> anyhow::Result<Self> {
        Ok(Self {
            host: LocalHost::new(layout, record, placement, helper_exe()?, host_env())
                .map_err(anyhow::Error::from_boxed)?,
            progress: crate::run_progress::RunProgress::for_stderr(),
        })
    }
}

impl RunHost for CliHost {
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
        self.progress.phase_started(candidate, phase);
    }

    fn progress(&self, candidate: u32, phase: &str, record: &PhaseRecord) {
        self.progress.phase_ended(candidate, phase, record);
    }

    fn candidate_finished(&self, record: &vs_runtime::run::CandidateRecord) {
        self.progress.candidate_finished(record);
    }
}
