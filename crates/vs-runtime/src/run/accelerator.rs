//! Which host accelerators reach a run's agent, as a plan that spawns
//! nothing (recorded in `run.json` and applied to every agent turn by the
//! CLI's run host: Docker device requests and device nodes, bwrap
//! `--dev-bind`). Tested exactly: this project's CI has no GPU, so no plan
//! here has run on accelerator hardware.
//!
//! - `docker`: with `[vibesys] attach_accelerator = true`, NVIDIA GPUs go
//!   through the Engine's device requests (driver `nvidia`, the ids of
//!   `CUDA_VISIBLE_DEVICES`, else all), other accelerators (AMD `/dev/kfd`,
//!   `/dev/dri/renderD*`, `[sandbox] devices`) as device nodes.
//! - `host`: the device nodes listed in `CUDA_VISIBLE_DEVICES` (and
//!   `/dev/nvidiactl`, `/dev/nvidia-uvm` with them) and `[sandbox] devices`
//!   are bound into the confinement; the session allow-list passes
//!   `CUDA_VISIBLE_DEVICES`.
//! - `slurm`, `modal`, `skypilot`: never (their editor container is a
//!   control plane without devices).
//! - A host-only backend (`[vibesys] accelerator_backend = "metal"`) runs
//!   the agent on the macOS host under Seatbelt with enforcement required:
//!   [`choose_environment`] chooses it from the backend, never from a flag;
//!   on any other platform the run stays in docker and every agent
//!   container start fails naming why ([`AcceleratorBackend::container_refusal`]).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::RunError;
use crate::environment::RunEnvironment;
use crate::error::Result;

/// What the host offers (probed by [`HostAccelerators::probe`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostAccelerators {
    /// The NVIDIA driver's control node exists (`/dev/nvidiactl`).
    pub nvidia: bool,
    /// The NVIDIA nodes every GPU process needs that exist
    /// (`/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`).
    pub nvidia_shared: Vec<PathBuf>,
    /// Other accelerator device nodes present (`/dev/kfd`, `/dev/dri/renderD*`).
    pub other_nodes: Vec<PathBuf>,
}

impl HostAccelerators {
    /// Looks at `/dev`.
    pub fn probe() -> Self {
        let mut other_nodes = Vec::new();
        if Path::new("/dev/kfd").exists() {
            other_nodes.push(PathBuf::from("/dev/kfd"));
        }
        if let Ok(entries) = std::fs::read_dir("/dev/dri") {
            let mut render: Vec<PathBuf> = entries
                .filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("renderD"))
                .map(|e| e.path())
                .collect();
            render.sort();
            other_nodes.extend(render);
        }
        let nvidia_shared = NVIDIA_SHARED
            .iter()
            .map(PathBuf::from)
            .filter(|p| p.exists())
            .collect();
        Self {
            nvidia: Path::new("/dev/nvidiactl").exists(),
            nvidia_shared,
            other_nodes,
        }
    }
}

/// The NVIDIA nodes shared by every GPU, bound with the GPUs' own.
const NVIDIA_SHARED: [&str; 3] = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"];

/// An Engine device request for NVIDIA GPUs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NvidiaRequest {
    /// The GPU ids (`CUDA_VISIBLE_DEVICES`); `None` means all GPUs.
    pub device_ids: Option<Vec<String>>,
}

/// What reaches the agent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcceleratorPlan {
    /// NVIDIA GPUs through the Engine's device requests (docker only).
    pub nvidia: Option<NvidiaRequest>,
    /// Device nodes bound in (docker: `--device`; host: bound into the
    /// confinement).
    pub device_nodes: Vec<PathBuf>,
    /// The run's accelerator backend (`[vibesys] accelerator_backend`),
    /// kept for resume; a host-only one fails every container start.
    #[serde(default, skip_serializing_if = "AcceleratorBackend::is_portable")]
    pub backend: AcceleratorBackend,
}

impl AcceleratorPlan {
    /// True when nothing is attached.
    pub fn is_empty(&self) -> bool {
        self.nvidia.is_none() && self.device_nodes.is_empty()
    }
}

/// The ids listed in `CUDA_VISIBLE_DEVICES`; `None` when unset, empty when
/// it hides every device (empty, `-1`, `none`).
fn cuda_ids(cuda_visible: Option<&str>) -> Option<Vec<String>> {
    let value = cuda_visible?.trim();
    if value.is_empty() || value == "-1" || value.eq_ignore_ascii_case("none") {
        return Some(Vec::new());
    }
    Some(
        value
            .split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect(),
    )
}

fn check_device(p: &Path) -> Result<()> {
    if !p.starts_with("/dev/") || p.components().any(|c| c.as_os_str() == "..") {
        return Err(RunError::InvalidRunRequest {
            reason: format!(
                "[sandbox] devices entry {} must be a path below /dev/",
                p.display()
            ),
        }
        .into());
    }
    Ok(())
}

/// The accelerator plan of a run in `environment`.
///
/// `attach` is `[vibesys] attach_accelerator`; `cuda_visible` the
/// operator's `CUDA_VISIBLE_DEVICES`; `sandbox_devices` `[sandbox]
/// devices`; `host` what the host offers.
pub fn plan(
    environment: RunEnvironment,
    attach: bool,
    cuda_visible: Option<&str>,
    sandbox_devices: &[PathBuf],
    host: &HostAccelerators,
) -> Result<AcceleratorPlan> {
    for d in sandbox_devices {
        check_device(d)?;
    }
    match environment {
        RunEnvironment::Slurm | RunEnvironment::Modal | RunEnvironment::Skypilot => {
            Ok(AcceleratorPlan::default())
        }
        RunEnvironment::Docker => {
            if !attach {
                return Ok(AcceleratorPlan::default());
            }
            let ids = cuda_ids(cuda_visible);
            let nvidia = match (&ids, host.nvidia) {
                (Some(ids), true) if ids.is_empty() => None,
                (_, true) => Some(NvidiaRequest { device_ids: ids }),
                (_, false) => None,
            };
            let mut device_nodes = host.other_nodes.clone();
            device_nodes.extend(sandbox_devices.iter().cloned());
            device_nodes.sort();
            device_nodes.dedup();
            Ok(AcceleratorPlan {
                nvidia,
                device_nodes,
                backend: AcceleratorBackend::Portable,
            })
        }
        RunEnvironment::Host => {
            let mut device_nodes = Vec::new();
            // Without the NVIDIA driver `CUDA_VISIBLE_DEVICES` names
            // nothing to bind (a stray variable must not fail the run).
            if let Some(ids) = cuda_ids(cuda_visible).filter(|_| host.nvidia)
                && !ids.is_empty()
            {
                for id in &ids {
                    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(RunError::InvalidRunRequest {
                            reason: format!(
                                "CUDA_VISIBLE_DEVICES entry {id:?} names no device node (host confinement binds /dev/nvidiaN by index; list UUID-selected devices in [sandbox] devices)"
                            ),
                        }.into());
                    }
                    device_nodes.push(PathBuf::from(format!("/dev/nvidia{id}")));
                }
                device_nodes.extend(host.nvidia_shared.iter().cloned());
            }
            device_nodes.extend(sandbox_devices.iter().cloned());
            device_nodes.sort();
            device_nodes.dedup();
            Ok(AcceleratorPlan {
                nvidia: None,
                device_nodes,
                backend: AcceleratorBackend::Portable,
            })
        }
    }
}

/// An accelerator backend that decides where the agent runs
/// (`[vibesys] accelerator_backend` of the project's `vibesys.toml`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AcceleratorBackend {
    /// CUDA, ROCm, none: no constraint on the environment.
    #[default]
    Portable,
    /// Apple Metal: only on the macOS host itself.
    Metal,
}

impl AcceleratorBackend {
    /// The name in `vibesys.toml` and `run.json`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Portable => "portable",
            Self::Metal => "metal",
        }
    }

    /// Parses a `[vibesys] accelerator_backend` value.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "portable" => Some(Self::Portable),
            "metal" => Some(Self::Metal),
            _ => None,
        }
    }

    /// True for [`AcceleratorBackend::Portable`].
    pub fn is_portable(&self) -> bool {
        *self == Self::Portable
    }

    /// True when the backend exists only on a host, never in a container
    /// (Metal: only on the macOS host itself).
    pub fn is_host_only(self) -> bool {
        self == Self::Metal
    }

    /// Why a container cannot offer this backend (`None` when it can):
    /// the error of a container start for a run that asked for it.
    pub fn container_refusal(self) -> Option<String> {
        self.is_host_only().then(|| {
            format!(
                "the run's accelerator backend is {} ([vibesys] accelerator_backend), which exists only on the macOS host: a container cannot reach it (on macOS such a run's agent runs on the host under Seatbelt)",
                self.name()
            )
        })
    }
}

/// The run environment for `requested` given the accelerator backend, on
/// the operating system `os` (`std::env::consts::OS`). Metal on macOS runs
/// the agent on the host (under Seatbelt, enforcement required), whatever
/// was requested by default; Metal elsewhere keeps Docker, whose container
/// start then fails (no Metal in a Linux container). A recorded run keeps
/// its environment on resume.
pub fn environment_for_backend(
    requested: Option<RunEnvironment>,
    backend: AcceleratorBackend,
    os: &str,
) -> RunEnvironment {
    match (backend, os) {
        (AcceleratorBackend::Metal, "macos") => RunEnvironment::Host,
        (AcceleratorBackend::Metal, _) => RunEnvironment::Docker,
        (AcceleratorBackend::Portable, _) => requested.unwrap_or_default(),
    }
}

/// Where a run's agent goes, and why when the backend chose it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvironmentChoice {
    /// The run environment.
    pub environment: RunEnvironment,
    /// The accelerator backend that was asked for.
    pub backend: AcceleratorBackend,
    /// The log line when the backend, not the request, decided.
    pub why: Option<String>,
}

/// The one decision of where a run's agent goes: the requested run
/// environment (`--run-environment`, default docker) unless the accelerator
/// backend is host-only ([`environment_for_backend`]); no flag chooses the
/// host for it. `os` is `std::env::consts::OS`.
pub fn choose_environment(
    requested: Option<RunEnvironment>,
    backend: AcceleratorBackend,
    os: &str,
) -> EnvironmentChoice {
    let environment = environment_for_backend(requested, backend, os);
    let why = backend.is_host_only().then(|| {
        let asked = match requested {
            Some(r) if r != environment => format!(" (not {r}, as requested)"),
            _ => String::new(),
        };
        if environment == RunEnvironment::Host {
            format!(
                "the accelerator backend {} runs only on this macOS host: the agent runs in the host run environment{asked}, under Seatbelt with enforcement required",
                backend.name()
            )
        } else {
            format!(
                "the accelerator backend {} exists only on a macOS host, and this is {os}: the run environment is {environment}{asked}, whose agent containers cannot reach it (each fails at its start)",
                backend.name()
            )
        }
    });
    EnvironmentChoice {
        environment,
        backend,
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nvidia_host() -> HostAccelerators {
        HostAccelerators {
            nvidia: true,
            nvidia_shared: NVIDIA_SHARED.iter().map(PathBuf::from).collect(),
            other_nodes: vec![],
        }
    }

    #[test]
    fn docker_attaches_nvidia_through_device_requests_only_when_asked() {
        let p = plan(
            RunEnvironment::Docker,
            false,
            Some("0"),
            &[],
            &nvidia_host(),
        )
        .unwrap();
        assert!(p.is_empty());
        let p = plan(RunEnvironment::Docker, true, None, &[], &nvidia_host()).unwrap();
        assert_eq!(p.nvidia, Some(NvidiaRequest { device_ids: None }));
        let p = plan(
            RunEnvironment::Docker,
            true,
            Some("1, 3"),
            &[],
            &nvidia_host(),
        )
        .unwrap();
        assert_eq!(
            p.nvidia,
            Some(NvidiaRequest {
                device_ids: Some(vec!["1".into(), "3".into()])
            })
        );
        let p = plan(
            RunEnvironment::Docker,
            true,
            Some("-1"),
            &[],
            &nvidia_host(),
        )
        .unwrap();
        assert!(p.nvidia.is_none());
    }

    #[test]
    fn docker_attaches_other_accelerators_as_device_nodes() {
        let host = HostAccelerators {
            nvidia: false,
            nvidia_shared: vec![],
            other_nodes: vec!["/dev/kfd".into(), "/dev/dri/renderD128".into()],
        };
        let p = plan(
            RunEnvironment::Docker,
            true,
            None,
            &["/dev/accel0".into()],
            &host,
        )
        .unwrap();
        assert_eq!(p.nvidia, None);
        assert_eq!(
            p.device_nodes,
            [
                PathBuf::from("/dev/accel0"),
                "/dev/dri/renderD128".into(),
                "/dev/kfd".into()
            ]
        );
    }

    #[test]
    fn control_planes_never_get_devices() {
        for env in [
            RunEnvironment::Slurm,
            RunEnvironment::Modal,
            RunEnvironment::Skypilot,
        ] {
            let p = plan(env, true, Some("0"), &["/dev/kfd".into()], &nvidia_host()).unwrap();
            assert!(p.is_empty(), "{env}");
        }
    }

    #[test]
    fn host_binds_the_listed_nodes() {
        let p = plan(
            RunEnvironment::Host,
            false,
            Some("0,2"),
            &[],
            &nvidia_host(),
        )
        .unwrap();
        assert_eq!(
            p.device_nodes,
            [
                PathBuf::from("/dev/nvidia-uvm"),
                "/dev/nvidia-uvm-tools".into(),
                "/dev/nvidia0".into(),
                "/dev/nvidia2".into(),
                "/dev/nvidiactl".into()
            ]
        );
        assert!(
            plan(RunEnvironment::Host, false, None, &[], &nvidia_host())
                .unwrap()
                .is_empty()
        );
        // No driver: a stray CUDA_VISIBLE_DEVICES binds nothing.
        assert!(
            plan(
                RunEnvironment::Host,
                false,
                Some("0"),
                &[],
                &HostAccelerators::default()
            )
            .unwrap()
            .is_empty()
        );
        let e = plan(
            RunEnvironment::Host,
            false,
            Some("GPU-abc"),
            &[],
            &nvidia_host(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("GPU-abc") && e.contains("[sandbox] devices"),
            "{e}"
        );
        let e = plan(
            RunEnvironment::Host,
            false,
            None,
            &["/etc/passwd".into()],
            &nvidia_host(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("below /dev/"), "{e}");
    }

    #[test]
    fn metal_selects_the_environment_from_the_backend() {
        assert_eq!(
            environment_for_backend(None, AcceleratorBackend::Metal, "macos"),
            RunEnvironment::Host
        );
        assert_eq!(
            environment_for_backend(
                Some(RunEnvironment::Docker),
                AcceleratorBackend::Metal,
                "macos"
            ),
            RunEnvironment::Host
        );
        assert_eq!(
            environment_for_backend(None, AcceleratorBackend::Metal, "linux"),
            RunEnvironment::Docker
        );
        assert_eq!(
            environment_for_backend(
                Some(RunEnvironment::Host),
                AcceleratorBackend::Portable,
                "linux"
            ),
            RunEnvironment::Host
        );
    }

    /// The whole decision table: every request, backend and platform.
    #[test]
    fn the_environment_choice_as_a_table() {
        use crate::environment::ALL_ENVIRONMENTS;
        let requests = std::iter::once(None).chain(ALL_ENVIRONMENTS.iter().copied().map(Some));
        for requested in requests {
            for os in ["macos", "linux", "freebsd"] {
                // Portable: the request (default docker), nothing logged.
                let c = choose_environment(requested, AcceleratorBackend::Portable, os);
                assert_eq!(c.environment, requested.unwrap_or(RunEnvironment::Docker));
                assert_eq!(c.why, None);
                assert_eq!(AcceleratorBackend::Portable.container_refusal(), None);

                // Metal: the macOS host under Seatbelt, whatever was asked;
                // elsewhere docker, whose containers refuse it.
                let c = choose_environment(requested, AcceleratorBackend::Metal, os);
                let why = c.why.clone().unwrap_or_default();
                if os == "macos" {
                    assert_eq!(c.environment, RunEnvironment::Host, "{requested:?}");
                    assert!(
                        why.contains("host run environment")
                            && why.contains("Seatbelt with enforcement required"),
                        "{why}"
                    );
                } else {
                    assert_eq!(c.environment, RunEnvironment::Docker, "{requested:?} {os}");
                    assert!(why.contains(os) && why.contains("cannot reach it"), "{why}");
                }
                match requested {
                    Some(r) if r != c.environment => {
                        assert!(why.contains(&format!("not {r}, as requested")), "{why}");
                    }
                    _ => assert!(!why.contains("as requested"), "{why}"),
                }
                assert_eq!(c.backend, AcceleratorBackend::Metal);
            }
        }
        let refusal = AcceleratorBackend::Metal.container_refusal().unwrap();
        assert!(
            refusal.contains("metal") && refusal.contains("macOS host"),
            "{refusal}"
        );
    }

    #[test]
    fn backend_names_round_trip() {
        for b in [AcceleratorBackend::Portable, AcceleratorBackend::Metal] {
            assert_eq!(AcceleratorBackend::parse(b.name()), Some(b));
            assert_eq!(
                serde_json::to_string(&b).unwrap(),
                format!("\"{}\"", b.name())
            );
        }
        assert_eq!(AcceleratorBackend::parse("Metal"), None);
        assert_eq!(AcceleratorBackend::parse("cuda"), None);
        // A plan without a backend (an older run.json) is portable, and a
        // portable plan writes none.
        let plan: AcceleratorPlan =
            serde_json::from_str(r#"{"nvidia":null,"device_nodes":[]}"#).unwrap();
        assert_eq!(plan.backend, AcceleratorBackend::Portable);
        assert!(!serde_json::to_string(&plan).unwrap().contains("backend"));
    }
}
