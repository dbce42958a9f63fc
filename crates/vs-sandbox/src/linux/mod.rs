//! Linux-only mechanisms: seccomp, descriptor plumbing, Landlock, probes.

pub mod fds;
pub mod landlock_apply;
pub mod netns;
pub mod probe;
pub mod seccomp;
pub mod sock_owner;
