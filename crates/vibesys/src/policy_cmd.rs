//! `vibesys policy show`: the exact plan each backend would apply. It
//! writes nothing: the settings are `exec`'s, resolved without preparing
//! the run state, lowered by `vs_sandbox::plan`, the function `exec`'s
//! sandboxes are built by.

use std::ffi::OsString;

use clap::{Args, Subcommand, ValueEnum};
use vs_runtime::policy_show::{self, ShowRequest};
use vs_sandbox::Backend;

use crate::project::{PolicyArgs, cwd, helper_exe, host_env};

/// Arguments of `vibesys policy`.
#[derive(Debug, Args)]
pub struct PolicyCmdArgs {
    #[command(subcommand)]
    command: PolicyCommand,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Print the validated policy and the plan each backend would apply:
    /// the bwrap argv, the Landlock rules, the Seatbelt profile, and which
    /// paths a backend does not enforce.
    Show(ShowArgs),
}

/// Backends `policy show` can print (clap's names for
/// `vs_sandbox::Backend`, in the order they are printed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum BackendArg {
    Bwrap,
    Landlock,
    Seatbelt,
    Docker,
}

#[derive(Debug, Args)]
struct ShowArgs {
    #[command(flatten)]
    policy: PolicyArgs,
    /// Show only this backend (default: all).
    #[arg(long, value_enum)]
    backend: Option<BackendArg>,
    /// Print JSON (stable; documented in docs/cli.md).
    #[arg(long)]
    json: bool,
    /// Show the policy a session or run of this provider gets (codex,
    /// claude, gemini): an allow-list then admits its API host too.
    #[arg(long, value_name = "NAME")]
    provider: Option<String>,
    /// The command whose plan to show, as `exec -- CMD` would run it (its
    /// host resources depend on it; default `sh`).
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Runs `vibesys policy ...`.
pub fn run(args: PolicyCmdArgs) -> anyhow::Result<u8> {
    match args.command {
        PolicyCommand::Show(show) => run_show(show),
    }
}

fn run_show(args: ShowArgs) -> anyhow::Result<u8> {
    // The settings `exec` resolves, without writing to the project.
    let mut project = args.policy.plan()?;
    if let Some(name) = &args.provider {
        let provider: agentshim::Provider = name.parse()?;
        if let Some(host) = provider.api_host(|v| std::env::var_os(v))? {
            project.add_provider_host(&host)?;
        }
    }
    let host_env = host_env();
    let cwd = cwd();
    // The environment `exec` gives the command (without --env).
    let exec_env = vs_agent::env::exec_env_allowlist(std::env::vars_os(), &[])?.vars;
    let request = ShowRequest {
        project: &project,
        command: args.command.clone(),
        host_env: &host_env,
        cwd: cwd.as_deref(),
        helper: helper_exe()?,
        exec_env: &exec_env,
        backends: BackendArg::value_variants()
            .iter()
            .filter(|&&b| args.backend.is_none_or(|x| x == b))
            .map(|&b| b.sandbox())
            .collect(),
    };
    let shown = policy_show::show(request, &mut || {
        crate::docker_cmd::options_for(&project, None, args.policy.project.as_deref())
            .map_err(|e| format!("{e:#}"))
    })?;
    if args.json {
        crate::output::print_json(&shown.to_json())?;
    } else {
        crate::output::print_text(&shown.to_string())?;
    }
    Ok(0)
}

impl BackendArg {
    /// The sandbox's backend of this name.
    fn sandbox(self) -> Backend {
        match self {
            Self::Bwrap => Backend::Bwrap,
            Self::Landlock => Backend::Landlock,
            Self::Seatbelt => Backend::Seatbelt,
            Self::Docker => Backend::Docker,
        }
    }
}
