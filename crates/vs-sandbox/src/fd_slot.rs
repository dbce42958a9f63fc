//! The descriptors a bwrap plan reads, created by the launcher right
//! before bwrap runs, and how a slot is written on the launch helper's
//! command line.

use std::ffi::OsString;
use std::path::PathBuf;

use serde::Serialize;

use crate::policy::PathKind;

/// The first descriptor number a plan uses.
pub const FIRST_SLOT_FD: i32 = 3;

/// A descriptor bwrap reads, created by the launcher right before exec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "slot")]
pub enum FdSlot {
    /// The seccomp BPF program (`--seccomp`).
    Seccomp,
    /// An empty stream, the content of a hidden file (`--ro-bind-data`).
    Empty,
    /// A path of the workspace, opened `O_PATH` beneath `root` with no
    /// symlink on the way (`openat2` with `RESOLVE_BENEATH |
    /// RESOLVE_NO_SYMLINKS`), checked on that descriptor to be `kind`, and
    /// bound from it (`--bind-fd`, `--ro-bind-fd`): what is mounted is what
    /// was checked, whatever the agent swaps in the meantime.
    Bind {
        /// The workspace root (canonical).
        root: PathBuf,
        /// The path below it (`.` for the root itself), as resolved by the
        /// policy: no symlink may remain in it.
        rel: PathBuf,
        /// What it must be.
        kind: PathKind,
    },
}

impl FdSlot {
    /// A short description for `policy show`: `seccomp`, `empty`,
    /// `bind-dir:REL`, `bind-file:REL`.
    pub fn describe(&self) -> String {
        match self {
            Self::Seccomp => "seccomp".into(),
            Self::Empty => "empty".into(),
            Self::Bind { rel, kind, .. } => match kind {
                PathKind::Directory => format!("bind-dir:{}", rel.display()),
                PathKind::File => format!("bind-file:{}", rel.display()),
            },
        }
    }

    /// The slot as arguments of the launch helper (`--fd` precedes each).
    pub fn to_args(&self) -> Vec<OsString> {
        match self {
            Self::Seccomp => vec!["seccomp".into()],
            Self::Empty => vec!["empty".into()],
            Self::Bind { root, rel, kind } => vec![
                match kind {
                    PathKind::Directory => "bind-dir",
                    PathKind::File => "bind-file",
                }
                .into(),
                root.clone().into_os_string(),
                rel.clone().into_os_string(),
            ],
        }
    }

    /// Parses one slot written by [`FdSlot::to_args`], taking what it
    /// needs from `args`. `None` for an unknown or incomplete slot.
    pub fn parse_args(args: &mut impl Iterator<Item = OsString>) -> Option<Self> {
        let name = args.next()?;
        match name.to_str()? {
            "seccomp" => Some(Self::Seccomp),
            "empty" => Some(Self::Empty),
            kind @ ("bind-dir" | "bind-file") => {
                let root = PathBuf::from(args.next()?);
                let rel = PathBuf::from(args.next()?);
                if !root.is_absolute() || rel.is_absolute() {
                    return None;
                }
                let kind = if kind == "bind-dir" {
                    PathKind::Directory
                } else {
                    PathKind::File
                };
                Some(Self::Bind { root, rel, kind })
            }
            _ => None,
        }
    }
}
