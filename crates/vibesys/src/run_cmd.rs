//! `vibesys run start|status|resume`: the run entry point. Parses, builds
//! the run environment's [`RunHost`] (how the agent is confined, which
//! runner evaluates) and calls `vs_runtime::run`, which does the rest.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use vs_agent::{prepare_state_paths, session_env_allowlist};
use vs_runtime::build_confine::{
    BuildConfinement, EvalConfineRequest, build_confinement, evaluation_confinement,
    protected_paths,
};
use vs_runtime::run::accelerator::AcceleratorBackend;
use vs_runtime::run::{
    AgentOutcome, CandidateContext, CandidateState, EvalPlace, Evaluator, HostError, ImageRecord,
    PhaseRecord, PhaseStatus, RunHost, RunRecord, RunState, StartRequest,
    status::{RunStatus, metric_value, run_status},
};
use vs_runtime::task::EvalCommand;
use vs_runtime::{RunEnvironment, RunId, StateLayout};
use vs_sandbox::controls::SANDBOX_ENV;
use vs_sandbox::docker::{DockerOptions, EnvAllowList};
use vs_sandbox::runner::CancellationToken;
use vs_sandbox::select;
use vs_sandbox::{
    CommandRunner, CommandSpec, ConfineMode, Confinement, DockerSandbox, Enforcement,
    LocalShellRunner, Workspace,
};

use crate::env_args::RunEnvArgs;
use crate::output::{print_json, print_text};
use crate::project::{PolicyArgs, helper_exe, host_env};

/// The agent's command in the container, run as `sh -c LAUNCH_SCRIPT
/// PROGRAM ARGS...` in the same `docker exec` that runs the agent (no probe
/// of its own): a `PROGRAM` that is no executable file, by path or on the
/// container's `PATH`, exits 127 with [`MISSING_PROGRAM`] on stderr, so
/// that the error names it. The search is by hand: a shell's `command -v`
/// also answers for builtins and, in busybox, for applets that have no
/// file to execute.
const LAUNCH_SCRIPT: &str = r#"case "$0" in
*/*) [ -f "$0" ] && [ -x "$0" ] || { echo "vibesys-missing-program" >&2; exit 127; } ;;
*) found=; IFS=:; for d in $PATH; do [ -f "$d/$0" ] && [ -x "$d/$0" ] && { found=1; break; }; done; unset IFS
   [ -n "$found" ] || { echo "vibesys-missing-program" >&2; exit 127; } ;;
esac
exec "$0" "$@""#;

/// What [`LAUNCH_SCRIPT`] prints when the agent's program is missing. The
/// agent could print it too, and so fail only its own candidate.
const MISSING_PROGRAM: &[u8] = b"vibesys-missing-program\n";

/// Exit status of a run stopped by Ctrl-C or SIGTERM (resumable).
const EXIT_INTERRUPTED: u8 = 130;
/// Most bytes of each of the agent's output streams kept in its log.
const AGENT_LOG_CAP: usize = 256 * 1024;

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
    // (never with devices); only the evaluation goes to the service.
    let (image, docker) = match environment {
        RunEnvironment::Docker
        | RunEnvironment::Modal
        | RunEnvironment::Skypilot
        | RunEnvironment::Slurm => {
            let options = crate::docker_cmd::base_options(
                args.image.as_deref(),
                Some(layout.project()),
                "probe".to_owned(),
            )?;
            // The pinned image must be loaded before anything is recorded.
            vs_sandbox::docker::Engine::connect()?.check_pinned(&options.image)?;
            if environment == RunEnvironment::Slurm && options.command_server.is_none() {
                bail!(crate::slurm_env::NO_STATIC_VIBESYS);
            }
            (
                Some(ImageRecord {
                    name: options.image.name.clone(),
                    config_digest: options.image.config_digest.to_string(),
                }),
                Some(args.image.clone()),
            )
        }
        _ => (None, None),
    };
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
    let mut host = CliHost::new(&layout, &record, docker.flatten(), host_mode)?;
    host.start_broker()?;
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

/// The launch of a run's agent: for a provider, its one-shot command with
/// the prompt (default: read the objective file); for custom, CMD (plus
/// the prompt as its last argument when one is given).
fn launch_of(record: &RunRecord) -> anyhow::Result<(agentshim::Provider, agentshim::Launch)> {
    if record.provider == "custom" {
        let provider = agentshim::Provider::custom(record.agent_argv.iter().map(OsString::from))?;
        let launch = match &record.prompt {
            Some(p) => provider.one_shot(p)?,
            None => provider.interactive(&[]),
        };
        return Ok((provider, launch));
    }
    let provider: agentshim::Provider = record.provider.parse()?;
    let prompt = record.prompt.clone().unwrap_or_else(|| {
        format!(
            "Read the objective in {}/objective.md and work on it in the current directory.",
            vs_runtime::run::agent_visible_rel(&record.run_id).display()
        )
    });
    let launch = provider.one_shot(&prompt)?;
    Ok((provider, launch))
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
    let mut host = CliHost::new(&layout, &record, image, host_mode)?;
    host.start_broker()?;
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

/// The run environment's side of a run, as the CLI builds it.
struct CliHost {
    project: PathBuf,
    environment: RunEnvironment,
    /// docker: the image reference (a pinned ID on resume).
    image: Option<String>,
    /// host: the mechanism.
    mode: Option<ConfineMode>,
    provider: agentshim::Provider,
    launch: agentshim::Launch,
    protected: Vec<String>,
    /// The accelerators recorded in `run.json`, applied to every agent turn.
    accelerators: vs_runtime::run::accelerator::AcceleratorPlan,
    /// `run start --allow-host`, from `run.json`.
    allow_hosts: Vec<String>,
    /// slurm: the run's broker (stopped, its jobs cancelled, when the run
    /// ends).
    broker: Option<crate::slurm_env::BrokerChild>,
    /// How many candidates the run has (one broker socket each).
    candidates: u32,
    run_id: String,
    progress: crate::run_progress::RunProgress,
}

impl CliHost {
    fn new(
        layout: &StateLayout,
        record: &RunRecord,
        image: Option<String>,
        mode: Option<ConfineMode>,
    ) -> anyhow::Result<Self> {
        let (provider, launch) = launch_of(record)?;
        Ok(Self {
            project: layout.project().to_path_buf(),
            environment: record.environment,
            image: image.or_else(|| record.image.as_ref().map(|i| i.config_digest.clone())),
            mode,
            provider,
            launch,
            protected: record.task.protected.clone(),
            accelerators: record.accelerators.clone(),
            allow_hosts: record.allow_hosts.clone(),
            broker: None,
            candidates: record.candidates,
            run_id: record.run_id.to_string(),
            progress: crate::run_progress::RunProgress::for_stderr(),
        })
    }

    /// slurm: starts the run's broker (`vibesys broker serve --run ID`);
    /// nothing elsewhere.
    fn start_broker(&mut self) -> anyhow::Result<()> {
        if self.environment != RunEnvironment::Slurm {
            return Ok(());
        }
        if let vs_runtime::environment::Availability::NotAvailable { reason } =
            RunEnvironment::Slurm.describe().availability
        {
            bail!("the slurm run environment is not available here: {reason}");
        }
        // One agent socket per candidate, each bound to its worktree: a
        // candidate's jobs never run in another's worktree or the project.
        self.broker = Some(crate::slurm_env::BrokerChild::start(
            &self.project,
            &self.run_id,
            false,
            self.candidates,
            None,
            &self.allow_hosts,
            false,
        )?);
        Ok(())
    }

    /// The candidate's policy: the project's `[sandbox]` (from the
    /// operator's vibesys.toml), the run-state paths, the defaults, and
    /// the protected paths read-only.
    ///
    /// A `[sandbox]` path the candidate's checkout does not hold (an
    /// untracked secret of the project) has nothing to protect there.
    fn policy(&self, worktree: &Path) -> anyhow::Result<crate::project::ProjectPolicy> {
        let mut config = vs_sandbox::config::PolicyConfig::load(&self.project)?;
        let exists = |p: &PathBuf| worktree.join(p).symlink_metadata().is_ok();
        config.read_only.retain(exists);
        config.hidden.retain(exists);
        let taken: Vec<&Path> = config
            .read_only
            .iter()
            .chain(&config.hidden)
            .map(PathBuf::as_path)
            .collect();
        let read_only: Vec<PathBuf> = self
            .protected
            .iter()
            .map(PathBuf::from)
            .filter(|p| worktree.join(p).symlink_metadata().is_ok())
            .filter(|p| !taken.iter().any(|t| p.starts_with(t) || t.starts_with(p)))
            .collect();
        let args = PolicyArgs {
            project: Some(worktree.to_path_buf()),
            read_only,
            hidden: Vec::new(),
            allow: Vec::new(),
            no_network: false,
            allow_host: self.allow_hosts.clone(),
        };
        let mut project = args.resolve_in(Workspace::open(worktree)?, config)?;
        // An allow-list admits the provider's own API host.
        if let Some(host) = self.provider.api_host(|v| std::env::var_os(v))? {
            project.add_provider_host(&host)?;
        }
        Ok(project)
    }

    fn docker_options(&self, container_run_id: String) -> anyhow::Result<DockerOptions> {
        crate::docker_cmd::base_options(
            self.image.as_deref(),
            Some(&self.project),
            container_run_id,
        )
    }

    /// The agent's environment: the session allow-list, the provider's
    /// launch variables, and where it stands (`VIBESYS_OBJECTIVE`,
    /// `VIBESYS_RUN_ID`, `VIBESYS_CANDIDATE`).
    fn agent_env(&self, c: &CandidateContext<'_>) -> anyhow::Result<Vec<(OsString, OsString)>> {
        let env = session_env_allowlist(std::env::vars_os(), &self.provider, &[])?;
        let mut vars = env.vars;
        for (k, v) in &self.launch.env {
            vars.push(((*k).into(), (*v).into()));
        }
        vars.push((
            "VIBESYS_OBJECTIVE".into(),
            c.objective.as_os_str().to_owned(),
        ));
        vars.push(("VIBESYS_RUN_ID".into(), c.run.run_id.as_str().into()));
        vars.push(("VIBESYS_CANDIDATE".into(), c.number.to_string().into()));
        Ok(vars)
    }

    fn turn_in_docker(
        &self,
        c: &CandidateContext<'_>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<AgentOutcome> {
        const HOST_ONLY: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR"];
        let project = self.policy(c.worktree)?;
        let mut options = self.docker_options(format!("{}-{}", c.run.run_id, c.number))?;
        options.network = project.network;
        options.chdir = Some(c.worktree.to_path_buf());
        let mut vars = self.agent_env(c)?;
        if self.environment == RunEnvironment::Slurm {
            vars.push((
                crate::slurm_env::BROKER_SOCKET_ENV.into(),
                crate::slurm_env::AGENT_SOCKET_IN_CONTAINER.into(),
            ));
        }
        let names: Vec<String> = vars
            .iter()
            .filter_map(|(k, _)| k.to_str())
            .filter(|k| !HOST_ONLY.contains(k))
            .map(str::to_owned)
            .collect();
        options.env = EnvAllowList::default().with(names);
        // A host-only accelerator backend (Metal) cannot reach any
        // container: the start fails, naming why.
        if let Some(why) = self.accelerators.backend.container_refusal() {
            bail!("cannot start the agent's container: {why}");
        }
        // Only the docker environment runs agents beside the host's
        // accelerators (a remote environment's editor is a control plane).
        if self.environment == RunEnvironment::Docker {
            options.devices = docker_devices(&self.accelerators);
        }
        // slurm: the editor container with the candidate's own agent
        // socket (the framework socket stays on the host).
        if self.environment == RunEnvironment::Slurm {
            let broker = self
                .broker
                .as_ref()
                .context("the slurm run environment's broker is not running")?;
            let socket = broker.candidate_socket(c.number).with_context(|| {
                format!(
                    "the run's broker serves no socket for candidate {}",
                    c.number
                )
            })?;
            crate::slurm_env::editor_options(&mut options, socket)?;
        }
        let program = self
            .launch
            .argv
            .first()
            .cloned()
            .context("the agent command is empty")?;
        let mut request =
            project.sandbox_request(&program, &host_env(), Some(c.worktree), helper_exe()?);
        request.docker = Some(options.clone());
        // The allow-list's one door, for the turn (the container's
        // forwarder reaches it through its socket).
        let proxy = project.start_egress(ConfineMode::Docker)?;
        request.egress = project.egress_door(proxy.as_ref());
        let sandbox = select(request, ConfineMode::Docker, Enforcement::Required)?
            .context("refusing to run the agent: no container was started")?;
        let mut argv = vec![OsString::from("sh"), "-c".into(), LAUNCH_SCRIPT.into()];
        argv.extend(self.launch.argv.iter().cloned());
        let argv = sandbox.wrap(&argv)?;
        let result = run_turn(&argv, c.worktree, &vars, cancel);
        drop(sandbox);
        let mut outcome = result?;
        outcome.egress_denials = egress_denials(proxy.as_ref());
        if outcome.exit_code == 127 && outcome.log.ends_with(MISSING_PROGRAM) {
            bail!(
                "the agent command {:?} is not on PATH in the image {} ({})",
                program,
                options.image.name,
                options.image.config_digest
            );
        }
        Ok(outcome)
    }

    fn turn_on_host(
        &self,
        c: &CandidateContext<'_>,
        cancel: &CancellationToken,
    ) -> anyhow::Result<AgentOutcome> {
        let mode = self.mode.context("no host confinement mechanism")?;
        let project = self.policy(c.worktree)?;
        let program = self
            .launch
            .argv
            .first()
            .cloned()
            .context("the agent command is empty")?;
        let path_var = std::env::var_os("PATH").unwrap_or_default();
        let on_path = Path::new(&program).components().count() > 1
            || std::env::split_paths(&path_var).any(|d| d.join(&program).is_file());
        if !on_path {
            bail!(
                "the agent command {:?} is not on PATH on this host ({})",
                program,
                path_var.to_string_lossy()
            );
        }
        let mut state = match std::env::var_os("HOME") {
            Some(home) => {
                prepare_state_paths(&self.provider, Path::new(&home), |v| std::env::var_os(v))?
            }
            None => vs_agent::StateBinds::default(),
        };
        // A state directory the CLI cannot run read-only (Codex) is a
        // private copy per turn; only its kept entries go back.
        let _session_dir = if state.private_dirs.is_empty() {
            None
        } else {
            let dir = vs_agent::SessionDir::create()?;
            state.seed_copies(&dir, c.worktree)?;
            Some(dir)
        };
        let mut request =
            project.sandbox_request(&program, &host_env(), Some(c.worktree), helper_exe()?);
        request.devices = self.accelerators.device_nodes.clone();
        request.state = state.clone().into();
        // The allow-list's one door: lives for the turn; its refusals go
        // to the candidate's record.
        let proxy = project.start_egress(mode)?;
        request.egress = project.egress_door(proxy.as_ref());
        let confinement = select(request, mode, Enforcement::Required)?
            .context("refusing to run the agent: no confinement was set up")?;
        let mut vars = self.agent_env(c)?;
        for (k, v) in &state.env {
            vars.retain(|(name, _)| name != k);
            vars.push((k.clone(), v.clone()));
        }
        let argv = confinement.wrap(&self.launch.argv)?;
        let outcome = run_turn(&argv, c.worktree, &vars, cancel);
        state.return_kept();
        let mut outcome = outcome?;
        outcome.egress_denials = egress_denials(proxy.as_ref());
        Ok(outcome)
    }
}

/// The refusals of a turn's egress proxy, for the candidate's record.
fn egress_denials(
    proxy: Option<&vs_sandbox::egress::EgressProxy>,
) -> Vec<vs_runtime::run::record::EgressDenial> {
    let Some(proxy) = proxy else {
        return Vec::new();
    };
    proxy
        .denials()
        .0
        .into_iter()
        .map(|d| vs_runtime::run::record::EgressDenial {
            time: d.time,
            host: d.host,
            port: d.port,
            reason: d.reason,
            via: d.via.to_owned(),
            pid: d.pid,
            command: d.command,
        })
        .collect()
}

/// A run's accelerator plan as the Docker backend's devices.
fn docker_devices(
    plan: &vs_runtime::run::accelerator::AcceleratorPlan,
) -> vs_sandbox::docker::DeviceAccess {
    use vs_sandbox::docker::GpuSelection;
    vs_sandbox::docker::DeviceAccess {
        nvidia: plan.nvidia.as_ref().map(|r| match &r.device_ids {
            None => GpuSelection::All,
            Some(ids) => GpuSelection::Ids(ids.clone()),
        }),
        nodes: plan.device_nodes.clone(),
    }
}

/// Runs a wrapped agent argv with exactly `env`, its whole tree killed on
/// cancel; output bounded into the log.
fn run_turn(
    argv: &[OsString],
    cwd: &Path,
    env: &[(OsString, OsString)],
    cancel: &CancellationToken,
) -> anyhow::Result<AgentOutcome> {
    let mut spec = CommandSpec::new(argv.iter().cloned(), cwd).cancel_token(cancel.clone());
    spec.env = env.iter().cloned().collect();
    let runner = LocalShellRunner::new().with_output_cap(AGENT_LOG_CAP);
    let r = runner.run(&spec)?;
    let mut log = Vec::new();
    for (name, s) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        log.extend_from_slice(format!("== {name} ({} bytes)\n", s.total_bytes()).as_bytes());
        log.extend_from_slice(s.bytes());
        if !s.bytes().ends_with(b"\n") {
            log.push(b'\n');
        }
    }
    Ok(AgentOutcome {
        exit_code: r.exit_code,
        cancelled: r.cancelled,
        log,
        egress_denials: Vec::new(),
    })
}

fn host_err(e: anyhow::Error) -> HostError {
    format!("{e:#}").into()
}

impl RunHost for CliHost {
    fn agent_turn(
        &self,
        c: &CandidateContext<'_>,
        cancel: &CancellationToken,
    ) -> Result<AgentOutcome, HostError> {
        match self.environment {
            RunEnvironment::Docker
            | RunEnvironment::Modal
            | RunEnvironment::Skypilot
            | RunEnvironment::Slurm => self.turn_in_docker(c, cancel),
            RunEnvironment::Host => self.turn_on_host(c, cancel),
        }
        .map_err(host_err)
    }

    fn build_confinement(
        &self,
        c: &CandidateContext<'_>,
        checkout: &Path,
    ) -> Result<Box<dyn Confinement>, HostError> {
        (|| -> anyhow::Result<Box<dyn Confinement>> {
            let layout = StateLayout::open(&self.project)?;
            let config = vs_sandbox::config::PolicyConfig::load(&self.project)?;
            let spec = vs_runtime::BuildSpec::load(&layout)?;
            let how = match self.environment {
                RunEnvironment::Docker
                | RunEnvironment::Modal
                | RunEnvironment::Skypilot
                | RunEnvironment::Slurm => {
                    let mut options = crate::build_cmd::docker_options_with_id(
                        &layout,
                        &config,
                        format!("{}-{}-build", c.run.run_id, c.number),
                    )?;
                    if let Some(image) = &self.image {
                        let lock = crate::docker_cmd::find_lock(Some(&self.project))?;
                        options.image = crate::docker_cmd::pin_for(image, &lock)?;
                    }
                    BuildConfinement::Docker(Box::new(options))
                }
                RunEnvironment::Host => {
                    BuildConfinement::Host(self.mode.context("no host confinement mechanism")?)
                }
            };
            let program = spec.argv().first().map(OsString::from).unwrap_or_default();
            let protected = protected_paths(&layout, &c.run.run_id)?;
            Ok(Box::new(build_confinement(
                checkout,
                config,
                &protected,
                &program,
                how,
                &host_env(),
                helper_exe()?,
            )?))
        })()
        .map_err(host_err)
    }

    fn evaluator(
        &self,
        c: &CandidateContext<'_>,
        place: EvalPlace<'_>,
        command: &EvalCommand,
    ) -> Result<Evaluator, HostError> {
        (|| -> anyhow::Result<Evaluator> {
            let layout = StateLayout::open(&self.project)?;
            let config = vs_sandbox::config::PolicyConfig::load(&self.project)?;
            let protected = protected_paths(&layout, &c.run.run_id)?;
            match self.environment {
                RunEnvironment::Docker => {
                    // A fresh container on the evaluation's checkout:
                    // nothing the agent left running or wrote outside its
                    // commit reaches it.
                    let settings = vs_runtime::ProjectSettings::for_checkout(
                        Workspace::open(place.checkout)?,
                        config,
                        &protected,
                    )?;
                    let mut options =
                        self.docker_options(format!("{}-{}-eval", c.run.run_id, c.number))?;
                    options.network = command.network;
                    options.devices = docker_devices(&self.accelerators);
                    options.extra_mounts.push(vs_sandbox::docker::ExtraMount {
                        source: place.home.to_path_buf(),
                        target: place.home.to_path_buf(),
                        read_only: false,
                    });
                    let sandbox = DockerSandbox::start(&settings.resolved, &options)?;
                    let location = format!(
                        "container {} via {}",
                        sandbox.container_id(),
                        sandbox.execute_via()
                    );
                    Ok(Evaluator {
                        runner: Box::new(ExecuteRunner(sandbox)),
                        location,
                        path_var: vs_sandbox::runner::DEFAULT_SEARCH_PATH.into(),
                    })
                }
                RunEnvironment::Slurm => {
                    let broker = self
                        .broker
                        .as_ref()
                        .context("the slurm run environment's broker is not running")?;
                    Ok(Evaluator {
                        runner: Box::new(crate::slurm_env::BrokerJobRunner {
                            socket: broker.framework_socket().to_path_buf(),
                            network: command.network,
                        }),
                        location: "slurm job via the run's broker".to_owned(),
                        path_var: vs_sandbox::runner::DEFAULT_SEARCH_PATH.into(),
                    })
                }
                RunEnvironment::Modal | RunEnvironment::Skypilot => {
                    bail!(
                        "the {} run environment evaluates through its service, not a local runner",
                        self.environment
                    )
                }
                RunEnvironment::Host => {
                    let mode = self.mode.context("no host confinement mechanism")?;
                    let program = command.argv.first().map(OsString::from).unwrap_or_default();
                    let sandbox = evaluation_confinement(EvalConfineRequest {
                        place,
                        config,
                        protected: &protected,
                        program: &program,
                        mode,
                        env: &host_env(),
                        helper: helper_exe()?,
                        network: command.network,
                        devices: self.accelerators.device_nodes.clone(),
                    })?;
                    let location = format!("host, confined by {}", sandbox.backend());
                    Ok(Evaluator {
                        runner: Box::new(ConfinedRunner(sandbox)),
                        location,
                        path_var: std::env::var_os("PATH")
                            .unwrap_or_else(|| vs_sandbox::runner::DEFAULT_SEARCH_PATH.into()),
                    })
                }
            }
        })()
        .map_err(host_err)
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

/// `check` and `measure` on the host: the command wrapped by the host
/// backend, run (bounded, its tree killed at the timeout) by the local
/// runner.
struct ConfinedRunner(vs_sandbox::AnySandbox);

impl CommandRunner for ConfinedRunner {
    fn run(
        &self,
        command: &CommandSpec,
    ) -> Result<vs_sandbox::CommandResult, vs_sandbox::RunnerError> {
        let mut wrapped = command.clone();
        wrapped.argv =
            self.0
                .wrap(&command.argv)
                .map_err(|e| vs_sandbox::RunnerError::Dispatched {
                    place: format!("the {} confinement", self.0.backend()),
                    message: e.to_string(),
                })?;
        LocalShellRunner::default().run(&wrapped)
    }
}

/// `check` and `measure` in the run's container go through
/// `DockerSandbox::execute` (the command server).
struct ExecuteRunner(DockerSandbox);

impl CommandRunner for ExecuteRunner {
    fn run(
        &self,
        command: &CommandSpec,
    ) -> Result<vs_sandbox::CommandResult, vs_sandbox::RunnerError> {
        self.0
            .execute(command)
            .map_err(|e| vs_sandbox::RunnerError::InContainer {
                message: e.to_string(),
            })
    }
}
