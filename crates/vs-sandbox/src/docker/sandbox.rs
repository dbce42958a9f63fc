//! `DockerSandbox`: one workspace container per run, driven through the
//! Engine API.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bollard::container::LogOutput;
use bollard::exec::{StartExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, ExecConfig, HostConfig, Mount, MountType};
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use futures_util::StreamExt;
use tokio::io::AsyncWriteExt;

use crate::confinement::{Confinement, EnforcementReport};
use crate::error::SandboxError;
use crate::policy::ResolvedPolicy;
use crate::runner::{
    CommandResult, CommandRunner, CommandSpec, DEFAULT_OUTPUT_CAP, HeadTail, RunnerError,
};

use super::DockerError;
use super::channel::{Channel, Output, READY_TIMEOUT, Writer};
use super::engine::{Engine, engine_err, is_not_found};
use super::plan::{
    DockerOptions, DockerPlan, MountRole, RUN_ID_LABEL, docker_report, valid_run_id,
};
use super::procs;

/// How long output is still read after the command's own process exited
/// (a descendant may hold the stream open).
const DRAIN_GRACE: Duration = Duration::from_millis(500);

/// The attached stdin of the container's main process. While vibesys
/// holds it, the container runs; when vibesys exits or dies, the Engine
/// closes the container's stdin, the main process ends and the Engine
/// removes the container (`AutoRemove`).
struct Lifeline {
    input: Writer,
    output: Output,
}

/// What holds the container alive: the bare lifeline, or the command
/// server's channel over that same connection.
enum Link {
    /// Only held: dropping it closes the container's stdin.
    #[allow(dead_code)]
    Lifeline(Lifeline),
    Server(Arc<Channel>),
}

/// Agent confinement and command runner in a Docker container.
///
/// One container per run, from the pinned image referred to by ID, with
/// the workspace at its host path, read-only paths re-mounted read-only
/// and hidden paths masked by empty read-only operator-owned directories
/// or files; all capabilities dropped, no-new-privileges, no devices, no
/// network unless asked, the host user's uid:gid, pids and memory limits.
///
/// Lifetime: the container's main process waits on stdin, which this
/// value holds through an attach connection. Dropping the sandbox removes
/// the container at once; if vibesys dies (even by `SIGKILL`), the kernel
/// closes the connection, the Engine closes the container's stdin
/// (`StdinOnce`), the main process exits and the Engine removes the
/// container (`AutoRemove`). A start with the same run id also removes any
/// container still labelled with it.
pub struct DockerSandbox {
    /// Taken (and so closed) by `stop`.
    link: Mutex<Option<Link>>,
    engine: Engine,
    plan: DockerPlan,
    options: DockerOptions,
    container_id: String,
    init_pid: i32,
    lifeline_pid: i32,
    report: EnforcementReport,
    output_cap: usize,
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("container_id", &self.container_id)
            .field("plan", &self.plan)
            .finish()
    }
}

impl DockerSandbox {
    /// Checks the pinned image, removes containers a dead run with the
    /// same id left, creates the masks and starts the run's container.
    pub fn start(policy: &ResolvedPolicy, options: &DockerOptions) -> Result<Self, SandboxError> {
        if !valid_run_id(&options.run_id) {
            return Err(DockerError::InvalidRunId {
                value: options.run_id.chars().take(80).collect(),
            }
            .into());
        }
        if let Some(server) = &options.command_server {
            super::static_elf::check_static_executable(server).map_err(|e| {
                DockerError::CommandServer {
                    path: server.clone(),
                    reason: e.to_string(),
                }
            })?;
        }
        // The Engine resolves a device path itself (following symlinks):
        // each must be the character device it names.
        for dev in &options.devices.nodes {
            crate::config::check_device_node(dev).map_err(|reason| SandboxError::Device {
                path: dev.clone(),
                reason,
            })?;
        }
        let engine = Engine::connect()?;
        let mut plan = DockerPlan::new(policy, options);
        let report = docker_report(policy, options);
        let id = engine.check_pinned(&options.image)?;
        plan.image = id;
        engine.block_on(remove_run_containers(engine.docker(), &options.run_id))?;
        prepare_masks(&options.mask_root, &plan)?;
        engine.block_on(remove_orphan_masks(engine.docker(), &options.mask_root));
        let expected = match super::verify::identify(policy, &plan) {
            Ok(e) => e,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&options.mask_root);
                return Err(e);
            }
        };
        let started = engine.block_on(start_container(engine.docker(), &plan));
        let (container_id, lifeline) = match started {
            Ok(v) => v,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&options.mask_root);
                return Err(e);
            }
        };
        let (link, ready) = if options.command_server.is_some() {
            let (ch, ready) = Channel::open(
                |f| engine.spawn(f),
                lifeline.input,
                lifeline.output,
                DEFAULT_OUTPUT_CAP,
            );
            (Link::Server(Arc::new(ch)), Some(ready))
        } else {
            (Link::Lifeline(lifeline), None)
        };
        let mut sandbox = Self {
            link: Mutex::new(Some(link)),
            engine,
            plan,
            options: options.clone(),
            container_id,
            init_pid: 0,
            lifeline_pid: 0,
            report,
            output_cap: DEFAULT_OUTPUT_CAP,
        };
        // Before anything of the agent runs: every bind is where it was
        // planned and is what was checked. Dropping `sandbox` on error
        // removes the container.
        let inspect = sandbox
            .engine
            .block_on(sandbox.engine.docker().inspect_container(
                &sandbox.container_id,
                None::<bollard::query_parameters::InspectContainerOptions>,
            ))
            .map_err(|e| engine_err("inspect container", e))?;
        let pid = inspect.state.and_then(|s| s.pid).unwrap_or(0);
        if pid <= 0 {
            return Err(DockerError::Engine {
                operation: "start container",
                message: "the container exited at start (no process to check its mounts in)".into(),
            }
            .into());
        }
        super::verify::verify(&expected, pid)?;
        sandbox.init_pid = i32::try_from(pid).unwrap_or(0);
        if let Some(ready) = ready {
            let answered = sandbox
                .engine
                .block_on(async { tokio::time::timeout(READY_TIMEOUT, ready).await });
            if !matches!(answered, Ok(Ok(_))) {
                let why = match (answered, sandbox.channel()) {
                    (Err(_), _) => format!("no answer within {} s", READY_TIMEOUT.as_secs()),
                    (_, Some(ch)) => ch.why_closed(),
                    (_, None) => "the connection ended".into(),
                };
                return Err(DockerError::CommandServer {
                    path: options.command_server.clone().unwrap_or_default(),
                    reason: format!("it did not start in the container: {why}"),
                }
                .into());
            }
            // The server kills its own trees: no host pids are needed.
            return Ok(sandbox);
        }
        // The exec API path kills trees by host pid (see `procs`).
        let deadline = Instant::now() + Duration::from_secs(2);
        while sandbox.lifeline_pid == 0 && Instant::now() < deadline && sandbox.init_pid > 0 {
            sandbox.lifeline_pid = procs::lifeline_child(sandbox.init_pid);
            if sandbox.lifeline_pid == 0 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        Ok(sandbox)
    }

    /// Sets how many bytes of each output stream `execute` keeps.
    #[must_use]
    pub fn with_output_cap(mut self, bytes_per_stream: usize) -> Self {
        self.output_cap = bytes_per_stream;
        if let Some(ch) = self.channel() {
            ch.set_output_cap(bytes_per_stream);
        }
        self
    }

    fn channel(&self) -> Option<Arc<Channel>> {
        match &*self.link.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(Link::Server(ch)) => Some(ch.clone()),
            _ => None,
        }
    }

    /// How `execute` reaches the container: `"command-server"` or
    /// `"engine-exec"`.
    pub fn execute_via(&self) -> &str {
        &self.plan.execute_via
    }

    /// The container's ID.
    pub fn container_id(&self) -> &str {
        &self.container_id
    }

    /// The plan the container was created from.
    pub fn plan(&self) -> &DockerPlan {
        &self.plan
    }

    /// The Engine connection.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Runs one command in the container (the framework's own commands):
    /// same bounded result, timeout and cancellation as the host runner.
    pub fn execute(&self, command: &CommandSpec) -> Result<CommandResult, SandboxError> {
        Ok(self.run(command)?)
    }

    /// Runs `argv` in the container attached to this process's stdin,
    /// stdout and stderr (with a TTY when both stdin and stdout are
    /// terminals) and returns its exit status.
    pub fn attach(&self, argv: &[OsString], workdir: &Path) -> Result<i32, SandboxError> {
        let env = self.options.env.pick_from_process();
        let request = super::attach::AttachRequest {
            container: self.container_id.clone(),
            user: self.plan.user.clone(),
            workdir: workdir.to_path_buf(),
            env,
            argv: to_strings(argv).map_err(SandboxError::from)?,
        };
        super::attach::attach_with(&self.engine, &request)
    }

    /// Stops and removes the container and its masks now.
    pub fn stop(&self) {
        let docker = self.engine.docker();
        let _ = self.engine.block_on(docker.remove_container(
            &self.container_id,
            Some(RemoveContainerOptionsBuilder::new().force(true).build()),
        ));
        self.link
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let _ = std::fs::remove_dir_all(&self.options.mask_root);
    }
}

impl Drop for DockerSandbox {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Confinement for DockerSandbox {
    fn backend(&self) -> &'static str {
        "docker"
    }

    fn wrap(&self, argv: &[OsString]) -> Result<Vec<OsString>, SandboxError> {
        if argv.is_empty() {
            return Err(SandboxError::InvalidCommand("the command is empty".into()));
        }
        let mut out: Vec<OsString> = vec![
            self.options.helper.clone().into_os_string(),
            "internal-docker-attach".into(),
            "--container".into(),
            self.container_id.clone().into(),
            "--user".into(),
            self.plan.user.clone().into(),
            "--workdir".into(),
            self.plan.workdir.clone().into_os_string(),
        ];
        for name in self.options.env.names() {
            out.push("--env".into());
            out.push(name.into());
        }
        out.push("--".into());
        out.extend(argv.iter().cloned());
        Ok(out)
    }

    fn agent_path(&self, host: &Path) -> PathBuf {
        // The workspace is mounted at its host path.
        host.to_path_buf()
    }

    fn report(&self) -> &EnforcementReport {
        &self.report
    }
}

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

fn to_strings(argv: &[OsString]) -> Result<Vec<String>, RunnerError> {
    if argv.is_empty() {
        return Err(RunnerError::EmptyCommand);
    }
    argv.iter()
        .map(|a| {
            let s = a.to_str().ok_or_else(|| RunnerError::NulByte {
                what: "argument (not UTF-8, which the Engine API cannot carry)",
                value: a.to_string_lossy().into_owned(),
            })?;
            if s.contains('\0') {
                return Err(RunnerError::NulByte {
                    what: "argument",
                    value: s.to_owned(),
                });
            }
            Ok(s.to_owned())
        })
        .collect()
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
        let exec = docker
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
            .await
            .map_err(|e| runner_engine("docker exec create", e))?;
        let started_exec = docker
            .start_exec(
                &exec.id,
                Some(StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(64 * 1024),
                }),
            )
            .await
            .map_err(|e| runner_engine("docker exec start", e))?;
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
            let info = docker
                .inspect_exec(&exec.id)
                .await
                .map_err(|e| runner_engine("docker exec inspect", e))?;
            let pid = info.pid.and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
            let (init, lifeline) = (self.init_pid, self.lifeline_pid);
            procs::kill_tree(pid, init, lifeline);
            (128 + libc::SIGKILL, Some(libc::SIGKILL))
        } else {
            let mut info = docker
                .inspect_exec(&exec.id)
                .await
                .map_err(|e| runner_engine("docker exec inspect", e))?;
            // The stream can end a moment before the Engine records the exit.
            let until = Instant::now() + Duration::from_secs(5);
            while info.running == Some(true) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(5)).await;
                info = docker
                    .inspect_exec(&exec.id)
                    .await
                    .map_err(|e| runner_engine("docker exec inspect", e))?;
            }
            let code = info
                .exit_code
                .and_then(|c| i32::try_from(c).ok())
                .unwrap_or(-1);
            // Docker reports a signal death as 128+N, like the shell.
            let signal = (129..=159).contains(&code).then_some(code - 128);
            (code, signal)
        };
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

/// Every container (running or not) carrying `label` (`key` or `key=value`).
async fn labelled_containers(
    docker: &bollard::Docker,
    label: String,
) -> Result<Vec<bollard::models::ContainerSummary>, bollard::errors::Error> {
    let filters: HashMap<String, Vec<String>> = HashMap::from([("label".into(), vec![label])]);
    docker
        .list_containers(Some(
            ListContainersOptionsBuilder::new()
                .all(true)
                .filters(&filters)
                .build(),
        ))
        .await
}

async fn remove_run_containers(docker: &bollard::Docker, run_id: &str) -> Result<(), SandboxError> {
    let list = labelled_containers(docker, format!("{RUN_ID_LABEL}={run_id}"))
        .await
        .map_err(|e| engine_err("list containers", e))?;
    for c in list {
        let Some(id) = c.id else { continue };
        tracing::warn!(container = %id, run_id, "removing a container left by a dead run with the same id");
        match docker
            .remove_container(
                &id,
                Some(RemoveContainerOptionsBuilder::new().force(true).build()),
            )
            .await
        {
            Ok(()) => {}
            Err(e) if is_not_found(&e) => {}
            // Already being removed (AutoRemove in progress).
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => {}
            Err(e) => return Err(engine_err("remove container", e)),
        }
    }
    // The name may still be taken for a moment while AutoRemove finishes.
    Ok(())
}

/// Removes mask directories of runs that have no container any more (a
/// run killed with `SIGKILL` cannot remove its own). Only directories
/// older than a minute are considered, so a run that is starting right
/// now keeps its masks.
async fn remove_orphan_masks(docker: &bollard::Docker, own: &Path) {
    let Some(base) = own.parent() else { return };
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    let Ok(list) = labelled_containers(docker, RUN_ID_LABEL.to_owned()).await else {
        return;
    };
    let live: Vec<String> = list
        .into_iter()
        .filter_map(|c| c.labels.and_then(|mut l| l.remove(RUN_ID_LABEL)))
        .collect();
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let old = entry
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(60));
        if path != own && old && valid_run_id(&name) && !live.contains(&name) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// Creates the mask directories and files: the base directory (mode
/// 0700, must be ours), the run's directory inside it, and one empty
/// entry per hidden path (0555 directories, 0444 files).
fn prepare_masks(root: &Path, plan: &DockerPlan) -> Result<(), SandboxError> {
    let mask_err = |path: &Path, source: io::Error| -> SandboxError {
        DockerError::Mask {
            path: path.to_path_buf(),
            source,
        }
        .into()
    };
    let base = root.parent().unwrap_or(root);
    match std::fs::create_dir(base) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            std::fs::create_dir_all(base).map_err(|_| mask_err(base, e))?;
        }
    }
    let meta = std::fs::symlink_metadata(base).map_err(|e| mask_err(base, e))?;
    let me = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    if !meta.is_dir() || meta.uid() != me {
        return Err(mask_err(
            base,
            io::Error::other("not a directory owned by the current user"),
        ));
    }
    std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| mask_err(base, e))?;
    if root.exists() {
        make_removable(root);
        std::fs::remove_dir_all(root).map_err(|e| mask_err(root, e))?;
    }
    std::fs::create_dir(root).map_err(|e| mask_err(root, e))?;
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| mask_err(root, e))?;
    for m in &plan.mounts {
        match m.role {
            MountRole::MaskDir => {
                std::fs::create_dir(&m.source).map_err(|e| mask_err(&m.source, e))?;
                std::fs::set_permissions(&m.source, std::fs::Permissions::from_mode(0o555))
                    .map_err(|e| mask_err(&m.source, e))?;
            }
            MountRole::MaskFile => {
                std::fs::File::create(&m.source).map_err(|e| mask_err(&m.source, e))?;
                std::fs::set_permissions(&m.source, std::fs::Permissions::from_mode(0o444))
                    .map_err(|e| mask_err(&m.source, e))?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn make_removable(root: &Path) {
    let _ = std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700));
}

/// The plan's device nodes as the Engine's `HostConfig.Devices`.
fn device_mappings(plan: &DockerPlan) -> Vec<bollard::models::DeviceMapping> {
    plan.devices
        .iter()
        .map(|d| bollard::models::DeviceMapping {
            path_on_host: Some(d.path_on_host.to_string_lossy().into_owned()),
            path_in_container: Some(d.path_in_container.to_string_lossy().into_owned()),
            cgroup_permissions: Some(d.cgroup_permissions.clone()),
        })
        .collect()
}

/// The plan's GPU requests as the Engine's `HostConfig.DeviceRequests`.
fn device_requests(plan: &DockerPlan) -> Vec<bollard::models::DeviceRequest> {
    plan.device_requests
        .iter()
        .map(|r| bollard::models::DeviceRequest {
            driver: Some(r.driver.clone()),
            count: Some(r.count),
            device_ids: (!r.device_ids.is_empty()).then(|| r.device_ids.clone()),
            capabilities: Some(r.capabilities.clone()),
            options: None,
        })
        .collect()
}

async fn start_container(
    docker: &bollard::Docker,
    plan: &DockerPlan,
) -> Result<(String, Lifeline), SandboxError> {
    let mounts = plan
        .mounts
        .iter()
        .map(|m| Mount {
            target: Some(m.target.to_string_lossy().into_owned()),
            source: Some(m.source.to_string_lossy().into_owned()),
            typ: Some(MountType::BIND),
            read_only: Some(m.read_only),
            ..Default::default()
        })
        .collect();
    let serving = plan.execute_via == "command-server";
    let host = HostConfig {
        // The server's replies go only to vibesys, never to a log file.
        log_config: serving.then(|| bollard::models::HostConfigLogConfig {
            typ: Some("none".into()),
            config: None,
        }),
        mounts: Some(mounts),
        cap_drop: Some(plan.cap_drop.clone()),
        security_opt: Some(plan.security_opt.clone()),
        network_mode: Some(plan.network_mode.clone()),
        devices: Some(device_mappings(plan)),
        device_requests: Some(device_requests(plan)),
        pids_limit: Some(plan.pids_limit),
        memory: Some(plan.memory_bytes),
        memory_swap: Some(plan.memory_bytes),
        init: Some(plan.init),
        auto_remove: Some(true),
        privileged: Some(false),
        ..Default::default()
    };
    let body = ContainerCreateBody {
        image: Some(plan.image.clone()),
        user: Some(plan.user.clone()),
        cmd: Some(plan.lifeline.clone()),
        entrypoint: Some(Vec::new()),
        working_dir: Some(plan.workdir.to_string_lossy().into_owned()),
        labels: Some(plan.labels.clone().into_iter().collect()),
        open_stdin: Some(true),
        stdin_once: Some(true),
        attach_stdin: Some(true),
        attach_stdout: Some(serving),
        attach_stderr: Some(serving),
        tty: Some(false),
        env: Some(Vec::new()),
        host_config: Some(host),
        ..Default::default()
    };
    // A container of a dead run may still be going away under AutoRemove.
    let mut tries = 0;
    let created = loop {
        match docker
            .create_container(
                Some(
                    CreateContainerOptionsBuilder::new()
                        .name(&plan.name)
                        .build(),
                ),
                body.clone(),
            )
            .await
        {
            Ok(c) => break c,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) if tries < 50 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(engine_err("create container", e)),
        }
    };
    let id = created.id;
    let attached = docker
        .attach_container(
            &id,
            Some(
                AttachContainerOptionsBuilder::new()
                    .stream(true)
                    .stdin(true)
                    .stdout(serving)
                    .stderr(serving)
                    .build(),
            ),
        )
        .await;
    let attached = match attached {
        Ok(a) => a,
        Err(e) => {
            let _ = docker
                .remove_container(
                    &id,
                    Some(RemoveContainerOptionsBuilder::new().force(true).build()),
                )
                .await;
            return Err(engine_err("attach container", e));
        }
    };
    if let Err(e) = docker
        .start_container(
            &id,
            None::<bollard::query_parameters::StartContainerOptions>,
        )
        .await
    {
        let _ = docker
            .remove_container(
                &id,
                Some(RemoveContainerOptionsBuilder::new().force(true).build()),
            )
            .await;
        return Err(engine_err("start container", e));
    }
    Ok((
        id,
        Lifeline {
            input: attached.input,
            output: attached.output,
        },
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::docker::{DeviceAccess, GpuSelection, ImagePin};
    use crate::{ProjectPathPolicy, Workspace};

    /// The exact Engine fields a plan's devices become.
    #[test]
    fn devices_lower_to_the_engine_host_config() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let policy = ProjectPathPolicy::empty().resolve(&ws).unwrap();
        let pin = ImagePin {
            name: "vibesys-editor".into(),
            tag: "latest".into(),
            config_digest: format!("sha256:{}", "a".repeat(64)).parse().unwrap(),
            manifest_digest: None,
            diff_ids: vec![],
        };
        let mut opts = DockerOptions::new(pin, "r1", "/usr/bin/vibesys");
        let plan = DockerPlan::new(&policy, &opts);
        assert!(device_mappings(&plan).is_empty() && device_requests(&plan).is_empty());
        opts.devices = DeviceAccess {
            nvidia: Some(GpuSelection::Ids(vec!["0".into(), "2".into()])),
            nodes: vec!["/dev/kfd".into()],
        };
        let plan = DockerPlan::new(&policy, &opts);
        assert_eq!(
            device_mappings(&plan),
            [bollard::models::DeviceMapping {
                path_on_host: Some("/dev/kfd".into()),
                path_in_container: Some("/dev/kfd".into()),
                cgroup_permissions: Some("rw".into()),
            }]
        );
        assert_eq!(
            device_requests(&plan),
            [bollard::models::DeviceRequest {
                driver: Some("nvidia".into()),
                count: Some(0),
                device_ids: Some(vec!["0".into(), "2".into()]),
                capabilities: Some(vec![vec!["gpu".into()]]),
                options: None,
            }]
        );
        opts.devices.nvidia = Some(GpuSelection::All);
        let all = device_requests(&DockerPlan::new(&policy, &opts));
        assert_eq!(all[0].count, Some(-1));
        assert_eq!(all[0].device_ids, None);
    }
}
