//! A plain HTTP server on the host's loopback, for the egress tests: the
//! host an allow-list names, or the one it refuses.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The probe a confined command runs beside its HTTP clients (Python,
/// arguments: the allowed port, the refused port, a UDP port): a direct
/// TCP connect to both servers and UDP to the host's loopback and out,
/// each printing what happened (`DIRECT-OPEN`/`DIRECT-FAILED PORT`,
/// `UDP-LOCAL-SENT`/`-FAILED`, `UDP-OUT-SENT`/`-FAILED`). `before` and
/// `after` are more Python around it (`allowed`, `refused` and `udp` are
/// bound).
pub fn network_probe(before: &str, after: &str) -> String {
    format!(
        r#"import os, socket, sys, urllib.request
allowed, refused, udp = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
{before}for port in (allowed, refused):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5); print("DIRECT-OPEN", port)
    except OSError as e:
        print("DIRECT-FAILED", port, e.errno)
for target, name in ((("127.0.0.1", udp), "UDP-LOCAL"), (("192.0.2.1", 53), "UDP-OUT")):
    try:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.sendto(b"LEAK", target); print(name + "-SENT")
    except OSError as e:
        print(name + "-FAILED", e.errno)
{after}"#
    )
}

/// An HTTP server on 127.0.0.1 answering `BODY-<port>` to every request,
/// counting the connections it accepts; it lives as long as the test.
pub struct Server {
    /// The loopback port it listens on.
    pub port: u16,
    hits: Arc<AtomicUsize>,
}

impl Server {
    /// Listens on a free loopback port, answering `BODY-<port>\n`.
    pub fn start(body: &'static str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counter = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                counter.fetch_add(1, Ordering::SeqCst);
                std::thread::spawn(move || {
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 1024];
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match s.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let text = format!("{body}-{port}\n");
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                        text.len()
                    );
                });
            }
        });
        Server { port, hits }
    }

    /// The connections it has accepted so far.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// Asserts that this refused server was not reached since `before`
    /// hits, and that nothing of it reached `text`, a client's output in
    /// which a refused proxy `CONNECT` or SOCKS request printed its exit
    /// code (`REFUSED-CONNECT N`, `REFUSED-SOCKS N`): neither may be 0.
    pub fn assert_refused(&self, before: usize, text: &str, ctx: &str) {
        assert!(!text.contains("REFUSED-CONNECT 0"), "{ctx}");
        assert!(!text.contains("REFUSED-SOCKS 0"), "{ctx}");
        assert!(
            !text.contains("FORBIDDEN-BODY"),
            "the refused server answered: {ctx}"
        );
        assert_eq!(self.hits(), before, "the refused server was reached: {ctx}");
    }
}
