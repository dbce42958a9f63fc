//! `vibesys session`: launch a provider CLI (codex, claude, gemini) or any
//! command as a confined agent session.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use vs_agent::{
    ExecutionPolicy, confine, prepare_state_paths, session_command, session_env_allowlist,
};
use vs_sandbox::bwrap::find_bwrap;

use crate::exec_cmd::ConfineArgs;
use crate::project::{PolicyArgs, chdir_in, helper_exe};

/// Arguments of `vibesys session`.
#[derive(Debug, Args)]
#[command(after_help = "\
The provider runs with its own approvals and sandbox OFF (codex
--dangerously-bypass-approvals-and-sandbox, claude --dangerously-skip-permissions,
gemini --approval-mode=yolo --sandbox=false): vibesys's confinement is the only boundary.
Only allow-listed variables reach the agent (PATH, HOME, USER, LANG, LC_*, TERM, TZ, TMPDIR,
proxy and CA variables, the provider's auth and state variables, and --env NAME extras);
dropped names are logged once, values never. The provider's state directory (e.g. ~/.codex)
is the only writable path outside the project.

Exit status: the session's own; 125 when vibesys fails (nothing ran).")]
pub struct SessionArgs {
    /// codex, claude, gemini, or `custom` (the command after --).
    #[arg(long, value_name = "NAME")]
    provider: String,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    confine: ConfineArgs,
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
    let (mode, enforcement) = args.confine.resolve()?;
    let project = args.policy.resolve()?;
    let env = session_env_allowlist(std::env::vars_os(), &provider, &args.env)?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let state = match &home {
        Some(home) => prepare_state_paths(&provider, home, |v| std::env::var_os(v))?,
        None => vs_agent::StateBinds::default(),
    };
    let program = launch
        .argv
        .first()
        .cloned()
        .context("the provider command is empty")?;
    let exec = ExecutionPolicy {
        policy: project.resolved.clone(),
        resources: project.resources(&program, &args.policy.allow),
        mode,
        enforcement,
        network: project.network,
        max_processes: project.config.max_processes(),
    };
    let cwd =
        chdir_in(&project.workspace).unwrap_or_else(|| project.workspace.root().to_path_buf());
    if mode == vs_sandbox::ConfineMode::Docker {
        return run_in_docker(
            &args,
            &project,
            &launch,
            &env,
            &cwd,
            home.as_deref(),
            &state,
        );
    }
    let bwrap = find_bwrap(std::env::var_os("PATH").as_deref()).unwrap_or_else(|_| "bwrap".into());
    let confinement = confine(&exec, &helper_exe()?, &bwrap, state)?;
    let mut cmd = session_command(confinement.as_deref(), &launch, &env, &cwd)?;
    let status = cmd
        .status()
        .with_context(|| format!("cannot start the session ({})", provider.name()))?;
    Ok(vs_sandbox::launch::exit_code(status) as u8)
}

/// HOME of the pinned images (images/*.toml `config.env`): the provider's
/// state locations below the host's HOME are bound below it.
const IMAGE_HOME: &str = "/home/agent";

/// Where each state location goes in the container: a path below the
/// host's HOME at the same place below [`IMAGE_HOME`], any other (an
/// override variable such as `CLAUDE_CONFIG_DIR`, which crosses into the
/// container) at its host path. Writable locations read-write, the
/// configuration entries inside them read-only, as on the host.
fn state_binds(
    home: Option<&std::path::Path>,
    state: &vs_agent::StateBinds,
) -> Vec<vs_sandbox::docker::StateBind> {
    let target = |p: &std::path::Path| match home.and_then(|h| p.strip_prefix(h).ok()) {
        Some(rel) if !rel.as_os_str().is_empty() => std::path::Path::new(IMAGE_HOME).join(rel),
        _ => p.to_path_buf(),
    };
    let bind = |p: &PathBuf, read_only| vs_sandbox::docker::StateBind {
        source: p.clone(),
        target: target(p),
        read_only,
    };
    state
        .writable
        .iter()
        .map(|p| bind(p, false))
        .chain(state.read_only_within.iter().map(|p| bind(p, true)))
        .collect()
}

/// The session in the run's container (the docker run environment): the
/// same launcher, with the DockerSandbox as the confinement, and the
/// provider's state locations bound in (see [`state_binds`]). Only the
/// allow-listed names cross into the container; PATH, HOME, USER, SHELL
/// and TMPDIR are the image's own.
fn run_in_docker(
    args: &SessionArgs,
    project: &crate::project::ProjectPolicy,
    launch: &agentshim::Launch,
    env: &vs_agent::SessionEnv,
    cwd: &std::path::Path,
    home: Option<&std::path::Path>,
    state: &vs_agent::StateBinds,
) -> anyhow::Result<u8> {
    use vs_sandbox::docker::{DockerSandbox, EnvAllowList};
    const HOST_ONLY: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR"];
    let mut options = crate::docker_cmd::options_for(
        project,
        args.confine.image.as_deref(),
        args.policy.project.as_deref(),
    )?;
    let names: Vec<String> = env
        .vars
        .iter()
        .filter_map(|(k, _)| k.to_str())
        .chain(launch.env.iter().map(|(k, _)| *k))
        .filter(|k| !HOST_ONLY.contains(k))
        .map(str::to_owned)
        .collect();
    options.env = EnvAllowList::default().with(names);
    options.state = state_binds(home, state);
    let sandbox = DockerSandbox::start(&project.resolved, &options)?;
    let mut cmd = session_command(Some(&sandbox), launch, env, cwd)?;
    let status = cmd
        .status()
        .context("cannot start the session in the container")?;
    drop(sandbox);
    Ok(vs_sandbox::launch::exit_code(status) as u8)
}
