//! Where a candidate is evaluated (DESIGN.md section 6): a fresh checkout
//! of the measured commit, never the agent's worktree, so nothing the
//! agent left untracked or ignored reaches `check` and `measure`; the
//! trusted build's verified outputs placed at their declared paths from
//! the recorded artifacts, each re-hashed on the descriptor it is copied
//! from; and a fresh, empty `HOME` outside every workspace, beside the
//! checkout in the run state (never below `/tmp`, which Landlock shares
//! with every confined process of the user: another candidate's agent
//! could plant code there).

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Mode, OFlags};

use crate::BuildError;
use crate::build::{BuildOutput, TrustedBuild};
use crate::error::{Result, RuntimeError};
use crate::fsutil::{CopyError, copy_hashed, ensure_dir_chain, random_bytes};
use crate::id::{CandidateId, RunId};
use crate::state::StateLayout;
use crate::worktree::CandidateWorktree;

/// How the directory of an evaluation checkout is named below the run's
/// candidate worktrees (`eval-<n>-<nonce>`).
pub const EVAL_CHECKOUT_PREFIX: &str = "eval-";

/// How the directory of an evaluation's fresh `HOME` is named below the
/// run's candidate worktrees (`home-<n>-<nonce>`).
pub const EVAL_HOME_PREFIX: &str = "home-";

/// Whether `workspace` is an evaluation checkout of a run of `project`
/// (a directory `eval-*` below its candidate worktrees).
pub fn is_eval_checkout(project: &Path, workspace: &Path) -> bool {
    let candidates = project
        .join(crate::state::STATE_DIR)
        .join("local/candidates");
    workspace.parent().and_then(Path::parent) == Some(candidates.as_path())
        && workspace
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(EVAL_CHECKOUT_PREFIX))
}

/// A candidate's evaluation checkout and its `HOME`; both removed when
/// dropped.
#[derive(Debug)]
pub struct EvalCheckout {
    worktree: CandidateWorktree,
    home: PathBuf,
    /// The build outputs placed in the checkout, as recorded.
    outputs: Vec<BuildOutput>,
}

/// Where an evaluation command runs, as a run environment sees it.
#[derive(Debug, Clone, Copy)]
pub struct EvalPlace<'a> {
    /// The checkout (the command's working directory, writable).
    pub checkout: &'a Path,
    /// The fresh, empty `HOME` (outside every workspace, writable).
    pub home: &'a Path,
}

impl EvalCheckout {
    /// Checks out `commit` (a full commit id) of `run` for candidate `n`,
    /// places `build`'s verified outputs in it and makes a fresh `HOME`.
    pub fn create(
        layout: &StateLayout,
        run: &RunId,
        n: u32,
        commit: &str,
        build: Option<&TrustedBuild>,
    ) -> Result<Self> {
        let mut nonce = [0u8; 6];
        random_bytes(&mut nonce)?;
        let id = CandidateId::new(&format!("{EVAL_CHECKOUT_PREFIX}{n}-{}", hex::encode(nonce)))?;
        let worktree = CandidateWorktree::create_at_commit(layout, run, &id, commit)?;
        let root = fs::canonicalize(worktree.path())
            .map_err(|e| RuntimeError::io("resolve", worktree.path(), e))?;
        let outputs = build
            .map(|b| b.record().outputs.clone())
            .unwrap_or_default();
        if let Some(build) = build {
            for out in &outputs {
                place_output(&root, build, out)?;
            }
        }
        let home = fresh_home(layout, run, n)?;
        Ok(Self {
            worktree,
            home,
            outputs,
        })
    }

    /// Checks that every build output placed in the checkout is still the
    /// verified one (path, regular file, size and digest), after a
    /// command that could write the checkout ran (`check` runs the
    /// candidate's program before `measure` loads the outputs) named by
    /// `what`. Names the first one that changed.
    pub fn verify_outputs(&self, what: &str) -> std::result::Result<(), String> {
        let root = self.worktree.path();
        for out in &self.outputs {
            let found = match hash_beneath(root, &out.path, out.size) {
                Ok(Some((size, digest))) if size == out.size && digest == out.sha256 => continue,
                Ok(Some((size, digest))) => format!("{size} bytes, sha256 {digest}"),
                Ok(None) => "more bytes than recorded".to_owned(),
                Err(why) => why,
            };
            return Err(format!(
                "build output {} changed while {what} ran (expected sha256 {}; found {found})",
                out.path, out.sha256
            ));
        }
        Ok(())
    }

    /// The checkout.
    pub fn path(&self) -> &Path {
        self.worktree.path()
    }

    /// The fresh `HOME`.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// Both, for a run environment.
    pub fn place(&self) -> EvalPlace<'_> {
        EvalPlace {
            checkout: self.worktree.path(),
            home: &self.home,
        }
    }
}

/// Removes what an earlier, killed attempt of candidate `n` left of its
/// evaluation checkouts (`eval-<n>-*`) and their `HOME`s (`home-<n>-*`),
/// before the candidate starts over.
pub fn discard_stale(layout: &StateLayout, run: &RunId, n: u32) -> Result<()> {
    let dir = layout
        .project()
        .join(crate::state::StateLayout::candidates_rel(run));
    let Ok(entries) = fs::read_dir(&dir) else {
        return Ok(());
    };
    let prefix = format!("{EVAL_CHECKOUT_PREFIX}{n}-");
    let home = format!("{EVAL_HOME_PREFIX}{n}-");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(&home) {
            let _ = make_removable(&entry.path());
            fs::remove_dir_all(entry.path())
                .map_err(|e| RuntimeError::io("remove", entry.path(), e))?;
            continue;
        }
        if !name.starts_with(&prefix) {
            continue;
        }
        let _ = make_removable(&entry.path());
        CandidateWorktree::discard(layout, run, &CandidateId::new(name)?)?;
    }
    Ok(())
}

impl Drop for EvalCheckout {
    fn drop(&mut self) {
        let _ = make_removable(&self.home);
        let _ = fs::remove_dir_all(&self.home);
        let _ = make_removable(self.worktree.path());
    }
}

/// Gives the owner write and search permission on every directory below
/// `root` (never through a symlink), so that what an evaluation left
/// read-only can be removed.
fn make_removable(root: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(root)?;
    if !meta.file_type().is_dir() {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    if mode & 0o700 != 0o700 {
        fs::set_permissions(root, fs::Permissions::from_mode(mode | 0o700))?;
    }
    for entry in fs::read_dir(root)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            make_removable(&entry.path())?;
        }
    }
    Ok(())
}

/// A fresh, empty directory (mode 0700) beside the evaluation's checkout
/// (`home-<n>-<nonce>` below the run's candidate worktrees): outside the
/// project, every workspace and every checkout, in the run state that no
/// confined process may write. Not below the system's temporary
/// directory: under Landlock `/tmp` is writable to every confined process
/// of the user, so another candidate's agent, running at the same time,
/// could plant code in it that this evaluation would run.
fn fresh_home(layout: &StateLayout, run: &RunId, n: u32) -> Result<PathBuf> {
    let base = ensure_dir_chain(layout.project(), &StateLayout::candidates_rel(run))?;
    let mut nonce = [0u8; 8];
    random_bytes(&mut nonce)?;
    let home = base.join(format!("{EVAL_HOME_PREFIX}{n}-{}", hex::encode(nonce)));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&home)
        .map_err(|e| RuntimeError::io("create", &home, e))?;
    fs::canonicalize(&home).map_err(|e| RuntimeError::io("resolve", &home, e))
}

/// Places one verified output at its declared path below `root`: every
/// directory on the way is opened without following a symlink (missing
/// ones are made), whatever the commit holds at the path is unlinked, and
/// the artifact's bytes are copied from the descriptor
/// [`TrustedBuild::open_output`] checked, hashed again as they are
/// copied.
fn place_output(root: &Path, build: &TrustedBuild, out: &BuildOutput) -> Result<()> {
    let reject = |reason: String| {
        RuntimeError::from(BuildError::OutputRejected {
            path: out.path.clone(),
            reason: format!("cannot place it in the evaluation's checkout: {reason}"),
        })
    };
    let (artifact, mut src) = build.open_output(&out.path)?;
    let parts: Vec<&str> = out.path.split('/').collect();
    let Some((last, parents)) = parts.split_last() else {
        return Err(reject("its path is empty".to_owned()));
    };
    let dir = open_dir_beneath(root, parents, true).map_err(reject)?;
    // A stale file of the same name (committed by the agent) gives way to
    // the verified one.
    match rustix::fs::unlinkat(&dir, *last, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => {}
        Err(rustix::io::Errno::ISDIR | rustix::io::Errno::PERM) => {
            return Err(reject(
                "the measured commit holds a directory at its path".to_owned(),
            ));
        }
        Err(e) => return Err(reject(format!("cannot replace it: {e}"))),
    }
    let mode = if out.executable { 0o755 } else { 0o644 };
    let dst = rustix::fs::openat(
        &dir,
        *last,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode),
    )
    .map_err(|e| reject(format!("cannot create it: {e}")))?;
    let mut dst = fs::File::from(dst);
    // No more than the recorded size is copied: a longer artifact changed.
    let (size, found) = match copy_hashed(&mut src, &mut dst, out.size) {
        Ok(copied) => copied,
        Err(CopyError::TooLarge) => (out.size.saturating_add(1), String::new()),
        Err(CopyError::Read(e)) => return Err(RuntimeError::io("read", &artifact, e)),
        Err(CopyError::Write(e)) => return Err(reject(format!("cannot write it: {e}"))),
    };
    if found != out.sha256 || size != out.size {
        return Err(BuildError::ArtifactChanged {
            name: out.path.clone(),
            path: artifact,
            expected: out.sha256.clone(),
            found,
        }
        .into());
    }
    // The umask must not take the execute bit the build gave it.
    dst.set_permissions(fs::Permissions::from_mode(mode))
        .map_err(|e| reject(format!("cannot set its mode: {e}")))?;
    Ok(())
}

/// Opens the directory `root/parents...`, each component relative to the
/// one before without following a symlink; with `create`, a missing one
/// is made (0755). Fails naming the component that is missing, a symlink
/// or not a directory.
fn open_dir_beneath(
    root: &Path,
    parents: &[&str],
    create: bool,
) -> std::result::Result<OwnedFd, String> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir: OwnedFd = rustix::fs::open(root, flags, Mode::empty())
        .map_err(|e| format!("cannot open {}: {e}", root.display()))?;
    let mut walked = String::new();
    for part in parents {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(part);
        dir = match rustix::fs::openat(&dir, *part, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) if create => {
                match rustix::fs::mkdirat(&dir, *part, Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(format!("cannot create {walked}: {e}")),
                }
                rustix::fs::openat(&dir, *part, flags, Mode::empty())
                    .map_err(|e| format!("cannot open {walked}: {e}"))?
            }
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                return Err(format!(
                    "{walked} is not a directory in the measured commit (a symlink or a file)"
                ));
            }
            Err(e) => return Err(format!("cannot open {walked}: {e}")),
        };
    }
    Ok(dir)
}

/// Size and sha256 of the regular file `root/rel`, opened without
/// following a symlink on any component; `None` past `limit` bytes.
fn hash_beneath(
    root: &Path,
    rel: &str,
    limit: u64,
) -> std::result::Result<Option<(u64, String)>, String> {
    let parts: Vec<&str> = rel.split('/').collect();
    let Some((last, parents)) = parts.split_last() else {
        return Err("its path is empty".to_owned());
    };
    let dir = open_dir_beneath(root, parents, false)?;
    let fd = rustix::fs::openat(
        &dir,
        *last,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| format!("cannot open it: {e}"))?;
    let mut file = fs::File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot inspect it: {e}"))?;
    if !meta.file_type().is_file() {
        return Err(format!("a {}", crate::fsutil::kind_name(&meta.file_type())));
    }
    match copy_hashed(&mut file, &mut io::sink(), limit) {
        Ok(found) => Ok(Some(found)),
        Err(CopyError::TooLarge) => Ok(None),
        Err(CopyError::Read(e) | CopyError::Write(e)) => Err(format!("cannot read it: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eval_checkout_is_named_below_the_candidates_of_a_run() {
        let project = Path::new("/p");
        let candidates = Path::new("/p/.vibesys/state/local/candidates/run-1");
        assert!(is_eval_checkout(project, &candidates.join("eval-2-ab12")));
        for other in [
            candidates.join("2"),
            candidates.join("build-ab12"),
            candidates.join("eval-2-ab12/sub"),
            PathBuf::from("/p/eval-2-ab12"),
            PathBuf::from("/q/.vibesys/state/local/candidates/run-1/eval-2-ab12"),
        ] {
            assert!(!is_eval_checkout(project, &other), "{}", other.display());
        }
    }
}
