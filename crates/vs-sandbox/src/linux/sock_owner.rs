//! The process at the other end of a loopback TCP connection accepted on
//! a listener in another network namespace (the egress proxy's, in a
//! sandbox's namespace), found through `/proc`:
//!
//! 1. `ioctl(SIOCGSKNS)` on the accepted socket gives its network
//!    namespace (needs `CAP_NET_ADMIN` over that namespace's user
//!    namespace: root has it over every one, a user over the ones it
//!    created, which a sandbox's are). Without it (a Docker operator who
//!    is not root: a container's namespace is the Engine's), the
//!    namespace is the one whose TCP table lists the accepted socket
//!    itself (its inode), looked up once per namespace among the
//!    processes whose `/proc/PID/ns/net` can be read;
//! 2. the processes in it are those whose `/proc/PID/ns/net` is that
//!    namespace (same device and inode);
//! 3. the namespace's TCP table (`/proc/PID/net/tcp` or `tcp6` of one
//!    of them) maps the client's address and port to its socket's inode;
//! 4. the process holding `socket:[INODE]` among their descriptors is the
//!    one; its `/proc/PID/cmdline` (the first [`MAX_CMDLINE`] bytes) is
//!    what it presents itself as.
//!
//! Reading another user's `/proc/PID/{ns,fd}` needs ptrace read access
//! (the same user, or root), which is what a sandbox's processes give
//! the user who started them. Every step is bounded: a deadline, the
//! bytes read of a table and of a command line, the processes looked at.
//! Anything that fails gives `None`.
#![allow(unsafe_code)]

use std::io::{BufRead, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::time::Instant;

/// `SIOCGSKNS` (linux/sockios.h): a descriptor of a socket's network
/// namespace.
const SIOCGSKNS: libc::c_ulong = 0x894C;
/// The most bytes of a command line read.
pub const MAX_CMDLINE: u64 = 4096;
/// The most bytes of a TCP table read (about 25,000 sockets).
const MAX_TABLE: u64 = 4 * 1024 * 1024;
/// The most processes of the namespace looked at.
const MAX_PROCESSES: usize = 4096;

/// A process found: its pid (as the host sees it) and the raw bytes of
/// its command line (NUL-separated arguments, at most [`MAX_CMDLINE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The pid.
    pub pid: u32,
    /// `/proc/PID/cmdline`, cut.
    pub cmdline: Vec<u8>,
}

/// The process that holds the client end of `sock`, a TCP connection
/// accepted from `peer` on `local`, found before `deadline`.
pub fn owner(
    sock: &OwnedFd,
    local: SocketAddr,
    peer: SocketAddr,
    deadline: Instant,
) -> Option<Owner> {
    let ns = socket_netns(sock, local, deadline)?;
    let in_ns = processes_in(ns, deadline);
    let inode = in_ns
        .iter()
        .take(4)
        .find_map(|pid| client_inode(*pid, local, peer, deadline))?;
    let link = format!("socket:[{inode}]");
    for pid in in_ns {
        if Instant::now() > deadline {
            return None;
        }
        if holds(pid, link.as_bytes(), deadline) {
            let cmdline = cmdline(pid)?;
            // The pid is still the one in the namespace (not reused).
            return (netns_of(pid) == Some(ns)).then_some(Owner { pid, cmdline });
        }
    }
    None
}

/// The (device, inode) of the network namespace of `sock`, accepted on
/// `local`.
fn socket_netns(sock: &OwnedFd, local: SocketAddr, deadline: Instant) -> Option<(u64, u64)> {
    // SAFETY: SIOCGSKNS takes no argument and returns a new descriptor
    // (or -1), which is owned here.
    let fd = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCGSKNS as _) };
    if fd >= 0 {
        // SAFETY: `fd` is a new descriptor owned by nothing else.
        let ns = unsafe { OwnedFd::from_raw_fd(fd) };
        let m = std::fs::File::from(ns).metadata().ok()?;
        return Some((m.dev(), m.ino()));
    }
    netns_listing(sock, local, deadline)
}

/// Not allowed to open `sock`'s namespace: find it by the socket itself,
/// which its namespace's TCP table lists under its inode.
fn netns_listing(sock: &OwnedFd, local: SocketAddr, deadline: Instant) -> Option<(u64, u64)> {
    let own = std::fs::File::from(sock.try_clone().ok()?)
        .metadata()
        .ok()?
        .ino();
    let mut seen = std::collections::HashSet::new();
    namespaced_pids(deadline)
        .find(|(pid, ns)| {
            seen.insert(*ns)
                && table_row(*pid, local, deadline, |_, _, inode| inode == own).is_some()
        })
        .map(|(_, ns)| ns)
}

/// Every process (thread-group leader) whose network namespace can be
/// read, with that namespace, until `deadline`.
fn namespaced_pids(deadline: Instant) -> impl Iterator<Item = (u32, (u64, u64))> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .take_while(move |_| Instant::now() <= deadline)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, netns_of(pid)?)))
}

/// The (device, inode) of the network namespace of `pid`.
fn netns_of(pid: u32) -> Option<(u64, u64)> {
    let m = std::fs::metadata(format!("/proc/{pid}/ns/net")).ok()?;
    Some((m.dev(), m.ino()))
}

/// The processes (thread-group leaders) in network namespace `ns`, in
/// pid order, at most [`MAX_PROCESSES`].
fn processes_in(ns: (u64, u64), deadline: Instant) -> Vec<u32> {
    let mut pids: Vec<u32> = namespaced_pids(deadline)
        .filter(|(_, of)| *of == ns)
        .map(|(pid, _)| pid)
        .take(MAX_PROCESSES)
        .collect();
    pids.sort_unstable();
    pids
}

/// The inode of the client's socket (local address `peer`, remote
/// `local`) in the TCP table of `pid`'s network namespace; `None` when
/// absent or closed (inode 0).
fn client_inode(pid: u32, local: SocketAddr, peer: SocketAddr, deadline: Instant) -> Option<u64> {
    table_row(pid, peer, deadline, |from, to, _| {
        from == peer && to == local
    })
    .filter(|i| *i != 0)
}

/// The inode of the first row of `pid`'s namespace's TCP table (`tcp` or
/// `tcp6`, as `family`'s address is) for which `wanted(local address,
/// remote address, inode)` holds.
fn table_row(
    pid: u32,
    family: SocketAddr,
    deadline: Instant,
    wanted: impl Fn(SocketAddr, SocketAddr, u64) -> bool,
) -> Option<u64> {
    let table = match family.ip() {
        IpAddr::V4(_) => "tcp",
        IpAddr::V6(_) => "tcp6",
    };
    let file = std::fs::File::open(format!("/proc/{pid}/net/{table}")).ok()?;
    let reader = std::io::BufReader::new(file.take(MAX_TABLE));
    for line in reader.split(b'\n').skip(1) {
        if Instant::now() > deadline {
            return None;
        }
        let line = line.ok()?;
        let Ok(line) = std::str::from_utf8(&line) else {
            continue;
        };
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ...
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 {
            continue;
        }
        let (Some(from), Some(to), Ok(inode)) = (
            parse_address(f[1]),
            parse_address(f[2]),
            f[9].parse::<u64>(),
        ) else {
            continue;
        };
        if wanted(from, to, inode) {
            return Some(inode);
        }
    }
    None
}

/// An address of a `/proc/net/tcp{,6}` row: `0100007F:0C38` (the
/// address as the kernel's 32-bit words in host order, hex; the port in
/// hex).
fn parse_address(text: &str) -> Option<SocketAddr> {
    let (addr, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = addr.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match addr.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Whether one of `pid`'s descriptors is `link` (`socket:[INODE]`).
fn holds(pid: u32, link: &[u8], deadline: Instant) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    for entry in dir.flatten() {
        if Instant::now() > deadline {
            return false;
        }
        if std::fs::read_link(entry.path()).is_ok_and(|t| t.as_os_str().as_bytes() == link) {
            return true;
        }
    }
    false
}

/// The first [`MAX_CMDLINE`] bytes of `pid`'s command line.
fn cmdline(pid: u32) -> Option<Vec<u8>> {
    let file = std::fs::File::open(format!("/proc/{pid}/cmdline")).ok()?;
    let mut out = Vec::new();
    file.take(MAX_CMDLINE).read_to_end(&mut out).ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_addresses() {
        let v4 = if cfg!(target_endian = "little") {
            "0100007F:0C38"
        } else {
            "7F000001:0C38"
        };
        assert_eq!(parse_address(v4), Some("127.0.0.1:3128".parse().unwrap()));
        let v6 = if cfg!(target_endian = "little") {
            "00000000000000000000000001000000:1F90"
        } else {
            "00000000000000000000000000000001:1F90"
        };
        assert_eq!(parse_address(v6), Some("[::1]:8080".parse().unwrap()));
        assert_eq!(parse_address("0100007F"), None);
        assert_eq!(parse_address("01007F:0C38"), None);
        assert_eq!(parse_address("0100007G:0C38"), None);
    }

    /// A loopback connection in this process's own namespace: the client,
    /// the accepted socket, its local and peer addresses, a deadline.
    fn connection() -> (
        std::net::TcpStream,
        OwnedFd,
        SocketAddr,
        SocketAddr,
        Instant,
    ) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        let local = accepted.local_addr().unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(5);
        (client, OwnedFd::from(accepted), local, peer, deadline)
    }

    /// In this process's own namespace: a connection to a listener here
    /// is traced to this process and its command line.
    #[test]
    fn a_connection_is_traced_to_its_process() {
        let (_client, sock, local, peer, deadline) = connection();
        let found = owner(&sock, local, peer, deadline).unwrap();
        assert_eq!(found.pid, std::process::id());
        let mine = std::fs::read(format!("/proc/{}/cmdline", std::process::id())).unwrap();
        assert!(mine.starts_with(&found.cmdline), "{found:?}");
    }

    /// The fallback for a caller who may not open the socket's namespace
    /// (a Docker operator who is not root): the namespace whose TCP table
    /// lists the accepted socket, here this process's own.
    #[test]
    fn the_namespace_is_found_by_the_socket_itself() {
        let (_client, sock, local, _, deadline) = connection();
        assert_eq!(
            netns_listing(&sock, local, deadline),
            netns_of(std::process::id())
        );
    }
}
