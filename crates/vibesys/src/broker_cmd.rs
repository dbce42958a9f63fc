//! `vibesys broker serve|job|gate`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use vs_runtime::RunId;
use vs_runtime::broker::client::{self, JobCall};
use vs_runtime::broker::server::default_runtime_dir;
use vs_runtime::broker::signals::stop_on_signals;
use vs_runtime::broker::{Broker, BrokerFlags, BrokerSettings, Request};

use crate::output::print_text;
use crate::project::{dir_or_cwd, helper_exe};

/// `vibesys broker ...`.
#[derive(Debug, Args)]
pub struct BrokerArgs {
    #[command(subcommand)]
    command: BrokerCommand,
}

#[derive(Debug, Subcommand)]
enum BrokerCommand {
    /// Serve a run's agent and framework sockets and submit Slurm jobs (until SIGTERM/SIGINT).
    Serve(ServeArgs),
    /// Run a command as an agent job through a broker socket.
    Job(JobArgs),
    /// Run one of the task's trusted gates by name (framework socket).
    Gate(GateArgs),
}

/// Arguments of `vibesys broker serve`.
#[derive(Debug, Args)]
#[command(after_help = "\
Prints `candidate N: PATH` for each of --candidates, `checkout: PATH` with --checkout, `agent:
PATH` and `framework: PATH`,
then serves in the foreground. On SIGTERM or SIGINT it cancels every job it submitted. At
start it cancels the run's leftover jobs (an earlier broker killed with SIGKILL) and probes
every compute node: where bubblewrap or user namespaces are missing it refuses to start
(exit 125).

Trusted settings come from the project's vibesys.toml: [vibesys.agent_gpu] enabled, max_gpus,
max_time_minutes; [vibesys.broker] bwrap, gpu_devices, partition; [gates.NAME] argv; [sandbox]
network and allow_hosts. With an allow-list (allow_hosts, --allow-host) each agent job runs
without a network of its own and reaches only the listed hosts through a proxy vibesys starts
beside it on the compute node; each refused host is named on the job's stderr.")]
pub struct ServeArgs {
    /// The project (workspace) directory.
    #[arg(long, value_name = "DIR")]
    project: PathBuf,
    /// The run id (jobs carry it in their name and comment).
    #[arg(long, value_name = "ID")]
    run: String,
    /// Accept agent jobs on the agent socket ([vibesys.agent_gpu] enabled = true).
    #[arg(long = "agent-gpu")]
    agent_gpu: bool,
    /// Most GPUs one job may ask for.
    #[arg(long = "max-gpus", value_name = "N")]
    max_gpus: Option<u32>,
    /// Longest time limit one job may ask for, in minutes.
    #[arg(long = "max-time", value_name = "MIN")]
    max_time: Option<u32>,
    /// Also serve one agent socket per candidate 1..=N, each running jobs only in that candidate's worktree (printed as `candidate N: PATH`).
    #[arg(long, default_value_t = 0, value_name = "N")]
    candidates: u32,
    /// A standalone build's broker: also serve one socket that runs jobs only in the run's build checkout NAME (printed as `checkout: PATH`), and list and cancel only that checkout's jobs, never the run's.
    #[arg(long, value_name = "NAME")]
    checkout: Option<String>,
    /// Restrict every agent job's network to this host (repeatable; adds to [sandbox]
    /// allow_hosts): the job reaches only these, through a proxy on its node.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    allow_host: Vec<String>,
    /// Agent jobs get no network (as [sandbox] network = false).
    #[arg(long = "no-network")]
    no_network: bool,
}

/// Arguments of `vibesys broker job`.
#[derive(Debug, Args)]
#[command(after_help = "\
Exit status: the job's own (128+N for signal N); 123 when Slurm cancelled the job, 124 when
it hit its time limit, 120 when Slurm failed it (node failure, launch failure); 125 when the
broker refused the request (nothing was submitted) or vibesys failed.")]
pub struct JobArgs {
    /// The broker socket.
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// GPUs to allocate (--gres=gpu:N).
    #[arg(long, default_value_t = 0, value_name = "N")]
    gpus: u32,
    /// Time limit in minutes (default: the operator's limit).
    #[arg(long, value_name = "MIN")]
    time: Option<u32>,
    /// Working directory (default: the current directory); must be inside the workspace.
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// A variable for the job (repeatable; SLURM_*, VIBESYS_*, XDG_* are dropped).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Arguments of `vibesys broker gate`.
#[derive(Debug, Args)]
pub struct GateArgs {
    /// The framework socket.
    #[arg(long, value_name = "PATH")]
    socket: PathBuf,
    /// The gate's name in [gates.NAME] of the project's vibesys.toml.
    #[arg(value_name = "NAME")]
    name: String,
}

/// Runs `vibesys broker ...`.
pub fn run(args: BrokerArgs) -> anyhow::Result<u8> {
    match args.command {
        BrokerCommand::Serve(a) => serve(a),
        BrokerCommand::Job(a) => job(a),
        BrokerCommand::Gate(a) => gate(a),
    }
}

fn serve(a: ServeArgs) -> anyhow::Result<u8> {
    let run = RunId::new(&a.run)?;
    let flags = BrokerFlags {
        agent_gpu: a.agent_gpu,
        max_gpus: a.max_gpus,
        max_time_minutes: a.max_time,
        candidates: a.candidates,
        checkout: a
            .checkout
            .as_deref()
            .map(vs_runtime::CandidateId::new)
            .transpose()?,
        allow_hosts: a.allow_host,
        no_network: a.no_network,
    };
    let settings = BrokerSettings::load(&a.project, run, &flags, helper_exe()?)?;
    let run_id = settings.run.as_str().to_owned();
    let broker = Broker::start(settings, &default_runtime_dir())?;
    if broker.leftovers() > 0 {
        eprintln!(
            "vibesys: cancelled {} leftover job(s) of run {run_id}",
            broker.leftovers()
        );
    }
    stop_on_signals(broker.shutdown_handle(), |sig| {
        eprintln!("vibesys: broker: signal {sig}, cancelling the run's jobs");
    })?;
    print_text(&broker.socket_listing())?;
    std::io::stdout().flush()?;
    let cancelled = broker.serve()?;
    eprintln!("vibesys: broker stopped; cancelled {cancelled} job(s) of run {run_id}");
    Ok(0)
}

/// Sends `request`, streaming the job's output; its outcome as the status.
fn call(socket: &Path, request: &Request) -> anyhow::Result<u8> {
    let status = client::call(
        socket,
        request,
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )?;
    if let Some(note) = status.client_note() {
        eprintln!("vibesys: {note}");
    }
    Ok(status.client_status())
}

fn job(a: JobArgs) -> anyhow::Result<u8> {
    let cwd = dir_or_cwd(a.cwd.as_deref())?;
    let request = JobCall {
        argv: a.command,
        cwd,
        gpus: a.gpus,
        time_minutes: a.time,
        env: a.env,
    }
    .request()?;
    call(&a.socket, &request)
}

fn gate(a: GateArgs) -> anyhow::Result<u8> {
    call(&a.socket, &Request::gate(a.name))
}
