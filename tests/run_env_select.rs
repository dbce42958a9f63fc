//! Run-environment selection: `--run-environment`, `--modal`, the retired
//! `--docker` and `local`, and environments this build cannot run in.

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn vibesys(args: &[&str]) -> Output {
    Command::new(common::vibesys_bin())
        .args(args)
        .env_remove("VIBESYS_LOG")
        .env_remove("VIBESYS_AGENT_SANDBOX")
        // No modal or skypilot client here (tests/remote_envs.rs covers
        // the installed and configured cases).
        .env("VIBESYS_TOOLS", "/nonexistent/vibesys-tools")
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn refused(out: &Output, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.starts_with("vibesys: error: ") && err.contains(needle),
        "{err}"
    );
}

/// A committed project whose build would leave a marker if it ran.
fn project(marker: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::write(
        p.join("vibesys.toml"),
        format!(
            "[build]\nargv = [\"sh\", \"-c\", \"touch {} && echo x > out\"]\noutputs = [\"out\"]\n",
            marker.display()
        ),
    )
    .unwrap();
    for args in [
        &["init", "-q"][..],
        &["add", "."][..],
        &[
            "-c",
            "user.email=t@e",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "c",
        ][..],
    ] {
        let ok = Command::new("git")
            .arg("-C")
            .arg(p)
            .args(args)
            .status()
            .expect("this test needs git: apt-get install git");
        assert!(ok.success());
    }
    let out = vibesys(&["state", "init", "--project", p.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    dir
}

#[test]
fn the_docker_flag_is_rejected_naming_the_replacement() {
    refused(
        &vibesys(&["run-env", "show", "--docker"]),
        "--docker is no longer accepted; use --run-environment docker",
    );
    refused(
        &vibesys(&["build", "--docker", "--run", "r1", "--commit", "HEAD"]),
        "use --run-environment docker",
    );
}

#[test]
fn the_local_environment_is_rejected_naming_the_replacement() {
    for args in [
        &["run-env", "show", "--run-environment", "local"][..],
        &[
            "build",
            "--run-environment",
            "local",
            "--run",
            "r1",
            "--commit",
            "HEAD",
        ][..],
    ] {
        refused(
            &vibesys(args),
            "--run-environment local is no longer accepted; use --run-environment host",
        );
    }
}

#[test]
fn an_unknown_environment_is_rejected() {
    refused(
        &vibesys(&["run-env", "show", "--run-environment", "kubernetes"]),
        "unknown run environment \"kubernetes\"; expected docker, host, slurm, modal or skypilot",
    );
}

#[test]
fn show_lists_every_environment_with_its_runner_and_confinement() {
    let out = vibesys(&["run-env", "show", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["default"], "docker");
    let envs = json["environments"].as_array().unwrap();
    let names: Vec<&str> = envs.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["docker", "host", "slurm", "modal", "skypilot"]);
    for e in envs {
        assert!(!e["runner"].as_str().unwrap().is_empty());
        assert!(!e["confinement"].as_str().unwrap().is_empty());
    }
    let host = &envs[1];
    assert_eq!(host["availability"]["status"], "available");
    assert!(
        host["runner"]
            .as_str()
            .unwrap()
            .contains("LocalShellRunner")
    );
    assert!(
        host["confinement"]
            .as_str()
            .unwrap()
            .contains("HostSandbox")
    );
    assert!(
        envs[0]["confinement"]
            .as_str()
            .unwrap()
            .contains("DockerSandbox")
    );
    // slurm follows sinfo (tests/slurm_broker.rs checks it against a
    // real cluster); modal and skypilot follow their clients, which this
    // test's tool directory does not hold (tests/remote_envs.rs checks
    // both ways).
    for e in &envs[3..] {
        assert_eq!(e["availability"]["status"], "not-available", "{e}");
    }
}

#[test]
fn modal_is_a_shorthand_and_says_what_is_missing() {
    let out = vibesys(&["run-env", "show", "--modal", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["environments"][0]["name"], "modal");
    let out = vibesys(&["run-env", "show", "--modal"]);
    let text = String::from_utf8_lossy(&out.stdout);
    // No client in this test's tool directory: the status names what is
    // missing and the script that installs it.
    assert!(
        text.contains("not available here") && text.contains("scripts/remote-clients.sh"),
        "{text}"
    );
    // Both at once is a usage error.
    let out = vibesys(&["run-env", "show", "--modal", "--run-environment", "host"]);
    assert_eq!(out.status.code(), Some(125));
}

#[test]
fn environments_this_build_cannot_run_in_refuse_and_nothing_runs() {
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("ran");
    let dir = project(&marker);
    let p = dir.path().to_str().unwrap();
    for (env, needle) in [
        // slurm: "not available" without a cluster; with one, the build
        // needs the pinned editor image this project lacks. Refused
        // either way (tests/slurm_session.rs runs it for real).
        (&["--run-environment", "slurm"][..], ""),
        (
            &["--modal"][..],
            "the modal run environment is not available here",
        ),
        (
            &["--run-environment", "skypilot"][..],
            "the skypilot run environment is not available here",
        ),
    ] {
        let args = [
            &["build", "--project", p, "--run", "r1", "--commit", "HEAD"][..],
            env,
        ]
        .concat();
        refused(&vibesys(&args), needle);
        assert!(!marker.exists(), "{env:?}: the build ran");
    }
    // open_run_environment prepared the hidden directories and the run's
    // record directory before refusing.
    assert!(dir.path().join(".vibesys/state/runs/r1").is_dir());
    assert!(dir.path().join(".vibesys/state/local").is_dir());
}

#[test]
fn a_build_without_run_state_names_state_init() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::HOST_BUILD_ARGS.to_vec();
    args.extend(["--project", dir.path().to_str().unwrap()]);
    let out = vibesys(&args);
    refused(&out, "vibesys state init");
}
