//! Candidate isolation: one git worktree per candidate.
//!
//! Each candidate is checked out with real git (`git worktree add --detach`)
//! under `.vibesys/state/local/candidates/<run-id>/<candidate-id>`, inside
//! the hidden `local/` directory and ignored by git. Its own hidden state
//! directories are prepared so confinement can hide them there too.

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::WorktreeError;
use crate::error::{Result, RuntimeError};
use crate::fsutil::ensure_dir_chain;
use crate::git;
use crate::id::{CandidateId, RunId};
use crate::state::StateLayout;

/// Longest revision text accepted.
const MAX_REV_LEN: usize = 256;

/// A linked git worktree for one candidate; removed by [`remove`] or, on a
/// best-effort basis, when dropped.
///
/// [`remove`]: CandidateWorktree::remove
#[derive(Debug)]
pub struct CandidateWorktree {
    project: PathBuf,
    path: PathBuf,
    run_id: RunId,
    candidate_id: CandidateId,
    commit: String,
    removed: bool,
}

fn validate_rev(rev: &str) -> Result<()> {
    let err = |reason| RuntimeError::InvalidRevision {
        rev: rev.chars().take(MAX_REV_LEN).collect(),
        reason,
    };
    if rev.is_empty() {
        return Err(err("it is empty"));
    }
    if rev.len() > MAX_REV_LEN {
        return Err(err("it is longer than 256 bytes"));
    }
    if rev.starts_with('-') {
        return Err(err("it must not start with '-'"));
    }
    if rev.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(err("it must not contain whitespace or control characters"));
    }
    Ok(())
}

impl CandidateWorktree {
    /// Creates the worktree of `candidate` in `run` at revision `rev` of the
    /// project's repository. The run state must be initialized (so that
    /// `local/` is ignored by git).
    pub fn create(
        layout: &StateLayout,
        run: &RunId,
        candidate: &CandidateId,
        rev: &str,
    ) -> Result<Self> {
        validate_rev(rev)?;
        layout.require_initialized()?;
        let project = layout.project().to_path_buf();
        let spec = format!("{rev}^{{commit}}");
        let out = git::run(
            &project,
            &[
                OsStr::new("rev-parse"),
                OsStr::new("--verify"),
                OsStr::new("--end-of-options"),
                OsStr::new(&spec),
            ],
        )?;
        let commit = String::from_utf8_lossy(&out).trim().to_owned();
        Self::checkout(project, run, candidate, commit)
    }

    /// Like [`Self::create`], at `commit`, a full commit id that was
    /// resolved before (a run's recorded base): it is not asked of git
    /// again (`worktree add` refuses an id that names no commit).
    pub fn create_at_commit(
        layout: &StateLayout,
        run: &RunId,
        candidate: &CandidateId,
        commit: &str,
    ) -> Result<Self> {
        if !is_full_object_id(commit) {
            return Err(RuntimeError::InvalidRevision {
                rev: commit.chars().take(MAX_REV_LEN).collect(),
                reason: "it is not a full commit id",
            });
        }
        layout.require_initialized()?;
        let project = layout.project().to_path_buf();
        Self::checkout(project, run, candidate, commit.to_owned())
    }

    fn checkout(
        project: PathBuf,
        run: &RunId,
        candidate: &CandidateId,
        commit: String,
    ) -> Result<Self> {
        let parent = ensure_dir_chain(&project, &StateLayout::candidates_rel(run))?;
        let path = parent.join(candidate.as_str());
        if path.symlink_metadata().is_ok() {
            return Err(WorktreeError::Exists { path }.into());
        }
        let admin = admin_lock(&project)?;
        git::run(
            &project,
            &[
                OsStr::new("worktree"),
                OsStr::new("add"),
                OsStr::new("--detach"),
                OsStr::new("--quiet"),
                OsStr::new("--end-of-options"),
                path.as_os_str(),
                OsStr::new(&commit),
            ],
        )?;
        drop(admin);
        let wt = Self {
            project,
            path,
            run_id: run.clone(),
            candidate_id: candidate.clone(),
            commit,
            removed: false,
        };
        // On failure `wt` is dropped, which removes the worktree again.
        StateLayout::prepare(&wt.path)?;
        Ok(wt)
    }

    /// Removes the worktree of `candidate` in `run` if one is left (by a
    /// run that died or was stopped), so it can be created afresh.
    pub fn discard(layout: &StateLayout, run: &RunId, candidate: &CandidateId) -> Result<()> {
        let path = layout
            .project()
            .join(StateLayout::candidates_rel(run))
            .join(candidate.as_str());
        if path.symlink_metadata().is_err() {
            return Ok(());
        }
        remove_worktree(layout.project(), &path)
    }

    /// The worktree directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The full commit id checked out.
    pub fn commit(&self) -> &str {
        &self.commit
    }

    /// The run this candidate belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The candidate id.
    pub fn candidate_id(&self) -> &CandidateId {
        &self.candidate_id
    }

    /// Removes the worktree (`git worktree remove --force`, then prune).
    pub fn remove(mut self) -> Result<()> {
        self.removed = true;
        remove_worktree(&self.project, &self.path)
    }
}

/// `git worktree add`, `remove` and `prune` read the administrative files
/// of every worktree of the repository, and one that is being created or
/// removed lacks some of them: run at once, git fails ("failed to read
/// .git/worktrees/N/commondir"). A run prepares and removes its
/// candidates in parallel, so this process runs them one at a time, and
/// so does every vibesys process that works on the same repository (two
/// runs of one project, runs of two worktrees of one repository): see
/// [`AdminLock`].
///
/// The mutex also holds each project's lock file path, asked of git once
/// per process (`rev-parse --git-common-dir`), not before every operation.
static ADMIN: Mutex<Vec<(PathBuf, PathBuf)>> = Mutex::new(Vec::new());

/// The lock file in the repository's common git directory, beside
/// git's own `worktrees/`.
const LOCK_FILE: &str = "vibesys-worktrees.lock";

/// How long a worktree operation waits for another process's: far longer
/// than any `git worktree add` takes, short enough that a lock held for
/// ever (a stuck process, or one in a sandbox that can read the common
/// directory and takes the lock to stall the run) ends in an error naming
/// the file rather than a hang.
const LOCK_WAIT: Duration = Duration::from_secs(120);

/// The worktree operations of this repository, one at a time: this
/// process's mutex, then an exclusive `flock` on [`LOCK_FILE`] (released
/// when the guard drops, or when the process dies).
struct AdminLock {
    _file: std::fs::File,
    _guard: MutexGuard<'static, Vec<(PathBuf, PathBuf)>>,
}

fn admin_lock(project: &Path) -> Result<AdminLock> {
    admin_lock_within(project, LOCK_WAIT)
}

fn admin_lock_within(project: &Path, wait: Duration) -> Result<AdminLock> {
    let mut guard = ADMIN.lock().unwrap_or_else(PoisonError::into_inner);
    let path = match guard.iter().find(|(p, _)| p == project) {
        Some((_, lock)) => lock.clone(),
        None => {
            let common = git::run(
                project,
                &[
                    OsStr::new("rev-parse"),
                    OsStr::new("--path-format=absolute"),
                    OsStr::new("--git-common-dir"),
                ],
            )?;
            let common = String::from_utf8_lossy(&common);
            let lock = Path::new(common.trim_end_matches(['\n', '\r'])).join(LOCK_FILE);
            guard.push((project.to_path_buf(), lock.clone()));
            lock
        }
    };
    let file = open_lock_file(&path).map_err(|e| RuntimeError::io("open", &path, e))?;
    let start = Instant::now();
    loop {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {
                return Ok(AdminLock {
                    _file: file,
                    _guard: guard,
                });
            }
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {}
            Err(e) => return Err(RuntimeError::io("lock", &path, e.into())),
        }
        if start.elapsed() >= wait {
            return Err(WorktreeError::LockBusy {
                path,
                seconds: wait.as_secs(),
            }
            .into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Opens (creating, owner-only) the lock file, never through a symlink.
fn open_lock_file(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

fn remove_worktree(project: &Path, path: &Path) -> Result<()> {
    let _admin = admin_lock(project)?;
    let removed = git::run(
        project,
        &[
            OsStr::new("worktree"),
            OsStr::new("remove"),
            OsStr::new("--force"),
            OsStr::new("--force"),
            OsStr::new("--end-of-options"),
            path.as_os_str(),
        ],
    );
    if removed.is_err() {
        // git no longer knows it, or it is damaged: delete the directory and
        // let prune drop the administrative files (a successful `remove`
        // has dropped them itself).
        match fs::remove_dir_all(path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(RuntimeError::io("remove", path, e)),
        }
        git::run(project, &[OsStr::new("worktree"), OsStr::new("prune")])?;
    }
    Ok(())
}

/// A full SHA-1 or SHA-256 object id in git's lowercase hex.
fn is_full_object_id(rev: &str) -> bool {
    matches!(rev.len(), 40 | 64) && rev.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Drop for CandidateWorktree {
    fn drop(&mut self) {
        if !self.removed {
            let _ = remove_worktree(&self.project, &self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revisions() {
        assert!(validate_rev("HEAD").is_ok());
        assert!(validate_rev("main~2").is_ok());
        assert!(validate_rev("").is_err());
        assert!(validate_rev("--output=/x").is_err());
        assert!(validate_rev("a b").is_err());
    }

    /// A fresh repository (the real git).
    fn git_repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir.path())
            .status()
            .unwrap();
        assert!(status.success());
        dir
    }

    /// A lock held elsewhere (another process, or one that only takes it to
    /// stall the run) ends in an error naming the file, not in a hang; once
    /// released, the lock is taken again.
    #[test]
    fn a_lock_held_elsewhere_ends_in_an_error_that_names_it() {
        let dir = git_repo();
        let lock = dir.path().join(".git").join(LOCK_FILE);
        let holder = open_lock_file(&lock).unwrap();
        rustix::fs::flock(&holder, rustix::fs::FlockOperation::LockExclusive).unwrap();
        let err = admin_lock_within(dir.path(), Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(
            matches!(&err, RuntimeError::Worktree(WorktreeError::LockBusy { path, .. }) if path.ends_with(LOCK_FILE)),
            "{err}"
        );
        assert!(err.to_string().contains("vibesys-worktrees.lock"), "{err}");
        drop(holder);
        assert!(admin_lock_within(dir.path(), Duration::from_millis(200)).is_ok());
    }

    /// A lock file replaced by a symlink is refused, and nothing is created
    /// or locked where it points.
    #[test]
    fn a_symlinked_lock_file_is_refused() {
        let dir = git_repo();
        let target = dir.path().join("elsewhere");
        std::os::unix::fs::symlink(&target, dir.path().join(".git").join(LOCK_FILE)).unwrap();
        let err = admin_lock_within(dir.path(), Duration::from_millis(200))
            .err()
            .unwrap();
        assert!(err.to_string().contains(LOCK_FILE), "{err}");
        assert!(
            target.symlink_metadata().is_err(),
            "nothing created through the link"
        );
    }
}
