//! Linux-only mechanisms: seccomp, descriptor plumbing, Landlock, probes.

pub mod fds;
pub mod landlock_apply;
pub mod netns;
pub mod parent_death;
pub mod pids;
pub mod probe;
pub mod reap;
pub mod seccomp;
pub mod sock_owner;
pub mod spawn;
pub mod stdio_relay;
pub mod supervise;
