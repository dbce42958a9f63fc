//! `vibesys session`: launch a provider CLI (codex, claude, gemini) or any
//! command as a confined agent session.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::Args;
use vs_agent::{prepare_state_paths, provider_launch, session_env_allowlist};
use vs_runtime::agent_session::{SessionLaunch, SessionPlace, session_place, state_mounts};
use vs_runtime::broker::child::{self, BrokerStart};
use vs_sandbox::{Purpose, Resolved};

use crate::exec_cmd::ConfineArgs;
use crate::project::{PolicyArgs, ProjectPolicy, helper_exe, host_env};

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
    let (provider, launch) = provider_launch(
        &args.provider,
        &args.args,
        args.prompt.as_deref(),
        args.resume.as_deref(),
    )?;
    let choice = args.confine.choice()?;
    let at = session_place(args.run_environment.as_deref())?;
    let resolved = choice.resolve(Purpose::Agent, at.place, args.confine.enforcement())?;
    // The policy, whose allow-list admits the provider's own API host.
    let resolve = || -> anyhow::Result<ProjectPolicy> {
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
    let egress_log = if project.egress_restricted() && resolved.confines() {
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
    let _session_dir = if resolved.confines() {
        state.private_copies(&mut env, project.workspace.root())?
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
        resolved,
        at,
    );
    state.return_kept();
    result
}

/// The session's refusal log in the project's run state, which is
/// prepared when missing (true: the policy must be resolved again), and
/// a line saying where it is. Where there is none (the run state cannot
/// be prepared or the log created) a line says why and the session goes
/// on: its refusals still reach stderr.
fn egress_log(project: &ProjectPolicy) -> (Option<vs_runtime::SessionEgressLog>, bool) {
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
    (project, egress_log): (&ProjectPolicy, Option<&vs_runtime::SessionEgressLog>),
    (provider, launch): (&str, &agentshim::Launch),
    env: &vs_agent::SessionEnv,
    state: &vs_agent::StateBinds,
    home: Option<&Path>,
    resolved: Resolved,
    at: SessionPlace<'_>,
) -> anyhow::Result<u8> {
    let cwd = project
        .chdir_in(crate::project::cwd().as_deref())
        .unwrap_or_else(|| project.workspace.root().to_path_buf());
    let host_env = host_env();
    let session = SessionLaunch {
        provider,
        project,
        egress_log,
        launch,
        env,
        cwd: &cwd,
        host_env: &host_env,
        helper: helper_exe()?,
    };
    let mut options = || {
        crate::docker_cmd::options_for(
            project,
            args.confine.image.as_deref(),
            args.policy.project.as_deref(),
        )
        .map_err(|e| format!("{e:#}"))
    };
    let code = if at.environment == Some(vs_runtime::RunEnvironment::Slurm) {
        if at.slurm_gpu_alias {
            child::warn_slurm_gpu_alias();
        }
        // Agent jobs get the session's own network flags; the project's
        // [sandbox] network and allow_hosts the broker reads itself.
        let broker = BrokerStart {
            helper: &session.helper,
            project: project.workspace.root(),
            run: &crate::docker_cmd::run_id(),
            agent_gpu: at.slurm_gpu_alias,
            candidates: 0,
            checkout: None,
            allow_hosts: &args.policy.allow_host,
            no_network: args.policy.no_network,
        };
        session.in_slurm(&mut options, state_mounts(home, state), broker)?
    } else if resolved.needs_container() {
        session.in_container(&mut options, state_mounts(home, state))?
    } else {
        session.on_host(state, resolved)?
    };
    Ok(code as u8)
}
