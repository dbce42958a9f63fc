//! Descriptors between vibesys and the processes it starts: close-on-exec
//! pipes clear of the standard numbers, duplicates above a floor,
//! non-blocking reads and writes, and waiting on several at once (`poll`).
//! Each returns `io::Error`; the caller names what it was doing.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Duplicates `fd` to the lowest free number >= `min`, close-on-exec.
pub(crate) fn dup_at_least(fd: BorrowedFd<'_>, min: i32) -> io::Result<OwnedFd> {
    // SAFETY: fcntl on a descriptor the caller holds; F_DUPFD_CLOEXEC
    // returns a new descriptor that nothing else owns.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `new` is the fresh descriptor returned above.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// `fd` itself when it is numbered 3 or above, else a close-on-exec
/// duplicate that is (clear of the standard numbers a child's stdio is
/// moved onto).
pub(crate) fn clear_of_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    dup_at_least(fd.as_fd(), 3)
}

/// A pipe (read end, write end) whose both ends are close-on-exec and
/// numbered 3 or above, so moving them onto 0, 1 and 2 in a child can
/// never clobber one another.
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and ours.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((clear_of_stdio(r)?, clear_of_stdio(w)?))
}

/// Asks for a pipe buffer of `bytes` (best effort: failure only costs
/// throughput).
pub(crate) fn grow_pipe(fd: BorrowedFd<'_>, bytes: i32) {
    // SAFETY: fcntl on a pipe the caller holds.
    unsafe {
        libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, bytes);
    }
}

/// Makes reads and writes on `fd` return instead of blocking.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: fcntl flag get/set on a descriptor the caller holds.
    let ok = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// What one non-blocking read gave.
pub(crate) enum ReadOutcome {
    /// This many bytes.
    Data(usize),
    /// The stream ended (or failed, which ends it too).
    Eof,
    /// Nothing right now.
    WouldBlock,
}

/// One read from a non-blocking `fd` into `buf`.
pub(crate) fn read_some(fd: BorrowedFd<'_>, buf: &mut [u8]) -> ReadOutcome {
    loop {
        // SAFETY: reads into a live buffer of the given length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            return ReadOutcome::Data(n as usize);
        }
        if n == 0 {
            return ReadOutcome::Eof;
        }
        match errno() {
            libc::EINTR => continue,
            libc::EAGAIN => return ReadOutcome::WouldBlock,
            // Any other read error ends the stream.
            _ => return ReadOutcome::Eof,
        }
    }
}

/// One write of (a prefix of) `data` to a non-blocking `fd`: how many
/// bytes went, 0 when it would block or was interrupted; an error for
/// anything else (`EPIPE`: the reader is gone).
pub(crate) fn write_some(fd: BorrowedFd<'_>, data: &[u8]) -> io::Result<usize> {
    // SAFETY: writes from a live slice of the given length.
    let w = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
    if w >= 0 {
        return Ok(w as usize);
    }
    match errno() {
        libc::EINTR | libc::EAGAIN => Ok(0),
        e => Err(io::Error::from_raw_os_error(e)),
    }
}

/// What to wait for on one descriptor.
#[derive(Clone, Copy)]
pub(crate) enum Interest {
    /// Data to read (or the end of the stream).
    Read,
    /// Room to write (or the reader gone).
    Write,
}

/// Waits until one of `fds` is ready or `timeout` (`None`: no limit)
/// passed; returns, for each, whether it is ready. An interrupted wait
/// returns with none ready.
pub(crate) fn poll(
    fds: &[(BorrowedFd<'_>, Interest)],
    timeout: Option<Duration>,
) -> io::Result<Vec<bool>> {
    let mut raw: Vec<libc::pollfd> = fds
        .iter()
        .map(|(fd, interest)| libc::pollfd {
            fd: fd.as_raw_fd(),
            events: match interest {
                Interest::Read => libc::POLLIN,
                Interest::Write => libc::POLLOUT,
            },
            revents: 0,
        })
        .collect();
    // Rounded up, so a caller does not spin just before its deadline.
    let timeout_ms = timeout.map_or(-1, |t| {
        libc::c_int::try_from(t.as_millis().saturating_add(1)).unwrap_or(libc::c_int::MAX)
    });
    // SAFETY: `raw` is a live array of `raw.len()` pollfd structs.
    let n = unsafe { libc::poll(raw.as_mut_ptr(), raw.len() as libc::nfds_t, timeout_ms) };
    if n < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; raw.len()]);
        }
        return Err(e);
    }
    Ok(raw.iter().map(|p| p.revents != 0).collect())
}
