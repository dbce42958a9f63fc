//! Benchmark (ignored; scripts/bench-docker.sh runs it in release):
//! `DockerSandbox::execute` of `true`, through the in-container command
//! server and through the Engine's exec API, against `docker exec <ctr>
//! true` on the same container, interleaved in the same run. Prints one
//! JSON line.
#![allow(clippy::print_stdout)]

mod docker_support;

use std::time::{Duration, Instant};

use docker_support::{TestImage, static_vibesys, unique};
use vs_docker::{DockerOptions, DockerSandbox, ExecuteVia};
use vs_sandbox::{CommandRunner, CommandSpec, ProjectPathPolicy, Workspace};

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
    let server = static_vibesys();
    let mut o = DockerOptions::new(img.pin(), unique("bench"), docker_support::vibesys_bin());
    o.mask_root = img.dir.path().join("masks");
    o.command_server = Some(server);
    let t = Instant::now();
    let sandbox = DockerSandbox::start(&policy, &o).unwrap();
    let start_ms = t.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(sandbox.execute_via(), ExecuteVia::CommandServer);
    let mut o2 = DockerOptions::new(img.pin(), unique("bench"), docker_support::vibesys_bin());
    o2.mask_root = img.dir.path().join("masks2");
    let via_exec = DockerSandbox::start(&policy, &o2).unwrap();
    assert_eq!(via_exec.execute_via(), ExecuteVia::EngineExec);
    let spec = CommandSpec::new(["/bin/busybox", "true"], w.root());
    for _ in 0..5 {
        assert!(sandbox.run(&spec).unwrap().success());
        assert!(via_exec.run(&spec).unwrap().success());
    }
    let mut ours = Vec::with_capacity(runs);
    let mut ours_exec = Vec::with_capacity(runs);
    let mut cli = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let r = sandbox.run(&spec).unwrap();
        ours.push(t.elapsed());
        assert!(r.success());
        let t = Instant::now();
        let r = via_exec.run(&spec).unwrap();
        ours_exec.push(t.elapsed());
        assert!(r.success());
        let t = Instant::now();
        let s = std::process::Command::new("docker")
            .args(["exec", sandbox.container_id(), "/bin/busybox", "true"])
            .status()
            .unwrap();
        cli.push(t.elapsed());
        assert!(s.success());
    }
    let (a, e, b) = (median(ours), median(ours_exec), median(cli));
    println!(
        "{{\"runs\": {runs}, \"start_ms\": {start_ms:.1}, \"execute_true_median_ms\": {a:.2}, \"engine_exec_true_median_ms\": {e:.2}, \"docker_exec_true_median_ms\": {b:.2}, \"speedup\": {:.2}, \"engine_exec_speedup\": {:.2}}}",
        b / a,
        b / e
    );
}
