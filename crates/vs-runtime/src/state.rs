//! The run-state layout below `.vibesys/state/` and `vibesys state init`.
//!
//! [`StateLayout`] is the one owner of the layout: every entry, whether the
//! agent may see it, and which paths must exist before confinement starts.
//! Adding a hidden state directory is one line in [`STATE_ENTRIES`].

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::StateError;
use crate::error::{Result, RuntimeError};
use crate::fsutil::{
    ensure_dir_chain, existing_dir_chain, random_bytes, read_bounded, write_atomic,
};
use crate::id::RunId;
use crate::{git, time};

/// The state directory, relative to the project (workspace) root.
pub const STATE_DIR: &str = ".vibesys/state";

/// Version of the `project.json` schema written by this vibesys.
pub const PROJECT_SCHEMA_VERSION: u32 = 1;

/// The ignore rule `.gitignore` in the state directory must contain.
pub const GITIGNORE_RULE: &str = "/local/";

/// The sessions' directory inside `local/` ([`StateLayout::sessions_dir`]).
pub const SESSIONS_DIR: &str = "sessions";

/// Largest `project.json` / `.gitignore` vibesys reads.
const SMALL_FILE_LIMIT: u64 = 1024 * 1024;

/// What the agent may do with a state entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentAccess {
    /// Not visible to the agent at all.
    Hidden,
    /// Visible, never writable.
    ReadOnly,
}

/// Whether a state entry is a directory or a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// A directory.
    Directory,
    /// A regular file.
    File,
}

/// One entry of the state layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct StateEntry {
    /// Name inside `.vibesys/state/`.
    pub name: &'static str,
    /// Directory or file.
    pub kind: EntryKind,
    /// What the agent may do with it.
    pub access: AgentAccess,
    /// Why it exists.
    pub purpose: &'static str,
}

/// The layout of `.vibesys/state/` (DESIGN.md section 6).
pub const STATE_ENTRIES: &[StateEntry] = &[
    StateEntry {
        name: "runs",
        kind: EntryKind::Directory,
        access: AgentAccess::Hidden,
        purpose: "the run's record: turns, reviews, trusted measurements, gate baselines",
    },
    StateEntry {
        name: "local",
        kind: EntryKind::Directory,
        access: AgentAccess::Hidden,
        purpose: "machine-local state: credentials, caches, candidate worktrees, session logs",
    },
    StateEntry {
        name: "agent-visible",
        kind: EntryKind::Directory,
        access: AgentAccess::ReadOnly,
        purpose: "documents written for the agent to read",
    },
    StateEntry {
        name: "project.json",
        kind: EntryKind::File,
        access: AgentAccess::ReadOnly,
        purpose: "project identity",
    },
    StateEntry {
        name: ".gitignore",
        kind: EntryKind::File,
        access: AgentAccess::ReadOnly,
        purpose: "fixed ignore contract (/local/ never reaches git)",
    },
];

/// The identity of a project, stored in `project.json`. Holds no absolute
/// path, so the state directory can move with the project.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectRecord {
    /// Schema version of this record.
    pub schema_version: u32,
    /// Random 128-bit id, 32 lowercase hex digits.
    pub project_id: String,
    /// When the state was first initialized, RFC 3339 UTC.
    pub created_at: String,
}

impl ProjectRecord {
    fn fresh() -> Result<Self> {
        let mut id = [0u8; 16];
        random_bytes(&mut id)?;
        Ok(Self {
            schema_version: PROJECT_SCHEMA_VERSION,
            project_id: hex::encode(id),
            created_at: time::now_rfc3339(),
        })
    }

    fn validate(&self) -> std::result::Result<(), String> {
        if self.schema_version != PROJECT_SCHEMA_VERSION {
            return Err(format!(
                "schema_version {} is not supported (expected {PROJECT_SCHEMA_VERSION})",
                self.schema_version
            ));
        }
        if self.project_id.len() != 32
            || !self
                .project_id
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
        {
            return Err("project_id must be 32 lowercase hex digits".to_owned());
        }
        if !time::is_rfc3339_utc(&self.created_at) {
            return Err("created_at must be RFC 3339 UTC (YYYY-MM-DDTHH:MM:SSZ)".to_owned());
        }
        Ok(())
    }
}

/// What `state init` did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct InitOutcome {
    /// The project record now on disk.
    pub project: ProjectRecord,
    /// Whether `project.json` was written by this call (false: kept).
    pub created: bool,
    /// Whether `.gitignore` was written by this call.
    pub gitignore_updated: bool,
}

/// The run-state layout of one project.
#[derive(Clone)]
pub struct StateLayout {
    project: PathBuf,
    /// Record directories (`runs/RUN`) found untracked by git in this
    /// process, so that each is asked once (see [`Self::require_untracked`]).
    untracked: Arc<Mutex<Vec<PathBuf>>>,
}

impl PartialEq for StateLayout {
    fn eq(&self, other: &Self) -> bool {
        self.project == other.project
    }
}

impl Eq for StateLayout {}

impl std::fmt::Debug for StateLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateLayout")
            .field("project", &self.project)
            .finish()
    }
}

impl StateLayout {
    /// Opens the layout of the project at `project` (canonicalized; it must
    /// be an existing directory). Nothing is created.
    ///
    /// A candidate or build worktree (`local/candidates/RUN/ID` of a
    /// project), or a directory inside the run state of its own repository
    /// (`runs/`, `local/`), is refused: a candidate's `vibesys.toml` and
    /// `.vibesys/state/runs` are its commit, which the agent wrote, not the
    /// operator's task and the real record. (A separate project nested
    /// deeper inside a candidate, with its own repository, is its own
    /// project: vibesys can be developed in a candidate.)
    pub fn open(project: &Path) -> Result<Self> {
        let canon = fs::canonicalize(project).map_err(|_| StateError::ProjectNotADirectory {
            path: project.to_path_buf(),
        })?;
        if !canon.is_dir() {
            return Err(StateError::ProjectNotADirectory {
                path: project.to_path_buf(),
            }
            .into());
        }
        if let Some(owner) = run_state_owner(&canon) {
            return Err(StateError::ProjectInsideRunState {
                path: canon.clone(),
                project: owner,
            }
            .into());
        }
        Ok(Self {
            project: canon,
            untracked: Arc::default(),
        })
    }

    /// Every entry of the layout.
    pub fn entries() -> &'static [StateEntry] {
        STATE_ENTRIES
    }

    /// Workspace-relative paths the agent must not see
    /// (`.vibesys/state/runs`, `.vibesys/state/local`).
    pub fn hidden_paths() -> Vec<PathBuf> {
        Self::paths_with(AgentAccess::Hidden)
    }

    /// Workspace-relative paths the agent may read but never write
    /// (`agent-visible/`, `project.json`, `.gitignore`).
    pub fn read_only_paths() -> Vec<PathBuf> {
        Self::paths_with(AgentAccess::ReadOnly)
    }

    fn paths_with(access: AgentAccess) -> Vec<PathBuf> {
        STATE_ENTRIES
            .iter()
            .filter(|e| e.access == access)
            .map(|e| Path::new(STATE_DIR).join(e.name))
            .collect()
    }

    /// Makes every hidden path exist as a real directory in `workspace`
    /// (the project or a candidate worktree), so confinement can hide it.
    /// Refuses when a component is a symlink or not a directory.
    pub fn prepare(workspace: &Path) -> Result<()> {
        for rel in Self::hidden_paths() {
            ensure_dir_chain(workspace, &rel)?;
        }
        Ok(())
    }

    /// The canonical project root.
    pub fn project(&self) -> &Path {
        &self.project
    }

    /// `<project>/.vibesys/state`.
    pub fn state_dir(&self) -> PathBuf {
        self.project.join(STATE_DIR)
    }

    /// `<project>/.vibesys/state/runs`.
    pub fn runs_dir(&self) -> PathBuf {
        self.state_dir().join("runs")
    }

    /// `<project>/.vibesys/state/local`.
    pub fn local_dir(&self) -> PathBuf {
        self.state_dir().join("local")
    }

    /// `<project>/.vibesys/state/local/sessions`: one directory per
    /// `vibesys session` with what vibesys records of it (below `local/`:
    /// hidden from the agent, never in git).
    pub fn sessions_dir(&self) -> PathBuf {
        self.local_dir().join(SESSIONS_DIR)
    }

    /// Creates the directory of a new session below
    /// [`Self::sessions_dir`] (every component a real directory, the last
    /// one new and private to its owner) and returns it.
    pub fn create_session_dir(&self) -> Result<PathBuf> {
        use std::os::unix::fs::DirBuilderExt;
        let rel = Path::new(STATE_DIR).join("local").join(SESSIONS_DIR);
        let parent = ensure_dir_chain(&self.project, &rel)?;
        let stamp = jiff::Timestamp::now()
            .strftime("%Y%m%dT%H%M%SZ")
            .to_string();
        let mut last = None;
        for attempt in 0..16u32 {
            let name = match attempt {
                0 => format!("{stamp}-{}", std::process::id()),
                n => format!("{stamp}-{}-{n}", std::process::id()),
            };
            let dir = parent.join(name);
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(dir),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(RuntimeError::io("create directory", &dir, e)),
            }
        }
        Err(RuntimeError::io(
            "create a session directory in",
            &parent,
            last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
        ))
    }

    /// `<project>/.vibesys/state/project.json`.
    pub fn project_json(&self) -> PathBuf {
        self.state_dir().join("project.json")
    }

    /// `<project>/.vibesys/state/.gitignore`.
    pub fn gitignore(&self) -> PathBuf {
        self.state_dir().join(".gitignore")
    }

    /// The hidden record directory of one run (not created).
    pub fn run_dir(&self, run: &RunId) -> PathBuf {
        self.runs_dir().join(run.as_str())
    }

    /// The record directory of a run when it exists as a chain of real
    /// directories below the project (no symlink on `.vibesys/state/runs/RUN`);
    /// `None` when it does not exist. Records are only ever read from here.
    pub fn existing_run_dir(&self, run: &RunId) -> Result<Option<PathBuf>> {
        let rel = Path::new(STATE_DIR).join("runs").join(run.as_str());
        existing_dir_chain(&self.project, &rel)
    }

    /// Fails when git tracks anything at or below `path` (inside the
    /// project): a record a commit carries was written by whoever made the
    /// commit (possibly the agent, through its index), not by vibesys.
    /// Nothing to check outside a git repository.
    ///
    /// Below a run's record directory (`.vibesys/state/runs/RUN/...`) the
    /// whole directory is asked about, once per process. That answer cannot
    /// go stale in a way that matters: what the check refuses is a record
    /// whose bytes a checkout wrote, and no checkout writes below `runs/`
    /// while vibesys runs (vibesys checks out only into worktrees, and the
    /// agent cannot write `runs/`); an index entry added later changes no
    /// byte of a record.
    pub fn require_untracked(&self, path: &Path) -> Result<()> {
        if !git::inside_repository(&self.project) {
            return Ok(());
        }
        let Ok(rel) = path.strip_prefix(&self.project) else {
            return Ok(());
        };
        let runs = Path::new(STATE_DIR).join("runs");
        let run_dir = rel
            .strip_prefix(&runs)
            .ok()
            .and_then(|below| below.components().next())
            .map(|run| runs.join(run));
        let known = || {
            self.untracked
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
        };
        if run_dir.as_ref().is_some_and(|dir| known().contains(dir)) {
            return Ok(());
        }
        let rel = run_dir.as_deref().unwrap_or(rel);
        let mut spec = std::ffi::OsString::from(":(literal)");
        spec.push(rel.as_os_str());
        let mut tracked = None;
        git::for_each_nul_record(
            &self.project,
            &[
                OsStr::new("ls-files"),
                OsStr::new("-z"),
                OsStr::new("--cached"),
                OsStr::new("--full-name"),
                OsStr::new("--"),
                &spec,
            ],
            |record| {
                if tracked.is_none() && !record.is_empty() {
                    tracked = Some(String::from_utf8_lossy(record).into_owned());
                }
            },
        )?;
        match tracked {
            Some(tracked) => Err(StateError::RecordTrackedByGit {
                path: path.to_path_buf(),
                tracked,
            }
            .into()),
            None => {
                if let Some(dir) = run_dir {
                    known().push(dir);
                }
                Ok(())
            }
        }
    }

    /// Creates (symlink-safely) and returns the record directory of a run.
    pub fn ensure_run_dir(&self, run: &RunId) -> Result<PathBuf> {
        let rel = Path::new(STATE_DIR).join("runs").join(run.as_str());
        ensure_dir_chain(&self.project, &rel)
    }

    /// Workspace-relative directory holding the candidate worktrees of a run.
    pub fn candidates_rel(run: &RunId) -> PathBuf {
        Path::new(STATE_DIR)
            .join("local")
            .join("candidates")
            .join(run.as_str())
    }

    /// Reads `project.json`; `None` when the state is not initialized.
    pub fn read_project(&self) -> Result<Option<ProjectRecord>> {
        let path = self.project_json();
        let Some(bytes) = read_bounded(&path, SMALL_FILE_LIMIT)? else {
            return Ok(None);
        };
        let record: ProjectRecord =
            serde_json::from_slice(&bytes).map_err(|e| StateError::InvalidProjectRecord {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        record
            .validate()
            .map_err(|reason| StateError::InvalidProjectRecord {
                path: path.clone(),
                reason,
            })?;
        Ok(Some(record))
    }

    /// Fails unless `state init` has run.
    pub fn require_initialized(&self) -> Result<ProjectRecord> {
        self.read_project()?.ok_or_else(|| {
            RuntimeError::from(StateError::StateNotInitialized {
                project: self.project.clone(),
            })
        })
    }

    /// `vibesys state init`: refuses when private files can be recovered
    /// from git history, then creates the directories, `project.json` (kept
    /// when present) and `.gitignore` (merged). Idempotent.
    pub fn init(&self) -> Result<InitOutcome> {
        let private = private_files_in_history(&self.project)?;
        if !private.is_empty() {
            return Err(StateError::PrivateFilesInHistory {
                paths: private.into_iter().collect(),
            }
            .into());
        }
        for entry in STATE_ENTRIES
            .iter()
            .filter(|e| e.kind == EntryKind::Directory)
        {
            let dir = ensure_dir_chain(&self.project, &Path::new(STATE_DIR).join(entry.name))?;
            if entry.access == AgentAccess::Hidden {
                // Owner only: local/ holds credentials, runs/ the trusted record.
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                    .map_err(|e| RuntimeError::io("set permissions of", &dir, e))?;
            }
        }
        let (project, created) = match self.read_project()? {
            Some(record) => (record, false),
            None => {
                let record = ProjectRecord::fresh()?;
                let mut json = serde_json::to_vec_pretty(&record).map_err(|e| {
                    RuntimeError::io("encode", self.project_json(), io::Error::other(e))
                })?;
                json.push(b'\n');
                write_atomic(&self.project_json(), &json)?;
                (record, true)
            }
        };
        let gitignore_updated = self.merge_gitignore()?;
        Ok(InitOutcome {
            project,
            created,
            gitignore_updated,
        })
    }

    /// Ensures `.gitignore` contains [`GITIGNORE_RULE`], keeping other lines.
    fn merge_gitignore(&self) -> Result<bool> {
        let path = self.gitignore();
        let existing = read_bounded(&path, SMALL_FILE_LIMIT)?;
        let mut text = match &existing {
            Some(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            None => String::from("# vibesys run state: machine-local files never reach git\n"),
        };
        if text.lines().any(|l| l.trim() == GITIGNORE_RULE) {
            return Ok(false);
        }
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(GITIGNORE_RULE);
        text.push('\n');
        write_atomic(&path, text.as_bytes())?;
        Ok(true)
    }
}

/// The project whose run state holds `canon` (canonical), if any: `canon`
/// is a candidate worktree's root, or lies inside the `.vibesys/state` of
/// the repository it belongs to (of any ancestor, outside a repository).
fn run_state_owner(canon: &Path) -> Option<PathBuf> {
    let repo_root = canon
        .ancestors()
        .find(|d| d.join(".git").symlink_metadata().is_ok());
    match repo_root {
        Some(root) if canon.starts_with(root.join(STATE_DIR)) => {
            return Some(root.to_path_buf());
        }
        Some(_) => {}
        None => {
            if let Some(state) = canon.ancestors().find(|a| a.ends_with(STATE_DIR)) {
                return state.parent()?.parent().map(Path::to_path_buf);
            }
        }
    }
    // <project>/.vibesys/state/local/candidates/<run>/<candidate>
    let candidates = canon.parent()?.parent()?;
    if candidates.ends_with(Path::new(STATE_DIR).join("local").join("candidates")) {
        return candidates.ancestors().nth(4).map(Path::to_path_buf);
    }
    None
}

/// Whether a repository path names a private file: `agent.toml`, `.env` or
/// `.env.*` in any directory.
pub fn is_private_file(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    name == "agent.toml" || name == ".env" || name.starts_with(".env.")
}

/// Private files that appear in any commit reachable from any ref or
/// reflog entry of the repository containing `project`. Empty when the
/// project is not inside a git repository.
pub fn private_files_in_history(project: &Path) -> Result<BTreeSet<String>> {
    paths_in_history(project, is_private_file)
}

/// The paths at or below any of `hidden` (workspace-relative) that appear
/// in any commit reachable from any ref or reflog entry: their content is
/// in `.git/objects`, readable by an agent that reads history, however the
/// path itself is masked. Empty when the project is not in a repository.
pub fn hidden_paths_in_history(project: &Path, hidden: &[&Path]) -> Result<BTreeSet<String>> {
    // Repository paths are relative to the top level; the project may be
    // a subdirectory of it.
    let prefix = git::run(
        project,
        &[OsStr::new("rev-parse"), OsStr::new("--show-prefix")],
    )
    .map(|out| String::from_utf8_lossy(&out).trim().to_owned())
    .unwrap_or_default();
    let wanted: Vec<String> = hidden
        .iter()
        .map(|h| format!("{prefix}{}", h.display()))
        .collect();
    let found = paths_in_history(project, |path| {
        wanted.iter().any(|w| {
            path == w
                || path
                    .strip_prefix(w.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
    })?;
    Ok(found
        .into_iter()
        .map(|p| p.strip_prefix(prefix.as_str()).unwrap_or(&p).to_owned())
        .collect())
}

fn paths_in_history(project: &Path, keep: impl Fn(&str) -> bool) -> Result<BTreeSet<String>> {
    let mut found = BTreeSet::new();
    if !git::inside_repository(project) {
        return Ok(found);
    }
    let args: Vec<&OsStr> = [
        "log",
        "--all",
        "--reflog",
        "-m",
        "--no-renames",
        "--name-only",
        "--format=",
        "-z",
    ]
    .iter()
    .map(OsStr::new)
    .collect();
    git::for_each_nul_record(project, &args, |record| {
        let text = String::from_utf8_lossy(record);
        let path = text.trim_matches('\n');
        if !path.is_empty() && keep(path) {
            found.insert(path.to_owned());
        }
    })?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_paths() {
        assert_eq!(
            StateLayout::hidden_paths(),
            vec![
                PathBuf::from(".vibesys/state/runs"),
                PathBuf::from(".vibesys/state/local")
            ]
        );
        assert_eq!(
            StateLayout::read_only_paths(),
            vec![
                PathBuf::from(".vibesys/state/agent-visible"),
                PathBuf::from(".vibesys/state/project.json"),
                PathBuf::from(".vibesys/state/.gitignore"),
            ]
        );
    }

    #[test]
    fn private_names() {
        for p in ["agent.toml", "a/agent.toml", ".env", "x/.env.local"] {
            assert!(is_private_file(p), "{p}");
        }
        for p in ["agent.toml.bak", "env", "a/.environment", "my.env"] {
            assert!(!is_private_file(p), "{p}");
        }
    }
}
