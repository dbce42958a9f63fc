//! Spawn overhead of LocalShellRunner against `std::process::Command`
//! running the same `/bin/true`, interleaved in one run. A benchmark, not a
//! check: `cargo test --release -p vs-sandbox --test runner_bench -- --ignored --nocapture`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use vs_sandbox::runner::{CommandRunner, CommandSpec, LocalShellRunner};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
#[ignore = "benchmark: run explicitly with --ignored --nocapture"]
fn spawn_overhead_against_std_command() {
    let runner = LocalShellRunner::new();
    let spec = CommandSpec::new(["/bin/true"], "/");
    let (mut ours, mut std_cmd) = (Vec::new(), Vec::new());
    for _ in 0..300 {
        let t = Instant::now();
        assert_eq!(runner.run(&spec).unwrap().exit_code, 0);
        ours.push(t.elapsed());
        let t = Instant::now();
        let out = std::process::Command::new("/bin/true")
            .env_clear()
            .current_dir("/")
            .output()
            .unwrap();
        assert!(out.status.success());
        std_cmd.push(t.elapsed());
    }
    let (a, b) = (median(ours), median(std_cmd));
    eprintln!(
        "median /bin/true: LocalShellRunner {a:?}, std Command::output {b:?}, ratio {:.2}",
        a.as_secs_f64() / b.as_secs_f64()
    );
}
