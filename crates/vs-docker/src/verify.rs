//! After the container starts and before anything of the agent runs in it:
//! every bind of the plan must sit where planned and hold what was checked
//! (see `linux::mount_check`). The Engine resolves bind sources by path and
//! follows symlinks, and a process racing the start could swap a path of
//! the workspace; the check turns such a race into a refused start.

#[cfg(target_os = "linux")]
use std::path::{Path, PathBuf};

use vs_sandbox::error::SandboxError;
#[cfg(target_os = "linux")]
use vs_sandbox::policy::PathKind;
use vs_sandbox::policy::ResolvedPolicy;

use crate::plan::DockerPlan;
#[cfg(target_os = "linux")]
use crate::plan::MountRole;

/// What each bind must be, identified before the container is created.
#[derive(Debug, Default)]
pub(super) struct Expected {
    #[cfg(target_os = "linux")]
    binds: Vec<(PathBuf, crate::mount_check::FileId)>,
}

/// Identifies each bind's source: workspace paths race-free beneath the
/// workspace root (no symlink on the way), masks and the command server by
/// their operator-owned paths.
#[cfg(target_os = "linux")]
pub(super) fn identify(
    policy: &ResolvedPolicy,
    plan: &DockerPlan,
) -> Result<Expected, SandboxError> {
    use crate::mount_check::{identify, identify_path};
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

/// How long the container's first process may stay uninspectable after
/// the Engine reported it started (see [`wait_inspectable`]).
#[cfg(target_os = "linux")]
const INSPECTABLE_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Checks every bind in the container whose first process is `pid`.
#[cfg(target_os = "linux")]
pub(super) fn verify(expected: &Expected, pid: i64) -> Result<(), SandboxError> {
    let proc_root = PathBuf::from(format!("/proc/{pid}/root"));
    wait_inspectable(&proc_root, INSPECTABLE_WITHIN);
    for (target, id) in &expected.binds {
        crate::mount_check::verify_mounted(&proc_root, target, *id)?;
    }
    Ok(())
}

/// Waits (at most `within`) until `proc_root` (`/proc/PID/root`) opens,
/// while opening it is refused (EACCES, EPERM). The Engine reports a
/// container started once the runtime's init was told to execute the
/// first program, which may not have happened yet: until it does, that
/// init is not dumpable, and the kernel lets only a caller with
/// `CAP_SYS_PTRACE` (root) open its root. An operator who reaches the
/// Engine through the `docker` group would be refused at random. Any
/// other outcome returns at once; the check that follows reports it.
#[cfg(target_os = "linux")]
fn wait_inspectable(proc_root: &Path, within: std::time::Duration) {
    use rustix::fs::{Mode, OFlags};
    let end = std::time::Instant::now() + within;
    loop {
        match rustix::fs::open(
            proc_root,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Err(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM)
                if std::time::Instant::now() < end =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            _ => return,
        }
    }
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
