//! Candidate worktrees and state preparation with the real git.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;

use vs_runtime::{
    CandidateId, CandidateWorktree, GitError, RunId, RuntimeError, StateError, StateLayout,
    WorktreeError,
};

mod common;
use common::git;

/// A git project with two commits and initialized run state.
fn repo() -> (tempfile::TempDir, StateLayout) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    git(p, &["init", "-q"]);
    fs::write(p.join("solution.rs"), "v1").unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "one"]);
    fs::write(p.join("solution.rs"), "v2").unwrap();
    git(p, &["commit", "-q", "-am", "two"]);
    let layout = StateLayout::open(p).unwrap();
    layout.init().unwrap();
    (dir, layout)
}

#[test]
fn each_candidate_gets_its_own_worktree_and_it_is_removed() {
    let (dir, layout) = repo();
    let run = RunId::new("run-1").unwrap();
    let a = CandidateWorktree::create(&layout, &run, &CandidateId::new("a").unwrap(), "HEAD~1")
        .unwrap();
    let b =
        CandidateWorktree::create(&layout, &run, &CandidateId::new("b").unwrap(), "HEAD").unwrap();

    let expected = layout
        .project()
        .join(".vibesys/state/local/candidates/run-1/a");
    assert_eq!(a.path(), expected);
    assert_eq!(
        fs::read_to_string(a.path().join("solution.rs")).unwrap(),
        "v1"
    );
    assert_eq!(
        fs::read_to_string(b.path().join("solution.rs")).unwrap(),
        "v2"
    );
    assert_eq!(a.commit().len(), 40);

    // Hidden state directories exist inside each worktree, ready to be hidden.
    for rel in StateLayout::hidden_paths() {
        assert!(a.path().join(&rel).is_dir(), "{}", rel.display());
    }
    // Candidates do not share files.
    fs::write(a.path().join("solution.rs"), "a's edit").unwrap();
    assert_eq!(
        fs::read_to_string(b.path().join("solution.rs")).unwrap(),
        "v2"
    );
    // The worktrees never show up in the project's git status.
    let status = git(
        dir.path(),
        &["status", "--porcelain", "--untracked-files=all"],
    );
    assert!(!status.contains("candidates"), "{status}");

    let list = git(dir.path(), &["worktree", "list", "--porcelain"]);
    assert!(list.contains("candidates/run-1/a"), "{list}");
    let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
    a.remove().unwrap();
    drop(b);
    assert!(!pa.exists() && !pb.exists());
    let list = git(dir.path(), &["worktree", "list", "--porcelain"]);
    assert!(!list.contains("candidates"), "{list}");
}

#[test]
fn a_candidate_id_is_used_once() {
    let (_dir, layout) = repo();
    let run = RunId::new("r").unwrap();
    let c = CandidateId::new("c").unwrap();
    let first = CandidateWorktree::create(&layout, &run, &c, "HEAD").unwrap();
    let err = CandidateWorktree::create(&layout, &run, &c, "HEAD").unwrap_err();
    assert!(
        matches!(err, RuntimeError::Worktree(WorktreeError::Exists { .. })),
        "{err}"
    );
    first.remove().unwrap();
}

#[test]
fn worktrees_need_initialized_state_and_a_sane_revision() {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q"]);
    git(dir.path(), &["commit", "-q", "--allow-empty", "-m", "e"]);
    let layout = StateLayout::open(dir.path()).unwrap();
    let run = RunId::new("r").unwrap();
    let c = CandidateId::new("c").unwrap();
    let err = CandidateWorktree::create(&layout, &run, &c, "HEAD").unwrap_err();
    assert!(
        matches!(
            err,
            RuntimeError::State(StateError::StateNotInitialized { .. })
        ),
        "{err}"
    );

    layout.init().unwrap();
    for bad in ["--output=/tmp/x", "", "a b"] {
        let err = CandidateWorktree::create(&layout, &run, &c, bad).unwrap_err();
        assert!(
            matches!(err, RuntimeError::InvalidRevision { .. }),
            "{bad}: {err}"
        );
    }
    let err = CandidateWorktree::create(&layout, &run, &c, "no-such-branch").unwrap_err();
    assert!(
        matches!(err, RuntimeError::Git(GitError::Failed { .. })),
        "{err}"
    );
}

#[test]
fn prepare_makes_hidden_paths_and_refuses_symlinks() {
    let ws = tempfile::tempdir().unwrap();
    StateLayout::prepare(ws.path()).unwrap();
    assert!(ws.path().join(".vibesys/state/runs").is_dir());
    assert!(ws.path().join(".vibesys/state/local").is_dir());
    StateLayout::prepare(ws.path()).unwrap();

    let ws2 = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    fs::create_dir_all(ws2.path().join(".vibesys/state")).unwrap();
    std::os::unix::fs::symlink(outside.path(), ws2.path().join(".vibesys/state/runs")).unwrap();
    let err = StateLayout::prepare(ws2.path()).unwrap_err();
    assert!(matches!(err, RuntimeError::NotADirectory { .. }), "{err}");
}

#[test]
fn a_recorded_commit_is_checked_out_as_it_is_and_anything_else_is_refused() {
    let (dir, layout) = repo();
    let run = RunId::new("run-1").unwrap();
    let head = git(dir.path(), &["rev-parse", "HEAD~1"]).trim().to_owned();
    let wt =
        CandidateWorktree::create_at_commit(&layout, &run, &CandidateId::new("a").unwrap(), &head)
            .unwrap();
    assert_eq!(wt.commit(), head);
    assert_eq!(
        fs::read_to_string(wt.path().join("solution.rs")).unwrap(),
        "v1"
    );
    wt.remove().unwrap();
    // Not a full id: refused before git runs.
    for bad in ["HEAD", &head[..12], &head.to_uppercase()] {
        let err = CandidateWorktree::create_at_commit(
            &layout,
            &run,
            &CandidateId::new("b").unwrap(),
            bad,
        )
        .unwrap_err();
        assert!(
            matches!(err, RuntimeError::InvalidRevision { .. }),
            "{bad}: {err}"
        );
    }
    // A full id of no object: git refuses it, and nothing is left.
    let err = CandidateWorktree::create_at_commit(
        &layout,
        &run,
        &CandidateId::new("c").unwrap(),
        &"0".repeat(40),
    )
    .unwrap_err();
    assert!(
        matches!(err, RuntimeError::Git(GitError::Failed { .. })),
        "{err}"
    );
    assert!(
        !dir.path()
            .join(StateLayout::candidates_rel(&run))
            .join("c")
            .exists()
    );
}

#[test]
fn a_run_directory_is_asked_about_whole_and_once_per_layout() {
    let (dir, layout) = repo();
    let p = dir.path();
    let run = RunId::new("r1").unwrap();
    let run_dir = layout.ensure_run_dir(&run).unwrap();
    fs::write(run_dir.join("run.json"), "{}").unwrap();
    fs::write(run_dir.join("other.json"), "{}").unwrap();
    layout.require_untracked(&run_dir.join("run.json")).unwrap();
    git(p, &["add", "-f", ".vibesys/state/runs/r1/other.json"]);
    // This layout asked already: an index entry added since changes no
    // byte of a record (see `require_untracked`).
    layout.require_untracked(&run_dir.join("run.json")).unwrap();
    // A fresh one asks about the whole run directory: a tracked sibling
    // refuses every record of the run, naming it.
    let fresh = StateLayout::open(p).unwrap();
    let err = fresh
        .require_untracked(&run_dir.join("run.json"))
        .unwrap_err();
    match err {
        RuntimeError::State(StateError::RecordTrackedByGit { tracked, .. }) => {
            assert_eq!(tracked, ".vibesys/state/runs/r1/other.json");
        }
        other => panic!("{other}"),
    }
    // Another run's directory is its own question.
    let r2 = layout.ensure_run_dir(&RunId::new("r2").unwrap()).unwrap();
    fs::write(r2.join("run.json"), "{}").unwrap();
    layout.require_untracked(&r2.join("run.json")).unwrap();
}

/// Candidates `0..n` of `run` created at once, one thread each (each
/// must succeed).
fn create_at_once(layout: &StateLayout, run: &RunId, n: usize) -> Vec<CandidateWorktree> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                s.spawn(move || {
                    let id = CandidateId::new(&i.to_string()).unwrap();
                    CandidateWorktree::create(layout, run, &id, "HEAD")
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    })
}

/// A run prepares its candidates in parallel. `git worktree add` (and
/// `remove`) read every worktree's administrative files, and one that
/// another thread is creating lacks some of them: git failed with
/// "failed to read .git/worktrees/N/commondir" (seen in CI, 2026-12-03).
/// Many worktrees created and removed at once, several rounds.
#[test]
fn candidates_created_and_removed_in_parallel_all_succeed() {
    let (_dir, layout) = repo();
    for round in 0..6 {
        let run = RunId::new(&format!("run-{round}")).unwrap();
        let made = create_at_once(&layout, &run, 8);
        assert_eq!(made.len(), 8);
        std::thread::scope(|s| {
            for wt in made {
                s.spawn(move || wt.remove().unwrap());
            }
        });
    }
}

/// The worker side of the test below: when started by it (the variable
/// names the project), creates and removes candidates of its own run in
/// parallel, a few rounds, and reports failures by panicking.
fn parallel_worker() {
    let Some(project) = std::env::var_os("VS_WORKTREE_WORKER_PROJECT") else {
        return;
    };
    let worker = std::env::var("VS_WORKTREE_WORKER_ID").unwrap();
    let layout = StateLayout::open(std::path::Path::new(&project)).unwrap();
    for round in 0..4 {
        let run = RunId::new(&format!("w{worker}-{round}")).unwrap();
        for wt in create_at_once(&layout, &run, 4) {
            wt.remove().unwrap();
        }
    }
}

/// Two `vibesys run` processes of one project (or of two worktrees of one
/// repository) race in git's worktree administration the same way threads
/// do: the lock is a file lock in the common git directory, taken by every
/// process. Four processes, each with four candidates at a time.
#[test]
fn candidates_of_several_processes_at_once_all_succeed() {
    if std::env::var_os("VS_WORKTREE_WORKER_PROJECT").is_some() {
        parallel_worker();
        return;
    }
    let (dir, _layout) = repo();
    let exe = std::env::current_exe().unwrap();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    "candidates_of_several_processes_at_once_all_succeed",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("VS_WORKTREE_WORKER_PROJECT", dir.path())
                .env("VS_WORKTREE_WORKER_ID", i.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for h in handles {
        let out = h.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a worker failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let lock = dir.path().join(".git/vibesys-worktrees.lock");
    assert!(
        lock.is_file(),
        "the lock file is in the common git directory"
    );
}
