//! `vibesys state init|show` as reports: what was prepared, and the
//! layout of `.vibesys/state/` with what the agent may do with each entry
//! (serde for `--json`, `Display` for text).

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::RuntimeError;
use crate::state::{AgentAccess, EntryKind, STATE_DIR, StateLayout};

/// Why a state report could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateReportError {
    /// `project.json` cannot be read.
    #[error("cannot read the project record")]
    ReadProject(#[source] RuntimeError),
    /// The run state.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

/// What `state init` did.
#[derive(Debug, Serialize)]
pub struct StateInitReport {
    /// `.vibesys/state`.
    pub state_dir: &'static str,
    /// The project record's schema.
    pub schema_version: u32,
    /// The project's id.
    pub project_id: String,
    /// When the state was first initialized.
    pub created_at: String,
    /// Whether `project.json` was written now.
    pub created: bool,
    /// Whether `.gitignore` was written now.
    pub gitignore_updated: bool,
    /// The entries hidden from the agent.
    pub hidden: Vec<String>,
    /// The entries the agent may only read.
    pub read_only: Vec<String>,
}

/// One entry of `state show`.
#[derive(Debug, Serialize)]
pub struct StateEntryReport {
    /// `.vibesys/state/NAME`.
    pub path: String,
    /// Directory or file.
    pub kind: EntryKind,
    /// What the agent may do with it.
    pub access: AgentAccess,
    /// Whether it exists.
    pub present: bool,
    /// Why it exists.
    pub purpose: &'static str,
}

/// The state layout, as `state show` prints it.
#[derive(Debug, Serialize)]
pub struct StateShowReport {
    /// `.vibesys/state`.
    pub state_dir: &'static str,
    /// Whether `project.json` exists.
    pub initialized: bool,
    /// The project's id, when initialized.
    pub project_id: Option<String>,
    /// When it was initialized.
    pub created_at: Option<String>,
    /// Every entry of the layout.
    pub entries: Vec<StateEntryReport>,
}

fn rel_strings(paths: Vec<PathBuf>) -> Vec<String> {
    paths
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect()
}

/// Creates the run state (idempotent) and reports what was done.
pub fn init(layout: &StateLayout) -> Result<StateInitReport, StateReportError> {
    let outcome = layout.init()?;
    Ok(StateInitReport {
        state_dir: STATE_DIR,
        schema_version: outcome.project.schema_version,
        project_id: outcome.project.project_id,
        created_at: outcome.project.created_at,
        created: outcome.created,
        gitignore_updated: outcome.gitignore_updated,
        hidden: rel_strings(StateLayout::hidden_paths()),
        read_only: rel_strings(StateLayout::read_only_paths()),
    })
}

/// The layout of the project's run state and which entries exist.
pub fn show(layout: &StateLayout) -> Result<StateShowReport, StateReportError> {
    let record = layout
        .read_project()
        .map_err(StateReportError::ReadProject)?;
    let entries = StateLayout::entries()
        .iter()
        .map(|e| {
            let rel = Path::new(STATE_DIR).join(e.name);
            StateEntryReport {
                present: layout.project().join(&rel).symlink_metadata().is_ok(),
                path: rel.to_string_lossy().into_owned(),
                kind: e.kind,
                access: e.access,
                purpose: e.purpose,
            }
        })
        .collect();
    Ok(StateShowReport {
        state_dir: STATE_DIR,
        initialized: record.is_some(),
        project_id: record.as_ref().map(|r| r.project_id.clone()),
        created_at: record.map(|r| r.created_at),
        entries,
    })
}

impl fmt::Display for StateInitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.created {
            "initialized"
        } else {
            "already initialized"
        };
        writeln!(f, "{STATE_DIR}: {verb}, project id {}", self.project_id)?;
        if self.gitignore_updated {
            writeln!(f, "{STATE_DIR}/.gitignore: added /local/")?;
        }
        Ok(())
    }
}

/// `access` as JSON names it.
fn access_name(access: AgentAccess) -> &'static str {
    match access {
        AgentAccess::Hidden => "hidden",
        AgentAccess::ReadOnly => "read-only",
    }
}

impl fmt::Display for StateShowReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.project_id, &self.created_at) {
            (Some(id), Some(created)) => writeln!(f, "project id {id} (created {created})")?,
            _ => writeln!(f, "not initialized: run `vibesys state init`")?,
        }
        for e in &self.entries {
            writeln!(
                f,
                "{:<32} {:<10} {:<9} {}",
                e.path,
                access_name(e.access),
                if e.present { "present" } else { "missing" },
                e.purpose,
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_names_are_the_json_ones() {
        for access in [AgentAccess::Hidden, AgentAccess::ReadOnly] {
            assert_eq!(
                serde_json::to_value(access).unwrap(),
                serde_json::Value::from(access_name(access))
            );
        }
    }
}
