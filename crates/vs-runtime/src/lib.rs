//! vs-runtime: the run-state layout below `.vibesys/state/`, candidate
//! worktrees (candidate isolation) and the accuracy gate (trusted
//! evaluation).
//!
//! It also holds the run environments (which command runner and which
//! confinement each uses), the trusted candidate build and the host
//! command broker of the `slurm` run environment ([`broker`]), the
//! dispatch of evaluations to Modal and SkyPilot ([`remote`]), and
//! `vibesys run`: the orchestration of a run's candidates ([`run`]), over
//! the task schema both of these read ([`task`]).

pub mod agent_session;
mod availability;
pub mod broker;
pub mod build;
pub mod build_confine;
mod build_error;
pub mod build_run;
pub mod confine_choice;
pub mod container;
pub mod container_options;
pub mod doctor;
pub mod environment;
mod environment_error;
pub mod environment_report;
mod error;
mod error_chain;
pub mod exec;
mod fsutil;
pub mod gate;
mod gate_difference;
mod gate_error;
pub mod gate_report;
pub mod git;
mod git_error;
pub mod helper_entry;
mod id;
pub mod logging;
pub mod policy_show;
pub mod remote;
pub mod run;
mod run_error;
pub mod run_host;
pub mod session_log;
pub mod settings;
pub mod state;
mod state_error;
pub mod state_report;
pub mod task;
mod time;
pub mod worktree;
mod worktree_error;

pub use build::{BuildCheckout, BuildOutput, BuildRecord, BuildSpec, TrustedBuild};
pub use build_error::BuildError;
pub use environment::{
    Availability, EnvironmentDescription, OpenedEnvironment, RunEnvironment, open_run_environment,
};
pub use environment_error::EnvironmentError;
pub use error::{Result, RuntimeError};
pub use gate::{Change, GateBaseline, GateDifference, GateEntry, GateReport, ProtectedSet};
pub use gate_error::GateError;
pub use git_error::GitError;
pub use id::{CandidateId, RunId};
pub use run_error::RunError;
pub use session_log::SessionEgressLog;
pub use settings::{PolicyFlags, ProjectSettings, StatePaths};
pub use state::{AgentAccess, EntryKind, InitOutcome, ProjectRecord, StateEntry, StateLayout};
pub use state_error::StateError;
pub use worktree::CandidateWorktree;
pub use worktree_error::WorktreeError;
