//! The local side of `vibesys run`: where each candidate is placed (the
//! one match on the run environment: a container of the run's pinned
//! image with its Docker options, or host confinement) and the
//! [`RunHost`] callbacks built on it: the agent's confined turn, the
//! confinement of the trusted build, and the runner of `check` and
//! `measure`. The binary parses, builds a [`Placement`], and calls.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use vs_agent::{prepare_state_paths, session_env_allowlist};
use vs_docker::{DockerOptions, DockerSandbox, ImagePin};
use vs_sandbox::runner::CancellationToken;
use vs_sandbox::{
    CommandRunner, CommandSpec, ConfineMode, Confinement, Enforcement, LocalShellRunner, Workspace,
    select,
};

use crate::broker::child::{self as broker_child, BrokerChild, BrokerStart};
use crate::build_confine::{
    BuildConfinement, EvalConfineRequest, build_confinement, evaluation_confinement,
    evaluation_container, protected_paths,
};
use crate::container::ImageLock;
use crate::environment::RunEnvironment;
use crate::run::accelerator::AcceleratorPlan;
use crate::run::{AgentOutcome, CandidateContext, EvalPlace, Evaluator, HostError, RunRecord};
use crate::settings::ProjectSettings;
use crate::state::StateLayout;
use crate::task::EvalCommand;
/// The agent's command in the container, run as `sh -c LAUNCH_SCRIPT
/// PROGRAM ARGS...` in the same `docker exec` that runs the agent (no probe
/// of its own): a `PROGRAM` that is no executable file, by path or on the
/// container's `PATH`, exits 127 with [`MISSING_PROGRAM`] on stderr, so
/// that the error names it. The search is by hand: a shell's `command -v`
/// also answers for builtins and, in busybox, for applets that have no
/// file to execute.
const LAUNCH_SCRIPT: &str = r#"case "$0" in
*/*) [ -f "$0" ] && [ -x "$0" ] || { echo "vibesys-missing-program" >&2; exit 127; } ;;
*) found=; IFS=:; for d in $PATH; do [ -f "$d/$0" ] && [ -x "$d/$0" ] && { found=1; break; }; done; unset IFS
   [ -n "$found" ] || { echo "vibesys-missing-program" >&2; exit 127; } ;;
esac
exec "$0" "$@""#;

/// What [`LAUNCH_SCRIPT`] prints when the agent's program is missing. The
/// agent could print it too, and so fail only its own candidate.
const MISSING_PROGRAM: &[u8] = b"vibesys-missing-program\n";

/// Most bytes of each of the agent's output streams kept in its log.
const AGENT_LOG_CAP: usize = 256 * 1024;

/// A refusal of the local host, naming its cause (and what caused it).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct HostFailure {
    message: String,
    #[source]
    source: Option<HostError>,
}

fn refuse(message: impl Into<String>) -> HostError {
    Box::new(HostFailure {
        message: message.into(),
        source: None,
    })
}

/// The whole chain of `e` in one message (`outer: inner: ...`), as the
/// run's records keep it.
fn flat(e: HostError) -> HostError {
    crate::error_chain::one_line(&*e).into()
}

/// Where a run's candidates are placed: the one decision per run
/// environment.
#[derive(Debug)]
pub enum Placement {
    /// docker, modal, skypilot, slurm: a container of the run's image
    /// (pinned once per run) with its command server.
    Container {
        /// The run's image.
        pin: ImagePin,
        /// The static vibesys serving framework commands in it
        /// ([`crate::container::command_server`]).
        command_server: Option<PathBuf>,
    },
    /// host: the confinement mechanism.
    Host(ConfineMode),
}

/// What [`Placement::for_run`] is given.
#[derive(Debug)]
pub struct PlacementRequest<'a> {
    /// The run environment.
    pub environment: RunEnvironment,
    /// The image reference (`--image`, a recorded pinned ID on resume;
    /// default `VIBESYS_DOCKER_IMAGE`, else the editor image).
    pub image: Option<&'a str>,
    /// host: the mechanism, resolved by the caller.
    pub host_mode: Option<ConfineMode>,
    /// The project (where `images.lock` is looked for).
    pub project: &'a Path,
    /// The vibesys executable (its static twin serves the container).
    pub helper: &'a Path,
    /// Whether the pinned image must be loaded in the Engine now.
    pub check_loaded: bool,
}

impl Placement {
    /// Places a run: for a container environment, the image pinned from
    /// the lock (located and loaded here, once), loaded in the Engine when
    /// `check_loaded`; slurm needs a static vibesys in it. For host, the
    /// mode given.
    pub fn for_run(request: PlacementRequest<'_>) -> Result<Self, HostError> {
        match request.environment {
            RunEnvironment::Docker
            | RunEnvironment::Modal
            | RunEnvironment::Skypilot
            | RunEnvironment::Slurm => {
                let lock = ImageLock::find(Some(request.project))?;
                let pin = lock.pin_chosen(request.image)?;
                let command_server = crate::container::command_server(request.helper)?;
                if request.check_loaded {
                    vs_docker::Engine::connect()?.check_pinned(&pin)?;
                }
                if request.environment == RunEnvironment::Slurm && command_server.is_none() {
                    return Err(refuse(broker_child::NO_STATIC_VIBESYS));
                }
                Ok(Self::Container {
                    pin,
                    command_server,
                })
            }
            RunEnvironment::Host => request
                .host_mode
                .map(Self::Host)
                .ok_or_else(|| refuse("no host confinement mechanism")),
        }
    }

    /// The pinned image, for a container.
    pub fn image(&self) -> Option<&ImagePin> {
        match self {
            Self::Container { pin, .. } => Some(pin),
            Self::Host(_) => None,
        }
    }
}

/// The run environment's side of a run, on this machine.
pub struct LocalHost {
    project: PathBuf,
    environment: RunEnvironment,
    placement: Placement,
    /// The operator's `[sandbox]`, loaded once per run.
    config: vs_sandbox::config::PolicyConfig,
    helper: PathBuf,
    host_env: Vec<(OsString, OsString)>,
    provider: agentshim::Provider,
    launch: agentshim::Launch,
    protected: Vec<PathBuf>,
    /// The accelerators recorded in `run.json`, applied to every agent turn.
    accelerators: AcceleratorPlan,
    /// `run start --allow-host`, from `run.json`.
    allow_hosts: Vec<String>,
    /// slurm: the run's broker (stopped, its jobs cancelled, when the run
    /// ends).
    broker: Option<BrokerChild>,
}

impl LocalHost {
    /// The host of the run `record` of `layout`'s project, placed by
    /// `placement`; `helper` is the vibesys executable, `host_env` the
    /// caller's environment. slurm: starts the run's broker (`vibesys
    /// broker serve --run ID`, one agent socket per candidate, each bound
    /// to its worktree).
    pub fn new(
        layout: &StateLayout,
        record: &RunRecord,
        placement: Placement,
        helper: PathBuf,
        host_env: Vec<(OsString, OsString)>,
    ) -> Result<Self, HostError> {
        let (provider, launch) = launch_of(record)?;
        let config = vs_sandbox::config::PolicyConfig::load(layout.project())?;
        let broker = if record.environment == RunEnvironment::Slurm {
            if let crate::environment::Availability::NotAvailable { reason } =
                RunEnvironment::Slurm.describe().availability
            {
                return Err(refuse(format!(
                    "the slurm run environment is not available here: {reason}"
                )));
            }
            Some(BrokerChild::start(BrokerStart {
                helper: &helper,
                project: layout.project(),
                run: record.run_id.as_str(),
                agent_gpu: false,
                candidates: record.candidates,
                checkout: None,
                allow_hosts: &record.allow_hosts,
                no_network: false,
            })?)
        } else {
            None
        };
        Ok(Self {
            project: layout.project().to_path_buf(),
            environment: record.environment,
            placement,
            config,
            helper,
            host_env,
            provider,
            launch,
            protected: record.task.protected.iter().map(PathBuf::from).collect(),
            accelerators: record.accelerators.clone(),
            allow_hosts: record.allow_hosts.clone(),
            broker,
        })
    }

    fn broker(&self) -> Result<&BrokerChild, HostError> {
        self.broker
            .as_ref()
            .ok_or_else(|| refuse("the slurm run environment's broker is not running"))
    }

    /// The candidate's agent settings ([`ProjectSettings::for_candidate`]),
    /// the provider's API host admitted by an allow-list.
    fn settings(&self, worktree: &Path) -> Result<ProjectSettings, HostError> {
        let mut settings = ProjectSettings::for_candidate(
            Workspace::open(worktree)?,
            self.config.clone(),
            &self.protected,
            &self.allow_hosts,
        )?;
        if let Some(host) = self.provider.api_host(|v| std::env::var_os(v))? {
            settings.add_provider_host(&host)?;
        }
        Ok(settings)
    }

    /// The options of a container of the run's image, named `container`.
    fn docker_options(&self, container: String) -> Result<DockerOptions, HostError> {
        let Placement::Container {
            pin,
            command_server,
        } = &self.placement
        else {
            return Err(refuse("no container image for this run environment"));
        };
        let mut options = DockerOptions::new(pin.clone(), container, &self.helper);
        options.command_server = command_server.clone();
        Ok(options)
    }

    /// The agent's environment: the session allow-list, the provider's
    /// launch variables, and where it stands (`VIBESYS_OBJECTIVE`,
    /// `VIBESYS_RUN_ID`, `VIBESYS_CANDIDATE`).
    fn agent_env(&self, c: &CandidateContext<'_>) -> Result<Vec<(OsString, OsString)>, HostError> {
        let env = session_env_allowlist(std::env::vars_os(), &self.provider, &[])?;
        let mut vars = env.vars;
        for (k, v) in &self.launch.env {
            vars.push(((*k).into(), (*v).into()));
        }
        vars.push((
            "VIBESYS_OBJECTIVE".into(),
            c.objective.as_os_str().to_owned(),
        ));
        vars.push(("VIBESYS_RUN_ID".into(), c.run.run_id.as_str().into()));
        vars.push(("VIBESYS_CANDIDATE".into(), c.number.to_string().into()));
        Ok(vars)
    }

    fn program(&self) -> Result<OsString, HostError> {
        self.launch
            .argv
            .first()
            .cloned()
            .ok_or_else(|| refuse("the agent command is empty"))
    }

    /// Runs the agent's turn in the candidate's worktree, confined with
    /// enforcement required, where the run places it.
    pub fn agent_turn(
        &self,
        c: &CandidateContext<'_>,
        cancel: &CancellationToken,
    ) -> Result<AgentOutcome, HostError> {
        match &self.placement {
            Placement::Container { .. } => self.turn_in_docker(c, cancel),
            Placement::Host(mode) => self.turn_on_host(*mode, c, cancel),
        }
        .map_err(flat)
    }

    fn turn_in_docker(
        &self,
        c: &CandidateContext<'_>,
        cancel: &CancellationToken,
    ) -> Result<AgentOutcome, HostError> {
        let project = self.settings(c.worktree)?;
        let mut options = self.docker_options(format!("{}-{}", c.run.run_id, c.number))?;
        options.network = project.network;
        options.chdir = Some(c.worktree.to_path_buf());
        let mut vars = self.agent_env(c)?;
        if self.environment == RunEnvironment::Slurm {
            vars.push((
                broker_child::BROKER_SOCKET_ENV.into(),
                broker_child::AGENT_SOCKET_IN_CONTAINER.into(),
            ));
        }
        options.env = crate::container::agent_env_list(vars.iter().filter_map(|(k, _)| k.to_str()));
        // A host-only accelerator backend (Metal) cannot reach any
        // container: the start fails, naming why.
        if let Some(why) = self.accelerators.backend.container_refusal() {
            return Err(refuse(format!("cannot start the agent's container: {why}")));
        }
        // Only the docker environment runs agents beside the host's
        // accelerators (a remote environment's editor is a control plane).
        if self.environment == RunEnvironment::Docker {
            options.devices = docker_devices(&self.accelerators);
        }
        // slurm: the editor container with the candidate's own agent
        // socket (the framework socket stays on the host).
        if self.environment == RunEnvironment::Slurm {
            let socket = self.broker()?.candidate_socket(c.number).ok_or_else(|| {
                refuse(format!(
                    "the run's broker serves no socket for candidate {}",
                    c.number
                ))
            })?;
            broker_child::editor_options(&mut options, socket)?;
        }
        let program = self.program()?;
        let mut request = project.sandbox_request(
            &program,
            &self.host_env,
            Some(c.worktree),
            self.helper.clone(),
        );
        request.docker = Some(Box::new(options.clone()));
        // The allow-list's one door, for the turn (the container's
        // forwarder reaches it through its socket).
        let proxy = project.start_egress(ConfineMode::Docker)?;
        request.egress = project.egress_door(proxy.as_ref());
        let sandbox = select(request, ConfineMode::Docker, Enforcement::Required)?
            .ok_or_else(|| refuse("refusing to run the agent: no container was started"))?;
        let mut argv = vec![OsString::from("sh"), "-c".into(), LAUNCH_SCRIPT.into()];
        argv.extend(self.launch.argv.iter().cloned());
        let argv = sandbox.wrap(&argv)?;
        let result = run_turn(&argv, c.worktree, &vars, cancel);
        drop(sandbox);
        let mut outcome = result?;
        outcome.egress_denials = egress_denials(proxy.as_ref());
        if outcome.exit_code == 127 && outcome.log.ends_with(MISSING_PROGRAM) {
            return Err(refuse(format!(
                "the agent command {:?} is not on PATH in the image {} ({})",
                program, options.image.name, options.image.config_digest
            )));
        }
        Ok(outcome)
    }

    fn turn_on_host(
        &self,
        mode: ConfineMode,
        c: &CandidateContext<'_>,
        cancel: &CancellationToken,
    ) -> Result<AgentOutcome, HostError> {
        let project = self.settings(c.worktree)?;
        let program = self.program()?;
        let path_var = std::env::var_os("PATH").unwrap_or_default();
        let on_path = Path::new(&program).components().count() > 1
            || std::env::split_paths(&path_var).any(|d| d.join(&program).is_file());
        if !on_path {
            return Err(refuse(format!(
                "the agent command {:?} is not on PATH on this host ({})",
                program,
                path_var.to_string_lossy()
            )));
        }
        let mut state = match std::env::var_os("HOME") {
            Some(home) => {
                prepare_state_paths(&self.provider, Path::new(&home), |v| std::env::var_os(v))?
            }
            None => vs_agent::StateBinds::default(),
        };
        // A state directory the CLI cannot run read-only (Codex) is a
        // private copy per turn; only its kept entries go back.
        let _session_dir = if state.private_dirs.is_empty() {
            None
        } else {
            let dir = vs_agent::SessionDir::create()?;
            state.seed_copies(&dir, c.worktree)?;
            Some(dir)
        };
        let mut request = project.sandbox_request(
            &program,
            &self.host_env,
            Some(c.worktree),
            self.helper.clone(),
        );
        request.devices = self.accelerators.device_nodes.clone();
        request.state = state.clone().into();
        // The allow-list's one door: lives for the turn; its refusals go
        // to the candidate's record.
        let proxy = project.start_egress(mode)?;
        request.egress = project.egress_door(proxy.as_ref());
        let confinement = select(request, mode, Enforcement::Required)?
            .ok_or_else(|| refuse("refusing to run the agent: no confinement was set up"))?;
        let mut vars = self.agent_env(c)?;
        for (k, v) in &state.env {
            vars.retain(|(name, _)| name != k);
            vars.push((k.clone(), v.clone()));
        }
        let argv = confinement.wrap(&self.launch.argv)?;
        let outcome = run_turn(&argv, c.worktree, &vars, cancel);
        state.return_kept();
        let mut outcome = outcome?;
        outcome.egress_denials = egress_denials(proxy.as_ref());
        Ok(outcome)
    }

    /// The confinement of the candidate's trusted build in `checkout`:
    /// the run's container (of its own), or the host's mechanism.
    pub fn build_confinement(
        &self,
        c: &CandidateContext<'_>,
        checkout: &Path,
    ) -> Result<Box<dyn Confinement>, HostError> {
        (|| -> Result<Box<dyn Confinement>, HostError> {
            let layout = StateLayout::open(&self.project)?;
            let spec = crate::BuildSpec::load(&layout)?;
            let how = match &self.placement {
                Placement::Container { .. } => {
                    let mut options =
                        self.docker_options(format!("{}-{}-build", c.run.run_id, c.number))?;
                    options.network = self.config.network.unwrap_or(true);
                    BuildConfinement::Docker(Box::new(options))
                }
                Placement::Host(mode) => BuildConfinement::Host(*mode),
            };
            let program = spec.argv().first().map(OsString::from).unwrap_or_default();
            let protected = protected_paths(&layout, &c.run.run_id)?;
            Ok(Box::new(build_confinement(
                checkout,
                self.config.clone(),
                &protected,
                &program,
                how,
                &self.host_env,
                self.helper.clone(),
            )?))
        })()
        .map_err(flat)
    }

    /// The confined runner of one evaluation `command` in `place`.
    pub fn evaluator(
        &self,
        c: &CandidateContext<'_>,
        place: EvalPlace<'_>,
        command: &EvalCommand,
    ) -> Result<Evaluator, HostError> {
        (|| -> Result<Evaluator, HostError> {
            let layout = StateLayout::open(&self.project)?;
            let protected = protected_paths(&layout, &c.run.run_id)?;
            match (self.environment, &self.placement) {
                (RunEnvironment::Host, Placement::Host(mode)) => {
                    let program = command.argv.first().map(OsString::from).unwrap_or_default();
                    let sandbox = evaluation_confinement(EvalConfineRequest {
                        place,
                        config: self.config.clone(),
                        protected: &protected,
                        program: &program,
                        mode: *mode,
                        env: &self.host_env,
                        helper: self.helper.clone(),
                        network: command.network,
                        devices: self.accelerators.device_nodes.clone(),
                    })?;
                    let location = format!("host, confined by {}", sandbox.backend());
                    Ok(Evaluator {
                        runner: Box::new(ConfinedRunner(sandbox)),
                        location,
                        path_var: std::env::var_os("PATH")
                            .unwrap_or_else(|| vs_sandbox::runner::DEFAULT_SEARCH_PATH.into()),
                    })
                }
                (RunEnvironment::Docker, _) => {
                    // A fresh container on the evaluation's checkout:
                    // nothing the agent left running or wrote outside its
                    // commit reaches it. Resolved and started by `select`,
                    // as every other confinement.
                    let mut options =
                        self.docker_options(format!("{}-{}-eval", c.run.run_id, c.number))?;
                    options.devices = docker_devices(&self.accelerators);
                    let program = command.argv.first().map(OsString::from).unwrap_or_default();
                    let sandbox = evaluation_container(
                        EvalConfineRequest {
                            place,
                            config: self.config.clone(),
                            protected: &protected,
                            program: &program,
                            mode: ConfineMode::Docker,
                            env: &self.host_env,
                            helper: self.helper.clone(),
                            network: command.network,
                            devices: Vec::new(),
                        },
                        options,
                    )?;
                    let location = format!(
                        "container {} via {}",
                        sandbox.container_id(),
                        sandbox.execute_via()
                    );
                    Ok(Evaluator {
                        runner: Box::new(ExecuteRunner(sandbox)),
                        location,
                        path_var: vs_sandbox::runner::DEFAULT_SEARCH_PATH.into(),
                    })
                }
                (RunEnvironment::Slurm, _) => Ok(Evaluator {
                    runner: Box::new(broker_child::BrokerJobRunner {
                        socket: self.broker()?.framework_socket().to_path_buf(),
                        network: command.network,
                    }),
                    location: "slurm job via the run's broker".to_owned(),
                    path_var: vs_sandbox::runner::DEFAULT_SEARCH_PATH.into(),
                }),
                (RunEnvironment::Modal | RunEnvironment::Skypilot, _) => Err(refuse(format!(
                    "the {} run environment evaluates through its service, not a local runner",
                    self.environment
                ))),
                (RunEnvironment::Host, Placement::Container { .. }) => {
                    Err(refuse("no host confinement mechanism"))
                }
            }
        })()
        .map_err(flat)
    }
}

/// The launch of a run's agent: for a provider, its one-shot command with
/// the prompt (default: read the objective file); for custom, CMD (plus
/// the prompt as its last argument when one is given).
fn launch_of(record: &RunRecord) -> Result<(agentshim::Provider, agentshim::Launch), HostError> {
    if record.provider == "custom" {
        let provider = agentshim::Provider::custom(record.agent_argv.iter().map(OsString::from))?;
        let launch = match &record.prompt {
            Some(p) => provider.one_shot(p)?,
            None => provider.interactive(&[]),
        };
        return Ok((provider, launch));
    }
    let provider: agentshim::Provider = record.provider.parse()?;
    let prompt = record.prompt.clone().unwrap_or_else(|| {
        format!(
            "Read the objective in {}/objective.md and work on it in the current directory.",
            crate::run::agent_visible_rel(&record.run_id).display()
        )
    });
    let launch = provider.one_shot(&prompt)?;
    Ok((provider, launch))
}

/// The refusals of a turn's egress proxy, for the candidate's record.
fn egress_denials(
    proxy: Option<&vs_sandbox::egress::EgressProxy>,
) -> Vec<crate::run::record::EgressDenial> {
    let Some(proxy) = proxy else {
        return Vec::new();
    };
    proxy
        .denials()
        .0
        .into_iter()
        .map(|d| crate::run::record::EgressDenial {
            time: d.time,
            host: d.host,
            port: d.port,
            reason: d.reason,
            via: d.via.to_owned(),
            pid: d.pid,
            command: d.command,
        })
        .collect()
}

/// A run's accelerator plan as the Docker backend's devices.
fn docker_devices(plan: &AcceleratorPlan) -> vs_docker::DeviceAccess {
    use vs_docker::GpuSelection;
    vs_docker::DeviceAccess {
        nvidia: plan.nvidia.as_ref().map(|r| match &r.device_ids {
            None => GpuSelection::All,
            Some(ids) => GpuSelection::Ids(ids.clone()),
        }),
        nodes: plan.device_nodes.clone(),
    }
}

/// Runs a wrapped agent argv with exactly `env`, its whole tree killed on
/// cancel; output bounded into the log.
fn run_turn(
    argv: &[OsString],
    cwd: &Path,
    env: &[(OsString, OsString)],
    cancel: &CancellationToken,
) -> Result<AgentOutcome, HostError> {
    let mut spec = CommandSpec::new(argv.iter().cloned(), cwd).cancel_token(cancel.clone());
    spec.env = env.iter().cloned().collect();
    let runner = LocalShellRunner::new().with_output_cap(AGENT_LOG_CAP);
    let r = runner.run(&spec)?;
    let mut log = Vec::new();
    for (name, s) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        log.extend_from_slice(format!("== {name} ({} bytes)\n", s.total_bytes()).as_bytes());
        log.extend_from_slice(s.bytes());
        if !s.bytes().ends_with(b"\n") {
            log.push(b'\n');
        }
    }
    Ok(AgentOutcome {
        exit_code: r.exit_code,
        cancelled: r.cancelled,
        log,
        egress_denials: Vec::new(),
    })
}

/// `check` and `measure` on the host: the command wrapped by the host
/// backend, run (bounded, its tree killed at the timeout) by the local
/// runner.
struct ConfinedRunner(vs_sandbox::AnySandbox);

impl CommandRunner for ConfinedRunner {
    fn run(
        &self,
        command: &CommandSpec,
    ) -> Result<vs_sandbox::CommandResult, vs_sandbox::RunnerError> {
        let mut wrapped = command.clone();
        wrapped.argv =
            self.0
                .wrap(&command.argv)
                .map_err(|e| vs_sandbox::RunnerError::Dispatched {
                    place: format!("the {} confinement", self.0.backend()),
                    message: e.to_string(),
                })?;
        LocalShellRunner::default().run(&wrapped)
    }
}

/// `check` and `measure` in the run's container go through
/// `DockerSandbox::execute` (the command server).
struct ExecuteRunner(DockerSandbox);

impl CommandRunner for ExecuteRunner {
    fn run(
        &self,
        command: &CommandSpec,
    ) -> Result<vs_sandbox::CommandResult, vs_sandbox::RunnerError> {
        self.0
            .execute(command)
            .map_err(|e| vs_sandbox::RunnerError::InContainer {
                message: e.to_string(),
            })
    }
}
