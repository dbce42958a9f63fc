//! End-to-end: what the confined launcher executes, and how, with the
//! real kernel, bwrap and Landlock, as root and as an unprivileged user.
//! The launcher starts the command from a process that shares vibesys's
//! memory (no fork of vibesys) and searches `PATH` itself: the command
//! must start exactly as `execvp` from a clean child would start it.

mod common;

use std::os::unix::fs::PermissionsExt;

use common::*;

const BACKENDS: [&str; 2] = ["bwrap", "landlock"];

fn write_mode(path: &std::path::Path, text: &str, mode: u32) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn chown_to(who: As, paths: &[&std::path::Path]) {
    if who == As::User {
        let (uid, gid) = test_user();
        let status = std::process::Command::new("chown")
            .args(["-R", &format!("{uid}:{gid}")])
            .args(paths)
            .status()
            .unwrap();
        assert!(status.success());
    }
}

fn exec(who: As, p: &Project, backend: &str, path_var: &str, cmd: &[&str]) -> std::process::Output {
    let mut args = vec!["exec", "--confine", backend, "--"];
    args.extend_from_slice(cmd);
    command_as(who, &p.root, &vibesys(), &args)
        .env("PATH", path_var)
        .output()
        .unwrap()
}

/// A file without `#!` runs under `/bin/sh`, as execvp runs it.
#[test]
fn a_script_without_an_interpreter_line_runs_with_sh() {
    for who in users() {
        let p = project(who);
        write_mode(&p.root.join("plain"), "echo PLAIN-SCRIPT \"$@\"\n", 0o755);
        chown_to(who, &[&p.root]);
        for backend in BACKENDS {
            let out = exec(who, &p, backend, "/usr/bin:/bin", &["./plain", "a b", "c"]);
            assert_code(&out, 0);
            assert_eq!(stdout(&out), "PLAIN-SCRIPT a b c\n", "{who:?} {backend}");
        }
    }
}

/// The `PATH` search skips a match that cannot be executed and takes the
/// next one; with only such matches the status is 126, with none 127, and
/// an empty program is vibesys's own error (125). Under bwrap the search
/// is bwrap's own `execvp` inside the sandbox, which reports a failure as
/// bwrap's status 1: vibesys looks the program up on the host first
/// (before, bwrap's 1 came back for all three).
#[test]
fn path_search_is_execvps() {
    for who in users() {
        let p = project(who);
        for dir in ["bin1", "bin2"] {
            std::fs::create_dir_all(p.root.join(dir)).unwrap();
        }
        write_mode(&p.root.join("bin1/tool"), "#!/bin/sh\necho WRONG\n", 0o644);
        write_mode(&p.root.join("bin2/tool"), "#!/bin/sh\necho RIGHT\n", 0o755);
        write_mode(
            &p.root.join("bin1/only-here"),
            "#!/bin/sh\necho NO\n",
            0o644,
        );
        chown_to(who, &[&p.root]);
        let path = format!(
            "{}:{}:/usr/bin:/bin",
            p.root.join("bin1").display(),
            p.root.join("bin2").display()
        );
        for backend in BACKENDS {
            let out = exec(who, &p, backend, &path, &["tool"]);
            assert_code(&out, 0);
            assert_eq!(stdout(&out), "RIGHT\n", "{who:?} {backend}");
            let out = exec(who, &p, backend, &path, &["only-here"]);
            assert_code(&out, 126);
            let out = exec(who, &p, backend, &path, &["./bin1"]);
            assert_code(&out, 126);
            let out = exec(who, &p, backend, &path, &[""]);
            assert_code(&out, 125);
            let out = exec(who, &p, backend, &path, &["./no-such-file"]);
            assert_code(&out, 127);
            let out = exec(who, &p, backend, &path, &["no-such-tool-anywhere"]);
            assert_code(&out, 127);
            assert!(
                stderr(&out).contains("no-such-tool-anywhere"),
                "{who:?} {backend}: {}",
                stderr(&out)
            );
        }
    }
}

/// The command starts with no signal blocked and no standard signal
/// ignored that the operator did not ignore (vibesys blocks the ones it
/// forwards, and std ignores SIGPIPE; SIGHUP ignored by `nohup`, or
/// whatever the test was started with ignored, stays ignored, as across
/// any exec), in the directory it was started from, with exactly the
/// allow-listed environment. (glibc's two internal real-time signals, 32
/// and 33, show as ignored in every child a Rust test process spawns,
/// before vibesys runs: they are left out of the check.)
/// Signals 1 to 31, the bits of a `/proc/PID/status` signal mask.
const STANDARD: u64 = 0x7fff_ffff;

/// The signal mask `field` (`SigIgn:`, `SigBlk:`) of a `/proc/PID/status`.
fn signal_mask(status: &str, field: &str) -> u64 {
    let value = status.lines().find_map(|l| l.strip_prefix(field)).unwrap();
    u64::from_str_radix(value.trim(), 16).unwrap()
}

#[test]
fn the_command_starts_clean() {
    // What the test was started with ignored (a shell's background job)
    // is the operator's choice, which any exec keeps: a plain child shows
    // it (std resets its own SIGPIPE there). `nohup` adds SIGHUP.
    let plain = std::process::Command::new("cat")
        .arg("/proc/self/status")
        .output()
        .unwrap();
    let operator_ignored =
        (signal_mask(&String::from_utf8_lossy(&plain.stdout), "SigIgn:") | 1) & STANDARD;
    for who in users() {
        let p = project(who);
        std::fs::create_dir_all(p.root.join("sub/dir")).unwrap();
        chown_to(who, &[&p.root]);
        for backend in BACKENDS {
            let program = vibesys();
            let out = command_as(
                who,
                &p.root.join("sub/dir"),
                std::path::Path::new("/usr/bin/nohup"),
                &[
                    program.to_str().unwrap(),
                    "exec",
                    "--confine",
                    backend,
                    "--",
                    "cat",
                    "/proc/self/status",
                ],
            )
            .env("SECRET_TOKEN", "must-not-pass")
            .output()
            .unwrap();
            assert_code(&out, 0);
            let status = stdout(&out);
            assert_eq!(
                signal_mask(&status, "SigBlk:"),
                0,
                "{who:?} {backend}: {status}"
            );
            assert_eq!(
                signal_mask(&status, "SigIgn:") & STANDARD,
                operator_ignored,
                "{who:?} {backend}: {status}"
            );
            let out = exec_sh_command(who, &p.root.join("sub/dir"), backend, "pwd; env")
                .env("SECRET_TOKEN", "must-not-pass")
                .output()
                .unwrap();
            assert_code(&out, 0);
            let text = stdout(&out);
            assert!(
                text.starts_with(&format!("{}\n", p.root.join("sub/dir").display())),
                "{who:?} {backend}: {text}"
            );
            assert!(!text.contains("SECRET_TOKEN"), "{who:?} {backend}: {text}");
            assert!(text.contains("PATH=/usr/local/bin:/usr/bin:/bin"), "{text}");
        }
    }
}
