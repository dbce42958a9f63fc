//! The Landlock launch's network namespace for an egress allow-list: the
//! child, between fork and exec, takes a network namespace of its own
//! (in the user namespace it just entered, or as root), brings its
//! loopback up, listens on `127.0.0.1:`[`crate::egress::INSIDE_PORT`]
//! there and hands that listener to the launcher over a socket pair. The
//! launcher, in the host's namespace, hands it to the egress proxy, which
//! accepts on it from outside: the command's only way out.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use crate::error::SandboxError;

/// A socket pair: the launcher's end and the child's.
pub fn channel() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let mut fds = [-1; 2];
    // SAFETY: socketpair writes two new descriptors into `fds`.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(SandboxError::Os {
            what: "creating the egress listener's channel".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: both descriptors are new and owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// In the child (no allocation): a new network namespace, its loopback
/// up, a listener on the proxy port sent over `channel`. Errors are the
/// step (0: the namespace, 1: the loopback, 2: the listener) and errno.
///
/// # Safety
/// Only between fork and exec, with `channel` a datagram Unix socket.
pub unsafe fn enter_and_listen(channel: RawFd, port: u16) -> Result<(), (u8, i32)> {
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO)
    };
    // SAFETY: raw system calls on integers and on stack memory.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNET) != 0 {
            return Err((0, errno()));
        }
        let s = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if s < 0 {
            return Err((1, errno()));
        }
        let mut ifr: libc::ifreq = std::mem::zeroed();
        ifr.ifr_name[0] = b'l' as libc::c_char;
        ifr.ifr_name[1] = b'o' as libc::c_char;
        if libc::ioctl(s, libc::SIOCGIFFLAGS as _, &mut ifr) != 0 {
            let e = errno();
            libc::close(s);
            return Err((1, e));
        }
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        if libc::ioctl(s, libc::SIOCSIFFLAGS as _, &ifr) != 0 {
            let e = errno();
            libc::close(s);
            return Err((1, e));
        }
        libc::close(s);
        let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if l < 0 {
            return Err((2, errno()));
        }
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_ne_bytes([127, 0, 0, 1]),
            },
            sin_zero: [0; 8],
        };
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if libc::bind(l, (&addr as *const libc::sockaddr_in).cast(), len) != 0
            || libc::listen(l, 128) != 0
        {
            let e = errno();
            libc::close(l);
            return Err((2, e));
        }
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = [0u64; 4];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            libc::close(l);
            return Err((2, libc::EINVAL));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), l);
        let sent = libc::sendmsg(channel, &msg, 0);
        let e = errno();
        libc::close(l);
        if sent < 0 {
            return Err((2, e));
        }
    }
    Ok(())
}

/// In the launcher, once the child has executed: the listener it sent.
pub fn receive_listener(channel: &OwnedFd) -> Result<std::net::TcpListener, SandboxError> {
    receive_fd(channel.as_raw_fd())
        .map(std::net::TcpListener::from)
        .map_err(|source| SandboxError::Os {
            what: "receiving the egress listener from the sandbox's network namespace".into(),
            source,
        })
}

/// Sends descriptor `fd` over the Unix datagram socket `sock` (connected),
/// with one byte of data.
pub fn send_fd(sock: RawFd, fd: RawFd) -> std::io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 4];
    // SAFETY: a zeroed msghdr is valid; every pointer set below points to
    // live stack memory of the right size, and the control header written
    // lies inside `control` (CMSG_SPACE(4) <= 32 bytes).
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(4) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(4) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
        if libc::sendmsg(sock, &msg, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Receives one descriptor sent with [`send_fd`] on `sock`, without
/// blocking (`WouldBlock` when nothing is queued). A message without
/// exactly one descriptor is an error (and any it carried is closed).
pub fn receive_fd(sock: RawFd) -> std::io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = [0u64; 8];
    // SAFETY: a zeroed msghdr is valid; every pointer set below points to
    // live stack memory of the right size.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: recvmsg writes into the buffers `msg` describes.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut received: Vec<OwnedFd> = Vec::new();
    // SAFETY: the headers and their data come from the kernel's answer in
    // `control`; each SCM_RIGHTS descriptor is a new one we now own.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg);
                let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    received.push(OwnedFd::from_raw_fd(fd));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    if received.len() != 1 || msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(std::io::Error::other("not exactly one descriptor was sent"));
    }
    received
        .pop()
        .ok_or_else(|| std::io::Error::other("no descriptor was sent"))
}
