//! Benchmark (ignored; scripts/bench-docker.sh runs it in release):
//! `DockerSandbox::execute` of `true` against `docker exec <ctr> true` on
//! the same container, in the same run. Prints one JSON line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod docker_support;

use std::time::{Duration, Instant};

use docker_support::{TestImage, unique};
use vs_sandbox::docker::DockerOptions;
use vs_sandbox::{CommandRunner, CommandSpec, DockerSandbox, ProjectPathPolicy, Workspace};

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1000.0
}

#[test]
#[ignore = "benchmark: run by scripts/bench-docker.sh"]
fn bench_execute_true_against_docker_exec() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let img = TestImage::new();
    let ws = tempfile::tempdir().unwrap();
    let w = Workspace::open(ws.path()).unwrap();
    let policy = ProjectPathPolicy::empty().resolve(&w).unwrap();
    let mut o = DockerOptions::new(img.pin(), unique("bench"), env!("CARGO_BIN_EXE_vibesys"));
    o.mask_root = img.dir.path().join("masks");
    let t = Instant::now();
    let sandbox = DockerSandbox::start(&policy, &o).unwrap();
    let start_ms = t.elapsed().as_secs_f64() * 1000.0;
    let spec = CommandSpec::new(["/bin/busybox", "true"], w.root());
    for _ in 0..5 {
        assert!(sandbox.run(&spec).unwrap().success());
    }
    let mut ours = Vec::with_capacity(runs);
    let mut cli = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let r = sandbox.run(&spec).unwrap();
        ours.push(t.elapsed());
        assert!(r.success());
        let t = Instant::now();
        let s = std::process::Command::new("docker")
            .args(["exec", sandbox.container_id(), "/bin/busybox", "true"])
            .status()
            .unwrap();
        cli.push(t.elapsed());
        assert!(s.success());
    }
    let (a, b) = (median(ours), median(cli));
    println!(
        "{{\"runs\": {runs}, \"start_ms\": {start_ms:.1}, \"execute_true_median_ms\": {a:.2}, \"docker_exec_true_median_ms\": {b:.2}, \"speedup\": {:.2}}}",
        b / a
    );
}
