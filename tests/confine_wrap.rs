//! `Confinement::wrap` end to end: the argv it returns, run as is, starts
//! the command confined through the hidden helpers (`internal-launch` for
//! bwrap, `internal-landlock` for Landlock).

mod common;

use std::ffi::OsString;

use common::*;
use vs_sandbox::config::PolicyConfig;
use vs_sandbox::{
    BwrapOptions, Confinement, HostResources, HostSandbox, LandlockOptions, LandlockSandbox,
    Workspace,
};

fn resolved(p: &Project) -> vs_sandbox::ResolvedPolicy {
    let ws = Workspace::open(&p.root).unwrap();
    PolicyConfig::load(ws.root())
        .unwrap()
        .policy()
        .unwrap()
        .resolve(&ws)
        .unwrap()
}

fn run(argv: Vec<OsString>, p: &Project) -> std::process::Output {
    std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(&p.root)
        .output()
        .unwrap()
}

const SCRIPT: &str = "cat token.txt; ls -A secret; echo x > docs/readme 2>/dev/null && echo RO-WRITTEN; echo ok > w && cat w";

#[test]
fn wrapped_bwrap_argv_confines() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let p = project(As::Root);
    let policy = resolved(&p);
    let sandbox = HostSandbox::new(
        &policy,
        &HostResources::system(),
        &BwrapOptions {
            program: "/usr/bin/bwrap".into(),
            network: false,
            egress: None,
            chdir: None,
            helper: vibesys(),
            writable: Vec::new(),
            private_files: Vec::new(),
            max_processes: 4096,
            proc_read_only: vs_sandbox::proc_cover::read_only_entries("/proc".as_ref()),
            devices: Vec::new(),
        },
    )
    .unwrap();
    let argv = sandbox
        .wrap(&["sh".into(), "-c".into(), SCRIPT.into()])
        .unwrap();
    let out = run(argv, &p);
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "ok\n", "{}", stderr(&out));
    assert!(sandbox.report().is_complete());
    // A program that cannot be run: the helper's 127 and 126, as under
    // Landlock, not bwrap's own status 1.
    for (program, code) in [("no-such-program", 127), ("./docs", 126)] {
        let out = run(sandbox.wrap(&[program.into()]).unwrap(), &p);
        assert_code(&out, code);
        assert_stderr_has(&out, program);
    }
}

#[test]
fn wrapped_landlock_argv_confines_and_reports_gaps() {
    let p = project(As::Root);
    let policy = resolved(&p);
    let sandbox = LandlockSandbox::new(
        &policy,
        &HostResources::system(),
        &LandlockOptions {
            network: true,
            helper: vibesys(),
            writable: Vec::new(),
            max_processes: 4096,
            chdir: None,
            egress: None,
        },
    )
    .unwrap();
    let outside = p.outside.join("private").display().to_string();
    let argv = sandbox
        .wrap(&[
            "sh".into(),
            "-c".into(),
            format!("cat {outside} 2>/dev/null && echo OUTSIDE; {SCRIPT}").into(),
        ])
        .unwrap();
    let out = run(argv, &p);
    assert_code(&out, 0);
    // The documented gaps: hidden content readable, read-only writable.
    assert_eq!(
        stdout(&out),
        "TOKEN-VALUE\nkey\nRO-WRITTEN\nok\n",
        "{}",
        stderr(&out)
    );
    let gaps: Vec<_> = sandbox
        .report()
        .not_enforced()
        .map(|g| g.path.clone())
        .collect();
    assert_eq!(gaps.len(), 3, "{gaps:?}");
}

#[test]
fn helper_exit_codes_are_distinct() {
    let usage = std::process::Command::new(vibesys())
        .args(["internal-landlock", "--bogus"])
        .output()
        .unwrap();
    assert_code(&usage, 122);
    let not_found = std::process::Command::new(vibesys())
        .args([
            "internal-landlock",
            "--read",
            "/usr",
            "--",
            "/no/such/program",
        ])
        .output()
        .unwrap();
    assert_code(&not_found, 127);
    let cannot_exec = std::process::Command::new(vibesys())
        .args(["internal-landlock", "--read", "/usr", "--", "/etc/hostname"])
        .output()
        .unwrap();
    assert_code(&cannot_exec, 126);
    let usage = std::process::Command::new(vibesys())
        .args(["internal-launch", "--fds", "bogus", "--", "bwrap"])
        .output()
        .unwrap();
    assert_code(&usage, 122);
}
