//! Run environments: where a run's evaluations execute, and which command
//! runner and which agent confinement each one uses (DESIGN.md section 7).
//!
//! Only what this build implements claims to work: [`Availability`] says
//! so for each environment, and [`OpenedEnvironment::require_available`]
//! refuses the others with a typed error.

pub use crate::availability::Availability;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Serialize;

use crate::EnvironmentError;
use crate::error::Result;
use crate::id::RunId;
use crate::state::StateLayout;

/// Where a run's evaluations execute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunEnvironment {
    /// A `DockerSandbox` container from the pinned editor image (default).
    #[default]
    Docker,
    /// The host itself, under bubblewrap or Landlock; enforcement required.
    Host,
    /// A host command broker that submits Slurm jobs.
    Slurm,
    /// Modal: a local editor container, evaluation dispatched to Modal.
    Modal,
    /// SkyPilot: a local editor container, evaluation dispatched to SkyPilot.
    Skypilot,
}

/// `--run-environment slurm-gpu`: a deprecated alias of `slurm` with agent
/// GPU jobs on (`[vibesys.agent_gpu]`); callers log that it is deprecated.
pub const SLURM_GPU_ALIAS: &str = "slurm-gpu";

/// Every run environment, in documentation order.
pub const ALL_ENVIRONMENTS: &[RunEnvironment] = &[
    RunEnvironment::Docker,
    RunEnvironment::Host,
    RunEnvironment::Slurm,
    RunEnvironment::Modal,
    RunEnvironment::Skypilot,
];

impl RunEnvironment {
    /// The canonical name (`docker`, `host`, `slurm`, `modal`, `skypilot`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Host => "host",
            Self::Slurm => "slurm",
            Self::Modal => "modal",
            Self::Skypilot => "skypilot",
        }
    }

    /// Where this environment puts a confined command, for the
    /// confinement resolver (`vs_sandbox::OperatorChoice::resolve`), named
    /// in its refusals as `shown` (the value the operator wrote): the
    /// host, the editor container (docker, slurm), or a service (modal,
    /// skypilot).
    pub fn confine_place(self, shown: &str) -> vs_sandbox::RunPlace<'_> {
        match self {
            Self::Host => vs_sandbox::RunPlace::Host,
            Self::Docker | Self::Slurm => vs_sandbox::RunPlace::Container(shown),
            Self::Modal | Self::Skypilot => vs_sandbox::RunPlace::Service(shown),
        }
    }

    /// Parses a `--run-environment` value (`slurm-gpu`, deprecated, is
    /// `slurm`: see [`SLURM_GPU_ALIAS`]). `local` is rejected naming its
    /// replacement (`--run-environment host`); other unknown names are
    /// rejected listing the valid ones.
    pub fn parse(value: &str) -> Result<Self, EnvironmentError> {
        match value {
            "docker" => Ok(Self::Docker),
            "host" => Ok(Self::Host),
            "slurm" | SLURM_GPU_ALIAS => Ok(Self::Slurm),
            "modal" => Ok(Self::Modal),
            "skypilot" => Ok(Self::Skypilot),
            "local" => Err(EnvironmentError::RetiredRunEnvironment {
                given: "--run-environment local".to_owned(),
                replacement: "--run-environment host".to_owned(),
            }),
            other => Err(EnvironmentError::UnknownRunEnvironment {
                value: other.chars().take(64).collect(),
            }),
        }
    }

    /// The environment a command line selects: `--run-environment`'s
    /// `value` (see [`RunEnvironment::parse`]; `slurm-gpu` logs its
    /// deprecation), `modal` for `--modal`; the retired `--docker` is
    /// refused naming its replacement. `None`: nothing selected.
    pub fn select(
        value: Option<&str>,
        modal: bool,
        retired_docker: bool,
    ) -> Result<Option<Self>, EnvironmentError> {
        if retired_docker {
            return Err(Self::retired_docker_flag());
        }
        if modal {
            return Ok(Some(Self::Modal));
        }
        let Some(value) = value else {
            return Ok(None);
        };
        let env = Self::parse(value)?;
        if value == SLURM_GPU_ALIAS {
            crate::broker::child::warn_slurm_gpu_alias();
        }
        Ok(Some(env))
    }

    /// The error for the retired `--docker` flag.
    pub fn retired_docker_flag() -> EnvironmentError {
        EnvironmentError::RetiredRunEnvironment {
            given: "--docker".to_owned(),
            replacement: "--run-environment docker".to_owned(),
        }
    }

    /// Whether the editor container of this environment gets the host's
    /// accelerators when the operator asks for them (`[vibesys]
    /// attach_accelerator`): only `docker` evaluates locally. `slurm`,
    /// `modal` and `skypilot` run their editor container as a control
    /// plane without devices (heavy work goes to the compute nodes or the
    /// service); `host` has no container.
    pub fn attaches_accelerator(self, operator_asked: bool) -> bool {
        match self {
            Self::Docker => operator_asked,
            Self::Host | Self::Slurm | Self::Modal | Self::Skypilot => false,
        }
    }

    /// Whether evaluation is dispatched to a service (`modal`, `skypilot`)
    /// through [`crate::remote::dispatch`].
    pub fn remote_service(self) -> Option<crate::remote::Service> {
        match self {
            Self::Modal => Some(crate::remote::Service::Modal),
            Self::Skypilot => Some(crate::remote::Service::Skypilot),
            Self::Docker | Self::Host | Self::Slurm => None,
        }
    }

    /// Which command runner and which confinement this environment uses,
    /// and whether this build can run anything in it (for `slurm`: whether
    /// `sinfo` answers on this machine).
    pub fn describe(self) -> EnvironmentDescription {
        let (runner, confinement, evaluation, availability) = match self {
            Self::Docker => (
                "DockerSandbox (as a command runner: the framework's own commands run in the run's container)",
                "DockerSandbox (agent turns run in a container from the pinned editor image; workspace mounted at its host path, read-only paths re-mounted read-only, hidden paths masked)",
                "in the run's container",
                Availability::Available,
            ),
            Self::Host => (
                "LocalShellRunner (the framework's own commands run on the host, unconfined and trusted)",
                "HostSandbox (bubblewrap) or LandlockSandbox; enforcement required: a disabled or missing mechanism stops the run",
                "on the host, under host confinement",
                Availability::Available,
            ),
            Self::Slurm => (
                "a host-owned command broker on a Unix socket, bind-mounted into the editor container, that submits Slurm jobs",
                "host confinement (bubblewrap) on the compute nodes, with a private tmpfs /tmp and TMPDIR, TMP, TEMP pointing at it",
                "as Slurm jobs on compute nodes",
                crate::broker::slurm::availability(),
            ),
            Self::Modal => (
                "the local editor container (no devices) for the agent; the host's `modal` client (from the tool directory) for evaluation",
                "DockerSandbox for the local editor container (no devices; the service's credentials stay on the host)",
                "dispatched to Modal: the trusted check and measure of the measured commit run in a generated Modal function (`modal run`)",
                remote_availability(crate::remote::Service::Modal),
            ),
            Self::Skypilot => (
                "the local editor container (no devices) for the agent; the host's `sky` client (from the tool directory) for evaluation",
                "DockerSandbox for the local editor container (no devices; the service's credentials stay on the host)",
                "dispatched to SkyPilot: the trusted check and measure of the measured commit run as a generated SkyPilot task (`sky launch --down`)",
                remote_availability(crate::remote::Service::Skypilot),
            ),
        };
        EnvironmentDescription {
            name: self.name(),
            runner,
            confinement,
            evaluation,
            availability,
        }
    }
}

impl<'de> serde::Deserialize<'de> for RunEnvironment {
    /// Reads a recorded environment. A retired `local` record migrates to
    /// `docker`, with a log line; other names must be canonical.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        if name == "local" {
            tracing::warn!(
                "this run was recorded in the retired `local` run environment; it continues in `docker`"
            );
            return Ok(Self::Docker);
        }
        ALL_ENVIRONMENTS
            .iter()
            .copied()
            .find(|e| e.name() == name)
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "unknown run environment {:?}; expected docker, host, slurm, modal or skypilot",
                    name.chars().take(64).collect::<String>()
                ))
            })
    }
}

impl FromStr for RunEnvironment {
    type Err = EnvironmentError;
    fn from_str(s: &str) -> Result<Self, EnvironmentError> {
        Self::parse(s)
    }
}

impl fmt::Display for RunEnvironment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Modal and SkyPilot are available when their client is installed (at
/// the pinned version) and configured; otherwise the reason says exactly
/// what is missing and how to fix it.
fn remote_availability(service: crate::remote::Service) -> Availability {
    let status = crate::remote::Clients::discover().status(service);
    if status.is_available() {
        Availability::Available
    } else {
        Availability::NotAvailable {
            reason: status.summary(),
        }
    }
}

/// What a run environment uses, stated explicitly.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EnvironmentDescription {
    /// The environment's name.
    pub name: &'static str,
    /// The command runner for the framework's own commands.
    pub runner: &'static str,
    /// The agent confinement.
    pub confinement: &'static str,
    /// Where evaluation executes.
    pub evaluation: &'static str,
    /// Whether this build can run something in it.
    pub availability: Availability,
}

/// A run environment whose state and hidden directories are prepared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OpenedEnvironment {
    /// The environment.
    pub environment: RunEnvironment,
    /// What it uses.
    pub description: EnvironmentDescription,
    /// The run.
    pub run_id: RunId,
    /// The run's hidden record directory (created).
    pub run_dir: PathBuf,
}

impl OpenedEnvironment {
    /// Refuses an environment this build cannot run anything in.
    pub fn require_available(&self) -> Result<(), EnvironmentError> {
        match &self.description.availability {
            Availability::NotAvailable { reason } => {
                Err(EnvironmentError::RunEnvironmentUnavailable {
                    name: self.environment.name(),
                    reason: reason.clone(),
                })
            }
            Availability::Available => Ok(()),
        }
    }
}

/// Opens a run environment for `run` in the project at `project`: the run
/// state must be initialized; every hidden state directory is prepared in
/// the project (so confinement can hide it) and the run's hidden record
/// directory is created, all before anything is confined. Returns what the
/// environment uses; it does not check availability (see
/// [`OpenedEnvironment::require_available`]).
pub fn open_run_environment(
    project: &Path,
    environment: RunEnvironment,
    run: &RunId,
) -> Result<OpenedEnvironment> {
    let layout = StateLayout::open(project)?;
    layout.require_initialized()?;
    StateLayout::prepare(layout.project())?;
    let run_dir = layout.ensure_run_dir(run)?;
    Ok(OpenedEnvironment {
        environment,
        description: environment.describe(),
        run_id: run.clone(),
        run_dir,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for env in ALL_ENVIRONMENTS {
            assert_eq!(RunEnvironment::parse(env.name()).unwrap(), *env);
        }
        assert_eq!(RunEnvironment::default(), RunEnvironment::Docker);
    }

    #[test]
    fn local_names_its_replacement() {
        let err = RunEnvironment::parse("local").unwrap_err().to_string();
        assert!(err.contains("--run-environment host"), "{err}");
        let err = RunEnvironment::retired_docker_flag().to_string();
        assert!(err.contains("--run-environment docker"), "{err}");
        let err = RunEnvironment::parse("kubernetes").unwrap_err().to_string();
        assert!(
            err.contains("kubernetes") && err.contains("skypilot"),
            "{err}"
        );
    }

    #[test]
    fn only_implemented_environments_claim_to_work() {
        assert_eq!(
            RunEnvironment::Host.describe().availability,
            Availability::Available
        );
        // Slurm's availability follows `sinfo` (tests/slurm_broker.rs);
        // Modal's and SkyPilot's follow their clients and credentials
        // (tests/remote_envs.rs).
    }
}
