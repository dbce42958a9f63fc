//! LocalShellRunner against real processes: output bounds, process-tree
//! kill, exit statuses, stdin, environment, errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use vs_sandbox::runner::{
    CancellationToken, CommandRunner, CommandSpec, LocalShellRunner, RunnerError,
};

const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

fn sh(script: &str) -> CommandSpec {
    CommandSpec::new(["sh", "-c", script], "/").env("PATH", PATH)
}

/// A number no other run of any test uses, valid as a `sleep` argument
/// (GNU sleep adds its arguments up), so survivors can be found in /proc.
fn marker() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "0.000{}{:09}{}",
        std::process::id(),
        nanos,
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Pids whose command line contains `marker`; kills them so a failing test
/// does not litter the machine, then returns them.
fn survivors(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(marker) {
            let _ = std::process::Command::new("kill")
                .args(["-9", &name])
                .status();
            found.push(format!("{name}: {cmdline}"));
        }
    }
    found
}

/// Survivors may need a moment to be reaped by whoever adopted them; a
/// zombie has an empty cmdline, so only live processes count.
fn assert_no_survivors(marker: &str) {
    let s = survivors(marker);
    assert!(s.is_empty(), "processes survived: {s:?}");
}

#[test]
fn exit_code_and_output_pass_through() {
    let r = LocalShellRunner::new()
        .run(&sh("printf out; printf err >&2; exit 3"))
        .unwrap();
    assert_eq!(r.exit_code, 3);
    assert_eq!(r.signal, None);
    assert_eq!(r.stdout.bytes(), b"out");
    assert_eq!(r.stderr.bytes(), b"err");
    assert!(!r.timed_out && !r.cancelled && !r.success());
    assert_eq!(r.stdout.dropped_bytes(), 0);
}

#[test]
fn killed_by_signal_reports_128_plus_n() {
    let r = LocalShellRunner::new().run(&sh("kill -TERM $$")).unwrap();
    assert_eq!((r.exit_code, r.signal), (143, Some(15)));
    let r = LocalShellRunner::new().run(&sh("kill -KILL $$")).unwrap();
    assert_eq!((r.exit_code, r.signal), (137, Some(9)));
}

#[test]
fn head_and_tail_are_kept_and_the_gap_counted() {
    let runner = LocalShellRunner::new().with_output_cap(1000);
    let r = runner
        .run(&sh(
            "printf START; head -c 5000000 /dev/zero | tr '\\0' x; printf END; \
             printf ESTART >&2; head -c 7000 /dev/zero | tr '\\0' y >&2; printf EEND >&2",
        ))
        .unwrap();
    assert_eq!(r.exit_code, 0);
    let out = &r.stdout;
    assert_eq!(out.total_bytes(), 5_000_008);
    assert_eq!(out.dropped_bytes(), 5_000_008 - 1000);
    assert_eq!(out.head().len(), 500);
    assert_eq!(out.tail().len(), 500);
    assert!(out.head().starts_with(b"START"));
    assert!(out.head()[5..].iter().all(|&b| b == b'x'));
    assert!(out.tail().ends_with(b"END"));
    assert!(out.tail()[..497].iter().all(|&b| b == b'x'));
    let text = out.text_lossy();
    assert!(
        text.contains("\n[... 4999008 bytes dropped ...]\n"),
        "{}",
        &text[..600]
    );
    let err = &r.stderr;
    assert_eq!(err.total_bytes(), 6 + 7000 + 4);
    assert!(err.head().starts_with(b"ESTART") && err.tail().ends_with(b"EEND"));
    assert_eq!(err.dropped_bytes(), 7010 - 1000);
}

#[test]
fn timeout_kills_the_whole_tree_including_session_escapers() {
    let m = marker();
    // A setsid'd grandchild, a double-forked setsid'd great-grandchild whose
    // parent exits at once, and the shell itself, all sleeping for 1000 s.
    let script = format!(
        "setsid sleep 1000 {m} & \
         (setsid sh -c 'sleep 1000 {m} & exit 0' &) ; \
         sleep 1000 {m}"
    );
    let t0 = Instant::now();
    let r = LocalShellRunner::new()
        .run(&sh(&script).timeout(Duration::from_millis(700)))
        .unwrap();
    let took = t0.elapsed();
    assert!(r.timed_out && !r.cancelled);
    assert_eq!((r.exit_code, r.signal), (137, Some(9)));
    assert!(took < Duration::from_secs(10), "took {took:?}");
    assert!(r.duration >= Duration::from_millis(700));
    assert_no_survivors(&m);
}

#[test]
fn a_grandchild_holding_stdout_does_not_block_the_return() {
    let m = marker();
    // The shell exits at once; its setsid'd child keeps stdout open.
    let t0 = Instant::now();
    let r = LocalShellRunner::new()
        .run(&sh(&format!("setsid sleep 1000 {m} & echo done")))
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(r.exit_code, 0);
    assert!(!r.timed_out);
    assert_eq!(r.stdout.bytes(), b"done\n");
    // Leftovers of a finished command are killed too.
    assert_no_survivors(&m);
}

#[test]
fn cancellation_kills_the_tree() {
    let m = marker();
    let token = CancellationToken::new();
    let t = token.clone();
    let canceller = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        t.cancel();
    });
    let t0 = Instant::now();
    let r = LocalShellRunner::new()
        .run(&sh(&format!("setsid sleep 1000 {m} & sleep 1000 {m}")).cancel_token(token))
        .unwrap();
    canceller.join().unwrap();
    assert!(r.cancelled && !r.timed_out);
    assert_eq!(r.signal, Some(9));
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_no_survivors(&m);
}

#[test]
fn stdin_is_delivered_while_both_outputs_are_drained() {
    // 3 MB in, written to stderr first then echoed to stdout: with
    // sequential pipe handling this would deadlock.
    let input: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let r = LocalShellRunner::new()
        .with_output_cap(8 << 20)
        .run(&sh("head -c 3000000 /dev/zero >&2; cat").stdin(input.clone()))
        .unwrap();
    assert_eq!(r.exit_code, 0);
    assert_eq!(r.stdout.bytes(), &input[..]);
    assert_eq!(r.stderr.total_bytes(), 3_000_000);
}

#[test]
fn stdin_not_read_by_the_command_is_not_fatal() {
    let r = LocalShellRunner::new()
        .run(&sh("exit 0").stdin(vec![b'a'; 10 << 20]))
        .unwrap();
    assert_eq!(r.exit_code, 0);
}

#[test]
fn without_stdin_the_command_reads_eof() {
    let r = LocalShellRunner::new().run(&sh("wc -c")).unwrap();
    assert_eq!(r.stdout.text_lossy().trim(), "0");
}

#[test]
fn only_the_explicit_environment_reaches_the_command() {
    let r = LocalShellRunner::new()
        .run(&CommandSpec::new(["/usr/bin/env"], "/").env("ONLY_THIS", "1"))
        .unwrap();
    assert_eq!(r.stdout.bytes(), b"ONLY_THIS=1\n");

    // Inheriting is explicit, and the explicit entries win.
    let (name, value) = std::env::vars()
        .next()
        .expect("the test has some environment");
    let r = LocalShellRunner::new()
        .run(
            &CommandSpec::new(["/usr/bin/env"], "/")
                .inherit_env(true)
                .env("ONLY_THIS", "2"),
        )
        .unwrap();
    let text = r.stdout.text_lossy();
    assert!(text.contains(&format!("{name}={value}\n")), "{text}");
    assert!(text.contains("ONLY_THIS=2\n"), "{text}");
}

#[test]
fn program_is_looked_up_in_the_commands_own_path() {
    let err = LocalShellRunner::new()
        .run(&CommandSpec::new(["sh", "-c", "true"], "/").env("PATH", "/nonexistent"))
        .unwrap_err();
    assert!(
        matches!(&err, RunnerError::ProgramNotFound { program, search_path }
            if program == "sh" && search_path == "/nonexistent"),
        "{err}"
    );
    // No PATH at all: the documented default, not vibesys's PATH.
    let r = LocalShellRunner::new()
        .run(&CommandSpec::new(["sh", "-c", "echo ok"], "/"))
        .unwrap();
    assert_eq!(r.stdout.bytes(), b"ok\n");
}

#[test]
fn working_directory_is_used_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let r = LocalShellRunner::new()
        .run(&CommandSpec::new(["/bin/pwd", "-P"], dir.path()))
        .unwrap();
    let expected = dir.path().canonicalize().unwrap();
    assert_eq!(r.stdout.text_lossy().trim_end(), expected.to_str().unwrap());

    let missing = dir.path().join("missing");
    let err = LocalShellRunner::new()
        .run(&CommandSpec::new(["/bin/true"], &missing))
        .unwrap_err();
    assert!(
        matches!(&err, RunnerError::WorkingDirectory { path, .. } if path == &missing),
        "{err}"
    );
}

#[test]
fn exec_failure_is_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-executable");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    let err = LocalShellRunner::new()
        .run(&CommandSpec::new([script.as_os_str()], dir.path()))
        .unwrap_err();
    match err {
        RunnerError::Exec { program, source } => {
            assert_eq!(program, script);
            assert_eq!(source.kind(), std::io::ErrorKind::PermissionDenied);
        }
        other => panic!("unexpected {other}"),
    }
    let err = LocalShellRunner::new()
        .run(&CommandSpec::new(Vec::<String>::new(), "/"))
        .unwrap_err();
    assert!(matches!(err, RunnerError::EmptyCommand), "{err}");
    let err = LocalShellRunner::new()
        .run(&CommandSpec::new(["/bin/true"], "/").env("A=B", "x"))
        .unwrap_err();
    assert_eq!(err.to_string(), "invalid environment variable name \"A=B\"");
}

#[test]
fn result_serialises_to_stable_json() {
    let r = LocalShellRunner::new()
        .run(&sh("printf 'a\\377'; printf text >&2; exit 2"))
        .unwrap();
    let j = serde_json::to_value(&r).unwrap();
    let keys: Vec<&str> = j.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "exit_code",
            "signal",
            "timed_out",
            "cancelled",
            "duration_secs",
            "stdout",
            "stderr"
        ]
    );
    assert_eq!(j["exit_code"], 2);
    assert_eq!(j["stdout"]["encoding"], "base64");
    assert_eq!(j["stdout"]["head"], "Yf8=");
    assert_eq!(j["stderr"]["encoding"], "utf-8");
    assert_eq!(j["stderr"]["head"], "text");
    let back: vs_sandbox::runner::CommandResult = serde_json::from_value(j).unwrap();
    assert_eq!(back.stdout, r.stdout);
    assert_eq!(back.stderr, r.stderr);
}

#[test]
fn many_concurrent_runs_do_not_interfere() {
    let handles: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let r = LocalShellRunner::new()
                    .run(&sh(&format!("echo {i}; exit {i}")))
                    .unwrap();
                assert_eq!(r.exit_code, i);
                assert_eq!(r.stdout.text_lossy(), format!("{i}\n"));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn cwd_relative_program_path() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("hello");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::process::Command::new("chmod")
        .args(["+x"])
        .arg(&script)
        .status()
        .unwrap();
    assert!(Path::new(&script).exists());
    let r = LocalShellRunner::new()
        .run(&CommandSpec::new(["./hello"], dir.path()))
        .unwrap();
    assert_eq!(r.stdout.bytes(), b"hi\n");
}

/// Not a test of its own: the body of the process that
/// `killing_the_runner_process_kills_the_tree` starts and then SIGKILLs.
/// Does nothing unless that test set `VS_RUNNER_HELPER_MARKER`.
#[test]
fn helper_process_for_parent_death() {
    let Some(m) = std::env::var_os("VS_RUNNER_HELPER_MARKER") else {
        return;
    };
    let m = m.to_string_lossy().into_owned();
    let _ = LocalShellRunner::new().run(&sh(&format!(
        "setsid sleep 1000 {m} & (setsid sh -c 'sleep 1000 {m} & exit 0' &) ; sleep 1000 {m}"
    )));
}

#[test]
fn killing_the_runner_process_kills_the_tree() {
    let m = marker();
    let mut helper = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "helper_process_for_parent_death", "--nocapture"])
        .env("VS_RUNNER_HELPER_MARKER", &m)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait until all three sleeps run (the tree is fully formed).
    let live = |m: &str| {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                    c.starts_with(b"sleep\0") && String::from_utf8_lossy(&c).contains(m)
                })
            })
            .count()
    };
    let t0 = Instant::now();
    while live(&m) < 3 {
        assert!(t0.elapsed() < Duration::from_secs(10), "tree never formed");
        std::thread::sleep(Duration::from_millis(20));
    }
    // vibesys dies without any chance to clean up.
    helper.kill().unwrap();
    helper.wait().unwrap();
    let t0 = Instant::now();
    while live(&m) > 0 && t0.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_no_survivors(&m);
}
