//! What `vibesys build` and `vibesys gate` trust, with the real git and the
//! real bwrap, as root and as an unprivileged user: commands planted in the
//! repository's git configuration, hooks or committed attributes never
//! run; the task comes from the operator's `vibesys.toml`, never from the
//! candidate's commit; a build that touches an evaluator-owned (protected)
//! path fails naming it; a candidate worktree is never taken for the
//! project.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A project below the target directory (so the unprivileged user can
/// reach it) and a world-writable marker directory beside it.
struct Setup {
    _base: tempfile::TempDir,
    root: PathBuf,
    markers: PathBuf,
}

impl Setup {
    fn new() -> Self {
        require_tool("git", "apt-get install git");
        require_tool("bwrap", "apt-get install bubblewrap");
        let base_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("trust");
        fs::create_dir_all(&base_dir).unwrap();
        let base = tempfile::Builder::new()
            .prefix("proj")
            .tempdir_in(&base_dir)
            .unwrap();
        let root = base.path().join("project");
        let markers = base.path().join("markers");
        fs::create_dir_all(&root).unwrap();
        fs::create_dir_all(&markers).unwrap();
        for (p, mode) in [
            (base_dir.as_path(), 0o755),
            (base.path(), 0o755),
            (markers.as_path(), 0o777),
        ] {
            fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
        }
        Self {
            _base: base,
            root,
            markers,
        }
    }

    /// A shell command touching marker `name`; git's own arguments go to `:`.
    fn cmd(&self, name: &str) -> String {
        format!("touch {}/{name}; :", self.markers.display())
    }

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

    fn write_config(&self, script: &str, extra: &str) {
        fs::write(
            self.root.join("vibesys.toml"),
            format!(
                "[build]\nargv = [\"sh\", \"-c\", {}]\noutputs = [\"out/app\"]\ntimeout_secs = 120\n{extra}",
                toml_string(script)
            ),
        )
        .unwrap();
    }

    /// `git init`, then commits everything as "task".
    fn init_commit(&self) {
        git(&self.root, &["init", "-q"]);
        git(&self.root, &["add", "-A"]);
        git(&self.root, &["commit", "-q", "-m", "task"]);
    }

    /// [`Self::init_commit`], then `vibesys state init` as root.
    fn init_commit_and_state(&self) {
        self.init_commit();
        assert_code(&self.vibesys(As::Root, &["state", "init"], &[]), 0);
    }

    /// Hands the project to `who` (after set-up as root).
    fn give_to(&self, who: As) {
        if who == As::User {
            let (uid, gid) = test_user();
            let status = Command::new("chown")
                .args(["-R", "-h", &format!("{uid}:{gid}")])
                .arg(&self.root)
                .status()
                .unwrap();
            assert!(status.success());
        }
    }

    fn vibesys(&self, who: As, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = command_as(who, &self.root, &vibesys(), args);
        cmd.arg("--project").arg(&self.root);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    fn build(&self, who: As, commit: &str, env: &[(&str, &str)]) -> Output {
        self.vibesys(
            who,
            &[
                "build",
                "--run",
                "r1",
                "--commit",
                commit,
                "--run-environment",
                "host",
                "--confine",
                "bwrap",
                "--json",
            ],
            env,
        )
    }
}

fn rev(dir: &Path, rev: &str) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", rev])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn artifact(root: &Path, out: &Output) -> Vec<u8> {
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sha = json["record"]["outputs"][0]["sha256"].as_str().unwrap();
    fs::read(root.join(".vibesys/state/runs/r1/artifacts").join(sha)).unwrap()
}

/// Plants commands everywhere the agent could have written them while
/// `.git` was writable: `.git/config` (filter driver named by the
/// committed `.gitattributes`, fsmonitor, ssh, pager, editor, textconv,
/// gpg), `.git/config.worktree`, hooks, and a linked worktree's gitdir.
fn plant(s: &Setup) {
    let root = &s.root;
    let set = |key: &str, value: &str| git(root, &["config", key, value]);
    set("filter.evil.smudge", &format!("{} ; cat", s.cmd("smudge")));
    set("filter.evil.clean", &format!("{} ; cat", s.cmd("clean")));
    set("filter.evil.required", "true");
    set(
        "diff.evil.textconv",
        &format!("{} ; cat", s.cmd("textconv")),
    );
    set("core.fsmonitor", &s.cmd("fsmonitor"));
    set("core.sshCommand", &s.cmd("ssh"));
    set("core.pager", &s.cmd("pager"));
    set("core.editor", &s.cmd("editor"));
    set("gpg.program", &s.cmd("gpg"));
    set("log.showSignature", "true");
    set("extensions.worktreeConfig", "true");
    git(
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
        fs::write(&h, format!("#!/bin/sh\n{}\n", s.cmd(hook))).unwrap();
        fs::set_permissions(&h, fs::Permissions::from_mode(0o755)).unwrap();
    }
    // A linked worktree (as an agent's candidate is) whose own gitdir
    // config names commands too.
    let linked = root.join("linked");
    git(
        root,
        &["worktree", "add", "-q", "--detach", "linked", "HEAD"],
    );
    let gitdir = root.join(".git/worktrees/linked");
    assert!(gitdir.is_dir());
    fs::write(
        gitdir.join("config.worktree"),
        format!(
            "[core]\n\tfsmonitor = {}\n\thooksPath = {}\n",
            s.cmd("linked-fsmonitor"),
            hooks.display()
        ),
    )
    .unwrap();
    assert!(linked.join("solution.rs").is_file());
}

#[test]
fn planted_git_commands_never_run_during_build_or_gate() {
    for who in users() {
        let s = Setup::new();
        let root = &s.root;
        s.write_config(
            "mkdir -p out && cat solution.rs > out/app",
            "[gate]\nprotect = [\"eval\"]\n",
        );
        fs::create_dir_all(root.join("eval")).unwrap();
        fs::write(root.join("eval/score.sh"), "echo 1\n").unwrap();
        fs::write(root.join("solution.rs"), "v1\n").unwrap();
        fs::write(root.join(".gitattributes"), "* filter=evil diff=evil\n").unwrap();
        s.init_commit();
        plant(&s);
        // Control: plain git runs the plants.
        git(root, &["status", "--porcelain"]);
        assert!(
            s.markers().contains(&"fsmonitor".to_owned()),
            "control: the planted fsmonitor did not run: {:?}",
            s.markers()
        );
        s.clear();
        s.give_to(who);

        // The caller's environment carries git overrides too.
        let env_fsmonitor = s.cmd("env-fsmonitor");
        let env_diff = s.cmd("env-external-diff");
        let hostile_env = [
            ("GIT_CONFIG_COUNT", "1"),
            ("GIT_CONFIG_KEY_0", "core.fsmonitor"),
            ("GIT_CONFIG_VALUE_0", env_fsmonitor.as_str()),
            ("GIT_CONFIG_PARAMETERS", "'core.pager'='false'"),
            ("GIT_EXTERNAL_DIFF", env_diff.as_str()),
            ("GIT_SSH_COMMAND", "false"),
            ("GIT_DIR", "/nonexistent"),
        ];
        let init = s.vibesys(who, &["state", "init"], &hostile_env);
        assert_code(&init, 0);
        let base = s.vibesys(who, &["gate", "baseline", "--run", "r1"], &hostile_env);
        assert_code(&base, 0);
        let out = s.build(who, "HEAD", &hostile_env);
        assert_code(&out, 0);
        // The committed bytes, never a smudged version.
        assert_eq!(artifact(root, &out), b"v1\n");
        let check = s.vibesys(who, &["gate", "check", "--run", "r1"], &hostile_env);
        assert_code(&check, 0);
        assert_eq!(
            s.markers(),
            Vec::<String>::new(),
            "{who:?}: a planted command ran"
        );
        // git itself still works on the project for its owner.
        let log = command_as(who, root, Path::new("git"), &["log", "--format=%s"])
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .output()
            .unwrap();
        assert_code(&log, 0);
        assert_eq!(stdout(&log), "task\n");
    }
}

#[test]
fn the_candidates_commit_cannot_change_what_the_build_runs() {
    for who in users() {
        let s = Setup::new();
        let root = &s.root;
        s.write_config("mkdir -p out && echo operator > out/app", "");
        fs::write(root.join("solution.rs"), "v1\n").unwrap();
        s.init_commit();
        // The agent's commit rewrites [build] (and adds a [gate] that
        // protects nothing), on its own branch.
        git(root, &["switch", "-q", "-c", "candidate"]);
        s.write_config(
            &format!(
                "{}; mkdir -p out && echo agent > out/app",
                s.cmd("agent-argv")
            ),
            "",
        );
        git(root, &["commit", "-q", "-am", "agent"]);
        let candidate = rev(root, "HEAD");
        git(root, &["switch", "-q", "main"]);
        s.give_to(who);
        assert_code(&s.vibesys(who, &["state", "init"], &[]), 0);
        let out = s.build(who, &candidate, &[]);
        assert_code(&out, 0);
        assert_eq!(artifact(root, &out), b"operator\n");
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["record"]["commit"], candidate);
        assert_eq!(s.markers(), Vec::<String>::new(), "the agent's argv ran");
    }
}

#[test]
fn a_build_that_touches_a_protected_path_fails_naming_it() {
    for who in users() {
        for (script, needle) in [
            ("echo x >> eval/score.sh", "changed eval/score.sh"),
            ("echo x > eval/new.sh", "added eval/new.sh"),
            ("rm eval/data/ref.txt", "removed eval/data/ref.txt"),
            ("ln -sf /etc/passwd eval/score.sh", "changed eval/score.sh"),
        ] {
            let s = Setup::new();
            let root = &s.root;
            s.write_config(
                &format!("mkdir -p out && echo hi > out/app && {script}"),
                "[gate]\nprotect = [\"eval\"]\n",
            );
            fs::create_dir_all(root.join("eval/data")).unwrap();
            fs::write(root.join("eval/score.sh"), "echo 1\n").unwrap();
            fs::write(root.join("eval/data/ref.txt"), "ref\n").unwrap();
            s.init_commit();
            s.give_to(who);
            assert_code(&s.vibesys(who, &["state", "init"], &[]), 0);
            let out = s.build(who, "HEAD", &[]);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{who:?} {script}: {err}");
            // bwrap keeps the protected paths read-only in the build; the
            // comparison before and after catches what a backend that
            // cannot (Landlock) lets through.
            assert!(
                (err.contains("the build changed protected paths") && err.contains(needle))
                    || err.contains("Read-only file system"),
                "{who:?} {script}: {err}"
            );
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(json["status"], "rejected");
            assert!(
                !root.join(".vibesys/state/runs/r1/builds").exists()
                    || fs::read_dir(root.join(".vibesys/state/runs/r1/builds"))
                        .unwrap()
                        .next()
                        .is_none(),
                "a rejected build left a record"
            );
        }
    }
}

#[test]
fn a_protected_path_from_the_baseline_is_checked_too() {
    // --protect given to `gate baseline` (not in vibesys.toml) is part of
    // the protected set of that run's builds.
    let s = Setup::new();
    let root = &s.root;
    s.write_config(
        "mkdir -p out && echo hi > out/app && echo x >> tests/t.sh",
        "",
    );
    fs::create_dir_all(root.join("tests")).unwrap();
    fs::write(root.join("tests/t.sh"), "true\n").unwrap();
    s.init_commit_and_state();
    let out = s.build(As::Root, "HEAD", &[]);
    assert_code(&out, 0);
    assert_code(
        &s.vibesys(
            As::Root,
            &["gate", "baseline", "--run", "r1", "--protect", "tests"],
            &[],
        ),
        0,
    );
    let out = s.build(As::Root, "HEAD", &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("changed tests/t.sh")
            || stderr(&out).contains("tests/t.sh: Read-only file system"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_candidate_worktree_is_never_the_project() {
    let s = Setup::new();
    let root = &s.root;
    s.write_config("mkdir -p out && echo hi > out/app", "");
    s.init_commit_and_state();
    let layout = vs_runtime::StateLayout::open(root).unwrap();
    let wt = vs_runtime::CandidateWorktree::create(
        &layout,
        &vs_runtime::RunId::new("r1").unwrap(),
        &vs_runtime::CandidateId::new("a").unwrap(),
        "HEAD",
    )
    .unwrap();
    for args in [
        &["gate", "check", "--run", "r1"][..],
        &["gate", "baseline", "--run", "r1", "--protect", "."][..],
        &HOST_BUILD_ARGS[..],
    ] {
        let out = command_as(As::Root, wt.path(), &vibesys(), args)
            .arg("--project")
            .arg(wt.path())
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        assert!(
            err.contains("is inside the run state of the project")
                && err.contains(layout.project().to_str().unwrap()),
            "{args:?}: {err}"
        );
    }
    wt.remove().unwrap();
}

#[test]
fn an_include_in_the_repository_config_is_refused_naming_it() {
    let s = Setup::new();
    let root = &s.root;
    s.write_config("mkdir -p out && echo hi > out/app", "");
    s.init_commit_and_state();
    // The included file lives in the worktree, where the agent writes.
    fs::write(
        root.join("inc.cfg"),
        format!("[core]\n\tfsmonitor = {}\n", s.cmd("included")),
    )
    .unwrap();
    git(root, &["config", "include.path", "../inc.cfg"]);
    let out = s.build(As::Root, "HEAD", &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.starts_with("vibesys: error: ")
            && err.contains("include.path")
            && err.contains("file:.git/config")
            && err.contains("git config --unset-all include.path"),
        "{err}"
    );
    assert_eq!(s.markers(), Vec::<String>::new());
    assert!(
        !root.join(".vibesys/state/local/candidates/r1").exists() || {
            fs::read_dir(root.join(".vibesys/state/local/candidates/r1"))
                .unwrap()
                .next()
                .is_none()
        }
    );
}

#[test]
fn a_record_that_git_tracks_is_refused() {
    // A commit (the agent can stage any path through its index, and an
    // operator may merge it) carrying files below runs/ never counts as
    // the record.
    let s = Setup::new();
    let root = &s.root;
    s.write_config(
        "mkdir -p out && echo hi > out/app",
        "[gate]\nprotect = [\"eval\"]\n",
    );
    fs::create_dir_all(root.join("eval")).unwrap();
    fs::write(root.join("eval/score.sh"), "echo 1\n").unwrap();
    s.init_commit_and_state();
    assert_code(
        &s.vibesys(As::Root, &["gate", "baseline", "--run", "r1"], &[]),
        0,
    );
    let out = s.build(As::Root, "HEAD", &[]);
    assert_code(&out, 0);
    let commit = rev(root, "HEAD");
    assert_code(
        &s.vibesys(As::Root, &["gate", "check", "--run", "r1"], &[]),
        0,
    );
    git(
        root,
        &["add", "-f", ".vibesys/state/runs/r1/gate-baseline.json"],
    );
    let out = s.vibesys(As::Root, &["gate", "check", "--run", "r1"], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("git tracks .vibesys/state/runs/r1/gate-baseline.json"),
        "{err}"
    );
    let record = format!(".vibesys/state/runs/r1/builds/{commit}.json");
    git(root, &["add", "-f", &record]);
    let layout = vs_runtime::StateLayout::open(root).unwrap();
    let err =
        vs_runtime::TrustedBuild::load(&layout, &vs_runtime::RunId::new("r1").unwrap(), &commit)
            .unwrap_err();
    assert!(
        matches!(
            err,
            vs_runtime::RuntimeError::State(vs_runtime::StateError::RecordTrackedByGit { .. })
        ),
        "{err}"
    );
}

#[test]
fn a_git_that_ignores_the_overrides_is_refused() {
    // As a git before 2.31 would: GIT_CONFIG_COUNT is dropped on the way.
    let s = Setup::new();
    let root = &s.root;
    s.write_config("mkdir -p out && echo hi > out/app", "");
    s.init_commit();
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let bin = root.parent().unwrap().join("old-git");
    fs::create_dir_all(&bin).unwrap();
    fs::write(
        bin.join("git"),
        format!(
            "#!/bin/sh\nunset GIT_CONFIG_COUNT\nexec {} \"$@\"\n",
            real.trim()
        ),
    )
    .unwrap();
    fs::set_permissions(bin.join("git"), fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    let out = s.vibesys(As::Root, &["state", "init"], &[("PATH", path.as_str())]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("ignores the overrides") && err.contains("git 2.31 or later"),
        "{err}"
    );
}
