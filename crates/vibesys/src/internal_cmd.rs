//! Hidden helpers that `wrap` puts in front of a confined command.
//!
//! `internal-launch (--fd SLOT)... -- bwrap ARGS -- CMD` creates the
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
    let mut it = args.into_iter().peekable();
    let mut slots = Vec::new();
    loop {
        match it.next() {
            Some(a) if a == "--" => break,
            Some(a) if a == "--fd" => match FdSlot::parse_args(&mut it) {
                Some(slot) => slots.push(slot),
                None => return usage("--fd needs a known descriptor slot"),
            },
            Some(a) => return usage(&format!("unknown argument {a:?}")),
            None => return usage("expected (--fd SLOT)... -- ARGV"),
        }
    }
    let argv: Vec<OsString> = it.collect();
    if argv.is_empty() {
        return usage("the command is empty");
    }
    let (code, err) = launch::exec_with_fds(&slots, &argv);
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
