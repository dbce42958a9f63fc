//! The task of a run, from the operator's `vibesys.toml` (the project's
//! own copy, never a candidate's): `[task]` (objective, protected paths),
//! `[check]` (trusted: exit 0 means correct) and `[measure]` (trusted:
//! prints one JSON object of metrics). Unknown keys, in these tables and
//! at the top level, are an error, so a typo never drops a protection.
//!
//! Both `vibesys run` ([`crate::run`]) and the remote evaluation
//! ([`crate::remote`]) read it; it sits below both and names neither.

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::RunError;
use crate::error::Result;
use crate::fsutil::read_bounded;
use crate::gate::CONFIG_FILE;
use crate::state::StateLayout;

/// Largest `vibesys.toml` read.
const CONFIG_LIMIT: u64 = 1024 * 1024;
/// Most argv elements, longest element.
const MAX_ARGV: usize = 1024;
const MAX_ARG_LEN: usize = 64 * 1024;
/// Longest objective (it becomes `objective.md`).
const MAX_OBJECTIVE: usize = 64 * 1024;
/// Most protected paths.
const MAX_PROTECTED: usize = 1024;
/// Longest timeout accepted (one week).
const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;
/// Timeout of `check` and `measure` when none is given.
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;

/// The top-level tables `vibesys.toml` may hold; anything else is a typo.
pub const KNOWN_TABLES: &[&str] = &[
    "task", "check", "measure", "build", "gate", "gates", "sandbox", "vibesys", "skypilot", "modal",
];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTask {
    objective: String,
    #[serde(default)]
    protected: Vec<String>,
    #[serde(default)]
    commit_timeout_secs: Option<u64>,
    #[serde(default)]
    commit_max_file_bytes: Option<u64>,
    #[serde(default)]
    commit_max_total_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommand {
    argv: Vec<String>,
    #[serde(default)]
    timeout_secs: Option<u64>,
    #[serde(default)]
    network: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMeasure {
    argv: Vec<String>,
    #[serde(default)]
    timeout_secs: Option<u64>,
    #[serde(default)]
    metric: Option<String>,
    #[serde(default)]
    goal: Option<Goal>,
    #[serde(default)]
    network: bool,
}

/// Which way a metric is better.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Goal {
    /// Smaller is better (a time, a size): the default.
    #[default]
    Min,
    /// Larger is better (a score, a throughput).
    Max,
}

/// A trusted evaluation command: `[check]` or `[measure]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalCommand {
    /// Program and arguments, run in the candidate's checkout.
    pub argv: Vec<String>,
    /// Killed (process tree) after this many seconds.
    pub timeout_secs: u64,
    /// Whether it keeps the network (`network = true`); evaluation has
    /// none by default.
    #[serde(default)]
    pub network: bool,
}

/// Most seconds the commit phase may take by default.
pub const DEFAULT_COMMIT_TIMEOUT_SECS: u64 = 300;
/// Largest file the commit phase reads by default (1 GiB).
pub const DEFAULT_COMMIT_MAX_FILE_BYTES: u64 = 1024 * 1024 * 1024;
/// Most bytes the commit phase reads by default, all files together
/// (4 GiB).
pub const DEFAULT_COMMIT_MAX_TOTAL_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// The bounds of the commit phase (`[task] commit_timeout_secs`,
/// `commit_max_file_bytes`, `commit_max_total_bytes`): a candidate's
/// worktree over one of them fails the candidate, naming the file or the
/// total, before git reads anything.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitLimits {
    /// Seconds `git add` and `git commit` may take together.
    pub timeout_secs: u64,
    /// Largest file (its apparent size, holes included).
    pub max_file_bytes: u64,
    /// Largest total of every file git would read.
    pub max_total_bytes: u64,
}

impl Default for CommitLimits {
    fn default() -> Self {
        Self {
            timeout_secs: DEFAULT_COMMIT_TIMEOUT_SECS,
            max_file_bytes: DEFAULT_COMMIT_MAX_FILE_BYTES,
            max_total_bytes: DEFAULT_COMMIT_MAX_TOTAL_BYTES,
        }
    }
}

/// `[measure]`: the command, and which metric ranks candidates.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeasureSpec {
    /// The command; it prints one JSON object of metrics.
    pub command: EvalCommand,
    /// The metric that ranks candidates in `run status` (a key of the
    /// object, a number); none: candidates are not ranked by metric.
    pub metric: Option<String>,
    /// Which way `metric` is better.
    pub goal: Goal,
}

/// The task of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// What the agent is asked to do (becomes `objective.md`).
    pub objective: String,
    /// Project-relative paths read-only to the agent and gated.
    pub protected: Vec<String>,
    /// `[check]`: exit 0 means correct.
    pub check: EvalCommand,
    /// `[measure]`, when the task measures.
    pub measure: Option<MeasureSpec>,
    /// The bounds of the commit phase (defaults when the record predates
    /// them).
    #[serde(default)]
    pub commit: CommitLimits,
    /// sha256 of the whole `vibesys.toml`, lowercase hex: a resume refuses
    /// a changed task.
    pub digest: String,
}

impl TaskSpec {
    /// Reads the task from the project's own `vibesys.toml`.
    pub fn load(layout: &StateLayout) -> Result<Self> {
        let path = layout.project().join(CONFIG_FILE);
        let Some(bytes) = read_bounded(&path, CONFIG_LIMIT)? else {
            return Err(RunError::TaskNotConfigured {
                path,
                section: "task",
            }
            .into());
        };
        let text = String::from_utf8(bytes).map_err(|_| RunError::InvalidTask {
            path: path.clone(),
            reason: "not UTF-8".to_owned(),
        })?;
        Ok(Self::parse(&text, &path)?)
    }

    /// Parses the text of a `vibesys.toml`; `path` names it in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, RunError> {
        let invalid = |reason: String| RunError::InvalidTask {
            path: path.to_path_buf(),
            reason,
        };
        let missing = |section: &'static str| RunError::TaskNotConfigured {
            path: path.to_path_buf(),
            section,
        };
        let table: toml::Table = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if let Some(unknown) = table.keys().find(|k| !KNOWN_TABLES.contains(&k.as_str())) {
            return Err(invalid(format!(
                "unknown key {:?} at the top level (expected tables: {})",
                unknown.chars().take(64).collect::<String>(),
                KNOWN_TABLES.join(", ")
            )));
        }
        let section = |name: &'static str| -> Result<Option<toml::Value>, RunError> {
            match table.get(name) {
                None => Ok(None),
                Some(v) if v.is_table() => Ok(Some(v.clone())),
                Some(_) => Err(invalid(format!("[{name}] must be a table"))),
            }
        };
        let de = |name: &str, e: toml::de::Error| invalid(format!("[{name}]: {}", e.message()));
        let task: RawTask = section("task")?
            .ok_or_else(|| missing("task"))?
            .try_into()
            .map_err(|e| de("task", e))?;
        let check: RawCommand = section("check")?
            .ok_or_else(|| missing("check"))?
            .try_into()
            .map_err(|e| de("check", e))?;
        let measure: Option<RawMeasure> = section("measure")?
            .map(|v| v.try_into().map_err(|e| de("measure", e)))
            .transpose()?;

        let objective = task.objective.trim().to_owned();
        if objective.is_empty() {
            return Err(invalid("task.objective must not be empty".to_owned()));
        }
        if objective.len() > MAX_OBJECTIVE || objective.contains('\0') {
            return Err(invalid(format!(
                "task.objective must be at most {MAX_OBJECTIVE} bytes without NUL"
            )));
        }
        if task.protected.len() > MAX_PROTECTED {
            return Err(invalid(format!(
                "task.protected lists more than {MAX_PROTECTED} paths"
            )));
        }
        let mut protected = Vec::with_capacity(task.protected.len());
        for p in &task.protected {
            let key = protected_key(p).map_err(|reason| {
                invalid(format!(
                    "task.protected {:?}: {reason}",
                    p.chars().take(128).collect::<String>()
                ))
            })?;
            if protected.contains(&key) {
                return Err(invalid(format!("task.protected lists {key:?} twice")));
            }
            protected.push(key);
        }
        let commit = commit_limits(&task).map_err(invalid)?;
        let check =
            command("check", check.argv, check.timeout_secs, check.network).map_err(invalid)?;
        let measure = match measure {
            Some(m) => {
                if let Some(metric) = &m.metric
                    && (metric.is_empty() || metric.len() > 256)
                {
                    return Err(invalid(
                        "measure.metric must be 1 to 256 characters".to_owned(),
                    ));
                }
                Some(MeasureSpec {
                    command: command("measure", m.argv, m.timeout_secs, m.network)
                        .map_err(invalid)?,
                    metric: m.metric,
                    goal: m.goal.unwrap_or_default(),
                })
            }
            None => None,
        };
        Ok(Self {
            objective,
            protected,
            check,
            measure,
            commit,
            digest: hex::encode(Sha256::digest(text.as_bytes())),
        })
    }

    /// The protected paths as project-relative paths.
    pub fn protected_paths(&self) -> Vec<PathBuf> {
        self.protected.iter().map(PathBuf::from).collect()
    }

    /// The text of `objective.md`.
    pub fn objective_markdown(&self) -> String {
        let mut text = format!("# Objective\n\n{}\n", self.objective);
        if !self.protected.is_empty() {
            text.push_str(
                "\n## Protected paths\n\nThese are read-only and checked after your turn; a candidate that changes, adds or removes anything below them fails:\n\n",
            );
            for p in &self.protected {
                text.push_str(&format!("- `{p}`\n"));
            }
        }
        text
    }
}

/// `[task]`'s commit bounds, each at least 1 (defaults when absent).
fn commit_limits(task: &RawTask) -> std::result::Result<CommitLimits, String> {
    let d = CommitLimits::default();
    let pick = |name: &str, v: Option<u64>, default: u64, max: u64| match v {
        None => Ok(default),
        Some(0) => Err(format!("task.{name} must be at least 1")),
        Some(v) if v > max => Err(format!("task.{name} must be at most {max}")),
        Some(v) => Ok(v),
    };
    Ok(CommitLimits {
        timeout_secs: pick(
            "commit_timeout_secs",
            task.commit_timeout_secs,
            d.timeout_secs,
            MAX_TIMEOUT_SECS,
        )?,
        max_file_bytes: pick(
            "commit_max_file_bytes",
            task.commit_max_file_bytes,
            d.max_file_bytes,
            u64::MAX / 2,
        )?,
        max_total_bytes: pick(
            "commit_max_total_bytes",
            task.commit_max_total_bytes,
            d.max_total_bytes,
            u64::MAX / 2,
        )?,
    })
}

fn command(
    name: &str,
    argv: Vec<String>,
    timeout: Option<u64>,
    network: bool,
) -> std::result::Result<EvalCommand, String> {
    if argv.is_empty() || argv[0].is_empty() {
        return Err(format!("{name}.argv must name a program"));
    }
    if argv.len() > MAX_ARGV {
        return Err(format!("{name}.argv has more than {MAX_ARGV} elements"));
    }
    if let Some(a) = argv
        .iter()
        .find(|a| a.contains('\0') || a.len() > MAX_ARG_LEN)
    {
        return Err(format!(
            "{name}.argv element {:?} contains NUL or is longer than {MAX_ARG_LEN} bytes",
            a.chars().take(64).collect::<String>()
        ));
    }
    let timeout_secs = match timeout {
        None => DEFAULT_TIMEOUT_SECS,
        Some(0) => return Err(format!("{name}.timeout_secs must be at least 1")),
        Some(s) if s > MAX_TIMEOUT_SECS => {
            return Err(format!(
                "{name}.timeout_secs must be at most {MAX_TIMEOUT_SECS}"
            ));
        }
        Some(s) => s,
    };
    Ok(EvalCommand {
        argv,
        timeout_secs,
        network,
    })
}

/// A protected path as a `/`-separated project-relative key: relative,
/// plain components only (no `..`, no absolute path), not empty.
fn protected_key(p: &str) -> std::result::Result<String, &'static str> {
    if p.is_empty() {
        return Err("it is empty");
    }
    if p.contains('\0') {
        return Err("it contains NUL");
    }
    let path = Path::new(p);
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str().ok_or("it is not UTF-8")?),
            Component::CurDir => {}
            _ => return Err("it must be relative to the project, without '..'"),
        }
    }
    if parts.is_empty() {
        return Err("it names the whole project; protect the evaluator's paths instead");
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[task]
objective = "make bench/run.sh faster without changing its output"
protected = ["evaluator", "tests/golden"]
[check]
argv = ["sh", "evaluator/check.sh"]
[measure]
argv = ["sh", "evaluator/measure.sh"]
timeout_secs = 30
metric = "time_ms"
[sandbox]
hidden = ["secrets"]
"#;

    fn err(text: &str) -> String {
        TaskSpec::parse(text, Path::new("vibesys.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn parses_the_task() {
        let t = TaskSpec::parse(GOOD, Path::new("vibesys.toml")).unwrap();
        assert_eq!(t.protected, ["evaluator", "tests/golden"]);
        assert_eq!(t.check.timeout_secs, DEFAULT_TIMEOUT_SECS);
        let m = t.measure.unwrap();
        assert_eq!(m.command.timeout_secs, 30);
        assert_eq!(m.goal, Goal::Min);
        assert!(!t.check.network && !m.command.network);
        assert_eq!(t.commit, CommitLimits::default());
        assert_eq!(t.digest.len(), 64);
        let t = TaskSpec::parse(
            &GOOD
                .replace(
                    "metric = \"time_ms\"",
                    "metric = \"time_ms\"\nnetwork = true",
                )
                .replace("protected = [", "commit_max_file_bytes = 10\nprotected = ["),
            Path::new("vibesys.toml"),
        )
        .unwrap();
        assert!(t.measure.unwrap().command.network && !t.check.network);
        assert_eq!(t.commit.max_file_bytes, 10);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = err(&GOOD.replace("protected =", "protect ="));
        assert!(e.contains("unknown field `protect`"), "{e}");
        let e = err(&GOOD.replace("timeout_secs = 30", "timeout = 30"));
        assert!(e.contains("[measure]") && e.contains("timeout"), "{e}");
        let e = err(&format!("{GOOD}\n[chek]\nargv = [\"x\"]\n"));
        assert!(e.contains("\"chek\""), "{e}");
    }

    #[test]
    fn missing_sections_are_named() {
        let e = err(&GOOD.replace("[check]\nargv = [\"sh\", \"evaluator/check.sh\"]\n", ""));
        assert!(e.contains("[check]"), "{e}");
        let e = err("[check]\nargv = [\"true\"]\n");
        assert!(e.contains("[task]"), "{e}");
    }

    #[test]
    fn bad_values_are_named() {
        assert!(err(&GOOD.replace("\"evaluator\",", "\"../evaluator\",")).contains("'..'"));
        assert!(err(&GOOD.replace("\"evaluator\",", "\"/etc\",")).contains("relative"));
        assert!(err(&GOOD.replace("\"tests/golden\"", "\"evaluator\"")).contains("twice"));
        assert!(
            err(&GOOD.replace("[\"sh\", \"evaluator/check.sh\"]", "[]")).contains("check.argv")
        );
        assert!(err(&GOOD.replace("timeout_secs = 30", "timeout_secs = 0")).contains("at least 1"));
        assert!(
            err(&GOOD.replace("protected = [", "commit_timeout_secs = 0\nprotected = ["))
                .contains("task.commit_timeout_secs")
        );
        assert!(
            err(&GOOD.replace("make bench/run.sh faster without changing its output", " "))
                .contains("objective")
        );
    }
}
