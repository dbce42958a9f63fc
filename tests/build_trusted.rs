//! `vibesys build`: the trusted candidate build with real git and real
//! bubblewrap. Outputs are verified by path, type and sha256; the build
//! cannot see the run record; without confinement nothing runs.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::{git, require_tool as require};
use vs_runtime::{BuildError, RunId, RuntimeError, StateLayout, TrustedBuild};

/// sha256 of "hello\n".
const HELLO_SHA256: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

fn toml_string(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A git project whose `[build]` runs `script` with `sh -c` and declares
/// `outputs`; committed, with run state initialized.
fn project(script: &str, outputs: &[&str], extra: &str) -> tempfile::TempDir {
    require("git", "apt-get install git");
    require("bwrap", "apt-get install bubblewrap");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let outs: Vec<String> = outputs.iter().map(|o| toml_string(o)).collect();
    fs::write(
        p.join("vibesys.toml"),
        format!(
            "[build]\nargv = [\"sh\", \"-c\", {}]\noutputs = [{}]\n{extra}",
            toml_string(script),
            outs.join(", ")
        ),
    )
    .unwrap();
    fs::write(p.join("main.c"), "int main(void) { return 0; }\n").unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "."]);
    git(p, &["commit", "-q", "-m", "candidate"]);
    let out = vibesys(p, &["state", "init"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    dir
}

fn vibesys(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(common::vibesys_bin());
    cmd.args(args)
        .arg("--project")
        .arg(dir)
        .env_remove("VIBESYS_LOG")
        .env_remove("VIBESYS_AGENT_SANDBOX");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn build(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = common::HOST_BUILD_ARGS.to_vec();
    args.extend(["--confine", "bwrap"]);
    args.extend(extra);
    vibesys(dir, &args, env)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn head(dir: &Path) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "HEAD"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn record_path(dir: &Path) -> std::path::PathBuf {
    dir.join(".vibesys/state/runs/r1/builds")
        .join(format!("{}.json", head(dir)))
}

/// Only the main worktree remains: every build checkout was removed.
fn assert_checkouts_removed(dir: &Path) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["worktree", "list", "--porcelain"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        text.lines().filter(|l| l.starts_with("worktree ")).count(),
        1,
        "{text}"
    );
}

#[test]
fn a_build_that_writes_its_output_is_verified_and_recorded() {
    let dir = project(
        "mkdir -p target/bin && echo hello > target/bin/app && chmod +x target/bin/app",
        &["target/bin/app"],
        "timeout_secs = 120\n",
    );
    let p = dir.path();
    let out = build(p, &["--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["status"], "verified");
    assert_eq!(json["run_environment"], "host");
    let record = &json["record"];
    assert_eq!(record["commit"], head(p));
    assert_eq!(record["confinement"], "bwrap");
    let output = &record["outputs"][0];
    assert_eq!(output["path"], "target/bin/app");
    assert_eq!(output["sha256"], HELLO_SHA256);
    assert_eq!(output["size"], 6);
    assert_eq!(output["executable"], true);

    // The record on disk says the same; the artifact holds exactly those
    // bytes, read-only, outside every workspace.
    let on_disk: serde_json::Value =
        serde_json::from_slice(&fs::read(record_path(p)).unwrap()).unwrap();
    assert_eq!(&on_disk, record);
    let artifact = p
        .join(".vibesys/state/runs/r1/artifacts")
        .join(HELLO_SHA256);
    assert_eq!(fs::read(&artifact).unwrap(), b"hello\n");
    assert_eq!(
        fs::metadata(&artifact).unwrap().permissions().mode() & 0o777,
        0o555
    );
    assert_checkouts_removed(p);

    // The library hands out the verified artifact.
    let layout = StateLayout::open(p).unwrap();
    let run = RunId::new("r1").unwrap();
    let trusted = TrustedBuild::load(&layout, &run, &head(p)).unwrap();
    let path = trusted.load_output("target/bin/app").unwrap();
    assert_eq!(fs::read(path).unwrap(), b"hello\n");
}

#[test]
fn an_output_changed_after_verification_is_detected_by_load_output() {
    let dir = project(
        "mkdir -p target/bin && echo hello > target/bin/app",
        &["target/bin/app"],
        "",
    );
    let p = dir.path();
    let out = build(p, &[], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let layout = StateLayout::open(p).unwrap();
    let run = RunId::new("r1").unwrap();
    let trusted = TrustedBuild::load(&layout, &run, &head(p)).unwrap();
    assert!(trusted.load_output("target/bin/app").is_ok());

    let artifact = p
        .join(".vibesys/state/runs/r1/artifacts")
        .join(HELLO_SHA256);
    // Not executable: read-only for everyone.
    assert_eq!(
        fs::metadata(&artifact).unwrap().permissions().mode() & 0o777,
        0o444
    );
    fs::set_permissions(&artifact, fs::Permissions::from_mode(0o644)).unwrap();
    fs::write(&artifact, b"evil!\n").unwrap();
    let err = trusted.load_output("target/bin/app").unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Build(BuildError::ArtifactChanged { expected, .. }) if expected == HELLO_SHA256),
        "{err}"
    );
    assert!(
        err.to_string().contains("changed after verification"),
        "{err}"
    );

    // Swapped for a symlink to a file with the right bytes elsewhere:
    // still refused (the artifact must be the regular file itself).
    let elsewhere = p.join("copy");
    fs::write(&elsewhere, b"hello\n").unwrap();
    fs::remove_file(&artifact).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &artifact).unwrap();
    let err = trusted.load_output("target/bin/app").unwrap_err();
    assert!(err.to_string().contains("symlink"), "{err}");

    // Removed: refused too.
    fs::remove_file(&artifact).unwrap();
    assert!(trusted.load_output("target/bin/app").is_err());
    // An undeclared name is refused.
    let err = trusted.load_output("target/bin/other").unwrap_err();
    assert!(
        matches!(err, RuntimeError::Build(BuildError::UnknownOutput { .. })),
        "{err}"
    );
}

fn assert_rejected(script: &str, output: &str, needle: &str) {
    let dir = project(script, &[output], "");
    let p = dir.path();
    let out = build(p, &[], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{script}: {err}");
    assert!(
        err.contains(&format!("declared output {output} rejected")) && err.contains(needle),
        "{script}: {err}"
    );
    assert!(!record_path(p).exists(), "a rejected build left a record");
    assert_checkouts_removed(p);
}

#[test]
fn a_declared_output_replaced_by_a_symlink_is_rejected() {
    assert_rejected(
        "mkdir -p target/bin && ln -s /etc/passwd target/bin/app",
        "target/bin/app",
        "symlink",
    );
}

#[test]
fn a_symlinked_directory_on_the_output_path_is_rejected() {
    assert_rejected(
        "mkdir -p real/bin && echo hello > real/bin/app && ln -s real target",
        "target/bin/app",
        "target is a symlink",
    );
}

#[test]
fn a_declared_output_replaced_by_a_fifo_is_rejected() {
    assert_rejected(
        "mkdir -p target/bin && mkfifo target/bin/app",
        "target/bin/app",
        "fifo",
    );
}

#[test]
fn a_declared_output_replaced_by_a_directory_is_rejected() {
    assert_rejected("mkdir -p target/bin/app", "target/bin/app", "directory");
}

#[test]
fn a_missing_output_is_rejected() {
    assert_rejected("true", "target/bin/app", "does not exist");
}

#[test]
fn the_build_cannot_read_the_run_record() {
    // The project's record holds a secret, and the candidate commit even
    // carries a file below the hidden runs/ path.
    let script = "\
        { cat .vibesys/state/runs/leak/secret.txt; ls -A .vibesys/state/runs; \
          cat \"$PROJECT_RUNS/r0/secret.txt\"; ls -A \"$PROJECT_RUNS\"; \
          touch .vibesys/state/runs/written && echo WROTE; echo end; } > seen.txt 2>&1";
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let runs = p.join(".vibesys/state/runs");
    {
        // Build the project by hand: the script names the project's path.
        let script = script.replace("$PROJECT_RUNS", runs.to_str().unwrap());
        fs::create_dir_all(p.join(".vibesys/state/runs/leak")).unwrap();
        fs::write(
            p.join(".vibesys/state/runs/leak/secret.txt"),
            "SECRET-IN-GIT\n",
        )
        .unwrap();
        fs::write(
            p.join("vibesys.toml"),
            format!(
                "[build]\nargv = [\"sh\", \"-c\", {}]\noutputs = [\"seen.txt\"]\n",
                toml_string(&script)
            ),
        )
        .unwrap();
        require("git", "apt-get install git");
        require("bwrap", "apt-get install bubblewrap");
        git(p, &["init", "-q"]);
        git(p, &["add", "-f", "."]);
        git(p, &["commit", "-q", "-m", "candidate"]);
        let out = vibesys(p, &["state", "init"], &[]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        fs::create_dir_all(runs.join("r0")).unwrap();
        fs::write(runs.join("r0/secret.txt"), "SECRET-IN-RECORD\n").unwrap();
    }
    let out = build(p, &["--json"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sha = json["record"]["outputs"][0]["sha256"].as_str().unwrap();
    let seen = fs::read_to_string(runs.join("r1/artifacts").join(sha)).unwrap();
    assert!(
        !seen.contains("SECRET"),
        "the build read the record: {seen}"
    );
    assert!(
        !seen.contains("WROTE"),
        "the build wrote the record: {seen}"
    );
    assert!(seen.contains("end"), "{seen}");
    assert!(seen.contains("Read-only file system"), "{seen}");
    // The record itself is untouched.
    assert!(!runs.join("written").exists());
}

#[test]
fn with_confinement_off_the_build_refuses_and_nothing_runs() {
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("ran");
    let script = format!("touch {}", marker.display());
    let dir = project(&script, &["x"], "");
    let p = dir.path();
    for extra in [&[][..], &["--no-require-enforcement"][..]] {
        let out = vibesys(
            p,
            &[&common::HOST_BUILD_ARGS[..], extra].concat(),
            &[("VIBESYS_AGENT_SANDBOX", "off")],
        );
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(
            err.starts_with("vibesys: error: ") && err.contains("never runs unconfined"),
            "{err}"
        );
        assert!(!marker.exists(), "the build command ran unconfined");
        assert!(!record_path(p).exists());
        assert!(!p.join(".vibesys/state/local/candidates").exists());
    }
    assert_checkouts_removed(p);
}

#[test]
fn a_failing_build_command_records_nothing() {
    let dir = project(
        "echo hello > out; echo BUILD-LOG-MARKER >&2; exit 3",
        &["out"],
        "",
    );
    let p = dir.path();
    let out = build(p, &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    // The failure names the status and carries the tail of the build's log.
    let err = stderr(&out);
    assert!(
        err.contains("exited with status 3") && err.contains("BUILD-LOG-MARKER"),
        "{err}"
    );
    assert!(!record_path(p).exists());
    assert_checkouts_removed(p);
}

#[test]
fn a_build_past_its_timeout_is_killed() {
    let dir = project("sleep 60; echo late > out", &["out"], "timeout_secs = 1\n");
    let p = dir.path();
    let started = std::time::Instant::now();
    let out = build(p, &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    common::assert_stderr_has(&out, "longer than 1 s");
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    assert!(!record_path(p).exists());
}

#[test]
fn unknown_build_keys_are_rejected_naming_them() {
    let dir = project("true", &["out"], "");
    let p = dir.path();
    fs::write(
        p.join("vibesys.toml"),
        "[build]\nargv = [\"true\"]\noutputs = [\"out\"]\ntimeout = 5\n",
    )
    .unwrap();
    let out = build(p, &[], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("timeout") && err.contains("unknown field"),
        "{err}"
    );
}

#[test]
fn a_commit_that_plants_a_symlink_over_the_state_directory_is_refused() {
    let dir = project("echo hello > out", &["out"], "");
    let p = dir.path();
    // The candidate commits .vibesys as a symlink to a host directory, so
    // the checkout's hidden paths would resolve outside it.
    let outside = tempfile::tempdir().unwrap();
    let cand = tempfile::tempdir().unwrap();
    let c = cand.path();
    git(c, &["init", "-q"]);
    fs::copy(p.join("vibesys.toml"), c.join("vibesys.toml")).unwrap();
    std::os::unix::fs::symlink(outside.path(), c.join(".vibesys")).unwrap();
    git(c, &["add", "."]);
    git(c, &["commit", "-q", "-m", "hostile"]);
    git(p, &["fetch", "-q", c.to_str().unwrap(), "HEAD"]);
    let out = vibesys(
        p,
        &[
            "build",
            "--run",
            "r1",
            "--commit",
            "FETCH_HEAD",
            "--run-environment",
            "host",
        ],
        &[],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("symlink"), "{err}");
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
    assert_checkouts_removed(p);
}
