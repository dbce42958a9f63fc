//! The command server: the container's main process when a static vibesys
//! is available. It runs the framework's commands with [`LocalShellRunner`]
//! inside the container and answers over its own stdin and stdout, which
//! only the Engine's attach connection (held by vibesys on the host)
//! reaches.
//!
//! Why it can be trusted by the host while the agent shares its uid: the
//! server makes itself non-dumpable first, so a process without
//! `CAP_SYS_PTRACE` (every process in the container: all capabilities are
//! dropped) can neither open its `/proc/<pid>/fd/*` (where the pipes to the
//! Engine are) nor ptrace it. The agent can still kill it; then the
//! container ends and every later `execute` fails, naming the cause.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use vs_sandbox::runner::{CancellationToken, CommandRunner, CommandSpec, LocalShellRunner, b64};

use crate::wire::{MAX_REQUEST, Reply, Request, RunRequest, read_frame, write_frame};

type Out = Arc<Mutex<io::Stdout>>;
type Running = Arc<Mutex<HashMap<u64, CancellationToken>>>;

/// Serves requests from stdin until it closes, then kills what still
/// runs and returns the process's exit status (0 after a clean end of
/// stdin, 1 after a broken stream).
pub fn serve() -> i32 {
    if let Err(e) = make_non_dumpable() {
        eprintln!(
            "vibesys command server: cannot make the process non-dumpable: {e}; refusing to serve"
        );
        return 1;
    }
    let out: Out = Arc::new(Mutex::new(io::stdout()));
    let running: Running = Arc::default();
    let ready = Reply::Ready {
        version: env!("CARGO_PKG_VERSION").to_owned(),
    };
    if send(&out, &ready).is_err() {
        return 1;
    }
    let mut workers: Vec<std::thread::JoinHandle<()>> = Vec::new();
    let mut stdin = io::stdin().lock();
    let status = loop {
        let body = match read_frame(&mut stdin, MAX_REQUEST) {
            Ok(Some(b)) => b,
            Ok(None) => break 0,
            Err(e) => {
                eprintln!("vibesys command server: reading a request: {e}");
                break 1;
            }
        };
        let request: Request = match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                // Not `{e}`: serde's message may quote the request, which
                // can hold environment values.
                eprintln!(
                    "vibesys command server: a malformed request ({:?} error at byte column {})",
                    e.classify(),
                    e.column()
                );
                break 1;
            }
        };
        workers.retain(|w| !w.is_finished());
        match request {
            Request::Cancel { id } => {
                if let Some(token) = lock(&running).get(&id) {
                    token.cancel();
                }
            }
            Request::Run(run) => {
                let token = CancellationToken::new();
                lock(&running).insert(run.id, token.clone());
                let (out, running) = (out.clone(), running.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("cmd-{}", run.id))
                    .spawn(move || {
                        let id = run.id;
                        let reply = run_one(run, token);
                        lock(&running).remove(&id);
                        let _ = send(&out, &reply);
                    });
                match spawned {
                    Ok(w) => workers.push(w),
                    Err(e) => {
                        eprintln!("vibesys command server: cannot start a thread: {e}");
                        break 1;
                    }
                }
            }
        }
    };
    // The host is gone (or the stream broke): nothing may outlive it.
    for token in lock(&running).values() {
        token.cancel();
    }
    for w in workers {
        let _ = w.join();
    }
    status
}

/// `PR_SET_DUMPABLE 0`: without `CAP_SYS_PTRACE`, no process (same uid
/// or not) can open this process's `/proc/<pid>/fd`, read its memory or
/// ptrace it.
#[allow(unsafe_code)]
fn make_non_dumpable() -> io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments only changes this process's flag.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
    #[cfg(not(target_os = "linux"))]
    Err(io::Error::other("the command server runs only on Linux"))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn send(out: &Out, reply: &Reply) -> io::Result<()> {
    let body = serde_json::to_vec(reply).map_err(io::Error::other)?;
    let mut o = lock(out);
    write_frame(&mut *o, &body)?;
    o.flush()
}

fn run_one(run: RunRequest, token: CancellationToken) -> Reply {
    let id = run.id;
    let stdin = match run.stdin.as_deref().map(b64::decode) {
        None => None,
        Some(Some(bytes)) => Some(bytes),
        Some(None) => {
            return Reply::Failed {
                id,
                error: "the request's stdin is not valid base64".into(),
            };
        }
    };
    let spec = CommandSpec {
        argv: run.argv.into_iter().map(OsString::from).collect(),
        cwd: PathBuf::from(run.cwd),
        env: run
            .env
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect(),
        inherit_env: true,
        stdin,
        timeout: run.timeout_ms.map(Duration::from_millis),
        cancel: Some(token),
    };
    let runner = LocalShellRunner::new().with_output_cap(run.output_cap);
    match runner.run(&spec) {
        Ok(result) => Reply::Done { id, result },
        Err(e) => Reply::Failed {
            id,
            error: e.to_string(),
        },
    }
}
