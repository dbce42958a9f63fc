//! `vibesys run start --run-environment slurm` against the real
//! single-node Slurm (scripts/slurm-up.sh) and the real Docker Engine: the
//! run starts its broker; each candidate's agent works in the local
//! editor container (the static vibesys as its command server, the
//! broker's agent socket mounted, no devices); its check and measure are
//! Slurm jobs sent over the broker's framework socket with the candidate's
//! worktree as working directory. The honest candidate passes, the
//! cheater fails; no broker, job or container is left.

mod docker_support;
mod run_support;
mod slurm_support;

use docker_support::{TestImage, containers_of_run, static_vibesys};
use run_support::*;
use slurm_support::{assert_nothing_left, live_jobs, slurm};

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
        jobs.iter()
            .all(|l| l.contains("/candidates/") && l.contains("/eval-1-")),
        "a job outside the evaluation's checkout: {jobs:?}"
    );
    let log =
        std::fs::read_to_string(p.join(format!(".vibesys/state/runs/{run}/logs/1-agent.log")))
            .unwrap();
    assert!(log.contains("AGENT-SOCKET-OK"), "{log}");
    // Nothing of the run is left.
    assert_nothing_left(&run, "the run", 60, containers_of_run);
}

/// A dynamically linked vibesys finds its command server as
/// `vibesys-static` beside it (what `scripts/build-static.sh --beside DIR`
/// writes): a slurm run needs no VIBESYS_COMMAND_SERVER set by hand.
#[test]
fn a_slurm_run_finds_the_static_vibesys_beside_it() {
    slurm();
    let img = TestImage::new();
    let (_d, p) = project(TASK);
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let place = |from: &std::path::Path, name: &str| {
        let to = dir.path().join(name);
        if std::fs::hard_link(from, &to).is_err() {
            std::fs::copy(from, &to).unwrap();
        }
        to
    };
    let bin = place(std::path::Path::new(vibesys_bin()), "vibesys");
    place(&static_vibesys(), "vibesys-static");
    let out = std::process::Command::new(&bin)
        .current_dir(&p)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        .args(["run", "start", "--run-environment", "slurm"])
        .args(["--provider", "custom", "--", "sh", "-c", &agent()])
        .output()
        .unwrap();
    let table = ok(out);
    assert!(table.contains("environment slurm"), "{table}");
    let run = only_run(&p);
    let log =
        std::fs::read_to_string(p.join(format!(".vibesys/state/runs/{run}/logs/1-agent.log")))
            .unwrap();
    assert!(log.contains("AGENT-SOCKET-OK"), "{log}");
    let env = [
        ("VIBESYS_IMAGES_LOCK", img.lock.to_str().unwrap()),
        ("VIBESYS_DOCKER_IMAGE", img.name.as_str()),
    ];
    assert_eq!(
        candidate(&status_json(&p, &run, &env), 1)["state"],
        "passed"
    );
    assert_nothing_left(&run, "the run", 60, containers_of_run);
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
    assert!(err.contains("scripts/build-static.sh --beside"), "{err}");
    assert_eq!(
        std::fs::read_dir(p.join(".vibesys/state/runs"))
            .unwrap()
            .count(),
        0,
        "a refused run records nothing"
    );
}

/// Ctrl-C, then `kill -9`, of a slurm run while candidate 1's check is a
/// running Slurm job: each time the job is cancelled and the broker and
/// every container are gone; `run resume` continues in slurm (never in
/// another environment) and finishes the run.
#[test]
fn ctrl_c_and_kill_9_mid_job_leave_nothing_and_resume_finishes_in_slurm() {
    slurm();
    let img = TestImage::new();
    // The check marks its start in the evaluation's checkout, then works
    // long enough to be interrupted.
    let task = TASK.replace(
        "argv = [\"sh\", \"evaluator/check.sh\"]",
        "argv = [\"sh\", \"-c\", \"touch check-started && sleep 8 && sh evaluator/check.sh\"]",
    );
    assert_ne!(task, TASK);
    let (_d, p) = project(&task);
    let env = [
        ("VIBESYS_IMAGES_LOCK", img.lock.to_str().unwrap().to_owned()),
        ("VIBESYS_DOCKER_IMAGE", img.name.clone()),
        (
            "VIBESYS_COMMAND_SERVER",
            static_vibesys().to_str().unwrap().to_owned(),
        ),
    ];
    let with_env = |c: &mut std::process::Command| {
        for (k, v) in &env {
            c.env(k, v);
        }
    };
    let mut start = vibesys_in(&p);
    start
        .args(["run", "start", "--run-environment", "slurm"])
        .args(["--provider", "custom", "--candidates", "1"])
        .args(["--", "sh", "-c", AGENT]);
    with_env(&mut start);
    let child = start
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let run = started_run(&p, 60);
    // Check and measure run in a fresh checkout of the commit
    // (`eval-1-*`), never the agent's worktree.
    let candidates = p.join(format!(".vibesys/state/local/candidates/{run}"));
    let marker_exists = || {
        std::fs::read_dir(&candidates).is_ok_and(|d| {
            d.flatten().any(|e| {
                e.file_name().to_string_lossy().starts_with("eval-1-")
                    && e.path().join("check-started").exists()
            })
        })
    };
    let job_running = |what: &str| {
        wait_for(120, what, || marker_exists() && !live_jobs(&run).is_empty());
    };

    // Ctrl-C while the check job runs.
    job_running("candidate 1's check job");
    ok(std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .output()
        .unwrap());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_nothing_left(&run, "Ctrl-C", 60, containers_of_run);
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["state"], "interrupted", "{status:#}");
    assert_eq!(candidate(&status, 1)["state"], "running", "{status:#}");

    // Resume, then kill -9 while the check job runs again.
    let mut resume = vibesys_in(&p);
    resume.args(["run", "resume", &run]);
    with_env(&mut resume);
    let mut child = resume
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(60, "the interrupted evaluation's checkout removed", || {
        !marker_exists()
    });
    job_running("the resumed check job");
    child.kill().unwrap(); // SIGKILL: the broker gets SIGTERM from the kernel
    child.wait().unwrap();
    assert_nothing_left(&run, "kill -9", 60, containers_of_run);
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["state"], "running", "{status:#}");

    // Resume to the end, in slurm.
    let mut resume = vibesys_in(&p);
    resume
        .env("VIBESYS_LOG", "info")
        .args(["run", "resume", &run]);
    with_env(&mut resume);
    let out = resume.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let table = ok(out);
    assert!(table.contains("environment slurm"), "{table}");
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["environment"], "slurm");
    assert_eq!(status["run"]["state"], "finished", "{status:#}");
    let c = candidate(&status, 1);
    assert_eq!(c["state"], "passed", "{c:#}");
    assert_eq!(c["attempts"], 3, "{c:#}");
    assert_eq!(c["evaluated_in"], "slurm job via the run's broker");
    assert!(
        stderr.contains(&format!("job vibesys-{run}-")),
        "the check went to Slurm: {stderr}"
    );
    assert_nothing_left(&run, "the run", 60, containers_of_run);
}

/// In slurm, check and measure are jobs in a fresh checkout of the commit:
/// measure reads what the trusted build made (not the agent's stale
/// file), HOME is the job's fresh `/tmp/home`, the run state is hidden,
/// the evaluator read-only and the network gone.
#[test]
fn slurm_evaluation_loads_the_build_in_a_fresh_checkout() {
    slurm();
    let img = TestImage::new();
    let task = built_value_task(
        r#"set -e
[ "$HOME" = /tmp/home ] || exit 2
[ -z "$(ls -A "$HOME")" ] || exit 3
if ls .vibesys/state/runs | grep -q .; then exit 4; fi
if (echo x >> evaluator/check.sh) 2>/dev/null; then exit 5; fi
[ "$(grep -c : /proc/net/dev)" = 1 ] || exit 6
test -f out/v.txt
"#,
    );
    let (_d, p) = project(&task);
    let agent = BUILT_VALUE_AGENT;
    let out = vibesys_in(&p)
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .args(["run", "start", "--run-environment", "slurm"])
        .args(["--provider", "custom", "--", "sh", "-c", agent])
        .output()
        .unwrap();
    ok(out);
    let run = only_run(&p);
    let env = [
        ("VIBESYS_IMAGES_LOCK", img.lock.to_str().unwrap()),
        ("VIBESYS_DOCKER_IMAGE", img.name.as_str()),
    ];
    let status = status_json(&p, &run, &env);
    let c = candidate(&status, 1);
    let check =
        std::fs::read_to_string(p.join(format!(".vibesys/state/runs/{run}/logs/1-check.log")))
            .unwrap_or_default();
    assert_eq!(c["state"], "passed", "{c:#}\n{check}");
    assert_eq!(c["metrics"]["value"], 17, "{c:#}");
    assert_nothing_left(&run, "the run", 60, containers_of_run);
}

/// `run start --allow-host` reaches the agent jobs of the run's
/// candidates: the run's broker gets the run's list, and a job a
/// candidate's agent submits reaches the listed loopback server through
/// the proxy on the compute node and is refused the other.
#[test]
fn a_runs_allow_list_holds_its_agents_jobs() {
    slurm();
    let img = TestImage::new();
    let (_d, p) = project(&format!(
        "{TASK}\n[vibesys.broker]\ngpu_devices = \"/run/vibesys-slurm/gpu{{}}\"\n\
         [vibesys.agent_gpu]\nenabled = true\n"
    ));
    let allowed = docker_support::common::loopback_http::Server::start("ALLOWED");
    let refused = docker_support::common::loopback_http::Server::start("FORBIDDEN-BODY");
    let (a, r) = (allowed.port, refused.port);
    let agent = format!(
        "/.vibesys/vibesys broker job --socket \"$VIBESYS_BROKER_SOCKET\" -- sh -c \
         'curl -sS http://127.0.0.1:{a}/; echo REFUSED-HTTP $(curl -s -o /dev/null -w %{{http_code}} http://127.0.0.1:{r}/)'\n\
         echo 7 > speed.txt"
    );
    let out = vibesys_in(&p)
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .args(["run", "start", "--run-environment", "slurm"])
        .args(["--allow-host", &format!("127.0.0.1:{a}")])
        .args(["--provider", "custom", "--", "sh", "-c", &agent])
        .output()
        .unwrap();
    ok(out);
    let run = only_run(&p);
    let log =
        std::fs::read_to_string(p.join(format!(".vibesys/state/runs/{run}/logs/1-agent.log")))
            .unwrap();
    assert!(log.contains(&format!("ALLOWED-{a}")), "{log}");
    assert!(log.contains("REFUSED-HTTP 403"), "{log}");
    assert!(
        log.contains(&format!("vibesys: egress refused: 127.0.0.1:{r} ")),
        "{log}"
    );
    assert_eq!(refused.hits(), 0, "{log}");
    assert_nothing_left(&run, "the run", 60, containers_of_run);
}
