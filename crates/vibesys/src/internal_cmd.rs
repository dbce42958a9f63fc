//! Hidden helpers that `wrap` puts in front of a confined command.
//!
//! `internal-launch (--fd SLOT)... [LIMIT] -- bwrap ARGS -- CMD` creates the
//! descriptors bwrap reads and runs it as its child; `internal-landlock
//! [LIMIT] --read P --write P [--no-network] -- CMD` runs CMD as its child
//! under Landlock and the launcher's hardening. LIMIT is `--nproc N` or
//! `--pids-cgroup VERSION:MAX PARENT` ([`ProcessLimit::to_args`]). Both
//! stay the parent (a subreaper) and kill what the command leaves behind.
//! Exit status: 122 usage error, 125 confinement failed (nothing ran),
//! 126 command cannot be executed, 127 command not found; otherwise the
//! command's own.

use std::ffi::OsString;
use std::path::PathBuf;

use vs_sandbox::LandlockPlan;
use vs_sandbox::ProcessLimit;
use vs_sandbox::bwrap::FdSlot;
use vs_sandbox::launch::{self, EXIT_CONFINE_FAILED, EXIT_USAGE};

fn usage(msg: &str) -> u8 {
    eprintln!("vibesys: error: internal helper usage: {msg}");
    EXIT_USAGE as u8
}

/// `internal-launch`.
pub fn launch(args: Vec<OsString>) -> u8 {
    let mut it = args.into_iter();
    let mut slots = Vec::new();
    let mut limit = unbounded();
    loop {
        let Some(arg) = it.next() else {
            return usage("expected (--fd SLOT)... [LIMIT] -- ARGV");
        };
        let arg = arg.to_string_lossy().into_owned();
        if arg == "--" {
            break;
        }
        if arg == "--fd" {
            match FdSlot::parse_args(&mut it) {
                Some(slot) => slots.push(slot),
                None => return usage("--fd needs a known descriptor slot"),
            }
            continue;
        }
        match ProcessLimit::parse_arg(&arg, &mut it) {
            Some(Ok(l)) => limit = l,
            Some(Err(e)) => return usage(&e),
            None => return usage(&format!("unknown argument {arg:?}")),
        }
    }
    let argv: Vec<OsString> = it.collect();
    if argv.is_empty() {
        return usage("the command is empty");
    }
    finish(launch::run_with_fds(&slots, &argv, &limit))
}

fn unbounded() -> ProcessLimit {
    ProcessLimit::Unbounded {
        reason: "no limit was passed to the helper".into(),
    }
}

fn finish(result: Result<i32, vs_sandbox::SandboxError>) -> u8 {
    match result {
        Ok(code) => code as u8,
        Err(err) => {
            eprintln!("vibesys: error: {err}");
            EXIT_CONFINE_FAILED as u8
        }
    }
}

/// `internal-landlock`.
pub fn landlock(args: Vec<OsString>) -> u8 {
    let mut plan = LandlockPlan {
        read: Vec::new(),
        write: Vec::new(),
        network: true,
    };
    let mut limit = unbounded();
    let mut it = args.into_iter();
    loop {
        let Some(arg) = it.next() else {
            return usage("missing -- before the command");
        };
        match arg.to_str() {
            Some("--") => break,
            Some("--no-network") => plan.network = false,
            Some(flag @ ("--read" | "--write")) => {
                let Some(p) = it.next() else {
                    return usage(&format!("{flag} needs a path"));
                };
                let p = PathBuf::from(p);
                if !p.is_absolute() {
                    return usage(&format!("{flag} path {p:?} is not absolute"));
                }
                if flag == "--read" {
                    plan.read.push(p);
                } else {
                    plan.write.push(p);
                }
            }
            Some(flag) => match ProcessLimit::parse_arg(flag, &mut it) {
                Some(Ok(l)) => limit = l,
                Some(Err(e)) => return usage(&e),
                None => return usage(&format!("unknown argument {arg:?}")),
            },
            None => return usage(&format!("unknown argument {arg:?}")),
        }
    }
    let argv: Vec<OsString> = it.collect();
    if argv.is_empty() {
        return usage("the command is empty");
    }
    finish(launch::run_landlock(&plan, &argv, &limit, None))
}
