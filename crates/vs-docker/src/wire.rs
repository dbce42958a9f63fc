//! The command server's wire format: length-prefixed JSON frames over the
//! container's attached stdin (requests) and stdout (replies).
//!
//! A frame is a 4-byte big-endian length followed by that many bytes of
//! JSON. Both ends bound the length before reading the body, so neither a
//! broken server nor a broken host can make the other allocate without
//! limit.

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

use vs_sandbox::runner::CommandResult;

/// Where the static vibesys is mounted inside the container.
pub const SERVER_PATH: &str = "/.vibesys/vibesys";

/// The hidden subcommand that runs the command server.
pub const SERVER_SUBCOMMAND: &str = vs_sandbox::helper::Helper::COMMAND_SERVER;

/// Largest request the server accepts (the command's stdin travels in it,
/// base64-encoded): 64 MiB.
pub const MAX_REQUEST: usize = 64 << 20;

/// Largest stdin a command can be given through the server: what fits in
/// [`MAX_REQUEST`] once base64-encoded, less room for the rest.
pub const MAX_STDIN: usize = (MAX_REQUEST / 4) * 3 - (1 << 20);

/// Largest reply the host accepts for a given output cap: two streams of
/// `cap` bytes each, JSON-escaped (at most 6 bytes per byte), plus room for
/// the rest.
pub fn max_reply(output_cap: usize) -> usize {
    output_cap.saturating_mul(12).saturating_add(1 << 20)
}

/// One request from the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Run one command.
    Run(RunRequest),
    /// Kill the tree of a running command.
    Cancel {
        /// The request to cancel.
        id: u64,
    },
}

/// A command to run, as the host's [`crate::CommandSpec`] lowered for the
/// container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// Chosen by the host, unique per connection.
    pub id: u64,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// Set on top of the server's own environment (the image's).
    pub env: Vec<(String, String)>,
    /// stdin bytes, base64; `None` closes stdin at once.
    pub stdin: Option<String>,
    /// Kill the tree after this many milliseconds.
    pub timeout_ms: Option<u64>,
    /// Bytes kept per output stream.
    pub output_cap: usize,
}

/// One reply from the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// Sent once, first: the server is up.
    Ready {
        /// The server's vibesys version.
        version: String,
    },
    /// A command ran (whatever its status).
    Done {
        /// The request.
        id: u64,
        /// Its bounded result.
        result: CommandResult,
    },
    /// A command could not be started or observed.
    Failed {
        /// The request.
        id: u64,
        /// Why, as the server's runner said it.
        error: String,
    },
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    let mut buf = Vec::with_capacity(4 + body.len());
    buf.extend_from_slice(&len.to_be_bytes());
    buf.extend_from_slice(body);
    w.write_all(&buf)?;
    w.flush()
}

/// Encodes one frame into a buffer.
pub fn frame(body: &[u8]) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(4 + body.len());
    write_frame(&mut buf, body)?;
    Ok(buf)
}

/// Reads one frame; `Ok(None)` at a clean end of stream (before a
/// header). A frame over `max` bytes, or a stream that ends inside a
/// frame, is an error.
pub fn read_frame(r: &mut impl Read, max: usize) -> io::Result<Option<Vec<u8>>> {
    let mut header = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match r.read(&mut header[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let len = u32::from_be_bytes(header) as usize;
    if len > max {
        return Err(too_long(len, max));
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

fn too_long(len: usize, max: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("a frame of {len} bytes is over the limit of {max}"),
    )
}

/// Splits frames out of a byte stream that arrives in arbitrary chunks.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
}

impl FrameDecoder {
    /// Appends a chunk and returns every frame now complete. A header
    /// announcing more than `max` bytes is an error (the stream is then
    /// unusable).
    pub fn push(&mut self, chunk: &[u8], max: usize) -> io::Result<Vec<Vec<u8>>> {
        self.buf.extend_from_slice(chunk);
        let mut frames = Vec::new();
        let mut at = 0;
        while let Some(header) = self.buf.get(at..at + 4) {
            let mut h = [0u8; 4];
            h.copy_from_slice(header);
            let len = u32::from_be_bytes(h) as usize;
            if len > max {
                return Err(too_long(len, max));
            }
            let Some(body) = self.buf.get(at + 4..at + 4 + len) else {
                break;
            };
            frames.push(body.to_vec());
            at += 4 + len;
        }
        self.buf.drain(..at);
        Ok(frames)
    }

    /// Whether a partial frame is buffered.
    pub fn is_mid_frame(&self) -> bool {
        !self.buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_in_any_chunking() {
        let a = frame(b"{\"a\":1}").unwrap();
        let b = frame(b"").unwrap();
        let c = frame(&[7u8; 1000]).unwrap();
        let all: Vec<u8> = [a, b, c].concat();
        for step in [1, 3, 4, 5, 1000, all.len()] {
            let mut d = FrameDecoder::default();
            let mut got = Vec::new();
            for chunk in all.chunks(step) {
                got.extend(d.push(chunk, 4096).unwrap());
            }
            assert_eq!(got.len(), 3, "step {step}");
            assert_eq!(got[0], b"{\"a\":1}");
            assert!(got[1].is_empty());
            assert_eq!(got[2], vec![7u8; 1000]);
            assert!(!d.is_mid_frame());
        }
        let mut r = &all[..];
        assert_eq!(read_frame(&mut r, 4096).unwrap().unwrap(), b"{\"a\":1}");
        assert_eq!(read_frame(&mut r, 4096).unwrap().unwrap(), b"");
        assert_eq!(read_frame(&mut r, 4096).unwrap().unwrap().len(), 1000);
        assert!(read_frame(&mut r, 4096).unwrap().is_none());
    }

    #[test]
    fn oversized_and_truncated_frames_are_errors() {
        let big = frame(&[0u8; 100]).unwrap();
        let mut d = FrameDecoder::default();
        let e = d.push(&big, 99).unwrap_err();
        assert!(e.to_string().contains("100 bytes"), "{e}");
        let mut r = &big[..];
        assert!(read_frame(&mut r, 99).is_err());
        let mut r = &big[..50];
        assert_eq!(
            read_frame(&mut r, 1000).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn a_run_request_round_trips() {
        let r = Request::Run(RunRequest {
            id: 1,
            argv: vec!["sh".into(), "-c".into(), "true".into()],
            cwd: "/w".into(),
            env: vec![("A".into(), "1".into())],
            stdin: Some("aGk=".into()),
            timeout_ms: Some(5),
            output_cap: 10,
        });
        let j = serde_json::to_string(&r).unwrap();
        assert!(j.starts_with(r#"{"type":"run","id":1,"#), "{j}");
        assert_eq!(serde_json::from_str::<Request>(&j).unwrap(), r);
    }

    #[test]
    fn requests_reject_unknown_fields() {
        let ok = r#"{"type":"cancel","id":3}"#;
        assert_eq!(
            serde_json::from_str::<Request>(ok).unwrap(),
            Request::Cancel { id: 3 }
        );
        let bad = r#"{"type":"cancel","id":3,"extra":1}"#;
        assert!(serde_json::from_str::<Request>(bad).is_err());
    }
}
