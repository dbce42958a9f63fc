//! Reaping exited children without blocking (the supervisor's and the
//! cgroup clean-up's).

#![allow(unsafe_code)]

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
