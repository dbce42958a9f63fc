//! `vibesys run` in the host run environment, end to end with the real
//! bubblewrap and git: two candidates (one honest, one cheating), candidate
//! isolation, bad input, `kill -9` then `run resume`, Ctrl-C.

mod docker_support;
mod run_support;

use std::path::Path;
use std::process::{Command, Stdio};

use run_support::*;

fn host_run(p: &Path) -> Command {
    let mut c = vibesys_in(p);
    c.args(["run", "start", "--run-environment", "host"]);
    c
}

#[test]
fn two_candidates_on_the_host_the_cheater_fails_the_gate() {
    require_tool("bwrap", "apt-get install bubblewrap");
    // With a trusted build: it runs confined in a fresh checkout of each
    // committed candidate.
    let task = format!(
        "{TASK}\n[build]\nargv = [\"sh\", \"-c\", \"mkdir -p out && cp bench/run.sh out/run.sh\"]\noutputs = [\"out/run.sh\"]\n"
    );
    let (_d, p) = project(&task);
    let out = host_run(&p)
        .args(["--provider", "custom", "--candidates", "2", "--jobs", "2"])
        .args(["--", "sh", "-c", AGENT])
        .output()
        .unwrap();
    let table = ok(out);
    assert!(table.contains("FAIL"), "{table}");
    let run = only_run(&p);
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["environment"], "host");
    assert_eq!(status["run"]["state"], "finished");
    assert_eq!(
        status["run"]["protected"],
        serde_json::json!(["evaluator", "tests/golden"])
    );
    assert_eq!(
        candidate(&status, 1)["evaluated_in"],
        "host, confined by bwrap"
    );
    assert_eq!(candidate(&status, 1)["phases"]["build"]["status"], "passed");
    let commit = candidate(&status, 1)["commit"].as_str().unwrap().to_owned();
    assert!(
        p.join(format!(".vibesys/state/runs/{run}/builds/{commit}.json"))
            .is_file()
    );
    assert_honest_and_cheater(&p, &status);
    // The agent read its objective through agent-visible/, never runs/.
    let log =
        std::fs::read_to_string(p.join(format!(".vibesys/state/runs/{run}/logs/1-agent.log")))
            .unwrap();
    assert!(log.contains("== stdout"), "{log}");
    assert!(
        p.join(format!(".vibesys/state/agent-visible/{run}/objective.md"))
            .is_file()
    );
    // The human table lists the passed candidate first.
    let text = ok(vibesys_in(&p).args(["run", "status"]).output().unwrap());
    let first = text.lines().nth(2).unwrap();
    assert!(
        first.starts_with("1 ") && first.contains("passed"),
        "{text}"
    );
}

#[test]
fn a_candidate_cannot_reach_another_or_the_run_record() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let (_d, p) = project(TASK);
    let probe = format!(
        "sleep 0.5; P={p}; \
         cat $P/.vibesys/state/runs/*/run.json >/dev/null 2>&1 && echo SAW-RUNS; \
         ls .vibesys/state/runs | grep -q . && echo SAW-OWN-RUNS; \
         cat \"$VIBESYS_OBJECTIVE\" | grep -q Objective && echo READ-OBJECTIVE; \
         echo x > \"$VIBESYS_OBJECTIVE\" 2>/dev/null && echo WROTE-OBJECTIVE; \
         for d in $P/.vibesys/state/local/candidates/*/*; do \
           [ \"$d\" = \"$PWD\" ] && continue; \
           ls \"$d\" >/dev/null 2>&1 && echo SAW-OTHER; \
           echo x > \"$d/intrude.txt\" 2>/dev/null && echo WROTE-OTHER; \
         done > probe.txt 2>&1; \
         echo 7 > speed.txt; true",
        p = p.display()
    );
    // Write the probe's findings outside the loop too.
    let probe = probe.replace("done > probe.txt 2>&1;", "done;") + " ";
    let agent = format!("({probe}) > probe.txt 2>&1; echo 7 > speed.txt");
    ok(host_run(&p)
        .args(["--provider", "custom", "--candidates", "2", "--jobs", "2"])
        .args(["--", "sh", "-c", &agent])
        .output()
        .unwrap());
    let run = only_run(&p);
    let status = status_json(&p, &run, &[]);
    for n in [1, 2] {
        let c = candidate(&status, n);
        assert_eq!(c["state"], "passed", "{c:#}");
        let out = Command::new("git")
            .arg("-C")
            .arg(&p)
            .args(["show", &format!("refs/vibesys/runs/{run}/{n}:probe.txt")])
            .output()
            .unwrap();
        let found = String::from_utf8_lossy(&out.stdout);
        assert!(found.contains("READ-OBJECTIVE"), "{found}");
        for bad in [
            "SAW-RUNS",
            "SAW-OWN-RUNS",
            "WROTE-OBJECTIVE",
            "SAW-OTHER",
            "WROTE-OTHER",
        ] {
            assert!(!found.contains(bad), "candidate {n}: {bad}: {found}");
        }
    }
}

#[test]
fn bad_input_is_named_and_the_record_stays_intact() {
    require_tool("bwrap", "apt-get install bubblewrap");
    // Unknown key and missing [check]: refused before any record.
    let (_d, p) = project(&TASK.replace("protected =", "protect ="));
    // `run start` with the stand-in doing nothing, which must fail.
    let refused_run = || {
        fails(
            host_run(&p)
                .args(["--provider", "custom", "--", "true"])
                .output()
                .unwrap(),
        )
    };
    let err = refused_run();
    assert!(err.contains("unknown field `protect`"), "{err}");
    assert!(
        !p.join(".vibesys/state/runs")
            .read_dir()
            .unwrap()
            .any(|_| true)
    );
    let no_check = TASK.replace(
        "[check]\nargv = [\"sh\", \"evaluator/check.sh\"]\ntimeout_secs = 60\n",
        "",
    );
    std::fs::write(p.join("vibesys.toml"), &no_check).unwrap();
    let err = refused_run();
    assert!(err.contains("no [check]"), "{err}");

    // measure printing no JSON, then 100 MiB: the candidate fails naming it.
    for (measure, expect) in [
        ("echo not-json", "did not print one JSON object"),
        ("true", "printed nothing"),
        ("head -c 104857600 /dev/zero", "printed 104857600 bytes"),
    ] {
        let task = TASK.replace(
            "argv = [\"sh\", \"evaluator/measure.sh\"]",
            &format!("argv = [\"sh\", \"-c\", \"{measure}\"]"),
        );
        std::fs::write(p.join("vibesys.toml"), &task).unwrap();
        let before = runs_of(&p);
        ok(host_run(&p).args(HONEST_AGENT_ARGS).output().unwrap());
        let run = &new_run(&p, &before);
        let status = status_json(&p, run, &[]);
        let c = candidate(&status, 1);
        assert_eq!(c["state"], "failed", "{c:#}");
        assert_eq!(c["phases"]["measure"]["status"], "failed");
        assert!(c["error"].as_str().unwrap().contains(expect), "{c:#}");
        assert_eq!(status["run"]["state"], "finished");
    }

    // A provider not on PATH: named, the run record intact.
    std::fs::write(p.join("vibesys.toml"), TASK).unwrap();
    let before = runs_of(&p);
    let out = host_run(&p)
        .args(["--provider", "custom", "--", "no-such-agent-xyz"])
        .output()
        .unwrap();
    ok(out);
    let status = status_json(&p, &new_run(&p, &before), &[]);
    let c = candidate(&status, 1);
    assert_eq!(c["state"], "failed");
    let err = c["error"].as_str().unwrap();
    assert!(
        err.starts_with("agent: ") && err.contains("\"no-such-agent-xyz\" is not on PATH"),
        "{err}"
    );
    assert!(status["run"]["task"]["digest"].as_str().unwrap().len() == 64);
}

fn runs_of(p: &Path) -> Vec<String> {
    std::fs::read_dir(p.join(".vibesys/state/runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// The one run started since `before` was listed.
fn new_run(p: &Path, before: &[String]) -> String {
    let new: Vec<String> = runs_of(p)
        .into_iter()
        .filter(|r| !before.contains(r))
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    new[0].clone()
}

/// Starts a host run whose agent sleeps, waits until candidate 1 is in its
/// agent turn, and returns the child and the run id.
fn start_sleeping(p: &Path, agent: &str) -> (std::process::Child, String) {
    start_in_turn(host_run(p), p, agent, 20)
}

#[test]
fn kill_9_then_resume_finishes_the_run_in_the_recorded_environment() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let (_d, p) = project(TASK);
    let mark = unique("mark");
    let agent = format!("{SLOW_AGENT} # {mark}");
    let (mut child, run) = start_sleeping(&p, &agent);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["state"], "running");
    // No agent survives its vibesys.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let ps = Command::new("pgrep").args(["-f", &mark]).output().unwrap();
    assert!(ps.stdout.is_empty(), "an agent survived: {:?}", ps.stdout);
    let table = ok(vibesys_in(&p)
        .args(["run", "resume", &run])
        .output()
        .unwrap());
    assert!(table.contains("finished"), "{table}");
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["environment"], "host");
    for n in [1, 2] {
        let c = candidate(&status, n);
        assert_eq!(c["state"], "passed", "{c:#}");
        assert!(c["attempts"].as_u64().unwrap() >= 1);
    }
    assert_eq!(candidate(&status, 1)["attempts"], 2);
}

#[test]
fn ctrl_c_stops_every_candidate_and_the_run_resumes() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let (_d, p) = project(TASK);
    let (child, run) = start_sleeping(&p, SLOW_AGENT);
    let pid = child.id();
    Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["state"], "interrupted");
    assert_eq!(candidate(&status, 1)["state"], "running");
    ok(vibesys_in(&p)
        .args(["run", "resume", &run])
        .output()
        .unwrap());
    let status = status_json(&p, &run, &[]);
    assert_eq!(status["run"]["state"], "finished");
    assert_eq!(candidate(&status, 1)["state"], "passed");
}

#[test]
fn a_host_run_never_starts_an_unconfined_agent() {
    let (_d, p) = project(TASK);
    let err = fails(
        host_run(&p)
            .env("VIBESYS_AGENT_SANDBOX", "off")
            .args(["--provider", "custom", "--", "true"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("sandbox unavailable"), "{err}");
    // slurm without a cluster is not available; with one (tests/run_slurm.rs
    // runs it) this project lacks the pinned editor image. modal and
    // skypilot without their client name it (tests/run_remote.rs runs them
    // up to the network). Nothing is recorded in any case.
    let no_tools = tempfile::tempdir().unwrap();
    let err = fails(
        vibesys_in(&p)
            .args(["run", "start", "--run-environment", "slurm"])
            .args(["--provider", "custom", "--", "true"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("the slurm run environment is not available") || err.contains("images.lock"),
        "{err}"
    );
    for (env, needle) in [
        ("modal", "the Modal client is not installed"),
        ("skypilot", "the SkyPilot client is not installed"),
    ] {
        let err = fails(
            vibesys_in(&p)
                .env("VIBESYS_TOOLS", no_tools.path())
                .args(["run", "start", "--run-environment", env])
                .args(["--provider", "custom", "--", "true"])
                .output()
                .unwrap(),
        );
        assert!(err.contains(needle), "{err}");
    }
    assert_eq!(
        std::fs::read_dir(p.join(".vibesys/state/runs"))
            .unwrap()
            .count(),
        0,
        "a refused run records nothing"
    );
    let err = fails(
        vibesys_in(&p)
            .args(["run", "start", "--docker"])
            .args(["--provider", "custom", "--", "true"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("--run-environment docker"), "{err}");
}

#[test]
fn two_candidates_on_the_host_as_an_unprivileged_user() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("setpriv", "apt-get install util-linux");
    let (d, p) = project(TASK);
    give_to(As::User, &d, &p);
    let as_user = |args: &[&str]| vibesys_as(As::User, &p, args);
    ok(host_run_as(
        As::User,
        &p,
        &["--candidates", "2", "--jobs", "2"],
        AGENT,
    ));
    let run = only_run(&p);
    // Root's git refuses a repository another user owns: read as the user.
    let status: serde_json::Value =
        serde_json::from_str(&ok(as_user(&["run", "status", &run, "--json"]))).unwrap();
    assert_honest_and_cheater(&p, &status);
}

/// On a terminal (a real pseudo-terminal from util-linux's `script`) a run
/// draws one live line per candidate that ends with its result; piped,
/// it writes one plain line per phase and no escape sequence.
#[test]
fn progress_is_live_lines_on_a_terminal_and_plain_lines_when_piped() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("script", "apt-get install bsdutils");
    let (_d, p) = project(TASK);
    let vibesys = vibesys_bin();
    let agent = format!("sleep 0.5\n{AGENT}");
    let mut argv = vec![vibesys];
    argv.extend(host_run_args(&["--candidates", "2"], &agent));
    let line = shell_words(&argv);
    // A terminal wide enough for the whole line.
    let line = format!("stty rows 50 cols 250 && exec {line}");
    let out = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .current_dir(&p)
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{tty}");
    // Lines redrawn in place, one per candidate, each ending with its
    // result; the status table follows.
    assert!(tty.contains("\u{1b}["), "no cursor movement: {tty}");
    assert!(
        !tty.contains("vibesys: candidate"),
        "plain lines on a tty: {tty}"
    );
    let last = |n: u32| {
        tty.rsplit(&format!("candidate {n} ["))
            .next()
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_owned()
    };
    assert!(last(1).contains("→ passed"), "{}", last(1));
    assert!(last(1).contains("agent · commit · gate"), "{}", last(1));
    assert!(
        last(2).contains("gate FAILED → FAILED: gate:"),
        "{}",
        last(2)
    );
    assert!(tty.contains("metrics / error"), "{tty}");

    // Piped: plain lines, nothing else.
    let out = host_run(&p)
        .args(["--provider", "custom", "--candidates", "2"])
        .args(["--", "sh", "-c", AGENT])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ok(out);
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
    for line in [
        "vibesys: candidate 1: agent passed",
        "vibesys: candidate 1: measure passed",
        "vibesys: candidate 2: gate FAILED",
    ] {
        assert!(stderr.contains(line), "{line} in {stderr}");
    }
}

/// `argv` quoted for `sh -c`.
fn shell_words(argv: &[&str]) -> String {
    argv.iter()
        .map(|a| format!("'{}'", a.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}
