//! `DockerSandbox`: the policy lowered to a Docker container, driven over
//! the Engine API (bollard; no `docker` CLI in the code path).
//!
//! [`DockerPlan`] is the pure lowering (mounts, masks, security options)
//! that `vibesys policy show --backend docker` prints; [`DockerSandbox`]
//! starts the container from it and is both a [`crate::Confinement`]
//! (`wrap` launches agent turns through `vibesys internal-docker-attach`)
//! and a [`crate::CommandRunner`] (`execute` runs the framework's own
//! commands through the exec API).

mod argv;
mod attach;
mod channel;
mod engine;
mod env;
pub(crate) mod error;
mod execute;
mod lifecycle;
mod load;
mod plan;
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
pub use error::{DockerError, EndPhase};
pub use load::{LoadReport, load};
pub use plan::{
    DeviceAccess, DockerOptions, DockerPlan, ExecuteVia, ExtraMount, GpuSelection, IMAGE_LABEL,
    ImagePin, LIFELINE, MountRole, PlannedDevice, PlannedDeviceRequest, PlannedMount, RUN_ID_LABEL,
    container_name, current_user, default_mask_root, docker_report, valid_run_id,
};
pub use sandbox::DockerSandbox;
pub use server::serve as serve_commands;
pub use static_elf::{StaticElfError, check_static_executable};
