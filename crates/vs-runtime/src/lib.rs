//! vs-runtime: the run-state layout below `.vibesys/state/`, candidate
//! worktrees (candidate isolation) and the accuracy gate (trusted
//! evaluation).
//!
//! Run environments, the trusted candidate build and the Slurm broker will
//! live here as well (see crates/README.md).

mod error;
mod fsutil;
pub mod gate;
mod git;
mod id;
pub mod state;
mod time;
pub mod worktree;

pub use error::{Result, RuntimeError};
pub use gate::{Change, GateBaseline, GateDifference, GateEntry, GateReport, ProtectedSet};
pub use id::{CandidateId, RunId};
pub use state::{AgentAccess, EntryKind, InitOutcome, ProjectRecord, StateEntry, StateLayout};
pub use worktree::CandidateWorktree;
