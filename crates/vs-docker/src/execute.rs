//! `DockerSandbox` as a command runner: the framework's own commands in the
//! run's container, through the command server or the Engine's exec API,
//! with the host runner's bounded result, timeout and cancellation.

use std::io;
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::ExecConfig;
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use vs_sandbox::runner::{CommandResult, CommandRunner, CommandSpec, HeadTail, RunnerError};

use crate::EndPhase;
use crate::argv::to_strings;
use crate::procs;
use crate::sandbox::DockerSandbox;

/// How long output is still read after the command's own process exited
/// (a descendant may hold the stream open).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

impl CommandRunner for DockerSandbox {
    fn run(&self, command: &CommandSpec) -> Result<CommandResult, RunnerError> {
        match self.channel() {
            Some(ch) => {
                let argv = to_strings(&command.argv)?;
                let env = self.command_env(command)?;
                let cwd = utf8_cwd(command)?;
                self.engine.block_on(ch.run(command, argv, env, cwd))
            }
            None => self.engine.block_on(self.run_async(command)),
        }
    }
}

impl DockerSandbox {
    /// The error of an Engine call on an exec: why the container ended,
    /// when it did (its exit code and output); else the Engine's error.
    async fn exec_failed(&self, operation: &'static str, e: bollard::errors::Error) -> RunnerError {
        if self.ended_under_exec(None).await {
            tracing::debug!("{operation}: {e}");
            self.ended(operation).await
        } else {
            runner_engine(operation, e)
        }
    }

    /// The error of a command that the container's end stopped.
    async fn ended(&self, operation: &'static str) -> RunnerError {
        RunnerError::Os {
            operation,
            source: io::Error::other(self.exited_async(EndPhase::Command).await.to_string()),
        }
    }
}

fn utf8_cwd(command: &CommandSpec) -> Result<String, RunnerError> {
    command
        .cwd
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| RunnerError::NulByte {
            what: "working directory (not UTF-8)",
            value: command.cwd.to_string_lossy().into_owned(),
        })
}

fn runner_engine(operation: &'static str, e: bollard::errors::Error) -> RunnerError {
    RunnerError::Os {
        operation,
        source: io::Error::other(e.to_string()),
    }
}

impl DockerSandbox {
    /// The variables a command gets on top of the image's environment:
    /// the allow-listed host variables when it inherits, then its own.
    fn command_env(&self, command: &CommandSpec) -> Result<Vec<(String, String)>, RunnerError> {
        let mut env: Vec<(String, String)> = Vec::new();
        if command.inherit_env {
            for entry in self.options.env.pick_from_process() {
                if let Some((k, v)) = entry.split_once('=') {
                    env.push((k.to_owned(), v.to_owned()));
                }
            }
        }
        for (k, v) in &command.env {
            let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else {
                return Err(RunnerError::InvalidEnvName {
                    name: k.to_string_lossy().into_owned(),
                });
            };
            if k.is_empty() || k.contains(['=', '\0']) {
                return Err(RunnerError::InvalidEnvName { name: k.to_owned() });
            }
            if v.contains('\0') {
                return Err(RunnerError::NulByte {
                    what: "environment value",
                    value: k.to_owned(),
                });
            }
            env.retain(|(name, _)| name != k);
            env.push((k.to_owned(), v.to_owned()));
        }
        Ok(env)
    }

    async fn run_async(&self, command: &CommandSpec) -> Result<CommandResult, RunnerError> {
        let started = Instant::now();
        let argv = to_strings(&command.argv)?;
        let env: Vec<String> = self
            .command_env(command)?
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let workdir = utf8_cwd(command)?;
        let workdir = workdir.as_str();
        let docker = self.engine.docker();
        let created = docker
            .create_exec(
                &self.container_id,
                ExecConfig {
                    attach_stdin: Some(command.stdin.is_some()),
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    tty: Some(false),
                    env: Some(env),
                    cmd: Some(argv),
                    user: Some(self.plan.user.clone()),
                    working_dir: Some(workdir.to_owned()),
                    ..Default::default()
                },
            )
            .await;
        let exec = match created {
            Ok(exec) => exec,
            Err(e) => return Err(self.exec_failed("docker exec create", e).await),
        };
        let started_exec = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await;
        let started_exec = match started_exec {
            Ok(started) => started,
            Err(e) => return Err(self.exec_failed("docker exec start", e).await),
        };
        let StartExecResults::Attached {
            mut output,
            mut input,
        } = started_exec
        else {
            return Err(RunnerError::SupervisorLost {
                detail: "the Engine started the exec detached".into(),
            });
        };
        if let Some(bytes) = &command.stdin {
            // A command that does not read stdin may close it early.
            let _ = input.write_all(bytes).await;
            let _ = input.shutdown().await;
        } else {
            let _ = input.shutdown().await;
        }
        let mut out = HeadTail::new(self.output_cap);
        let mut err = HeadTail::new(self.output_cap);
        let deadline = command.timeout.map(|t| started + t);
        let mut timed_out = false;
        let mut cancelled = false;
        let mut exited_at: Option<Instant> = None;
        let mut next_exit_poll = Instant::now() + Duration::from_millis(250);
        loop {
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                timed_out = true;
                break;
            }
            if command.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                cancelled = true;
                break;
            }
            if exited_at.is_some_and(|t| now >= t + DRAIN_GRACE) {
                break;
            }
            let mut wake = now + Duration::from_millis(20);
            if command.cancel.is_none() {
                wake = now + Duration::from_millis(250);
            }
            if let Some(d) = deadline {
                wake = wake.min(d);
            }
            wake = wake.min(next_exit_poll);
            let sleep = tokio::time::sleep_until(tokio::time::Instant::from_std(wake));
            tokio::select! {
                item = output.next() => match item {
                    Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => out.push(&message),
                    Some(Ok(LogOutput::StdErr { message })) => err.push(&message),
                    Some(Ok(LogOutput::StdIn { .. })) => {}
                    Some(Err(e)) => return Err(runner_engine("docker exec output", e)),
                    None => break,
                },
                () = sleep => {
                    if Instant::now() >= next_exit_poll && exited_at.is_none() {
                        next_exit_poll = Instant::now() + Duration::from_millis(250);
                        if let Ok(info) = docker.inspect_exec(&exec.id).await
                            && info.running == Some(false)
                        {
                            exited_at = Some(Instant::now());
                        }
                    }
                }
            }
        }
        drop(output);
        let (exit_code, signal) = if timed_out || cancelled {
            let info = match docker.inspect_exec(&exec.id).await {
                Ok(info) => info,
                Err(e) => return Err(self.exec_failed("docker exec inspect", e).await),
            };
            let pid = info.pid.and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
            let (init, lifeline) = (self.init_pid, self.lifeline_pid);
            procs::kill_tree(pid, init, lifeline);
            (128 + libc::SIGKILL, Some(libc::SIGKILL))
        } else {
            // An exec of a container that ended is gone with it (404 "No
            // such exec instance"): why the container ended is the error,
            // as for a failed start.
            let mut info = match docker.inspect_exec(&exec.id).await {
                Ok(info) => info,
                Err(e) => return Err(self.exec_failed("docker exec inspect", e).await),
            };
            // The stream can end a moment before the Engine records the exit.
            let until = Instant::now() + Duration::from_secs(5);
            while info.running == Some(true) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
                info = match docker.inspect_exec(&exec.id).await {
                    Ok(info) => info,
                    Err(e) => return Err(self.exec_failed("docker exec inspect", e).await),
                };
            }
            let code = info
                .exit_code
                .and_then(|c| i32::try_from(c).ok())
                .unwrap_or(-1);
            // Docker reports a signal death as 128+N, like the shell.
            let signal = (129..=159).contains(&code).then_some(code - 128);
            (code, signal)
        };
        // Not the runtime's message or the kill passed off as the
        // command's own result: why the container ended, as `attach` says.
        if !timed_out && !cancelled && self.ended_under_exec(Some(exit_code)).await {
            return Err(self.ended("docker exec").await);
        }
        Ok(CommandResult {
            exit_code,
            signal,
            timed_out,
            cancelled,
            duration: started.elapsed(),
            stdout: out.finish(),
            stderr: err.finish(),
        })
    }
}
