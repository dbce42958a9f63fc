//! `vibesys run start --run-environment slurm` against the real
//! single-node Slurm (scripts/slurm-up.sh) and the real Docker Engine: the
//! run starts its broker; each candidate's agent works in the local
//! editor container (the static vibesys as its command server, the
//! broker's agent socket mounted, no devices); its check and measure are
//! Slurm jobs sent over the broker's framework socket with the candidate's
//! worktree as working directory. The honest candidate passes, the
//! cheater fails; no broker, job or container is left.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker_support;
mod run_support;
mod slurm_support;

use std::time::{Duration, Instant};

use docker_support::{TestImage, containers_of_run, static_vibesys};
use run_support::*;
use slurm_support::{brokers_of_run, live_jobs, slurm};

/// The agent also says whether the broker's agent socket reached it.
fn agent() -> String {
    format!("[ -S \"$VIBESYS_BROKER_SOCKET\" ] && echo AGENT-SOCKET-OK\n{AGENT}")
}

#[test]
fn two_candidates_in_slurm_evaluated_as_broker_jobs() {
    slurm();
    let img = TestImage::new();
    let (_d, p) = project(&format!(
        "{TASK}\n[vibesys.broker]\ngpu_devices = \"/run/vibesys-slurm/gpu{{}}\"\n"
    ));
    let out = vibesys_in(&p)
        .env("VIBESYS_LOG", "info")
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .args(["run", "start", "--run-environment", "slurm"])
        .args(["--provider", "custom", "--candidates", "2", "--jobs", "2"])
        .args(["--", "sh", "-c", &agent()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let table = ok(out);
    assert!(table.contains("environment slurm"), "{table}");
    let run = only_run(&p);
    let env = [
        ("VIBESYS_IMAGES_LOCK", img.lock.to_str().unwrap()),
        ("VIBESYS_DOCKER_IMAGE", img.name.as_str()),
    ];
    let status = status_json(&p, &run, &env);
    assert_eq!(status["run"]["environment"], "slurm");
    eprintln!("run start's stderr: {stderr}");
    assert_honest_and_cheater(&p, &status);
    assert_eq!(
        candidate(&status, 1)["evaluated_in"],
        "slurm job via the run's broker"
    );
    // The evaluation went to the broker's framework socket as jobs of
    // this run, in the candidates' worktrees.
    let jobs: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("framework socket") && l.contains(&format!("job vibesys-{run}-")))
        .collect();
    // Candidate 1's check and measure (the cheater stops at the gate).
    assert_eq!(jobs.len(), 2, "check and measure as jobs: {stderr}");
    assert!(
        jobs.iter().all(|l| l.contains("/candidates/")),
        "a job outside a candidate worktree: {jobs:?}"
    );
    let log =
        std::fs::read_to_string(p.join(format!(".vibesys/state/runs/{run}/logs/1-agent.log")))
            .unwrap();
    assert!(log.contains("AGENT-SOCKET-OK"), "{log}");
    // Nothing of the run is left.
    let start = Instant::now();
    loop {
        let left = (
            brokers_of_run(&run),
            live_jobs(&run),
            containers_of_run(&run),
        );
        if left.0.is_empty() && left.1.is_empty() && left.2.is_empty() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the run left brokers {:?}, jobs {:?}, containers {:?}",
            left.0,
            left.1,
            left.2
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_slurm_run_without_a_static_vibesys_records_nothing() {
    slurm();
    let img = TestImage::new();
    let (_d, p) = project(TASK);
    let err = fails(
        vibesys_in(&p)
            .env_remove("VIBESYS_COMMAND_SERVER")
            .env("VIBESYS_IMAGES_LOCK", &img.lock)
            .env("VIBESYS_DOCKER_IMAGE", &img.name)
            .args(["run", "start", "--run-environment", "slurm"])
            .args(["--provider", "custom", "--", "true"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("VIBESYS_COMMAND_SERVER"), "{err}");
    assert_eq!(
        std::fs::read_dir(p.join(".vibesys/state/runs"))
            .unwrap()
            .count(),
        0,
        "a refused run records nothing"
    );
}
