//! How a process ended, in one type: from a raw wait status, from std's
//! `ExitStatus`, or from a report, read the same way everywhere.

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl Exit {
    /// From a wait status (`waitpid`'s); `None` for a stopped or
    /// continued process. Async-signal-safe.
    pub const fn from_wait_status(status: i32) -> Option<Self> {
        if libc::WIFEXITED(status) {
            Some(Self::Code(libc::WEXITSTATUS(status)))
        } else if libc::WIFSIGNALED(status) {
            Some(Self::Signal(libc::WTERMSIG(status)))
        } else {
            None
        }
    }

    /// From std's status.
    pub fn from_std(status: std::process::ExitStatus) -> Option<Self> {
        use std::os::unix::process::ExitStatusExt;
        match (status.code(), status.signal()) {
            (Some(code), _) => Some(Self::Code(code)),
            (None, Some(sig)) => Some(Self::Signal(sig)),
            (None, None) => None,
        }
    }

    /// The exit code a shell would report: the code, or 128 + N for
    /// signal N.
    pub const fn code(self) -> i32 {
        match self {
            Self::Code(code) => code,
            Self::Signal(sig) => 128 + sig,
        }
    }

    /// The signal that ended it, if one did.
    pub const fn signal(self) -> Option<i32> {
        match self {
            Self::Code(_) => None,
            Self::Signal(sig) => Some(sig),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn every_source_reads_alike() {
        for (raw, exit) in [
            (0, Exit::Code(0)),
            (3 << 8, Exit::Code(3)),
            (libc::SIGKILL, Exit::Signal(libc::SIGKILL)),
        ] {
            assert_eq!(Exit::from_wait_status(raw), Some(exit));
            let std = std::process::ExitStatus::from_raw(raw);
            assert_eq!(Exit::from_std(std), Some(exit));
        }
        assert_eq!(Exit::Signal(9).code(), 137);
        assert_eq!(Exit::Signal(9).signal(), Some(9));
        assert_eq!(Exit::Code(2).code(), 2);
        assert_eq!(Exit::Code(2).signal(), None);
        // Stopped (0x7f) is no end.
        assert_eq!(Exit::from_wait_status(0x137f), None);
    }
}
