//! The process behind a refused connection, when it can be known: on
//! Linux the proxy accepted the connection on a listener in the
//! sandbox's network namespace, and `/proc` maps the client's port to the
//! process holding its socket (see `linux::sock_owner`). Looked up only
//! for a refusal that will be kept, one lookup at a time, each within
//! [`LOOKUP_BUDGET`]; anything unknown is left out.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

/// How long one lookup may take (a refused client waits that long at
/// most for its answer).
pub const LOOKUP_BUDGET: Duration = Duration::from_millis(500);

/// The process that made a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerProcess {
    /// Its pid on the host.
    pub pid: u32,
    /// Its command line as it presents it, arguments joined by spaces
    /// (not yet cleaned: [`super::denials::shown`] does that).
    pub command: String,
}

/// The process holding the client end of `sock`, accepted from `peer` on
/// `local`; blocking, within [`LOOKUP_BUDGET`].
#[cfg(target_os = "linux")]
pub fn lookup(sock: OwnedFd, local: SocketAddr, peer: SocketAddr) -> Option<PeerProcess> {
    let deadline = std::time::Instant::now() + LOOKUP_BUDGET;
    let owner = crate::linux::sock_owner::owner(&sock, local, peer, deadline)?;
    Some(PeerProcess {
        pid: owner.pid,
        command: command_line(&owner.cmdline),
    })
}

/// Elsewhere the process is not known.
#[cfg(not(target_os = "linux"))]
pub fn lookup(_sock: OwnedFd, _local: SocketAddr, _peer: SocketAddr) -> Option<PeerProcess> {
    None
}

/// `/proc/PID/cmdline` as one line: the NUL-separated arguments joined by
/// spaces (invalid UTF-8 replaced).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn command_line(raw: &[u8]) -> String {
    let raw = raw.strip_suffix(&[0]).unwrap_or(raw);
    raw.split(|b| *b == 0)
        .map(String::from_utf8_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_join_their_arguments() {
        assert_eq!(
            command_line(b"python3\0-c\0print(1)\0"),
            "python3 -c print(1)"
        );
        assert_eq!(command_line(b"a\0\0b"), "a  b");
        assert_eq!(command_line(b"x\xffy"), "x\u{fffd}y");
        assert_eq!(command_line(b""), "");
    }
}
