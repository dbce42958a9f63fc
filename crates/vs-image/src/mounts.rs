//! The mount points container runtimes expect in an image.
//!
//! Docker and Podman create a missing mount point themselves (in their
//! writable container layer); Charliecloud's `ch-run` binds onto the image
//! as it is, read-only, and fails on a missing destination (`can't bind:
//! destination not found`); enroot and Apptainer create what they need in
//! their own copy or overlay. So every image carries the points itself,
//! added as empty directories and files of the top layer wherever the
//! content (or the spec's extra files) does not provide the path: same spec
//! and content, same entries, same digests.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::input::{Entry, Group, Kind, Stamp};

/// Name of the group (and SBOM package) holding the added mount points.
pub(crate) const GROUP: &str = "runtime mount points";

/// One mount point an image carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MountPoint {
    /// Absolute path in the image.
    pub path: &'static str,
    /// A directory (else an empty regular file).
    pub dir: bool,
    /// Permission bits.
    pub mode: u32,
    /// Which runtime binds or mounts onto it.
    pub why: &'static str,
}

const fn dir(path: &'static str, mode: u32, why: &'static str) -> MountPoint {
    MountPoint {
        path,
        dir: true,
        mode,
        why,
    }
}

const fn file(path: &'static str, why: &'static str) -> MountPoint {
    MountPoint {
        path,
        dir: false,
        mode: 0o644,
        why,
    }
}

/// The mount points added to every image (unless the spec says
/// `mount_points = false`), sorted by path.
pub const MOUNT_POINTS: &[MountPoint] = &[
    dir(
        "/dev",
        0o755,
        "every runtime: devtmpfs or the host's /dev (ch-run: required)",
    ),
    file(
        "/etc/group",
        "ch-run binds its own group file (required unless --no-passwd)",
    ),
    file(
        "/etc/hosts",
        "Docker, Podman, enroot, ch-run bind the host's or their own",
    ),
    file(
        "/etc/passwd",
        "ch-run binds its own passwd file (required unless --no-passwd)",
    ),
    file(
        "/etc/resolv.conf",
        "Docker, Podman, enroot, ch-run bind the host's or their own",
    ),
    dir(
        "/home",
        0o755,
        "ch-run --home mounts a tmpfs here; Apptainer binds $HOME below it",
    ),
    dir(
        "/mnt",
        0o755,
        "ch-run and Apptainer bind site paths here by convention",
    ),
    dir(
        "/proc",
        0o755,
        "every runtime mounts procfs (ch-run: required)",
    ),
    dir(
        "/run",
        0o755,
        "Podman (/run/.containerenv), systemd-style tmpfs",
    ),
    dir(
        "/sys",
        0o755,
        "every runtime mounts sysfs (ch-run: required)",
    ),
    dir(
        "/tmp",
        0o1777,
        "ch-run binds the host's /tmp (required); a tmpfs elsewhere",
    ),
];

/// What the content holds at the paths that matter here: for each path,
/// whether it is a directory.
#[derive(Debug, Default)]
pub(crate) struct Seen(BTreeMap<String, bool>);

impl Seen {
    /// Records `path` (relative, no leading `/`) if it is a mount point or
    /// a parent of one; `dir` tells whether it is a directory.
    pub(crate) fn note(&mut self, path: &str, dir: bool) {
        // Mount points are at most two levels deep; most entries of a big
        // tree are rejected by their length alone.
        if path.len() > 16 {
            return;
        }
        let wanted = MOUNT_POINTS.iter().any(|m| {
            let rel = &m.path[1..];
            rel == path
                || rel
                    .rsplit_once('/')
                    .is_some_and(|(parent, _)| parent == path)
        });
        if wanted {
            // The first word about a path wins: a real entry is noted
            // before any synthetic parent at the same path.
            self.0.entry(path.to_owned()).or_insert(dir);
        }
    }

    /// Records every entry of a group, its parents included.
    pub(crate) fn note_group(&mut self, g: &Group) {
        for e in g.entries.iter().chain(&g.parents) {
            self.note(&e.path, matches!(e.kind, Kind::Dir));
        }
    }

    /// Records an input path of unknown content (a store path that is not
    /// read): itself as a non-directory (nothing is added below it), its
    /// parents as directories.
    pub(crate) fn note_opaque(&mut self, abs: &str) {
        let rel = abs.trim_start_matches('/');
        self.note(rel, false);
        for (i, _) in rel.match_indices('/') {
            self.note(&rel[..i], true);
        }
    }

    fn get(&self, path: &str) -> Option<bool> {
        self.0.get(path).copied()
    }
}

/// The group of mount points the content lacks, or `None` when it lacks
/// none. A path the content holds in any form (a file, a symlink, a
/// directory) is left alone, and nothing is added below a parent that the
/// content holds as something other than a directory (e.g. `/etc` as a
/// symlink).
pub(crate) fn group(seen: &Seen) -> Option<Group> {
    let mut entries = Vec::new();
    let mut parents: Vec<Entry> = Vec::new();
    for m in MOUNT_POINTS {
        let rel = &m.path[1..];
        if seen.get(rel).is_some() {
            continue;
        }
        if let Some((parent, _)) = rel.rsplit_once('/') {
            match seen.get(parent) {
                Some(false) => continue,
                Some(true) => {}
                None => {
                    if !parents.iter().any(|p| p.path == parent) {
                        parents.push(Entry::dir(parent.to_owned(), 0o755));
                    }
                }
            }
        }
        entries.push(Entry {
            path: rel.to_owned(),
            kind: if m.dir {
                Kind::Dir
            } else {
                Kind::Inline(Vec::new())
            },
            mode: m.mode,
            stamp: Stamp::default(),
        });
    }
    if entries.is_empty() {
        return None;
    }
    Some(Group {
        name: GROUP.to_owned(),
        host_root: Arc::from(Path::new("/")),
        parents,
        entries,
        size: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(g: &Option<Group>) -> Vec<String> {
        g.as_ref()
            .map(|g| {
                g.parents
                    .iter()
                    .chain(&g.entries)
                    .map(|e| format!("{} {:o}", e.path, e.mode))
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn sorted_and_absolute() {
        let mut sorted: Vec<&str> = MOUNT_POINTS.iter().map(|m| m.path).collect();
        sorted.sort_unstable();
        assert_eq!(
            sorted,
            MOUNT_POINTS.iter().map(|m| m.path).collect::<Vec<_>>()
        );
        assert!(MOUNT_POINTS.iter().all(|m| m.path.starts_with('/')));
    }

    #[test]
    fn empty_content_gets_every_mount_point() {
        let g = group(&Seen::default());
        assert_eq!(
            paths(&g),
            [
                "etc 755",
                "dev 755",
                "etc/group 644",
                "etc/hosts 644",
                "etc/passwd 644",
                "etc/resolv.conf 644",
                "home 755",
                "mnt 755",
                "proc 755",
                "run 755",
                "sys 755",
                "tmp 1777",
            ]
        );
    }

    #[test]
    fn what_the_content_holds_is_left_alone() {
        let mut s = Seen::default();
        s.note("tmp", false); // a symlink, say
        s.note("etc", true);
        s.note("etc/passwd", false);
        s.note("usr/share/doc/very/deep/path", false);
        s.note("home", true);
        let g = paths(&group(&s));
        assert!(
            !g.iter()
                .any(|p| p.starts_with("tmp") || p.starts_with("home"))
        );
        assert!(
            !g.iter()
                .any(|p| p.starts_with("etc/passwd") || p == "etc 755")
        );
        assert!(g.contains(&"etc/hosts 644".to_owned()));
    }

    #[test]
    fn nothing_is_added_below_a_non_directory() {
        let mut s = Seen::default();
        s.note("etc", false);
        let g = paths(&group(&s));
        assert!(!g.iter().any(|p| p.starts_with("etc")), "{g:?}");
    }

    #[test]
    fn store_paths_are_opaque() {
        let mut s = Seen::default();
        s.note_opaque("/nix/store/abc-x");
        s.note_opaque("/run/current");
        let g = paths(&group(&s));
        assert!(!g.iter().any(|p| p.starts_with("run")), "{g:?}");
        assert!(g.contains(&"proc 755".to_owned()));
    }

    #[test]
    fn a_full_rootfs_needs_nothing() {
        let mut s = Seen::default();
        for m in MOUNT_POINTS {
            s.note(&m.path[1..], m.dir);
        }
        s.note("etc", true);
        assert!(group(&s).is_none());
    }
}
