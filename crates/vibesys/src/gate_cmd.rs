//! `vibesys gate ...`: the accuracy gate (vs-runtime).

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;
use vs_runtime::{GateBaseline, GateEntry, ProtectedSet, RunId, StateLayout};

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

/// A path for human output: quoted when it holds control characters, so a
/// hostile file name cannot forge extra lines.
fn shown(path: &str) -> String {
    if path.chars().any(char::is_control) {
        format!("{path:?}")
    } else {
        path.to_owned()
    }
}

fn baseline(a: BaselineArgs) -> anyhow::Result<u8> {
    let run = RunId::new(&a.run)?;
    let layout = StateLayout::open(&a.project)?;
    let mut requested = ProtectedSet::configured(&layout)?;
    requested.extend(a.protect);
    let protect = ProtectedSet::resolve(&layout, &requested)?;
    let b = GateBaseline::record(&layout, &run, &protect)?;
    let (files, bytes) = b
        .entries()
        .values()
        .fold((0u64, 0u64), |(n, s), e| match e {
            GateEntry::File { size, .. } => (n + 1, s + size),
            _ => (n, s),
        });
    let rel = Path::new(vs_runtime::state::STATE_DIR)
        .join("runs")
        .join(run.as_str())
        .join(vs_runtime::gate::BASELINE_FILE);
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = json!({
            "run_id": run,
            "baseline": rel.to_string_lossy(),
            "protect": b.protect(),
            "entries": b.entries().len(),
            "files": files,
            "bytes": bytes,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        writeln!(
            out,
            "gate baseline for run {run}: {} paths ({files} files, {bytes} bytes) in {}",
            b.entries().len(),
            rel.display()
        )?;
    }
    Ok(0)
}

fn check(a: &CheckArgs) -> anyhow::Result<u8> {
    let run = RunId::new(&a.run)?;
    let layout = StateLayout::open(&a.project)?;
    let report = GateBaseline::load(&layout, &run)?.check(&layout)?;
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = json!({
            "run_id": report.run_id,
            "ok": report.is_clean(),
            "baseline_entries": report.baseline_entries,
            "current_entries": report.current_entries,
            "differences": report.differences,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else if report.is_clean() {
        writeln!(
            out,
            "gate check for run {run}: ok, {} paths unchanged",
            report.baseline_entries
        )?;
    } else {
        for d in &report.differences {
            writeln!(out, "{}: {}", d.change, shown(&d.path))?;
        }
        out.flush()?;
        eprintln!(
            "vibesys: gate check for run {run} failed: {} protected paths differ from the baseline",
            report.differences.len()
        );
    }
    Ok(if report.is_clean() {
        0
    } else {
        EXIT_GATE_DIFFERS
    })
}
