//! The host's end of the command server: requests go to the container's
//! attached stdin, replies come back on its attached stdout, and a reader
//! task on the Engine's runtime hands each reply to the caller waiting
//! for it. Concurrent `execute` calls share the one connection.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use futures_util::StreamExt;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use vs_sandbox::runner::{CommandResult, CommandSpec, RunnerError, b64};

use crate::wire::{FrameDecoder, MAX_STDIN, Reply, Request, RunRequest, frame, max_reply};

pub(crate) type Writer = Pin<Box<dyn AsyncWrite + Send>>;
pub(crate) type Output =
    Pin<Box<dyn futures_util::Stream<Item = Result<LogOutput, bollard::errors::Error>> + Send>>;

/// How much of the server's stderr is kept for error messages.
const STDERR_KEEP: usize = 8 * 1024;

/// How long `start` waits for the server's first frame.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Default)]
struct Shared {
    pending: HashMap<u64, oneshot::Sender<Reply>>,
    ready: Option<oneshot::Sender<String>>,
    /// Why the connection ended, once it has.
    closed: Option<String>,
    stderr: Vec<u8>,
}

impl Shared {
    fn close(&mut self, why: String) {
        if self.closed.is_none() {
            self.closed = Some(why);
        }
        self.pending.clear();
        self.ready = None;
    }

    fn why_closed(&self) -> String {
        let mut why = self
            .closed
            .clone()
            .unwrap_or_else(|| "the connection ended".into());
        let err = String::from_utf8_lossy(&self.stderr);
        let err = err.trim();
        if !err.is_empty() {
            why.push_str("; the server said: ");
            why.push_str(err);
        }
        why
    }
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The host's connection to one container's command server.
pub(crate) struct Channel {
    input: tokio::sync::Mutex<Writer>,
    shared: Arc<Mutex<Shared>>,
    next_id: AtomicU64,
    /// Bytes kept per stream; the reader bounds replies by it.
    output_cap: Arc<AtomicUsize>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn lost(detail: String) -> RunnerError {
    RunnerError::CommandServerLost { detail }
}

impl Channel {
    /// Starts the reader task for `output` (on the Engine's runtime) and
    /// returns the channel and a receiver for the server's `Ready`.
    pub(crate) fn open(
        spawn: impl FnOnce(
            Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
        ) -> tokio::task::JoinHandle<()>,
        input: Writer,
        output: Output,
        output_cap: usize,
    ) -> (Self, oneshot::Receiver<String>) {
        let (ready_tx, ready_rx) = oneshot::channel();
        let shared = Arc::new(Mutex::new(Shared {
            ready: Some(ready_tx),
            ..Shared::default()
        }));
        let output_cap = Arc::new(AtomicUsize::new(output_cap));
        let reader = spawn(Box::pin(read_replies(
            output,
            shared.clone(),
            output_cap.clone(),
        )));
        (
            Self {
                input: tokio::sync::Mutex::new(input),
                shared,
                next_id: AtomicU64::new(1),
                output_cap,
                reader,
            },
            ready_rx,
        )
    }

    /// Sets how many bytes of each stream later commands keep.
    pub(crate) fn set_output_cap(&self, bytes_per_stream: usize) {
        self.output_cap.store(bytes_per_stream, Ordering::Relaxed);
    }

    /// Why the channel is unusable, with what the server wrote to stderr.
    pub(crate) fn why_closed(&self) -> String {
        lock(&self.shared).why_closed()
    }

    async fn send(&self, request: &Request) -> Result<(), RunnerError> {
        let body = serde_json::to_vec(request).map_err(|e| lost(e.to_string()))?;
        let bytes = frame(&body).map_err(|e| lost(e.to_string()))?;
        let mut input = self.input.lock().await;
        let written = async {
            input.write_all(&bytes).await?;
            input.flush().await
        }
        .await;
        written.map_err(|e| {
            lock(&self.shared).close(format!("sending a request failed: {e}"));
            lost(self.why_closed())
        })
    }

    /// Runs one command through the server: same result, timeout and
    /// cancellation semantics as [`crate::LocalShellRunner`] (the server
    /// uses it).
    pub(crate) async fn run(
        &self,
        command: &CommandSpec,
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: String,
    ) -> Result<CommandResult, RunnerError> {
        let stdin = match &command.stdin {
            Some(b) if b.len() > MAX_STDIN => {
                return Err(RunnerError::Os {
                    operation: "pass stdin to the container's command server",
                    source: io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{} bytes of stdin is over the limit of {MAX_STDIN}",
                            b.len()
                        ),
                    ),
                });
            }
            Some(b) => Some(b64::encode(b)),
            None => None,
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, mut rx) = oneshot::channel();
        {
            let mut s = lock(&self.shared);
            if s.closed.is_some() {
                return Err(lost(s.why_closed()));
            }
            s.pending.insert(id, tx);
        }
        let request = Request::Run(RunRequest {
            id,
            argv,
            cwd,
            env,
            stdin,
            timeout_ms: command
                .timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            output_cap: self.output_cap.load(Ordering::Relaxed),
        });
        if let Err(e) = self.send(&request).await {
            lock(&self.shared).pending.remove(&id);
            return Err(e);
        }
        // The server enforces the timeout; this is only a backstop in
        // case it stops answering.
        let backstop = command
            .timeout
            .map(|t| Instant::now() + t + Duration::from_secs(30));
        let mut cancel_sent = false;
        // Wake every 20 ms only while a cancellation can still be sent;
        // otherwise sleep until the backstop (or for good).
        let polls_cancel = command.cancel.is_some();
        loop {
            let wake = if polls_cancel && !cancel_sent {
                Instant::now() + Duration::from_millis(20)
            } else {
                backstop.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))
            };
            let tick = tokio::time::sleep_until(tokio::time::Instant::from_std(wake));
            tokio::select! {
                reply = &mut rx => {
                    return match reply {
                        Ok(Reply::Done { result, .. }) => Ok(result),
                        Ok(Reply::Failed { error, .. }) => Err(RunnerError::InContainer { message: error }),
                        Ok(Reply::Ready { .. }) => Err(lost("answered with a second ready".into())),
                        Err(_) => Err(lost(self.why_closed())),
                    };
                }
                () = tick => {
                    if !cancel_sent && command.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                        cancel_sent = true;
                        self.send(&Request::Cancel { id }).await?;
                    }
                    if backstop.is_some_and(|b| Instant::now() >= b) {
                        lock(&self.shared).pending.remove(&id);
                        return Err(lost("no answer 30 s after the command's timeout".into()));
                    }
                }
            }
        }
    }
}

async fn read_replies(
    mut output: Output,
    shared: Arc<Mutex<Shared>>,
    output_cap: Arc<AtomicUsize>,
) {
    let mut frames = FrameDecoder::default();
    let why = loop {
        let chunk = match output.next().await {
            Some(Ok(LogOutput::StdOut { message } | LogOutput::Console { message })) => message,
            Some(Ok(LogOutput::StdErr { message })) => {
                let mut s = lock(&shared);
                let room = STDERR_KEEP.saturating_sub(s.stderr.len());
                let take = room.min(message.len());
                s.stderr.extend_from_slice(&message[..take]);
                tracing::warn!(
                    "docker command server: {}",
                    String::from_utf8_lossy(&message[..message.len().min(1024)]).trim_end()
                );
                continue;
            }
            Some(Ok(LogOutput::StdIn { .. })) => continue,
            Some(Err(e)) => break format!("the attach stream failed: {e}"),
            None => break "the server exited (the container stopped)".to_owned(),
        };
        let decoded = frames.push(&chunk, max_reply(output_cap.load(Ordering::Relaxed)));
        let bodies = match decoded {
            Ok(b) => b,
            Err(e) => break format!("a broken reply: {e}"),
        };
        for body in bodies {
            let reply: Reply = match serde_json::from_slice(&body) {
                Ok(r) => r,
                Err(e) => {
                    lock(&shared).close(format!("a malformed reply: {e}"));
                    return;
                }
            };
            let mut s = lock(&shared);
            match reply {
                Reply::Ready { version } => {
                    if let Some(tx) = s.ready.take() {
                        let _ = tx.send(version);
                    }
                }
                Reply::Done { id, .. } | Reply::Failed { id, .. } => {
                    if let Some(tx) = s.pending.remove(&id) {
                        let _ = tx.send(reply);
                    }
                }
            }
        }
    };
    lock(&shared).close(why);
}
