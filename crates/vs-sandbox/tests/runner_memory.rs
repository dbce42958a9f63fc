//! 10 GiB of output leaves the runner's memory flat. Its own test binary,
//! so no other test's allocations move this process's peak RSS.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use vs_sandbox::runner::{CommandRunner, CommandSpec, DEFAULT_OUTPUT_CAP, LocalShellRunner};

/// Peak resident set size of this process, in KiB.
fn vm_hwm_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn ten_gib_of_output_is_capped_with_flat_memory() {
    let ten_gib: u64 = 10 << 30;
    let before = vm_hwm_kib();
    let r = LocalShellRunner::new()
        .run(
            &CommandSpec::new(["head", "-c", "10G", "/dev/zero"], "/").env("PATH", "/usr/bin:/bin"),
        )
        .unwrap();
    let after = vm_hwm_kib();
    assert_eq!(r.exit_code, 0, "{}", r.stderr.text_lossy());
    assert_eq!(r.stdout.total_bytes(), ten_gib);
    assert_eq!(r.stdout.bytes().len(), DEFAULT_OUTPUT_CAP);
    assert_eq!(
        r.stdout.dropped_bytes(),
        ten_gib - DEFAULT_OUTPUT_CAP as u64
    );
    assert!(r.stdout.bytes().iter().all(|&b| b == 0));
    assert_eq!(r.stderr.total_bytes(), 0);
    // Two 1 MiB captures and a 256 KiB read buffer; allow 8 MiB in all.
    let grown = after.saturating_sub(before);
    assert!(
        grown < 8 * 1024,
        "peak RSS grew by {grown} KiB ({before} -> {after}) for 10 GiB of output"
    );
    eprintln!(
        "10 GiB in {:.2?}; peak RSS {before} KiB -> {after} KiB",
        r.duration
    );
}
