//! `vibesys state ...`: the run-state layout (vs-runtime).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use vs_runtime::StateLayout;
use vs_runtime::state_report;

use crate::output::{print_json, print_text};

/// Arguments of `vibesys state`.
#[derive(Debug, Args)]
pub struct StateArgs {
    #[command(subcommand)]
    command: StateCommand,
}

#[derive(Debug, Subcommand)]
enum StateCommand {
    /// Create `.vibesys/state/` (runs/, local/, agent-visible/, project.json,
    /// .gitignore). Idempotent; refuses when private files (agent.toml,
    /// .env, .env.*) can be recovered from git history.
    Init(CommonArgs),
    /// Print the state layout and what the agent may do with each entry.
    Show(CommonArgs),
}

#[derive(Debug, Args)]
struct CommonArgs {
    /// Project directory (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    project: PathBuf,
    /// Print stable JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `vibesys state ...` and returns the exit status.
pub fn run(args: StateArgs) -> anyhow::Result<u8> {
    match args.command {
        StateCommand::Init(a) => init(&a),
        StateCommand::Show(a) => show(&a),
    }
}

fn init(a: &CommonArgs) -> anyhow::Result<u8> {
    let report = state_report::init(&StateLayout::open(&a.project)?)?;
    if a.json {
        print_json(&serde_json::to_value(&report)?)?;
    } else {
        print_text(&report.to_string())?;
    }
    Ok(0)
}

fn show(a: &CommonArgs) -> anyhow::Result<u8> {
    let report = state_report::show(&StateLayout::open(&a.project)?)?;
    if a.json {
        print_json(&serde_json::to_value(&report)?)?;
    } else {
        print_text(&report.to_string())?;
    }
    Ok(0)
}
