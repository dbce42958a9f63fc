//! `vibesys gate ...`: the accuracy gate (vs-runtime).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use vs_runtime::gate_report::record_baseline;
use vs_runtime::{GateBaseline, RunId, StateLayout};

use crate::output::{print_json, print_text};

/// Exit status of `gate check` when a protected path differs.
pub const EXIT_GATE_DIFFERS: u8 = 1;

/// Arguments of `vibesys gate`.
#[derive(Debug, Args)]
pub struct GateArgs {
    #[command(subcommand)]
    command: GateCommand,
}

#[derive(Debug, Subcommand)]
enum GateCommand {
    /// Record the BLAKE3 digest of every protected path into the hidden run
    /// record (.vibesys/state/runs/RUN_ID/gate-baseline.json, schema 2).
    Baseline(BaselineArgs),
    /// Compare the protected paths with the run's baseline: exit 0 when
    /// identical, 1 listing each changed, added or removed path.
    Check(CheckArgs),
}

#[derive(Debug, Args)]
struct BaselineArgs {
    /// Project directory (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    project: PathBuf,
    /// Run id (^[a-z0-9][a-z0-9._-]{0,127}$).
    #[arg(long = "run", value_name = "RUN_ID", allow_hyphen_values = true)]
    run: String,
    /// A path to protect, inside the project (repeatable); added to
    /// `[gate] protect` of vibesys.toml. Directories are walked; symlinks
    /// are recorded with their target, never followed.
    #[arg(long = "protect", value_name = "PATH")]
    protect: Vec<PathBuf>,
    /// Print stable JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// Project directory (default: the current directory).
    #[arg(long, value_name = "DIR", default_value = ".")]
    project: PathBuf,
    /// Run id whose baseline to check against.
    #[arg(long = "run", value_name = "RUN_ID", allow_hyphen_values = true)]
    run: String,
    /// Print stable JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `vibesys gate ...` and returns the exit status.
pub fn run(args: GateArgs) -> anyhow::Result<u8> {
    match args.command {
        GateCommand::Baseline(a) => baseline(a),
        GateCommand::Check(a) => check(&a),
    }
}

fn baseline(a: BaselineArgs) -> anyhow::Result<u8> {
    let run = RunId::new(&a.run)?;
    let report = record_baseline(&StateLayout::open(&a.project)?, &run, a.protect)?;
    if a.json {
        print_json(&serde_json::to_value(&report)?)?;
    } else {
        print_text(&report.to_string())?;
    }
    Ok(0)
}

fn check(a: &CheckArgs) -> anyhow::Result<u8> {
    let run = RunId::new(&a.run)?;
    let layout = StateLayout::open(&a.project)?;
    let report = GateBaseline::load(&layout, &run)?.check(&layout)?;
    if a.json {
        print_json(&serde_json::to_value(report.json())?)?;
    } else {
        print_text(&report.to_string())?;
        if let Some(failure) = report.failure() {
            eprintln!("vibesys: {failure}");
        }
    }
    Ok(if report.is_clean() {
        0
    } else {
        EXIT_GATE_DIFFERS
    })
}
