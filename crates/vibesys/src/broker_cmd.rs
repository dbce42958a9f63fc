//! `vibesys broker serve|job|gate` and the hidden `internal-host-job`
//! (an agent job's confinement on the compute node).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use vs_runtime::RunId;
use vs_runtime::broker::protocol::{EXIT_REFUSED, PROTOCOL_VERSION};
use vs_runtime::broker::{
    Broker, BrokerFlags, BrokerSettings, Final, HostJobConfinement, Request, allocated_gpu_devices,
    client,
};
use vs_sandbox::helper::{HostJob, JobNetwork};
use vs_sandbox::launch;
use vs_sandbox::{AnySandbox, ConfineMode, Enforcement, select};

use crate::project::helper_exe;

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
    let runtime = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let run_id = settings.run.as_str().to_owned();
    let broker = Broker::start(settings, &runtime)?;
    if broker.leftovers() > 0 {
        eprintln!(
            "vibesys: cancelled {} leftover job(s) of run {run_id}",
            broker.leftovers()
        );
    }
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .context("cannot install the SIGTERM/SIGINT handler")?;
    {
        let mut out = std::io::stdout().lock();
        for n in 1..=a.candidates {
            if let Some(socket) = broker.candidate_socket(n) {
                writeln!(out, "candidate {n}: {}", socket.display())?;
            }
        }
        if let Some(socket) = broker.checkout_socket() {
            writeln!(out, "checkout: {}", socket.display())?;
        }
        writeln!(out, "agent: {}", broker.agent_socket().display())?;
        writeln!(out, "framework: {}", broker.framework_socket().display())?;
        out.flush()?;
    }
    let handle = broker.shutdown_handle();
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            eprintln!("vibesys: broker: signal {sig}, cancelling the run's jobs");
            handle.shutdown();
        }
    });
    let cancelled = broker.serve()?;
    eprintln!("vibesys: broker stopped; cancelled {cancelled} job(s) of run {run_id}");
    Ok(0)
}

fn finish(status: &Final) -> u8 {
    match status {
        Final::Exited { .. } => {}
        Final::JobEnded { message, .. } => eprintln!("vibesys: {message}"),
        Final::Refused { reason } => {
            eprintln!("vibesys: error: the broker refused the request: {reason}")
        }
    }
    u8::try_from(status.exit_code()).unwrap_or(EXIT_REFUSED as u8)
}

fn call(socket: &std::path::Path, request: &Request) -> anyhow::Result<u8> {
    let status = client::call(
        socket,
        request,
        &mut std::io::stdout(),
        &mut std::io::stderr(),
    )?;
    Ok(finish(&status))
}

fn job(a: JobArgs) -> anyhow::Result<u8> {
    let cwd = match a.cwd {
        Some(c) => c,
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let mut env = std::collections::BTreeMap::new();
    for item in &a.env {
        let Some((k, v)) = item.split_once('=') else {
            bail!("--env {item:?} is not KEY=VALUE");
        };
        env.insert(k.to_owned(), v.to_owned());
    }
    let request = Request::Job {
        version: PROTOCOL_VERSION,
        argv: a.command,
        cwd: Some(std::path::absolute(&cwd).unwrap_or(cwd)),
        gpus: a.gpus,
        time_minutes: a.time,
        env,
        network: None,
    };
    call(&a.socket, &request)
}

fn gate(a: GateArgs) -> anyhow::Result<u8> {
    call(
        &a.socket,
        &Request::Gate {
            version: PROTOCOL_VERSION,
            name: a.name,
        },
    )
}

/// Confines an agent job on the compute node: `HostJobConfinement`,
/// enforcement always required; 125 when confinement cannot be applied.
pub fn internal_host_job(a: HostJob) -> u8 {
    match host_job(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("vibesys: error: agent job not started: {e:#}");
            EXIT_REFUSED as u8
        }
    }
}

fn host_job(a: HostJob) -> anyhow::Result<u8> {
    let mut config = vs_sandbox::config::PolicyConfig::load(&a.project)?;
    // The network is the broker's (decided once from the operator's
    // settings): an allow-list the file names now but the broker did not
    // pass would be dropped, so the job is refused rather than run open.
    if a.network == JobNetwork::Open && !config.allow_hosts.is_empty() {
        bail!(
            "{} names an egress allow-list ([sandbox] allow_hosts) the run's broker did not start with; restart the broker (the session or the run) to apply it",
            a.project.join(vs_sandbox::config::CONFIG_FILE).display()
        );
    }
    config.allow_hosts = match &a.network {
        JobNetwork::AllowList(hosts) => hosts.clone(),
        JobNetwork::Open | JobNetwork::Off => Vec::new(),
    };
    // The task's protected paths are read-only in every job.
    let protected = vs_runtime::settings::task_protected_paths(&a.project)?;
    let workspace = vs_sandbox::Workspace::open(&a.workspace)?;
    let mut project = if vs_runtime::run::evaluation::is_eval_checkout(&a.project, workspace.root())
    {
        // A candidate's evaluation (check, measure) in its fresh checkout:
        // the same policy as on the host.
        vs_runtime::ProjectSettings::for_checkout(workspace, config, &protected)?
    } else if a.workspace != a.project {
        // A run's candidate worktree: as when `vibesys run` confines the
        // candidate's agent.
        vs_runtime::ProjectSettings::for_candidate(workspace, config, &protected, &[])?
    } else {
        let mut flags = vs_runtime::PolicyFlags::default();
        vs_runtime::settings::add_protected(workspace.root(), &mut config, &mut flags, &protected);
        vs_runtime::ProjectSettings::with_config(
            workspace,
            config,
            &flags,
            vs_runtime::StatePaths::Prepare,
        )?
    };
    if a.network == JobNetwork::Off {
        project.network = false;
    }
    // The allow-list's one door, outside the job's bubblewrap: lives as
    // long as the job; each refused host is named on the job's stderr.
    let proxy = project.start_egress(ConfineMode::Bwrap)?;
    let mut request = project.sandbox_request(
        &a.argv[0],
        &crate::project::host_env(),
        Some(&a.cwd),
        helper_exe()?,
    );
    request.egress = project.egress_door(proxy.as_ref());
    request.devices = Vec::new();
    request.bwrap_program = a.bwrap.clone();
    let Some(AnySandbox::Host(sandbox)) =
        select(request, ConfineMode::Bwrap, Enforcement::Required)?
    else {
        bail!("an agent job is confined by bubblewrap, which was not selected");
    };
    let step_gpus = std::env::var("SLURM_STEP_GPUS")
        .or_else(|_| std::env::var("SLURM_JOB_GPUS"))
        .ok();
    let devices = allocated_gpu_devices(&a.gpu_devices, step_gpus.as_deref())?;
    let confinement = HostJobConfinement::new(&sandbox, &devices, &a.env)?;
    let code = launch::run_bwrap(confinement.plan(), &a.argv, sandbox.process_limit())?;
    drop(proxy);
    Ok(u8::try_from(code & 0xff).unwrap_or(1))
}
