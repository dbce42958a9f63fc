//! The single-node Slurm of the `slurm_*` and `run_slurm` tests: started
//! once per test process (`scripts/slurm-up.sh`, idempotent; CI's
//! `scripts/test.sh` has started it already and stops it after the
//! suite), and what a run may leave in it (queued jobs, brokers).
#![allow(dead_code)]

use std::process::Command;
use std::sync::OnceLock;

/// The fake GPUs' device nodes (scripts/slurm-up.sh).
pub const GPU_DIR: &str = "/run/vibesys-slurm";

/// Starts the single-node cluster once per test process.
pub fn slurm() {
    static UP: OnceLock<()> = OnceLock::new();
    UP.get_or_init(|| {
        // Standalone (no `common`): the harnesses that include this module
        // load `common` already.
        assert!(
            Command::new("srun").arg("--version").output().is_ok(),
            "srun is missing: apt-get install slurm-wlm munge (scripts/install-deps.sh)"
        );
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new("bash")
            .arg(root.join("scripts/slurm-up.sh"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/slurm-up.sh failed (it needs root, slurm-wlm and munge):\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// The run's jobs Slurm still knows as queued or running.
pub fn live_jobs(run: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args(["-h", "-o", "%j|%T"])
        .output()
        .unwrap();
    assert!(out.status.success(), "squeue failed");
    let prefix = format!("vibesys-{run}-");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

/// Broker processes whose command line names the run (one left behind).
pub fn brokers_of_run(run: &str) -> Vec<String> {
    let out = Command::new("ps")
        .args(["-eo", "pid=,args="])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("broker serve") && l.contains(run))
        .map(str::to_owned)
        .collect()
}

/// Waits until nothing of run (or session) `run` is left: no broker, no
/// Slurm job, no container (`containers`: docker_support's
/// `containers_of_run`); fails after `secs`, naming what is left `after`
/// what. The callers allow 60 s: the wait ends as soon as nothing is
/// left, and on a loaded CI machine the Engine's removals and slurmctld's
/// job clean-up have taken well over the 20 s these tests once allowed.
pub fn assert_nothing_left(
    run: &str,
    after: &str,
    secs: u64,
    containers: impl Fn(&str) -> Vec<String>,
) {
    let start = std::time::Instant::now();
    loop {
        let left = (brokers_of_run(run), live_jobs(run), containers(run));
        if left.0.is_empty() && left.1.is_empty() && left.2.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(secs),
            "after {after}, {run} left brokers {:?}, jobs {:?}, containers {:?}",
            left.0,
            left.1,
            left.2
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
