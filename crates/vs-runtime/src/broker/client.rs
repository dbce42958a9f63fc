//! The client side: `vibesys broker job` and `vibesys broker gate`.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;

use super::BrokerError;
use super::protocol::{
    Final, FrameKind, ProtocolError, Request, decode_final, encode_request, read_frame, write_frame,
};

/// Sends one request, streams the job's output to `out` and `err` as it
/// arrives, and returns the final status.
pub fn call(
    socket: &Path,
    request: &Request,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<Final, BrokerError> {
    let mut stream = UnixStream::connect(socket).map_err(|source| BrokerError::Io {
        what: format!("connect to the broker socket {}", socket.display()),
        source,
    })?;
    let payload = encode_request(request)?;
    write_frame(&mut stream, FrameKind::Request, &payload)?;
    loop {
        let frame = match read_frame(&mut stream) {
            Ok(f) => f,
            Err(ProtocolError::Truncated) => {
                return Err(ProtocolError::Malformed {
                    what: "reply",
                    message: "the broker closed the connection without a final status".into(),
                }
                .into());
            }
            Err(e) => return Err(e.into()),
        };
        match frame.kind {
            FrameKind::Stdout => {
                let _ = out.write_all(&frame.payload);
                let _ = out.flush();
            }
            FrameKind::Stderr => {
                let _ = err.write_all(&frame.payload);
                let _ = err.flush();
            }
            FrameKind::Final => return Ok(decode_final(&frame.payload)?),
            FrameKind::Request => {
                return Err(ProtocolError::UnexpectedKind {
                    expected: "output or final",
                    found: frame.kind,
                }
                .into());
            }
        }
    }
}
