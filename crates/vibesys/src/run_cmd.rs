//! `vibesys run start|status|resume`: the run entry point. Parses, calls
//! `vs_runtime::run::launch` (which checks, records and runs), shows the
//! progress on stderr, stops the run on Ctrl-C, and prints the table.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use vs_runtime::run::launch::{self, PreparedRun, RunStop, StartSettings};
use vs_runtime::run::{RunState, status::run_status};
use vs_runtime::{RunId, StateLayout};

use crate::env_args::RunEnvArgs;
use crate::output::{print_json, print_text};
use crate::project::{helper_exe, host_env};
use crate::run_progress::RunProgress;

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

/// Prepares the project's run state when it is missing, as `vibesys
/// state init` does, and says so (once: later runs find it prepared).
/// True when it was prepared now.
pub(crate) fn prepare_state(layout: &StateLayout) -> anyhow::Result<bool> {
    let notice = launch::prepare_state(layout)?;
    if let Some(notice) = &notice {
        eprintln!("vibesys: {notice}");
    }
    Ok(notice.is_some())
}

fn start(args: StartArgs) -> anyhow::Result<u8> {
    let requested = args.env.resolve()?;
    let layout = launch::open_layout(args.project.as_deref())?;
    let progress = RunProgress::for_stderr();
    let settings = StartSettings {
        requested,
        provider: &args.provider,
        command: &args.command,
        prompt: args.prompt,
        candidates: args.candidates,
        jobs: args.jobs,
        image: args.image.as_deref(),
        allow_hosts: &args.allow_host,
        helper: &helper_exe()?,
    };
    let prepared = launch::start(&layout, settings, &progress)?;
    execute(&layout, prepared, &progress)
}

fn resume(run: &str, project: Option<PathBuf>) -> anyhow::Result<u8> {
    let layout = launch::open_layout(project.as_deref())?;
    let run = RunId::new(run)?;
    let progress = RunProgress::for_stderr();
    let prepared = launch::resume(&layout, &run, &helper_exe()?, &progress)?;
    execute(&layout, prepared, &progress)
}

fn execute(
    layout: &StateLayout,
    prepared: PreparedRun,
    progress: &RunProgress,
) -> anyhow::Result<u8> {
    let stop = RunStop::new();
    let signals = stop_on_signals(stop.clone())?;
    let finished = launch::execute(layout, prepared, helper_exe()?, host_env(), progress, &stop);
    signals.close();
    let finished = finished?;
    print_text(&finished.status.to_string())?;
    if finished.state == RunState::Interrupted {
        let run = &finished.status.run.run_id;
        eprintln!("vibesys: run {run} stopped; continue it with: vibesys run resume {run}");
        return Ok(EXIT_INTERRUPTED);
    }
    Ok(0)
}

/// Ctrl-C and SIGTERM stop the run: every candidate's process tree and
/// container is stopped and `run.json` stays resumable.
fn stop_on_signals(stop: RunStop) -> anyhow::Result<signal_hook::iterator::Handle> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("cannot install the Ctrl-C handler")?;
    let handle = signals.handle();
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            eprintln!("vibesys: stopping every candidate (the run stays resumable)");
            stop.stop();
        }
    });
    Ok(handle)
}

fn status(run: Option<String>, project: Option<PathBuf>, json: bool) -> anyhow::Result<u8> {
    let layout = launch::open_layout(project.as_deref())?;
    let run = run.map(|r| RunId::new(&r)).transpose()?;
    let status = run_status(&layout, run.as_ref())?;
    if json {
        print_json(&serde_json::to_value(&status)?)?;
    } else {
        print_text(&status.to_string())?;
    }
    Ok(0)
}
