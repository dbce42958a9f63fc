//! The client side: `vibesys broker job` and `vibesys broker gate`.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use super::BrokerError;
use super::protocol::{
    Final, FrameKind, PROTOCOL_VERSION, ProtocolError, Request, decode_final, encode_request,
    read_frame, write_frame,
};

/// What `vibesys broker job` asks for, as its command line gave it.
#[derive(Debug, Clone)]
pub struct JobCall {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// The working directory (made absolute in the request).
    pub cwd: PathBuf,
    /// GPUs to allocate.
    pub gpus: u32,
    /// Time limit in minutes (`None`: the operator's limit).
    pub time_minutes: Option<u32>,
    /// The job's variables, each `KEY=VALUE`.
    pub env: Vec<String>,
}

impl JobCall {
    /// The request; refuses a variable that is not `KEY=VALUE`.
    pub fn request(self) -> Result<Request, BrokerError> {
        let mut env = BTreeMap::new();
        for item in &self.env {
            let Some((k, v)) = item.split_once('=') else {
                return Err(BrokerError::BadVariable { item: item.clone() });
            };
            env.insert(k.to_owned(), v.to_owned());
        }
        Ok(Request::Job {
            version: PROTOCOL_VERSION,
            argv: self.argv,
            cwd: Some(std::path::absolute(&self.cwd).unwrap_or(self.cwd)),
            gpus: self.gpus,
            time_minutes: self.time_minutes,
            env,
            network: None,
        })
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn call(env: &[&str]) -> JobCall {
        JobCall {
            argv: vec!["true".into()],
            cwd: PathBuf::from("rel"),
            gpus: 1,
            time_minutes: None,
            env: env.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn a_job_request_has_an_absolute_cwd_and_its_variables() {
        let Request::Job { cwd, env, .. } = call(&["A=1", "B=x=y"]).request().unwrap() else {
            panic!("not a job");
        };
        assert!(cwd.unwrap().is_absolute());
        assert_eq!(env.get("B").map(String::as_str), Some("x=y"));
    }

    #[test]
    fn a_variable_without_a_value_is_refused() {
        let err = call(&["NOPE"]).request().unwrap_err();
        assert_eq!(err.to_string(), "--env \"NOPE\" is not KEY=VALUE");
    }

    #[test]
    fn the_outcome_gives_the_status_and_the_note() {
        let refused = Final::Refused {
            reason: "no".into(),
        };
        assert_eq!(refused.client_status(), 125);
        assert_eq!(
            refused.client_note().unwrap(),
            "error: the broker refused the request: no"
        );
        let exited = Final::Exited { code: 300 };
        assert_eq!((exited.client_status(), exited.client_note()), (125, None));
    }
}
