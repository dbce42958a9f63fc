//! The forwarder inside a sandbox with an allow-list (bwrap, Docker): it
//! listens on the sandbox's own loopback at [`super::INSIDE_PORT`] (the
//! address the proxy variables name), hands that listener to the egress
//! proxy over its socket (bound in), and becomes the command. The proxy,
//! outside, accepts every connection itself. It is no boundary: anything
//! sent to the socket meets the same proxy.

use std::ffi::OsString;
use std::path::Path;

use crate::error::SandboxError;

/// Listens on `127.0.0.1:port`, hands the listener to the proxy at
/// `socket`, then executes `argv` in place (127/126 when it cannot).
#[cfg(target_os = "linux")]
pub fn run(socket: &Path, port: u16, argv: &[OsString]) -> Result<i32, SandboxError> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;

    let os = |what: String| move |source| SandboxError::Os { what, source };
    let Some((program, args)) = argv.split_first() else {
        return Err(SandboxError::InvalidCommand("the command is empty".into()));
    };
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).map_err(os(format!(
        "egress forwarder: listening on 127.0.0.1:{port}"
    )))?;
    let sock = std::os::unix::net::UnixDatagram::unbound()
        .map_err(os("egress forwarder: creating a socket".into()))?;
    sock.connect(socket).map_err(os(format!(
        "egress forwarder: reaching the proxy at {}",
        socket.display()
    )))?;
    crate::linux::netns::send_fd(sock.as_raw_fd(), listener.as_raw_fd()).map_err(os(
        "egress forwarder: handing the listener to the proxy".into(),
    ))?;
    drop(listener);
    drop(sock);
    let err = std::process::Command::new(program).args(args).exec();
    eprintln!("vibesys: cannot execute {program:?}: {err}");
    Ok(crate::exit_codes::exec_failure_code(&err))
}

/// Elsewhere there is no forwarder (no bwrap, no Linux container).
#[cfg(not(target_os = "linux"))]
pub fn run(_socket: &Path, _port: u16, _argv: &[OsString]) -> Result<i32, SandboxError> {
    Err(SandboxError::UnsupportedPlatform {
        backend: "egress forwarder",
    })
}
