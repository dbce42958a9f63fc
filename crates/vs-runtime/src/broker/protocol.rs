//! The broker's wire protocol, version 1: both ends use these types.
//!
//! A connection carries frames: a 4-byte big-endian length `L`, then `L`
//! bytes (a kind byte and the payload). `L` is at most [`MAX_FRAME`]. The
//! client sends one [`Request`] frame (JSON); the broker answers with any
//! number of output frames (raw stdout or stderr bytes) and exactly one
//! [`Final`] frame (JSON), then closes. A request that cannot be decoded
//! gets a [`Final::Refused`] naming the cause.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest frame body (kind byte + payload), in bytes.
pub const MAX_FRAME: usize = 64 * 1024;

/// Largest output payload in one frame.
pub const MAX_OUTPUT_CHUNK: usize = MAX_FRAME - 1;

/// Most argv elements and environment variables in a request.
pub const MAX_ITEMS: usize = 1024;

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// The client's request (JSON).
    Request = 1,
    /// Bytes the job wrote to stdout.
    Stdout = 2,
    /// Bytes the job wrote to stderr.
    Stderr = 3,
    /// The final status (JSON).
    Final = 4,
}

impl FrameKind {
    fn from_byte(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Request),
            2 => Some(Self::Stdout),
            3 => Some(Self::Stderr),
            4 => Some(Self::Final),
            _ => None,
        }
    }
}

/// One frame read from the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// What the payload is.
    pub kind: FrameKind,
    /// The payload (at most [`MAX_OUTPUT_CHUNK`] bytes).
    pub payload: Vec<u8>,
}

/// What a client asks for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Request {
    /// Run a command as an agent job (confined on a compute node).
    Job {
        /// Must equal [`PROTOCOL_VERSION`].
        version: u32,
        /// The command and its arguments.
        argv: Vec<String>,
        /// The working directory (default: the workspace root).
        #[serde(default)]
        cwd: Option<PathBuf>,
        /// GPUs to allocate (`--gres=gpu:N`).
        #[serde(default)]
        gpus: u32,
        /// Time limit in minutes (default: the operator's limit).
        #[serde(default)]
        time_minutes: Option<u32>,
        /// Variables for the command (filtered by the broker).
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// `Some(false)`: the job has no network (an evaluation without
        /// `network = true`); otherwise the project's setting.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        network: Option<bool>,
    },
    /// Run one of the task's trusted gates by name (framework socket only).
    Gate {
        /// Must equal [`PROTOCOL_VERSION`].
        version: u32,
        /// The gate's name in `[gates.NAME]`.
        name: String,
    },
}

impl Request {
    /// A request to run the task's trusted gate `name` (this version).
    pub fn gate(name: String) -> Self {
        Self::Gate {
            version: PROTOCOL_VERSION,
            name,
        }
    }

    /// The version the client spoke.
    pub fn version(&self) -> u32 {
        match self {
            Self::Job { version, .. } | Self::Gate { version, .. } => *version,
        }
    }
}

/// How a request ended: the last frame of every connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Final {
    /// The job ran; `code` is its exit status (128+N for signal N).
    Exited {
        /// The exit status.
        code: i32,
    },
    /// Slurm ended the job itself (cancelled, timed out, node failure...).
    JobEnded {
        /// Slurm's job state (`CANCELLED`, `TIMEOUT`, `NODE_FAIL`, ...).
        state: String,
        /// What happened, for a human.
        message: String,
    },
    /// The broker refused the request; nothing was submitted.
    Refused {
        /// Why, naming the cause.
        reason: String,
    },
}

/// Exit status of the client when Slurm cancelled the job.
pub const EXIT_JOB_CANCELLED: i32 = 123;
/// Exit status of the client when the job hit its time limit.
pub const EXIT_JOB_TIMED_OUT: i32 = 124;
/// Exit status of the client when Slurm failed the job (node failure,
/// launch failure, out of memory, preemption).
pub const EXIT_JOB_FAILED: i32 = 120;
/// Exit status of the client when the broker refused or vibesys failed.
pub const EXIT_REFUSED: i32 = 125;

impl Final {
    /// The exit status a client reports for this outcome.
    pub fn exit_code(&self) -> i32 {
        match self {
            Self::Exited { code } => *code,
            Self::JobEnded { state, .. } => match state.as_str() {
                "TIMEOUT" | "DEADLINE" => EXIT_JOB_TIMED_OUT,
                "CANCELLED" => EXIT_JOB_CANCELLED,
                _ => EXIT_JOB_FAILED,
            },
            Self::Refused { .. } => EXIT_REFUSED,
        }
    }

    /// What the client says on its stderr about this outcome, after
    /// `vibesys: `: Slurm's message, or the broker's refusal.
    pub fn client_note(&self) -> Option<String> {
        match self {
            Self::Exited { .. } => None,
            Self::JobEnded { message, .. } => Some(message.clone()),
            Self::Refused { reason } => {
                Some(format!("error: the broker refused the request: {reason}"))
            }
        }
    }

    /// [`Final::exit_code`] as the client's process status (125 when it
    /// does not fit).
    pub fn client_status(&self) -> u8 {
        u8::try_from(self.exit_code()).unwrap_or(EXIT_REFUSED as u8)
    }
}

/// A protocol violation or a broken connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// Reading or writing the socket failed.
    #[error("broker connection: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the connection before a whole frame arrived.
    #[error("the connection closed before a whole frame arrived")]
    Truncated,
    /// A frame announced more bytes than allowed.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    Oversized {
        /// The announced length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A frame had no kind byte or an unknown one.
    #[error("unknown frame kind {kind}")]
    UnknownKind {
        /// The kind byte (0 for an empty frame).
        kind: u8,
    },
    /// A frame of the wrong kind arrived.
    #[error("expected a {expected} frame, got {found:?}")]
    UnexpectedKind {
        /// What was expected.
        expected: &'static str,
        /// What arrived.
        found: FrameKind,
    },
    /// The JSON did not decode into a request or a final status.
    #[error("malformed {what}: {message}")]
    Malformed {
        /// `request` or `final status`.
        what: &'static str,
        /// The decoder's message (bounded).
        message: String,
    },
    /// The request speaks another protocol version.
    #[error("unsupported protocol version {found} (this broker speaks {PROTOCOL_VERSION})")]
    Version {
        /// The version sent.
        found: u32,
    },
    /// A request field breaks a bound.
    #[error("invalid request: {0}")]
    Invalid(String),
}

/// Reads one frame; never allocates more than [`MAX_FRAME`] bytes.
pub fn read_frame(r: &mut impl Read) -> Result<Frame, ProtocolError> {
    let mut len = [0u8; 4];
    read_exact_or_truncated(r, &mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(ProtocolError::Oversized {
            len,
            max: MAX_FRAME,
        });
    }
    if len == 0 {
        return Err(ProtocolError::UnknownKind { kind: 0 });
    }
    let mut body = vec![0u8; len];
    read_exact_or_truncated(r, &mut body)?;
    let kind = FrameKind::from_byte(body[0]).ok_or(ProtocolError::UnknownKind { kind: body[0] })?;
    body.remove(0);
    Ok(Frame {
        kind,
        payload: body,
    })
}

fn read_exact_or_truncated(r: &mut impl Read, buf: &mut [u8]) -> Result<(), ProtocolError> {
    r.read_exact(buf).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ProtocolError::Truncated
        } else {
            ProtocolError::Io(e)
        }
    })
}

/// Writes one frame (a payload longer than [`MAX_OUTPUT_CHUNK`] is an
/// error: split output with [`write_output`]).
pub fn write_frame(
    w: &mut impl Write,
    kind: FrameKind,
    payload: &[u8],
) -> Result<(), ProtocolError> {
    if payload.len() > MAX_OUTPUT_CHUNK {
        return Err(ProtocolError::Oversized {
            len: payload.len() + 1,
            max: MAX_FRAME,
        });
    }
    let len = (payload.len() + 1) as u32;
    let mut buf = Vec::with_capacity(payload.len() + 5);
    buf.extend_from_slice(&len.to_be_bytes());
    buf.push(kind as u8);
    buf.extend_from_slice(payload);
    w.write_all(&buf)?;
    Ok(())
}

/// Writes output bytes as as many frames as needed.
pub fn write_output(
    w: &mut impl Write,
    kind: FrameKind,
    bytes: &[u8],
) -> Result<(), ProtocolError> {
    for chunk in bytes.chunks(MAX_OUTPUT_CHUNK) {
        write_frame(w, kind, chunk)?;
    }
    Ok(())
}

/// Decodes and checks a request payload: the one decoder the broker uses
/// (and the fuzz target drives).
pub fn decode_request(payload: &[u8]) -> Result<Request, ProtocolError> {
    let req: Request = serde_json::from_slice(payload).map_err(|e| ProtocolError::Malformed {
        what: "request",
        message: bounded(&e.to_string()),
    })?;
    if req.version() != PROTOCOL_VERSION {
        return Err(ProtocolError::Version {
            found: req.version(),
        });
    }
    match &req {
        Request::Job { argv, env, .. } => {
            if argv.is_empty() || argv[0].is_empty() {
                return Err(ProtocolError::Invalid("the command is empty".into()));
            }
            if argv.len() > MAX_ITEMS || env.len() > MAX_ITEMS {
                return Err(ProtocolError::Invalid(format!(
                    "more than {MAX_ITEMS} arguments or environment variables"
                )));
            }
            if argv.iter().any(|a| a.contains('\0')) {
                return Err(ProtocolError::Invalid("an argument contains NUL".into()));
            }
            if env
                .iter()
                .any(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
            {
                return Err(ProtocolError::Invalid(
                    "an environment variable name is empty or contains '=' or NUL, or a value contains NUL"
                        .into(),
                ));
            }
        }
        Request::Gate { name, .. } => {
            if name.is_empty() || name.len() > 128 {
                return Err(ProtocolError::Invalid(
                    "a gate name must be 1 to 128 bytes".into(),
                ));
            }
        }
    }
    Ok(req)
}

/// Encodes a request as a frame payload; bounded like every frame.
pub fn encode_request(req: &Request) -> Result<Vec<u8>, ProtocolError> {
    let bytes = serde_json::to_vec(req).map_err(|e| ProtocolError::Malformed {
        what: "request",
        message: bounded(&e.to_string()),
    })?;
    if bytes.len() > MAX_OUTPUT_CHUNK {
        return Err(ProtocolError::Oversized {
            len: bytes.len() + 1,
            max: MAX_FRAME,
        });
    }
    Ok(bytes)
}

/// Encodes a final status (always small: reasons are bounded).
pub fn encode_final(status: &Final) -> Vec<u8> {
    serde_json::to_vec(status)
        .unwrap_or_else(|_| br#"{"status":"refused","reason":"internal"}"#.to_vec())
}

/// Decodes a final status.
pub fn decode_final(payload: &[u8]) -> Result<Final, ProtocolError> {
    serde_json::from_slice(payload).map_err(|e| ProtocolError::Malformed {
        what: "final status",
        message: bounded(&e.to_string()),
    })
}

/// Cuts a message to 512 characters.
pub(crate) fn bounded(s: &str) -> String {
    s.chars().take(512).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_round_trip_and_bounds() {
        let req = Request::Job {
            network: Some(false),
            version: 1,
            argv: vec!["true".into()],
            cwd: None,
            gpus: 1,
            time_minutes: Some(2),
            env: BTreeMap::new(),
        };
        let bytes = encode_request(&req).unwrap();
        assert_eq!(decode_request(&bytes).unwrap(), req);
        assert!(matches!(
            decode_request(br#"{"kind":"job","version":2,"argv":["x"]}"#),
            Err(ProtocolError::Version { found: 2 })
        ));
        assert!(matches!(
            decode_request(br#"{"kind":"gate","version":1,"name":"a","argv":["x"]}"#),
            Err(ProtocolError::Malformed { .. })
        ));
        assert!(matches!(
            decode_request(br#"{"kind":"job","version":1,"argv":[]}"#),
            Err(ProtocolError::Invalid(_))
        ));
        let mut wire = Vec::new();
        wire.extend_from_slice(&(MAX_FRAME as u32 + 1).to_be_bytes());
        assert!(matches!(
            read_frame(&mut wire.as_slice()),
            Err(ProtocolError::Oversized { .. })
        ));
        let mut wire = Vec::new();
        write_output(
            &mut wire,
            FrameKind::Stdout,
            &vec![7u8; MAX_OUTPUT_CHUNK + 3],
        )
        .unwrap();
        let mut r = wire.as_slice();
        assert_eq!(read_frame(&mut r).unwrap().payload.len(), MAX_OUTPUT_CHUNK);
        assert_eq!(read_frame(&mut r).unwrap().payload.len(), 3);
        assert!(matches!(read_frame(&mut r), Err(ProtocolError::Truncated)));
    }
}
