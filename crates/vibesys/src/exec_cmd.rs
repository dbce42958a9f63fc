//! `vibesys exec`: run one command confined to the project.

use std::ffi::OsString;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use vs_sandbox::bwrap::find_bwrap;
use vs_sandbox::controls::{SANDBOX_ENV, allow_unconfined};
use vs_sandbox::launch;
use vs_sandbox::{
    BwrapOptions, ConfineMode, Confinement, Enforcement, HostSandbox, LandlockOptions,
    LandlockSandbox,
};

use crate::project::{PolicyArgs, chdir_in, helper_exe};

/// The `--confine` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConfineArg {
    /// Follow VIBESYS_AGENT_SANDBOX (default: bubblewrap).
    Auto,
    /// bubblewrap: namespaces, read-only host, masked hidden paths.
    Bwrap,
    /// Landlock: weaker; read-only and hidden paths are NOT enforced.
    Landlock,
    /// A Docker container from the pinned editor image.
    Docker,
    /// No confinement (needs --no-require-enforcement).
    None,
}

/// Arguments of `vibesys exec`.
#[derive(Debug, Args)]
#[command(after_help = "\
Exit status: the command's own status (128+N when killed by signal N); 125 when vibesys
itself fails (invalid policy, sandbox unavailable, bad operator value): the command did not run.

The policy comes from vibesys.toml ([sandbox] read_only, hidden, allow, network, widen, git,
max_processes), the flags, the run-state paths when .vibesys/state exists, and the default
protections (agent.toml, .env, .env.* hidden; .git, vibesys.toml, .vibesys read-only). vibesys
stays the parent: SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the command, and whatever
it leaves running is killed when it exits.

The command gets an allow-listed environment (see --env and --inherit-env), never the caller's
credentials by default.")]
pub struct ExecArgs {
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    confine: ConfineArgs,
    /// Pass this environment variable of the caller to the command
    /// (repeatable). Only an allow-list reaches it otherwise: PATH, HOME,
    /// USER, SHELL, LANG/LC_*, TERM, TZ, TMPDIR, proxy and CA variables,
    /// VIBESYS_AGENT_SANDBOX(_ALLOW), CUDA_VISIBLE_DEVICES.
    #[arg(long = "env", value_name = "NAME")]
    env: Vec<String>,
    /// Pass the caller's whole environment (credentials included), logged.
    #[arg(long = "inherit-env")]
    inherit_env: bool,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// The confinement flags shared by `exec` and `session`.
#[derive(Debug, Args)]
pub struct ConfineArgs {
    /// The confinement mechanism; `auto` follows VIBESYS_AGENT_SANDBOX.
    #[arg(long, value_enum, default_value_t = ConfineArg::Auto)]
    pub confine: ConfineArg,
    /// The image for --confine docker: a name pinned in images/images.lock
    /// (default vibesys-editor) or a pinned image ID (sha256:...).
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,
    /// Allow running unconfined when confinement is disabled (a library
    /// embedder's choice; every run entry point requires enforcement).
    #[arg(long = "no-require-enforcement")]
    pub no_require_enforcement: bool,
}

impl ConfineArgs {
    /// The mechanism and the enforcement requirement. An explicit
    /// `--confine` wins; `auto` reads VIBESYS_AGENT_SANDBOX (an unknown
    /// value is an error either way).
    pub fn resolve(&self) -> anyhow::Result<(ConfineMode, Enforcement)> {
        let env_mode = ConfineMode::from_env_value(std::env::var_os(SANDBOX_ENV).as_deref())?;
        let mode = match self.confine {
            ConfineArg::Auto => env_mode,
            ConfineArg::Bwrap => ConfineMode::Bwrap,
            ConfineArg::Landlock => ConfineMode::Landlock,
            ConfineArg::Docker => ConfineMode::Docker,
            ConfineArg::None => ConfineMode::Off,
        };
        let enforcement = if self.no_require_enforcement {
            Enforcement::Optional
        } else {
            Enforcement::Required
        };
        Ok((mode, enforcement))
    }
}

/// Runs `vibesys exec`.
pub fn run(args: ExecArgs) -> anyhow::Result<u8> {
    let (mode, enforcement) = args.confine.resolve()?;
    let project = args.policy.resolve()?;
    if allow_unconfined(mode, enforcement)? {
        let (program, rest) = args.command.split_first().context("the command is empty")?;
        let status = std::process::Command::new(program)
            .args(rest)
            .current_dir(
                chdir_in(&project.workspace)
                    .unwrap_or_else(|| project.workspace.root().to_path_buf()),
            )
            .status()
            .with_context(|| format!("cannot run {program:?}"))?;
        return Ok(launch::exit_code(status) as u8);
    }
    let resources = project.resources(&args.command[0], &args.policy.allow);
    match mode {
        ConfineMode::Auto | ConfineMode::Bwrap => {
            if cfg!(target_os = "macos") && mode == ConfineMode::Auto {
                bail!(
                    "the seatbelt backend is planned but `vibesys exec` runs it only on macOS builds"
                );
            }
            let path_var = std::env::var_os("PATH");
            let options = BwrapOptions {
                program: find_bwrap(path_var.as_deref())?,
                network: project.network,
                chdir: chdir_in(&project.workspace),
                helper: helper_exe()?,
                writable: Vec::new(),
                read_only_within: Vec::new(),
                private_files: Vec::new(),
                max_processes: project.config.max_processes(),
                devices: project.config.devices.clone(),
            };
            let sandbox = HostSandbox::new(&project.resolved, &resources, &options)?;
            let mut plan = sandbox.plan().clone();
            plan.args.extend(bwrap_env_args(command_env(&args)?));
            let code = launch::run_bwrap(&plan, &args.command, sandbox.process_limit())?;
            Ok(code as u8)
        }
        ConfineMode::Landlock => {
            let options = LandlockOptions {
                network: project.network,
                helper: helper_exe()?,
                writable: Vec::new(),
                max_processes: project.config.max_processes(),
            };
            let sandbox = LandlockSandbox::new(&project.resolved, &resources, &options)?;
            debug_assert_eq!(sandbox.backend(), "landlock");
            if let Some(dir) = chdir_in(&project.workspace)
                .or_else(|| Some(project.workspace.root().to_path_buf()))
            {
                std::env::set_current_dir(&dir)
                    .with_context(|| format!("cannot enter {}", dir.display()))?;
            }
            // vibesys stays the parent: a failure to confine is an error
            // (nothing ran); otherwise the command's own status.
            let env = command_env(&args)?;
            let code = launch::run_landlock(
                sandbox.plan(),
                &args.command,
                sandbox.process_limit(),
                env.as_deref(),
            )?;
            Ok(code as u8)
        }
        ConfineMode::Docker => crate::docker_cmd::exec(
            &project,
            args.confine.image.as_deref(),
            args.policy.project.as_deref(),
            &args.command,
        ),
        ConfineMode::Off => unreachable_off(),
    }
}

/// The command's environment: the allow-list (plus `--env` names), or
/// `None` (inherit everything) with `--inherit-env`, logged.
fn command_env(args: &ExecArgs) -> anyhow::Result<Option<Vec<(OsString, OsString)>>> {
    if args.inherit_env {
        tracing::warn!(
            "--inherit-env: the confined command gets the caller's whole environment, credentials included"
        );
        return Ok(None);
    }
    let env = vs_agent::env::exec_env_allowlist(std::env::vars_os(), &args.env)?;
    Ok(Some(env.vars))
}

/// bwrap arguments that give the command exactly `env` (nothing when the
/// environment is inherited).
fn bwrap_env_args(env: Option<Vec<(OsString, OsString)>>) -> Vec<String> {
    let Some(env) = env else {
        return Vec::new();
    };
    let mut out = vec!["--clearenv".to_owned()];
    for (k, v) in env {
        match (k.into_string(), v.into_string()) {
            (Ok(k), Ok(v)) => out.extend(["--setenv".to_owned(), k, v]),
            (k, _) => tracing::warn!(
                name = %k.unwrap_or_else(|n| n.to_string_lossy().into_owned()),
                "dropping an environment variable whose value is not UTF-8"
            ),
        }
    }
    out
}

fn unreachable_off() -> anyhow::Result<u8> {
    bail!("internal error: disabled confinement reached the backend dispatch")
}
