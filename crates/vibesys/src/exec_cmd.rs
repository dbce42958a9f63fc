//! `vibesys exec`: run one command confined to the project.

use std::ffi::OsString;

use clap::{Args, ValueEnum};
use vs_runtime::exec::ExecLaunch;
use vs_sandbox::{ConfineMode, Enforcement, OperatorChoice, Purpose, RunPlace};

use crate::project::{PolicyArgs, cwd, helper_exe, host_env};

/// What `vibesys exec` does, in `vibesys --help` and `vibesys exec --help`.
pub const ABOUT: &str = "Run a command confined to the project (bwrap, Landlock or Docker)";

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

The policy comes from vibesys.toml ([sandbox] read_only, hidden, allow, network, allow_hosts,
widen, git, max_processes), the flags, the run-state paths when .vibesys/state exists, and the
default protections (agent.toml, .env, .env.* hidden; .git, vibesys.toml, .vibesys read-only).
vibesys stays the parent: SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to the command, and
whatever it leaves running is killed when it exits.

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

impl ConfineArg {
    /// The mode the flag names (`auto`: follow VIBESYS_AGENT_SANDBOX).
    pub fn mode(self) -> ConfineMode {
        match self {
            Self::Auto => ConfineMode::Auto,
            Self::Bwrap => ConfineMode::Bwrap,
            Self::Landlock => ConfineMode::Landlock,
            Self::Docker => ConfineMode::Docker,
            Self::None => ConfineMode::Off,
        }
    }
}

impl ConfineArgs {
    /// What the operator asked for: the flag and VIBESYS_AGENT_SANDBOX
    /// (an unknown value is an error even under an explicit flag).
    pub fn choice(&self) -> anyhow::Result<OperatorChoice> {
        Ok(OperatorChoice::from_env(self.confine.mode())?)
    }

    /// The enforcement asked for: required unless
    /// `--no-require-enforcement`.
    pub fn enforcement(&self) -> Enforcement {
        if self.no_require_enforcement {
            Enforcement::Optional
        } else {
            Enforcement::Required
        }
    }
}

/// Runs `vibesys exec`: arguments → settings →
/// [`vs_runtime::exec::ExecLaunch::run`].
pub fn run(args: ExecArgs) -> anyhow::Result<u8> {
    let resolved = args.confine.choice()?.resolve(
        Purpose::Exec,
        RunPlace::Host,
        args.confine.enforcement(),
    )?;
    let project = args.policy.resolve()?;
    let env = command_env(&args)?;
    let cwd = cwd();
    let host_env = host_env();
    let launch = ExecLaunch {
        project: &project,
        command: &args.command,
        env: env.as_deref(),
        host_env: &host_env,
        cwd: cwd.as_deref(),
        helper: helper_exe()?,
    };
    // vibesys stays the parent: a failure to confine is an error (nothing
    // ran); otherwise the command's own status.
    let code = launch.run(resolved, &mut || {
        crate::docker_cmd::options_for(
            &project,
            args.confine.image.as_deref(),
            args.policy.project.as_deref(),
        )
        .map_err(|e| format!("{e:#}"))
    })?;
    Ok(u8::try_from(code).unwrap_or(crate::EXIT_VIBESYS_ERROR))
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
