//! The forwarder inside a sandbox with an allow-list: it listens on the
//! sandbox's own loopback at [`super::INSIDE_PORT`] (the address the proxy
//! variables name), relays each connection to the proxy's Unix socket
//! bound in, and runs the command as its child. It is no boundary: a
//! process that reaches the socket directly meets the same proxy.

use std::ffi::OsString;
use std::path::Path;

use tokio::net::{TcpListener, UnixStream};

use crate::error::SandboxError;

/// Connections relayed at once.
const MAX_CONNECTIONS: usize = 256;

/// Listens on `127.0.0.1:port`, relays to `socket`, runs `argv` and
/// returns its exit code (127/126 when it cannot be started).
pub fn run(socket: &Path, port: u16, argv: &[OsString]) -> Result<i32, SandboxError> {
    let os = |what: &str| {
        let what = what.to_owned();
        move |source| SandboxError::Os { what, source }
    };
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).map_err(os(&format!(
        "egress forwarder: listening on 127.0.0.1:{port}"
    )))?;
    listener
        .set_nonblocking(true)
        .map_err(os("egress forwarder: setting the listener non-blocking"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(os("egress forwarder: building its runtime"))?;
    let socket = socket.to_path_buf();
    std::thread::Builder::new()
        .name("vibesys-egress-forward".into())
        .spawn(move || runtime.block_on(relay(listener, socket)))
        .map_err(os("egress forwarder: starting its thread"))?;
    let Some((program, args)) = argv.split_first() else {
        return Err(SandboxError::InvalidCommand("the command is empty".into()));
    };
    match std::process::Command::new(program).args(args).status() {
        Ok(status) => Ok(crate::exit_codes::exit_code(status)),
        Err(e) => {
            eprintln!("vibesys: error: cannot run {program:?}: {e}");
            Ok(crate::exit_codes::exec_failure_code(&e))
        }
    }
}

/// Relays what `listener` (made in a sandbox's own network namespace)
/// accepts to the proxy's `socket`, on a thread of its own for the rest
/// of this process's life.
pub fn relay_in_background(
    listener: std::net::TcpListener,
    socket: std::path::PathBuf,
) -> Result<(), SandboxError> {
    let os = |what: &str| {
        let what = what.to_owned();
        move |source| SandboxError::Os { what, source }
    };
    listener
        .set_nonblocking(true)
        .map_err(os("egress relay: setting the listener non-blocking"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(os("egress relay: building its runtime"))?;
    std::thread::Builder::new()
        .name("vibesys-egress-relay".into())
        .spawn(move || runtime.block_on(relay(listener, socket)))
        .map_err(os("egress relay: starting its thread"))?;
    Ok(())
}

async fn relay(listener: std::net::TcpListener, socket: std::path::PathBuf) {
    let Ok(listener) = TcpListener::from_std(listener) else {
        return;
    };
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let Ok((mut tcp, _)) = listener.accept().await else {
            continue;
        };
        let socket = socket.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = tcp.set_nodelay(true);
            if let Ok(mut unix) = UnixStream::connect(&socket).await {
                let _ = tokio::io::copy_bidirectional_with_sizes(
                    &mut tcp,
                    &mut unix,
                    super::proxy::COPY_BUFFER,
                    super::proxy::COPY_BUFFER,
                )
                .await;
            }
        });
    }
}
