//! How the protected paths differ from a gate baseline: the accuracy
//! gate's findings, as its report and the run's errors state them.

use std::fmt;

use serde::Serialize;

/// How a path differs from the baseline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Present in both, with different type or content.
    Changed,
    /// Present now, not in the baseline.
    Added,
    /// In the baseline, gone now.
    Removed,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Change::Changed => "changed",
            Change::Added => "added",
            Change::Removed => "removed",
        })
    }
}

/// One differing path.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GateDifference {
    /// How it differs.
    pub change: Change,
    /// Project-relative path, `/`-separated.
    pub path: String,
}

/// The differences as one line: `changed a, added b, removed c`, at most
/// 50 named.
pub fn describe_differences(differences: &[GateDifference]) -> String {
    const SHOWN: usize = 50;
    let mut parts: Vec<String> = differences
        .iter()
        .take(SHOWN)
        .map(|d| {
            if d.path.chars().any(char::is_control) {
                format!("{} {:?}", d.change, d.path)
            } else {
                format!("{} {}", d.change, d.path)
            }
        })
        .collect();
    if differences.len() > SHOWN {
        parts.push(format!("and {} more", differences.len() - SHOWN));
    }
    parts.join(", ")
}
