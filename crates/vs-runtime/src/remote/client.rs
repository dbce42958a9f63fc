//! The services' own clients (`sky`, `modal`), installed from PyPI into a
//! venv of vibesys's own (`scripts/remote-clients.sh`): where they are,
//! whether they are installed and configured, and running one with its
//! output streamed, kept (bounded) and stopped on timeout or interrupt.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::error::RemoteError;

/// The skypilot release vibesys generates tasks for and is tested with.
pub const SKYPILOT_VERSION: &str = "0.14.1";
/// The modal release vibesys generates modules for and is tested with.
pub const MODAL_VERSION: &str = "1.6.4";
/// The variable naming the tool directory.
pub const TOOLS_ENV: &str = "VIBESYS_TOOLS";
/// The venv below the tool directory that holds both clients.
pub const CLIENTS_VENV: &str = "remote-clients";

/// Most bytes of a client's output kept in memory and in its log.
pub const MAX_CLIENT_OUTPUT: usize = 16 << 20;

/// A service whose client vibesys drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Service {
    /// SkyPilot (`sky`).
    Skypilot,
    /// Modal (`modal`).
    Modal,
}

impl Service {
    /// The service's name as users write it.
    pub fn title(self) -> &'static str {
        match self {
            Self::Skypilot => "SkyPilot",
            Self::Modal => "Modal",
        }
    }

    /// The client's executable name.
    pub fn program(self) -> &'static str {
        match self {
            Self::Skypilot => "sky",
            Self::Modal => "modal",
        }
    }

    /// The PyPI package and the pinned version.
    pub fn package(self) -> (&'static str, &'static str) {
        match self {
            Self::Skypilot => ("skypilot", SKYPILOT_VERSION),
            Self::Modal => ("modal", MODAL_VERSION),
        }
    }
}

/// The tool directory: `$VIBESYS_TOOLS`, else
/// `${XDG_DATA_HOME:-$HOME/.local/share}/vibesys/tools`.
pub fn tools_dir() -> PathBuf {
    let abs = |v: Option<OsString>| v.map(PathBuf::from).filter(|p| p.is_absolute());
    if let Some(d) = abs(std::env::var_os(TOOLS_ENV)) {
        return d;
    }
    let data = abs(std::env::var_os("XDG_DATA_HOME"))
        .or_else(|| abs(std::env::var_os("HOME")).map(|h| h.join(".local").join("share")));
    data.unwrap_or_else(|| PathBuf::from("/var/lib"))
        .join("vibesys")
        .join("tools")
}

/// Where the clients live.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Clients {
    /// The tool directory.
    pub tools: PathBuf,
}

impl Clients {
    /// The clients of the tool directory [`tools_dir`].
    pub fn discover() -> Self {
        Self { tools: tools_dir() }
    }

    /// The venv holding both clients.
    pub fn venv(&self) -> PathBuf {
        self.tools.join(CLIENTS_VENV)
    }

    /// The executable of `service`'s client.
    pub fn program(&self, service: Service) -> PathBuf {
        self.venv().join("bin").join(service.program())
    }

    /// The venv's Python (tests import the client libraries with it).
    pub fn python(&self) -> PathBuf {
        self.venv().join("bin").join("python")
    }

    /// Refuses a tool directory inside `project` (the agent could write
    /// the client vibesys runs on the host).
    pub fn require_outside(&self, project: &Path) -> Result<(), RemoteError> {
        let tools = fs::canonicalize(&self.tools).unwrap_or_else(|_| self.tools.clone());
        let project = fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf());
        if tools.starts_with(&project) {
            return Err(RemoteError::ToolsInsideProject { tools, project });
        }
        Ok(())
    }

    /// The installed client of `service`, or why it is missing.
    pub fn require(&self, service: Service) -> Result<PathBuf, RemoteError> {
        let program = self.program(service);
        if is_executable(&program) {
            Ok(program)
        } else {
            Err(RemoteError::ClientMissing {
                service: service.title(),
                program,
                tools: self.tools.clone(),
            })
        }
    }

    /// The installed version of `service`'s package (from its dist-info).
    pub fn installed_version(&self, service: Service) -> Option<String> {
        let (package, _) = service.package();
        let prefix = format!("{package}-");
        let lib = fs::read_dir(self.venv().join("lib")).ok()?;
        for py in lib.flatten() {
            let Ok(entries) = fs::read_dir(py.path().join("site-packages")) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(v) = name
                    .strip_prefix(&prefix)
                    .and_then(|r| r.strip_suffix(".dist-info"))
                {
                    return Some(v.to_owned());
                }
            }
        }
        None
    }

    /// Whether `service`'s client is installed (at the pinned version) and
    /// configured, and exactly what is missing otherwise.
    pub fn status(&self, service: Service) -> ClientStatus {
        let (package, pin) = service.package();
        let program = self.program(service);
        let install = format!(
            "run scripts/remote-clients.sh (installs {package}=={pin} into {})",
            self.venv().display()
        );
        let installed = match (is_executable(&program), self.installed_version(service)) {
            (true, Some(v)) if v == pin => Ok(format!("{package} {v} at {}", program.display())),
            (true, Some(v)) => Err(Missing {
                what: format!(
                    "{package} {v} is installed at {}, vibesys is tested with {pin}",
                    program.display()
                ),
                fix: install,
            }),
            _ => Err(Missing {
                what: format!(
                    "the {} client {} is not installed",
                    service.title(),
                    program.display()
                ),
                fix: install,
            }),
        };
        let configured = match service {
            Service::Modal => modal_credentials(&program),
            Service::Skypilot => skypilot_credentials(&program),
        };
        ClientStatus {
            service,
            installed,
            configured,
        }
    }
}

/// Something missing and the command that fixes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Missing {
    /// What is missing.
    pub what: String,
    /// What fixes it.
    pub fix: String,
}

/// Whether a service's client is installed and configured on this host.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ClientStatus {
    /// The service.
    pub service: Service,
    /// The installed client, or what is missing.
    pub installed: Result<String, Missing>,
    /// The credentials found (never their values), or what is missing.
    pub configured: Result<String, Missing>,
}

impl ClientStatus {
    /// Installed and configured.
    pub fn is_available(&self) -> bool {
        self.installed.is_ok() && self.configured.is_ok()
    }

    /// One line: what was found, or everything that is missing with its fix.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for r in [&self.installed, &self.configured] {
            match r {
                Ok(found) => parts.push(found.clone()),
                Err(m) => parts.push(format!("MISSING: {} (fix: {})", m.what, m.fix)),
            }
        }
        parts.join("; ")
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// Modal: `MODAL_TOKEN_ID` and `MODAL_TOKEN_SECRET`, or the config file
/// (`MODAL_CONFIG_PATH`, default `~/.modal.toml`) that `modal token new`
/// writes.
fn modal_credentials(program: &Path) -> Result<String, Missing> {
    if env_set("MODAL_TOKEN_ID") && env_set("MODAL_TOKEN_SECRET") {
        return Ok("Modal token from MODAL_TOKEN_ID/MODAL_TOKEN_SECRET".into());
    }
    let file = std::env::var_os("MODAL_CONFIG_PATH")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".modal.toml")));
    if let Some(f) = file.filter(|f| f.is_file()) {
        return Ok(format!("Modal token file {}", f.display()));
    }
    Err(Missing {
        what: "a Modal token (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET unset, no ~/.modal.toml)".into(),
        fix: format!("{} token new", program.display()),
    })
}

/// The credential files and variables of the clouds SkyPilot uses most,
/// as its own `sky check` looks for them.
const SKY_CREDENTIALS: &[(&str, &[&str], &[&str])] = &[
    (
        "aws",
        &[".aws/credentials", ".aws/config"],
        &["AWS_ACCESS_KEY_ID"],
    ),
    (
        "gcp",
        &[".config/gcloud/application_default_credentials.json"],
        &["GOOGLE_APPLICATION_CREDENTIALS"],
    ),
    ("azure", &[".azure/msal_token_cache.json"], &[]),
    ("kubernetes", &[".kube/config"], &["KUBECONFIG"]),
    ("lambda", &[".lambda_cloud/lambda_keys"], &[]),
    ("runpod", &[".runpod/config.toml"], &["RUNPOD_API_KEY"]),
    ("nebius", &[".nebius/credentials.json"], &[]),
    ("oci", &[".oci/config"], &[]),
    ("ssh", &[".sky/ssh_node_pools.yaml"], &[]),
];

/// SkyPilot: a remote API server (`SKYPILOT_API_SERVER_ENDPOINT`), or the
/// credentials of at least one cloud it can use.
fn skypilot_credentials(program: &Path) -> Result<String, Missing> {
    if env_set("SKYPILOT_API_SERVER_ENDPOINT") {
        return Ok("SkyPilot API server from SKYPILOT_API_SERVER_ENDPOINT".into());
    }
    let home = home();
    let mut found = Vec::new();
    for (cloud, files, vars) in SKY_CREDENTIALS {
        let file = home
            .as_ref()
            .is_some_and(|h| files.iter().any(|f| h.join(f).is_file()));
        if file || vars.iter().any(|v| env_set(v)) {
            found.push(*cloud);
        }
    }
    if found.is_empty() {
        return Err(Missing {
            what: "credentials of a cloud SkyPilot can use (none of ~/.aws, ~/.config/gcloud, ~/.azure, ~/.kube/config, ~/.lambda_cloud, ~/.runpod, ~/.nebius, ~/.oci found)".into(),
            fix: format!(
                "set up a cloud's credentials, then {} check",
                program.display()
            ),
        });
    }
    Ok(format!(
        "cloud credentials found for {} (`sky check` confirms)",
        found.join(", ")
    ))
}

/// A client's finished run.
#[derive(Debug)]
pub(crate) struct ClientRun {
    /// Its exit status.
    pub status: ExitStatus,
    /// Its merged stdout and stderr (at most [`MAX_CLIENT_OUTPUT`] bytes:
    /// the beginning, and the end when it printed more).
    pub output: Vec<u8>,
}

/// How a client run ended when it did not finish by itself.
pub(crate) enum Stopped {
    TimedOut,
    Interrupted,
}

/// One client invocation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClientCall<'a> {
    /// The client.
    pub program: &'a Path,
    /// Its arguments.
    pub args: &'a [OsString],
    /// Its whole environment.
    pub env: &'a [(OsString, OsString)],
    /// Its working directory.
    pub cwd: &'a Path,
    /// Where its output is kept.
    pub log: &'a Path,
    /// Its time limit.
    pub timeout: Duration,
    /// Stream its output to our stderr.
    pub stream: bool,
}

/// Runs `program args` in `cwd` with exactly `env`, in a process group of
/// its own (a terminal's Ctrl-C reaches vibesys, which stops the client
/// and tears down). Its merged output is streamed to our stderr when
/// `stream` is set, and kept (bounded) in `log` and in memory.
pub(crate) fn run_client(
    call: &ClientCall<'_>,
    cancel: &AtomicBool,
) -> Result<Result<ClientRun, Stopped>, RemoteError> {
    let ClientCall {
        program,
        args,
        env,
        cwd,
        log,
        timeout,
        stream,
    } = *call;
    let spawn_err = |source: io::Error| RemoteError::Spawn {
        program: program.to_path_buf(),
        source,
    };
    let (reader, writer) = io::pipe().map_err(spawn_err)?;
    let writer2 = writer.try_clone().map_err(spawn_err)?;
    let mut log_file = File::create(log).map_err(spawn_err)?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer2)
        .process_group(0);
    let mut child = cmd.spawn().map_err(spawn_err)?;
    drop(cmd);
    let pump = std::thread::spawn(move || pump(reader, &mut log_file, stream));
    let deadline = Instant::now() + timeout;
    let stopped = loop {
        match child.try_wait() {
            Ok(Some(_)) => break None,
            Ok(None) => {}
            Err(e) => return Err(spawn_err(e)),
        }
        if cancel.load(Ordering::SeqCst) {
            break Some(Stopped::Interrupted);
        }
        if Instant::now() >= deadline {
            break Some(Stopped::TimedOut);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if stopped.is_some() {
        stop_group(&mut child);
    }
    let status = child.wait().map_err(spawn_err)?;
    let output = pump.join().unwrap_or_default();
    Ok(match stopped {
        None => Ok(ClientRun { status, output }),
        Some(s) => Err(s),
    })
}

/// SIGINT to the client's process group, then SIGKILL after 10 s.
fn stop_group(child: &mut std::process::Child) {
    use rustix::process::{Pid, Signal, kill_process_group};
    let Some(pid) = i32::try_from(child.id()).ok().and_then(Pid::from_raw) else {
        let _ = child.kill();
        return;
    };
    let _ = kill_process_group(pid, Signal::INT);
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = kill_process_group(pid, Signal::KILL);
}

/// Copies the pipe to the log (bounded) and our stderr; returns the kept
/// bytes: the first half of the bound and the last half.
fn pump(mut reader: io::PipeReader, log: &mut File, stream: bool) -> Vec<u8> {
    let half = MAX_CLIENT_OUTPUT / 2;
    let mut head = Vec::new();
    let mut tail: Vec<u8> = Vec::new();
    let mut dropped = 0usize;
    let mut buf = [0u8; 64 * 1024];
    let mut stderr = io::stderr();
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        if stream {
            let _ = stderr.write_all(chunk);
        }
        let room = half.saturating_sub(head.len());
        let (h, t) = chunk.split_at(room.min(n));
        head.extend_from_slice(h);
        tail.extend_from_slice(t);
        if tail.len() > 2 * half {
            let cut = tail.len() - half;
            dropped += cut;
            tail.drain(..cut);
        }
    }
    if tail.len() > half {
        let cut = tail.len() - half;
        dropped += cut;
        tail.drain(..cut);
    }
    if dropped > 0 {
        head.extend_from_slice(
            format!("\n[vibesys: {dropped} bytes of output omitted]\n").as_bytes(),
        );
    }
    head.extend_from_slice(&tail);
    let _ = log.write_all(&head);
    head
}

/// The client's output as text without terminal colour sequences.
pub(crate) fn plain_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The last non-empty line of `text`, at most 300 characters.
pub(crate) fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("(no output)")
        .chars()
        .take(300)
        .collect()
}

/// The line of `text` containing `needle`, at most 300 characters.
pub(crate) fn line_with(text: &str, needle: &str) -> Option<String> {
    text.lines()
        .find(|l| l.contains(needle))
        .map(|l| l.trim().chars().take(300).collect())
}

/// The client's environment: the host's own (the client runs on the host
/// and needs its credentials), with the venv's `bin` first on `PATH`, no
/// colours and no interactive prompts.
pub(crate) fn client_env(clients: &Clients) -> Vec<(OsString, OsString)> {
    let bin = clients.venv().join("bin");
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| k != OsStr::new("PATH"))
        .collect();
    let path = match std::env::var_os("PATH") {
        Some(p) => {
            let mut v = bin.into_os_string();
            v.push(":");
            v.push(p);
            v
        }
        None => {
            let mut v = bin.into_os_string();
            v.push(":/usr/local/bin:/usr/bin:/bin");
            v
        }
    };
    env.push(("PATH".into(), path));
    env.push(("NO_COLOR".into(), "1".into()));
    env.push(("PYTHONUNBUFFERED".into(), "1".into()));
    env
}
