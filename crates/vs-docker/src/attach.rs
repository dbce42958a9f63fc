//! Running a command in the container attached to this process's stdin,
//! stdout and stderr: the agent-turn path (`wrap` launches the hidden
//! `vibesys internal-docker-attach`, which calls [`attach`]).

use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use bollard::query_parameters::ResizeExecOptionsBuilder;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use vs_sandbox::error::SandboxError;

use crate::engine::{Engine, engine_err};
use crate::tty;

/// One attached command.
#[derive(Clone)]
pub struct AttachRequest {
    /// The container ID.
    pub container: String,
    /// `uid:gid` to run as.
    pub user: String,
    /// Working directory in the container.
    pub workdir: PathBuf,
    /// `NAME=value` entries (values are never logged).
    pub env: Vec<String>,
    /// The command.
    pub argv: Vec<String>,
}

impl std::fmt::Debug for AttachRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AttachRequest")
            .field("container", &self.container)
            .field("user", &self.user)
            .field("workdir", &self.workdir)
            .field("env", &crate::env::redacted(&self.env))
            .field("argv", &self.argv)
            .finish()
    }
}

/// Connects to the Engine and runs the request attached; returns the
/// command's exit status (128+N when killed by signal N).
pub fn attach(request: &AttachRequest) -> Result<i32, SandboxError> {
    let engine = Engine::connect()?;
    attach_with(&engine, request)
}

/// [`attach`] over an existing connection.
pub fn attach_with(engine: &Engine, request: &AttachRequest) -> Result<i32, SandboxError> {
    let stdin = std::io::stdin();
    let tty = stdin.is_terminal() && std::io::stdout().is_terminal();
    let docker = engine.docker();
    let exec = engine
        .block_on(docker.create_exec(
            &request.container,
            ExecConfig {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(tty),
                env: Some(request.env.clone()),
                cmd: Some(request.argv.clone()),
                user: Some(request.user.clone()),
                working_dir: Some(request.workdir.to_string_lossy().into_owned()),
                ..Default::default()
            },
        ))
        .map_err(|e| engine_err("docker exec create", e))?;
    let _raw = if tty {
        tty::RawMode::enter(stdin.as_raw_fd())
    } else {
        None
    };
    // Host stdin is read on its own thread (blocking reads) and fed to
    // the exec; EOF closes the exec's stdin.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(8);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        let mut input = std::io::stdin().lock();
        loop {
            match input.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let exec_id = exec.id.clone();
    engine.block_on(async move {
        let started = docker
            .start_exec(
                &exec_id,
                Some(StartExecOptions {
                    detach: false,
                    tty,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| engine_err("docker exec start", e))?;
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = started
        else {
            return Err(engine_err(
                "docker exec start",
                bollard::errors::Error::DockerStreamError {
                    error: "the Engine started the exec detached".into(),
                },
            ));
        };
        if tty && let Some((rows, cols)) = tty::size(std::io::stdout().as_raw_fd()) {
            let _ = docker
                .resize_exec(
                    &exec_id,
                    ResizeExecOptionsBuilder::new()
                        .h(i32::from(rows))
                        .w(i32::from(cols))
                        .build(),
                )
                .await;
        }
        let mut stdin_open = true;
        let mut head = Vec::new();
        loop {
            tokio::select! {
                chunk = rx.recv(), if stdin_open => match chunk {
                    Some(bytes) => {
                        if input.write_all(&bytes).await.is_err() {
                            stdin_open = false;
                        }
                    }
                    None => {
                        stdin_open = false;
                        let _ = input.shutdown().await;
                    }
                },
                item = output.next() => match item {
                    Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => {
                        keep_head(&mut head, &message);
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(&message).and_then(|()| out.flush());
                    }
                    Some(Ok(LogOutput::StdErr { message })) => {
                        keep_head(&mut head, &message);
                        let mut err = std::io::stderr().lock();
                        let _ = err.write_all(&message).and_then(|()| err.flush());
                    }
                    Some(Ok(LogOutput::StdIn { .. })) => {}
                    Some(Err(e)) => return Err(engine_err("docker exec output", e)),
                    None => break,
                },
            }
        }
        let mut info = docker
            .inspect_exec(&exec_id)
            .await
            .map_err(|e| engine_err("docker exec inspect", e))?;
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while info.running == Some(true) && std::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            info = docker
                .inspect_exec(&exec_id)
                .await
                .map_err(|e| engine_err("docker exec inspect", e))?;
        }
        let code = info
            .exit_code
            .and_then(|c| i32::try_from(c).ok())
            .unwrap_or(125);
        Ok(start_failure_status(code, &head))
    })
}

/// How much of the exec's first output is kept to tell why it ended.
const HEAD_LIMIT: usize = 1024;

/// Appends the start of `chunk` to `head`, up to [`HEAD_LIMIT`] in all.
fn keep_head(head: &mut Vec<u8>, chunk: &[u8]) {
    let room = HEAD_LIMIT.saturating_sub(head.len());
    head.extend_from_slice(&chunk[..chunk.len().min(room)]);
}

/// The status of an exec whose output began with `head`. The Engine
/// reports a program it could not start as status 126 with the runtime's
/// message as the exec's output (`OCI runtime exec failed: ...`); a
/// missing program becomes 127, as `docker run` maps it and as the host
/// backends report it. Only the command's own status is at stake: a
/// command that prints that message and exits 126 gets 127.
///
/// Only the runtime's message about the program (`exec: "NAME": ...`)
/// counts: an exec into a container whose main process just ended fails
/// with "no such file or directory" about the container's namespaces,
/// and that 126 must stay, so the caller asks why the container ended.
fn start_failure_status(code: i32, head: &[u8]) -> i32 {
    const NOT_FOUND: [&str; 2] = ["executable file not found", "no such file or directory"];
    let text = String::from_utf8_lossy(head);
    let about_the_program = text
        .split_once("unable to start container process: exec: \"")
        .is_some_and(|(_, rest)| NOT_FOUND.iter().any(|n| rest.contains(n)));
    if code == vs_sandbox::exit_codes::EXIT_CANNOT_EXECUTE
        && text.starts_with("OCI runtime exec failed")
        && about_the_program
    {
        vs_sandbox::exit_codes::EXIT_NOT_FOUND
    } else {
        code
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_program_is_127() {
        let missing = b"OCI runtime exec failed: exec failed: unable to start container process: exec: \"/nonexistent\": stat /nonexistent: no such file or directory: unknown\r\n";
        let not_in_path = b"OCI runtime exec failed: exec failed: unable to start container process: exec: \"x\": executable file not found in $PATH: unknown";
        let denied = b"OCI runtime exec failed: exec failed: unable to start container process: exec: \"./x\": permission denied: unknown";
        assert_eq!(start_failure_status(126, missing), 127);
        assert_eq!(start_failure_status(126, not_in_path), 127);
        assert_eq!(start_failure_status(126, denied), 126);
        // The container's main process ended between its start and the
        // exec: that is not a missing program (CI saw this race).
        let container_gone = b"OCI runtime exec failed: exec failed: unable to create new parent process: namespace path: lstat /proc/31985/ns/ipc: no such file or directory: unknown";
        assert_eq!(start_failure_status(126, container_gone), 126);
        // The command's own 126, and any other status, stand.
        assert_eq!(start_failure_status(126, b"no such file or directory"), 126);
        assert_eq!(start_failure_status(1, missing), 1);
        let mut head = Vec::new();
        keep_head(&mut head, &[b'a'; 800]);
        keep_head(&mut head, &[b'b'; 800]);
        assert_eq!(head.len(), HEAD_LIMIT);
    }
}
