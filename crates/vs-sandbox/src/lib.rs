//! vs-sandbox: the one project path policy, host resources, operator
//! controls, the confinement trait with its backends, and command runners.
//!
//! Flow: build a [`ProjectPathPolicy`] (lexical rules), resolve it against
//! a [`Workspace`] (file-system rules), gather [`HostResources`], resolve
//! the operator's choice for the purpose and the run environment
//! ([`OperatorChoice::resolve`]), then lower the policy with the backend
//! [`select`] chooses for the mode ([`HostSandbox`], [`LandlockSandbox`],
//! [`SeatbeltSandbox`], or the container the caller hands in, vs-docker's
//! `DockerSandbox`, through [`ContainerBackend`]; as one [`AnySandbox`])
//! into a plan that can be
//! printed or run.

pub mod bwrap;
pub mod config;
pub mod confinement;
pub mod container;
pub mod controls;
pub mod defaults;
pub mod docker_error;
pub mod doctor;
pub mod egress;
pub mod error;
pub mod exit_codes;
pub mod explain;
pub mod fd_slot;
pub mod fsread;
pub mod helper;
pub mod landlock;
pub mod landlock_rules;
pub mod launch;
pub mod limits;
#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::fds::open_beneath;
mod plan_description;
pub mod policy;
pub mod private_file;
pub mod proc_cover;
pub mod process;
pub mod realpath;
pub mod resolve;
pub mod resources;
pub mod runner;
pub mod seatbelt;
pub mod select;
pub mod syscall_rules;

pub use bwrap::{BwrapOptions, BwrapPlan, HostSandbox};
pub use confinement::{Confinement, EnforcementReport, PathEnforcement};
pub use container::{ContainerBackend, ContainerPlan, ContainerSandbox};
pub use controls::{ConfineMode, Enforcement, SandboxUnavailableError};
pub use docker_error::{DockerError, EndPhase};
pub use error::{PolicyError, SandboxError};
pub use helper::Helper;
pub use landlock::{LandlockOptions, LandlockPlan, LandlockSandbox};
pub use limits::ProcessLimit;
pub use policy::{Access, ProjectPathPolicy, ResolvedPolicy, Workspace, WorkspaceRelPath};
pub use private_file::PrivateFile;
pub use resolve::{OperatorChoice, Purpose, Resolved, RunPlace};
pub use resources::HostResources;
pub use runner::{CommandResult, CommandRunner, CommandSpec, LocalShellRunner, RunnerError};
pub use seatbelt::{SeatbeltPlan, SeatbeltSandbox};
pub use select::{AnySandbox, Backend, ConfineRequest, Plan, ProviderState, plan, select};
