//! vs-docker: vs-sandbox's policy lowered to a Docker container, driven
//! over the Engine API (bollard; no `docker` CLI in the code path).
//!
//! [`DockerPlan`] is the pure lowering (mounts, masks, security options)
//! that `vibesys policy show --backend docker` prints; [`DockerSandbox`]
//! starts the container from it and is both a [`vs_sandbox::Confinement`]
//! (`wrap` launches agent turns through `vibesys internal-docker-attach`)
//! and a [`vs_sandbox::CommandRunner`] (`execute` runs the framework's own
//! commands through the exec API).
//!
//! vs-sandbox's `select` stays the one place that turns a mode into a
//! backend: the caller hands it [`DockerOptions`] (a
//! [`vs_sandbox::ContainerBackend`]) in `ConfineRequest::docker`, and it
//! lowers them into a [`PlannedContainer`] and starts the
//! [`DockerSandbox`] through vs-sandbox's container traits ([`backend`]).
//! The container's side of the command channel ([`serve_commands`], the
//! static vibesys in the container) and the attach helper ([`attach`])
//! are here too; the binary dispatches to them.

mod argv;
mod attach;
pub mod backend;
mod channel;
mod engine;
mod env;
mod execute;
mod lifecycle;
mod load;
#[cfg(target_os = "linux")]
mod mount_check;
mod plan;
mod plan_text;
mod procs;
mod sandbox;
mod server;
mod static_elf;
mod tty;
mod verify;
pub mod wire;

pub use attach::{AttachRequest, attach};
pub use engine::{Engine, engine_socket};
pub use env::{DEFAULT_ENV_ALLOW, EnvAllowList, is_credential_name, redacted};
pub use load::{LoadReport, load};
pub use plan::{
    DeviceAccess, DockerOptions, DockerPlan, ExecuteVia, ExtraMount, GpuSelection, IMAGE_LABEL,
    ImagePin, LIFELINE, MountRole, PlannedContainer, PlannedDevice, PlannedDeviceRequest,
    PlannedMount, RUN_ID_LABEL, container_name, current_user, default_mask_root, docker_report,
    valid_run_id,
};
pub use sandbox::DockerSandbox;
pub use server::serve as serve_commands;
pub use static_elf::{StaticElfError, check_static_executable};
pub use vs_sandbox::{DockerError, EndPhase};
