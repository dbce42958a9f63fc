//! A newcomer's first hour, end to end with the real binary, bubblewrap,
//! git and the Docker Engine: no dead end. `run start` in a fresh project
//! prepares the run state itself (saying so once, as root and as an
//! unprivileged user); a run whose pinned image is not loaded is refused
//! before anything is written; `policy show` warns of nothing nobody asked
//! for and summarises the Docker seccomp profile (whole in `--json`);
//! `run-env show` calls the default environment available; `vibesys
//! build` shows what the build printed; a candidate stopped by Ctrl-C
//! shows the time it ran.

mod docker_support;
mod run_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use run_support::*;

/// A committed sample project whose run state was never prepared.
fn fresh_project() -> (tempfile::TempDir, PathBuf) {
    unprepared_project_in(&std::env::temp_dir(), TASK)
}

const PREPARED: &str = "vibesys: prepared the run state in ";

/// `run start` in the host environment as `who`: root as this process,
/// the test user through `host_run_as`.
fn host_run(p: &Path, who: As) -> Output {
    let agent = "echo 7 > speed.txt";
    match who {
        As::Root => vibesys_in(p)
            .args(host_run_args(&[], agent))
            .output()
            .unwrap(),
        As::User | As::DockerUser => host_run_as(who, p, &[], agent),
    }
}

fn prepares_once(who: As) {
    require_tool("bwrap", "apt-get install bubblewrap");
    let (d, p) = fresh_project();
    give_to(who, &d, &p);
    assert!(!p.join(".vibesys").exists());
    let first = host_run(&p, who);
    let err = stderr(&first);
    ok(first);
    assert_eq!(err.matches(PREPARED).count(), 1, "{err}");
    assert!(p.join(".vibesys/state/project.json").is_file());
    let second = host_run(&p, who);
    let err = stderr(&second);
    ok(second);
    assert!(!err.contains(PREPARED), "said twice: {err}");
    assert_eq!(
        std::fs::read_dir(p.join(".vibesys/state/runs"))
            .unwrap()
            .count(),
        2
    );
}

#[test]
fn run_start_prepares_missing_run_state_and_says_so_once() {
    prepares_once(As::Root);
}

#[test]
fn run_start_prepares_missing_run_state_as_an_unprivileged_user() {
    require_tool("setpriv", "apt-get install util-linux");
    prepares_once(As::User);
}

#[test]
fn a_run_whose_image_is_not_loaded_is_refused_before_anything_is_written() {
    docker_support::require_docker();
    let (_d, p) = fresh_project();
    // A pin no Engine holds (a name of this test's own, digests of nothing).
    let name = unique("vibesys-not-loaded");
    let digest = |c: char| format!("sha256:{}", c.to_string().repeat(64));
    let lock = p.join("../not-loaded.lock");
    std::fs::write(
        &lock,
        format!(
            "version = 1\n\n[images.{name}]\ntag = \"latest\"\nmanifest_digest = \"{}\"\nconfig_digest = \"{}\"\ndiff_ids = [\"{}\"]\n",
            digest('a'),
            digest('b'),
            digest('c')
        ),
    )
    .unwrap();
    let err = fails(
        vibesys_in(&p)
            .env("VIBESYS_IMAGES_LOCK", &lock)
            .args(["run", "start", "--image", &name, "--provider", "custom"])
            .args(["--", "true"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains(&format!("image {name} is not loaded")),
        "{err}"
    );
    assert!(err.contains("scripts/images.sh"), "names the way: {err}");
    assert!(
        !p.join(".vibesys").exists(),
        "a refused run writes nothing, not even the run state"
    );
}

#[test]
fn policy_show_warns_of_nothing_unasked_and_summarises_the_seccomp_profile() {
    // Outside /tmp, where Landlock can confine it.
    let (_d, p) = unprepared_project_in(&docker_support::common::landlock_safe_dir(), TASK);
    let lock = docker_support::repo_root().join("images/images.lock");
    let out = vibesys_in(&p)
        .env("VIBESYS_IMAGES_LOCK", &lock)
        .args(["policy", "show"])
        .output()
        .unwrap();
    let err = stderr(&out);
    let text = ok(out);
    // Landlock's gaps are in its report, not in a warning nobody asked for.
    assert!(!err.contains("landlock"), "{err}");
    assert!(text.contains("== landlock =="), "{text}");
    assert!(
        text.contains("gap: read-only and hidden paths are not enforced"),
        "{text}"
    );
    let docker = text.split("== docker ==").nth(1).unwrap();
    assert!(
        docker.contains("seccomp=(profile: default SCMP_ACT_"),
        "{docker}"
    );
    assert!(
        !docker.contains("\"syscalls\""),
        "the whole profile: {docker}"
    );
    // --json carries the profile whole.
    let json: serde_json::Value = serde_json::from_str(&ok(vibesys_in(&p)
        .env("VIBESYS_IMAGES_LOCK", &lock)
        .args(["policy", "show", "--backend", "docker", "--json"])
        .output()
        .unwrap()))
    .unwrap();
    let opts = json["backends"]["docker"]["plan"]["security_opt"]
        .as_array()
        .unwrap();
    let profile = opts
        .iter()
        .find_map(|o| o.as_str().unwrap().strip_prefix("seccomp="))
        .unwrap();
    let profile: serde_json::Value = serde_json::from_str(profile).unwrap();
    assert!(!profile["syscalls"].as_array().unwrap().is_empty());
}

#[test]
fn run_env_show_calls_the_default_environment_available() {
    let (_d, p) = fresh_project();
    let text = ok(vibesys_in(&p)
        .args(["run-env", "show", "--run-environment", "docker"])
        .output()
        .unwrap());
    assert!(text.starts_with("docker (default)"), "{text}");
    assert!(text.contains("status:      available\n"), "{text}");
    assert!(!text.contains("partial"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&ok(vibesys_in(&p)
        .args(["run-env", "show", "--json"])
        .output()
        .unwrap()))
    .unwrap();
    assert_eq!(
        json["environments"][0]["availability"]["status"],
        "available"
    );
}

#[test]
fn vibesys_build_shows_what_the_build_printed() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let (_d, p) = fresh_project();
    let task = format!(
        "{TASK}\n[build]\nargv = [\"sh\", \"-c\", \"echo compiling-bench; echo a-warning >&2; printf 'esc\\\\033[2J\\\\n'; mkdir -p out && cp bench/run.sh out/run.sh\"]\noutputs = [\"out/run.sh\"]\n"
    );
    std::fs::write(p.join("vibesys.toml"), task).unwrap();
    ok(vibesys_in(&p).args(["state", "init"]).output().unwrap());
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-q", "-m", "build"]);
    let out = vibesys_in(&p)
        .env("VIBESYS_AGENT_SANDBOX", "bwrap")
        .args(["build", "--run-environment", "host", "--run", "r1"])
        .args(["--commit", "HEAD"])
        .output()
        .unwrap();
    let err = stderr(&out);
    let text = ok(out);
    assert!(text.starts_with("verified build of "), "{text}");
    assert!(text.contains("out/run.sh  sha256:"), "{text}");
    assert!(err.contains("build| compiling-bench\n"), "{err}");
    assert!(err.contains("build| a-warning\n"), "{err}");
    // Candidate output never reaches the terminal raw.
    assert!(err.contains("build| esc\\u{1b}[2J"), "{err}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

#[test]
fn a_candidate_stopped_by_ctrl_c_shows_the_time_it_ran() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let (_d, p) = project(TASK);
    let child = vibesys_in(&p)
        .args(["run", "start", "--run-environment", "host"])
        .args(["--provider", "custom", "--"])
        .args(["sh", "-c", "touch agent-started; sleep 30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let run = started_run(&p, 20);
    let marker = p.join(format!(
        ".vibesys/state/local/candidates/{run}/1/agent-started"
    ));
    wait_for(20, "the agent's turn", || marker.exists());
    std::thread::sleep(std::time::Duration::from_millis(1500));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let status = status_json(&p, &run, &[]);
    let c = candidate(&status, 1);
    assert_eq!(c["state"], "running", "{c:#}");
    assert_eq!(c["phases"]["agent"]["status"], "stopped", "{c:#}");
    let secs = c["phases"]["agent"]["duration_secs"].as_f64().unwrap();
    assert!((1.4..30.0).contains(&secs), "{c:#}");
    assert!(
        c["agent_exit"].is_null(),
        "the stop is not the agent's: {c:#}"
    );
    let table = ok(vibesys_in(&p)
        .args(["run", "status", &run])
        .output()
        .unwrap());
    let row = table.lines().find(|l| l.starts_with("1 ")).unwrap();
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[2], "stop", "{table}");
    let shown: f64 = cols[3].parse().unwrap();
    assert!(shown >= secs, "{table}");
}
