//! Linux implementation of [`super::LocalShellRunner`]: checks the
//! command, starts it under a per-run supervisor
//! ([`crate::process::piped_run`]) and collects its output on the calling
//! thread until it ends, times out or is cancelled.

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::capture::HeadTail;
use super::{CommandResult, CommandSpec, DEFAULT_SEARCH_PATH, RunnerError};
use crate::process::fd::{self, Interest, ReadOutcome};
use crate::process::lookup::{EmptyEntry, is_executable_file, search_path};
use crate::process::piped_run::{self, Ended, ExecImage, OsFailure, SUPERVISOR_GRACE};
use crate::process::sigpipe::SigpipeBlock;

/// How often a cancellation token is checked.
const CANCEL_TICK: Duration = Duration::from_millis(20);
/// One read from a pipe.
const READ_CHUNK: usize = 256 * 1024;

impl From<OsFailure> for RunnerError {
    fn from(e: OsFailure) -> Self {
        Self::Os {
            operation: e.operation,
            source: e.source,
        }
    }
}

fn cstring(what: &'static str, bytes: &[u8]) -> Result<CString, RunnerError> {
    CString::new(bytes).map_err(|_| RunnerError::NulByte {
        what,
        value: String::from_utf8_lossy(bytes).into_owned(),
    })
}

/// Finds the program: as given when it contains `/`, else in the command's
/// own `PATH`.
fn resolve_program(
    program: &OsStr,
    cwd: &Path,
    env: &BTreeMap<OsString, OsString>,
) -> Result<PathBuf, RunnerError> {
    if program.as_bytes().contains(&b'/') {
        // `execve` runs after `chdir`, so a relative path is relative to cwd.
        return Ok(cwd.join(program));
    }
    let search = env
        .get(OsStr::new("PATH"))
        .cloned()
        .unwrap_or_else(|| OsString::from(DEFAULT_SEARCH_PATH));
    // An empty entry would mean the working directory: never searched.
    if let Some(found) =
        search_path(program, &search, Some(cwd), EmptyEntry::Skip).find(|c| is_executable_file(c))
    {
        return Ok(found);
    }
    Err(RunnerError::ProgramNotFound {
        program: program.to_string_lossy().into_owned(),
        search_path: search.to_string_lossy().into_owned(),
    })
}

fn final_env(spec: &CommandSpec) -> Result<BTreeMap<OsString, OsString>, RunnerError> {
    let mut env: BTreeMap<OsString, OsString> = if spec.inherit_env {
        std::env::vars_os().collect()
    } else {
        BTreeMap::new()
    };
    for (name, value) in &spec.env {
        let n = name.as_bytes();
        if n.is_empty() || n.contains(&b'=') || n.contains(&0) {
            return Err(RunnerError::InvalidEnvName {
                name: name.to_string_lossy().into_owned(),
            });
        }
        env.insert(name.clone(), value.clone());
    }
    Ok(env)
}

/// One output stream being collected.
struct Stream {
    fd: Option<OwnedFd>,
    capture: HeadTail,
}

impl Stream {
    /// Reads what is available (a bounded number of chunks per wake-up, so
    /// the other stream is served too).
    fn pump(&mut self, buf: &mut [u8]) {
        for _ in 0..16 {
            let Some(fd) = &self.fd else { return };
            match fd::read_some(fd.as_fd(), buf) {
                ReadOutcome::Data(n) => self.capture.push(buf.get(..n).unwrap_or_default()),
                ReadOutcome::Eof => self.fd = None,
                ReadOutcome::WouldBlock => return,
            }
        }
    }
}

fn min_opt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Checks the command and prepares it for `execve`: the program resolved
/// in `PATH` (returned too, for errors), its arguments, environment and
/// working directory as C strings.
fn exec_image(spec: &CommandSpec) -> Result<(ExecImage, PathBuf), RunnerError> {
    let program_arg = spec.argv.first().ok_or(RunnerError::EmptyCommand)?;
    let cwd_meta = std::fs::metadata(&spec.cwd).and_then(|m| {
        if m.is_dir() {
            Ok(m)
        } else {
            Err(io::Error::from(io::ErrorKind::NotADirectory))
        }
    });
    if let Err(source) = cwd_meta {
        return Err(RunnerError::WorkingDirectory {
            path: spec.cwd.clone(),
            source,
        });
    }
    let env = final_env(spec)?;
    let program_path = resolve_program(program_arg, &spec.cwd, &env)?;
    let program = cstring("program path", program_path.as_os_str().as_bytes())?;
    let cwd = cstring("working directory", spec.cwd.as_os_str().as_bytes())?;
    let argv = spec
        .argv
        .iter()
        .map(|a| cstring("argument", a.as_bytes()))
        .collect::<Result<Vec<_>, _>>()?;
    let envp = env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            cstring("environment variable", &kv)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((ExecImage::new(program, argv, envp, cwd), program_path))
}

/// What the event loop waits for next.
struct Timers {
    now: Instant,
    /// The command's timeout, while nothing was signalled yet.
    deadline: Option<Instant>,
    /// Whether a cancellation token is polled.
    cancel_tick: bool,
    /// When SIGKILL follows the SIGTERM already sent.
    kill_at: Option<Instant>,
    /// When to stop draining the pipes after the supervisor ended.
    drain_until: Option<Instant>,
}

/// How long `poll` sleeps (`None`: until a descriptor is ready).
fn poll_timeout(t: Timers) -> Option<Duration> {
    let until = |at: Option<Instant>| at.map(|a| a.saturating_duration_since(t.now));
    let mut wait = min_opt(until(t.deadline), t.cancel_tick.then_some(CANCEL_TICK));
    wait = min_opt(wait, until(t.kill_at));
    min_opt(wait, until(t.drain_until))
}

/// The command's exit code and signal, or why it never ran.
fn outcome(ended: Ended, program: &Path, cwd: &Path) -> Result<(i32, Option<i32>), RunnerError> {
    match ended {
        Ended::Ran(exit) => Ok((exit.code(), exit.signal())),
        Ended::ExecFailed(source) => Err(RunnerError::Exec {
            program: program.to_path_buf(),
            source,
        }),
        Ended::ChdirFailed(source) => Err(RunnerError::WorkingDirectory {
            path: cwd.to_path_buf(),
            source,
        }),
        Ended::SetupFailed(source) => Err(RunnerError::Os {
            operation: "supervisor setup",
            source,
        }),
        Ended::ForkFailed(source) => Err(RunnerError::Os {
            operation: "fork of the command",
            source,
        }),
        Ended::SupervisorLost(detail) => Err(RunnerError::SupervisorLost { detail }),
    }
}

pub(super) fn run(
    spec: &CommandSpec,
    output_cap: usize,
    drain_grace: Duration,
) -> Result<CommandResult, RunnerError> {
    let (image, program_path) = exec_image(spec)?;
    let start = Instant::now();
    let piped_run::PipedRun {
        mut stdin,
        stdout,
        stderr,
        mut supervisor,
    } = piped_run::spawn(&image, spec.stdin.is_some())?;

    let stdin_data: &[u8] = spec.stdin.as_deref().unwrap_or_default();
    let mut stdin_off = 0usize;
    let _sigpipe = stdin.as_ref().map(|_| SigpipeBlock::new());

    let mut out = Stream {
        fd: Some(stdout),
        capture: HeadTail::new(output_cap),
    };
    let mut err = Stream {
        fd: Some(stderr),
        capture: HeadTail::new(output_cap),
    };
    let mut buf = vec![0u8; READ_CHUNK];

    let deadline = spec.timeout.map(|t| start + t);
    let mut timed_out = false;
    let mut cancelled = false;
    let mut kill_sent: Option<Instant> = None;
    let mut supervisor_killed = false;
    let mut supervisor_done: Option<Instant> = None;

    loop {
        let now = Instant::now();
        if let Some(done) = supervisor_done {
            if out.fd.is_none() && err.fd.is_none() {
                break;
            }
            if now >= done + drain_grace {
                // A stray process still holds a pipe: stop waiting for it.
                break;
            }
            // The command is gone: nobody reads stdin any more.
            stdin = None;
        }
        if kill_sent.is_none() && supervisor_done.is_none() {
            if spec.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                cancelled = true;
            } else if deadline.is_some_and(|d| now >= d) {
                timed_out = true;
            }
            if cancelled || timed_out {
                supervisor.kill_tree();
                kill_sent = Some(now);
            }
        }
        if let Some(sent) = kill_sent
            && supervisor_done.is_none()
            && !supervisor_killed
            && now >= sent + SUPERVISOR_GRACE
        {
            supervisor.kill();
            supervisor_killed = true;
        }

        let timeout = poll_timeout(Timers {
            now,
            deadline: (kill_sent.is_none() && supervisor_done.is_none())
                .then_some(deadline)
                .flatten(),
            cancel_tick: kill_sent.is_none() && supervisor_done.is_none() && spec.cancel.is_some(),
            kill_at: kill_sent
                .filter(|_| supervisor_done.is_none() && !supervisor_killed)
                .map(|sent| sent + SUPERVISOR_GRACE),
            drain_until: supervisor_done.map(|done| done + drain_grace),
        });

        // Which of out, err, the report and stdin are waited on, in order.
        let entries = [
            out.fd.as_ref().map(|f| (f.as_fd(), Interest::Read)),
            err.fd.as_ref().map(|f| (f.as_fd(), Interest::Read)),
            supervisor.report_fd().map(|f| (f, Interest::Read)),
            stdin.as_ref().map(|f| (f.as_fd(), Interest::Write)),
        ];
        let waited: Vec<_> = entries.iter().flatten().copied().collect();
        let mut ready_flags = fd::poll(&waited, timeout)
            .map_err(|source| RunnerError::Os {
                operation: "poll",
                source,
            })?
            .into_iter();
        let [out_ready, err_ready, report_ready, stdin_ready] =
            entries.map(|e| e.is_some() && ready_flags.next().unwrap_or(false));
        if out_ready {
            out.pump(&mut buf);
        }
        if err_ready {
            err.pump(&mut buf);
        }
        if stdin_ready && let Some(fd) = &stdin {
            let rest = stdin_data.get(stdin_off..).unwrap_or_default();
            match fd::write_some(fd.as_fd(), rest) {
                Ok(w) => {
                    stdin_off += w;
                    if stdin_off >= stdin_data.len() {
                        stdin = None;
                    }
                }
                // EPIPE: the command stopped reading; that is its business.
                Err(_) => stdin = None,
            }
        }
        if report_ready && supervisor.read_report() {
            supervisor_done = Some(Instant::now());
        }
    }
    let duration = start.elapsed();
    let (exit_code, signal) = outcome(supervisor.finish(), &program_path, &spec.cwd)?;
    Ok(CommandResult {
        exit_code,
        signal,
        timed_out,
        cancelled,
        duration,
        stdout: out.capture.finish(),
        stderr: err.capture.finish(),
    })
}
