//! `vibesys session --run-environment slurm` against the real single-node
//! Slurm (scripts/slurm-up.sh) and the real Docker Engine: the session
//! starts the run's broker and the local editor container (an image
//! vs-image built, the static vibesys as its command server and broker
//! client). From inside the container an agent job runs confined on the
//! compute node; the framework socket is absent; the agent socket refuses
//! gates; the container has no devices (asked of the Engine). When the
//! session ends, also on error, no broker, job or container is left.

mod docker_support;
mod slurm_support;
// Both harnesses load the shared `common` module; each keeps its own copy.
#[allow(clippy::duplicate_mod)]
mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{
    As, assert_code, assert_code_stderr, assert_file_is, assert_stderr_has, project, stderr,
    unique, vibesys,
};
use docker_support::{TestImage, containers_of_run, static_vibesys};
use slurm_support::{GPU_DIR, assert_nothing_left, brokers_of_run, live_jobs, slurm};

/// The project of common::project (docs/ read-only; secret/ and
/// token.txt hidden) with the broker's settings and a gate.
fn slurm_project(agent_gpu: bool) -> common::Project {
    let p = project(As::Root);
    let mut toml = std::fs::read_to_string(p.root.join("vibesys.toml")).unwrap();
    toml.push_str(&format!(
        "\n[vibesys.broker]\ngpu_devices = \"{GPU_DIR}/gpu{{}}\"\n\n\
         [gates.check]\nargv = [\"sh\", \"-c\", \"echo GATE-RAN\"]\n"
    ));
    if agent_gpu {
        toml.push_str(
            "\n[vibesys.agent_gpu]\nenabled = true\nmax_gpus = 2\nmax_time_minutes = 5\n",
        );
    }
    std::fs::write(p.root.join("vibesys.toml"), toml).unwrap();
    p
}

/// `vibesys session --provider custom --run-environment ENV -- sh -c SCRIPT`
/// in `dir`, the run id `run`, the test image.
fn session(img: &TestImage, dir: &Path, run: &str, env: &str, script: &str) -> Command {
    session_with_image(img, &img.name, &[], dir, run, env, script)
}

/// [`session`] with another `--image` and more `flags` of `session`.
fn session_with_image(
    img: &TestImage,
    image: &str,
    flags: &[&str],
    dir: &Path,
    run: &str,
    env: &str,
    script: &str,
) -> Command {
    let mut cmd = Command::new(vibesys());
    cmd.current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("LANG", "C")
        .env("VIBESYS_LOG", "info")
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_RUN_ID", run)
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .args(["session", "--provider", "custom", "--run-environment", env])
        .args(flags)
        .args(["--image", image, "--", "/bin/sh", "-c", script]);
    cmd
}

/// The script in the editor container: an agent job through the broker
/// (hidden read, read-only write, private /tmp), the sockets it can see,
/// a gate asked of the agent socket, then it waits for `go`.
const EDITOR_SCRIPT: &str = r#"
C=/.vibesys/vibesys
S="$VIBESYS_BROKER_SOCKET"
echo "socket=$S" > editor.out
$C broker job --socket "$S" -- sh -c 'cat secret/key && echo READ-HIDDEN; echo x > docs/readme && echo WROTE-READ-ONLY; echo "tmp=$TMPDIR,$TMP,$TEMP"; echo data > /tmp/job-marker && echo TMP-WRITABLE; echo JOB-RAN' >> editor.out 2>&1
echo "job=$?" >> editor.out
$C broker job --socket "$S" -- sh -c 'ls /tmp/job-marker 2>&1' >> editor.out 2>&1
$C broker gate --socket "$S" check >> editor.out 2>&1
echo "gate=$?" >> editor.out
find / -path /proc -prune -o -type s -print 2>/dev/null | sed 's/^/sock:/' >> editor.out
ls /dev | sed 's/^/dev:/' >> editor.out
touch ready
i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done
exit 5
"#;

#[test]
fn a_slurm_session_runs_agent_jobs_confined_from_a_deviceless_editor() {
    slurm();
    let img = TestImage::new();
    let p = slurm_project(true);
    let run = unique("slsess");
    let mut child = session(&img, &p.root, &run, "slurm", EDITOR_SCRIPT)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // While the session waits: ask the Engine about its container.
    let start = Instant::now();
    while !p.root.join("ready").exists() {
        if let Ok(Some(status)) = child.try_wait() {
            let out = child.wait_with_output().unwrap();
            panic!("the session ended early ({status}): {}", stderr(&out));
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no ready marker"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ids = containers_of_run(&run);
    assert_eq!(ids.len(), 1, "one editor container: {ids:?}");
    let inspect = Command::new("docker")
        .args([
            "inspect",
            "--format",
            "devices={{json .HostConfig.Devices}} requests={{json .HostConfig.DeviceRequests}} privileged={{.HostConfig.Privileged}} mounts={{range .Mounts}}{{.Source}}=>{{.Destination}};{{end}}",
            &ids[0],
        ])
        .output()
        .unwrap();
    assert!(inspect.status.success(), "{inspect:?}");
    let info = String::from_utf8_lossy(&inspect.stdout).into_owned();
    assert!(
        (info.contains("devices=null") || info.contains("devices=[]"))
            && (info.contains("requests=null") || info.contains("requests=[]"))
            && info.contains("privileged=false"),
        "the editor container has devices: {info}"
    );
    assert!(
        info.contains("/agent/broker.sock=>/run/vibesys/agent.sock;"),
        "the agent socket is mounted: {info}"
    );
    assert!(
        !info.contains("framework"),
        "framework socket mounted: {info}"
    );
    std::fs::write(p.root.join("go"), "").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_code(&out, 5);
    let editor = std::fs::read_to_string(p.root.join("editor.out")).unwrap();
    assert!(
        editor.contains("socket=/run/vibesys/agent.sock"),
        "{editor}"
    );
    // The agent job ran on the compute node, confined.
    assert!(
        editor.contains("JOB-RAN") && editor.contains("job=0"),
        "{editor}"
    );
    assert!(
        !editor.contains("READ-HIDDEN"),
        "hidden path read: {editor}"
    );
    assert!(
        !editor.contains("WROTE-READ-ONLY"),
        "read-only path written: {editor}"
    );
    assert!(
        editor.contains("tmp=/tmp,/tmp,/tmp") && editor.contains("TMP-WRITABLE"),
        "{editor}"
    );
    assert!(
        editor.contains("/tmp/job-marker': No such file"),
        "the job's /tmp outlived it: {editor}"
    );
    assert_file_is(p.root.join("docs/readme"), "docs\n");
    // The agent socket never runs gates.
    assert!(
        editor.contains("the agent socket cannot run gates"),
        "{editor}"
    );
    assert!(
        editor.contains("gate=125") && !editor.contains("GATE-RAN"),
        "{editor}"
    );
    // Only the agent socket is there; no device beyond the Engine's
    // minimal /dev (no GPU device nodes).
    let sockets: Vec<&str> = editor
        .lines()
        .filter_map(|l| l.strip_prefix("sock:"))
        .collect();
    assert_eq!(sockets, ["/run/vibesys/agent.sock"], "{editor}");
    assert!(
        !editor
            .lines()
            .any(|l| l.starts_with("dev:gpu") || l.starts_with("dev:nvidia")),
        "{editor}"
    );
    assert_nothing_left(&run, "the session", 60, containers_of_run);
}

#[test]
fn slurm_gpu_is_a_logged_alias_and_agent_jobs_follow_the_operator() {
    slurm();
    let img = TestImage::new();
    // [vibesys.agent_gpu] off: the agent socket refuses jobs.
    let p = slurm_project(false);
    let script = "/.vibesys/vibesys broker job --socket \"$VIBESYS_BROKER_SOCKET\" -- echo JOB-RAN";
    let run = unique("sloff");
    let out: Output = session(&img, &p.root, &run, "slurm", script)
        .output()
        .unwrap();
    assert_code_stderr(&out, 125, "agent jobs are off");
    assert_nothing_left(&run, "the session", 60, containers_of_run);
    // slurm-gpu: the same with agent jobs on, and a log line saying so.
    let run = unique("slgpu");
    let out = session(&img, &p.root, &run, "slurm-gpu", script)
        .output()
        .unwrap();
    assert_code(&out, 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("JOB-RAN"),
        "{out:?}"
    );
    assert_stderr_has(&out, "--run-environment slurm-gpu is deprecated");
    assert_nothing_left(&run, "the session", 60, containers_of_run);
}

#[test]
fn a_session_that_fails_to_start_its_container_leaves_no_broker() {
    slurm();
    let img = TestImage::new();
    let p = slurm_project(true);
    let run = unique("slfail");
    // An image the lock does not pin: refused after the broker started.
    let unpinned = format!("sha256:{}", "0".repeat(64));
    let out = session_with_image(&img, &unpinned, &[], &p.root, &run, "slurm", "echo never")
        .output()
        .unwrap();
    assert_stderr_has(&out, "not pinned");
    assert_code(&out, 125);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("never"));
    assert_nothing_left(&run, "the session", 60, containers_of_run);
    // Without a static vibesys for the client the session is refused too.
    let out = session(&img, &p.root, &run, "slurm", "echo never")
        .env("VIBESYS_COMMAND_SERVER", "/nonexistent/vibesys")
        .output()
        .unwrap();
    assert_code(&out, 125);
    assert_nothing_left(&run, "the session", 60, containers_of_run);
}

/// sha256 of "hello\n".
const HELLO_SHA256: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

#[test]
fn a_slurm_build_runs_its_job_through_the_broker_and_leaves_nothing() {
    slurm();
    let img = TestImage::new();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    // The build runs candidate code: its socket refuses a job in the
    // project itself (the agent socket would have run it there).
    let script = format!(
        "mkdir -p target/bin && /.vibesys/vibesys broker job --socket \"$VIBESYS_BROKER_SOCKET\" -- sh -c 'echo hello > target/bin/app; hostname > target/node'; \
         /.vibesys/vibesys broker job --socket \"$VIBESYS_BROKER_SOCKET\" --cwd {root} -- sh -c 'echo PWNED > {root}/pwned'; true",
        root = p.display()
    );
    std::fs::write(
        p.join("vibesys.toml"),
        format!(
            "[build]\nargv = [\"sh\", \"-c\", {}]\noutputs = [\"target/bin/app\"]\ntimeout_secs = 120\n\n\
             [vibesys.broker]\ngpu_devices = \"{GPU_DIR}/gpu{{}}\"\n\n\
             [vibesys.agent_gpu]\nenabled = true\n",
            serde_json::to_string(&script).unwrap()
        ),
    )
    .unwrap();
    docker_support::git(p, &["init", "-q"]);
    docker_support::git(p, &["add", "-f", "."]);
    docker_support::git(p, &["commit", "-q", "-m", "candidate"]);
    let vs = |args: &[&str]| {
        Command::new(vibesys())
            .args(args)
            .arg("--project")
            .arg(p)
            .env_remove("VIBESYS_LOG")
            .env_remove("VIBESYS_AGENT_SANDBOX")
            .env("VIBESYS_IMAGES_LOCK", &img.lock)
            .env("VIBESYS_DOCKER_IMAGE", &img.name)
            .env("VIBESYS_COMMAND_SERVER", static_vibesys())
            .output()
            .unwrap()
    };
    assert_code(&vs(&["state", "init"]), 0);
    let run = unique("slbuild");
    let out = vs(&[
        "build",
        "--run-environment",
        "slurm",
        "--run",
        &run,
        "--commit",
        "HEAD",
        "--json",
    ]);
    assert_code(&out, 0);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["run_environment"], "slurm", "{json}");
    assert_eq!(
        json["record"]["outputs"][0]["sha256"], HELLO_SHA256,
        "{json}"
    );
    assert!(
        !p.join("pwned").exists(),
        "the build's socket ran a job in the project"
    );
    assert_nothing_left(&run, "the session", 60, containers_of_run);
    let left = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.vibesys.image={}", img.name),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "the build left its editor container"
    );
}

#[test]
fn a_session_killed_with_sigkill_leaves_no_broker_job_or_container() {
    slurm();
    let img = TestImage::new();
    let p = slurm_project(true);
    let run = unique("slkill");
    let script = "/.vibesys/vibesys broker job --socket \"$VIBESYS_BROKER_SOCKET\" -- sleep 300 & \
                  touch ready; wait";
    let mut child = session(&img, &p.root, &run, "slurm", script)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while live_jobs(&run).iter().all(|j| !j.contains("RUNNING")) || !p.root.join("ready").exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the session ended early"
        );
        assert!(start.elapsed() < Duration::from_secs(120), "no running job");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!brokers_of_run(&run).is_empty(), "no broker process seen");
    child.kill().unwrap();
    child.wait().unwrap();
    // The broker is told by the kernel (PR_SET_PDEATHSIG) and cancels the
    // job; the container's lifeline closes and the Engine removes it.
    assert_nothing_left(&run, "the session", 60, containers_of_run);
}

/// A session's own `--allow-host` reaches its agent jobs: the broker it
/// starts passes the list to each job, which reaches the listed loopback
/// server on the compute node through the proxy there and is refused the
/// other (named on the job's stderr, relayed to the editor).
#[test]
fn a_sessions_allow_list_holds_its_agent_jobs() {
    slurm();
    let img = TestImage::new();
    let p = slurm_project(true);
    let allowed = common::loopback_http::Server::start("ALLOWED");
    let refused = common::loopback_http::Server::start("FORBIDDEN-BODY");
    let (a, r) = (allowed.port, refused.port);
    let script = format!(
        "/.vibesys/vibesys broker job --socket \"$VIBESYS_BROKER_SOCKET\" -- sh -c \
         'curl -sS http://127.0.0.1:{a}/; echo REFUSED-HTTP $(curl -s -o /dev/null -w %{{http_code}} http://127.0.0.1:{r}/)'"
    );
    let run = unique("slegress");
    let allow = format!("127.0.0.1:{a}");
    let out = session_with_image(
        &img,
        &img.name,
        &["--allow-host", &allow],
        &p.root,
        &run,
        "slurm",
        &script,
    )
    .output()
    .unwrap();
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = stderr(&out);
    assert_code(&out, 0);
    assert!(so.contains(&format!("ALLOWED-{a}")), "{so}\n{err}");
    assert!(so.contains("REFUSED-HTTP 403"), "{so}\n{err}");
    assert!(!so.contains("FORBIDDEN-BODY"), "{so}");
    assert_eq!(refused.hits(), 0, "{so}\n{err}");
    assert!(
        err.contains(&format!("vibesys: egress refused: 127.0.0.1:{r} ")),
        "{err}"
    );
    assert_nothing_left(&run, "the session", 60, containers_of_run);
}
