//! Descriptor plumbing for launching bwrap: create the plan's descriptors
//! (seccomp program, empty mask contents), place them at 3, 4, ... in the
//! child, and close every other inherited descriptor.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::error::SandboxError;
use crate::fd_slot::{FIRST_SLOT_FD, FdSlot};

/// A pipe whose read end yields `data` then EOF (data must fit the pipe
/// buffer: the seccomp program is a few hundred bytes).
fn pipe_with(data: &[u8]) -> Result<OwnedFd, SandboxError> {
    let (reader, mut writer) = std::io::pipe().map_err(|source| SandboxError::Os {
        what: "creating a pipe".into(),
        source,
    })?;
    writer.write_all(data).map_err(|source| SandboxError::Os {
        what: "writing to a pipe".into(),
        source,
    })?;
    drop(writer);
    Ok(reader.into())
}

/// Opens `root/rel` as an `O_PATH` descriptor: the root without following
/// a symlink, `rel` beneath it with no symlink on the way and no escape
/// (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`), then
/// checks on the descriptor that it is a `kind`. bwrap binds that very
/// descriptor, so a path swapped for a symlink after this check binds
/// nothing the policy did not name.
pub fn open_beneath(
    root: &std::path::Path,
    rel: &std::path::Path,
    kind: crate::policy::PathKind,
) -> Result<OwnedFd, SandboxError> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let fail = |what: &str, err: rustix::io::Errno| SandboxError::RaceDetected {
        path: root.join(rel),
        reason: format!("{what}: {err}"),
    };
    let root_fd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| fail("the workspace root is no longer a directory", e))?;
    let fd = if rel == std::path::Path::new(".") {
        root_fd
    } else {
        rustix::fs::openat2(
            &root_fd,
            rel,
            OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
            ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        )
        .map_err(|e| {
            fail(
                "it is no longer a path of the workspace without symlinks",
                e,
            )
        })?
    };
    let stat = rustix::fs::fstat(&fd).map_err(|e| fail("cannot inspect it", e))?;
    let file_type = rustix::fs::FileType::from_raw_mode(stat.st_mode);
    let ok = match kind {
        crate::policy::PathKind::Directory => file_type == rustix::fs::FileType::Directory,
        crate::policy::PathKind::File => {
            file_type == rustix::fs::FileType::RegularFile && stat.st_nlink <= 1
        }
    };
    if !ok {
        return Err(SandboxError::RaceDetected {
            path: root.join(rel),
            reason: format!(
                "it changed after the policy was checked: it is now a {file_type:?} with {} links, not a {} with one",
                stat.st_nlink,
                match kind {
                    crate::policy::PathKind::Directory => "directory",
                    crate::policy::PathKind::File => "regular file",
                }
            ),
        });
    }
    Ok(fd)
}

/// Duplicates `fd` to the lowest free number >= `min`, close-on-exec.
fn dup_at_least(fd: &OwnedFd, min: RawFd) -> Result<OwnedFd, SandboxError> {
    crate::process::fd::dup_at_least(fd.as_fd(), min).map_err(|source| SandboxError::Os {
        what: "duplicating a descriptor".into(),
        source,
    })
}

/// Descriptors to place at 3, 4, ... in a child.
#[derive(Debug)]
pub struct SlotFds {
    fds: Vec<OwnedFd>,
}

impl SlotFds {
    /// Creates the descriptors a plan's slots name, followed by `extra`.
    pub fn prepare(slots: &[FdSlot], extra: Vec<OwnedFd>) -> Result<Self, SandboxError> {
        let mut fds = Vec::with_capacity(slots.len() + extra.len());
        let mut seccomp: Option<Vec<u8>> = None;
        for slot in slots {
            let fd = match slot {
                FdSlot::Seccomp => {
                    if seccomp.is_none() {
                        seccomp = Some(super::seccomp::program_bytes()?);
                    }
                    pipe_with(seccomp.as_deref().unwrap_or_default())?
                }
                FdSlot::Empty => pipe_with(&[])?,
                FdSlot::Bind { root, rel, kind } => open_beneath(root, rel, *kind)?,
            };
            fds.push(fd);
        }
        fds.extend(extra);
        // Move every source above the target range, so placing one never
        // overwrites another.
        let min = FIRST_SLOT_FD + fds.len() as RawFd;
        let fds = fds
            .iter()
            .map(|fd| dup_at_least(fd, min))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { fds })
    }

    /// Descriptors already moved clear of the slots (see
    /// [`SlotFds::into_fds`]).
    pub fn from_fds(fds: Vec<OwnedFd>) -> Self {
        Self { fds }
    }

    /// The descriptors, in slot order, for a launcher that places them
    /// itself.
    pub fn into_fds(self) -> Vec<OwnedFd> {
        self.fds
    }

    /// The descriptor number the next extra descriptor gets in the child.
    pub fn count(&self) -> usize {
        self.fds.len()
    }

    /// A command for `argv` whose child gets the descriptors at 3, 4, ...,
    /// no other inherited descriptor, and SIGKILL when its parent dies.
    pub fn command(self, argv: &[OsString]) -> Result<Command, SandboxError> {
        let Some((program, args)) = argv.split_first() else {
            return Err(SandboxError::InvalidCommand("the command is empty".into()));
        };
        let mut cmd = Command::new(program);
        cmd.args(args);
        let raw: Vec<RawFd> = self.fds.iter().map(AsRawFd::as_raw_fd).collect();
        let keep = self.fds;
        // SAFETY: the closure only calls async-signal-safe functions
        // (dup2, syscall, prctl) on plain integers captured by value.
        unsafe {
            cmd.pre_exec(move || {
                // `keep` lives as long as the command, so the sources stay
                // open until the child is spawned and close with it.
                let _ = &keep;
                for (i, fd) in raw.iter().enumerate() {
                    if libc::dup2(*fd, FIRST_SLOT_FD + i as RawFd) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                close_from(FIRST_SLOT_FD + raw.len() as RawFd);
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        Ok(cmd)
    }
}

/// Marks every descriptor from `first` up close-on-exec (async-signal-safe).
pub(crate) fn close_from(first: RawFd) {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range with CLOEXEC only sets flags on descriptors of
    // this process; errors are handled by the fallback below.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if r == 0 {
        return;
    }
    // Older kernels: walk up to the descriptor limit.
    // SAFETY: getrlimit/fcntl on this process's own descriptors.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur.min(65536) as RawFd
        } else {
            1024
        };
        for fd in first..max {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}
