//! Checking, inside a started container, that each bind landed where it
//! was planned and holds what was checked: the target is reached from the
//! container's root with no symlink on the way, it is the root of a mount,
//! and it is the very file the plan checked before the start (device and
//! inode). A swap of the source (the Engine follows symlinks) or of an
//! ancestor of the target (so the mount lands elsewhere) fails the check.

use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags, StatxAttributes, StatxFlags};

use vs_sandbox::error::SandboxError;
use vs_sandbox::policy::PathKind;

/// The identity of a file: device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: (u32, u32),
    ino: u64,
}

fn statx_id(fd: &std::os::fd::OwnedFd) -> rustix::io::Result<(FileId, rustix::fs::Statx)> {
    let st = rustix::fs::statx(
        fd,
        "",
        AtFlags::EMPTY_PATH,
        StatxFlags::TYPE | StatxFlags::INO,
    )?;
    Ok((
        FileId {
            dev: (st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
        },
        st,
    ))
}

/// Opens `root/rel` race-free (see `vs_sandbox::open_beneath`) and returns its
/// identity.
pub fn identify(root: &Path, rel: &Path, kind: PathKind) -> Result<FileId, SandboxError> {
    let fd = vs_sandbox::open_beneath(root, rel, kind)?;
    statx_id(&fd)
        .map(|(id, _)| id)
        .map_err(|e| SandboxError::RaceDetected {
            path: root.join(rel),
            reason: format!("cannot inspect it: {e}"),
        })
}

/// The identity of an operator-owned file (a mask, the command server),
/// following symlinks as the Engine does for a bind source outside the
/// workspace.
pub fn identify_path(path: &Path) -> Result<FileId, SandboxError> {
    let fd = rustix::fs::open(path, OFlags::PATH | OFlags::CLOEXEC, Mode::empty())
        .and_then(|fd| statx_id(&fd))
        .map_err(|e| SandboxError::RaceDetected {
            path: path.to_path_buf(),
            reason: format!("cannot inspect it: {e}"),
        })?;
    Ok(fd.0)
}

/// Checks that `target` (absolute, as seen in the container) is, from the
/// container's root `proc_root` (`/proc/PID/root`), reached with no symlink,
/// the root of a mount, and the file `expected`.
pub fn verify_mounted(
    proc_root: &Path,
    target: &Path,
    expected: FileId,
) -> Result<(), SandboxError> {
    let race = |reason: String| SandboxError::RaceDetected {
        path: target.to_path_buf(),
        reason,
    };
    let root = rustix::fs::open(
        proc_root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        race(format!(
            "cannot open the container's root {proc_root:?}: {e}"
        ))
    })?;
    let rel = target.strip_prefix("/").unwrap_or(target);
    let fd = rustix::fs::openat2(
        &root,
        rel,
        OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
    )
    .map_err(|e| {
        race(format!(
            "is not reachable in the container without a symlink: {e}"
        ))
    })?;
    let (found, st) = statx_id(&fd).map_err(|e| race(format!("cannot inspect it: {e}")))?;
    let mount_root = st.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT)
        && st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT);
    if !mount_root {
        return Err(race(
            "was not mounted in the container where planned (an ancestor was swapped during the start)".into(),
        ));
    }
    if found != expected {
        return Err(race(
            "was mounted with other content than was checked (its source was swapped during the start)".into(),
        ));
    }
    Ok(())
}
