//! A child that is told when the process that started it goes away.
#![allow(unsafe_code)]

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the process `cmd` starts receive SIGTERM when the thread that
/// spawned it exits (vibesys killed with SIGKILL included), and checks,
/// once the signal is armed, that its parent is still there.
pub fn terminate_with_parent(cmd: &mut Command) {
    let parent = std::process::id();
    // SAFETY: between fork and exec the hook calls only prctl and getppid,
    // both async-signal-safe, and touches no memory but a copied integer.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::other(
                    "the parent exited before the child started",
                ));
            }
            Ok(())
        });
    }
}
