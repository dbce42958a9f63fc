//! After the container starts and before anything of the agent runs in it:
//! every bind of the plan must sit where planned and hold what was checked
//! (see `linux::mount_check`). The Engine resolves bind sources by path and
//! follows symlinks, and a process racing the start could swap a path of
//! the workspace; the check turns such a race into a refused start.

#[cfg(target_os = "linux")]
use std::path::{Path, PathBuf};

use crate::error::SandboxError;
#[cfg(target_os = "linux")]
use crate::policy::PathKind;
use crate::policy::ResolvedPolicy;

use super::plan::DockerPlan;
#[cfg(target_os = "linux")]
use super::plan::MountRole;

/// What each bind must be, identified before the container is created.
#[derive(Debug, Default)]
pub(super) struct Expected {
    #[cfg(target_os = "linux")]
    binds: Vec<(PathBuf, crate::linux::mount_check::FileId)>,
}

/// Identifies each bind's source: workspace paths race-free beneath the
/// workspace root (no symlink on the way), masks and the command server by
/// their operator-owned paths.
#[cfg(target_os = "linux")]
pub(super) fn identify(
    policy: &ResolvedPolicy,
    plan: &DockerPlan,
) -> Result<Expected, SandboxError> {
    use crate::linux::mount_check::{identify, identify_path};
    let root = policy.workspace().root();
    let mut binds = Vec::with_capacity(plan.mounts.len());
    for m in &plan.mounts {
        let kind = if m.source.is_dir() {
            PathKind::Directory
        } else {
            PathKind::File
        };
        let id = match m.role {
            MountRole::Workspace => identify(root, Path::new("."), PathKind::Directory)?,
            MountRole::Metadata | MountRole::Ancestor | MountRole::ReadOnly => {
                let rel = m
                    .source
                    .strip_prefix(root)
                    .map_err(|_| SandboxError::RaceDetected {
                        path: m.source.clone(),
                        reason: "is not inside the workspace".into(),
                    })?;
                identify(root, rel, kind)?
            }
            MountRole::MaskDir
            | MountRole::MaskFile
            | MountRole::CommandServer
            | MountRole::Extra => identify_path(&m.source)?,
        };
        binds.push((m.target.clone(), id));
    }
    Ok(Expected { binds })
}

/// Checks every bind in the container whose first process is `pid`.
#[cfg(target_os = "linux")]
pub(super) fn verify(expected: &Expected, pid: i64) -> Result<(), SandboxError> {
    let proc_root = PathBuf::from(format!("/proc/{pid}/root"));
    for (target, id) in &expected.binds {
        crate::linux::mount_check::verify_mounted(&proc_root, target, *id)?;
    }
    Ok(())
}

/// Elsewhere the Engine runs in a virtual machine whose mounts the host
/// cannot inspect: nothing is identified (the report names the gap).
#[cfg(not(target_os = "linux"))]
pub(super) fn identify(
    _policy: &ResolvedPolicy,
    _plan: &DockerPlan,
) -> Result<Expected, SandboxError> {
    Ok(Expected::default())
}

/// See the Linux version; nothing to check elsewhere.
#[cfg(not(target_os = "linux"))]
pub(super) fn verify(_expected: &Expected, _pid: i64) -> Result<(), SandboxError> {
    Ok(())
}
