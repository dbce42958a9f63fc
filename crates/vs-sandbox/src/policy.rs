//! `ProjectPathPolicy`: workspace-relative read-only and hidden paths.
//!
//! Pure data and validation: no I/O beyond resolving paths, no
//! `cfg(target_os)`, no backend types. Lexical rules are checked when a
//! policy is built; [`ProjectPathPolicy::resolve`] checks them again after
//! resolving symlinks against a [`Workspace`].

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use crate::error::{PolicyError, ResolvedOverlap};

/// A validated workspace-relative path: relative, not empty, no `..`,
/// normalised (no `.` components, no trailing slash), UTF-8 without NUL
/// or newline (so it can be printed, passed to bwrap and put in profiles).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct WorkspaceRelPath(PathBuf);

impl WorkspaceRelPath {
    /// Parses and normalises a workspace-relative path.
    pub fn new(path: impl AsRef<Path>) -> Result<Self, PolicyError> {
        let raw = path.as_ref();
        let Some(text) = raw.to_str() else {
            return Err(PolicyError::BadCharacters {
                path: raw.to_path_buf(),
            });
        };
        if text.contains(['\0', '\n', '\r']) {
            return Err(PolicyError::BadCharacters {
                path: raw.to_path_buf(),
            });
        }
        if text.trim().is_empty() {
            return Err(PolicyError::Empty);
        }
        let mut normal = PathBuf::new();
        for component in raw.components() {
            match component {
                Component::Normal(part) => normal.push(part),
                Component::CurDir => {}
                Component::ParentDir => {
                    return Err(PolicyError::ParentComponent {
                        path: raw.to_path_buf(),
                    });
                }
                Component::RootDir | Component::Prefix(_) => {
                    return Err(PolicyError::Absolute {
                        path: raw.to_path_buf(),
                    });
                }
            }
        }
        if normal.as_os_str().is_empty() {
            return Err(PolicyError::Empty);
        }
        Ok(Self(normal))
    }

    /// The path as a `Path`.
    pub fn as_path(&self) -> &Path {
        &self.0
    }

    /// True when `self` lies strictly below `other`.
    pub fn is_strictly_below(&self, other: &Self) -> bool {
        self.0 != other.0 && self.0.starts_with(&other.0)
    }
}

impl fmt::Display for WorkspaceRelPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.display().fmt(f)
    }
}

impl AsRef<Path> for WorkspaceRelPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// How the agent may use a policy path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Visible, but writes fail.
    ReadOnly,
    /// Shows as an empty directory or file; writes fail.
    Hidden,
}

impl Access {
    /// The name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Access::ReadOnly => "read-only",
            Access::Hidden => "hidden",
        }
    }
}

/// The workspace-relative read-only and hidden paths of a project.
///
/// Built through [`ProjectPathPolicy::new`], which applies the lexical
/// rules; [`ProjectPathPolicy::resolve`] applies the file-system rules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProjectPathPolicy {
    read_only: Vec<WorkspaceRelPath>,
    hidden: Vec<WorkspaceRelPath>,
}

impl ProjectPathPolicy {
    /// A policy with no paths. It never touches the file system.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Builds a policy, rejecting empty, absolute, `..`, duplicate and
    /// overlapping paths (a hidden path may sit below a read-only one).
    pub fn new<R, H>(read_only: R, hidden: H) -> Result<Self, PolicyError>
    where
        R: IntoIterator,
        R::Item: AsRef<Path>,
        H: IntoIterator,
        H::Item: AsRef<Path>,
    {
        let read_only = read_only
            .into_iter()
            .map(WorkspaceRelPath::new)
            .collect::<Result<Vec<_>, _>>()?;
        let hidden = hidden
            .into_iter()
            .map(WorkspaceRelPath::new)
            .collect::<Result<Vec<_>, _>>()?;
        let policy = Self { read_only, hidden };
        check_nesting(policy.entries().map(|(p, a)| (p.as_path(), p.as_path(), a)))?;
        Ok(policy)
    }

    /// The union of two policies, validated again as a whole.
    pub fn merge(&self, other: &Self) -> Result<Self, PolicyError> {
        Self::new(
            self.read_only.iter().chain(&other.read_only),
            self.hidden.iter().chain(&other.hidden),
        )
    }

    /// True when the policy lists no path.
    pub fn is_empty(&self) -> bool {
        self.read_only.is_empty() && self.hidden.is_empty()
    }

    /// The read-only paths, in the order given.
    pub fn read_only(&self) -> &[WorkspaceRelPath] {
        &self.read_only
    }

    /// The hidden paths, in the order given.
    pub fn hidden(&self) -> &[WorkspaceRelPath] {
        &self.hidden
    }

    /// Every entry with its access, read-only first.
    pub fn entries(&self) -> impl Iterator<Item = (&WorkspaceRelPath, Access)> {
        self.read_only
            .iter()
            .map(|p| (p, Access::ReadOnly))
            .chain(self.hidden.iter().map(|p| (p, Access::Hidden)))
    }

    /// Resolves every path against the workspace: each must exist, stay
    /// inside it after resolving symlinks, and be a regular file or a
    /// directory; the nesting rules are checked again on resolved paths.
    /// An empty policy returns at once without touching the file system.
    pub fn resolve(&self, workspace: &Workspace) -> Result<ResolvedPolicy, PolicyError> {
        self.resolve_planned(workspace, &[])
    }

    /// As [`ProjectPathPolicy::resolve`], except that a path of `planned`
    /// that does not exist yet is resolved as the directory a launch will
    /// create there (below its nearest existing ancestor, which must lie
    /// in the workspace): what a show prints without writing.
    pub fn resolve_planned(
        &self,
        workspace: &Workspace,
        planned: &[PathBuf],
    ) -> Result<ResolvedPolicy, PolicyError> {
        let mut entries = Vec::with_capacity(self.read_only.len() + self.hidden.len());
        for (rel, access) in self.entries() {
            let entry = match resolve_one(workspace, rel, access) {
                Err(PolicyError::NotFound { .. }) if planned.iter().any(|p| p == rel.as_path()) => {
                    planned_dir(workspace, rel, access)?
                }
                other => other?,
            };
            entries.push(entry);
        }
        check_nesting(
            entries
                .iter()
                .map(|e| (e.rel.as_path(), e.resolved_rel.as_path(), e.access)),
        )?;
        // Mount order: parents before children, so a hidden path below a
        // read-only one is masked after the read-only bind.
        entries.sort_by(|a, b| {
            a.host
                .components()
                .count()
                .cmp(&b.host.components().count())
                .then_with(|| a.host.cmp(&b.host))
        });
        Ok(ResolvedPolicy {
            workspace: workspace.clone(),
            entries,
        })
    }
}

/// Checks duplicates and nesting. Each item is (as written, compared form,
/// access); the compared form is the resolved one after resolution.
fn check_nesting<'a>(
    items: impl Iterator<Item = (&'a Path, &'a Path, Access)>,
) -> Result<(), PolicyError> {
    let list: Vec<_> = items.collect();
    for (i, &(written_a, a, access_a)) in list.iter().enumerate() {
        for &(written_b, b, access_b) in &list[i + 1..] {
            let duplicate = a == b;
            let a_below_b = !duplicate && a.starts_with(b);
            let b_below_a = !duplicate && b.starts_with(a);
            if !(duplicate || a_below_b || b_below_a) {
                continue;
            }
            let hidden_below_read_only =
                (a_below_b && access_a == Access::Hidden && access_b == Access::ReadOnly)
                    || (b_below_a && access_b == Access::Hidden && access_a == Access::ReadOnly);
            if hidden_below_read_only {
                continue;
            }
            if written_a != a || written_b != b {
                return Err(PolicyError::ResolvedOverlap(Box::new(ResolvedOverlap {
                    first: written_a.to_path_buf(),
                    first_kind: access_a.name(),
                    first_resolved: a.to_path_buf(),
                    second: written_b.to_path_buf(),
                    second_kind: access_b.name(),
                    second_resolved: b.to_path_buf(),
                })));
            }
            if duplicate {
                return Err(PolicyError::Duplicate {
                    path: a.to_path_buf(),
                    first: access_a.name(),
                    second: access_b.name(),
                });
            }
            let (outer, outer_access, inner, inner_access) = if a_below_b {
                (b, access_b, a, access_a)
            } else {
                (a, access_a, b, access_b)
            };
            return Err(PolicyError::Overlap {
                outer: outer.to_path_buf(),
                outer_kind: outer_access.name(),
                inner: inner.to_path_buf(),
                inner_kind: inner_access.name(),
            });
        }
    }
    Ok(())
}

/// A directory that does not exist yet, below its nearest existing
/// ancestor (canonical, inside the workspace).
fn planned_dir(
    workspace: &Workspace,
    rel: &WorkspaceRelPath,
    access: Access,
) -> Result<ResolvedEntry, PolicyError> {
    let mut existing = workspace.root.join(rel.as_path());
    let mut missing = Vec::new();
    while std::fs::symlink_metadata(&existing).is_err() {
        let (Some(name), Some(parent)) = (existing.file_name(), existing.parent()) else {
            break;
        };
        missing.push(name.to_owned());
        existing = parent.to_path_buf();
    }
    let base = crate::realpath::canonicalize(&existing).map_err(|source| PolicyError::Io {
        path: rel.as_path().to_path_buf(),
        source,
    })?;
    let host = missing.iter().rev().fold(base, |p, n| p.join(n));
    let resolved_rel = match host.strip_prefix(&workspace.root) {
        Ok(r) if !r.as_os_str().is_empty() => r.to_path_buf(),
        _ => {
            return Err(PolicyError::EscapesWorkspace {
                path: rel.as_path().to_path_buf(),
                resolved: host,
                workspace: workspace.root.clone(),
            });
        }
    };
    Ok(ResolvedEntry {
        rel: rel.clone(),
        resolved_rel,
        host,
        kind: PathKind::Directory,
        access,
    })
}

fn resolve_one(
    workspace: &Workspace,
    rel: &WorkspaceRelPath,
    access: Access,
) -> Result<ResolvedEntry, PolicyError> {
    let joined = workspace.root.join(rel.as_path());
    let host = match crate::realpath::canonicalize(&joined) {
        Ok(p) => p,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(match std::fs::symlink_metadata(&joined) {
                // A dangling symlink: say where it points.
                Ok(meta) if meta.file_type().is_symlink() => PolicyError::EscapesWorkspace {
                    path: rel.as_path().to_path_buf(),
                    resolved: std::fs::read_link(&joined).unwrap_or_default(),
                    workspace: workspace.root.clone(),
                },
                _ => PolicyError::NotFound {
                    path: rel.as_path().to_path_buf(),
                    workspace: workspace.root.clone(),
                },
            });
        }
        Err(source) => {
            return Err(PolicyError::Io {
                path: rel.as_path().to_path_buf(),
                source,
            });
        }
    };
    let Ok(resolved_rel) = host.strip_prefix(&workspace.root) else {
        return Err(PolicyError::EscapesWorkspace {
            path: rel.as_path().to_path_buf(),
            resolved: host,
            workspace: workspace.root.clone(),
        });
    };
    if resolved_rel.as_os_str().is_empty() {
        return Err(PolicyError::IsWorkspaceRoot {
            path: rel.as_path().to_path_buf(),
            workspace: workspace.root.clone(),
        });
    }
    let resolved_rel = resolved_rel.to_path_buf();
    let meta = std::fs::metadata(&host).map_err(|source| PolicyError::Io {
        path: rel.as_path().to_path_buf(),
        source,
    })?;
    let ft = meta.file_type();
    let kind = if ft.is_dir() {
        if access == Access::Hidden && !is_framework_state(&resolved_rel) {
            check_hidden_links(&workspace.root, rel, &host)?;
        }
        PathKind::Directory
    } else if ft.is_file() {
        if meta.nlink() > 1 {
            return Err(PolicyError::HardLinked {
                path: rel.as_path().to_path_buf(),
                access: access.name(),
                links: meta.nlink(),
                other: other_link(&workspace.root, None, &host, meta.dev(), meta.ino()),
            });
        }
        PathKind::File
    } else {
        let found = file_type_name(&ft);
        return Err(PolicyError::UnsupportedType {
            path: rel.as_path().to_path_buf(),
            resolved: host,
            found,
        });
    };
    Ok(ResolvedEntry {
        rel: rel.clone(),
        resolved_rel,
        host,
        kind,
        access,
    })
}

/// The run state vibesys itself keeps below the project
/// (`.vibesys/state/...`, vs-runtime's layout): hidden by every policy,
/// written only by the framework, never linked out of by it, and large
/// (candidate worktrees and evaluation checkouts with their build trees),
/// so [`check_hidden_links`] does not walk it before every launch.
const FRAMEWORK_STATE: &str = ".vibesys/state";

/// Whether `resolved` (workspace-relative, symlinks resolved) lies in the
/// framework's own run state.
fn is_framework_state(resolved: &Path) -> bool {
    resolved.starts_with(FRAMEWORK_STATE) && resolved != Path::new(FRAMEWORK_STATE)
}

/// The most entries [`check_hidden_links`] walks below the hidden
/// directories of one policy path; a larger one is refused.
pub const HIDDEN_WALK_LIMIT: usize = 100_000;

/// Refuses a hidden directory that holds a regular file with more than
/// one hard link (its content would stay readable through the other
/// name), naming the other name when it lies in the workspace. The walk
/// follows no symlink and stops with an error past [`HIDDEN_WALK_LIMIT`]
/// entries: a directory it cannot check is not hidden on trust.
fn check_hidden_links(root: &Path, rel: &WorkspaceRelPath, dir: &Path) -> Result<(), PolicyError> {
    check_hidden_links_within(root, rel, dir, HIDDEN_WALK_LIMIT)
}

fn check_hidden_links_within(
    root: &Path,
    rel: &WorkspaceRelPath,
    dir: &Path,
    limit: usize,
) -> Result<(), PolicyError> {
    let mut seen = 0usize;
    // (dev, ino) of each file with more than one link: a name, the link
    // count, the names found here.
    let mut linked: std::collections::HashMap<(u64, u64), (PathBuf, u64, u64)> =
        std::collections::HashMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        // A subdirectory the caller cannot list is not skipped: a file in
        // it (reachable by name when the directory is searchable) may have
        // its other name in the project, which the agent reads.
        let entries = match std::fs::read_dir(&current) {
            Ok(entries) => entries,
            Err(source) => {
                return Err(PolicyError::Io {
                    path: current.strip_prefix(root).unwrap_or(&current).to_path_buf(),
                    source,
                });
            }
        };
        for entry in entries {
            let entry = entry.map_err(|source| PolicyError::Io {
                path: current.strip_prefix(root).unwrap_or(&current).to_path_buf(),
                source,
            })?;
            seen += 1;
            if seen > limit {
                return Err(PolicyError::HiddenTooLarge {
                    dir: rel.as_path().to_path_buf(),
                    limit,
                });
            }
            let ft = match entry.file_type() {
                Ok(ft) => ft,
                Err(_) => continue,
            };
            if ft.is_dir() {
                stack.push(entry.path());
                continue;
            }
            if !ft.is_file() {
                continue;
            }
            // Not followed: the entry itself (a symlink is not a file here).
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            if meta.nlink() > 1 {
                let names = linked
                    .entry((meta.dev(), meta.ino()))
                    .or_insert_with(|| (entry.path(), meta.nlink(), 0));
                names.2 += 1;
            }
        }
    }
    // A file all of whose names lie in the hidden directory (cargo's
    // target/ links its outputs) hides as well as any other.
    let mut escaping: Vec<_> = linked
        .into_iter()
        .filter(|(_, (_, links, found))| *found < *links)
        .collect();
    escaping.sort_by(|a, b| a.1.0.cmp(&b.1.0));
    if let Some(((dev, ino), (path, links, _))) = escaping.into_iter().next() {
        return Err(PolicyError::HiddenHardLinked {
            dir: rel.as_path().to_path_buf(),
            file: path.strip_prefix(root).unwrap_or(&path).to_path_buf(),
            links,
            other: other_link(root, Some(dir), &path, dev, ino),
        });
    }
    Ok(())
}

/// Another name of the file `(dev, ino)` inside `root`, apart from `not`
/// and anything below `skip`, relative to `root`. The walk stays on one
/// file system, follows no symlink and gives up after a bounded number of
/// entries (it only serves an error message).
fn other_link(root: &Path, skip: Option<&Path>, not: &Path, dev: u64, ino: u64) -> Option<PathBuf> {
    const MAX_ENTRIES: usize = 200_000;
    let mut seen = 0usize;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                return None;
            }
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            let path = entry.path();
            if meta.dev() != dev {
                continue;
            }
            if meta.is_dir() {
                if skip != Some(path.as_path()) {
                    stack.push(path);
                }
            } else if meta.ino() == ino && path != not {
                return path.strip_prefix(root).ok().map(Path::to_path_buf);
            }
        }
    }
    None
}

/// Names a file type for messages ("fifo", "symlink", ...).
pub fn file_type_name(ft: &std::fs::FileType) -> &'static str {
    if ft.is_symlink() {
        "symlink"
    } else if ft.is_dir() {
        "directory"
    } else if ft.is_file() {
        "regular file"
    } else if ft.is_fifo() {
        "fifo"
    } else if ft.is_socket() {
        "socket"
    } else if ft.is_block_device() {
        "block device"
    } else if ft.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}

/// A workspace: an existing directory, held by its canonical path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    /// Canonicalises `path` and checks that it is a directory.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PolicyError> {
        let path = path.as_ref();
        let root = crate::realpath::canonicalize(path).map_err(|e| PolicyError::BadWorkspace {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
        if !root.is_dir() {
            return Err(PolicyError::BadWorkspace {
                path: path.to_path_buf(),
                reason: "not a directory".into(),
            });
        }
        if root.to_str().is_none_or(|s| s.contains(['\n', '\r'])) {
            return Err(PolicyError::BadWorkspace {
                path: path.to_path_buf(),
                reason: "its path contains a newline or invalid UTF-8".into(),
            });
        }
        if root == Path::new("/") {
            return Err(PolicyError::BadWorkspace {
                path: path.to_path_buf(),
                reason: "the file-system root cannot be a workspace".into(),
            });
        }
        Ok(Self { root })
    }

    /// The canonical absolute path of the workspace.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// What a resolved policy path is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PathKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
}

/// One policy path after resolution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedEntry {
    /// The path as written in the policy.
    pub rel: WorkspaceRelPath,
    /// Where it resolves, relative to the workspace root.
    pub resolved_rel: PathBuf,
    /// Where it resolves, absolute on the host.
    pub host: PathBuf,
    /// File or directory.
    pub kind: PathKind,
    /// Read-only or hidden.
    pub access: Access,
}

/// A policy validated against a workspace; what backends lower.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedPolicy {
    workspace: Workspace,
    entries: Vec<ResolvedEntry>,
}

impl ResolvedPolicy {
    /// The workspace the policy was resolved against.
    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// Entries ordered parents first (mount order).
    pub fn entries(&self) -> &[ResolvedEntry] {
        &self.entries
    }

    /// The directories strictly between the workspace root and each entry
    /// that are not themselves entries nor inside a read-only entry (whose
    /// read-only mount already forbids renaming what is below it). Bound
    /// onto themselves, they become mount points: renaming or removing one
    /// fails (`EBUSY`), so no protected path can be moved away with its
    /// parent. Absolute host paths, parents first.
    pub fn ancestors(&self) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = Vec::new();
        for entry in &self.entries {
            let mut prefix = PathBuf::new();
            let mut parts: Vec<_> = entry.resolved_rel.components().collect();
            parts.pop();
            for part in parts {
                prefix.push(part);
                let covered = self.entries.iter().any(|e| {
                    e.resolved_rel == prefix
                        || (e.access == Access::ReadOnly && prefix.starts_with(&e.resolved_rel))
                });
                let host = self.workspace.root.join(&prefix);
                if !covered && !found.contains(&host) {
                    found.push(host);
                }
            }
        }
        found.sort_by(|a, b| {
            a.components()
                .count()
                .cmp(&b.components().count())
                .then_with(|| a.cmp(b))
        });
        found
    }

    /// Entries with the given access.
    pub fn with_access(&self, access: Access) -> impl Iterator<Item = &ResolvedEntry> {
        self.entries.iter().filter(move |e| e.access == access)
    }
}

/// Metadata directories protected as whole mount points, so they cannot
/// be renamed away and replaced.
pub const METADATA_DIRS: &[&str] = &[".git", ".hg", ".svn", ".jj"];

/// The metadata directories (or `.git` files of linked worktrees) present
/// at the workspace root.
pub fn metadata_paths(workspace: &Workspace) -> Vec<PathBuf> {
    METADATA_DIRS
        .iter()
        .map(|name| workspace.root.join(OsStr::new(name)))
        .filter(|p| {
            std::fs::symlink_metadata(p)
                .map(|m| m.is_dir() || m.is_file())
                .unwrap_or(false)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hidden_sec() -> (tempfile::TempDir, Workspace, WorkspaceRelPath) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sec/deep")).unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("sec/deep/f{i}")), "x").unwrap();
        }
        let ws = Workspace::open(dir.path()).unwrap();
        (dir, ws, WorkspaceRelPath::new("sec").unwrap())
    }

    #[test]
    fn the_framework_state_is_not_walked_for_hard_links() {
        assert!(is_framework_state(Path::new(".vibesys/state/local")));
        assert!(is_framework_state(Path::new(".vibesys/state/runs")));
        assert!(!is_framework_state(Path::new(".vibesys/state")));
        assert!(!is_framework_state(Path::new(".vibesys/stateful")));
        assert!(!is_framework_state(Path::new("sec")));
    }

    #[test]
    fn a_hard_link_below_a_hidden_directory_is_refused_by_name() {
        let (dir, ws, rel) = hidden_sec();
        let policy = ProjectPathPolicy::new::<[&str; 0], _>([], ["sec"]).unwrap();
        policy.resolve(&ws).unwrap();
        std::fs::hard_link(dir.path().join("sec/deep/f3"), dir.path().join("src/copy")).unwrap();
        let err = policy.resolve(&ws).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(&err, PolicyError::HiddenHardLinked { file, other: Some(o), links: 2, .. }
                if file == Path::new("sec/deep/f3") && o == Path::new("src/copy")),
            "{text}"
        );
        assert!(text.contains("\"src/copy\", in the project"), "{text}");
        // Names that all lie in the hidden directory hide together.
        std::fs::remove_file(dir.path().join("src/copy")).unwrap();
        std::fs::hard_link(
            dir.path().join("sec/deep/f3"),
            dir.path().join("sec/f3-again"),
        )
        .unwrap();
        policy.resolve(&ws).unwrap();
        std::fs::hard_link(dir.path().join("sec/deep/f3"), dir.path().join("src/third")).unwrap();
        let err = policy.resolve(&ws).unwrap_err();
        assert!(
            matches!(&err, PolicyError::HiddenHardLinked { other: Some(o), links: 3, .. }
                if o == Path::new("src/third")),
            "{err}"
        );
        // Read-only directories are not walked.
        let read_only = ProjectPathPolicy::new(["sec"], [] as [&str; 0]).unwrap();
        read_only.resolve(&ws).unwrap();
        let _ = rel;
    }

    #[test]
    fn a_hidden_directory_past_the_walk_bound_is_refused() {
        let (dir, ws, rel) = hidden_sec();
        let sec = dir.path().join("sec");
        // sec/deep and its five files: six entries.
        check_hidden_links_within(ws.root(), &rel, &sec, 6).unwrap();
        let err = check_hidden_links_within(ws.root(), &rel, &sec, 5).unwrap_err();
        assert!(
            matches!(err, PolicyError::HiddenTooLarge { limit: 5, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("more than 5 entries"), "{err}");
    }
}
