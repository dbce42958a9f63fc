//! The broker process: fresh sockets per run, the start-up probe, one
//! thread per connection, cancellation on disconnect and on stop.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::BrokerError;
use super::protocol::{
    self, Final, FrameKind, ProtocolError, Request, bounded, decode_request, encode_final,
    read_frame, write_frame, write_output,
};
use super::settings::BrokerSettings;
use super::slurm::{JobSubmission, SlurmTools};

/// Which socket a connection came in on: what it may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The agent's socket: agent jobs only, and only when enabled.
    Agent,
    /// One candidate's agent socket: agent jobs only, when enabled, and
    /// only in that candidate's worktree (never the project, never another
    /// candidate's).
    Candidate(u32),
    /// A standalone build's socket: agent jobs only, when enabled, and
    /// only in the build's checkout (`--checkout`).
    Checkout,
    /// The framework's socket: agent jobs and the task's trusted gates.
    Framework,
}

impl Role {
    fn index(self) -> usize {
        match self {
            Self::Agent | Self::Candidate(_) | Self::Checkout => 0,
            Self::Framework => 1,
        }
    }

    fn name(self) -> String {
        match self {
            Self::Agent => "agent".to_owned(),
            Self::Candidate(n) => format!("candidate {n} agent"),
            Self::Checkout => "build checkout".to_owned(),
            Self::Framework => "framework".to_owned(),
        }
    }
}

/// Most connections served at once; more are refused.
const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the start-up probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

struct Ctx {
    settings: BrokerSettings,
    slurm: SlurmTools,
    stopping: AtomicBool,
    /// Connections being served, per socket (agent, framework): a busy
    /// agent socket cannot starve the framework's.
    active: [AtomicUsize; 2],
    next: AtomicU64,
}

/// A running broker: its sockets are bound, the probe passed.
pub struct Broker {
    ctx: Arc<Ctx>,
    dir: PathBuf,
    agent: PathBuf,
    framework: PathBuf,
    candidates: Vec<PathBuf>,
    checkout: Option<PathBuf>,
    listeners: Vec<(Role, UnixListener)>,
    leftovers: usize,
}

/// Stops a serving broker from another thread (a signal handler thread).
#[derive(Clone)]
pub struct ShutdownHandle {
    ctx: Arc<Ctx>,
    sockets: Vec<PathBuf>,
}

impl ShutdownHandle {
    /// Asks the broker to stop: it cancels every job it submitted.
    pub fn shutdown(&self) {
        self.ctx.stopping.store(true, Ordering::SeqCst);
        for s in &self.sockets {
            // Wakes the accept loops.
            let _ = UnixStream::connect(s);
        }
    }
}

/// Where a broker's sockets go: `$XDG_RUNTIME_DIR` when it is a
/// directory, else the temporary directory.
pub fn default_runtime_dir() -> PathBuf {
    std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir)
}

impl Broker {
    /// Cancels leftovers of the run (a previous broker killed with
    /// SIGKILL), probes every usable compute node, then binds two fresh
    /// sockets below `runtime_dir`.
    pub fn start(settings: BrokerSettings, runtime_dir: &Path) -> Result<Self, BrokerError> {
        let slurm = SlurmTools::find(std::env::var_os("PATH").as_deref())?;
        let leftovers = slurm.cancel_run(&settings.scope())?;
        if leftovers > 0 {
            tracing::warn!(
                "cancelled {leftovers} leftover job(s) of run {} from an earlier broker",
                settings.run.as_str()
            );
        }
        let ctx = Arc::new(Ctx {
            settings,
            slurm,
            stopping: AtomicBool::new(false),
            active: [AtomicUsize::new(0), AtomicUsize::new(0)],
            next: AtomicU64::new(1),
        });
        probe(&ctx)?;

        let mut random = [0u8; 8];
        crate::fsutil::random_bytes(&mut random).map_err(|e| BrokerError::Io {
            what: "draw random bytes".into(),
            source: std::io::Error::other(e.to_string()),
        })?;
        let dir = runtime_dir.join(format!(
            "vibesys-broker-{}-{}",
            ctx.settings.run.as_str(),
            hex::encode(random)
        ));
        let mkdir = |p: &Path| {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(p)
                .map_err(|source| BrokerError::Io {
                    what: format!("create {}", p.display()),
                    source,
                })
        };
        mkdir(&dir)?;
        let mut listeners = Vec::new();
        let mut paths = Vec::new();
        let roles = [Role::Agent, Role::Framework]
            .into_iter()
            .chain((1..=ctx.settings.candidates).map(Role::Candidate))
            .chain(ctx.settings.checkout.as_ref().map(|_| Role::Checkout));
        for role in roles {
            let sub = dir.join(match role {
                Role::Candidate(n) => format!("candidate-{n}"),
                Role::Checkout => "checkout".to_owned(),
                _ => role.name(),
            });
            mkdir(&sub)?;
            let path = sub.join("broker.sock");
            let listener = UnixListener::bind(&path).map_err(|source| BrokerError::Io {
                what: format!("bind {}", path.display()),
                source,
            })?;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(
                |source| BrokerError::Io {
                    what: format!("chmod {}", path.display()),
                    source,
                },
            )?;
            listeners.push((role, listener));
            paths.push(path);
        }
        let checkout = ctx
            .settings
            .checkout
            .as_ref()
            .and_then(|_| paths.last().cloned());
        let candidates = paths[2..2 + ctx.settings.candidates as usize].to_vec();
        Ok(Self {
            ctx,
            dir,
            agent: paths[0].clone(),
            framework: paths[1].clone(),
            checkout,
            candidates,
            listeners,
            leftovers,
        })
    }

    /// The agent socket.
    pub fn agent_socket(&self) -> &Path {
        &self.agent
    }

    /// The framework socket.
    pub fn framework_socket(&self) -> &Path {
        &self.framework
    }

    /// The agent socket of candidate `n` (1-based), when served.
    pub fn candidate_socket(&self, n: u32) -> Option<&Path> {
        let i = usize::try_from(n).ok()?.checked_sub(1)?;
        self.candidates.get(i).map(PathBuf::as_path)
    }

    /// The build checkout's socket (`--checkout`), when served.
    pub fn checkout_socket(&self) -> Option<&Path> {
        self.checkout.as_deref()
    }

    /// The sockets, one a line, as `vibesys broker serve` prints them:
    /// `candidate N: PATH`..., `checkout: PATH`, `agent: PATH`,
    /// `framework: PATH`.
    pub fn socket_listing(&self) -> String {
        let mut text = String::new();
        for (i, socket) in self.candidates.iter().enumerate() {
            text.push_str(&format!("candidate {}: {}\n", i + 1, socket.display()));
        }
        if let Some(socket) = &self.checkout {
            text.push_str(&format!("checkout: {}\n", socket.display()));
        }
        text.push_str(&format!("agent: {}\n", self.agent.display()));
        text.push_str(&format!("framework: {}\n", self.framework.display()));
        text
    }

    /// How many leftover jobs the start cancelled.
    pub fn leftovers(&self) -> usize {
        self.leftovers
    }

    /// A handle that stops [`Broker::serve`].
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            ctx: Arc::clone(&self.ctx),
            sockets: [self.agent.clone(), self.framework.clone()]
                .into_iter()
                .chain(self.candidates.iter().cloned())
                .chain(self.checkout.iter().cloned())
                .collect(),
        }
    }

    /// Serves both sockets until [`ShutdownHandle::shutdown`]; then cancels
    /// every job of the run, waits for the connections to finish and
    /// removes the sockets. Returns how many jobs the stop cancelled.
    pub fn serve(mut self) -> Result<usize, BrokerError> {
        let mut threads = Vec::new();
        for (role, listener) in self.listeners.drain(..) {
            let ctx = Arc::clone(&self.ctx);
            threads.push(std::thread::spawn(move || {
                accept_loop(&ctx, role, &listener)
            }));
        }
        for t in threads {
            let _ = t.join();
        }
        let scope = self.ctx.settings.scope();
        let cancelled = self.ctx.slurm.cancel_run(&scope)?;
        let deadline = Instant::now() + Duration::from_secs(15);
        let busy = |c: &Ctx| {
            c.active
                .iter()
                .map(|a| a.load(Ordering::SeqCst))
                .sum::<usize>()
        };
        while busy(&self.ctx) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        // Stop only when Slurm no longer lists any job of the run (a
        // cancelled job may stay COMPLETING for a while), asking again
        // every few seconds, so no job outlives the broker.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut asked = Instant::now();
        while Instant::now() < deadline {
            match self.ctx.slurm.run_jobs(&scope) {
                Ok(jobs) if jobs.is_empty() => break,
                Ok(_) if asked.elapsed() > Duration::from_secs(3) => {
                    let _ = self.ctx.slurm.cancel_run(&scope);
                    asked = Instant::now();
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!("cannot list the run's jobs: {e}");
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        Ok(cancelled)
    }
}

fn accept_loop(ctx: &Arc<Ctx>, role: Role, listener: &UnixListener) {
    for conn in listener.incoming() {
        if ctx.stopping.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = conn else { continue };
        let active = &ctx.active[role.index()];
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            let mut s = stream;
            send_final(
                &mut s,
                &Final::Refused {
                    reason: format!(
                        "the broker serves at most {MAX_CONNECTIONS} connections at once"
                    ),
                },
            );
            continue;
        }
        let ctx = Arc::clone(ctx);
        std::thread::spawn(move || {
            handle(&ctx, role, stream);
            ctx.active[role.index()].fetch_sub(1, Ordering::SeqCst);
        });
    }
}

fn send_final(stream: &mut UnixStream, status: &Final) {
    let _ = write_frame(stream, FrameKind::Final, &encode_final(status));
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

fn peer(stream: &UnixStream) -> String {
    match rustix::net::sockopt::socket_peercred(stream) {
        Ok(c) => format!(
            "pid={} uid={} gid={}",
            c.pid.as_raw_nonzero(),
            c.uid.as_raw(),
            c.gid.as_raw()
        ),
        Err(e) => format!("unknown ({e})"),
    }
}

/// Reads from the connection until a deadline for the whole request, so a
/// client trickling bytes cannot hold a connection slot for long.
struct DeadlineReader<'a> {
    stream: &'a mut UnixStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no whole request within {} s", REQUEST_TIMEOUT.as_secs()),
            ));
        }
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

fn read_request(stream: &mut UnixStream) -> Result<Request, ProtocolError> {
    let frame = read_frame(&mut DeadlineReader {
        stream,
        deadline: Instant::now() + REQUEST_TIMEOUT,
    })?;
    if frame.kind != FrameKind::Request {
        return Err(ProtocolError::UnexpectedKind {
            expected: "request",
            found: frame.kind,
        });
    }
    let req = decode_request(&frame.payload)?;
    stream.set_read_timeout(None)?;
    Ok(req)
}

fn handle(ctx: &Ctx, role: Role, mut stream: UnixStream) {
    let who = peer(&stream);
    let req = match read_request(&mut stream) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("{} socket, peer {who}: refused: {e}", role.name());
            send_final(
                &mut stream,
                &Final::Refused {
                    reason: bounded(&e.to_string()),
                },
            );
            return;
        }
    };
    if ctx.stopping.load(Ordering::SeqCst) {
        send_final(
            &mut stream,
            &Final::Refused {
                reason: "the broker is stopping".into(),
            },
        );
        return;
    }
    let sub = match plan(ctx, role, &req) {
        Ok(s) => s,
        Err(reason) => {
            tracing::warn!("{} socket, peer {who}: refused: {reason}", role.name());
            send_final(
                &mut stream,
                &Final::Refused {
                    reason: bounded(&reason),
                },
            );
            return;
        }
    };
    tracing::info!(
        "{} socket, peer {who}: job {} in {} ({} GPU(s), {} min)",
        role.name(),
        sub.name,
        sub.cwd.display(),
        sub.gpus,
        sub.time_minutes
    );
    let status = match run_job(ctx, &sub, &stream) {
        Ok(s) => s,
        Err(e) => Final::Refused {
            reason: bounded(&e.to_string()),
        },
    };
    tracing::info!("job {}: {status:?}", sub.name);
    send_final(&mut stream, &status);
}

/// Checks a request against the role and the operator's limits and turns
/// it into a submission; the error is the refusal's reason.
fn plan(ctx: &Ctx, role: Role, req: &Request) -> Result<JobSubmission, String> {
    let s = &ctx.settings;
    let name = format!(
        "{}-{}",
        s.scope().name_prefix(),
        ctx.next.fetch_add(1, Ordering::SeqCst)
    );
    match req {
        Request::Gate { name: gate, .. } => {
            if role != Role::Framework {
                return Err(format!(
                    "the {} socket cannot run gates; gates run only through the framework socket",
                    role.name()
                ));
            }
            let Some(argv) = s.gates.get(gate) else {
                return Err(format!(
                    "no gate {:?} in [gates] of the project's vibesys.toml",
                    bounded(gate)
                ));
            };
            Ok(JobSubmission {
                name,
                comment: s.scope().comment(),
                time_minutes: s.max_time_minutes,
                gpus: 0,
                nodelist: None,
                partition: s.partition.clone(),
                cwd: s.project.clone(),
                argv: argv.iter().map(OsString::from).collect(),
            })
        }
        Request::Job {
            argv,
            cwd,
            gpus,
            time_minutes,
            env,
            network,
            ..
        } => {
            if role != Role::Framework && !s.agent_jobs {
                return Err("agent jobs are off: the operator has not enabled [vibesys.agent_gpu] (enabled = true) in vibesys.toml or --agent-gpu".into());
            }
            if *gpus > s.max_gpus {
                return Err(format!(
                    "{gpus} GPU(s) requested, above the operator's limit of {}",
                    s.max_gpus
                ));
            }
            let time = time_minutes.unwrap_or(s.max_time_minutes);
            if time == 0 || time > s.max_time_minutes {
                return Err(format!(
                    "a time limit of {time} min is outside 1..={} min (the operator's limit)",
                    s.max_time_minutes
                ));
            }
            let (workspace, cwd) = super::resolve_cwd(&s.project, &s.run, cwd.as_deref())?;
            let own = match role {
                Role::Candidate(n) => Some((n.to_string(), format!("candidate {n}'s"))),
                Role::Checkout => s
                    .checkout
                    .as_ref()
                    .map(|c| (c.as_str().to_owned(), "the build checkout's".to_owned())),
                Role::Agent | Role::Framework => None,
            };
            if let Some((own, whose)) = own {
                let own = s
                    .project
                    .join(crate::state::StateLayout::candidates_rel(&s.run))
                    .join(own);
                if workspace != own {
                    return Err(format!(
                        "{whose} socket runs jobs only in its own worktree {}; {} is outside it",
                        own.display(),
                        cwd.display()
                    ));
                }
            }
            let job = vs_sandbox::helper::HostJob {
                project: s.project.clone(),
                workspace,
                cwd: cwd.clone(),
                bwrap: s.bwrap.clone(),
                gpu_devices: s.gpu_devices.clone(),
                network: s.network.for_job(*network),
                env: env
                    .iter()
                    .filter(|(k, _)| super::env_allowed(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
                argv: argv.iter().map(OsString::from).collect(),
            };
            let node = vs_sandbox::Helper::HostJob(Box::new(job)).argv(&s.helper);
            Ok(JobSubmission {
                name,
                comment: s.scope().comment(),
                time_minutes: time,
                gpus: *gpus,
                nodelist: None,
                partition: s.partition.clone(),
                cwd,
                argv: node,
            })
        }
    }
}

fn io_err(what: &str) -> impl FnOnce(std::io::Error) -> BrokerError + '_ {
    move |source| BrokerError::Io {
        what: what.to_owned(),
        source,
    }
}

/// Signals srun while it is known to run (its waiter has not reaped it).
fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// Runs one job with `srun`, relaying its output; a client that goes away
/// cancels it.
fn run_job(ctx: &Ctx, sub: &JobSubmission, stream: &UnixStream) -> Result<Final, BrokerError> {
    let mut child = ctx
        .slurm
        .srun(sub)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io_err("start srun"))?;
    let writer = Arc::new(Mutex::new(
        stream.try_clone().map_err(io_err("clone the connection"))?,
    ));
    let finished = Arc::new(AtomicBool::new(false));
    let gone = Arc::new(AtomicBool::new(false));
    let mut pumps = Vec::new();
    let pipes: [(Option<Box<dyn Read + Send>>, FrameKind); 2] = [
        (
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            FrameKind::Stdout,
        ),
        (
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
            FrameKind::Stderr,
        ),
    ];
    // srun runs with --quiet: any line of its own on stderr means
    // something went wrong (it exits 0 after a node failure, for one), so
    // the job's state is then asked of Slurm even for status 0.
    let srun_spoke = Arc::new(AtomicBool::new(false));
    for (pipe, kind) in pipes {
        let Some(mut pipe) = pipe else { continue };
        let writer = Arc::clone(&writer);
        let gone = Arc::clone(&gone);
        let spoke = Arc::clone(&srun_spoke);
        pumps.push(std::thread::spawn(move || {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                if kind == FrameKind::Stderr
                    && [&b"srun: "[..], b"slurmstepd"]
                        .iter()
                        .any(|m| buf[..n].windows(m.len()).any(|w| w == *m))
                {
                    spoke.store(true, Ordering::SeqCst);
                }
                if gone.load(Ordering::SeqCst) {
                    continue;
                }
                let ok = writer
                    .lock()
                    .map(|mut w| write_output(&mut *w, kind, &buf[..n]).is_ok())
                    .unwrap_or(false);
                if !ok {
                    gone.store(true, Ordering::SeqCst);
                }
            }
        }));
    }
    // The client sends nothing after its request: end of stream (or an
    // error) while the job runs means it went away.
    let watcher = {
        let mut reader = stream.try_clone().map_err(io_err("clone the connection"))?;
        let finished = Arc::clone(&finished);
        let gone = Arc::clone(&gone);
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            if !finished.load(Ordering::SeqCst) {
                gone.store(true, Ordering::SeqCst);
            }
        })
    };
    // srun is waited for on a thread of its own, so its exit is seen at
    // once; this loop only watches for a reason to cancel.
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    let mut cancelled_at: Option<Instant> = None;
    let mut last_cancel = Instant::now();
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(result) => break result.map_err(io_err("wait for srun"))?,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(BrokerError::Io {
                    what: "wait for srun".into(),
                    source: std::io::Error::other("the waiting thread ended"),
                });
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let stop = gone.load(Ordering::SeqCst) || ctx.stopping.load(Ordering::SeqCst);
                if stop
                    && (cancelled_at.is_none()
                        || last_cancel.elapsed() > Duration::from_millis(500))
                {
                    if cancelled_at.is_none() {
                        tracing::info!(
                            "job {}: cancelling (client gone or broker stopping)",
                            sub.name
                        );
                        cancelled_at = Some(Instant::now());
                        signal(pid, rustix::process::Signal::TERM);
                    }
                    last_cancel = Instant::now();
                    if let Err(e) = ctx.slurm.cancel_name(&sub.name) {
                        tracing::warn!("job {}: {e}", sub.name);
                    }
                    if cancelled_at.is_some_and(|t| t.elapsed() > Duration::from_secs(20)) {
                        signal(pid, rustix::process::Signal::KILL);
                    }
                }
            }
        }
    };
    finished.store(true, Ordering::SeqCst);
    for p in pumps {
        let _ = p.join();
    }
    let code = vs_sandbox::launch::exit_code(status);
    let outcome = if code == 0 && !srun_spoke.load(Ordering::SeqCst) {
        Final::Exited { code }
    } else {
        match ctx.slurm.final_state(&sub.name)? {
            Some((state, reason)) => match state.as_str() {
                "CANCELLED" | "TIMEOUT" | "DEADLINE" | "NODE_FAIL" | "PREEMPTED" | "BOOT_FAIL"
                | "OUT_OF_MEMORY" => Final::JobEnded {
                    message: format!(
                        "slurm job {} ended {state}{}",
                        sub.name,
                        if reason.is_empty() || reason == "None" {
                            String::new()
                        } else {
                            format!(" ({reason})")
                        }
                    ),
                    state,
                },
                _ => Final::Exited { code },
            },
            None => Final::JobEnded {
                state: "NOT_SUBMITTED".into(),
                message: format!(
                    "srun exited with status {code} before Slurm accepted the job (its error is above)"
                ),
            },
        }
    };
    let _ = stream.shutdown(std::net::Shutdown::Read);
    let _ = watcher.join();
    Ok(outcome)
}

/// The probe script: bubblewrap present, a user namespace and a fresh
/// /proc can be made, the vibesys helper is there.
const PROBE_SCRIPT: &str = r#"b="$1"; h="$2"
[ -x "$h" ] || { echo "the vibesys helper $h is missing or not executable"; exit 0; }
if [ -n "$b" ]; then
  [ -x "$b" ] || { echo "bubblewrap was not found at $b"; exit 0; }
else
  b=$(command -v bwrap) || { echo "bubblewrap (bwrap) is not installed"; exit 0; }
fi
out=$("$b" --unshare-user --unshare-pid --die-with-parent --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp true 2>&1) ||
  { echo "bwrap cannot create a sandbox (user namespaces or a fresh /proc not allowed): $out"; exit 0; }
echo vibesys-probe-ok"#;

fn probe(ctx: &Ctx) -> Result<(), BrokerError> {
    let s = &ctx.settings;
    let nodes = ctx.slurm.usable_nodes(s.partition.as_deref())?;
    if nodes.is_empty() {
        return Err(BrokerError::NoNodes);
    }
    let mut running = Vec::new();
    for node in &nodes {
        let sub = JobSubmission {
            name: format!("{}-probe", s.scope().name_prefix()),
            comment: s.scope().comment(),
            time_minutes: 1,
            gpus: 0,
            nodelist: Some(node.clone()),
            partition: s.partition.clone(),
            cwd: PathBuf::from("/"),
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                PROBE_SCRIPT.into(),
                "sh".into(),
                s.bwrap
                    .clone()
                    .map(PathBuf::into_os_string)
                    .unwrap_or_default(),
                s.helper.clone().into_os_string(),
            ],
        };
        let child = ctx
            .slurm
            .srun(&sub)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err("start the probe job"))?;
        running.push((node.clone(), child));
    }
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let mut failure = None;
    for (node, mut child) in running {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let (mut o, mut e) = (child.stdout.take(), child.stderr.take());
        let reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(e) = e.as_mut() {
                let _ = e.take(8192).read_to_end(&mut buf);
            }
            buf
        });
        if let Some(o) = o.as_mut() {
            let _ = o.take(8192).read_to_end(&mut out);
        }
        let status = loop {
            match child.try_wait() {
                Ok(Some(st)) => break Some(st),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
            }
        };
        if let Ok(b) = reader.join() {
            err = b;
        }
        let text = String::from_utf8_lossy(&out);
        if failure.is_none() && !text.lines().any(|l| l == "vibesys-probe-ok") {
            let cause = match status {
                None => format!(
                    "the probe job did not finish within {} s",
                    PROBE_TIMEOUT.as_secs()
                ),
                Some(st) if !st.success() => format!(
                    "the probe job failed (srun status {}): {}",
                    vs_sandbox::launch::exit_code(st),
                    String::from_utf8_lossy(&err).trim()
                ),
                Some(_) => text.trim().to_owned(),
            };
            failure = Some(BrokerError::ProbeFailed {
                node,
                cause: protocol::bounded(&cause),
            });
        }
    }
    match failure {
        Some(f) => {
            let _ = ctx.slurm.cancel_run(&s.scope());
            Err(f)
        }
        None => Ok(()),
    }
}
