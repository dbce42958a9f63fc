//! Hidden helpers that `wrap` puts in front of a confined command.
//!
//! `internal-launch --fds SLOTS -- bwrap ARGS -- CMD` creates the
//! descriptors bwrap reads and executes it; `internal-landlock --read P
//! --write P [--no-network] -- CMD` applies Landlock and executes CMD.
//! Exit status: 122 usage error, 125 confinement failed (nothing ran),
//! 126 command cannot be executed, 127 command not found; otherwise the
//! command's own.

use std::ffi::OsString;
use std::path::PathBuf;

use vs_sandbox::LandlockPlan;
use vs_sandbox::bwrap::FdSlot;
use vs_sandbox::launch::{self, EXIT_USAGE};

fn usage(msg: &str) -> u8 {
    eprintln!("vibesys: error: internal helper usage: {msg}");
    EXIT_USAGE as u8
}

/// `internal-launch`.
pub fn launch(args: Vec<OsString>) -> u8 {
    let mut it = args.into_iter();
    let (Some(flag), Some(slots), Some(sep)) = (it.next(), it.next(), it.next()) else {
        return usage("expected --fds SLOTS -- ARGV");
    };
    if flag != "--fds" || sep != "--" {
        return usage("expected --fds SLOTS -- ARGV");
    }
    let Some(slots) = slots.to_str() else {
        return usage("slot list is not UTF-8");
    };
    let mut parsed = Vec::new();
    for name in slots.split(',').filter(|s| !s.is_empty()) {
        match FdSlot::parse(name) {
            Some(s) => parsed.push(s),
            None => return usage(&format!("unknown descriptor slot {name:?}")),
        }
    }
    let argv: Vec<OsString> = it.collect();
    if argv.is_empty() {
        return usage("the command is empty");
    }
    let (code, err) = launch::exec_with_fds(&parsed, &argv);
    eprintln!("vibesys: error: {err}");
    code as u8
}

/// `internal-landlock`.
pub fn landlock(args: Vec<OsString>) -> u8 {
    let mut plan = LandlockPlan {
        read: Vec::new(),
        write: Vec::new(),
        network: true,
    };
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
            _ => return usage(&format!("unknown argument {arg:?}")),
        }
    }
    let argv: Vec<OsString> = it.collect();
    if argv.is_empty() {
        return usage("the command is empty");
    }
    let (code, err) = launch::landlock_exec(&plan, &argv);
    eprintln!("vibesys: error: {err}");
    code as u8
}
