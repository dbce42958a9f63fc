//! Trusted evaluation that holds, in the host run environment with the
//! real bubblewrap and git, as root and as an unprivileged user: check and
//! measure load the verified build of the measured commit (never a stale
//! file the agent left), run confined in a fresh checkout with a fresh
//! HOME (planted `.pth`, `.gitconfig` and the candidate's own program
//! reach nothing outside it, see no run state and cannot change the
//! verdict); the commit phase is bounded; `[task] protected` is read-only
//! in `exec` and checked around `vibesys build`.

mod docker_support;
mod run_support;

use std::path::Path;
use std::process::{Command, Output};

use run_support::*;

/// A project with `task` (see `run_support::project`), owned by `who`.
fn project_for(who: As, task: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    require_tool("bwrap", "apt-get install bubblewrap");
    let (d, p) = project(task);
    give_to(who, &d, &p);
    (d, p)
}

fn host_run(who: As, p: &Path, candidates: &str, agent: &str) -> Output {
    host_run_as(who, p, &["--candidates", candidates, "--jobs", "1"], agent)
}

/// Whether `evaluator/check.sh` in `p` is free of the attacks' line.
fn evaluator_untouched(p: &Path) -> bool {
    !std::fs::read_to_string(p.join("evaluator/check.sh"))
        .unwrap()
        .contains("PWNED-LINE")
}

/// TASK with a build that appends a line to the protected evaluator.
fn pwning_build_task() -> String {
    format!(
        "{TASK}\n[build]\nargv = [\"sh\", \"-c\", \"echo PWNED-LINE >> evaluator/check.sh && cp bench/run.sh out.sh\"]\noutputs = [\"out.sh\"]\n"
    )
}

/// `vibesys build` of HEAD in the host environment in `p` as `who`,
/// with `extra` options.
fn build_head(who: As, p: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "build",
        "--run",
        "build-check",
        "--commit",
        "HEAD",
        "--run-environment",
        "host",
    ];
    args.extend_from_slice(extra);
    vibesys_as(who, p, &args)
}

fn status_as(who: As, p: &Path) -> serde_json::Value {
    let run = only_run(p);
    serde_json::from_str(&ok(vibesys_as(who, p, &["run", "status", &run, "--json"]))).unwrap()
}

fn log(p: &Path, run: &str, name: &str) -> String {
    std::fs::read_to_string(p.join(format!(".vibesys/state/runs/{run}/logs/{name}.log")))
        .unwrap_or_default()
}

/// [`project`] where Landlock accepts it (not below /tmp).
fn landlock_project(task: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let base = docker_support::common::landlock_safe_dir().join("eval-trusted");
    std::fs::create_dir_all(&base).unwrap();
    project_in(&base, task)
}

const BUILD_TASK: &str = r#"[task]
objective = "pick a value"
protected = ["evaluator"]

[check]
argv = ["sh", "-c", "test -f out/v.txt"]

[measure]
argv = ["sh", "-c", "printf '{\"value\": %s}' \"$(cat out/v.txt)\""]
metric = "value"
goal = "max"

[build]
argv = ["sh", "-c", "mkdir -p out && cp bench/value.txt out/v.txt"]
outputs = ["out/v.txt"]
"#;

/// Candidate 1 commits a stale `out/v.txt`; candidate 2 leaves one that
/// git ignores. Each measure reads what its build produced.
const BUILD_AGENT: &str = r#"
mkdir -p out
echo 99 > out/v.txt
if [ "$VIBESYS_CANDIDATE" = 1 ]; then
  echo 17 > bench/value.txt
else
  echo 23 > bench/value.txt
  echo out/ >> .gitignore
fi
"#;

#[test]
fn measure_reads_the_build_output_never_the_agents_stale_file() {
    for who in users() {
        let (_d, p) = project_for(who, BUILD_TASK);
        ok(host_run(who, &p, "2", BUILD_AGENT));
        let status = status_as(who, &p);
        for (n, value) in [(1, 17), (2, 23)] {
            let c = candidate(&status, n);
            assert_eq!(c["state"], "passed", "{who:?} {c:#}");
            assert_eq!(c["phases"]["build"]["status"], "passed", "{c:#}");
            assert_eq!(c["metrics"]["value"], value, "{who:?} {c:#}");
        }
        // Candidate 1 committed its stale file: the commit has it, the
        // evaluation got the build's.
        let commit = candidate(&status, 1)["commit"].as_str().unwrap().to_owned();
        let out = Command::new("git")
            .arg("-C")
            .arg(&p)
            .args([
                "-c",
                "safe.directory=*",
                "show",
                &format!("{commit}:out/v.txt"),
            ])
            .output()
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "99\n");
    }
}

/// The evaluator: runs the candidate's program, a Python interpreter and
/// git's global configuration lookup, then compares with the golden
/// output.
const ATTACK_CHECK: &str = r#"out=$(sh bench/run.sh)
/usr/bin/python3 -c 'print("python ran")'
echo "home=$HOME"
ls -A "$HOME"
git config --global user.name
echo "answer=$out"
[ "$out" = "$(cat tests/golden/expected.txt)" ]
"#;

/// The agent plants a `.pth` for the user site of this machine's Python
/// (its own version: a fixed one would plant where nothing looks), a `.gitconfig`,
/// and a program that tries everything while the check runs it.
/// Candidate 1's program prints the wrong answer, candidate 2's the right
/// one.
fn attack_agent(p: &Path, mark: &Path, victim: &Path) -> String {
    let p = p.display();
    let mark = mark.display();
    let victim = victim.display();
    format!(
        r#"
site=.local/lib/$(python3 -c 'import sys; print("python%d.%d" % sys.version_info[:2])')/site-packages
mkdir -p "$site"
echo 'import os; os.system("echo PTH-RAN >&2; touch {p}/PWNED-PTH")' > "$site/x.pth"
printf '[user]\n\tname = PLANTED\n' > .gitconfig
answer=41
[ "$VIBESYS_CANDIDATE" = 2 ] && answer=42
cat > bench/run.sh <<EOF
cat {p}/.vibesys/state/runs/*/run.json >/dev/null 2>&1 && echo SAW-RUNS >&2
ls .vibesys/state/runs 2>/dev/null | grep -q . && echo SAW-OWN-RUNS >&2
echo x >> {p}/README.md 2>/dev/null
echo x >> {victim} 2>/dev/null
echo 'exit 0' > evaluator/check.sh 2>/dev/null && echo WROTE-EVALUATOR >&2
echo $answer > tests/golden/expected.txt 2>/dev/null && echo WROTE-GOLDEN >&2
touch {mark} 2>/dev/null
echo $answer
EOF
"#
    )
}

#[test]
fn planted_files_and_the_candidates_program_cannot_reach_out_or_change_the_verdict() {
    require_tool("python3", "apt-get install python3");
    for who in users() {
        let task = TASK.replace(
            "argv = [\"sh\", \"evaluator/check.sh\"]",
            "argv = [\"sh\", \"evaluator/check.sh\"]\nnetwork = false",
        );
        require_tool("bwrap", "apt-get install bubblewrap");
        let (d, p) = project(&task);
        std::fs::write(p.join("evaluator/check.sh"), ATTACK_CHECK).unwrap();
        std::fs::write(p.join("README.md"), "project\n").unwrap();
        git(&p, &["add", "-A"]);
        git(&p, &["commit", "-q", "-m", "attack check"]);
        give_to(who, &d, &p);
        let mark = std::env::temp_dir().join(unique("vibesys-eval-escape"));
        // A file beside the project the candidate's owner could write.
        let victim = p.parent().unwrap().join("victim.txt");
        std::fs::write(&victim, "victim\n").unwrap();
        if who == As::User {
            let (uid, gid) = test_user();
            std::os::unix::fs::chown(&victim, Some(uid), Some(gid)).unwrap();
        }
        ok(host_run(who, &p, "2", &attack_agent(&p, &mark, &victim)));
        let status = status_as(who, &p);
        let run = status["run"]["run_id"].as_str().unwrap().to_owned();
        let wrong = candidate(&status, 1);
        assert_eq!(wrong["state"], "failed", "{who:?} {wrong:#}");
        assert_eq!(wrong["phases"]["gate"]["status"], "passed", "{wrong:#}");
        assert_eq!(wrong["phases"]["check"]["status"], "failed", "{wrong:#}");
        let right = candidate(&status, 2);
        assert_eq!(right["state"], "passed", "{who:?} {right:#}");
        assert!(
            right["evaluated_in"]
                .as_str()
                .unwrap()
                .starts_with("host, confined by"),
            "{right:#}"
        );
        for n in [1, 2] {
            let check = log(&p, &run, &format!("{n}-check"));
            assert!(check.contains("python ran"), "{who:?} {check}");
            assert!(check.contains("answer=4"), "{check}");
            for bad in [
                "PTH-RAN",
                "PLANTED",
                "SAW-RUNS",
                "SAW-OWN-RUNS",
                "WROTE-EVALUATOR",
                "WROTE-GOLDEN",
            ] {
                assert!(
                    !check.contains(bad),
                    "{who:?} candidate {n}: {bad}\n{check}"
                );
            }
            // A fresh, empty HOME outside every workspace: in the run
            // state (never the project's tree, never the shared /tmp).
            let home = check
                .lines()
                .find_map(|l| l.strip_prefix("home="))
                .unwrap()
                .to_owned();
            assert!(
                Path::new(&home).starts_with(p.join(".vibesys/state/local/candidates")),
                "{home}"
            );
            assert!(!Path::new(&home).exists(), "HOME {home} was removed");
        }
        assert!(!p.join("PWNED-PTH").exists());
        assert_file_is(p.join("README.md"), "project\n");
        assert_file_is(p.join("tests/golden/expected.txt"), "42\n");
        assert_file_is(&victim, "victim\n");
        assert!(!mark.exists(), "the check wrote {}", mark.display());
    }
}

#[test]
fn a_huge_sparse_file_fails_the_commit_phase_quickly_naming_it() {
    require_tool("truncate", "apt-get install coreutils");
    for who in users() {
        let task = TASK.replace(
            "protected = [\"evaluator\"]",
            "protected = [\"evaluator\"]\ncommit_max_total_bytes = 1000",
        );
        let (_d, p) = project_for(who, &task);
        let agent = r#"
if [ "$VIBESYS_CANDIDATE" = 1 ]; then
  truncate -s 3G big.bin
else
  head -c 600 /dev/zero > a.bin; head -c 600 /dev/zero > b.bin
fi
"#;
        ok(host_run(who, &p, "2", agent));
        let status = status_as(who, &p);
        let big = candidate(&status, 1);
        assert_eq!(big["state"], "failed", "{big:#}");
        assert_eq!(big["phases"]["commit"]["status"], "failed", "{big:#}");
        let err = big["error"].as_str().unwrap();
        assert!(
            err.contains("big.bin") && err.contains("commit_max_file_bytes"),
            "{err}"
        );
        assert!(
            big["phases"]["commit"]["duration_secs"].as_f64().unwrap() < 5.0,
            "{big:#}"
        );
        let many = candidate(&status, 2);
        let err = many["error"].as_str().unwrap();
        assert!(
            err.contains("commit_max_total_bytes") && err.contains(".bin"),
            "{err}"
        );
    }
}

#[test]
fn protected_paths_are_read_only_in_exec_and_session() {
    for who in users() {
        let (_d, p) = project_for(who, TASK);
        let out = vibesys_as(
            who,
            &p,
            &[
                "exec",
                "--",
                "sh",
                "-c",
                "echo PWNED-LINE >> evaluator/check.sh; echo y > evaluator/new",
            ],
        );
        assert_ne!(out.status.code(), Some(0), "{who:?}");
        assert!(evaluator_untouched(&p), "{who:?}");
        assert!(!p.join("evaluator/new").exists());
        let out = vibesys_as(
            who,
            &p,
            &[
                "session",
                "--provider",
                "custom",
                "--confine",
                "bwrap",
                "--",
                "sh",
                "-c",
                "echo PWNED-LINE >> evaluator/check.sh",
            ],
        );
        assert_ne!(out.status.code(), Some(0), "{who:?}");
        assert!(evaluator_untouched(&p), "{who:?}");
        // The rest of the project stays writable.
        ok(vibesys_as(
            who,
            &p,
            &["exec", "--", "sh", "-c", "echo z > bench/new"],
        ));
    }
}

#[test]
fn vibesys_build_refuses_a_build_that_changes_a_protected_path() {
    for who in users() {
        let (_d, p) = project_for(who, &pwning_build_task());
        let out = build_head(who, &p, &[]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(1), "{who:?} {err}");
        assert!(
            err.contains("evaluator/check.sh: Read-only file system"),
            "{who:?} {err}"
        );
        assert!(evaluator_untouched(&p));
    }
}

/// Landlock cannot keep a path read-only inside the checkout: the
/// comparison of the protected paths before and after the build refuses
/// what it lets through, naming the file.
#[test]
fn a_landlock_build_that_changes_a_protected_path_is_refused_naming_it() {
    let (_d, q) = landlock_project(&pwning_build_task());
    let out = build_head(As::Root, &q, &["--confine", "landlock"]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the build changed protected paths")
            && err.contains("changed evaluator/check.sh"),
        "{err}"
    );
}

/// Under Landlock (which cannot keep a path read-only inside the
/// checkout) the evaluation still loads the build's output, and a
/// candidate program that appends `exit 0` to the running evaluator (so
/// that its wrong answer exits 0) fails the candidate, naming the file:
/// the protected paths are compared after each command.
#[test]
fn under_landlock_the_evaluation_loads_the_build_and_a_changed_evaluator_fails_it() {
    let task = format!(
        "{}\n[build]\nargv = [\"sh\", \"-c\", \"cp bench/value.txt out.txt\"]\noutputs = [\"out.txt\"]\n",
        TASK.replace(
            "argv = [\"sh\", \"evaluator/measure.sh\"]",
            "argv = [\"sh\", \"-c\", \"printf '{\\\"time_ms\\\": %s}' $(cat out.txt)\"]"
        )
    );
    let (_d, q) = landlock_project(&task);
    let agent = r#"
echo 99 > out.txt
if [ "$VIBESYS_CANDIDATE" = 1 ]; then
  echo 7 > bench/value.txt
else
  echo 8 > bench/value.txt
  printf 'echo "exit 0 # PWNED-LINE" >> evaluator/check.sh\necho 41\n' > bench/run.sh
fi
"#;
    let out = Command::new(vibesys_bin())
        .args(["run", "start", "--run-environment", "host"])
        .args(["--provider", "custom", "--candidates", "2", "--jobs", "1"])
        .args(["--", "sh", "-c", agent])
        .current_dir(&q)
        .env("VIBESYS_AGENT_SANDBOX", "landlock")
        .output()
        .unwrap();
    ok(out);
    let run = only_run(&q);
    let status = status_json(&q, &run, &[]);
    let honest = candidate(&status, 1);
    assert_eq!(honest["state"], "passed", "{honest:#}");
    assert_eq!(honest["metrics"]["time_ms"], 7, "{honest:#}");
    assert!(
        honest["evaluated_in"]
            .as_str()
            .unwrap()
            .contains("landlock"),
        "{honest:#}"
    );
    let cheat = candidate(&status, 2);
    assert_eq!(cheat["state"], "failed", "{cheat:#}");
    assert_eq!(cheat["phases"]["check"]["status"], "failed", "{cheat:#}");
    let err = cheat["error"].as_str().unwrap();
    assert!(
        err.contains("protected paths changed while check ran")
            && err.contains("changed evaluator/check.sh"),
        "{err}"
    );
    // The project's evaluator is untouched.
    assert!(evaluator_untouched(&q));
}

/// Under Landlock `/tmp` is shared by every confined process of the user,
/// so the evaluation's fresh `HOME` must not live there: another
/// candidate's agent, running at the same time (`--jobs 2`), would plant
/// code in it (a `.pth`, a `.bashrc`) that the first candidate's protected
/// check then runs. Here candidate 2's agent waits for candidate 1's check
/// to name its `HOME` (in a directory both may write), writes into it,
/// and candidate 1's check fails if the plant arrived.
#[test]
fn under_landlock_another_candidate_cannot_write_the_evaluations_home() {
    for who in users() {
        let shared = tempfile::tempdir().unwrap();
        let s = shared.path().display().to_string();
        let st = Command::new("chmod").args(["0777", &s]).status().unwrap();
        assert!(st.success());
        let check = format!(
            "if [ -f iam1 ]; then echo \"$HOME\" > {s}/home; i=0; \
             while [ ! -f {s}/tried ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
             if [ -e \"$HOME/planted\" ]; then echo PLANTED; exit 1; fi; fi"
        );
        let task = format!(
            "[task]\nobjective = \"x\"\nprotected = [\"evaluator\"]\n\n[check]\nargv = [\"sh\", \"-c\", {check:?}]\ntimeout_secs = 60\n"
        );
        let (d, q) = landlock_project(&task);
        give_to(who, &d, &q);
        let agent = format!(
            "if [ \"$VIBESYS_CANDIDATE\" = 1 ]; then touch iam1; exit 0; fi; i=0; \
             while [ ! -f {s}/home ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done; \
             h=$(cat {s}/home); echo x > \"$h/planted\" && echo PLANTED-IT; touch {s}/tried"
        );
        let args = host_run_args(&["--candidates", "2", "--jobs", "2"], &agent);
        let out = command_as(who, &q, &docker_support::common::vibesys(), &args)
            .env("VIBESYS_AGENT_SANDBOX", "landlock")
            .output()
            .unwrap();
        ok(out);
        let run = only_run(&q);
        assert!(
            shared.path().join("tried").exists(),
            "{who:?}: the attacker never saw the HOME"
        );
        let status = status_as(who, &q);
        let victim = candidate(&status, 1);
        assert_eq!(
            victim["state"],
            "passed",
            "{who:?}: {victim:#}\n{}\n{}",
            log(&q, &run, "1-check"),
            log(&q, &run, "2-agent")
        );
        assert!(!log(&q, &run, "2-agent").contains("PLANTED-IT"), "{who:?}");
    }
}

/// check runs the candidate's program in the writable checkout, before
/// measure: a program that rewrites the build's output there (so that
/// measure loads something the build never produced) fails the
/// candidate, naming the output; measure never reads the rewrite.
#[test]
fn a_build_output_rewritten_while_check_runs_fails_the_candidate() {
    let task = BUILD_TASK.replace(
        "argv = [\"sh\", \"-c\", \"test -f out/v.txt\"]",
        "argv = [\"sh\", \"-c\", \"test -f out/v.txt && sh bench/run.sh\"]",
    );
    let agent = r#"
echo 17 > bench/value.txt
if [ "$VIBESYS_CANDIDATE" = 2 ]; then
  echo 'echo 1000 > out/v.txt' > bench/run.sh
fi
"#;
    for who in users() {
        let (_d, p) = project_for(who, &task);
        ok(host_run(who, &p, "2", agent));
        let status = status_as(who, &p);
        let honest = candidate(&status, 1);
        assert_eq!(honest["state"], "passed", "{who:?} {honest:#}");
        assert_eq!(honest["metrics"]["value"], 17, "{who:?} {honest:#}");
        let cheat = candidate(&status, 2);
        assert_eq!(cheat["state"], "failed", "{who:?} {cheat:#}");
        assert_eq!(cheat["phases"]["check"]["status"], "failed", "{cheat:#}");
        assert!(cheat["metrics"].is_null(), "{who:?} {cheat:#}");
        let err = cheat["error"].as_str().unwrap();
        assert!(
            err.contains("build output out/v.txt changed while check ran"),
            "{who:?} {err}"
        );
    }
}
