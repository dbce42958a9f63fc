//! The egress proxy: vibesys's one door out of a sandbox with an
//! allow-list. It runs outside the sandbox and serves listeners made
//! inside it: a sandbox's launch (or [`super::forward`], its forwarder)
//! listens on its own loopback and hands that listener over the proxy's
//! Unix datagram socket (bound in), so every connection is accepted by
//! the proxy itself, one hop ([`EgressProxy::start`]). Where a sandbox
//! has no loopback of its own (Seatbelt), the proxy listens itself on the
//! host's ([`EgressProxy::start_loopback`]); both are served by the same
//! accept loop. It speaks HTTP (CONNECT and plain requests)
//! and SOCKS5 on the same port, resolves names itself, and connects only to a host and port the
//! list admits. A name that resolves to a loopback, link-local or
//! otherwise local address is refused unless the list names that address.
//! Every refusal is recorded ([`Denials`]), with the process that asked
//! when it can be known ([`super::peer`]).
//!
//! Bounded: at most [`MAX_CONNECTIONS`] connections at once, a request
//! (HTTP head or SOCKS5 greeting and request) of at most [`MAX_HEAD`]
//! bytes, all of it within [`HEAD_TIMEOUT`] of the connection, a connect
//! within [`CONNECT_TIMEOUT`], copy buffers of [`COPY_BUFFER`] bytes each
//! way, and a refusal recorded as [`super::denials`] bounds it.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::Entrance;
use super::allow::{AllowList, Host, is_local_address};
use super::denials::{Denial, Denials};

/// Connections served at once; more wait for a free slot.
pub const MAX_CONNECTIONS: usize = 256;
/// The largest HTTP request head read.
pub const MAX_HEAD: usize = 16 * 1024;
/// How long a client has to send its whole request (a client sending
/// one byte at a time holds a slot no longer).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a connect to an admitted host may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// The copy buffer, each way, of one connection.
pub const COPY_BUFFER: usize = 64 * 1024;
/// Listeners served by one proxy (a sandbox hands over one; more are
/// closed).
pub const MAX_LISTENERS: usize = 16;

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the egress proxy: {what}: {source}")]
pub struct ProxyError {
    /// What failed.
    pub what: String,
    /// The cause.
    pub source: std::io::Error,
}

/// A running proxy. Dropping it stops the proxy (open connections are
/// closed) and removes its socket.
#[derive(Debug)]
pub struct EgressProxy {
    /// The private directory of a handover socket.
    dir: Option<PathBuf>,
    entrance: Entrance,
    denials: Arc<Mutex<Denials>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Where the proxy's connections come from: listeners handed over its
/// Unix datagram socket, or its own listener on the host loopback.
enum Listen {
    Handover(std::os::unix::net::UnixDatagram),
    Loopback(std::net::TcpListener),
}

impl EgressProxy {
    /// Starts a proxy for `allow` on a socket in a new private directory
    /// below `runtime_dir`, serving the listeners sandboxes hand over it
    /// ([`Entrance::Handover`]: bwrap, Landlock, Docker).
    pub fn start(allow: AllowList, runtime_dir: &Path) -> Result<Self, ProxyError> {
        let err = |what: String| move |source| ProxyError { what, source };
        let dir = private_dir(runtime_dir)
            .map_err(err(format!("creating a directory below {runtime_dir:?}")))?;
        let socket = dir.join("egress.sock");
        let bound = std::os::unix::net::UnixDatagram::bind(&socket)
            .map_err(err(format!("binding {socket:?}")))
            .and_then(|handoff| {
                handoff
                    .set_nonblocking(true)
                    .map_err(err("setting the socket non-blocking".into()))?;
                Ok(handoff)
            });
        let started = bound.and_then(|handoff| {
            Self::run(
                allow,
                Listen::Handover(handoff),
                Some(dir.clone()),
                Entrance::Handover(socket.clone()),
            )
        });
        if started.is_err() {
            let _ = std::fs::remove_file(&socket);
            let _ = std::fs::remove_dir(&dir);
        }
        started
    }

    /// Starts a proxy for `allow` that listens itself on `127.0.0.1`, at a
    /// port the system chooses ([`Entrance::Loopback`]: Seatbelt, where
    /// there is no network namespace to make a listener in). Any local
    /// process can connect to that port; it meets the same admission.
    pub fn start_loopback(allow: AllowList) -> Result<Self, ProxyError> {
        let err = |what: String| move |source| ProxyError { what, source };
        let listener = std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
            .map_err(err("listening on 127.0.0.1".into()))?;
        listener
            .set_nonblocking(true)
            .map_err(err("setting the listener non-blocking".into()))?;
        let port = listener
            .local_addr()
            .map_err(err("reading the listener's port".into()))?
            .port();
        Self::run(
            allow,
            Listen::Loopback(listener),
            None,
            Entrance::Loopback(port),
        )
    }

    /// Serves `listen` on a thread of its own until dropped.
    fn run(
        allow: AllowList,
        listen: Listen,
        dir: Option<PathBuf>,
        entrance: Entrance,
    ) -> Result<Self, ProxyError> {
        let err = |what: String| move |source| ProxyError { what, source };
        let denials = Arc::new(Mutex::new(Denials::default()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(err("building its runtime".into()))?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let state = Arc::new(Shared {
            allow,
            denials: denials.clone(),
            slots: tokio::sync::Semaphore::new(MAX_CONNECTIONS),
            lookups: tokio::sync::Mutex::new(()),
            head_timeout: HEAD_TIMEOUT,
        });
        let thread = std::thread::Builder::new()
            .name("vibesys-egress".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let serving = async move {
                        match listen {
                            Listen::Handover(handoff) => {
                                if let Ok(handoff) = tokio::net::UnixDatagram::from_std(handoff) {
                                    listeners(handoff, state).await;
                                }
                            }
                            Listen::Loopback(listener) => {
                                if let Ok(listener) = TcpListener::from_std(listener) {
                                    serve(listener, state).await;
                                }
                            }
                        }
                    };
                    tokio::select! {
                        _ = serving => {}
                        _ = stopped => {}
                    }
                });
            })
            .map_err(err("starting its thread".into()))?;
        Ok(Self {
            dir,
            entrance,
            denials,
            stop: Some(stop),
            thread: Some(thread),
        })
    }

    /// How a sandbox reaches this proxy.
    pub fn entrance(&self) -> &Entrance {
        &self.entrance
    }

    /// The refusals so far (at most
    /// [`super::denials::MAX_KEPT_DENIALS`]) and their total.
    pub fn denials(&self) -> (Vec<Denial>, u64) {
        match self.denials.lock() {
            Ok(d) => d.kept(),
            Err(_) => (Vec::new(), 0),
        }
    }

    /// Appends each refusal kept from now on to `log`, one JSON object a
    /// line (a [`Denial`]); attach it before the sandbox starts to miss
    /// none.
    pub fn log_to(&self, log: std::fs::File) {
        if let Ok(mut d) = self.denials.lock() {
            d.log_to(log);
        }
    }
}

impl Drop for EgressProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Entrance::Handover(socket) = &self.entrance {
            let _ = std::fs::remove_file(socket);
        }
        if let Some(dir) = &self.dir {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// A new directory only its owner can enter, below `parent`.
fn private_dir(parent: &Path) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    let mut last = None;
    for attempt in 0..16u32 {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(attempt);
        let dir = parent.join(format!(
            "vibesys-egress-{}-{:08x}",
            std::process::id(),
            nanos ^ attempt
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free directory name")))
}

struct Shared {
    allow: AllowList,
    denials: Arc<Mutex<Denials>>,
    slots: tokio::sync::Semaphore,
    /// One lookup of a refused client's process at a time.
    lookups: tokio::sync::Mutex<()>,
    /// [`HEAD_TIMEOUT`] (shorter in tests).
    head_timeout: Duration,
}

/// Receives the listeners sandboxes hand over and serves each (at most
/// [`MAX_LISTENERS`]; anything else sent is closed).
async fn listeners(handoff: tokio::net::UnixDatagram, state: Arc<Shared>) {
    let mut served = 0;
    loop {
        if handoff.readable().await.is_err() {
            return;
        }
        let received = handoff.try_io(tokio::io::Interest::READABLE, || {
            receive_fd(std::os::fd::AsRawFd::as_raw_fd(&handoff))
        });
        let Ok(fd) = received else {
            continue;
        };
        if served >= MAX_LISTENERS {
            continue;
        }
        let listener = std::net::TcpListener::from(fd);
        if listener.set_nonblocking(true).is_err() {
            continue;
        }
        let Ok(listener) = TcpListener::from_std(listener) else {
            continue;
        };
        served += 1;
        tokio::spawn(serve(listener, state.clone()));
    }
}

#[cfg(target_os = "linux")]
fn receive_fd(sock: std::os::fd::RawFd) -> std::io::Result<std::os::fd::OwnedFd> {
    crate::linux::netns::receive_fd(sock)
}

#[cfg(not(target_os = "linux"))]
fn receive_fd(_sock: std::os::fd::RawFd) -> std::io::Result<std::os::fd::OwnedFd> {
    Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
}

async fn serve(listener: TcpListener, state: Arc<Shared>) {
    loop {
        let Ok(permit) = state.slots.acquire().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            // A listener that fails (not one, or closed) is dropped.
            return;
        };
        let _ = stream.set_nodelay(true);
        permit.forget();
        let state = state.clone();
        tokio::spawn(async move {
            let _ = handle(stream, &state).await;
            state.slots.add_permits(1);
        });
    }
}

/// A refusal or failure answered to the client.
struct Refused {
    host: String,
    port: u16,
    reason: String,
    /// A policy refusal (recorded), not a connect failure.
    denied: bool,
}

async fn handle(mut client: TcpStream, state: &Shared) -> std::io::Result<()> {
    // One deadline for the whole request, however it is dribbled.
    let deadline = tokio::time::Instant::now() + state.head_timeout;
    let mut first = [0u8; 1];
    let n = tokio::time::timeout_at(deadline, client.read(&mut first))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)??;
    if n == 0 {
        return Ok(());
    }
    if first[0] == 5 {
        socks5(client, state, deadline).await
    } else {
        http(client, first[0], state, deadline).await
    }
}

/// Connects to `host:port` when the list admits it, else says why not
/// (a refusal recorded, with `client`'s process when it can be known).
async fn admit(
    state: &Shared,
    client: &TcpStream,
    host: &str,
    port: u16,
    via: &'static str,
) -> Result<TcpStream, Refused> {
    let refuse = |reason: String, denied: bool| Refused {
        host: host.to_owned(),
        port,
        reason,
        denied,
    };
    let result = async {
        let Some(parsed) = Host::parse(host) else {
            return Err(refuse("not a host name or address".into(), true));
        };
        if !state.allow.admits(&parsed, port) {
            return Err(refuse("not in the allow-list".into(), true));
        }
        let addrs: Vec<SocketAddr> = match &parsed {
            Host::Address(a) => vec![SocketAddr::new(*a, port)],
            Host::Name(n) => match tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio::net::lookup_host((n.as_str(), port)),
            )
            .await
            {
                Ok(Ok(a)) => a.collect(),
                Ok(Err(e)) => return Err(refuse(format!("cannot resolve: {e}"), false)),
                Err(_) => return Err(refuse("resolving timed out".into(), false)),
            },
        };
        let usable: Vec<SocketAddr> = addrs
            .iter()
            .copied()
            .filter(|a| !is_local_address(a.ip()) || state.allow.names_address(a.ip()))
            .collect();
        if usable.is_empty() {
            let shown: Vec<IpAddr> = addrs.iter().map(|a| a.ip()).collect();
            return Err(refuse(
                format!(
                    "resolves only to local addresses {shown:?}, which the allow-list does not name"
                ),
                true,
            ));
        }
        let mut last = String::new();
        for addr in usable {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(s)) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Ok(Err(e)) => last = format!("connecting to {addr}: {e}"),
                Err(_) => last = format!("connecting to {addr} timed out"),
            }
        }
        Err(refuse(last, false))
    }
    .await;
    if let Err(r) = &result
        && r.denied
    {
        let time = jiff::Timestamp::now().to_string();
        let process = peer_process(state, client).await;
        if let Ok(mut d) = state.denials.lock() {
            d.record(Denial {
                time,
                host: r.host.clone(),
                port,
                reason: r.reason.clone(),
                via,
                pid: process.as_ref().map(|p| p.pid),
                command: process.map(|p| p.command),
            });
        }
    }
    result
}

/// The process behind `client`, for a refusal that will be kept: looked
/// up off the runtime's thread, one at a time, within
/// [`super::peer::LOOKUP_BUDGET`] (the client still waits for its answer,
/// so its socket is still there to find). A refusal that waits longer
/// than that for its turn goes without (a flood of refusals delays each
/// by twice the budget at most).
async fn peer_process(state: &Shared, client: &TcpStream) -> Option<super::peer::PeerProcess> {
    use std::os::fd::AsFd;
    if !state.denials.lock().is_ok_and(|d| d.keeps_more()) {
        return None;
    }
    let (local, peer) = (client.local_addr().ok()?, client.peer_addr().ok()?);
    let _one = tokio::time::timeout(super::peer::LOOKUP_BUDGET, state.lookups.lock())
        .await
        .ok()?;
    let sock = client.as_fd().try_clone_to_owned().ok()?;
    tokio::task::spawn_blocking(move || super::peer::lookup(sock, local, peer))
        .await
        .ok()
        .flatten()
}

async fn splice(mut a: impl AsyncRead + AsyncWrite + Unpin, mut b: TcpStream) {
    let _ =
        tokio::io::copy_bidirectional_with_sizes(&mut a, &mut b, COPY_BUFFER, COPY_BUFFER).await;
}

/// An HTTP request head as read: complete (the bytes read and where the
/// head ends), or the client gave up or sent too much.
enum Head {
    Complete(Vec<u8>, usize),
    Closed,
    TooLarge,
}

/// Reads a request head that starts with `first`, up to [`MAX_HEAD`]
/// bytes (no deadline here: the caller's covers the whole head).
async fn read_head(client: &mut TcpStream, first: u8) -> std::io::Result<Head> {
    let mut buf = vec![first];
    let mut searched = 0;
    loop {
        // Only the new bytes (and three before them) can end the head.
        if let Some(end) = find_head_end(&buf[searched..]) {
            return Ok(Head::Complete(buf, searched + end));
        }
        searched = buf.len().saturating_sub(3);
        if buf.len() >= MAX_HEAD {
            return Ok(Head::TooLarge);
        }
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Ok(Head::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn http(
    mut client: TcpStream,
    first: u8,
    state: &Shared,
    deadline: tokio::time::Instant,
) -> std::io::Result<()> {
    let head = tokio::time::timeout_at(deadline, read_head(&mut client, first))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)??;
    let (buf, head_end) = match head {
        Head::Complete(buf, end) => (buf, end),
        Head::Closed => return Ok(()),
        Head::TooLarge => {
            return respond(
                &mut client,
                "431 Request Header Fields Too Large",
                "request head too large",
            )
            .await;
        }
    };
    let mut headers = [httparse::EMPTY_HEADER; 100];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = req.parse(&buf[..head_end]) else {
        return respond(&mut client, "400 Bad Request", "malformed request").await;
    };
    let (Some(method), Some(target)) = (req.method, req.path) else {
        return respond(&mut client, "400 Bad Request", "malformed request").await;
    };
    if method.eq_ignore_ascii_case("CONNECT") {
        let Some((host, port)) = authority(target, None) else {
            return respond(&mut client, "400 Bad Request", "CONNECT needs host:port").await;
        };
        match admit(state, &client, &host, port, "connect").await {
            Ok(upstream) => {
                client
                    .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                    .await?;
                let rest = buf[head_end..].to_vec();
                let mut upstream = upstream;
                if !rest.is_empty() {
                    upstream.write_all(&rest).await?;
                }
                splice(client, upstream).await;
                Ok(())
            }
            Err(r) => refused(&mut client, &r).await,
        }
    } else {
        let Some(after) = target.strip_prefix("http://") else {
            return respond(
                &mut client,
                "400 Bad Request",
                "a proxy request needs an absolute http:// URL (use CONNECT for https)",
            )
            .await;
        };
        let (auth, path) = match after.find(['/', '?']) {
            Some(i) => (&after[..i], &after[i..]),
            None => (after, "/"),
        };
        let Some((host, port)) = authority(auth, Some(80)) else {
            return respond(&mut client, "400 Bad Request", "bad host in the URL").await;
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_owned()
        };
        match admit(state, &client, &host, port, "http").await {
            Ok(mut upstream) => {
                let version = if req.version == Some(0) { "1.0" } else { "1.1" };
                let mut head = format!("{method} {path} HTTP/{version}\r\n").into_bytes();
                for h in req.headers.iter() {
                    let name = h.name.to_ascii_lowercase();
                    if matches!(
                        name.as_str(),
                        "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive"
                    ) {
                        continue;
                    }
                    head.extend_from_slice(h.name.as_bytes());
                    head.extend_from_slice(b": ");
                    head.extend_from_slice(h.value);
                    head.extend_from_slice(b"\r\n");
                }
                // One request a connection: a client that reuses it for
                // another host gets a new, checked connection.
                head.extend_from_slice(b"Connection: close\r\n\r\n");
                upstream.write_all(&head).await?;
                let rest = buf[head_end..].to_vec();
                if !rest.is_empty() {
                    upstream.write_all(&rest).await?;
                }
                splice(client, upstream).await;
                Ok(())
            }
            Err(r) => refused(&mut client, &r).await,
        }
    }
}

fn find_head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// `host:port` (or `[v6]:port`); `default` when the port is absent.
fn authority(text: &str, default: Option<u16>) -> Option<(String, u16)> {
    if text.contains('@') {
        return None;
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let end = rest.find(']')?;
        let host = &rest[..end];
        match &rest[end + 1..] {
            "" => (host, None),
            p => (host, Some(p.strip_prefix(':')?)),
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (text, None),
        }
    };
    let port = match port {
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0)?,
        None => default?,
    };
    if host.is_empty() {
        return None;
    }
    Some((host.to_owned(), port))
}

async fn respond(client: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let body = format!("vibesys egress proxy: {body}\n");
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(msg.as_bytes()).await?;
    client.shutdown().await
}

async fn refused(client: &mut TcpStream, r: &Refused) -> std::io::Result<()> {
    let status = if r.denied {
        "403 Forbidden"
    } else {
        "502 Bad Gateway"
    };
    respond(
        client,
        status,
        &format!("{}:{} refused: {}", r.host, r.port, r.reason),
    )
    .await
}

/// SOCKS5 (RFC 1928), no authentication, CONNECT only.
async fn socks5(
    mut client: TcpStream,
    state: &Shared,
    deadline: tokio::time::Instant,
) -> std::io::Result<()> {
    let reply = |code: u8| [5, code, 0, 1, 0, 0, 0, 0, 0, 0];
    let request = tokio::time::timeout_at(deadline, socks5_request(&mut client))
        .await
        .map_err(|_| std::io::ErrorKind::TimedOut)??;
    let (host, port) = match request {
        Ok(target) => target,
        Err(code) => return client.write_all(&[5, code]).await,
    };
    let (host, port) = match (host, port) {
        (Some(h), p) => (h, p),
        (None, code) => return client.write_all(&reply(code as u8)).await,
    };
    match admit(state, &client, &host, port, "socks5").await {
        Ok(upstream) => {
            client.write_all(&reply(0)).await?;
            splice(client, upstream).await;
            Ok(())
        }
        Err(r) => client.write_all(&reply(if r.denied { 2 } else { 5 })).await,
    }
}

/// The greeting and request after the version byte: `Ok(Ok((Some(host),
/// port)))`, `Ok(Ok((None, code)))` for a request refused with `code`, or
/// `Ok(Err(0xff))` when no acceptable method was offered (after that
/// answer is due).
async fn socks5_request(
    client: &mut TcpStream,
) -> std::io::Result<Result<(Option<String>, u16), u8>> {
    let n = client.read_u8().await?;
    let mut methods = vec![0u8; usize::from(n)];
    client.read_exact(&mut methods).await?;
    if !methods.contains(&0) {
        return Ok(Err(0xff));
    }
    client.write_all(&[5, 0]).await?;
    let mut req = [0u8; 4];
    client.read_exact(&mut req).await?;
    let host = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            client.read_exact(&mut a).await?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        4 => {
            let mut a = [0u8; 16];
            client.read_exact(&mut a).await?;
            std::net::Ipv6Addr::from(a).to_string()
        }
        3 => {
            let len = client.read_u8().await?;
            let mut name = vec![0u8; usize::from(len)];
            client.read_exact(&mut name).await?;
            String::from_utf8_lossy(&name).into_owned()
        }
        _ => return Ok(Ok((None, 8))),
    };
    let port = client.read_u16().await?;
    if req[0] != 5 || req[1] != 1 {
        return Ok(Ok((None, 7)));
    }
    Ok(Ok((Some(host), port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A client that connects to a fresh listener and sends `pieces`, one
    /// every `gap`; returns the proxy's end.
    async fn dribbling_client(
        pieces: Vec<&'static [u8]>,
        gap: Duration,
    ) -> (TcpStream, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client = tokio::spawn(async move {
            let mut s = TcpStream::connect(addr).await.unwrap();
            for piece in pieces {
                if s.write_all(piece).await.is_err() {
                    return;
                }
                tokio::time::sleep(gap).await;
            }
            // Hold the connection open until aborted.
            std::future::pending::<()>().await;
        });
        let (stream, _) = listener.accept().await.unwrap();
        (stream, client)
    }

    /// Slowloris: a head sent a byte at a time, each within any per-read
    /// timeout, still meets one deadline for the whole request.
    #[test]
    fn a_dribbled_request_head_meets_one_deadline() {
        runtime().block_on(async {
            let (stream, client) =
                dribbling_client(vec![b"G"; 200], Duration::from_millis(20)).await;
            let state = Shared {
                allow: AllowList::default(),
                denials: Arc::new(Mutex::new(Denials::default())),
                slots: tokio::sync::Semaphore::new(1),
                lookups: tokio::sync::Mutex::new(()),
                head_timeout: Duration::from_millis(300),
            };
            let started = std::time::Instant::now();
            let result = tokio::time::timeout(Duration::from_secs(3), handle(stream, &state)).await;
            client.abort();
            let Ok(Err(e)) = result else {
                panic!("the dribbling client kept its slot past the deadline: {result:?}");
            };
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
            assert!(started.elapsed() < Duration::from_secs(2));
        });
    }

    /// The head's end is found when its four bytes come in two reads.
    #[test]
    fn a_head_end_split_across_reads_is_found() {
        runtime().block_on(async {
            let head: &[u8] = b"ET / HTTP/1.1\r\nHost: a\r\n\r";
            let (mut stream, client) =
                dribbling_client(vec![head, b"\nrest"], Duration::from_millis(50)).await;
            let got = read_head(&mut stream, b'G').await.unwrap();
            client.abort();
            let Head::Complete(buf, end) = got else {
                panic!("the head was not found");
            };
            assert_eq!(&buf[..end], b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        });
    }

    #[test]
    fn authorities() {
        assert_eq!(authority("a.com:443", None), Some(("a.com".into(), 443)));
        assert_eq!(authority("a.com", Some(80)), Some(("a.com".into(), 80)));
        assert_eq!(authority("[::1]:8080", None), Some(("::1".into(), 8080)));
        assert_eq!(authority("a.com", None), None);
        assert_eq!(authority("u@a.com:1", None), None);
        assert_eq!(authority("a.com:0", None), None);
    }
}
