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
//! - A host-only backend (Metal, macOS) runs the agent on the host under
//!   Seatbelt with enforcement required: [`environment_for_backend`]
//!   chooses it from the backend, never from a flag.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::environment::RunEnvironment;
use crate::error::{Result, RuntimeError};

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
        return Err(RuntimeError::InvalidRunRequest {
            reason: format!(
                "[sandbox] devices entry {} must be a path below /dev/",
                p.display()
            ),
        });
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
                        return Err(RuntimeError::InvalidRunRequest {
                            reason: format!(
                                "CUDA_VISIBLE_DEVICES entry {id:?} names no device node (host confinement binds /dev/nvidiaN by index; list UUID-selected devices in [sandbox] devices)"
                            ),
                        });
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
            })
        }
    }
}

/// An accelerator backend that decides where the agent runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AcceleratorBackend {
    /// CUDA, ROCm, none: no constraint on the environment.
    Portable,
    /// Apple Metal: only on the macOS host itself.
    Metal,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
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
}
