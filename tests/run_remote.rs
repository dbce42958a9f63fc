//! `vibesys run` in the modal and skypilot run environments, end to end
//! up to the network boundary: the agent works in the local editor
//! container (no devices, Engine API), the framework commits, gates and
//! dispatches each candidate's commit through the real client installed
//! by `scripts/remote-clients.sh` (found where vibesys looks, as in
//! `remote_envs.rs`). Without credentials the client refuses: the
//! candidate fails naming the missing login, the run finishes (exit 0)
//! with its record intact. A missing client or a task without `[measure]`
//! is refused before anything is recorded.

mod docker_support;
mod run_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use docker_support::common::remote_client_tools as real_tools;
use docker_support::{TestImage, containers_of_run};
use run_support::*;

/// `vibesys run start --run-environment ENV` with the test image, the
/// real tools and an empty HOME (no credentials).
fn remote_run(p: &Path, img: &TestImage, env: &str, tools: &Path, home: &Path) -> Command {
    let mut c = vibesys_in(p);
    c.args(["run", "start", "--run-environment", env]);
    c.env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        .env("VIBESYS_TOOLS", tools)
        .env("HOME", home);
    if let Some(bin) = std::env::var_os("VIBESYS_STATIC_BIN") {
        c.env("VIBESYS_COMMAND_SERVER", bin);
    }
    c
}

/// SkyPilot's client starts a local API server on a fixed port (46580)
/// for its HOME: two tests with HOMEs of their own running at once talk
/// to one server, which then fails the other's launch (500, seen in CI),
/// and a server a failed test left behind fails every later one. The
/// tests that run `sky` hold this lock.
static SKY_SERVER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The lock on sky's local API server for one test with `home`; dropped
/// (also when the test fails), it stops the server `sky` started there.
struct SkyServer {
    sky: PathBuf,
    home: PathBuf,
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl SkyServer {
    fn hold(tools: &Path, home: &Path) -> Self {
        Self {
            sky: tools.join("remote-clients/bin/sky"),
            home: home.to_path_buf(),
            _lock: SKY_SERVER
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        }
    }
}

impl Drop for SkyServer {
    fn drop(&mut self) {
        let _ = Command::new(&self.sky)
            .args(["api", "stop"])
            .env("HOME", &self.home)
            .output();
    }
}

/// The honest candidate holds its turn until the test has inspected its
/// container (a `release` file in its worktree, at most 60 s): a fixed
/// sleep let a loaded CI machine find the container only as it was
/// removed ("No such object").
const SLOW_AGENT: &str = r#"if [ "$VIBESYS_CANDIDATE" = 1 ]; then
  touch turn-started; i=0
  while [ ! -e release ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
  rm -f turn-started release
fi"#;

/// Devices, device requests and device rules of a container.
fn devices_of(id: &str) -> String {
    let out = Command::new("docker")
        .args([
            "inspect",
            "--format",
            "{{json .HostConfig.Devices}} {{json .HostConfig.DeviceRequests}} {{json .HostConfig.DeviceCgroupRules}} {{.HostConfig.Privileged}}",
            id,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An empty list and null both mean none.
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .replace("[]", "null")
}

fn run_until_refused(env: &str, refusal: &[&str], title: &str, extra: &str) {
    let img = TestImage::new();
    let tools = real_tools();
    let home = tempfile::tempdir().unwrap();
    let _sky = (env == "skypilot").then(|| SkyServer::hold(&tools, home.path()));
    let (_d, p) = project(&format!("{TASK}{extra}"));
    // `[<env>] build = true`: the task's build runs on the service (the
    // first phase there), never here.
    let builds_remotely = !extra.is_empty();
    let agent = format!("{SLOW_AGENT}\n{AGENT}");
    let child = remote_run(&p, &img, env, &tools, home.path())
        .args(["--provider", "custom", "--candidates", "2", "--jobs", "2"])
        .args(["--", "sh", "-c", &agent])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let runs = p.join(".vibesys/state/runs");
    let run = started_run(&p, 60);
    // The agent's editor container, while it works: no devices.
    let worktree = p.join(format!(".vibesys/state/local/candidates/{run}/1"));
    wait_for(60, "the agent's turn", || {
        worktree.join("turn-started").exists()
    });
    let ids = containers_of_run(&format!("{run}-1"));
    assert!(!ids.is_empty(), "the agent's container of {run}-1");
    let devices = devices_of(&ids[0]);
    std::fs::write(worktree.join("release"), "").unwrap();
    assert_eq!(devices, "null null null false");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the run finished: {stderr}");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains(&format!("environment {env}")), "{table}");

    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["environment"], env);
    assert_eq!(status["run"]["state"], "finished", "{status:#}");
    assert_eq!(
        status["run"]["accelerators"],
        serde_json::json!({"nvidia": null, "device_nodes": []})
    );
    let honest = candidate(&status, 1);
    assert_eq!(honest["state"], "failed", "{honest:#}");
    for phase in ["agent", "commit", "gate"] {
        assert_eq!(honest["phases"][phase]["status"], "passed", "{honest:#}");
    }
    let first = if builds_remotely { "build" } else { "check" };
    assert_eq!(honest["phases"][first]["status"], "failed", "{honest:#}");
    if builds_remotely {
        assert!(honest["phases"].get("check").is_none(), "{honest:#}");
        assert!(
            honest["evaluated_in"]
                .as_str()
                .unwrap()
                .contains("the local trusted build was skipped"),
            "{honest:#}"
        );
    }
    let err = honest["error"].as_str().unwrap();
    for words in refusal {
        assert!(err.contains(words), "{words:?} in {err}");
    }
    assert!(
        err.starts_with(&format!("{first}: {title} evaluation: ")),
        "{err}"
    );
    let commit = honest["commit"].as_str().unwrap();
    assert!(
        honest["evaluated_in"].as_str().unwrap().starts_with(title),
        "{honest:#}"
    );
    // The cheater fails the gate and is never dispatched.
    let cheat = candidate(&status, 2);
    assert_eq!(cheat["phases"]["gate"]["status"], "failed", "{cheat:#}");
    let remote = runs.join(&run).join("remote");
    assert!(!remote.join("2").exists());
    // The dispatch's record: the generated task names the commit; no
    // result; the run's own record intact.
    let rec = remote.join("1");
    assert!(!rec.join("result.json").exists());
    let generated = match env {
        "modal" => "evaluate.py",
        _ => "task.yaml",
    };
    let text = std::fs::read_to_string(rec.join(generated)).unwrap();
    assert!(text.contains(commit), "{text}");
    let record: serde_json::Value =
        serde_json::from_slice(&std::fs::read(runs.join(&run).join("run.json")).unwrap()).unwrap();
    assert_eq!(record["environment"], env);
    for suffix in ["1", "2", "1-eval", "2-eval"] {
        assert!(containers_of_run(&format!("{run}-{suffix}")).is_empty());
    }
}

#[test]
fn modal_run_dispatches_each_commit_and_names_the_missing_login() {
    run_until_refused(
        "modal",
        &["Modal refused: missing a Modal API token", "MODAL_TOKEN_ID"],
        "Modal",
        "[modal]\nbuild = true\n[build]\nargv = [\"sh\", \"-c\", \"echo built > app\"]\noutputs = [\"app\"]\n",
    );
}

#[test]
fn skypilot_run_dispatches_each_commit_and_names_the_missing_credentials() {
    run_until_refused(
        "skypilot",
        &[
            "SkyPilot refused: missing credentials of a cloud SkyPilot can use",
            "sky check",
        ],
        "SkyPilot",
        "",
    );
}

#[test]
fn missing_client_or_measure_is_refused_before_anything_is_recorded() {
    let img = TestImage::new();
    let home = tempfile::tempdir().unwrap();
    let empty = tempfile::tempdir().unwrap();
    let (_d, p) = project(TASK);
    let err = fails(
        remote_run(&p, &img, "modal", empty.path(), home.path())
            .args(["--provider", "custom", "--", "true"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("the Modal client is not installed") && err.contains("remote-clients.sh"),
        "{err}"
    );
    let no_measure = TASK.replace("[measure]", "[unused]").replace(
        "[unused]\nargv = [\"sh\", \"evaluator/measure.sh\"]\ntimeout_secs = 60\nmetric = \"time_ms\"\ngoal = \"min\"\n",
        "",
    );
    let (_d2, p2) = project(&no_measure);
    let err = fails(
        remote_run(&p2, &img, "skypilot", &real_tools(), home.path())
            .args(["--provider", "custom", "--", "true"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("[measure]"), "{err}");
    // A [build] whose outputs could not reach the service's check and
    // measure (it would build here) is refused before anything starts.
    let (_d3, p3) = project(&format!(
        "{TASK}\n[build]\nargv = [\"sh\", \"-c\", \"echo built > app\"]\noutputs = [\"app\"]\n"
    ));
    let err = fails(
        remote_run(&p3, &img, "skypilot", &real_tools(), home.path())
            .args(["--provider", "custom", "--", "true"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("set [skypilot] build = true") && err.contains("do not reach the service"),
        "{err}"
    );
    for p in [&p, &p2, &p3] {
        let runs = p.join(".vibesys/state/runs");
        assert_eq!(
            std::fs::read_dir(&runs).unwrap().count(),
            0,
            "{}",
            runs.display()
        );
    }
}

/// Ctrl-C while the client runs stops it (tearing down what it started),
/// leaves the candidate `running` and the run resumable (exit 130); the
/// resume continues in skypilot, as recorded.
#[test]
fn ctrl_c_during_dispatch_leaves_the_run_resumable() {
    let img = TestImage::new();
    let tools = real_tools();
    let home = tempfile::tempdir().unwrap();
    let _sky = SkyServer::hold(&tools, home.path());
    let (_d, p) = project(TASK);
    let child = remote_run(&p, &img, "skypilot", &tools, home.path())
        .args(HONEST_AGENT_ARGS)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let runs = p.join(".vibesys/state/runs");
    let run = started_run(&p, 60);
    let task = runs.join(&run).join("remote/1/task.yaml");
    wait_for(120, "the dispatch", || task.exists());
    std::thread::sleep(std::time::Duration::from_millis(500));
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains(&format!("vibesys run resume {run}")),
        "{stderr}"
    );
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["state"], "interrupted", "{status:#}");
    let c = candidate(&status, 1);
    assert_eq!(c["state"], "running", "{c:#}");
    assert!(c["error"].is_null(), "{c:#}");
    // The resume runs in skypilot again and ends at the same refusal.
    let mut resume = vibesys_in(&p);
    resume
        .args(["run", "resume", &run])
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_TOOLS", &tools)
        .env("HOME", home.path());
    if let Some(bin) = std::env::var_os("VIBESYS_STATIC_BIN") {
        resume.env("VIBESYS_COMMAND_SERVER", bin);
    }
    let out = resume.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("in the skypilot run environment (as recorded)"),
        "{stderr}"
    );
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["state"], "finished", "{status:#}");
    let c = candidate(&status, 1);
    assert_eq!(c["attempts"], 2, "{c:#}");
    // The resumed dispatch ends at the client's own refusal: no
    // credentials, or, when the Ctrl-C above stopped sky's local API
    // server while it started (seen under load), the server unreachable.
    // Either is the network boundary; what this test checks is the resume.
    let error = c["error"].as_str().unwrap();
    assert!(
        error.contains("SkyPilot refused") || error.contains("SkyPilot could not reach"),
        "{c:#}"
    );
}
