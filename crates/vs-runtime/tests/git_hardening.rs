//! The framework's git never runs what a repository's configuration, its
//! hooks or a committed `.gitattributes` name, with the real git. Each
//! planted command touches a marker; a control run with plain git shows
//! the plant is live, then every framework call leaves no marker.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use vs_runtime::{
    CandidateId, CandidateWorktree, GitError, RunId, RuntimeError, StateError, StateLayout, git,
};

mod common;
use common::git as plain_git;

fn hardened(dir: &Path, args: &[&str]) -> Result<String, RuntimeError> {
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    git::run(dir, &args).map(|o| String::from_utf8_lossy(&o).into_owned())
}

struct Planted {
    _dir: tempfile::TempDir,
    project: PathBuf,
    markers: PathBuf,
}

impl Planted {
    fn markers(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&self.markers)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    fn clear(&self) {
        for e in fs::read_dir(&self.markers).unwrap() {
            fs::remove_file(e.unwrap().path()).unwrap();
        }
    }

    /// A shell command that touches marker `name` (git appends its own
    /// arguments, which `:` swallows).
    fn cmd(&self, name: &str) -> String {
        format!("touch {}/{name}; :", self.markers.display())
    }
}

/// A repository whose commit carries `.gitattributes` naming a filter and
/// a diff driver, and whose `.git/config`, `.git/config.worktree` and
/// `.git/hooks` name commands that touch markers.
fn planted() -> Planted {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    let markers = dir.path().join("markers");
    fs::create_dir_all(&project).unwrap();
    fs::create_dir_all(&markers).unwrap();
    let p = Planted {
        _dir: dir,
        project,
        markers,
    };
    let root = &p.project;
    plain_git(root, &["init", "-q"]);
    fs::write(root.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
    fs::write(root.join("solution.rs"), "v1\n").unwrap();
    plain_git(root, &["add", "-A"]);
    plain_git(root, &["commit", "-q", "-m", "one"]);
    fs::write(root.join("solution.rs"), "v2\n").unwrap();
    plain_git(root, &["commit", "-q", "-am", "two"]);
    let set = |key: &str, value: &str| plain_git(root, &["config", key, value]);
    set("filter.evil.smudge", &format!("{} ; cat", p.cmd("smudge")));
    set("filter.evil.clean", &format!("{} ; cat", p.cmd("clean")));
    set("filter.evil.required", "true");
    set(
        "diff.evil.textconv",
        &format!("{} ; cat", p.cmd("textconv")),
    );
    set("diff.external", &p.cmd("external-diff"));
    set("core.fsmonitor", &p.cmd("fsmonitor"));
    set("core.sshCommand", &p.cmd("ssh"));
    set("core.pager", &p.cmd("pager"));
    set("core.editor", &p.cmd("editor"));
    set("credential.helper", &format!("!{}", p.cmd("credential")));
    set("log.showSignature", "true");
    set("gpg.program", &p.cmd("gpg"));
    // A per-worktree configuration the agent could have written too.
    set("extensions.worktreeConfig", "true");
    plain_git(
        root,
        &["config", "--worktree", "core.hooksPath", ".git/hooks"],
    );
    let hooks = root.join(".git/hooks");
    fs::create_dir_all(&hooks).unwrap();
    for hook in [
        "post-checkout",
        "post-index-change",
        "reference-transaction",
        "pre-auto-gc",
    ] {
        let h = hooks.join(hook);
        fs::write(&h, format!("#!/bin/sh\n{}\n", p.cmd(hook))).unwrap();
        fs::set_permissions(&h, fs::Permissions::from_mode(0o755)).unwrap();
    }
    p
}

#[test]
fn planted_commands_never_run_through_the_framework() {
    let p = planted();
    let root = &p.project;

    // Control: plain git runs the plants (fsmonitor on status, smudge and
    // post-checkout on checkout).
    plain_git(root, &["status", "--porcelain"]);
    let ctl = tempfile::tempdir().unwrap();
    plain_git(
        root,
        &[
            "worktree",
            "add",
            "--detach",
            ctl.path().join("wt").to_str().unwrap(),
            "HEAD",
        ],
    );
    let seen = p.markers();
    for m in ["fsmonitor", "post-checkout", "smudge"] {
        assert!(
            seen.contains(&m.to_owned()),
            "control: {m} not run: {seen:?}"
        );
    }
    plain_git(
        root,
        &[
            "worktree",
            "remove",
            "--force",
            ctl.path().join("wt").to_str().unwrap(),
        ],
    );
    p.clear();

    // The framework: state init (git log of every ref), candidate
    // worktrees (rev-parse, worktree add, remove, prune), and git status,
    // log, diff and show through the hardened runner.
    let layout = StateLayout::open(root).unwrap();
    layout.init().unwrap();
    let run = RunId::new("r1").unwrap();
    let wt = CandidateWorktree::create(&layout, &run, &CandidateId::new("a").unwrap(), "HEAD~1")
        .unwrap();
    // The committed bytes, never a smudged version.
    assert_eq!(
        fs::read_to_string(wt.path().join("solution.rs")).unwrap(),
        "v1\n"
    );
    // The linked worktree's own config.worktree is the agent's too.
    let gitdir = plain_git(wt.path(), &["rev-parse", "--absolute-git-dir"]);
    fs::write(
        Path::new(gitdir.trim()).join("config.worktree"),
        format!(
            "[core]\n\tfsmonitor = {}\n\thooksPath = {}\n",
            p.cmd("wt-fsmonitor"),
            root.join(".git/hooks").display()
        ),
    )
    .unwrap();
    fs::write(wt.path().join("solution.rs"), "edited\n").unwrap();
    let status = hardened(wt.path(), &["status", "--porcelain"]).unwrap();
    assert_eq!(status, " M solution.rs\n");
    hardened(wt.path(), &["diff", "HEAD"]).unwrap();
    let status = hardened(root, &["status", "--porcelain"]).unwrap();
    assert_eq!(status, "?? .vibesys/\n", "{status}");
    let log = hardened(root, &["log", "--format=%s"]).unwrap();
    assert_eq!(log, "two\none\n");
    hardened(root, &["log", "-p", "--format=%s"]).unwrap();
    hardened(root, &["show", "HEAD"]).unwrap();
    wt.remove().unwrap();
    // No value disables an external diff: a subcommand that may run one
    // and does not take --no-ext-diff is refused, naming the key.
    let err = hardened(root, &["stash", "show"]).unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Git(GitError::ConfigRefused { key, .. }) if key == "diff.external"),
        "{err}"
    );
    assert_eq!(p.markers(), Vec::<String>::new(), "a planted command ran");
}

#[test]
fn an_include_is_refused_naming_it_and_nothing_runs() {
    let p = planted();
    let root = &p.project;
    // The included file sits in the worktree, where the agent writes.
    fs::write(
        root.join("inc.cfg"),
        format!("[core]\n\tfsmonitor = {}\n", p.cmd("included")),
    )
    .unwrap();
    plain_git(root, &["config", "include.path", "../inc.cfg"]);
    let err = hardened(root, &["status"]).unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Git(GitError::ConfigRefused { key, .. }) if key == "include.path"),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("include.path") && text.contains(".git/config"),
        "{text}"
    );
    plain_git(root, &["config", "--unset", "include.path"]);
    plain_git(
        root,
        &["config", "includeIf.gitdir:/nowhere/.path", "../inc.cfg"],
    );
    let err = hardened(root, &["status"]).unwrap_err();
    assert!(
        err.to_string().contains("includeif.gitdir:/nowhere/.path"),
        "{err}"
    );
    // Worktree creation refuses the same way.
    let layout = StateLayout::open(root).unwrap();
    let err = layout.init().unwrap_err();
    assert!(
        matches!(err, RuntimeError::Git(GitError::ConfigRefused { .. })),
        "{err}"
    );
    assert_eq!(p.markers(), Vec::<String>::new(), "a planted command ran");
}

#[test]
fn replace_refs_do_not_change_what_a_commit_id_means() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    plain_git(root, &["init", "-q"]);
    fs::write(root.join("solution.rs"), "v1\n").unwrap();
    plain_git(root, &["add", "-A"]);
    plain_git(root, &["commit", "-q", "-m", "one"]);
    let one = plain_git(root, &["rev-parse", "HEAD"]).trim().to_owned();
    fs::write(root.join("solution.rs"), "v2\n").unwrap();
    plain_git(root, &["commit", "-q", "-am", "two"]);
    let two = plain_git(root, &["rev-parse", "HEAD"]).trim().to_owned();
    // refs/replace makes plain git show commit two as commit one.
    plain_git(root, &["replace", &two, &one]);
    assert_eq!(plain_git(root, &["show", "HEAD:solution.rs"]), "v1\n");
    assert_eq!(
        hardened(root, &["show", "HEAD:solution.rs"]).unwrap(),
        "v2\n"
    );
    let layout = StateLayout::open(root).unwrap();
    layout.init().unwrap();
    let run = RunId::new("r1").unwrap();
    let wt =
        CandidateWorktree::create(&layout, &run, &CandidateId::new("a").unwrap(), &two).unwrap();
    assert_eq!(
        fs::read_to_string(wt.path().join("solution.rs")).unwrap(),
        "v2\n"
    );
    wt.remove().unwrap();
}

#[test]
fn a_directory_inside_the_run_state_is_not_a_project() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    plain_git(root, &["init", "-q"]);
    fs::write(root.join("a"), "a\n").unwrap();
    plain_git(root, &["add", "-A"]);
    plain_git(root, &["commit", "-q", "-m", "one"]);
    let layout = StateLayout::open(root).unwrap();
    layout.init().unwrap();
    let run = RunId::new("r1").unwrap();
    let wt =
        CandidateWorktree::create(&layout, &run, &CandidateId::new("a").unwrap(), "HEAD").unwrap();
    for inside in [
        wt.path().to_path_buf(),
        layout.runs_dir(),
        layout.local_dir(),
        layout.run_dir(&run),
    ] {
        fs::create_dir_all(&inside).unwrap();
        let err = StateLayout::open(&inside).unwrap_err();
        assert!(
            matches!(&err, RuntimeError::State(StateError::ProjectInsideRunState { project, .. }) if project == layout.project()),
            "{}: {err}",
            inside.display()
        );
    }
    // A project of its own nested deeper in a candidate (vibesys developed
    // in a candidate runs its tests there) is a project.
    let nested = wt.path().join("target/tmp/proj");
    fs::create_dir_all(&nested).unwrap();
    plain_git(&nested, &["init", "-q"]);
    let opened = StateLayout::open(&nested).unwrap();
    assert_eq!(opened.project(), fs::canonicalize(&nested).unwrap());
    wt.remove().unwrap();
}
