//! A provider's agent session launched where the operator chose: confined
//! on the host, in the run's editor container (the docker run
//! environment), or in that container beside the run's Slurm broker. The
//! binary resolves the provider, the policy, the environment and the
//! provider's state; this module starts the egress door, the confinement
//! and the launcher, and waits for it with the operator's signals
//! forwarded.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use agentshim::Launch;
use vs_agent::signals::wait_forwarding_signals;
use vs_agent::{AgentError, SessionEnv, StateBinds, session_command};
use vs_docker::{DockerOptions, ExtraMount};
use vs_sandbox::egress::{EgressProxy, ProxyError};
use vs_sandbox::exit_codes::exit_code;
use vs_sandbox::{ConfineMode, Confinement, Enforcement, Resolved, RunPlace, SandboxError, select};

use crate::broker::child::{self, BrokerChild, BrokerChildError, BrokerStart};
use crate::environment::{Availability, RunEnvironment};
use crate::error::RuntimeError;
use crate::session_log::SessionEgressLog;
use crate::settings::ProjectSettings;

/// HOME of the pinned images (images/*.toml `config.env`): the provider's
/// state locations below the host's HOME are bound below it.
pub const IMAGE_HOME: &str = "/home/agent";

/// Why a session could not run (nothing ran, or the launcher could not
/// be started).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    /// The provider's command line is empty.
    #[error("the provider command is empty")]
    EmptyCommand,
    /// An egress allow-list without confinement to hold the session to it.
    #[error(
        "an egress allow-list (allow_hosts, --allow-host) needs confinement, which is disabled: nothing would hold the session to it"
    )]
    AllowListUnconfined,
    /// The container was not started.
    #[error("refusing the session: no container was started")]
    NoContainer,
    /// The slurm run environment cannot be used here.
    #[error("the slurm run environment is not available here: {reason}")]
    SlurmUnavailable {
        /// Why.
        reason: String,
    },
    /// The run environment does not run sessions.
    #[error("the {0} run environment does not run sessions in this build")]
    UnsupportedEnvironment(RunEnvironment),
    /// The container's options could not be made (the caller's message).
    #[error("{0}")]
    ContainerOptions(String),
    /// The launcher could not be started.
    #[error("cannot start the session ({provider})")]
    Start {
        /// The provider's name.
        provider: String,
        /// The cause.
        source: std::io::Error,
    },
    /// The launcher could not be started in the container.
    #[error("cannot start the session in the container")]
    StartInContainer(#[source] std::io::Error),
    /// The confinement could not be set up.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The egress door could not be opened.
    #[error(transparent)]
    Egress(#[from] ProxyError),
    /// The launcher could not be assembled.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The run state (the egress log) failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The run environment's name was not understood.
    #[error(transparent)]
    Environment(#[from] crate::EnvironmentError),
    /// The run's broker could not be started or reached.
    #[error(transparent)]
    Broker(#[from] BrokerChildError),
}

/// Where a session runs, from `--run-environment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionPlace<'a> {
    /// The run environment named (none: the host, the mechanism chosen by
    /// `--confine`).
    pub environment: Option<RunEnvironment>,
    /// The place the confinement is resolved for.
    pub place: RunPlace<'a>,
    /// Whether it was named by the deprecated `slurm-gpu` (slurm with
    /// agent GPU jobs on).
    pub slurm_gpu_alias: bool,
}

/// Where a session runs when `--run-environment` is `value`: the host,
/// docker or slurm (the services run no sessions).
pub fn session_place(value: Option<&str>) -> Result<SessionPlace<'_>, SessionError> {
    let environment = value.map(RunEnvironment::parse).transpose()?;
    let place = match environment {
        None => RunPlace::Host,
        Some(e @ (RunEnvironment::Host | RunEnvironment::Docker | RunEnvironment::Slurm)) => {
            e.confine_place(value.unwrap_or_default())
        }
        Some(other) => return Err(SessionError::UnsupportedEnvironment(other)),
    };
    Ok(SessionPlace {
        environment,
        place,
        slurm_gpu_alias: value == Some(crate::environment::SLURM_GPU_ALIAS),
    })
}

/// Options for the container's options, made on demand: the binary's
/// choice of pinned image (or why there is none).
pub type ContainerOptions<'a> = &'a mut dyn FnMut() -> Result<DockerOptions, String>;

/// One session: what it runs, with which environment, where, under which
/// policy.
pub struct SessionLaunch<'a> {
    /// The provider's name (in messages).
    pub provider: &'a str,
    /// The project's settings (the policy, with the provider's API host).
    pub project: &'a ProjectSettings,
    /// Where the allow-list's refusals are logged, when anywhere.
    pub egress_log: Option<&'a SessionEgressLog>,
    /// The provider's command line and its own variables.
    pub launch: &'a Launch,
    /// The allow-listed environment.
    pub env: &'a SessionEnv,
    /// The directory the session starts in.
    pub cwd: &'a Path,
    /// The caller's environment (the host resources depend on it).
    pub host_env: &'a [(OsString, OsString)],
    /// The confinement helper (this executable).
    pub helper: PathBuf,
}

impl SessionLaunch<'_> {
    /// The session on the host, confined by `resolved`'s mechanism (or
    /// not at all, when disabled and not required), with the provider's
    /// `state` bound; its exit code.
    pub fn on_host(&self, state: &StateBinds, resolved: Resolved) -> Result<i32, SessionError> {
        let mut request = self.project.sandbox_request(
            self.program()?,
            self.host_env,
            Some(self.cwd),
            self.helper.clone(),
        );
        request.state = state.clone().into();
        // The allow-list's one door: lives as long as the session.
        let proxy = self.start_egress(resolved.mode)?;
        request.egress = self.project.egress_door(proxy.as_ref());
        let confinement = select(request, resolved.mode, resolved.enforcement)?;
        if confinement.is_none() && proxy.is_some() {
            return Err(SessionError::AllowListUnconfined);
        }
        let mut cmd = session_command(
            confinement.as_ref().map(|c| c as &dyn Confinement),
            self.launch,
            self.env,
            self.cwd,
        )?;
        let status = wait_forwarding_signals(&mut cmd).map_err(|source| SessionError::Start {
            provider: self.provider.to_owned(),
            source,
        })?;
        Ok(exit_code(status))
    }

    /// The session in the run's container: the same launcher, with the
    /// container as the confinement and `state` (see [`state_mounts`])
    /// mounted. Only the allow-listed names cross into the container;
    /// PATH, HOME, USER, SHELL and TMPDIR are the image's own.
    pub fn in_container(
        &self,
        options: ContainerOptions<'_>,
        state: Vec<ExtraMount>,
    ) -> Result<i32, SessionError> {
        self.in_container_of(options, state, None, self.env)
    }

    /// The session in the slurm run environment: the run's broker
    /// (stopped, with every job it submitted, when the session ends,
    /// whatever the outcome), then the session in the editor container
    /// with the agent socket mounted and named by `VIBESYS_BROKER_SOCKET`.
    pub fn in_slurm(
        &self,
        options: ContainerOptions<'_>,
        state: Vec<ExtraMount>,
        broker: BrokerStart<'_>,
    ) -> Result<i32, SessionError> {
        if let Availability::NotAvailable { reason } = RunEnvironment::Slurm.describe().availability
        {
            return Err(SessionError::SlurmUnavailable { reason });
        }
        let broker = BrokerChild::start(broker)?;
        let mut env = self.env.clone();
        env.vars.push((
            child::BROKER_SOCKET_ENV.into(),
            child::AGENT_SOCKET_IN_CONTAINER.into(),
        ));
        let outcome = self.in_container_of(options, state, Some(&broker), &env);
        drop(broker);
        outcome
    }

    fn in_container_of(
        &self,
        options: ContainerOptions<'_>,
        state: Vec<ExtraMount>,
        broker: Option<&BrokerChild>,
        env: &SessionEnv,
    ) -> Result<i32, SessionError> {
        let mut options = options().map_err(SessionError::ContainerOptions)?;
        options.extra_mounts.extend(state);
        if let Some(broker) = broker {
            child::editor_options(&mut options, broker.agent_socket())?;
        }
        options.env = crate::container::agent_env_list(
            env.vars
                .iter()
                .filter_map(|(k, _)| k.to_str())
                .chain(self.launch.env.iter().map(|(k, _)| *k)),
        );
        let mut request = self.project.sandbox_request(
            self.program()?,
            self.host_env,
            Some(self.cwd),
            self.helper.clone(),
        );
        request.docker = Some(Box::new(options));
        // The allow-list's one door: lives as long as the session.
        let proxy = self.start_egress(ConfineMode::Docker)?;
        request.egress = self.project.egress_door(proxy.as_ref());
        let sandbox = select(request, ConfineMode::Docker, Enforcement::Required)?
            .ok_or(SessionError::NoContainer)?;
        let mut cmd = session_command(Some(&sandbox), self.launch, env, self.cwd)?;
        let status = wait_forwarding_signals(&mut cmd).map_err(SessionError::StartInContainer)?;
        drop(sandbox);
        Ok(exit_code(status))
    }

    /// The provider's program.
    fn program(&self) -> Result<&OsString, SessionError> {
        self.launch.argv.first().ok_or(SessionError::EmptyCommand)
    }

    /// The allow-list's one door (when the policy has one), each refusal
    /// appended to the session's log when there is one.
    fn start_egress(&self, mode: ConfineMode) -> Result<Option<EgressProxy>, SessionError> {
        let proxy = self.project.start_egress(mode)?;
        if let (Some(proxy), Some(log)) = (&proxy, self.egress_log) {
            log.attach(proxy)?;
        }
        Ok(proxy)
    }
}

/// The provider's state in the container, as the session rules say: each
/// location below the host's HOME at the same place below [`IMAGE_HOME`],
/// any other (an override variable such as `CLAUDE_CONFIG_DIR`, which
/// crosses into the container) at its host path; state directories
/// read-only, the entries the CLI must write read-write over them,
/// and each home-level file (`~/.claude.json`) as the session's private
/// copy, read-write (the user's file is never written).
pub fn state_mounts(home: Option<&Path>, state: &StateBinds) -> Vec<ExtraMount> {
    let target = |p: &Path| match home.and_then(|h| p.strip_prefix(h).ok()) {
        Some(rel) if !rel.as_os_str().is_empty() => Path::new(IMAGE_HOME).join(rel),
        _ => p.to_path_buf(),
    };
    let mount = |source: PathBuf, at: &Path, read_only| ExtraMount {
        target: target(at),
        source,
        read_only,
    };
    state
        .read_only
        .iter()
        .map(|p| mount(p.clone(), p, true))
        .chain(state.writable.iter().map(|p| mount(p.clone(), p, false)))
        .chain(
            state
                .copies
                .iter()
                .map(|c| mount(c.source(), &c.target, false)),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_below_home_goes_below_the_image_home_and_the_rest_stays() {
        let state = StateBinds {
            read_only: vec![PathBuf::from("/home/me/.claude")],
            writable: vec![PathBuf::from("/elsewhere/claude")],
            ..StateBinds::default()
        };
        let mounts = state_mounts(Some(Path::new("/home/me")), &state);
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[0].target, Path::new("/home/agent/.claude"));
        assert!(mounts[0].read_only);
        assert_eq!(mounts[1].target, Path::new("/elsewhere/claude"));
        assert!(!mounts[1].read_only);
    }
}
