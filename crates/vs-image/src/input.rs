//! Reading inputs (a root directory, host paths, store paths) into groups of
//! normalised entries. A group is the unit of layering and caching: a store
//! path, or a piece of a host tree.

use std::ffi::{CStr, CString};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, RawDir, Statx, StatxFlags};

use crate::error::Error;

/// Trees larger than this are split into several groups (root and host
/// paths only; a store path is always one group).
pub(crate) const SPLIT_BYTES: u64 = 8 << 20;

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    /// A host file, copied when the layer is written (from its group's
    /// host root joined with the entry's path).
    File {
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
    /// Where the files of the group are on the host: this joined with an
    /// entry's path (the root directory, or `/` for host and store paths).
    pub host_root: Arc<Path>,
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
    /// Keep hardlinks (host trees); store paths have none by definition
    /// (a NAR has no hardlinks; `nix-store --optimise` adds them), so their
    /// files are always written whole.
    hardlinks: bool,
    /// See [`Group::host_root`].
    host_root: Arc<Path>,
    /// Skip device nodes, fifos and sockets below the image's `/dev`
    /// (root directories only), counting them here.
    dev_specials: Option<AtomicU64>,
}

/// True for a device node, fifo or socket.
fn is_special(m: &Statx) -> bool {
    !matches!(
        FileType::from_raw_mode(u32::from(m.stx_mode)),
        FileType::Directory | FileType::RegularFile | FileType::Symlink
    )
}

fn utf8(p: &Path) -> Result<&str, Error> {
    p.to_str().ok_or_else(|| Error::InputPath {
        path: p.to_owned(),
        reason: "not valid UTF-8".to_owned(),
    })
}

/// The statx fields a scan needs: nothing else is requested.
fn statx_mask() -> StatxFlags {
    StatxFlags::TYPE
        | StatxFlags::MODE
        | StatxFlags::NLINK
        | StatxFlags::INO
        | StatxFlags::SIZE
        | StatxFlags::MTIME
        | StatxFlags::CTIME
}

/// `statx` of `name` relative to `dir`, not following a final symlink.
fn lstat_at(dir: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<Statx> {
    rustix::fs::statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, statx_mask())
}

fn stamp(m: &Statx) -> Stamp {
    Stamp {
        mtime: m.stx_mtime.tv_sec,
        mtime_ns: i64::from(m.stx_mtime.tv_nsec),
        ctime: m.stx_ctime.tv_sec,
        ctime_ns: i64::from(m.stx_ctime.tv_nsec),
        ino: m.stx_ino,
        dev: rustix::fs::makedev(m.stx_dev_major, m.stx_dev_minor),
    }
}

/// Opens a directory for scanning: never through a final symlink (the
/// entry was seen as a directory), close-on-exec.
fn open_dir(dir: BorrowedFd<'_>, name: &CStr) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
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

/// Directory entries read per `getdents64` call.
const DIRENT_BUF: usize = 32 << 10;
/// Entries of one directory stat'ed by one task; bigger directories are
/// split across threads.
const STAT_CHUNK: usize = 512;

/// The children of one directory, split by type, each sorted by name.
struct Children {
    files: Vec<Entry>,
    /// Subdirectories with their open descriptors.
    dirs: Vec<(Entry, OwnedFd)>,
}

impl Scanner {
    /// The entry of `host` itself (an input path), by a full-path `statx`.
    fn entry(&self, host: &Path, img: String) -> Result<Entry, Error> {
        let m = rustix::fs::statx(
            rustix::fs::CWD,
            host,
            AtFlags::SYMLINK_NOFOLLOW,
            statx_mask(),
        )
        .map_err(|e| Error::io("stat", host, e.into()))?;
        let target = |_: &Path| {
            std::fs::read_link(host)
                .map_err(|e| Error::io("read link", host, e))
                .and_then(|t| Ok(utf8(&t)?.to_owned()))
        };
        self.entry_with(&|| host.to_owned(), img, &m, target)
    }

    /// The entry for metadata `m` of the host path `host()` (image path
    /// `img`); `target` reads a symlink's target. Every input entry passes
    /// here: the type, setuid and symlink checks are made once, in one
    /// place.
    fn entry_with(
        &self,
        host: &dyn Fn() -> PathBuf,
        img: String,
        m: &Statx,
        target: impl FnOnce(&Path) -> Result<String, Error>,
    ) -> Result<Entry, Error> {
        let ft = FileType::from_raw_mode(u32::from(m.stx_mode));
        let raw_mode = u32::from(m.stx_mode) & 0o7777;
        let (kind, mode) = match ft {
            FileType::Directory => (Kind::Dir, normalize_mode(raw_mode, true, self.allow_setuid)),
            FileType::RegularFile => (
                Kind::File {
                    size: m.stx_size,
                    dev: rustix::fs::makedev(m.stx_dev_major, m.stx_dev_minor),
                    ino: m.stx_ino,
                    nlink: if self.hardlinks {
                        u64::from(m.stx_nlink)
                    } else {
                        1
                    },
                },
                normalize_mode(raw_mode, false, self.allow_setuid),
            ),
            FileType::Symlink => {
                let t = target(&host())?;
                check_symlink(&img, &t)?;
                (Kind::Symlink(t), 0o777)
            }
            other => {
                let kind = match other {
                    FileType::BlockDevice | FileType::CharacterDevice => "device",
                    FileType::Socket => "socket",
                    _ => "fifo",
                };
                return Err(Error::UnsupportedFileType { path: host(), kind });
            }
        };
        let stamp = match kind {
            Kind::File { .. } => stamp(m),
            _ => Stamp::default(),
        };
        Ok(Entry {
            path: img,
            kind,
            mode,
            stamp,
        })
    }

    /// Reads and stats the children of the open directory `fd` (host path
    /// `host`, image path `img`): names from `getdents64`, metadata by
    /// `statx` relative to `fd` (no path walk), big directories in parallel.
    fn children(&self, fd: BorrowedFd<'_>, host: &Path, img: &str) -> Result<Children, Error> {
        let err = |e: rustix::io::Errno| Error::io("read directory", host, e.into());
        // Names with their NUL, one after another; sorted by span.
        let mut arena: Vec<u8> = Vec::new();
        let mut names: Vec<(usize, usize)> = Vec::new();
        let mut buf = vec![MaybeUninit::<u8>::uninit(); DIRENT_BUF];
        let mut raw = RawDir::new(fd, &mut buf);
        while let Some(d) = raw.next() {
            let d = d.map_err(err)?;
            let name = d.file_name().to_bytes_with_nul();
            if name == b".\0" || name == b"..\0" {
                continue;
            }
            names.push((arena.len(), arena.len() + name.len()));
            arena.extend_from_slice(name);
        }
        names.sort_unstable_by(|a, b| arena[a.0..a.1].cmp(&arena[b.0..b.1]));
        type Stated = Option<(Entry, Option<OwnedFd>)>;
        let stat_one = |&(start, end): &(usize, usize)| -> Result<Stated, Error> {
            let raw_name = &arena[start..end];
            let bad = |reason: &str| Error::InputPath {
                path: host.join(std::ffi::OsStr::from_bytes(
                    raw_name.strip_suffix(b"\0").unwrap_or(raw_name),
                )),
                reason: reason.to_owned(),
            };
            let name =
                CStr::from_bytes_with_nul(raw_name).map_err(|_| bad("contains a NUL byte"))?;
            let name_str = name.to_str().map_err(|_| bad("not valid UTF-8"))?;
            let child_host = || host.join(name_str);
            let child_img = if img.is_empty() {
                name_str.to_owned()
            } else {
                let mut p = String::with_capacity(img.len() + 1 + name_str.len());
                p.push_str(img);
                p.push('/');
                p.push_str(name_str);
                p
            };
            let m = lstat_at(fd, name).map_err(|e| Error::io("stat", child_host(), e.into()))?;
            // Every rootfs tool leaves device nodes (and at times fifos and
            // sockets) in its /dev, and every runtime mounts its own /dev
            // over it: they are skipped there, refused anywhere else.
            if let Some(n) = &self.dev_specials
                && child_img.starts_with("dev/")
                && is_special(&m)
            {
                n.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
            let target = |h: &Path| {
                let t = rustix::fs::readlinkat(fd, name, Vec::new())
                    .map_err(|e| Error::io("read link", h, e.into()))?;
                t.into_string().map_err(|_| Error::InputPath {
                    path: h.to_owned(),
                    reason: "link target is not valid UTF-8".to_owned(),
                })
            };
            let e = self.entry_with(&child_host, child_img, &m, target)?;
            let dir_fd = if matches!(e.kind, Kind::Dir) {
                Some(
                    open_dir(fd, name)
                        .map_err(|err| Error::io("open directory", child_host(), err.into()))?,
                )
            } else {
                None
            };
            Ok(Some((e, dir_fd)))
        };
        let stat_all = |names: &[(usize, usize)]| -> Result<Children, Error> {
            let mut out = Children {
                files: Vec::with_capacity(names.len()),
                dirs: Vec::new(),
            };
            for name in names {
                match stat_one(name)? {
                    Some((e, Some(fd))) => out.dirs.push((e, fd)),
                    Some((e, None)) => out.files.push(e),
                    None => {}
                }
            }
            Ok(out)
        };
        if names.len() <= STAT_CHUNK {
            return stat_all(&names);
        }
        let parts: Vec<Children> = names
            .par_chunks(STAT_CHUNK)
            .map(stat_all)
            .collect::<Result<_, Error>>()?;
        let mut out = Children {
            files: Vec::with_capacity(names.len()),
            dirs: Vec::new(),
        };
        for p in parts {
            out.files.extend(p.files);
            out.dirs.extend(p.dirs);
        }
        Ok(out)
    }

    /// Scans the directory open as `fd` (host path `host`, image path
    /// `img`), subdirectories in parallel; returns the entries not carved
    /// out into their own groups (in pieces, concatenated once when their
    /// group is made), their size, and the groups carved out below.
    fn scan_dir(
        &self,
        fd: BorrowedFd<'_>,
        host: &Path,
        img: &str,
        parents: &[Entry],
    ) -> Result<(Pieces, u64, Vec<Group>), Error> {
        let Children { files, dirs } = self.children(fd, host, img)?;
        let subs: Vec<(Entry, Pieces, u64, Vec<Group>)> = dirs
            .into_par_iter()
            .map(|(e, sub_fd)| {
                let name = e.path.rsplit_once('/').map_or(e.path.as_str(), |(_, n)| n);
                let sub_host = host.join(name);
                let mut chain = Vec::with_capacity(parents.len() + 1);
                chain.extend_from_slice(parents);
                chain.push(e.clone());
                let (sub, size, groups) =
                    self.scan_dir(sub_fd.as_fd(), &sub_host, &e.path, &chain)?;
                drop(sub_fd);
                Ok((e, sub, size, groups))
            })
            .collect::<Result<_, Error>>()?;
        let mut out = Vec::new();
        let mut own: Pieces = Vec::new();
        let mut own_size = 0u64;
        for (e, sub, sub_size, groups) in subs {
            out.extend(groups);
            if sub_size >= self.split {
                let name = format!("/{}", e.path);
                out.push(Group {
                    name,
                    host_root: self.host_root.clone(),
                    parents: parents.to_vec(),
                    entries: concat(vec![e], sub),
                    size: sub_size,
                });
            } else {
                own.push(vec![e]);
                own.extend(sub);
                own_size += sub_size;
            }
        }
        let direct = files;
        let direct_size: u64 = direct.iter().map(Entry::size).sum();
        if direct_size >= self.split {
            for (i, chunk) in chunk_files(direct, self.split).into_iter().enumerate() {
                let size = chunk.iter().map(Entry::size).sum();
                out.push(Group {
                    name: format!("/{img}/ (files, part {})", i + 1),
                    host_root: self.host_root.clone(),
                    parents: parents.to_vec(),
                    entries: chunk,
                    size,
                });
            }
        } else if !direct.is_empty() {
            own.push(direct);
            own_size += direct_size;
        }
        Ok((own, own_size, out))
    }
}

/// Entries in order, as a list of runs.
type Pieces = Vec<Vec<Entry>>;

/// `first` followed by every piece, in one allocation.
fn concat(mut first: Vec<Entry>, pieces: Pieces) -> Vec<Entry> {
    first.reserve(pieces.iter().map(Vec::len).sum());
    for p in pieces {
        first.extend(p);
    }
    first
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
        // The last hex digit of the name's sha256 is 0 (one name in 16);
        // hashed only once the chunk is big enough for it to matter.
        let name_cut = |path: &str| {
            use sha2::Digest as _;
            sha2::Sha256::digest(path.as_bytes())[31] & 0x0f == 0
        };
        let cut = (size >= split / 2 && name_cut(&f.path)) || size >= split * 2;
        cur.push(f);
        if cut {
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
        hardlinks: true,
        host_root: Arc::from(root),
        dev_specials: Some(AtomicU64::new(0)),
    };
    // The root itself may be a symlink to a directory (it was followed above).
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::io("open directory", root, e.into()))?;
    let (rest, size, mut out) = s.scan_dir(fd.as_fd(), root, "", &[])?;
    let skipped = s
        .dev_specials
        .as_ref()
        .map_or(0, |n| n.load(Ordering::Relaxed));
    if skipped > 0 {
        tracing::warn!(
            "skipped {skipped} device nodes, fifos and sockets under {}: container runtimes mount their own /dev",
            root.join("dev").display()
        );
    }
    if !rest.is_empty() {
        out.push(Group {
            name: "/".to_owned(),
            host_root: s.host_root.clone(),
            parents: Vec::new(),
            entries: concat(Vec::new(), rest),
            size,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Checks a list of input paths without touching the file system: each
/// absolute and normalised, none given twice, none inside another (which
/// would duplicate entries).
pub(crate) fn check_inputs(paths: &[String]) -> Result<(), Error> {
    let mut seen = std::collections::BTreeSet::new();
    for p in paths {
        let Some(rel) = crate::spec::normalize_abs(p) else {
            return Err(Error::InputPath {
                path: p.into(),
                reason: "must be absolute and normalised".to_owned(),
            });
        };
        if !seen.insert(rel) {
            return Err(Error::InputPath {
                path: p.into(),
                reason: "given twice".to_owned(),
            });
        }
    }
    for p in paths {
        let rel = p.trim_start_matches('/');
        let nested = rel
            .match_indices('/')
            .any(|(i, _)| seen.contains(&rel[..i]));
        if nested {
            return Err(Error::InputPath {
                path: p.into(),
                reason: "lies inside another input path".to_owned(),
            });
        }
    }
    Ok(())
}

/// How [`scan_paths`] treats its paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PathKind {
    /// Host paths: big trees split into several groups, hardlinks kept.
    Host,
    /// Store paths: one group each, no hardlinks (see [`Scanner`]).
    Store,
}

/// Groups of absolute paths kept at their location.
pub(crate) fn scan_paths(
    paths: &[String],
    allow_setuid: bool,
    kind: PathKind,
) -> Result<Vec<Group>, Error> {
    check_inputs(paths)?;
    let s = Scanner {
        allow_setuid,
        split: match kind {
            PathKind::Host => SPLIT_BYTES,
            PathKind::Store => u64::MAX,
        },
        hardlinks: kind == PathKind::Host,
        host_root: Arc::from(Path::new("/")),
        dev_specials: None,
    };
    let mut out = Vec::new();
    for p in paths {
        let rel = p.trim_start_matches('/').to_owned();
        let host = PathBuf::from(p);
        let parents = ancestors(p);
        let e = s.entry(&host, rel.clone())?;
        if matches!(e.kind, Kind::Dir) {
            let fd = open_dir(
                rustix::fs::CWD,
                &CString::new(p.as_bytes()).map_err(|_| Error::InputPath {
                    path: p.into(),
                    reason: "contains a NUL byte".to_owned(),
                })?,
            )
            .map_err(|e| Error::io("open directory", &host, e.into()))?;
            let mut chain = parents.clone();
            chain.push(e.clone());
            let (sub, size, sub_groups) = s.scan_dir(fd.as_fd(), &host, &rel, &chain)?;
            out.push(Group {
                name: p.clone(),
                host_root: s.host_root.clone(),
                parents,
                entries: concat(vec![e], sub),
                size,
            });
            out.extend(sub_groups);
        } else {
            let size = e.size();
            out.push(Group {
                name: p.clone(),
                host_root: s.host_root.clone(),
                parents,
                entries: vec![e],
                size,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
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
    fn specials_are_skipped_under_the_roots_dev_only() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("dev/pts")).unwrap();
        std::fs::create_dir_all(root.join("etc")).unwrap();
        let fifo = |p: &Path| {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                p,
                FileType::Fifo,
                Mode::from_raw_mode(0o644),
                0,
            )
            .unwrap();
        };
        fifo(&root.join("dev/initctl"));
        fifo(&root.join("dev/pts/pipe"));
        let _sock = std::os::unix::net::UnixListener::bind(root.join("dev/log")).unwrap();
        std::os::unix::fs::symlink("/proc/self/fd", root.join("dev/fd")).unwrap();
        let groups = scan_root(root, false).unwrap();
        let mut paths: Vec<&str> = groups
            .iter()
            .flat_map(|g| g.entries.iter().map(|e| e.path.as_str()))
            .collect();
        paths.sort_unstable();
        assert_eq!(paths, ["dev", "dev/fd", "dev/pts", "etc"]);

        fifo(&root.join("etc/pipe"));
        let e = scan_root(root, false).unwrap_err();
        assert!(
            matches!(&e, Error::UnsupportedFileType { path, kind: "fifo" } if path.ends_with("etc/pipe")),
            "{e}"
        );
        // Host paths are not a root: the same fifo given by path is refused.
        let dev = root.join("dev").to_str().unwrap().to_owned();
        std::fs::remove_file(root.join("etc/pipe")).unwrap();
        assert!(scan_paths(&[dev], false, PathKind::Host).is_err());
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
