//! `DockerSandbox`: one workspace container per run, driven through the
//! Engine API. This module holds the value and its start; the container's
//! creation and clean-up are in [`crate::lifecycle`], the framework's
//! commands (`execute`, the [`CommandRunner`] side) in [`crate::execute`].

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bollard::query_parameters::RemoveContainerOptionsBuilder;

use vs_sandbox::confinement::{Confinement, EnforcementReport};
use vs_sandbox::error::SandboxError;
use vs_sandbox::policy::ResolvedPolicy;
use vs_sandbox::runner::{CommandResult, CommandRunner, CommandSpec, DEFAULT_OUTPUT_CAP};

use crate::argv::to_strings;
use crate::channel::{Channel, READY_TIMEOUT};
use crate::engine::{Engine, engine_err, is_not_found};
use crate::lifecycle::{
    ExitWatch, Lifeline, container_ended, prepare_masks, remove_orphan_masks,
    remove_run_containers, start_container,
};
use crate::plan::{DockerOptions, DockerPlan, PlannedContainer, valid_run_id};
use crate::procs;
use crate::{DockerError, EndPhase};

/// What holds the container alive: the bare lifeline, or the command
/// server's channel over that same connection.
pub(super) enum Link {
    /// Held (dropping it closes the container's stdin); its output is read
    /// only to say why the container died.
    Lifeline(Lifeline),
    Server(Arc<Channel>),
}

/// Agent confinement and command runner in a Docker container.
///
/// One container per run, from the pinned image referred to by ID, with
/// the workspace at its host path, read-only paths re-mounted read-only
/// and hidden paths masked by empty read-only operator-owned directories
/// or files; all capabilities dropped, no-new-privileges, no devices but
/// the accelerators asked for, the bridge network unless `network` is
/// false (then none), the host user's uid:gid, pids and memory limits.
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
    pub(super) link: Mutex<Option<Link>>,
    /// The main process's exit code once it ends (see
    /// [`DockerSandbox::exited`]).
    pub(super) exit: Mutex<Option<ExitWatch>>,
    pub(super) engine: Engine,
    pub(super) plan: DockerPlan,
    pub(super) options: DockerOptions,
    pub(super) container_id: String,
    pub(super) init_pid: i32,
    pub(super) lifeline_pid: i32,
    pub(super) report: EnforcementReport,
    pub(super) output_cap: usize,
}

impl std::fmt::Debug for DockerSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DockerSandbox")
            .field("container_id", &self.container_id)
            .field("plan", &self.plan)
            .finish()
    }
}

/// How long a failed exec waits for the container's death to show.
const DEATH_WAIT: Duration = Duration::from_secs(1);

impl DockerSandbox {
    /// Checks the pinned image, removes containers a dead run with the
    /// same id left, creates the masks and starts the run's container.
    pub fn start(policy: &ResolvedPolicy, options: &DockerOptions) -> Result<Self, SandboxError> {
        Self::start_planned(policy, PlannedContainer::new(policy, options.clone()))
    }

    /// [`DockerSandbox::start`] from the plan `vs_sandbox::select` made
    /// (lowered once, for its report and for the container).
    pub(crate) fn start_planned(
        policy: &ResolvedPolicy,
        planned: PlannedContainer,
    ) -> Result<Self, SandboxError> {
        let PlannedContainer {
            options,
            mut plan,
            report,
        } = planned;
        if !valid_run_id(&options.run_id) {
            return Err(DockerError::InvalidRunId {
                value: options.run_id.chars().take(80).collect(),
            }
            .into());
        }
        if let Some(server) = &options.command_server {
            crate::static_elf::check_static_executable(server).map_err(|e| {
                DockerError::CommandServer {
                    path: server.clone(),
                    reason: e.to_string(),
                }
            })?;
        }
        // The Engine resolves a device path itself (following symlinks):
        // each must be the character device it names.
        for dev in &options.devices.nodes {
            vs_sandbox::config::check_device_node(dev).map_err(|reason| SandboxError::Device {
                path: dev.clone(),
                reason,
            })?;
        }
        let engine = Engine::connect()?;
        let id = engine.check_pinned(&options.image)?;
        plan.image = id;
        engine.block_on(remove_run_containers(engine.docker(), &options.run_id))?;
        prepare_masks(&options.mask_root, &plan)?;
        engine.block_on(remove_orphan_masks(engine.docker(), &options.mask_root));
        let expected = match crate::verify::identify(policy, &plan) {
            Ok(e) => e,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&options.mask_root);
                return Err(e);
            }
        };
        let started = engine.block_on(start_container(engine.docker(), &plan));
        let (container_id, lifeline, exit) = match started {
            Ok(v) => v,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&options.mask_root);
                return Err(e);
            }
        };
        // Before anything of the agent runs, the main process must be
        // there to check the mounts in; one that ended at start is named
        // with its exit code and output, not a later "no such container".
        let inspect = engine.block_on(engine.docker().inspect_container(
            &container_id,
            None::<bollard::query_parameters::InspectContainerOptions>,
        ));
        let pid = match inspect {
            Ok(i) => i.state.and_then(|s| s.pid).unwrap_or(0),
            Err(e) if is_not_found(&e) => 0,
            Err(e) => {
                exit.abort();
                let _ = std::fs::remove_dir_all(&options.mask_root);
                return Err(engine_err("inspect container", e));
            }
        };
        if pid <= 0 {
            let err = engine.block_on(container_ended(
                &container_id,
                EndPhase::Start,
                exit,
                Some(lifeline.output),
            ));
            let _ = engine.block_on(engine.docker().remove_container(
                &container_id,
                Some(RemoveContainerOptionsBuilder::new().force(true).build()),
            ));
            let _ = std::fs::remove_dir_all(&options.mask_root);
            return Err(err.into());
        }
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
            exit: Mutex::new(Some(exit)),
            engine,
            plan,
            options,
            container_id,
            init_pid: 0,
            lifeline_pid: 0,
            report,
            output_cap: DEFAULT_OUTPUT_CAP,
        };
        // Every bind is where it was planned and is what was checked.
        // Dropping `sandbox` on error removes the container.
        // A main process that ends during the check leaves no root to check
        // in: say that it ended (either way nothing was started).
        if let Err(e) = crate::verify::verify(&expected, pid) {
            return Err(sandbox.ended_or(e));
        }
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
                return Err(sandbox.ended_or(
                    DockerError::CommandServer {
                        path: sandbox.options.command_server.clone().unwrap_or_default(),
                        reason: format!("it did not start in the container: {why}"),
                    }
                    .into(),
                ));
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

    pub(super) fn channel(&self) -> Option<Arc<Channel>> {
        match &*self.link.lock().unwrap_or_else(PoisonError::into_inner) {
            Some(Link::Server(ch)) => Some(ch.clone()),
            _ => None,
        }
    }

    /// How `execute` reaches the container.
    pub fn execute_via(&self) -> super::plan::ExecuteVia {
        self.plan.execute_via
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
        let request = crate::attach::AttachRequest {
            container: self.container_id.clone(),
            user: self.plan.user.clone(),
            workdir: workdir.to_path_buf(),
            env,
            argv: to_strings(argv).map_err(SandboxError::from)?,
        };
        let result = crate::attach::attach_with(&self.engine, &request);
        let status = result.as_ref().ok().copied();
        if self.engine.block_on(self.ended_under_exec(status)) {
            return Err(self
                .engine
                .block_on(self.exited_async(EndPhase::Start))
                .into());
        }
        result
    }

    /// `err`, unless the container's main process has ended (or ends in a
    /// moment): then why it ended.
    fn ended_or(&self, err: SandboxError) -> SandboxError {
        if self.engine.block_on(self.dying()) {
            tracing::debug!("{err}");
            self.engine
                .block_on(self.exited_async(EndPhase::Start))
                .into()
        } else {
            err
        }
    }

    /// Whether an exec ended as one does when the container dies under
    /// it, and the container has indeed ended (or ends in a moment): then
    /// the caller says why it ended instead. `status` is `None` when the
    /// exec failed; 126 is the runtime unable to enter the dying container
    /// ("cannot exec in a stopped state", "read init-p: connection reset"),
    /// 137 the command killed with it. Other statuses return at once.
    pub(super) async fn ended_under_exec(&self, status: Option<i32>) -> bool {
        status.is_none_or(|code| matches!(code, 126 | 137)) && self.dying().await
    }

    /// After a failed exec: whether the container is no longer running, or
    /// its main process ends within a moment (the Engine reports an exec
    /// that the container's death killed before the container's state).
    pub(super) async fn dying(&self) -> bool {
        if self.not_running().await {
            return true;
        }
        let mut exit = self
            .exit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(watch) = exit.as_mut() else {
            return false;
        };
        match tokio::time::timeout(DEATH_WAIT, watch).await {
            // Ended (or its watch failed): keep the code for the error.
            Ok(code) => {
                let code = code.ok().flatten();
                *self.exit.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(tokio::spawn(async move { code }));
                true
            }
            Err(_) => {
                *self.exit.lock().unwrap_or_else(PoisonError::into_inner) = exit;
                false
            }
        }
    }

    /// True when the container's main process is no longer running (the
    /// Engine does not know the container, or it has exited).
    pub(super) async fn not_running(&self) -> bool {
        let inspect = self
            .engine
            .docker()
            .inspect_container(
                &self.container_id,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await;
        match inspect {
            Err(e) => is_not_found(&e),
            Ok(i) => i.state.and_then(|s| s.running) == Some(false),
        }
    }

    /// Why the container is gone (its main process ended): its exit code and
    /// the end of its output.
    pub(super) async fn exited_async(&self, phase: EndPhase) -> DockerError {
        let exit = self
            .exit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // The container is dead: its lifeline's output ends with what it
        // printed (the command server's channel reads its own).
        let output = {
            let mut link = self.link.lock().unwrap_or_else(PoisonError::into_inner);
            match link.take() {
                Some(Link::Lifeline(l)) => Some(l.output),
                other => {
                    *link = other;
                    None
                }
            }
        };
        match exit {
            Some(exit) => container_ended(&self.container_id, phase, exit, output).await,
            None => DockerError::ContainerEnded {
                container: self.container_id.clone(),
                phase,
                exit_code: None,
                output: String::new(),
            },
        }
    }

    /// Stops and removes the container and its masks now.
    pub fn stop(&self) {
        if let Some(exit) = self
            .exit
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            exit.abort();
        }
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

    /// [`Helper::DockerAttach`](vs_sandbox::helper::Helper::DockerAttach): the
    /// command in the run's container, attached to the helper's stdio.
    fn wrap(&self, argv: &[OsString]) -> Result<Vec<OsString>, SandboxError> {
        if argv.is_empty() {
            return Err(SandboxError::InvalidCommand("the command is empty".into()));
        }
        Ok(vs_sandbox::helper::Helper::DockerAttach {
            container: self.container_id.clone(),
            user: self.plan.user.clone(),
            workdir: self.plan.workdir.clone(),
            env: self.options.env.names().to_vec(),
            argv: argv.to_vec(),
        }
        .argv(&self.options.helper))
    }

    fn agent_path(&self, host: &Path) -> PathBuf {
        // The workspace is mounted at its host path.
        host.to_path_buf()
    }

    fn report(&self) -> &EnforcementReport {
        &self.report
    }
}
