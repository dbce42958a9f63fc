//! `policy show` prints the plan `exec` applies, and writes nothing.
//!
//! bwrap: the argv of the real bwrap process `exec` starts (read from
//! `/proc/PID/cmdline` while the command runs) equals the `plan` of
//! `policy show --backend bwrap --json` with the same arguments, program
//! and arguments alike, environment included; as root and as the test user.
//! Docker: the mounts the Engine reports for `exec --confine docker`'s
//! container equal the plan's. A fresh run state is planned, not created.

mod docker_support;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use docker_support::common::{self, As, Project, command_as, project, users, vibesys, vibesys_as};

/// The argv of the process `pid`.
fn cmdline(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some(
        raw.split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect(),
    )
}

/// The children of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = task.path().join("children");
        if let Ok(text) = std::fs::read_to_string(path) {
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out
}

/// The first descendant of `root` whose program is bwrap.
fn find_bwrap(root: u32) -> Option<Vec<String>> {
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        if let Some(argv) = cmdline(pid)
            && argv.first().is_some_and(|p| p.ends_with("/bwrap"))
        {
            return Some(argv);
        }
        queue.extend(children(pid));
    }
    None
}

fn show_json(who: As, p: &Project, backend: &str, command: &[&str]) -> serde_json::Value {
    let mut args = vec!["policy", "show", "--backend", backend, "--json", "--"];
    args.extend(command);
    let out = vibesys_as(who, &p.root, &args);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn wait_for<T>(mut f: impl FnMut() -> Option<T>, what: &str) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stop(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn policy_show_prints_the_bwrap_argv_exec_runs() {
    common::require_tool("bwrap", "apt-get install bubblewrap");
    for who in users() {
        let p = project(who);
        std::fs::create_dir_all(p.root.join("docs/sub")).unwrap();
        let command = ["sleep", "30"];
        let shown = show_json(who, &p, "bwrap", &command);
        let plan = &shown["backends"]["bwrap"]["plan"];
        let mut expected = vec![plan["program"].as_str().unwrap().to_owned()];
        expected.extend(
            plan["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_owned()),
        );
        let child = command_as(who, &p.root, &vibesys(), &["exec", "--"])
            .args(command)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let pid = child.id();
        let argv = wait_for(|| find_bwrap(pid), "bwrap under vibesys exec");
        stop(child);
        // What follows the plan is exec's own: the environment
        // (`--clearenv`, then one `--setenv NAME VALUE` per name show
        // lists; show never prints the values), the status descriptor and
        // the command.
        let status_at = argv
            .iter()
            .position(|a| a == "--json-status-fd")
            .expect("exec passes --json-status-fd");
        let clear_at = argv
            .iter()
            .position(|a| a == "--clearenv")
            .expect("exec passes --clearenv");
        assert_eq!(
            argv[..clear_at],
            expected[..],
            "{who:?}: show and exec differ"
        );
        let set: Vec<&str> = argv[clear_at + 1..status_at]
            .chunks(3)
            .map(|t| {
                assert_eq!(t[0], "--setenv", "{t:?}");
                t[1].as_str()
            })
            .collect();
        let named: Vec<&str> = plan["environment"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap())
            .collect();
        assert_eq!(set, named, "{who:?}: the environment exec sets");
        assert!(
            !shown.to_string().contains("/nonexistent"),
            "show printed an environment value"
        );
        assert_eq!(argv[status_at + 2..], ["--", "sleep", "30"]);
        assert_eq!(shown["command"], serde_json::json!(command));
    }
}

#[test]
fn policy_show_writes_nothing_and_plans_the_missing_run_state() {
    let p = project(As::Root);
    let state = p.root.join(".vibesys/state");
    std::fs::create_dir_all(&state).unwrap();
    let before = listing(&p.root);
    let shown = show_json(As::Root, &p, "bwrap", &["true"]);
    assert_eq!(listing(&p.root), before, "policy show wrote to the project");
    // runs/ and local/ do not exist yet: planned as the hidden directories
    // exec creates, and the plan masks them where exec will.
    let resolved: Vec<String> = shown["resolved"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["rel"].as_str().unwrap().to_owned())
        .collect();
    for rel in [".vibesys/state/runs", ".vibesys/state/local"] {
        assert!(resolved.iter().any(|r| r == rel), "{rel} in {resolved:?}");
    }
    // exec creates them and then applies the same plan.
    let out = vibesys_as(As::Root, &p.root, &["exec", "--", "true"]);
    assert!(out.status.success(), "{out:?}");
    assert!(state.join("runs").is_dir() && state.join("local").is_dir());
    let again = show_json(As::Root, &p, "bwrap", &["true"]);
    assert_eq!(
        again["backends"]["bwrap"]["plan"],
        shown["backends"]["bwrap"]["plan"]
    );
}

fn listing(root: &Path) -> Vec<String> {
    let out = Command::new("find")
        .arg(root)
        .arg("-printf")
        .arg("%P %y %m\n")
        .output()
        .unwrap();
    let mut lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn policy_show_prints_the_container_mounts_exec_starts() {
    let img = docker_support::TestImage::new();
    let p = project(As::Root);
    let run_id = common::unique("show");
    let with_env = |c: &mut Command| {
        c.env("VIBESYS_IMAGES_LOCK", &img.lock)
            .env("VIBESYS_RUN_ID", &run_id)
            .env("VIBESYS_DOCKER_IMAGE", &img.name);
    };
    let mut show = command_as(
        As::Root,
        &p.root,
        &vibesys(),
        &["policy", "show", "--backend", "docker", "--json"],
    );
    with_env(&mut show);
    let out = show.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = &shown["backends"]["docker"]["plan"];
    let mut planned: Vec<(String, String, bool)> = plan["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["source"].as_str().unwrap().to_owned(),
                m["target"].as_str().unwrap().to_owned(),
                m["read_only"].as_bool().unwrap(),
            )
        })
        .collect();
    planned.sort();
    let mut exec = command_as(
        As::Root,
        &p.root,
        &vibesys(),
        // The test image holds busybox and its shell, no `sleep` on PATH.
        &[
            "exec",
            "--confine",
            "docker",
            "--",
            "/bin/busybox",
            "sleep",
            "30",
        ],
    );
    with_env(&mut exec);
    let child = exec.stdout(Stdio::null()).spawn().unwrap();
    let container = wait_for(
        || {
            docker_support::containers_of_run(&run_id)
                .into_iter()
                .next()
        },
        "the run's container",
    );
    // Inspected while the command runs in it (so exec has started it).
    let text = wait_for(
        || {
            let out = Command::new("docker")
                .args([
                    "inspect",
                    "--format",
                    "{{.State.Running}} {{json .Mounts}} {{.Name}} {{.Config.Image}}",
                    &container,
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.strip_prefix("true ").map(str::to_owned)
        },
        "the run's container running",
    );
    stop(child);
    let (mounts, rest) = text.trim().split_once(' ').unwrap();
    let mounts: serde_json::Value = serde_json::from_str(mounts).unwrap();
    let mut started: Vec<(String, String, bool)> = mounts
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["Source"].as_str().unwrap().to_owned(),
                m["Destination"].as_str().unwrap().to_owned(),
                !m["RW"].as_bool().unwrap(),
            )
        })
        .collect();
    started.sort();
    assert_eq!(
        started, planned,
        "the container's mounts differ from the plan"
    );
    let (name, image) = rest.split_once(' ').unwrap();
    assert_eq!(name.trim_start_matches('/'), plan["name"].as_str().unwrap());
    assert_eq!(image, plan["image"].as_str().unwrap());
}
