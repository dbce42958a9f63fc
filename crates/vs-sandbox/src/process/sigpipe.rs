//! Writing to a child's stdin without dying of its early exit.
#![allow(unsafe_code)]

/// Blocks SIGPIPE on the calling thread while it writes to a command's
/// stdin, so a command that exits early yields EPIPE instead of killing
/// vibesys; on drop, discards a pending SIGPIPE and restores the mask.
pub(crate) struct SigpipeBlock {
    old: libc::sigset_t,
    was_blocked: bool,
}

impl SigpipeBlock {
    /// Blocks SIGPIPE on this thread until drop.
    pub(crate) fn new() -> Self {
        // SAFETY: sigset manipulation on local values; pthread_sigmask on
        // the calling thread only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            let was_blocked = libc::sigismember(&old, libc::SIGPIPE) == 1;
            Self { old, was_blocked }
        }
    }
}

impl Drop for SigpipeBlock {
    fn drop(&mut self) {
        if self.was_blocked {
            return;
        }
        // SAFETY: as in `new`; sigtimedwait with a zero timeout only
        // consumes an already pending SIGPIPE.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == libc::SIGPIPE {}
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}
