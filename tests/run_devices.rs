//! A run's accelerator plan applied, end to end: `[sandbox] devices`
//! binds a real host character device into the agent's bubblewrap (as
//! root and as an unprivileged user) and, with `[vibesys]
//! attach_accelerator = true`, into its Docker container started through
//! the Engine. The agent sees that device and no other host device beyond
//! the minimal `/dev` every confinement has.
//!
//! The device is `/dev/fuse`: harmless without capabilities (nothing can
//! mount) and, unlike `/dev/full` or `/dev/zero`, absent from the minimal
//! `/dev` of bwrap and Docker, so its presence inside proves the bind.
//! This machine has no GPU: the NVIDIA device requests are tested as exact
//! lowerings only (vs-sandbox's docker plan and sandbox unit tests).

mod docker_support;
mod run_support;

use std::collections::BTreeSet;
use std::path::Path;

use docker_support::TestImage;
use run_support::*;

const DEVICE: &str = "/dev/fuse";

/// The character devices of every confinement's minimal `/dev`.
const MINIMAL_DEV: &[&str] = &[
    "/dev/console",
    "/dev/full",
    "/dev/null",
    "/dev/ptmx",
    "/dev/random",
    "/dev/tty",
    "/dev/urandom",
    "/dev/zero",
];

/// Lists the top-level character devices (no symlinks) between markers,
/// then acts as the stand-in agent.
fn agent() -> String {
    format!(
        "echo DEVICES-BEGIN; for f in /dev/*; do [ -c \"$f\" ] && [ ! -L \"$f\" ] && echo \"$f\"; done; echo DEVICES-END\n{AGENT}"
    )
}

fn task() -> String {
    assert!(
        Path::new(DEVICE).exists(),
        "{DEVICE} is needed on the test host"
    );
    format!("{TASK}devices = [\"{DEVICE}\"]\n\n[vibesys]\nattach_accelerator = true\n")
}

/// The devices candidate 1's agent listed, read from its log.
fn seen_devices(p: &Path) -> BTreeSet<String> {
    let run = only_run(p);
    let log =
        std::fs::read_to_string(p.join(format!(".vibesys/state/runs/{run}/logs/1-agent.log")))
            .unwrap();
    let start = log.find("DEVICES-BEGIN").expect(&log);
    let end = log.find("DEVICES-END").expect(&log);
    log[start + "DEVICES-BEGIN".len()..end]
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn assert_only_the_device(seen: &BTreeSet<String>) {
    assert!(seen.contains(DEVICE), "{DEVICE} not bound: {seen:?}");
    let extra: Vec<&String> = seen
        .iter()
        .filter(|d| d.as_str() != DEVICE && !MINIMAL_DEV.contains(&d.as_str()))
        .collect();
    assert!(extra.is_empty(), "host devices leaked in: {extra:?}");
}

#[test]
fn sandbox_devices_are_bound_into_bwrap_and_nothing_else() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let (_d, p) = project(&task());
    let out = vibesys_in(&p)
        .args(["run", "start", "--run-environment", "host"])
        .args(["--provider", "custom", "--candidates", "1"])
        .args(["--", "sh", "-c", &agent()])
        .output()
        .unwrap();
    ok(out);
    let status = status_json(&p, &only_run(&p), &[]);
    assert_eq!(
        status["run"]["accelerators"]["device_nodes"],
        serde_json::json!([DEVICE])
    );
    assert_only_the_device(&seen_devices(&p));
}

#[test]
fn a_device_that_is_not_a_character_device_is_refused_before_anything_runs() {
    let (_d, p) = project(TASK);
    std::fs::write(
        p.join("vibesys.toml"),
        format!("{TASK}devices = [\"/dev/stdin\"]\n"),
    )
    .unwrap();
    git(&p, &["commit", "-qam", "a symlink as a device"]);
    let err = fails(
        vibesys_in(&p)
            .args(["run", "start", "--run-environment", "host"])
            .args(["--provider", "custom", "--", "true"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("/dev/stdin") && err.contains("symlink"),
        "{err}"
    );
    assert!(
        !p.join(".vibesys/state/runs").exists()
            || std::fs::read_dir(p.join(".vibesys/state/runs"))
                .unwrap()
                .next()
                .is_none(),
        "a run was recorded"
    );
}

#[test]
fn sandbox_devices_are_bound_into_bwrap_as_an_unprivileged_user() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("setpriv", "apt-get install util-linux");
    let (d, p) = project(&task());
    give_to(As::User, &d, &p);
    ok(host_run_as(As::User, &p, &["--candidates", "1"], &agent()));
    assert_only_the_device(&seen_devices(&p));
}

#[test]
fn attached_devices_reach_the_docker_container_and_nothing_else() {
    let img = TestImage::new();
    let (_d, p) = project(&task());
    let mut c = vibesys_in(&p);
    c.args(["run", "start"])
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name);
    ok(c.args(["--provider", "custom", "--candidates", "1"])
        .args(["--", "sh", "-c", &agent()])
        .output()
        .unwrap());
    let env = [
        ("VIBESYS_IMAGES_LOCK", img.lock.to_str().unwrap()),
        ("VIBESYS_DOCKER_IMAGE", img.name.as_str()),
    ];
    let status = status_json(&p, &only_run(&p), &env);
    assert_eq!(status["run"]["environment"], "docker");
    assert_eq!(
        status["run"]["accelerators"]["device_nodes"],
        serde_json::json!([DEVICE])
    );
    assert_only_the_device(&seen_devices(&p));
}
