//! `vibesys run-env show`: which command runner and which confinement each
//! run environment uses, and `run-env eval` (see `remote_cmd`).

use clap::{Args, Subcommand};
use vs_runtime::environment_report::EnvironmentReport;

use crate::env_args::RunEnvArgs;
use crate::output::{print_json, print_text};

/// `vibesys run-env`.
#[derive(Debug, Args)]
pub struct RunEnvCmdArgs {
    #[command(subcommand)]
    command: RunEnvCommand,
}

#[derive(Debug, Subcommand)]
enum RunEnvCommand {
    /// Show which command runner and confinement an environment uses, and
    /// whether this build can run anything in it.
    Show {
        #[command(flatten)]
        env: RunEnvArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Dispatch one candidate's trusted check and measure to Modal or
    /// SkyPilot through the service's own client (docs/remote.md).
    Eval(crate::remote_cmd::EvalArgs),
}

/// Runs `vibesys run-env`.
pub fn run_env(args: RunEnvCmdArgs) -> anyhow::Result<u8> {
    let (env, json) = match args.command {
        RunEnvCommand::Show { env, json } => (env, json),
        RunEnvCommand::Eval(eval) => return crate::remote_cmd::run(eval),
    };
    // The services' images from the current directory's vibesys.toml.
    let show = EnvironmentReport::new(env.resolve()?, crate::project::cwd().as_deref());
    if json {
        print_json(&serde_json::to_value(&show)?)?;
    } else {
        print_text(&show.to_string())?;
    }
    Ok(0)
}
