#![allow(unsafe_code)]
//! The host terminal in raw mode while an interactive exec is attached,
//! and its size.

/// Restores the terminal's settings when dropped.
pub(crate) struct RawMode {
    fd: i32,
    saved: libc::termios,
}

impl RawMode {
    /// Puts terminal `fd` in raw mode; `None` when it is not a terminal.
    pub(crate) fn enter(fd: i32) -> Option<Self> {
        // SAFETY: `termios` is plain old data; an all-zero value is valid
        // and is fully overwritten by tcgetattr before use.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: `saved` is a valid, writable termios for the call.
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            return None;
        }
        let mut raw = saved;
        // SAFETY: `raw` is a valid termios owned by this frame.
        unsafe { libc::cfmakeraw(&mut raw) };
        // SAFETY: `raw` is a valid termios; fd is a terminal (tcgetattr succeeded).
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw) } != 0 {
            return None;
        }
        Some(Self { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores settings read by tcgetattr on the same fd.
        unsafe {
            libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved);
        }
    }
}

/// The terminal's (rows, columns), when `fd` is a terminal.
pub(crate) fn size(fd: i32) -> Option<(u16, u16)> {
    // SAFETY: `winsize` is plain old data; all-zero is valid.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ writes one winsize into the valid pointer given.
    if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } != 0 || ws.ws_col == 0 {
        return None;
    }
    Some((ws.ws_row, ws.ws_col))
}
