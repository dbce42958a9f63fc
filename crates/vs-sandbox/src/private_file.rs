//! A file bound read-write at a path other than its own: a vibesys-owned
//! copy standing in for a user's file inside the sandbox (Claude Code's
//! `~/.claude.json`), so that what the agent writes there never reaches
//! the user's file.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// A private copy and where the confined process sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrivateFile {
    /// The vibesys-owned directory holding the copy (absolute; the copy is
    /// opened beneath it with no symlink on the way).
    pub dir: PathBuf,
    /// The copy's name inside `dir`: one normal component.
    pub name: PathBuf,
    /// The absolute path the confined process sees it at.
    pub target: PathBuf,
}

impl PrivateFile {
    /// The copy's host path.
    pub fn source(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// True when the parts have the expected shape: absolute `dir` and
    /// `target`, a `name` of exactly one normal component.
    pub fn is_well_formed(&self) -> bool {
        let mut parts = self.name.components();
        self.dir.is_absolute()
            && self.target.is_absolute()
            && matches!(parts.next(), Some(std::path::Component::Normal(_)))
            && parts.next().is_none()
    }

    /// True when `path` lies at or below the copy's directory.
    pub fn dir_contains(&self, path: &Path) -> bool {
        path.starts_with(&self.dir)
    }
}
