//! Killing a child's process group (the build command and whatever it left
//! running), without spawning another process.
#![allow(unsafe_code)]

/// Sends SIGKILL to the process group `pgid` (a child started with
/// `process_group(0)`, whose group id is its pid). Errors (the group is
/// already gone) are ignored.
pub(crate) fn kill_group(pgid: u32) {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return;
    };
    if pgid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours;
    // a negative pid addresses exactly the group we created, and pgid > 1
    // rules out "every process" (-1) and our own group (0).
    unsafe {
        libc::kill(-pgid, libc::SIGKILL);
    }
}
