//! `vibesys session`: launch a provider CLI (codex, claude, gemini) or any
//! command as a confined agent session.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use vs_agent::{prepare_state_paths, session_command, session_env_allowlist};
use vs_runtime::broker::child::{self, BrokerChild, BrokerStart};
use vs_sandbox::{Purpose, Resolved, RunPlace, select};

use crate::exec_cmd::ConfineArgs;
use crate::project::{PolicyArgs, helper_exe, host_env};

/// Arguments of `vibesys session`.
#[derive(Debug, Args)]
#[command(after_help = "\
The provider runs with its own approvals and sandbox OFF (codex
--dangerously-bypass-approvals-and-sandbox, claude --dangerously-skip-permissions,
gemini --approval-mode=yolo --sandbox=false): vibesys's confinement is the only boundary.
Only allow-listed variables reach the agent (PATH, HOME, USER, LANG, LC_*, TERM, TZ, TMPDIR,
proxy and CA variables, the provider's auth and state variables, and --env NAME extras);
dropped names are logged once, values never. Outside the project only what the provider's
CLI must write in its state directory (e.g. ~/.claude) is writable: transcripts, history,
refreshed credentials, caches; the rest of it (settings, hooks, scripts) is read-only. Claude
Code's ~/.claude.json is a private copy per session (seeded from yours, discarded at the end:
your file is never written; read-only under --confine landlock). Codex works on a private
copy of ~/.codex (CODEX_HOME points at it; yours stays read-only); afterwards only its
transcripts (sessions/, archived_sessions/), history.jsonl, session_index.jsonl and a changed
auth.json go back, never its configuration, skills, shell snapshots or databases.

--run-environment slurm starts the run's broker (vibesys broker serve, see docs/slurm.md) and
runs the session in the local editor container (the pinned image, as --confine docker): no
devices, the workspace at its host path, the broker's AGENT socket at /run/vibesys/agent.sock
(VIBESYS_BROKER_SOCKET), never the framework socket. Inside, /.vibesys/vibesys broker job
--socket $VIBESYS_BROKER_SOCKET -- CMD runs CMD confined on a compute node (needs a static
vibesys: vibesys-static beside this one, or VIBESYS_COMMAND_SERVER), with the session's
network (--no-network, --allow-host and [sandbox] allow_hosts: a proxy on the node, without
the provider's host). The broker and the container stop with the session.

SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to vibesys are forwarded to the session, which then
ends as any other (what goes back to the provider's state still goes back).

Exit status: the session's own; 125 when vibesys fails (nothing ran).")]
pub struct SessionArgs {
    /// codex, claude, gemini, or `custom` (the command after --).
    #[arg(long, value_name = "NAME")]
    provider: String,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    confine: ConfineArgs,
    /// host (the default: --confine picks the mechanism), docker (as --confine docker), or slurm
    /// (the run's Slurm broker and a local editor container; slurm-gpu: deprecated, slurm with
    /// agent GPU jobs on).
    #[arg(long = "run-environment", value_name = "ENV")]
    run_environment: Option<String>,
    /// Pass this variable through as well (a valid name; repeatable).
    #[arg(long = "env", value_name = "NAME")]
    env: Vec<String>,
    /// Run one prompt non-interactively instead of an interactive session.
    #[arg(long, value_name = "TEXT", conflicts_with = "resume")]
    prompt: Option<String>,
    /// Resume a session by id (`latest` for the most recent).
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// Extra provider arguments (or, for `custom`, the command).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

/// Runs `vibesys session`.
pub fn run(args: SessionArgs) -> anyhow::Result<u8> {
    let provider: agentshim::Provider = if args.provider.trim().eq_ignore_ascii_case("custom") {
        agentshim::Provider::custom(args.args.clone())?
    } else {
        args.provider.parse()?
    };
    let launch = match (&args.prompt, &args.resume) {
        (Some(prompt), _) => provider.one_shot(prompt)?,
        (None, Some(id)) => {
            let which = if id == "latest" {
                agentshim::Resume::Latest
            } else {
                agentshim::Resume::Id(agentshim::SessionId::new(id)?)
            };
            provider.resume(&which, None)?
        }
        (None, None) if matches!(provider, agentshim::Provider::Custom(_)) => {
            provider.interactive(&[])
        }
        (None, None) => provider.interactive(&args.args),
    };
    let choice = args.confine.choice()?;
    let environment = match args.run_environment.as_deref() {
        Some(value) => Some(vs_runtime::RunEnvironment::parse(value)?),
        None => None,
    };
    let slurm_gpu_alias =
        args.run_environment.as_deref() == Some(vs_runtime::environment::SLURM_GPU_ALIAS);
    let place = match environment {
        None => RunPlace::Host,
        Some(
            e @ (vs_runtime::RunEnvironment::Host
            | vs_runtime::RunEnvironment::Docker
            | vs_runtime::RunEnvironment::Slurm),
        ) => e.confine_place(args.run_environment.as_deref().unwrap_or_default()),
        Some(other) => bail!("the {other} run environment does not run sessions in this build"),
    };
    let Resolved { mode, enforcement } =
        choice.resolve(Purpose::Agent, place, args.confine.enforcement())?;
    // The policy, whose allow-list admits the provider's own API host.
    let resolve = || -> anyhow::Result<crate::project::ProjectPolicy> {
        let mut project = args.policy.resolve()?;
        if let Some(host) = provider.api_host(|v| std::env::var_os(v))? {
            project.add_provider_host(&host)?;
        }
        Ok(project)
    };
    let mut project = resolve()?;
    // An allow-list's refusals go to the session's log in the run state
    // (prepared when missing, then the policy resolved again so that it
    // hides the new state from the agent).
    let egress_log = if project.egress_restricted() && mode != vs_sandbox::ConfineMode::Off {
        let (log, prepared) = egress_log(&project);
        if prepared {
            project = resolve()?;
        }
        log
    } else {
        None
    };
    let mut env = session_env_allowlist(std::env::vars_os(), &provider, &args.env)?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut state = match &home {
        Some(home) => prepare_state_paths(&provider, home, |v| std::env::var_os(v))?,
        None => vs_agent::StateBinds::default(),
    };
    // A confined session works on private copies: of each home-level file
    // (bwrap and the container bind it; the user's is never written) and
    // of a state directory its CLI cannot run read-only (Codex: every
    // backend points the CLI at it); the directory lives until the
    // session ends, and only the kept entries go back.
    let _session_dir = if mode != vs_sandbox::ConfineMode::Off && state.needs_copies() {
        let dir = vs_agent::SessionDir::create()?;
        state.seed_copies(&dir, project.workspace.root())?;
        for (k, v) in &state.env {
            env.vars.retain(|(name, _)| name != k);
            env.vars.push((k.clone(), v.clone()));
        }
        Some(dir)
    } else {
        None
    };
    let result = run_session(
        &args,
        (&project, egress_log.as_ref()),
        (&provider.name(), &launch),
        &env,
        &state,
        home.as_deref(),
        (mode, enforcement),
        environment,
        slurm_gpu_alias,
    );
    state.return_kept();
    result
}

/// The session's refusal log in the project's run state, which is
/// prepared when missing (true: the policy must be resolved again), and
/// a line saying where it is. Where there is none (the run state cannot
/// be prepared or the log created) a line says why and the session goes
/// on: its refusals still reach stderr.
fn egress_log(
    project: &crate::project::ProjectPolicy,
) -> (Option<vs_runtime::SessionEgressLog>, bool) {
    let mut prepared = false;
    let log = (|| -> anyhow::Result<vs_runtime::SessionEgressLog> {
        let layout = vs_runtime::StateLayout::open(project.workspace.root())?;
        prepared = crate::run_cmd::prepare_state(&layout)?;
        Ok(vs_runtime::SessionEgressLog::create(&layout)?)
    })();
    match log {
        Ok(log) => {
            eprintln!(
                "vibesys: egress refusals of this session are logged to {}",
                log.path().display()
            );
            (Some(log), prepared)
        }
        Err(e) => {
            eprintln!(
                "vibesys: egress refusals of this session are not logged to a file (only named here): {e:#}"
            );
            (None, prepared)
        }
    }
}

/// The session itself, in the run environment chosen.
#[allow(clippy::too_many_arguments)]
fn run_session(
    args: &SessionArgs,
    (project, egress_log): (
        &crate::project::ProjectPolicy,
        Option<&vs_runtime::SessionEgressLog>,
    ),
    (provider_name, launch): (&str, &agentshim::Launch),
    env: &vs_agent::SessionEnv,
    state: &vs_agent::StateBinds,
    home: Option<&std::path::Path>,
    (mode, enforcement): (vs_sandbox::ConfineMode, vs_sandbox::Enforcement),
    environment: Option<vs_runtime::RunEnvironment>,
    slurm_gpu_alias: bool,
) -> anyhow::Result<u8> {
    let program = launch
        .argv
        .first()
        .cloned()
        .context("the provider command is empty")?;
    let cwd = project
        .chdir_in(crate::project::cwd().as_deref())
        .unwrap_or_else(|| project.workspace.root().to_path_buf());
    if environment == Some(vs_runtime::RunEnvironment::Slurm) {
        if slurm_gpu_alias {
            child::warn_slurm_gpu_alias();
        }
        let mounts = state_mounts(home, state);
        return run_in_slurm(
            args,
            (project, egress_log),
            launch,
            env.clone(),
            &cwd,
            slurm_gpu_alias,
            mounts,
        );
    }
    if mode == vs_sandbox::ConfineMode::Docker {
        let mounts = state_mounts(home, state);
        return run_in_docker(args, (project, egress_log), launch, env, &cwd, None, mounts);
    }
    let mut request = project.sandbox_request(&program, &host_env(), Some(&cwd), helper_exe()?);
    request.state = state.clone().into();
    // The allow-list's one door: lives as long as the session.
    let _proxy = start_egress(project, mode, egress_log)?;
    request.egress = project.egress_door(_proxy.as_ref());
    let confinement = select(request, mode, enforcement)?;
    anyhow::ensure!(
        confinement.is_some() || _proxy.is_none(),
        "an egress allow-list (allow_hosts, --allow-host) needs confinement, which is disabled: nothing would hold the session to it"
    );
    let mut cmd = session_command(
        confinement
            .as_ref()
            .map(|c| c as &dyn vs_sandbox::Confinement),
        launch,
        env,
        &cwd,
    )?;
    let status = wait_forwarding_signals(&mut cmd)
        .with_context(|| format!("cannot start the session ({})", provider_name))?;
    Ok(vs_sandbox::launch::exit_code(status) as u8)
}

/// The allow-list's one door (when the policy has one), each refusal
/// appended to `log` when given.
fn start_egress(
    project: &crate::project::ProjectPolicy,
    mode: vs_sandbox::ConfineMode,
    log: Option<&vs_runtime::SessionEgressLog>,
) -> anyhow::Result<Option<vs_sandbox::egress::EgressProxy>> {
    let proxy = project.start_egress(mode)?;
    if let (Some(proxy), Some(log)) = (&proxy, log) {
        log.attach(proxy)?;
    }
    Ok(proxy)
}

/// Runs the session's launcher to its end: SIGINT, SIGTERM, SIGHUP and
/// SIGQUIT sent to vibesys go to the launcher (which hands them to the
/// command) instead of ending vibesys, so a session stopped that way
/// still ends as any other: the provider's kept state goes back and the
/// session directory goes (a vibesys killed outright takes the launcher
/// with it: `terminate_with_parent`).
fn wait_forwarding_signals(
    cmd: &mut std::process::Command,
) -> std::io::Result<std::process::ExitStatus> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])?;
    let handle = signals.handle();
    vs_sandbox::launch::terminate_with_parent(cmd);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            handle.close();
            return Err(e);
        }
    };
    let pid = rustix::process::Pid::from_raw(child.id() as i32);
    let forwarder = std::thread::spawn(move || {
        for sig in signals.forever() {
            if let (Some(pid), Some(sig)) = (pid, rustix::process::Signal::from_named_raw(sig)) {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    });
    // The child stays unreaped (its pid not reusable) until `wait`
    // returns; the forwarder is stopped right after.
    let status = child.wait();
    handle.close();
    let _ = forwarder.join();
    status
}

/// HOME of the pinned images (images/*.toml `config.env`): the provider's
/// state locations below the host's HOME are bound below it.
const IMAGE_HOME: &str = "/home/agent";

/// The provider's state in the container, as the session rules say: each
/// location below the host's HOME at the same place below [`IMAGE_HOME`],
/// any other (an override variable such as `CLAUDE_CONFIG_DIR`, which
/// crosses into the container) at its host path; state directories
/// read-only, the entries the CLI must write read-write over them,
/// and each home-level file (`~/.claude.json`) as the session's private
/// copy, read-write (the user's file is never written).
fn state_mounts(
    home: Option<&std::path::Path>,
    state: &vs_agent::StateBinds,
) -> Vec<vs_docker::ExtraMount> {
    let target = |p: &std::path::Path| match home.and_then(|h| p.strip_prefix(h).ok()) {
        Some(rel) if !rel.as_os_str().is_empty() => std::path::Path::new(IMAGE_HOME).join(rel),
        _ => p.to_path_buf(),
    };
    let mount = |source: PathBuf, at: &std::path::Path, read_only| vs_docker::ExtraMount {
        target: target(at),
        source,
        read_only,
    };
    state
        .read_only
        .iter()
        .map(|p| mount(p.clone(), p, true))
        .chain(state.writable.iter().map(|p| mount(p.clone(), p, false)))
        .chain(
            state
                .copies
                .iter()
                .map(|c| mount(c.source(), &c.target, false)),
        )
        .collect()
}

/// The session in the run's container (the docker run environment): the
/// same launcher, with the DockerSandbox as the confinement and the
/// provider's state mounted (see [`state_mounts`]). Only the allow-listed
/// names cross into the container; PATH, HOME, USER, SHELL and TMPDIR are
/// the image's own.
fn run_in_docker(
    args: &SessionArgs,
    (project, egress_log): (
        &crate::project::ProjectPolicy,
        Option<&vs_runtime::SessionEgressLog>,
    ),
    launch: &agentshim::Launch,
    env: &vs_agent::SessionEnv,
    cwd: &std::path::Path,
    broker: Option<&BrokerChild>,
    state: Vec<vs_docker::ExtraMount>,
) -> anyhow::Result<u8> {
    let mut options = crate::docker_cmd::options_for(
        project,
        args.confine.image.as_deref(),
        args.policy.project.as_deref(),
    )?;
    options.extra_mounts.extend(state);
    if let Some(broker) = broker {
        child::editor_options(&mut options, broker.agent_socket())?;
    }
    options.env = vs_runtime::container::agent_env_list(
        env.vars
            .iter()
            .filter_map(|(k, _)| k.to_str())
            .chain(launch.env.iter().map(|(k, _)| *k)),
    );
    let program = launch
        .argv
        .first()
        .context("the provider command is empty")?;
    let mut request = project.sandbox_request(program, &host_env(), Some(cwd), helper_exe()?);
    request.docker = Some(Box::new(options));
    // The allow-list's one door: lives as long as the session.
    let _proxy = start_egress(project, vs_sandbox::ConfineMode::Docker, egress_log)?;
    request.egress = project.egress_door(_proxy.as_ref());
    let sandbox = select(
        request,
        vs_sandbox::ConfineMode::Docker,
        vs_sandbox::Enforcement::Required,
    )?
    .context("refusing the session: no container was started")?;
    let mut cmd = session_command(Some(&sandbox), launch, env, cwd)?;
    let status =
        wait_forwarding_signals(&mut cmd).context("cannot start the session in the container")?;
    drop(sandbox);
    Ok(vs_sandbox::launch::exit_code(status) as u8)
}

/// The session in the slurm run environment: the run's broker (stopped,
/// with every job it submitted, when the session ends, whatever the
/// outcome), then the session in the editor container with the agent
/// socket mounted and named by `VIBESYS_BROKER_SOCKET`.
fn run_in_slurm(
    args: &SessionArgs,
    (project, egress_log): (
        &crate::project::ProjectPolicy,
        Option<&vs_runtime::SessionEgressLog>,
    ),
    launch: &agentshim::Launch,
    mut env: vs_agent::SessionEnv,
    cwd: &std::path::Path,
    agent_gpu: bool,
    state: Vec<vs_docker::ExtraMount>,
) -> anyhow::Result<u8> {
    if let vs_runtime::environment::Availability::NotAvailable { reason } =
        vs_runtime::RunEnvironment::Slurm.describe().availability
    {
        bail!("the slurm run environment is not available here: {reason}");
    }
    let run = crate::docker_cmd::run_id();
    // Agent jobs get the session's own network flags; the project's
    // [sandbox] network and allow_hosts the broker reads itself.
    let broker = BrokerChild::start(BrokerStart {
        helper: &crate::project::helper_exe()?,
        project: project.workspace.root(),
        run: &run,
        agent_gpu,
        candidates: 0,
        checkout: None,
        allow_hosts: &args.policy.allow_host,
        no_network: args.policy.no_network,
    })?;
    env.vars.push((
        child::BROKER_SOCKET_ENV.into(),
        child::AGENT_SOCKET_IN_CONTAINER.into(),
    ));
    let outcome = run_in_docker(
        args,
        (project, egress_log),
        launch,
        &env,
        cwd,
        Some(&broker),
        state,
    );
    drop(broker);
    outcome
}
