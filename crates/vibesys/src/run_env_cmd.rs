//! `vibesys run-env show`: which command runner and which confinement each
//! run environment uses, and `run-env eval` (see `remote_cmd`).

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use serde::Serialize;
use vs_runtime::environment::ALL_ENVIRONMENTS;
use vs_runtime::{EnvironmentDescription, RunEnvironment};

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

#[derive(Serialize)]
struct RunEnvShow {
    default: &'static str,
    environments: Vec<EnvironmentDescription>,
}

/// Runs `vibesys run-env`.
pub fn run_env(args: RunEnvCmdArgs) -> anyhow::Result<u8> {
    let (env, json) = match args.command {
        RunEnvCommand::Show { env, json } => (env, json),
        RunEnvCommand::Eval(eval) => return crate::remote_cmd::run(eval),
    };
    let selected = env.resolve()?;
    let environments: Vec<EnvironmentDescription> = match selected {
        Some(e) => vec![e.describe()],
        None => ALL_ENVIRONMENTS.iter().map(|e| e.describe()).collect(),
    };
    let show = RunEnvShow {
        default: RunEnvironment::default().name(),
        environments,
    };
    if json {
        print_json(&serde_json::to_value(&show)?)?;
        return Ok(0);
    }
    let mut text = String::new();
    for d in &show.environments {
        let default = if d.name == show.default {
            " (default)"
        } else {
            ""
        };
        let status = match &d.availability {
            vs_runtime::Availability::Available => "available".to_owned(),
            vs_runtime::Availability::NotAvailable { reason } => {
                format!("not available here: {reason}")
            }
        };
        let _ = writeln!(
            text,
            "{}{default}\n  runner:      {}\n  confinement: {}\n  evaluation:  {}\n  status:      {status}",
            d.name, d.runner, d.confinement, d.evaluation
        );
    }
    print_text(&text)?;
    Ok(0)
}
