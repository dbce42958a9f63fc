//! The one process layer: how vibesys starts, bounds, supervises and ends
//! the processes it runs, for the confinement backends and for
//! [`crate::LocalShellRunner`] alike.
//!
//! - [`lookup`]: finding a program in a `PATH`, as `execvp` does.
//! - [`spawn`] and [`supervise`]: a confined launch (the child's raw
//!   set-up between fork and exec, the subreaper supervisor, signal
//!   forwarding).
//! - [`pids`] and [`tree`]: the process limit (a pids cgroup per run) and
//!   killing and reaping what a command leaves behind.
//! - [`status`]: how a process ended ([`Exit`]), one reading of wait
//!   statuses and exit codes.
//! - [`piped_run`]: a command under a per-run supervisor, its standard
//!   streams pipes to vibesys ([`crate::LocalShellRunner`]'s launch).
//! - [`parent_death`], [`stdio_relay`]: a child that dies with vibesys;
//!   standard descriptors relayed through pipes.
//! - [`fd`], [`sigpipe`]: descriptors between vibesys and its children
//!   (pipes, non-blocking reads and writes, `poll`); writing to a child
//!   that may be gone.
//!
//! Everything here that calls the kernel directly (`unsafe`) stays in this
//! module tree; callers use safe functions.

#[cfg(target_os = "linux")]
pub(crate) mod fd;
#[cfg(target_os = "linux")]
pub mod parent_death;
#[cfg(target_os = "linux")]
pub mod pids;
#[cfg(target_os = "linux")]
pub(crate) mod piped_run;
#[cfg(target_os = "linux")]
pub(crate) mod sigpipe;
#[cfg(target_os = "linux")]
pub mod spawn;
#[cfg(target_os = "linux")]
pub mod stdio_relay;
#[cfg(target_os = "linux")]
pub mod supervise;
#[cfg(target_os = "linux")]
pub mod tree;

pub(crate) mod lookup;
pub mod status;

pub use status::Exit;
