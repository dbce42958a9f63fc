//! The records of a run, in its hidden record directory:
//! `runs/<id>/run.json` (written before anything runs) and
//! `runs/<id>/candidates/<n>.json` (one per candidate, rewritten
//! atomically after each phase).

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::environment::RunEnvironment;
use crate::error::{Result, RuntimeError};
use crate::fsutil::{ensure_dir_chain, read_bounded, write_atomic};
use crate::id::RunId;
use crate::state::{STATE_DIR, StateLayout};
use crate::task::TaskSpec;

/// Version of the run and candidate record schemas.
pub const RUN_SCHEMA_VERSION: u32 = 1;
/// Largest record read.
const RECORD_LIMIT: u64 = 16 * 1024 * 1024;

/// Where a run stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    /// Started; candidates may be unfinished (also after vibesys died).
    Running,
    /// Stopped by Ctrl-C or SIGTERM; `run resume` continues it.
    Interrupted,
    /// Every candidate finished (passed or failed).
    Finished,
}

/// The image a run's containers come from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageRecord {
    /// The lock's name of the image.
    pub name: String,
    /// The pinned config digest (the image ID with the classic store).
    pub config_digest: String,
}

/// `runs/<id>/run.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    /// Schema version.
    pub schema_version: u32,
    /// The run.
    pub run_id: RunId,
    /// When it started, RFC 3339 UTC.
    pub created_at: String,
    /// Where it runs; a resume never switches it.
    pub environment: RunEnvironment,
    /// The pinned image (container environments).
    pub image: Option<ImageRecord>,
    /// `codex`, `claude`, `gemini` or `custom`.
    pub provider: String,
    /// The agent's argv (the provider's one-shot command, or CMD).
    pub agent_argv: Vec<String>,
    /// Variables the provider's launch sets (names and values it chose).
    pub agent_env: BTreeMap<String, String>,
    /// The prompt given, if any.
    pub prompt: Option<String>,
    /// How many candidates.
    pub candidates: u32,
    /// How many run at once.
    pub jobs: u32,
    /// The commit every candidate starts from.
    pub base_commit: String,
    /// The task as read at start.
    pub task: TaskSpec,
    /// The protected roots of the gate baseline (empty: no gate).
    pub protected: Vec<String>,
    /// The accelerators planned for the agent (see [`crate::run::accelerator`]).
    #[serde(default)]
    pub accelerators: crate::run::accelerator::AcceleratorPlan,
    /// `run start --allow-host` patterns, added to `[sandbox]
    /// allow_hosts` for every agent turn (a resume keeps them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow_hosts: Vec<String>,
    /// Where the run stands.
    pub state: RunState,
}

/// One connection the egress proxy refused during an agent turn.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressDenial {
    /// When, RFC 3339 UTC.
    pub time: String,
    /// The host asked for.
    pub host: String,
    /// The port asked for.
    pub port: u16,
    /// Why it was refused.
    pub reason: String,
    /// `connect`, `http` or `socks5`.
    pub via: String,
    /// The process that asked (its pid on the host), when it could be
    /// known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// That process's command line as it presents it (bounded, control
    /// characters escaped), when it could be known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
}

/// How one phase of a candidate ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PhaseRecord {
    /// `passed`, `failed`, or `skipped`.
    pub status: PhaseStatus,
    /// Wall-clock seconds.
    pub duration_secs: f64,
    /// What happened, for a failure (names the cause).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// A phase's outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PhaseStatus {
    /// It ran and succeeded.
    Passed,
    /// It ran and failed, or could not run.
    Failed,
    /// Not part of this task (no `[build]`, no `[measure]`, nothing protected).
    Skipped,
    /// Stopped by Ctrl-C or SIGTERM while it ran (the candidate resumes);
    /// the duration is how long it ran until then.
    Stopped,
}

/// Where a candidate stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CandidateState {
    /// Not started, or started and not finished (resume restarts it).
    Pending,
    /// Running now (left like this when vibesys died: resume restarts it).
    Running,
    /// Every phase passed.
    Passed,
    /// A phase failed; the later ones did not run.
    Failed,
}

/// `runs/<id>/candidates/<n>.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidateRecord {
    /// Schema version.
    pub schema_version: u32,
    /// The candidate's number, 1-based.
    pub candidate: u32,
    /// Where it stands.
    pub state: CandidateState,
    /// How many times it was started (1, more after a resume).
    pub attempts: u32,
    /// The agent's exit status.
    pub agent_exit: Option<i32>,
    /// The commit the framework made of the candidate's changes (kept as
    /// `refs/vibesys/runs/<run>/<n>`).
    pub commit: Option<String>,
    /// Where check and measure ran (a container ID, or `host`).
    pub evaluated_in: Option<String>,
    /// The metrics `measure` printed.
    pub metrics: Option<serde_json::Map<String, serde_json::Value>>,
    /// Each phase that ran: `agent`, `commit`, `gate`, `build`, `check`,
    /// `measure`.
    pub phases: BTreeMap<String, PhaseRecord>,
    /// The first failure, naming its phase and cause.
    pub error: Option<String>,
    /// When it last started, RFC 3339 UTC.
    pub started_at: Option<String>,
    /// When it finished.
    pub finished_at: Option<String>,
    /// Connections the egress allow-list refused in the agent's last turn
    /// (at most the proxy's bound).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub egress_denials: Vec<EgressDenial>,
}

impl CandidateRecord {
    /// A candidate not yet started.
    pub fn pending(candidate: u32) -> Self {
        Self {
            schema_version: RUN_SCHEMA_VERSION,
            candidate,
            state: CandidateState::Pending,
            attempts: 0,
            agent_exit: None,
            commit: None,
            evaluated_in: None,
            metrics: None,
            phases: BTreeMap::new(),
            error: None,
            started_at: None,
            finished_at: None,
            egress_denials: Vec::new(),
        }
    }

    /// Whether it still has to run.
    pub fn unfinished(&self) -> bool {
        matches!(
            self.state,
            CandidateState::Pending | CandidateState::Running
        )
    }
}

/// Reading and writing the records of one run.
#[derive(Clone, Debug)]
pub struct RunStore {
    layout: StateLayout,
    run: RunId,
    dir: PathBuf,
}

impl RunStore {
    /// Creates the record directory of a new run (refusing an existing one).
    pub fn create(layout: &StateLayout, run: &RunId) -> Result<Self> {
        if layout.existing_run_dir(run)?.is_some() {
            return Err(RunError::RunExists {
                run: run.to_string(),
            }
            .into());
        }
        let dir = layout.ensure_run_dir(run)?;
        ensure_dir_chain(layout.project(), &Self::rel(run).join("candidates"))?;
        ensure_dir_chain(layout.project(), &Self::rel(run).join("logs"))?;
        Ok(Self {
            layout: layout.clone(),
            run: run.clone(),
            dir,
        })
    }

    /// Opens the record directory of an existing run (a real directory
    /// chain, no symlink).
    pub fn open(layout: &StateLayout, run: &RunId) -> Result<Self> {
        let Some(dir) = layout.existing_run_dir(run)? else {
            return Err(RunError::RunNotFound {
                run: run.to_string(),
                path: layout.run_dir(run),
            }
            .into());
        };
        ensure_dir_chain(layout.project(), &Self::rel(run).join("candidates"))?;
        ensure_dir_chain(layout.project(), &Self::rel(run).join("logs"))?;
        Ok(Self {
            layout: layout.clone(),
            run: run.clone(),
            dir,
        })
    }

    fn rel(run: &RunId) -> PathBuf {
        Path::new(STATE_DIR).join("runs").join(run.as_str())
    }

    /// The run.
    pub fn run_id(&self) -> &RunId {
        &self.run
    }

    /// The layout.
    pub fn layout(&self) -> &StateLayout {
        &self.layout
    }

    /// The record directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `runs/<id>/run.json`.
    pub fn run_json(&self) -> PathBuf {
        self.dir.join("run.json")
    }

    /// `runs/<id>/candidates/<n>.json`.
    pub fn candidate_json(&self, n: u32) -> PathBuf {
        self.dir.join("candidates").join(format!("{n}.json"))
    }

    /// `runs/<id>/logs/<n>-<what>.log`.
    pub fn log_path(&self, n: u32, what: &str) -> PathBuf {
        self.dir.join("logs").join(format!("{n}-{what}.log"))
    }

    /// Writes `run.json` atomically.
    pub fn save_run(&self, record: &RunRecord) -> Result<()> {
        write_json(&self.run_json(), record)
    }

    /// Reads and checks `run.json`.
    pub fn load_run(&self) -> Result<RunRecord> {
        let path = self.run_json();
        let record: RunRecord = read_json(&path)?.ok_or_else(|| RunError::RunNotFound {
            run: self.run.to_string(),
            path: path.clone(),
        })?;
        self.layout.require_untracked(&path)?;
        if record.schema_version != RUN_SCHEMA_VERSION {
            return Err(RunError::InvalidRunRecord {
                path,
                reason: format!(
                    "schema_version {} is not supported (expected {RUN_SCHEMA_VERSION})",
                    record.schema_version
                ),
            }
            .into());
        }
        if record.run_id != self.run {
            return Err(RunError::InvalidRunRecord {
                path,
                reason: format!("it belongs to run {}", record.run_id),
            }
            .into());
        }
        Ok(record)
    }

    /// Writes `candidates/<n>.json` atomically.
    pub fn save_candidate(&self, record: &CandidateRecord) -> Result<()> {
        write_json(&self.candidate_json(record.candidate), record)
    }

    /// Reads `candidates/<n>.json`; a missing one is pending.
    pub fn load_candidate(&self, n: u32) -> Result<CandidateRecord> {
        let path = self.candidate_json(n);
        let record: Option<CandidateRecord> = read_json(&path)?;
        match record {
            None => Ok(CandidateRecord::pending(n)),
            Some(r) if r.candidate != n => Err(RunError::InvalidRunRecord {
                path,
                reason: format!("it is the record of candidate {}", r.candidate),
            }
            .into()),
            Some(r) => Ok(r),
        }
    }

    /// Writes a bounded log next to the records.
    pub fn save_log(&self, n: u32, what: &str, bytes: &[u8]) -> Result<()> {
        write_atomic(&self.log_path(n, what), bytes)
    }
}

/// Every run id with a record directory, sorted.
pub fn list_runs(layout: &StateLayout) -> Result<Vec<RunId>> {
    let dir = layout.runs_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(RuntimeError::io("read", &dir, e)),
    };
    let mut runs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| RuntimeError::io("read", &dir, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if let Ok(run) = RunId::new(&name)
            && entry.path().join("run.json").is_file()
        {
            runs.push(run);
        }
    }
    runs.sort();
    Ok(runs)
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let mut json = serde_json::to_vec_pretty(value)
        .map_err(|e| RuntimeError::io("encode", path, io::Error::other(e)))?;
    json.push(b'\n');
    write_atomic(path, &json)
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>> {
    let Some(bytes) = read_bounded(path, RECORD_LIMIT)? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|e| {
        RuntimeError::from(RunError::InvalidRunRecord {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal recorded before the process was named still reads; one
    /// with it round-trips.
    #[test]
    fn egress_denials_with_and_without_the_process() {
        let old = r#"{"time":"2026-01-01T00:00:00Z","host":"a.com","port":443,"reason":"not in the allow-list","via":"connect"}"#;
        let d: EgressDenial = serde_json::from_str(old).unwrap();
        assert_eq!((d.pid, d.command.as_deref()), (None, None));
        assert_eq!(serde_json::to_string(&d).unwrap(), old);
        let new = EgressDenial {
            pid: Some(42),
            command: Some("curl https://a.com/".into()),
            ..d
        };
        let text = serde_json::to_string(&new).unwrap();
        assert_eq!(serde_json::from_str::<EgressDenial>(&text).unwrap(), new);
    }
}
