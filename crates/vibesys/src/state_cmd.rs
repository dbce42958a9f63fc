//! `vibesys state ...`: the run-state layout (vs-runtime).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::json;
use vs_runtime::state::STATE_DIR;
use vs_runtime::{InitOutcome, StateLayout};

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

fn rel_strings(paths: Vec<PathBuf>) -> Vec<String> {
    paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

fn init(a: &CommonArgs) -> anyhow::Result<u8> {
    let layout = StateLayout::open(&a.project)?;
    let InitOutcome {
        project,
        created,
        gitignore_updated,
    } = layout.init()?;
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = json!({
            "state_dir": STATE_DIR,
            "schema_version": project.schema_version,
            "project_id": project.project_id,
            "created_at": project.created_at,
            "created": created,
            "gitignore_updated": gitignore_updated,
            "hidden": rel_strings(StateLayout::hidden_paths()),
            "read_only": rel_strings(StateLayout::read_only_paths()),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        let verb = if created {
            "initialized"
        } else {
            "already initialized"
        };
        writeln!(
            out,
            "{STATE_DIR}: {verb}, project id {}",
            project.project_id
        )?;
        if gitignore_updated {
            writeln!(out, "{STATE_DIR}/.gitignore: added /local/")?;
        }
    }
    Ok(0)
}

fn present(project: &Path, rel: &Path) -> bool {
    project.join(rel).symlink_metadata().is_ok()
}

fn show(a: &CommonArgs) -> anyhow::Result<u8> {
    let layout = StateLayout::open(&a.project)?;
    let record = layout
        .read_project()
        .context("cannot read the project record")?;
    let entries: Vec<serde_json::Value> = StateLayout::entries()
        .iter()
        .map(|e| {
            let rel = Path::new(STATE_DIR).join(e.name);
            json!({
                "path": rel.to_string_lossy(),
                "kind": e.kind,
                "access": e.access,
                "present": present(layout.project(), &rel),
                "purpose": e.purpose,
            })
        })
        .collect();
    let mut out = std::io::stdout().lock();
    if a.json {
        let v = json!({
            "state_dir": STATE_DIR,
            "initialized": record.is_some(),
            "project_id": record.as_ref().map(|r| r.project_id.clone()),
            "created_at": record.as_ref().map(|r| r.created_at.clone()),
            "entries": entries,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        match &record {
            Some(r) => writeln!(
                out,
                "project id {} (created {})",
                r.project_id, r.created_at
            )?,
            None => writeln!(out, "not initialized: run `vibesys state init`")?,
        }
        for e in &entries {
            writeln!(
                out,
                "{:<32} {:<10} {:<9} {}",
                e["path"].as_str().unwrap_or_default(),
                e["access"].as_str().unwrap_or_default(),
                if e["present"].as_bool().unwrap_or(false) {
                    "present"
                } else {
                    "missing"
                },
                e["purpose"].as_str().unwrap_or_default(),
            )?;
        }
    }
    Ok(0)
}
