//! A command's process tree: becoming its subreaper, reaping, and killing
//! what is left of it. The functions marked async-signal-safe run between
//! fork and exit of a supervisor (no allocation, no locks).

#![allow(unsafe_code)]

use std::fs::File;
use std::io::Read;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Reaps every child that has already exited (never blocks). Returns
/// false when this process has no child left at all.
pub fn reap_exited() -> bool {
    loop {
        let mut status = 0;
        // SAFETY: waitpid writes one int we own.
        let r = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if r > 0 {
            continue;
        }
        return r == 0;
    }
}

/// Reaps `pid`, a child that has exited or is about to.
pub(crate) fn reap_one(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waitpid writes one int we own.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
}

/// Reaps children (blocking for `flags` 0: one child), recording the
/// wait status of `command`; returns the last waitpid result (-1 once
/// none is left). Async-signal-safe.
pub(crate) fn reap(
    command: libc::pid_t,
    status: &mut Option<libc::c_int>,
    flags: libc::c_int,
) -> libc::pid_t {
    loop {
        let mut st = 0;
        // SAFETY: waitpid writes one int on our stack.
        let r = unsafe { libc::waitpid(-1, &mut st, flags) };
        if r == command {
            *status = Some(st);
        }
        if r < 0 && errno() == libc::EINTR {
            continue;
        }
        if r <= 0 || flags == 0 {
            return r;
        }
    }
}

/// SIGKILLs every child of this process (orphans included, for a
/// subreaper) and reaps, until none is left, recording `command`'s wait
/// status. Async-signal-safe.
pub(crate) fn kill_tree(command: libc::pid_t, status: &mut Option<libc::c_int>) {
    loop {
        kill_children();
        if reap(command, status, 0) < 0 {
            return;
        }
    }
}

/// SIGKILLs every child listed in /proc/thread-self/children (see
/// [`kill_listed`]). Children not yet reaped cannot have their pid
/// reused, so every pid listed is really ours. Async-signal-safe.
pub(crate) fn kill_children() {
    kill_listed(c"/proc/thread-self/children".as_ptr());
}

/// SIGKILLs every pid listed (whitespace-separated) in the file at
/// `path`, parsing with a stack buffer (async-signal-safe); returns how
/// many were listed.
pub(crate) fn kill_listed(path: *const libc::c_char) -> usize {
    let mut listed = 0;
    // SAFETY: open/read/close/kill on a stack buffer and a NUL-terminated
    // path the caller keeps alive.
    unsafe {
        let fd = libc::open(path, libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return 0;
        }
        let mut buf = [0u8; 512];
        let mut pid: libc::pid_t = 0;
        loop {
            let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
            if n < 0 && errno() == libc::EINTR {
                continue;
            }
            if n <= 0 {
                break;
            }
            for &b in buf.iter().take(n as usize) {
                if b.is_ascii_digit() {
                    pid = pid
                        .saturating_mul(10)
                        .saturating_add(libc::pid_t::from(b - b'0'));
                } else {
                    if pid > 0 {
                        libc::kill(pid, libc::SIGKILL);
                        listed += 1;
                    }
                    pid = 0;
                }
            }
        }
        if pid > 0 {
            libc::kill(pid, libc::SIGKILL);
            listed += 1;
        }
        libc::close(fd);
    }
    listed
}

/// The children of this process (all threads), from /proc.
fn children() -> Vec<i32> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for t in tasks.flatten() {
        let mut s = String::new();
        if let Ok(f) = File::open(t.path().join("children")) {
            let _ = f.take(1024 * 1024).read_to_string(&mut s);
        }
        out.extend(s.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
    }
    out
}

/// Kills every remaining descendant. As the subreaper, every orphan of
/// the tree is our child: kill them, reap them (their own children are
/// reparented to us as they die) and repeat until none is left. Bounded:
/// gives up after ~5 s of rounds (a limit-bounded tree empties far sooner).
pub fn kill_leftovers() {
    for _ in 0..5000 {
        if !reap_exited() {
            return;
        }
        let kids = children();
        for pid in &kids {
            // SAFETY: kill has no memory effects; an unreaped child's pid
            // cannot be reused, so this reaches our own child.
            unsafe { libc::kill(*pid, libc::SIGKILL) };
        }
        for pid in &kids {
            let mut status = 0;
            // SAFETY: waitpid writes one int we own.
            unsafe { libc::waitpid(*pid, &mut status, 0) };
        }
        if kids.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    tracing::warn!("processes left by the confined command survived 5000 kill rounds");
}
