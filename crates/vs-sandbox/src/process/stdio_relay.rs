//! A host file given as vibesys's stdin, stdout or stderr reaches the
//! confined command only as a pipe that vibesys copies.
//!
//! A descriptor of a file can be re-opened through `/proc/self/fd/N`
//! with any access the file's mode allows, whatever the descriptor's own
//! (a magic link, resolved past every mount of the sandbox): an agent
//! given a log as stdout could read back what was written to it before
//! it started, and truncate it. A pipe re-opened that way is only the
//! same pipe. So while the command is started, each of vibesys's own
//! descriptors 0, 1 and 2 that is not a pipe, a socket or a character
//! device (a terminal, `/dev/null`) is swapped for a pipe; the command
//! inherits the pipe, vibesys takes its own descriptors back at once and
//! a thread copies between the pipe and the file until the pipe ends.
//!
//! The swap changes descriptors every thread of vibesys shares, so one
//! swap at a time: a second launch from another thread of the same
//! process waits for the first to put its descriptors back. Without that
//! it would see the first one's pipe (no host file, nothing to swap) and
//! then start its command after the first put the host file back.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use crate::error::SandboxError;

fn os_err(what: &str) -> SandboxError {
    SandboxError::Os {
        what: what.into(),
        source: std::io::Error::last_os_error(),
    }
}

/// Whether `fd` is open and something the command could re-open as a
/// file: anything but a pipe, a socket or a character device.
pub fn is_host_file(fd: RawFd) -> bool {
    // SAFETY: `stat` is plain data that fstat fills; fstat only reads
    // the descriptor table.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return false;
    }
    !matches!(
        st.st_mode & libc::S_IFMT,
        libc::S_IFIFO | libc::S_IFSOCK | libc::S_IFCHR
    )
}

/// A duplicate of `fd`, close-on-exec, above the standard descriptors.
fn dup_cloexec(fd: RawFd) -> Result<OwnedFd, SandboxError> {
    // SAFETY: the caller names a descriptor it keeps open for the call.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    super::fd::dup_at_least(fd, 3).map_err(|source| SandboxError::Os {
        what: "saving a standard descriptor".into(),
        source,
    })
}

fn dup2(from: RawFd, to: RawFd) -> Result<(), SandboxError> {
    // SAFETY: dup2 on descriptor numbers; `to` is one of 0, 1, 2, which
    // this process keeps open throughout (it is replaced, never closed).
    if unsafe { libc::dup2(from, to) } < 0 {
        return Err(os_err("placing a standard descriptor"));
    }
    Ok(())
}

/// One standard descriptor swapped for a pipe.
struct Swapped {
    fd: RawFd,
    /// vibesys's own descriptor (the host file).
    saved: OwnedFd,
    /// vibesys's end of the pipe.
    ours: OwnedFd,
}

/// Held from [`StdioSwap::begin`] until its descriptors are back.
static SWAPPING: Mutex<()> = Mutex::new(());

/// vibesys's standard descriptors that are host files, swapped for pipes
/// until [`StdioSwap::end`] (or drop) puts them back.
pub struct StdioSwap {
    swapped: Vec<Swapped>,
    /// One swap at a time in this process; dropped after the descriptors
    /// are back (fields drop after [`Drop::drop`] has run).
    _turn: MutexGuard<'static, ()>,
}

impl StdioSwap {
    /// Swaps each of 0, 1 and 2 that [`is_host_file`] for a pipe; a
    /// command started now inherits the pipes.
    pub fn begin() -> Result<Self, SandboxError> {
        let mut swap = Self {
            swapped: Vec::new(),
            // A launch that panicked mid-swap has put its descriptors back
            // (drop): the lock guards no data.
            _turn: SWAPPING.lock().unwrap_or_else(|e| e.into_inner()),
        };
        for fd in 0..=2 {
            if !is_host_file(fd) {
                continue;
            }
            let (reader, writer) = std::io::pipe().map_err(|source| SandboxError::Os {
                what: "creating a pipe for a standard descriptor".into(),
                source,
            })?;
            let (child_end, ours): (OwnedFd, OwnedFd) = if fd == 0 {
                (reader.into(), writer.into())
            } else {
                (writer.into(), reader.into())
            };
            // Both ends above 2 first: with a standard descriptor closed,
            // the pipe could have taken its number.
            let child_end = dup_cloexec(child_end.as_raw_fd())?;
            let ours = dup_cloexec(ours.as_raw_fd())?;
            let saved = dup_cloexec(fd)?;
            // On failure `swap` is dropped and puts back what it swapped.
            swap.swapped.push(Swapped { fd, saved, ours });
            dup2(child_end.as_raw_fd(), fd)?;
        }
        Ok(swap)
    }

    /// Puts vibesys's own descriptors back and starts copying between
    /// each pipe and its file.
    pub fn end(mut self) -> Relay {
        let swapped = std::mem::take(&mut self.swapped);
        let (done, finished) = mpsc::channel();
        let mut copiers = 0;
        for s in swapped {
            let _ = dup2(s.saved.as_raw_fd(), s.fd);
            let (from, to) = if s.fd == 0 {
                (File::from(s.saved), File::from(s.ours))
            } else {
                (File::from(s.ours), File::from(s.saved))
            };
            let done = done.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("vibesys-stdio-{}", s.fd))
                .spawn(move || {
                    copy(from, to, s.fd);
                    let _ = done.send(());
                });
            match spawned {
                Ok(_) => copiers += 1,
                Err(e) => tracing::warn!("cannot copy standard descriptor {}: {e}", s.fd),
            }
        }
        Relay { copiers, finished }
    }
}

impl Drop for StdioSwap {
    fn drop(&mut self) {
        for s in &self.swapped {
            let _ = dup2(s.saved.as_raw_fd(), s.fd);
        }
    }
}

/// Copies `from` to `to` until `from` ends. A failed write (a full disk,
/// a command that stopped reading its stdin) is logged once; the pipe is
/// still drained, so the command never blocks on it.
fn copy(mut from: File, mut to: File, fd: RawFd) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut writing = true;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if writing && let Err(e) = to.write_all(&buf[..n]) {
            writing = false;
            if fd == 0 {
                // The command's end is gone: nothing more to give it.
                return;
            }
            tracing::warn!("copying the command's descriptor {fd} failed: {e}");
        }
    }
}

/// The copying threads of a started command.
pub struct Relay {
    copiers: usize,
    finished: mpsc::Receiver<()>,
}

impl Relay {
    /// Nothing to copy.
    pub fn none() -> Self {
        let (_, finished) = mpsc::channel();
        Self {
            copiers: 0,
            finished,
        }
    }

    /// Once the command and everything it left are gone: waits up to
    /// `limit` for the copies to drain (a pipe end handed to a process
    /// outside the tree would keep one open forever).
    pub fn finish(self, limit: Duration) {
        let deadline = Instant::now() + limit;
        for _ in 0..self.copiers {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.finished.recv_timeout(left).is_err() {
                tracing::warn!(
                    "the command's output is still being copied after {} s; giving up",
                    limit.as_secs()
                );
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two launches at once from two threads: the second must swap
    /// the host file itself, not see the first one's pipe and then start
    /// its command after the first put the file back.
    #[test]
    fn a_second_swap_waits_for_the_first() {
        let file = tempfile::tempfile().unwrap();
        let original = dup_cloexec(0).unwrap();
        dup2(file.as_raw_fd(), 0).unwrap();
        let first = StdioSwap::begin().unwrap();
        let swapped_first = first.swapped.len();
        let second = std::thread::spawn(|| {
            let swap = StdioSwap::begin().unwrap();
            // What a command started now would get as its stdin.
            let n = swap.swapped.len();
            let file_for_command = is_host_file(0);
            swap.end().finish(Duration::from_secs(5));
            (n, file_for_command)
        });
        std::thread::sleep(Duration::from_millis(200));
        let relay = first.end();
        let (swapped_second, file_for_command) = second.join().unwrap();
        relay.finish(Duration::from_secs(5));
        dup2(original.as_raw_fd(), 0).unwrap();
        assert_eq!(swapped_first, 1);
        assert_eq!(swapped_second, 1, "the second swap saw the first's pipe");
        assert!(!file_for_command, "the second command would get the file");
    }
}
