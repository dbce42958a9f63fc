//! The host command broker of the `slurm` run environment (DESIGN.md
//! section 7): a host-owned process that the editor container reaches over
//! two Unix sockets and that submits Slurm jobs.
//!
//! - [`protocol`]: the typed, versioned wire format both ends use.
//! - [`settings`]: what the broker trusts (the operator's `vibesys.toml`
//!   and flags), never anything a client sends.
//! - [`slurm`]: the exact `srun`, `squeue`, `scancel`, `sinfo` commands.
//! - [`confine`]: `HostJobConfinement`, the agent job's bwrap plan.
//! - [`host_job`]: `internal-host-job`, that plan applied on the compute node.
//! - [`server`]: sockets, the start-up probe, serving, cancelling
//!   ([`signals`]: stopped by SIGTERM or SIGINT).
//! - [`client`]: `vibesys broker job|gate`.

pub mod child;
pub mod client;
pub mod confine;
pub mod host_job;
pub mod protocol;
pub mod server;
pub mod settings;
pub mod signals;
pub mod slurm;

use std::path::{Path, PathBuf};

pub use confine::{HostJobConfinement, allocated_gpu_devices};
pub use protocol::{Final, Request};
pub use server::{Broker, Role, ShutdownHandle};
pub use settings::{BrokerFlags, BrokerSettings, JobNetwork};

use crate::state::StateLayout;

/// Everything that can stop the broker or its client.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BrokerError {
    /// An operating-system call failed.
    #[error("cannot {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The operator's configuration is invalid.
    #[error("invalid broker configuration {path}: {reason}")]
    Config {
        /// The file (or project) concerned.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A Slurm client tool is not installed.
    #[error(
        "{tool} was not found in PATH; install Slurm's client tools (Debian: apt-get install slurm-client)"
    )]
    SlurmMissing {
        /// The tool.
        tool: String,
    },
    /// A Slurm command failed.
    #[error("{command} failed: {message}")]
    SlurmCommand {
        /// The command line.
        command: String,
        /// Its error output (bounded).
        message: String,
    },
    /// The cluster has no node that can take jobs.
    #[error(
        "slurm reports no usable compute node (sinfo shows every node down, drained or absent)"
    )]
    NoNodes,
    /// The start-up probe found a node where confinement cannot be enforced.
    #[error(
        "host confinement cannot be enforced on compute node {node}: {cause}; the broker does not start (there is no unconfined fallback)"
    )]
    ProbeFailed {
        /// The node.
        node: String,
        /// What the probe found.
        cause: String,
    },
    /// The agent job's confinement could not be planned.
    #[error("cannot confine the job: {reason}")]
    Confinement {
        /// Why.
        reason: String,
    },
    /// A job variable given to the client is not `KEY=VALUE`.
    #[error("--env {item:?} is not KEY=VALUE")]
    BadVariable {
        /// The variable as given.
        item: String,
    },
    /// The protocol was violated.
    #[error(transparent)]
    Protocol(#[from] protocol::ProtocolError),
}

/// Whether a request variable may reach a job: never Slurm's own
/// (`SLURM_*`), the broker's (`VIBESYS_*`), a container's identity or the
/// session's `XDG_*` directories, nor the scratch variables the
/// confinement sets itself.
pub fn env_allowed(name: &str) -> bool {
    const DENIED: &[&str] = &[
        "HOME",
        "HOSTNAME",
        "container",
        "container_uuid",
        "TMPDIR",
        "TMP",
        "TEMP",
    ];
    const DENIED_PREFIXES: &[&str] = &[
        "SLURM_",
        "SBATCH_",
        "SRUN_",
        "SALLOC_",
        "VIBESYS_",
        "XDG_",
        "DOCKER_",
        "PODMAN_",
        "KUBERNETES_",
        "MUNGE_",
    ];
    !name.is_empty()
        && !DENIED.contains(&name)
        && !DENIED_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Where a job may run: the directory, resolved (symlinks included), must
/// lie inside the workspace. Returns the sandbox's workspace (the project,
/// or the candidate worktree of `run` holding the directory) and the
/// resolved directory.
pub fn resolve_cwd(
    project: &Path,
    run: &crate::id::RunId,
    cwd: Option<&Path>,
) -> Result<(PathBuf, PathBuf), String> {
    let Some(cwd) = cwd else {
        return Ok((project.to_path_buf(), project.to_path_buf()));
    };
    if !cwd.is_absolute() {
        return Err(format!(
            "working directory {} is not an absolute path",
            cwd.display()
        ));
    }
    let resolved = std::fs::canonicalize(cwd).map_err(|e| {
        format!(
            "working directory {} cannot be resolved: {e}",
            cwd.display()
        )
    })?;
    if !resolved.is_dir() {
        return Err(format!(
            "working directory {} is not a directory",
            cwd.display()
        ));
    }
    if !resolved.starts_with(project) {
        return Err(format!(
            "working directory {} resolves to {}, outside the workspace {}",
            cwd.display(),
            resolved.display(),
            project.display()
        ));
    }
    let candidates = project.join(StateLayout::candidates_rel(run));
    if let Ok(rest) = resolved.strip_prefix(&candidates)
        && let Some(first) = rest.components().next()
    {
        return Ok((candidates.join(first.as_os_str()), resolved));
    }
    Ok((project.to_path_buf(), resolved))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_filter() {
        for bad in [
            "SLURM_JOB_ID",
            "VIBESYS_X",
            "XDG_RUNTIME_DIR",
            "HOSTNAME",
            "container",
            "TMPDIR",
            "",
        ] {
            assert!(!env_allowed(bad), "{bad}");
        }
        for good in ["FOO", "CUDA_LAUNCH_BLOCKING", "PYTHONPATH"] {
            assert!(env_allowed(good), "{good}");
        }
    }
}
