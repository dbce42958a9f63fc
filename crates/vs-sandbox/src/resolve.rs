//! The one confinement resolver, in front of [`crate::select`]: what the
//! operator asked for (`--confine`, `VIBESYS_AGENT_SANDBOX`), where the
//! run environment puts the command and what it is for (an agent, a
//! build, an evaluation, `exec`) become the mode, the enforcement and
//! whether the backend needs container options.
//!
//! Every entry point (exec, session, build, run and the trusted
//! evaluation) asks here and nowhere else; [`Backend::for_mode`] is the
//! only match that turns a mode into a backend.
//!
//! | purpose | host | container (docker, slurm) | service (modal, skypilot) |
//! |---|---|---|---|
//! | exec, agent | flag, else the variable | `--confine` only `auto` or `docker`; off refused; docker | as the host |
//! | build | off refused; not docker | off refused; `--confine` only `auto`; docker | off refused |
//! | evaluation | `auto`, `bwrap` or `landlock` | docker | refused |

use std::ffi::OsStr;

use crate::controls::{ConfineMode, Enforcement, SANDBOX_ENV, allow_unconfined};
use crate::egress::EntranceKind;
use crate::error::{ConfineRefusal, SandboxError, SandboxUnavailableError};

/// What the confined command is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `vibesys exec`: one command.
    Exec,
    /// An agent: a session or a run's agent turn.
    Agent,
    /// A trusted candidate build.
    Build,
    /// A trusted evaluation (check, measure).
    Evaluation,
}

/// Where the run environment puts the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPlace<'a> {
    /// On this host (the `host` run environment, or none named).
    Host,
    /// In the run environment's container (`docker`, `slurm`), named as
    /// the operator wrote it.
    Container(&'a str),
    /// On a service (`modal`, `skypilot`), named as the operator wrote it.
    Service(&'a str),
}

/// What the operator asked for: the `--confine` flag (`auto` follows the
/// variable) and the value of `VIBESYS_AGENT_SANDBOX`, read once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OperatorChoice {
    flag: ConfineMode,
    variable: ConfineMode,
}

impl OperatorChoice {
    /// Reads the flag and the variable's value (unset: `auto`); an
    /// unknown value of the variable is an error even when the flag
    /// overrides it.
    pub fn read(flag: ConfineMode, variable: Option<&OsStr>) -> Result<Self, SandboxError> {
        Ok(Self {
            flag,
            variable: ConfineMode::from_env_value(variable)?,
        })
    }

    /// As [`OperatorChoice::read`], with the variable
    /// (`VIBESYS_AGENT_SANDBOX`) read from this process's environment.
    pub fn from_env(flag: ConfineMode) -> Result<Self, SandboxError> {
        Self::read(flag, std::env::var_os(SANDBOX_ENV).as_deref())
    }

    /// A mode decided before (a run's host mode, recorded at its start):
    /// what it says, as if given by the flag.
    pub fn decided(mode: ConfineMode) -> Self {
        Self {
            flag: mode,
            variable: mode,
        }
    }

    /// The mode asked for: the flag, or the variable when the flag is
    /// `auto`.
    pub fn mode(self) -> ConfineMode {
        match self.flag {
            ConfineMode::Auto => self.variable,
            flag => flag,
        }
    }

    /// Resolves the choice for `purpose` in `place`; `enforcement` is what
    /// the caller asked for (a build and an evaluation always require it).
    /// Every refusal names the cause and the fix.
    pub fn resolve(
        self,
        purpose: Purpose,
        place: RunPlace<'_>,
        enforcement: Enforcement,
    ) -> Result<Resolved, SandboxError> {
        let mode = self.mode();
        let resolved = |mode| Resolved { mode, enforcement };
        match purpose {
            Purpose::Exec | Purpose::Agent => match place {
                RunPlace::Host | RunPlace::Service(_) => Ok(resolved(mode)),
                RunPlace::Container(environment) => {
                    if !matches!(self.flag, ConfineMode::Auto | ConfineMode::Docker) {
                        return Err(ConfineRefusal::FlagInContainer {
                            environment: environment.to_owned(),
                        }
                        .into());
                    }
                    if mode == ConfineMode::Off {
                        return Err(ConfineRefusal::AgentUnconfined {
                            variable: SANDBOX_ENV,
                            environment: environment.to_owned(),
                        }
                        .into());
                    }
                    Ok(resolved(ConfineMode::Docker))
                }
            },
            Purpose::Build => {
                if mode == ConfineMode::Off {
                    return Err(ConfineRefusal::BuildUnconfined {
                        variable: SANDBOX_ENV,
                    }
                    .into());
                }
                match place {
                    RunPlace::Host if mode == ConfineMode::Docker => {
                        Err(ConfineRefusal::BuildDockerOnHost {
                            variable: SANDBOX_ENV,
                        }
                        .into())
                    }
                    RunPlace::Container(environment) if self.flag != ConfineMode::Auto => {
                        Err(ConfineRefusal::BuildFlagInContainer {
                            flag: self.flag.name(),
                            environment: environment.to_owned(),
                        }
                        .into())
                    }
                    RunPlace::Container(_) => Ok(Resolved {
                        mode: ConfineMode::Docker,
                        enforcement: Enforcement::Required,
                    }),
                    RunPlace::Host | RunPlace::Service(_) => Ok(Resolved {
                        mode,
                        enforcement: Enforcement::Required,
                    }),
                }
            }
            Purpose::Evaluation => match place {
                RunPlace::Container(_) => Ok(Resolved {
                    mode: ConfineMode::Docker,
                    enforcement: Enforcement::Required,
                }),
                RunPlace::Host => match mode {
                    ConfineMode::Auto | ConfineMode::Bwrap | ConfineMode::Landlock => {
                        Ok(Resolved {
                            mode,
                            enforcement: Enforcement::Required,
                        })
                    }
                    other => Err(SandboxError::Unsupported {
                        backend: "evaluation",
                        reason: format!(
                            "an evaluation on the host is confined by bwrap or Landlock, not {other:?}"
                        ),
                    }),
                },
                RunPlace::Service(environment) => Err(SandboxError::Unsupported {
                    backend: "evaluation",
                    reason: format!(
                        "the {environment} run environment evaluates through its service, not a local confinement"
                    ),
                }),
            },
        }
    }
}

/// The resolver's answer: what [`crate::select`] is called with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolved {
    /// The mechanism.
    pub mode: ConfineMode,
    /// Whether a missing or disabled mechanism is an error.
    pub enforcement: Enforcement,
}

impl Resolved {
    /// Whether a mechanism confines the command (confinement is not
    /// disabled).
    pub fn confines(self) -> bool {
        self.mode != ConfineMode::Off
    }

    /// Whether the backend is a container, whose options (the pinned
    /// image, its run id, mounts) the caller must put in the request.
    pub fn needs_container(self) -> bool {
        self.mode == ConfineMode::Docker
    }

    /// Refuses now what [`crate::select`] would refuse when it runs: a
    /// disabled mechanism under required enforcement (an entry point that
    /// records state first checks before).
    pub fn refuse_unconfined(self) -> Result<(), SandboxUnavailableError> {
        if self.mode == ConfineMode::Off && self.enforcement == Enforcement::Required {
            allow_unconfined(self.mode, self.enforcement)?;
        }
        Ok(())
    }
}

/// A backend [`crate::select::plan`] can lower to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// bubblewrap.
    Bwrap,
    /// Landlock.
    Landlock,
    /// Seatbelt.
    Seatbelt,
    /// A Docker container.
    Docker,
}

impl Backend {
    /// The backend a mode means on this platform (`auto`: bubblewrap on
    /// Linux, Seatbelt on macOS). The only match on the mode.
    pub fn for_mode(mode: ConfineMode) -> Result<Self, SandboxError> {
        match mode {
            ConfineMode::Auto => {
                platform_default().ok_or(SandboxError::UnsupportedPlatform { backend: "auto" })
            }
            ConfineMode::Bwrap => Ok(Self::Bwrap),
            ConfineMode::Landlock => Ok(Self::Landlock),
            ConfineMode::Docker => Ok(Self::Docker),
            ConfineMode::Off => Err(SandboxUnavailableError::new(
                "agent confinement",
                "confinement is disabled",
                "unset VIBESYS_AGENT_SANDBOX or set it to auto, bwrap or landlock",
            )
            .into()),
        }
    }

    /// The backend's name (`bwrap`, `landlock`, `seatbelt`, `docker`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Bwrap => "bwrap",
            Self::Landlock => "landlock",
            Self::Seatbelt => "seatbelt",
            Self::Docker => "docker",
        }
    }

    /// How this backend's sandbox reaches an egress proxy: a listener made
    /// in its own network namespace and handed over (bwrap, Landlock,
    /// Docker), or, with no namespace to make one in, the proxy's own
    /// port on the host loopback (Seatbelt). The only place that decides.
    pub fn egress_entrance(self) -> EntranceKind {
        match self {
            Self::Bwrap | Self::Landlock | Self::Docker => EntranceKind::Handover,
            Self::Seatbelt => EntranceKind::Loopback,
        }
    }
}

/// What `auto` means on this platform (`None`: nothing).
#[cfg(target_os = "linux")]
fn platform_default() -> Option<Backend> {
    Some(Backend::Bwrap)
}

#[cfg(target_os = "macos")]
fn platform_default() -> Option<Backend> {
    Some(Backend::Seatbelt)
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn platform_default() -> Option<Backend> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use ConfineMode::{Auto, Bwrap, Docker, Landlock, Off};

    fn choice(flag: ConfineMode, variable: Option<&str>) -> OperatorChoice {
        OperatorChoice::read(flag, variable.map(OsStr::new)).unwrap()
    }

    fn resolve(
        c: OperatorChoice,
        purpose: Purpose,
        place: RunPlace<'_>,
    ) -> Result<Resolved, String> {
        c.resolve(purpose, place, Enforcement::Required)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn the_flag_wins_and_auto_follows_the_variable() {
        assert_eq!(choice(Auto, None).mode(), Auto);
        assert_eq!(choice(Auto, Some("landlock")).mode(), Landlock);
        assert_eq!(choice(Bwrap, Some("off")).mode(), Bwrap);
        assert_eq!(choice(Off, Some("bwrap")).mode(), Off);
        // An unknown value is refused even under an explicit flag.
        let err = OperatorChoice::read(Bwrap, Some(OsStr::new("firejail"))).unwrap_err();
        assert!(err.to_string().contains("firejail"), "{err}");
    }

    #[test]
    fn exec_and_agents_on_the_host_get_what_was_asked() {
        for purpose in [Purpose::Exec, Purpose::Agent] {
            for (flag, var, mode) in [
                (Auto, None, Auto),
                (Auto, Some("off"), Off),
                (Docker, None, Docker),
                (Landlock, Some("bwrap"), Landlock),
            ] {
                let r = choice(flag, var)
                    .resolve(purpose, RunPlace::Host, Enforcement::Optional)
                    .unwrap();
                assert_eq!(r.mode, mode);
                assert_eq!(r.enforcement, Enforcement::Optional);
                assert_eq!(r.needs_container(), mode == Docker);
            }
        }
    }

    #[test]
    fn an_agent_in_a_container_is_docker_and_never_unconfined() {
        let place = RunPlace::Container("slurm-gpu");
        let r = resolve(choice(Auto, Some("landlock")), Purpose::Agent, place).unwrap();
        assert_eq!(r.mode, Docker);
        assert!(r.needs_container());
        let err = resolve(choice(Bwrap, None), Purpose::Agent, place).unwrap_err();
        assert_eq!(
            err,
            "--confine applies to the host run environment; --run-environment slurm-gpu runs the session in a container"
        );
        let err = resolve(choice(Off, None), Purpose::Agent, place).unwrap_err();
        assert!(err.starts_with("--confine applies"), "{err}");
        let err = resolve(choice(Auto, Some("0")), Purpose::Agent, place).unwrap_err();
        assert!(
            err.starts_with("refusing the session: agent confinement is disabled"),
            "{err}"
        );
    }

    #[test]
    fn a_build_never_runs_unconfined_and_its_flag_is_the_hosts() {
        for place in [
            RunPlace::Host,
            RunPlace::Container("docker"),
            RunPlace::Service("modal"),
        ] {
            let err = resolve(choice(Auto, Some("off")), Purpose::Build, place).unwrap_err();
            assert!(err.starts_with("refusing to build"), "{err}");
            // Even when the caller would accept it.
            let err = choice(Auto, Some("off"))
                .resolve(Purpose::Build, place, Enforcement::Optional)
                .unwrap_err();
            assert!(err.to_string().starts_with("refusing to build"), "{err}");
        }
        let r = resolve(choice(Landlock, None), Purpose::Build, RunPlace::Host).unwrap();
        assert_eq!((r.mode, r.enforcement), (Landlock, Enforcement::Required));
        let err = resolve(choice(Docker, None), Purpose::Build, RunPlace::Host).unwrap_err();
        assert!(err.contains("does not apply to builds"), "{err}");
        let err = resolve(
            choice(Landlock, None),
            Purpose::Build,
            RunPlace::Container("docker"),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "--confine landlock applies to the host run environment; the docker run environment confines the build in its container (pass --run-environment host to use it)"
        );
        let r = resolve(
            choice(Auto, Some("bwrap")),
            Purpose::Build,
            RunPlace::Container("slurm"),
        )
        .unwrap();
        assert_eq!(r.mode, Docker);
    }

    #[test]
    fn an_evaluation_is_bwrap_landlock_or_its_container() {
        for mode in [Auto, Bwrap, Landlock] {
            let r = resolve(
                OperatorChoice::decided(mode),
                Purpose::Evaluation,
                RunPlace::Host,
            )
            .unwrap();
            assert_eq!((r.mode, r.enforcement), (mode, Enforcement::Required));
        }
        for mode in [Docker, Off] {
            let err = resolve(
                OperatorChoice::decided(mode),
                Purpose::Evaluation,
                RunPlace::Host,
            )
            .unwrap_err();
            assert!(
                err.ends_with(&format!("bwrap or Landlock, not {mode:?}")),
                "{err}"
            );
        }
        let r = resolve(
            OperatorChoice::decided(Auto),
            Purpose::Evaluation,
            RunPlace::Container("docker"),
        )
        .unwrap();
        assert_eq!(r.mode, Docker);
        assert!(
            resolve(
                OperatorChoice::decided(Auto),
                Purpose::Evaluation,
                RunPlace::Service("modal")
            )
            .is_err()
        );
    }

    #[test]
    fn disabled_and_required_is_refused_now_when_asked() {
        let off = choice(Off, None)
            .resolve(Purpose::Agent, RunPlace::Host, Enforcement::Required)
            .unwrap();
        let err = off.refuse_unconfined().unwrap_err();
        assert!(err.reason.contains("requires enforcement"), "{err}");
        let optional = choice(Off, None)
            .resolve(Purpose::Exec, RunPlace::Host, Enforcement::Optional)
            .unwrap();
        optional.refuse_unconfined().unwrap();
    }
}
