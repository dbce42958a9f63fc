#![allow(unsafe_code)]
//! Killing the processes one exec started, from the host.
//!
//! The Engine has no "kill exec" call. The container's processes run as the
//! host user's uid (no user-namespace remapping), so vibesys may signal
//! them by their host pids, which `/proc` on the host shows. A command's
//! tree is: the exec's own process (its host pid comes from the exec
//! inspect call), every process whose parent chain leads to it, every
//! process in its session or process group, and every orphan the
//! container's init (`docker-init`) adopted, i.e. anything that
//! double-forked away (other than the lifeline shell). That last rule may
//! also catch a daemon left by another command in the same container; a
//! container serves one run, so this is the run's own leftover.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// One process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy)]
struct Stat {
    ppid: i32,
    pgrp: i32,
    session: i32,
}

fn read_stat(pid: i32) -> Option<Stat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start
    // after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_ascii_whitespace();
    let _state = f.next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    let session = f.next()?.parse().ok()?;
    Some(Stat {
        ppid,
        pgrp,
        session,
    })
}

fn all_processes() -> BTreeMap<i32, Stat> {
    let mut out = BTreeMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if let Some(s) = read_stat(pid) {
            out.insert(pid, s);
        }
    }
    out
}

/// The host pids of the tree rooted at `root` (see the module docs).
fn tree(root: i32, init: i32, lifeline: i32) -> BTreeSet<i32> {
    let procs = all_processes();
    let mut set: BTreeSet<i32> = BTreeSet::new();
    if let Some(r) = procs.get(&root) {
        set.insert(root);
        for (pid, s) in &procs {
            if (s.session == r.session && r.session == root) || s.pgrp == root {
                set.insert(*pid);
            }
        }
    }
    if init > 0 {
        for (pid, s) in &procs {
            if s.ppid == init && *pid != lifeline && *pid != root {
                set.insert(*pid);
            }
        }
    }
    // Descendants of everything found so far.
    loop {
        let before = set.len();
        for (pid, s) in &procs {
            if set.contains(&s.ppid) && *pid != init && *pid != lifeline {
                set.insert(*pid);
            }
        }
        if set.len() == before {
            break;
        }
    }
    set.remove(&init);
    set.remove(&lifeline);
    set.remove(&0);
    set
}

/// SIGKILLs the tree of `root` until none of it is left (bounded: about
/// two seconds). Returns how many signals were sent.
pub(crate) fn kill_tree(root: i32, init: i32, lifeline: i32) -> usize {
    let mut sent = 0;
    for _ in 0..200 {
        let pids = tree(root, init, lifeline);
        if pids.is_empty() {
            break;
        }
        for pid in pids {
            if send_kill(pid) {
                sent += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    sent
}

/// The host pid of `init`'s child that is the lifeline shell.
pub(crate) fn lifeline_child(init: i32) -> i32 {
    all_processes()
        .into_iter()
        .find(|(_, s)| s.ppid == init)
        .map(|(pid, _)| pid)
        .unwrap_or(0)
}

fn send_kill(pid: i32) -> bool {
    if pid <= 1 {
        return false;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours;
    // a stale pid at worst yields ESRCH.
    unsafe { libc::kill(pid, libc::SIGKILL) == 0 }
}
