//! The slurm run environment's local side: the run's host command broker
//! (a `vibesys broker serve` child of this process) and the local editor
//! container it serves. The container is a control plane: no devices
//! (the Docker plan never passes any: attach_accelerator = false), only
//! the broker's AGENT socket mounted (never the framework socket), the
//! workspace at its host path, and the static vibesys that serves its
//! commands doubling as the client (`/.vibesys/vibesys broker job`).

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use vs_docker::{DockerOptions, ExtraMount};

/// Why the run's broker or its editor container cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerChildError {
    /// The broker process could not be started.
    #[error("cannot start the slurm run environment's broker")]
    Spawn(#[source] std::io::Error),
    /// Its stdout is not readable.
    #[error("the broker's output is not readable")]
    NoOutput,
    /// It could not be waited for.
    #[error("cannot wait for the broker")]
    Wait(#[source] std::io::Error),
    /// It exited before naming its sockets.
    #[error("the slurm run environment's broker did not start ({0}); see its messages above")]
    Exited(std::process::ExitStatus),
    /// Its socket lines are not what was asked for.
    #[error("{0}")]
    Sockets(String),
    /// No static vibesys to serve as the client in the container.
    #[error("{}", NO_STATIC_VIBESYS)]
    NoStaticVibesys,
}

/// Where the agent socket appears in the editor container.
pub const AGENT_SOCKET_IN_CONTAINER: &str = "/run/vibesys/agent.sock";

/// The variable naming the agent socket inside the editor container.
pub const BROKER_SOCKET_ENV: &str = "VIBESYS_BROKER_SOCKET";

/// How long a stopping broker may take to cancel the run's jobs before it
/// is killed (its successor would cancel what is left).
const STOP_GRACE: Duration = Duration::from_secs(60);

/// A running `vibesys broker serve`: SIGTERM on drop (it cancels every
/// job it submitted), and SIGTERM from the kernel if this process dies
/// first (`PR_SET_PDEATHSIG`). It runs in a process group of its own, so
/// a Ctrl-C meant for the agent's CLI does not stop it.
#[derive(Debug)]
pub struct BrokerChild {
    child: Option<Child>,
    agent: PathBuf,
    framework: PathBuf,
    candidates: Vec<PathBuf>,
    checkout: Option<PathBuf>,
    _stdout: BufReader<ChildStdout>,
}

/// What a broker child is started with.
#[derive(Debug)]
pub struct BrokerStart<'a> {
    /// The vibesys executable (`vibesys broker serve`).
    pub helper: &'a Path,
    /// The project.
    pub project: &'a Path,
    /// The run (or session) id.
    pub run: &'a str,
    /// `--agent-gpu` (the deprecated `slurm-gpu`).
    pub agent_gpu: bool,
    /// One agent socket per candidate of a run, each bound to its
    /// worktree (0: none).
    pub candidates: u32,
    /// A standalone build's checkout name: one socket bound to that
    /// checkout, and the broker's jobs scoped to it.
    pub checkout: Option<&'a str>,
    /// The session's or the run's `--allow-host`, which agent jobs get
    /// as well.
    pub allow_hosts: &'a [String],
    /// The session's `--no-network`, which agent jobs get as well.
    pub no_network: bool,
}

impl BrokerChild {
    /// Starts the broker `start` describes and waits for its socket
    /// lines. Fails, naming the broker's status, when it exits first (its
    /// own messages are on stderr).
    pub fn start(start: BrokerStart<'_>) -> Result<Self, BrokerChildError> {
        let BrokerStart {
            helper,
            project,
            run,
            agent_gpu,
            candidates,
            checkout,
            allow_hosts,
            no_network,
        } = start;
        let mut cmd = Command::new(helper);
        cmd.arg("broker")
            .arg("serve")
            .arg("--project")
            .arg(project)
            .args(["--run", run]);
        if agent_gpu {
            cmd.arg("--agent-gpu");
        }
        if candidates > 0 {
            cmd.arg("--candidates").arg(candidates.to_string());
        }
        if let Some(name) = checkout {
            cmd.args(["--checkout", name]);
        }
        for host in allow_hosts {
            cmd.arg(format!("--allow-host={host}"));
        }
        if no_network {
            cmd.arg("--no-network");
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        vs_sandbox::launch::terminate_with_parent(&mut cmd);
        let mut child = cmd.spawn().map_err(BrokerChildError::Spawn)?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BrokerChildError::NoOutput);
        };
        let mut reader = BufReader::new(stdout);
        let mut agent = None;
        let mut framework = None;
        let mut sockets = Vec::new();
        let mut checkout_socket = None;
        let mut line = String::new();
        while agent.is_none() || framework.is_none() {
            line.clear();
            let read = reader.by_ref().take(8192).read_line(&mut line);
            match read {
                Ok(n) if n > 0 => {
                    let l = line.trim_end();
                    if let Some(rest) = l.strip_prefix("candidate ")
                        && let Some((n, path)) = rest.split_once(": ")
                        && n.parse::<u32>().ok() == u32::try_from(sockets.len() + 1).ok()
                    {
                        sockets.push(PathBuf::from(path));
                    } else if let Some(c) = l.strip_prefix("checkout: ") {
                        checkout_socket = Some(PathBuf::from(c));
                    } else if let Some(a) = l.strip_prefix("agent: ") {
                        agent = Some(PathBuf::from(a));
                    } else if let Some(f) = l.strip_prefix("framework: ") {
                        framework = Some(PathBuf::from(f));
                    }
                }
                _ => {
                    let status = child.wait().map_err(BrokerChildError::Wait)?;
                    return Err(BrokerChildError::Exited(status));
                }
            }
        }
        // The framework socket stays on the host: never mounted.
        let (Some(agent), Some(framework)) = (agent, framework) else {
            return Err(BrokerChildError::Sockets(
                "the broker named no sockets".to_owned(),
            ));
        };
        if sockets.len() != candidates as usize {
            return Err(BrokerChildError::Sockets(format!(
                "the broker named {} candidate socket(s), not {candidates}",
                sockets.len()
            )));
        }
        if checkout.is_some() != checkout_socket.is_some() {
            return Err(BrokerChildError::Sockets(
                "the broker named no socket for the build checkout".to_owned(),
            ));
        }
        tracing::info!(agent = %agent.display(), framework = %framework.display(), "slurm: broker started");
        Ok(Self {
            child: Some(child),
            agent,
            framework,
            candidates: sockets,
            checkout: checkout_socket,
            _stdout: reader,
        })
    }

    /// The agent socket on the host.
    pub fn agent_socket(&self) -> &Path {
        &self.agent
    }

    /// The build checkout's socket (`checkout` of [`BrokerChild::start`]).
    pub fn checkout_socket(&self) -> Option<&Path> {
        self.checkout.as_deref()
    }

    /// Candidate `n`'s agent socket on the host (1-based), when the broker
    /// serves one.
    pub fn candidate_socket(&self, n: u32) -> Option<&Path> {
        let i = usize::try_from(n).ok()?.checked_sub(1)?;
        self.candidates.get(i).map(PathBuf::as_path)
    }

    /// The framework socket on the host (never mounted in a container:
    /// `vibesys run` sends a candidate's check and measure through it).
    pub fn framework_socket(&self) -> &Path {
        &self.framework
    }

    /// Stops the broker (SIGTERM: it cancels the run's jobs) and waits for
    /// it; killed after a grace period.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(pid) = i32::try_from(child.id())
            && let Some(pid) = rustix::process::Pid::from_raw(pid)
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if start.elapsed() > STOP_GRACE => {
                    tracing::warn!("the broker did not stop in time; killing it");
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for BrokerChild {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Why the slurm run environment cannot start without a static vibesys.
pub const NO_STATIC_VIBESYS: &str = "the slurm run environment needs a static vibesys in the editor container (the broker client): this vibesys is not static, there is no vibesys-static beside it and VIBESYS_COMMAND_SERVER is not set; build one beside it with scripts/build-static.sh --beside DIR (DIR: this vibesys's directory), or set VIBESYS_COMMAND_SERVER to one";

/// Turns Docker options into the editor container's: `socket` (the
/// broker's agent socket, or a run candidate's own) mounted at
/// [`AGENT_SOCKET_IN_CONTAINER`], and a static vibesys to serve as the
/// client (refused without one: the agent would have no way to reach the
/// broker).
pub fn editor_options(options: &mut DockerOptions, socket: &Path) -> Result<(), BrokerChildError> {
    if options.command_server.is_none() {
        return Err(BrokerChildError::NoStaticVibesys);
    }
    options.env = std::mem::take(&mut options.env).with([BROKER_SOCKET_ENV]);
    options.extra_mounts.push(ExtraMount {
        source: socket.to_path_buf(),
        target: PathBuf::from(AGENT_SOCKET_IN_CONTAINER),
        read_only: false,
    });
    Ok(())
}

/// A candidate's `check` and `measure` as Slurm jobs: each command goes
/// to the run's broker over its framework socket as a `Request::Job`
/// whose working directory is the evaluation's fresh checkout (the broker
/// runs it under `HostJobConfinement` on a compute node: that checkout
/// writable, the protected paths read-only, the run state hidden, a fresh
/// `HOME`, no network unless the command asks for it). Output is bounded
/// as a local runner's.
pub struct BrokerJobRunner {
    /// The broker's framework socket.
    pub socket: PathBuf,
    /// Whether the job keeps the network (`[check]`/`[measure]` network).
    pub network: bool,
}

/// Bytes kept of each stream of an evaluation job (as the local runner).
const JOB_OUTPUT_CAP: usize = 1024 * 1024;

impl vs_sandbox::CommandRunner for BrokerJobRunner {
    fn run(
        &self,
        command: &vs_sandbox::CommandSpec,
    ) -> Result<vs_sandbox::CommandResult, vs_sandbox::RunnerError> {
        use crate::broker::protocol::{Final, PROTOCOL_VERSION, Request};
        let dispatched = |message: String| vs_sandbox::RunnerError::Dispatched {
            place: format!("the Slurm broker ({})", self.socket.display()),
            message,
        };
        let text = |what: &str, s: &std::ffi::OsStr| {
            s.to_str()
                .map(str::to_owned)
                .ok_or_else(|| dispatched(format!("{what} {s:?} is not UTF-8")))
        };
        let argv = command
            .argv
            .iter()
            .map(|a| text("argument", a))
            .collect::<Result<Vec<_>, _>>()?;
        let mut env = std::collections::BTreeMap::new();
        for (k, v) in &command.env {
            env.insert(text("variable", k)?, text("value", v)?);
        }
        // Slurm's limit in whole minutes, at least the command's timeout.
        let time_minutes = command
            .timeout
            .map(|t| u32::try_from(t.as_secs().div_ceil(60).max(1)).unwrap_or(u32::MAX));
        let request = Request::Job {
            version: PROTOCOL_VERSION,
            argv,
            cwd: Some(command.cwd.clone()),
            gpus: 0,
            time_minutes,
            env,
            network: Some(self.network),
        };
        let start = Instant::now();
        // The call blocks until the job ends: it runs on its own thread so
        // that a cancelled run returns at once (the broker cancels the
        // job when it is stopped with the run).
        let (tx, rx) = std::sync::mpsc::channel();
        let socket = self.socket.clone();
        std::thread::spawn(move || {
            let mut out = vs_sandbox::runner::BoundedCapture::new(JOB_OUTPUT_CAP);
            let mut err = vs_sandbox::runner::BoundedCapture::new(JOB_OUTPUT_CAP);
            let fin = crate::broker::client::call(&socket, &request, &mut out, &mut err)
                .map_err(|e| e.to_string());
            let _ = tx.send((fin, out, err));
        });
        let (fin, out, err) = loop {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(done) => break done,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                    if command.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                        return Ok(vs_sandbox::CommandResult {
                            exit_code: 130,
                            signal: None,
                            timed_out: false,
                            cancelled: true,
                            duration: start.elapsed(),
                            stdout: vs_sandbox::runner::CapturedOutput::empty(),
                            stderr: vs_sandbox::runner::CapturedOutput::empty(),
                        });
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(dispatched("the call ended without a status".to_owned()));
                }
            }
        };
        let fin = fin.map_err(dispatched)?;
        let (exit_code, timed_out) = match fin {
            Final::Exited { code } => (code, false),
            Final::JobEnded { state, message } => {
                let timed_out = state == "TIMEOUT";
                if !timed_out {
                    return Err(dispatched(format!(
                        "Slurm ended the job ({state}): {message}"
                    )));
                }
                (124, true)
            }
            Final::Refused { reason } => return Err(dispatched(format!("refused: {reason}"))),
        };
        Ok(vs_sandbox::CommandResult {
            exit_code,
            signal: None,
            timed_out,
            cancelled: false,
            duration: start.elapsed(),
            stdout: out.finish(),
            stderr: err.finish(),
        })
    }
}

/// The log line of the deprecated `slurm-gpu`.
pub fn warn_slurm_gpu_alias() {
    tracing::warn!(
        "--run-environment slurm-gpu is deprecated: it means slurm with agent GPU jobs on ([vibesys.agent_gpu] enabled = true, or vibesys broker serve --agent-gpu)"
    );
}
