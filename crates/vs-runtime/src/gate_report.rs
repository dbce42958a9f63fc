//! `vibesys gate baseline|check` as reports (serde for `--json`, `Display`
//! for text). They add no failure of their own: errors are the gate's.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::Result;
use crate::gate::{
    BASELINE_FILE, GateBaseline, GateDifference, GateEntry, GateReport, ProtectedSet,
};
use crate::id::RunId;
use crate::state::{STATE_DIR, StateLayout};

/// A baseline just recorded.
#[derive(Debug, Serialize)]
pub struct BaselineReport {
    /// The run.
    pub run_id: RunId,
    /// Where it is, relative to the project.
    pub baseline: String,
    /// The protected roots.
    pub protect: Vec<String>,
    /// How many paths it holds.
    pub entries: usize,
    /// How many of them are files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// Records the gate baseline of `run`: `[gate] protect` of the project
/// and `extra`.
pub fn record_baseline(
    layout: &StateLayout,
    run: &RunId,
    extra: Vec<PathBuf>,
) -> Result<BaselineReport> {
    let mut requested = ProtectedSet::configured(layout)?;
    requested.extend(extra);
    let protect = ProtectedSet::resolve(layout, &requested)?;
    let b = GateBaseline::record(layout, run, &protect)?;
    let (files, bytes) = b
        .entries()
        .values()
        .fold((0u64, 0u64), |(n, s), e| match e {
            GateEntry::File { size, .. } => (n + 1, s + size),
            _ => (n, s),
        });
    let rel = Path::new(STATE_DIR)
        .join("runs")
        .join(run.as_str())
        .join(BASELINE_FILE);
    Ok(BaselineReport {
        run_id: run.clone(),
        baseline: rel.to_string_lossy().into_owned(),
        protect: b.protect().to_vec(),
        entries: b.entries().len(),
        files,
        bytes,
    })
}

impl fmt::Display for BaselineReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "gate baseline for run {}: {} paths ({} files, {} bytes) in {}",
            self.run_id, self.entries, self.files, self.bytes, self.baseline
        )
    }
}

/// [`GateReport`] as `gate check --json` prints it.
#[derive(Debug, Serialize)]
pub struct CheckJson<'a> {
    /// The run.
    pub run_id: &'a RunId,
    /// Nothing differs.
    pub ok: bool,
    /// Paths in the baseline.
    pub baseline_entries: usize,
    /// Paths found now.
    pub current_entries: usize,
    /// Every difference.
    pub differences: &'a [GateDifference],
}

impl GateReport {
    /// The report as `--json` prints it.
    pub fn json(&self) -> CheckJson<'_> {
        CheckJson {
            run_id: &self.run_id,
            ok: self.is_clean(),
            baseline_entries: self.baseline_entries,
            current_entries: self.current_entries,
            differences: &self.differences,
        }
    }

    /// When something differs, the one line saying so.
    pub fn failure(&self) -> Option<String> {
        (!self.is_clean()).then(|| {
            format!(
                "gate check for run {} failed: {} protected paths differ from the baseline",
                self.run_id,
                self.differences.len()
            )
        })
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

/// `ok` with the paths unchanged, else each difference on its line.
impl fmt::Display for GateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_clean() {
            return writeln!(
                f,
                "gate check for run {}: ok, {} paths unchanged",
                self.run_id, self.baseline_entries
            );
        }
        for d in &self.differences {
            writeln!(f, "{}: {}", d.change, shown(&d.path))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_in_paths_are_quoted() {
        assert_eq!(shown("a\nb"), "\"a\\nb\"");
        assert_eq!(shown("a b"), "a b");
    }
}
