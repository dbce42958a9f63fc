//! `vibesys run` in the default docker run environment, end to end on the
//! real Engine with an image vs-image built: two candidates (one honest,
//! one cheating) each in its own container; check and measure run in the
//! candidate's evaluation container through `DockerSandbox::execute`
//! (they see the container's hostname); `kill -9` leaves no container and
//! `run resume` finishes in docker; a provider missing from the image is
//! named; Ctrl-C stops every container and the run resumes.
//!
//! `execute` goes through the in-container command server when
//! `VIBESYS_STATIC_BIN` names a static vibesys (CI), else through the
//! Engine's exec API (a dynamically linked test binary cannot serve).

mod docker_support;
mod run_support;

use std::path::Path;
use std::process::Command;

use docker_support::{TestImage, containers_of_run};
use run_support::*;

fn docker_run(p: &Path, img: &TestImage) -> Command {
    let mut c = vibesys_in(p);
    c.args(["run", "start"]);
    for (k, v) in env_of(img) {
        c.env(k, v);
    }
    c
}

fn env_of(img: &TestImage) -> Vec<(String, String)> {
    let mut env = vec![
        (
            "VIBESYS_IMAGES_LOCK".to_owned(),
            img.lock.display().to_string(),
        ),
        ("VIBESYS_DOCKER_IMAGE".to_owned(), img.name.clone()),
    ];
    if let Some(bin) = std::env::var_os("VIBESYS_STATIC_BIN") {
        env.push((
            "VIBESYS_COMMAND_SERVER".to_owned(),
            bin.to_string_lossy().into_owned(),
        ));
    }
    env
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn two_candidates_in_docker_evaluated_in_their_containers() {
    let img = TestImage::new();
    let (_d, p) = project(TASK);
    let table = ok(docker_run(&p, &img)
        .args(["--provider", "custom", "--candidates", "2", "--jobs", "2"])
        .args(["--", "sh", "-c", AGENT])
        .output()
        .unwrap());
    assert!(table.contains("environment docker"), "{table}");
    let run = only_run(&p);
    let env: Vec<(String, String)> = env_of(&img);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let status = status_json(&p, &run, &env);
    assert_eq!(status["run"]["environment"], "docker");
    assert_eq!(status["run"]["image"]["name"], img.name.as_str());
    assert_eq!(
        status["run"]["image"]["config_digest"],
        img.config_digest.as_str()
    );
    assert_honest_and_cheater(&p, &status);
    // measure ran in the candidate's container, through execute: it saw
    // that container's hostname (its ID's first 12 digits), not the host's.
    let honest = candidate(&status, 1);
    let place: Vec<&str> = honest["evaluated_in"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .collect();
    assert_eq!(place[0], "container", "{honest:#}");
    let container = place[1].to_owned();
    let via = if std::env::var_os("VIBESYS_STATIC_BIN").is_some() {
        "command-server"
    } else {
        "engine-exec"
    };
    assert_eq!(place[3], via, "{honest:#}");
    let seen = honest["metrics"]["host"].as_str().unwrap();
    assert_eq!(seen, &container[..12], "{honest:#}");
    assert_ne!(seen, hostname());
    // Every container of the run is gone.
    for suffix in ["1", "2", "1-eval", "2-eval"] {
        assert!(containers_of_run(&format!("{run}-{suffix}")).is_empty());
    }
}

#[test]
fn kill_9_leaves_no_container_and_resume_finishes_in_docker() {
    let img = TestImage::new();
    let (_d, p) = project(TASK);
    let (mut child, run) = start_in_turn(docker_run(&p, &img), &p, SLOW_AGENT, 30);
    assert!(!containers_of_run(&format!("{run}-1")).is_empty());
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    wait_for(20, "the Engine to remove the dead run's containers", || {
        ["1", "2", "1-eval", "2-eval"]
            .iter()
            .all(|suffix| containers_of_run(&format!("{run}-{suffix}")).is_empty())
    });
    let mut resume = vibesys_in(&p);
    resume.args(["run", "resume", &run]);
    for (k, v) in env_of(&img) {
        // The image comes from the record, the lock from the environment.
        if k != "VIBESYS_DOCKER_IMAGE" {
            resume.env(k, v);
        }
    }
    let out = resume.output().unwrap();
    let table = ok(out);
    assert!(table.contains("environment docker"), "{table}");
    let status: serde_json::Value = serde_json::from_str(&ok(vibesys_in(&p)
        .args(["run", "status", &run, "--json"])
        .output()
        .unwrap()))
    .unwrap();
    assert_eq!(status["run"]["state"], "finished");
    for n in [1, 2] {
        assert_eq!(candidate(&status, n)["state"], "passed");
        assert_eq!(candidate(&status, n)["attempts"], 2);
    }
}

#[test]
fn a_provider_missing_from_the_image_is_named() {
    let img = TestImage::new();
    let (_d, p) = project(TASK);
    ok(docker_run(&p, &img)
        .args(["--provider", "custom", "--", "no-such-agent-xyz"])
        .output()
        .unwrap());
    let run = only_run(&p);
    let status = status_json(&p, &run, &[]);
    let c = candidate(&status, 1);
    let err = c["error"].as_str().unwrap();
    assert!(
        err.contains("\"no-such-agent-xyz\" is not on PATH in the image")
            && err.contains(&img.name),
        "{err}"
    );
    assert!(containers_of_run(&format!("{run}-1")).is_empty());
}

#[test]
fn ctrl_c_stops_every_container_and_the_run_resumes_in_docker() {
    let img = TestImage::new();
    let (_d, p) = project(TASK);
    let (child, run) = start_in_turn(docker_run(&p, &img), &p, SLOW_AGENT, 30);
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    // Every container is gone when vibesys returns.
    for suffix in ["1", "2", "1-eval", "2-eval"] {
        assert!(containers_of_run(&format!("{run}-{suffix}")).is_empty());
    }
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["state"], "interrupted");
    let mut resume = vibesys_in(&p);
    resume.args(["run", "resume", &run]);
    for (k, v) in env_of(&img) {
        resume.env(k, v);
    }
    ok(resume.output().unwrap());
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["state"], "finished");
    assert_eq!(candidate(&status, 1)["state"], "passed");
}

/// `[vibesys] accelerator_backend = "metal"` on Linux: no flag and no
/// request moves the run to the host (Metal exists only on a macOS host):
/// the run environment is docker, a log line says why, the backend is
/// recorded, and each agent container start fails naming why; nothing is
/// left running. (On macOS the same setting selects the host under
/// Seatbelt: the decision table's unit test,
/// `vs_runtime::run::accelerator::tests::the_environment_choice_as_a_table`.)
#[test]
fn metal_selects_docker_on_linux_and_fails_at_container_start() {
    let img = TestImage::new();
    let (_d, p) = project(&format!(
        "{TASK}\n[vibesys]\naccelerator_backend = \"metal\"\n"
    ));
    let out = docker_run(&p, &img)
        .args(["--run-environment", "host"])
        .args(["--provider", "custom", "--candidates", "1"])
        .args(["--", "sh", "-c", "echo AGENT-RAN"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains(
            "vibesys: the accelerator backend metal exists only on a macOS host, and this is linux: the run environment is docker (not host, as requested)"
        ),
        "{stderr}"
    );
    let run = only_run(&p);
    let env: Vec<(String, String)> = env_of(&img);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let status = status_json(&p, &run, &env);
    assert_eq!(status["run"]["environment"], "docker", "{status:#}");
    assert_eq!(
        status["run"]["accelerators"]["backend"], "metal",
        "{status:#}"
    );
    let c = candidate(&status, 1);
    assert_eq!(c["state"], "failed", "{c:#}");
    let error = c["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("cannot start the agent's container")
            && error.contains("metal")
            && error.contains("exists only on the macOS host"),
        "{c:#}"
    );
    // The agent's log outlives its worktree (removed when the candidate
    // ends, so a file the agent wrote there proves nothing).
    let log =
        std::fs::read_to_string(p.join(format!(".vibesys/state/runs/{run}/logs/1-agent.log")))
            .unwrap_or_default();
    assert!(!log.contains("AGENT-RAN"), "the agent ran: {log}");
    assert!(containers_of_run(&format!("{run}-1")).is_empty());

    // A bad value is refused before anything is recorded.
    let (_d2, p2) = project(&format!(
        "{TASK}\n[vibesys]\naccelerator_backend = \"Metal\"\n"
    ));
    let err = fails(
        docker_run(&p2, &img)
            .args(["--provider", "custom", "--", "true"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("vibesys.accelerator_backend must be \"portable\" or \"metal\""),
        "{err}"
    );
    let recorded = std::fs::read_dir(p2.join(".vibesys/state/runs"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(recorded, 0, "a run was recorded");
}

/// In docker, check and measure run in a fresh container on a fresh
/// checkout of the commit: measure reads what the trusted build made (not
/// the stale file the agent committed), HOME is fresh and empty and not
/// the checkout, the run state is hidden and the evaluator read-only.
#[test]
fn docker_evaluation_loads_the_build_in_a_fresh_checkout() {
    let img = TestImage::new();
    let task = built_value_task(
        r#"set -e
[ -z "$(ls -A "$HOME")" ] || exit 2
case "$HOME" in "$PWD"*) exit 3 ;; esac
if ls .vibesys/state/runs | grep -q .; then exit 4; fi
if (echo x >> evaluator/check.sh) 2>/dev/null; then exit 5; fi
test -f out/v.txt
"#,
    );
    let (_d, p) = project(&task);
    let agent = BUILT_VALUE_AGENT;
    ok(docker_run(&p, &img)
        .args(["--provider", "custom", "--"])
        .args(["sh", "-c", agent])
        .output()
        .unwrap());
    let run = only_run(&p);
    let env: Vec<(String, String)> = env_of(&img);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let status = status_json(&p, &run, &env);
    let c = candidate(&status, 1);
    assert_eq!(c["state"], "passed", "{c:#}");
    assert_eq!(c["metrics"]["value"], 17, "{c:#}");
    for suffix in ["1", "1-eval", "1-build"] {
        assert!(containers_of_run(&format!("{run}-{suffix}")).is_empty());
    }
}
