//! `vibesys build` as one library call: the host mechanism checked, the
//! run environment opened, the build confined where it says (a container
//! of the pinned editor image, slurm with a broker of the build's own, or
//! the host), run by [`run_build`], and its outcome as a [`BuildReport`]
//! (text and JSON).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;
use vs_docker::DockerOptions;
use vs_sandbox::config::{ConfigError, PolicyConfig};
use vs_sandbox::{ConfineMode, OperatorChoice};

use crate::broker::child::{self, BrokerChild, BrokerChildError, BrokerStart};
use crate::build::{BuildCheckout, BuildRecord, BuildSpec, TrustedBuild};
use crate::build_confine::{BuildConfinement, BuildRequest, run_build};
use crate::build_error::BuildError;
use crate::confine_choice::{ConfineChoiceError, build_host_mode};
use crate::container::{self, ContainerError, ImageLock};
use crate::environment::{RunEnvironment, open_run_environment};
use crate::environment_error::EnvironmentError;
use crate::error::RuntimeError;
use crate::id::RunId;
use crate::run::launch::{LaunchError, project_dir};
use crate::run::report::terminal_safe_cut;
use crate::state::StateLayout;

/// Why a build could not run (a rejected build is a [`BuildReport`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildRunError {
    /// The run environment does not build.
    #[error("the {environment} run environment does not run trusted builds in this build")]
    NotBuilding {
        /// The run environment.
        environment: RunEnvironment,
    },
    /// The slurm build's broker has no socket for the checkout.
    #[error("the build's broker serves no socket for its checkout")]
    NoCheckoutSocket,
    /// The project directory.
    #[error(transparent)]
    Project(#[from] LaunchError),
    /// The host mechanism is refused.
    #[error(transparent)]
    Confinement(#[from] ConfineChoiceError),
    /// The project's `vibesys.toml`.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The run environment is not available here.
    #[error(transparent)]
    Environment(#[from] EnvironmentError),
    /// The pinned editor image (boxed: it is large).
    #[error(transparent)]
    Container(Box<ContainerError>),
    /// The slurm build's broker.
    #[error(transparent)]
    Broker(#[from] BrokerChildError),
    /// The run state, the checkout or the build.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
}

impl From<ContainerError> for BuildRunError {
    fn from(e: ContainerError) -> Self {
        Self::Container(Box::new(e))
    }
}

/// One `vibesys build`, as parsed.
#[derive(Debug)]
pub struct BuildSettings<'a> {
    /// The project (default: the current directory).
    pub project: Option<&'a Path>,
    /// The run environment.
    pub environment: RunEnvironment,
    /// The run id, unchecked.
    pub run: &'a str,
    /// The revision to build.
    pub commit: &'a str,
    /// `--confine`: `Auto`, `Bwrap` or `Landlock`.
    pub confine: ConfineMode,
    /// slurm: agent GPU jobs on (`slurm-gpu`).
    pub slurm_gpu: bool,
    /// The vibesys executable (the confinement helper).
    pub helper: PathBuf,
    /// The caller's environment (for `PATH` and the host resources).
    pub env: Vec<(OsString, OsString)>,
}

/// A build's outcome: verified, or rejected naming why.
#[derive(Debug)]
pub struct BuildReport {
    commit: String,
    environment: RunEnvironment,
    outcome: Result<TrustedBuild, RuntimeError>,
}

/// A build's outcome in `--json` (`verified`, `rejected`).
#[derive(Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildStatus {
    /// Its outputs were verified and recorded.
    Verified,
    /// It failed, timed out, changed a protected path or an output was
    /// rejected.
    Rejected,
}

/// [`BuildReport`] as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct BuildJson<'a> {
    /// Verified or rejected.
    pub status: BuildStatus,
    /// The run environment's name.
    pub run_environment: &'static str,
    /// Where the record is (verified).
    pub record_path: Option<PathBuf>,
    /// The record (verified).
    pub record: Option<&'a BuildRecord>,
    /// Why it was rejected.
    pub error: Option<String>,
}

/// Runs `vibesys build`: checks the host mechanism, opens the run
/// environment (docker, host or slurm), and runs the trusted build there.
pub fn trusted_build(settings: BuildSettings<'_>) -> Result<BuildReport, BuildRunError> {
    let environment = settings.environment;
    let mode = build_host_mode(
        OperatorChoice::from_env(settings.confine).map_err(ConfineChoiceError::from)?,
        environment,
    )?;
    let run = RunId::new(settings.run)?;
    let project = project_dir(settings.project)?;
    open_run_environment(&project, environment, &run)?.require_available()?;
    if !matches!(
        environment,
        RunEnvironment::Host | RunEnvironment::Docker | RunEnvironment::Slurm
    ) {
        return Err(BuildRunError::NotBuilding { environment });
    }
    let layout = StateLayout::open(&project)?;
    let spec = BuildSpec::load(&layout)?;
    let config = PolicyConfig::load(layout.project())?;
    // For docker, the pinned image is checked before anything is checked out.
    let mut docker = match environment {
        RunEnvironment::Docker | RunEnvironment::Slurm => {
            Some(docker_options(&layout, &config, &settings.helper)?)
        }
        _ => None,
    };
    // The checkout is named before anything starts: the slurm build's
    // broker socket is bound to it.
    let checkout = BuildCheckout::fresh_id()?;
    // slurm: a broker of the build's own, stopped (with every job it
    // submitted) when this function returns, after the container. Its one
    // socket in the container runs jobs only in the build's checkout (never
    // the project or a candidate's worktree: the build runs candidate
    // code), and it lists and cancels only that checkout's jobs, never
    // those of a live run of the same id.
    let broker = match (environment, docker.as_mut()) {
        (RunEnvironment::Slurm, Some(options)) => {
            let broker = BrokerChild::start(BrokerStart {
                helper: &settings.helper,
                project: layout.project(),
                run: run.as_str(),
                agent_gpu: settings.slurm_gpu,
                candidates: 0,
                checkout: Some(checkout.as_str()),
                allow_hosts: &[],
                no_network: false,
            })?;
            let socket = broker
                .checkout_socket()
                .ok_or(BuildRunError::NoCheckoutSocket)?;
            child::editor_options(options, socket)?;
            Some(broker)
        }
        _ => None,
    };
    let mut extra_env = Vec::new();
    if broker.is_some() {
        extra_env.push((
            child::BROKER_SOCKET_ENV.into(),
            child::AGENT_SOCKET_IN_CONTAINER.into(),
        ));
    }
    let (commit, outcome) = run_build(BuildRequest {
        layout: &layout,
        spec: &spec,
        config,
        run: &run,
        commit: settings.commit,
        confinement: match docker {
            Some(options) => BuildConfinement::Docker(Box::new(options)),
            None => BuildConfinement::Host(mode),
        },
        env: &settings.env,
        extra_env,
        helper: settings.helper.clone(),
        checkout: Some(checkout),
    });
    drop(broker);
    let outcome = match outcome {
        Ok(build) => Ok(build),
        Err(
            e @ RuntimeError::Build(
                BuildError::BuildFailed { .. }
                | BuildError::BuildTimedOut { .. }
                | BuildError::OutputRejected { .. }
                | BuildError::ProtectedPathsChanged { .. },
            ),
        ) => Err(e),
        Err(e) => return Err(e.into()),
    };
    Ok(BuildReport {
        commit: commit.unwrap_or_else(|| settings.commit.to_owned()),
        environment,
        outcome,
    })
}

/// The Docker options of a build: the pinned editor image (or
/// `VIBESYS_DOCKER_IMAGE`) from the lock, a container id of its own, the
/// project's network.
fn docker_options(
    layout: &StateLayout,
    config: &PolicyConfig,
    helper: &Path,
) -> Result<DockerOptions, ContainerError> {
    let pin = ImageLock::find(Some(layout.project()))?.pin_chosen(None)?;
    let mut options =
        container::base_options(pin, container::fresh_container_name("build"), helper)?;
    options.network = config.network.unwrap_or(true);
    Ok(options)
}

impl BuildReport {
    /// Whether the outputs were verified and recorded.
    pub fn is_verified(&self) -> bool {
        self.outcome.is_ok()
    }

    /// What a verified build printed, each line behind `build| `, control
    /// characters escaped (the build is candidate code).
    pub fn output_lines(&self) -> Vec<String> {
        match &self.outcome {
            Ok(build) => build
                .output()
                .lines()
                .map(|line| format!("build| {}", terminal_safe_cut(line, usize::MAX)))
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The outcome as `--json` prints it.
    pub fn json(&self) -> BuildJson<'_> {
        let (status, record_path, record, error) = match &self.outcome {
            Ok(build) => (
                BuildStatus::Verified,
                Some(build.path()),
                Some(build.record()),
                None,
            ),
            Err(e) => (BuildStatus::Rejected, None, None, Some(e.to_string())),
        };
        BuildJson {
            status,
            run_environment: self.environment.name(),
            record_path,
            record,
            error,
        }
    }
}

/// A verified build: its record and each output; a rejected one: why.
impl fmt::Display for BuildReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let build = match &self.outcome {
            Ok(build) => build,
            Err(e) => return write!(f, "build of {} rejected: {e}", self.commit),
        };
        let r = build.record();
        writeln!(
            f,
            "verified build of {} in run {} ({}), recorded in {}",
            r.commit,
            r.run_id,
            r.confinement,
            build.path().display()
        )?;
        for o in &r.outputs {
            writeln!(
                f,
                "  {}  sha256:{}  {} bytes  -> .vibesys/state/{}",
                o.path, o.sha256, o.size, o.artifact
            )?;
        }
        Ok(())
    }
}
