//! Reading inputs (a root directory, host paths, store paths) into groups of
//! normalised entries. A group is the unit of layering and caching: a store
//! path, or a piece of a host tree.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::Error;

/// Trees larger than this are split into several groups (root and host
/// paths only; a store path is always one group).
pub(crate) const SPLIT_BYTES: u64 = 8 << 20;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    /// A host file, copied when the layer is written.
    File {
        src: PathBuf,
        size: u64,
        dev: u64,
        ino: u64,
        nlink: u64,
    },
    /// Content given inline (extra files of the spec).
    Inline(Vec<u8>),
    Symlink(String),
}

/// Cheap change detection for the layer cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Stamp {
    pub mtime: i64,
    pub mtime_ns: i64,
    pub ctime: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
}

/// One entry of a layer: `path` is relative to `/`, without trailing `/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub path: String,
    pub kind: Kind,
    pub mode: u32,
    pub stamp: Stamp,
}

impl Entry {
    pub(crate) fn dir(path: String, mode: u32) -> Self {
        Self {
            path,
            kind: Kind::Dir,
            mode,
            stamp: Stamp::default(),
        }
    }

    pub(crate) fn size(&self) -> u64 {
        match &self.kind {
            Kind::File { size, .. } => *size,
            Kind::Inline(b) => b.len() as u64,
            _ => 0,
        }
    }
}

/// A unit of layering: its entries plus the directories above it.
#[derive(Debug, Clone)]
pub(crate) struct Group {
    /// Display name: the absolute path of the subtree (`/` for a root).
    pub name: String,
    /// Directories above the group, outermost first.
    pub parents: Vec<Entry>,
    pub entries: Vec<Entry>,
    /// Bytes of file content (informational).
    #[allow(dead_code)]
    pub size: u64,
}

/// Normalised permission bits: directories 0755 (1777 when sticky), files
/// 0755 when owner-executable else 0644; setuid/setgid kept only if allowed.
pub(crate) fn normalize_mode(raw: u32, is_dir: bool, allow_setuid: bool) -> u32 {
    if is_dir {
        return if raw & 0o1000 != 0 { 0o1777 } else { 0o755 };
    }
    let base = if raw & 0o100 != 0 { 0o755 } else { 0o644 };
    if allow_setuid {
        base | (raw & 0o6000)
    } else {
        base
    }
}

struct Scanner {
    allow_setuid: bool,
    split: u64,
}

fn utf8(p: &Path) -> Result<&str, Error> {
    p.to_str().ok_or_else(|| Error::InputPath {
        path: p.to_owned(),
        reason: "not valid UTF-8".to_owned(),
    })
}

fn stamp(m: &std::fs::Metadata) -> Stamp {
    Stamp {
        mtime: m.mtime(),
        mtime_ns: m.mtime_nsec(),
        ctime: m.ctime(),
        ctime_ns: m.ctime_nsec(),
        ino: m.ino(),
        dev: m.dev(),
    }
}

/// Refuses a symlink target that leaves `/` when resolved from the link.
pub(crate) fn check_symlink(link: &str, target: &str) -> Result<(), Error> {
    let escape = || Error::Escapes {
        what: "symlink",
        path: format!("/{link}"),
        target: target.to_owned(),
    };
    if target.is_empty() || target.contains('\0') {
        return Err(escape());
    }
    let mut depth: i64 = if target.starts_with('/') {
        0
    } else {
        link.split('/').count() as i64 - 1
    };
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                depth -= 1;
                if depth < 0 {
                    return Err(escape());
                }
            }
            _ => depth += 1,
        }
    }
    Ok(())
}

impl Scanner {
    fn entry(&self, host: &Path, img: String) -> Result<Entry, Error> {
        let m = std::fs::symlink_metadata(host).map_err(|e| Error::io("stat", host, e))?;
        self.entry_with(host, img, &m)
    }

    /// Like [`Scanner::entry`] with metadata already read (`DirEntry`
    /// metadata is a `statx` relative to the directory: no path walk).
    fn entry_with(&self, host: &Path, img: String, m: &std::fs::Metadata) -> Result<Entry, Error> {
        let ft = m.file_type();
        let kind = if ft.is_dir() {
            Kind::Dir
        } else if ft.is_file() {
            Kind::File {
                src: host.to_owned(),
                size: m.len(),
                dev: m.dev(),
                ino: m.ino(),
                nlink: m.nlink(),
            }
        } else if ft.is_symlink() {
            let t = std::fs::read_link(host).map_err(|e| Error::io("read link", host, e))?;
            let t = utf8(&t)?.to_owned();
            check_symlink(&img, &t)?;
            Kind::Symlink(t)
        } else {
            let kind = if ft.is_block_device() || ft.is_char_device() {
                "device"
            } else if ft.is_socket() {
                "socket"
            } else {
                "fifo"
            };
            return Err(Error::UnsupportedFileType {
                path: host.to_owned(),
                kind,
            });
        };
        let mode = match kind {
            Kind::Symlink(_) => 0o777,
            _ => normalize_mode(m.mode(), ft.is_dir(), self.allow_setuid),
        };
        Ok(Entry {
            path: img,
            kind,
            mode,
            stamp: stamp(m),
        })
    }

    /// Scans the children of directory `host` (image path `img`), in
    /// parallel; returns the entries not carved out into their own groups,
    /// their size, and the groups carved out below.
    #[allow(clippy::type_complexity)]
    fn scan_dir(
        &self,
        host: &Path,
        img: &str,
        parents: &[Entry],
    ) -> Result<(Vec<Entry>, u64, Vec<Group>), Error> {
        let mut dents = Vec::new();
        for d in std::fs::read_dir(host).map_err(|e| Error::io("read directory", host, e))? {
            let d = d.map_err(|e| Error::io("read directory", host, e))?;
            let name = d.file_name();
            let name = name
                .to_str()
                .ok_or_else(|| Error::InputPath {
                    path: host.join(&name),
                    reason: "not valid UTF-8".to_owned(),
                })?
                .to_owned();
            dents.push((name, d));
        }
        dents.sort_by(|a, b| a.0.cmp(&b.0));
        let children: Vec<(String, Entry)> = dents
            .into_par_iter()
            .map(|(name, d)| {
                let child_img = if img.is_empty() {
                    name.clone()
                } else {
                    format!("{img}/{name}")
                };
                let child_host = d.path();
                let m = d
                    .metadata()
                    .map_err(|e| Error::io("stat", &child_host, e))?;
                let e = self.entry_with(&child_host, child_img, &m)?;
                Ok((name, e))
            })
            .collect::<Result<_, Error>>()?;
        let (dirs, files): (Vec<_>, Vec<_>) = children
            .into_iter()
            .partition(|(_, e)| matches!(e.kind, Kind::Dir));
        let subs: Vec<(Entry, Vec<Entry>, u64, Vec<Group>)> = dirs
            .into_par_iter()
            .map(|(name, e)| {
                let mut chain = parents.to_vec();
                chain.push(e.clone());
                let (sub, size, groups) = self.scan_dir(&host.join(&name), &e.path, &chain)?;
                Ok((e, sub, size, groups))
            })
            .collect::<Result<_, Error>>()?;
        let mut out = Vec::new();
        let mut own = Vec::new();
        let mut own_size = 0u64;
        for (e, sub, sub_size, groups) in subs {
            out.extend(groups);
            if sub_size >= self.split {
                let name = format!("/{}", e.path);
                let mut entries = vec![e];
                entries.extend(sub);
                out.push(Group {
                    name,
                    parents: parents.to_vec(),
                    entries,
                    size: sub_size,
                });
            } else {
                own.push(e);
                own.extend(sub);
                own_size += sub_size;
            }
        }
        let direct: Vec<Entry> = files.into_iter().map(|(_, e)| e).collect();
        let direct_size: u64 = direct.iter().map(Entry::size).sum();
        if direct_size >= self.split {
            for (i, chunk) in chunk_files(direct, self.split).into_iter().enumerate() {
                let size = chunk.iter().map(Entry::size).sum();
                out.push(Group {
                    name: format!("/{img}/ (files, part {})", i + 1),
                    parents: parents.to_vec(),
                    entries: chunk,
                    size,
                });
            }
        } else {
            own.extend(direct);
            own_size += direct_size;
        }
        Ok((own, own_size, out))
    }
}

/// Splits files (sorted by name) into chunks of roughly `split` bytes. Cut
/// points depend mostly on file names, so one file growing or shrinking
/// moves few boundaries.
fn chunk_files(files: Vec<Entry>, split: u64) -> Vec<Vec<Entry>> {
    let mut out = Vec::new();
    let mut cur = Vec::new();
    let mut size = 0u64;
    for f in files {
        size += f.size();
        let name_cut = crate::Digest::of(f.path.as_bytes()).hex().ends_with('0');
        cur.push(f);
        if (name_cut && size >= split / 2) || size >= split * 2 {
            out.push(std::mem::take(&mut cur));
            size = 0;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Directories above an absolute image path, with the modes of the host
/// directories at the same place (following symlinks).
fn ancestors(abs: &str) -> Vec<Entry> {
    // The parents of an input are not inputs: their modes are fixed, so the
    // same closure gives the same digests on a host whose /nix/store is
    // 1775 and inside a Nix sandbox or on another machine.
    let rel = abs.trim_start_matches('/');
    let comps: Vec<&str> = rel.split('/').collect();
    (1..comps.len())
        .map(|i| Entry::dir(comps[..i].join("/"), 0o755))
        .collect()
}

/// Groups of a root directory: its tree becomes `/`.
pub(crate) fn scan_root(root: &Path, allow_setuid: bool) -> Result<Vec<Group>, Error> {
    let m = std::fs::metadata(root).map_err(|e| Error::io("stat", root, e))?;
    if !m.is_dir() {
        return Err(Error::InputPath {
            path: root.to_owned(),
            reason: "not a directory".to_owned(),
        });
    }
    let s = Scanner {
        allow_setuid,
        split: SPLIT_BYTES,
    };
    let (rest, size, mut out) = s.scan_dir(root, "", &[])?;
    if !rest.is_empty() {
        out.push(Group {
            name: "/".to_owned(),
            parents: Vec::new(),
            entries: rest,
            size,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Groups of absolute paths kept at their location; `split` false keeps
/// each path in one group (store paths).
pub(crate) fn scan_paths(
    paths: &[String],
    allow_setuid: bool,
    split: bool,
) -> Result<Vec<Group>, Error> {
    let s = Scanner {
        allow_setuid,
        split: if split { SPLIT_BYTES } else { u64::MAX },
    };
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for p in paths {
        let Some(rel) = crate::spec::normalize_abs(p) else {
            return Err(Error::InputPath {
                path: p.into(),
                reason: "must be absolute and normalised".to_owned(),
            });
        };
        if !seen.insert(rel.clone()) {
            return Err(Error::InputPath {
                path: p.into(),
                reason: "given twice".to_owned(),
            });
        }
        let host = PathBuf::from(p);
        let parents = ancestors(p);
        let e = s.entry(&host, rel.clone())?;
        if matches!(e.kind, Kind::Dir) {
            let mut chain = parents.clone();
            chain.push(e.clone());
            let (sub, size, sub_groups) = s.scan_dir(&host, &rel, &chain)?;
            let mut entries = vec![e];
            entries.extend(sub);
            out.push(Group {
                name: p.clone(),
                parents,
                entries,
                size,
            });
            out.extend(sub_groups);
        } else {
            let size = e.size();
            out.push(Group {
                name: p.clone(),
                parents,
                entries: vec![e],
                size,
            });
        }
    }
    // Nested inputs (one path inside another) would duplicate entries.
    let names: Vec<String> = paths.iter().map(|p| format!("{p}/")).collect();
    for a in paths {
        if names.iter().any(|b| a.starts_with(b.as_str())) {
            return Err(Error::InputPath {
                path: a.into(),
                reason: "lies inside another input path".to_owned(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn symlink_escapes() {
        assert!(check_symlink("a/b", "../c").is_ok());
        assert!(check_symlink("a/b", "/etc/passwd").is_ok());
        assert!(check_symlink("a/b", "../../c").is_err());
        assert!(check_symlink("a", "/../etc").is_err());
        assert!(check_symlink("nix/store/x/bin/sh", "../../../../../etc").is_err());
    }

    #[test]
    fn modes_are_normalised() {
        assert_eq!(normalize_mode(0o700, false, false), 0o755);
        assert_eq!(normalize_mode(0o600, false, false), 0o644);
        assert_eq!(normalize_mode(0o4755, false, false), 0o755);
        assert_eq!(normalize_mode(0o4755, false, true), 0o4755);
        assert_eq!(normalize_mode(0o700, true, false), 0o755);
        assert_eq!(normalize_mode(0o1777, true, false), 0o1777);
    }
}
