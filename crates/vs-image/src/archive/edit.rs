//! Editing in place the archive this builder last wrote at an output path,
//! so that a rebuild writes only what changed.
//!
//! After writing an archive, the builder records in its cache (which it
//! owns) the file's identity — device, inode, link count, size, ctime and
//! mtime, as `statx` reports them right after the file was put in place —
//! and its layout: where each blob body (the whole pages of a blob's data)
//! lies and the sha256 of each run of bytes between them. The next build
//! to the same path reuses the file only if it is still exactly that file:
//!
//! * the path is opened with `O_NOFOLLOW` and the descriptor `fstat`'ed:
//!   a regular file, one link, the recorded device, inode, size, ctime and
//!   mtime, on ext4 or XFS (local file systems whose ctime the kernel
//!   keeps); anything else (a symlink, a
//!   copy, a hard link elsewhere, a truncated or rewritten file, another
//!   file system) and the archive is written anew, as without a record;
//! * the content is never read or trusted: the kernel sets ctime to the
//!   current time on every change of the file's data or metadata (write,
//!   truncate, `fallocate`, chmod, link, rename) and no system call sets it
//!   back, so an unchanged ctime says no process changed the file through
//!   this kernel since the record. It does not cover changes that bypass
//!   the kernel's file system (writing the block device, editing the file
//!   system offline), setting the clock back (root), or a change in the
//!   same clock tick as the record on kernels before 6.13 (they stamp from
//!   a coarse clock; since 6.13 ext4 and XFS give a change right after a
//!   `stat` a finer, later stamp). The cache is trusted anyway: who can
//!   write it can also replace cached layers.
//!
//! The edit runs on a renamed file: the output is renamed to
//! `.NAME.edit-XXXXXX` next to it (locked with `flock` first), edited
//! there and renamed back. A crash leaves no output and that file, which
//! the next build to the path removes (a live build's lock keeps it); an
//! edit that fails removes it and writes the archive anew. `out` never
//! names a half-edited file.
//!
//! The edit itself: blob bodies present in both layouts, in the same
//! order and at the same offset, stay where they are on disk; from the
//! first kept body whose offset changed, everything is written over (at
//! the rate of a copy in memory); then every run of bytes that differs
//! from the record and every new body is written. One changed layer whose
//! size stays within the same number of pages is written over the old
//! one, nothing after it moves.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, FlockOperation, Mode, OFlags, StatxFlags};
use serde::{Deserialize, Serialize};

use super::{ALIGN, Layout, copy_bodies};
use crate::cache::Cache;
use crate::digest::Digest;
use crate::error::Error;
use crate::files::{file_name, parent_of};

/// Version of the record's format.
const RECORD_VERSION: u32 = 2;

/// `statfs` magic numbers of the file systems edited in place.
const EXT4_SUPER_MAGIC: u64 = 0xEF53;
const XFS_SUPER_MAGIC: u64 = 0x5846_5342;

/// Who a file is, as `statx` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    dev: u64,
    ino: u64,
    nlink: u64,
    size: u64,
    ctime: (i64, u32),
    mtime: (i64, u32),
}

impl Identity {
    fn of(st: &rustix::fs::Statx) -> Self {
        Self {
            dev: rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            nlink: u64::from(st.stx_nlink),
            size: st.stx_size,
            ctime: (st.stx_ctime.tv_sec, st.stx_ctime.tv_nsec),
            mtime: (st.stx_mtime.tv_sec, st.stx_mtime.tv_nsec),
        }
    }
}

fn statx_mask() -> StatxFlags {
    StatxFlags::TYPE
        | StatxFlags::NLINK
        | StatxFlags::INO
        | StatxFlags::SIZE
        | StatxFlags::CTIME
        | StatxFlags::MTIME
}

fn is_regular(st: &rustix::fs::Statx) -> bool {
    FileType::from_raw_mode(u32::from(st.stx_mode)) == FileType::RegularFile
}

/// What the builder wrote at an output path: the file's identity right
/// after it was put in place, and its layout.
#[derive(Debug, Serialize, Deserialize)]
struct Written {
    version: u32,
    /// The output path, absolute: other builds read layers from it.
    path: PathBuf,
    identity: Identity,
    /// sha256 of each literal run, in order (one more than bodies).
    literals: Vec<Digest>,
    bodies: Vec<WrittenBody>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct WrittenBody {
    digest: Digest,
    at: u64,
    len: u64,
}

/// What a record keeps of a layout (the file's identity is added once the
/// file is in place).
pub(crate) struct LayoutRecord {
    literals: Vec<Digest>,
    bodies: Vec<WrittenBody>,
}

impl LayoutRecord {
    pub(crate) fn of(layout: &Layout<'_>) -> Self {
        Self {
            literals: layout.literals.iter().map(|l| l.digest.clone()).collect(),
            bodies: layout
                .bodies
                .iter()
                .map(|b| WrittenBody {
                    digest: b.digest.clone(),
                    at: b.at,
                    len: b.len,
                })
                .collect(),
        }
    }
}

impl Written {
    fn of(path: PathBuf, identity: Identity, layout: &LayoutRecord) -> Self {
        Self {
            version: RECORD_VERSION,
            path,
            identity,
            literals: layout.literals.clone(),
            bodies: layout.bodies.clone(),
        }
    }

    /// A record this version wrote and whose layout holds together (it
    /// comes from the cache, but is read defensively all the same).
    fn is_sound(&self) -> bool {
        let mut end = 0u64;
        self.version == RECORD_VERSION
            && self.literals.len() == self.bodies.len() + 1
            && self.bodies.iter().all(|b| {
                let ok = b.at > end
                    && b.at.is_multiple_of(ALIGN)
                    && b.len.is_multiple_of(ALIGN)
                    && b.len > 0
                    && b.at
                        .checked_add(b.len)
                        .is_some_and(|e| e < self.identity.size);
                end = b.at.saturating_add(b.len);
                ok
            })
    }
}

/// An output path and its record in the cache.
pub(crate) struct Place<'c> {
    out: PathBuf,
    cache: &'c Cache,
    /// The record's key: the output directory's device and inode, and the
    /// file name.
    key: Digest,
}

impl<'c> Place<'c> {
    /// The place of `out`; `None` when its directory cannot be stat'ed.
    pub(crate) fn of(out: &Path, cache: &'c Cache) -> Option<Self> {
        let name = out.file_name()?;
        let dir = rustix::fs::statx(
            rustix::fs::CWD,
            parent_of(out),
            AtFlags::empty(),
            StatxFlags::INO,
        )
        .ok()?;
        let mut key = format!(
            "vibesys archive output\0{}\0{}\0",
            rustix::fs::makedev(dir.stx_dev_major, dir.stx_dev_minor),
            dir.stx_ino
        )
        .into_bytes();
        key.extend_from_slice(name.as_bytes());
        Some(Self {
            out: out.to_owned(),
            cache,
            key: Digest::of(&key),
        })
    }

    /// Records `file` (now at the output path) as holding `layout`; a
    /// cache that cannot be written is skipped, as for layers.
    pub(crate) fn record(&self, file: &File, layout: &LayoutRecord) {
        let st = match rustix::fs::statx(file, "", AtFlags::EMPTY_PATH, statx_mask()) {
            Ok(st) => st,
            Err(e) => {
                tracing::debug!("not recording {}: {e}", self.out.display());
                return;
            }
        };
        let path = std::path::absolute(&self.out).unwrap_or_else(|_| self.out.clone());
        let written = Written::of(path, Identity::of(&st), layout);
        match serde_json::to_vec(&written) {
            Ok(bytes) => self.cache.store_output(&self.key, &bytes),
            Err(e) => tracing::debug!("not recording {}: {e}", self.out.display()),
        }
    }

    /// The record of this place, if sound.
    fn written(&self) -> Option<Written> {
        let bytes = self.cache.output(&self.key)?;
        let w: Written = serde_json::from_slice(&bytes).ok()?;
        w.is_sound().then_some(w)
    }

    /// Edits the archive at the output path into `new` when it is the one
    /// this builder last wrote there; returns it (at the output path again)
    /// when done, `None` when the caller must write the archive anew. The
    /// output is never left half-edited.
    pub(crate) fn edit(
        &self,
        new: &Layout<'_>,
        from: Option<&OldArchive>,
        others: &[OldArchive],
    ) -> Option<(File, Edited)> {
        let old = self.written()?;
        let plan = Plan::new(&old, new);
        // A body read from this very archive that is not kept where it is
        // moves within the file, which the edit does only with the bodies
        // in their old order;
        // else the archive is written anew, reading them from the old
        // file, which stays as it was.
        let moves = plan.moves(new, from);
        if moves.is_none() {
            tracing::debug!(
                "{} written anew: a layer it holds would move",
                self.out.display()
            );
            return None;
        }
        let file = self.open_unchanged(&old)?;
        let dir = parent_of(&self.out);
        let moved = tempfile::Builder::new()
            .prefix(&format!(".{}.edit-", file_name(&self.out)))
            .make_in(&dir, |p| {
                rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &self.out,
                    rustix::fs::CWD,
                    p,
                    rustix::fs::RenameFlags::NOREPLACE,
                )
                .map_err(std::io::Error::from)
            });
        let moved = match moved {
            Ok(m) => m,
            Err(e) => {
                tracing::debug!("not editing {} in place: {e}", self.out.display());
                return None;
            }
        };
        // Between the open and the rename another file may have taken the
        // output's name: edit only what the descriptor is.
        let same = rustix::fs::statx(
            rustix::fs::CWD,
            moved.path(),
            AtFlags::SYMLINK_NOFOLLOW,
            statx_mask(),
        )
        .ok()
        .zip(rustix::fs::statx(&file, "", AtFlags::EMPTY_PATH, statx_mask()).ok())
        .is_some_and(|(a, b)| {
            (a.stx_ino, a.stx_dev_major, a.stx_dev_minor)
                == (b.stx_ino, b.stx_dev_major, b.stx_dev_minor)
        });
        if !same {
            tracing::debug!("{} changed while being opened", self.out.display());
            restore(moved, &self.out);
            return None;
        }
        match plan.apply(&file, moved.path(), new, from) {
            Ok(()) => {}
            Err(Failed::Untouched(e)) => {
                tracing::debug!("not editing {} in place: {e}", self.out.display());
                restore(moved, &self.out);
                return None;
            }
            Err(Failed::Touched(e)) => {
                // Dropping `moved` removes the half-edited file.
                tracing::warn!(
                    "editing {} in place failed, writing it anew: {e}",
                    self.out.display()
                );
                return None;
            }
        }
        if let Err(e) = crate::perm::publish_file(&file) {
            tracing::warn!(
                "cannot chmod the edited {}, writing it anew: {e}",
                self.out.display()
            );
            return None;
        }
        // Bodies copied from other archives must be what those held.
        if let Some(o) = others.iter().find(|o| !o.unchanged()) {
            tracing::warn!(
                "{} changed while its layers were read, writing {} anew",
                o.path.display(),
                self.out.display()
            );
            return None;
        }
        if let Err(e) = moved.persist(&self.out) {
            tracing::warn!(
                "cannot rename the edited archive back to {}, writing it anew: {}",
                self.out.display(),
                e.error
            );
            return None;
        }
        let edited = Edited {
            kept: plan.keep.iter().filter(|k| k.is_some()).count(),
            bodies: plan.keep.len(),
        };
        Some((file, edited))
    }

    /// The output, opened for writing and locked, if it is the file the
    /// record describes (see the module documentation).
    fn open_unchanged(&self, old: &Written) -> Option<File> {
        let why_not = |why: &str| {
            tracing::debug!("{} written anew: {why}", self.out.display());
            None
        };
        // A path that is not the file we wrote is not even opened (it
        // could be a device).
        let Ok(st) = rustix::fs::statx(
            rustix::fs::CWD,
            &self.out,
            AtFlags::SYMLINK_NOFOLLOW,
            statx_mask(),
        ) else {
            return why_not("no file");
        };
        if !is_regular(&st) || Identity::of(&st) != old.identity {
            return why_not("not the file this builder wrote there");
        }
        let Ok(fd) = rustix::fs::open(
            &self.out,
            OFlags::RDWR | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            return why_not("cannot open it for writing");
        };
        let Ok(st) = rustix::fs::statx(&fd, "", AtFlags::EMPTY_PATH, statx_mask()) else {
            return why_not("cannot stat it");
        };
        if !is_regular(&st) || st.stx_nlink != 1 || Identity::of(&st) != old.identity {
            return why_not("not the file this builder wrote there");
        }
        let fs = rustix::fs::fstatfs(&fd).ok().map(|s| s.f_type as u64);
        if !matches!(fs, Some(EXT4_SUPER_MAGIC | XFS_SUPER_MAGIC)) {
            return why_not("not on ext4 or XFS");
        }
        if rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_err() {
            return why_not("another build holds it");
        }
        Some(File::from(fd))
    }
}

/// The archive this builder last wrote at an output path, opened for
/// reading after it was checked against its record (as for an edit): the
/// layers of the record's bodies can be read from it. [`OldArchive::unchanged`]
/// checks again after they were read.
pub(crate) struct OldArchive {
    file: File,
    path: PathBuf,
    identity: Identity,
    bodies: Vec<WrittenBody>,
}

impl OldArchive {
    /// The blob `digest` of `size` bytes, if the archive holds it whole
    /// (its body is in the record and its tail fits in the file): where
    /// its data starts.
    pub(crate) fn find(&self, digest: &Digest, size: u64) -> Option<u64> {
        let body = size / ALIGN * ALIGN;
        self.bodies
            .iter()
            .find(|b| {
                b.digest == *digest
                    && b.len == body
                    && b.at
                        .checked_add(size)
                        .is_some_and(|end| end <= self.identity.size)
            })
            .map(|b| b.at)
    }

    /// Copies `size` bytes from `at` into a new file `dest` (through a
    /// temporary file in its directory), then checks that the archive is
    /// still unchanged.
    pub(crate) fn copy_out(&self, at: u64, size: u64, dest: &Path) -> Result<(), Error> {
        let dir = parent_of(dest);
        let tmp = tempfile::Builder::new()
            .prefix(".layer-")
            .tempfile_in(&dir)
            .map_err(|e| Error::io("create temporary file in", &dir, e))?;
        super::Range {
            src: &self.file,
            src_path: &self.path,
            off_in: at,
            len: size,
        }
        .copy_to(tmp.as_file(), tmp.path(), 0)?;
        if !self.unchanged() {
            return Err(Error::OldArchiveChanged {
                path: self.path.clone(),
            });
        }
        crate::perm::publish_file(tmp.as_file()).map_err(|e| Error::io("chmod", dest, e))?;
        tmp.persist(dest)
            .map_err(|e| Error::io("rename into place", dest, e.error))?;
        Ok(())
    }

    /// Its descriptor and path.
    pub(crate) fn src(&self) -> super::ArchiveSrc<'_> {
        super::ArchiveSrc {
            file: &self.file,
            path: &self.path,
        }
    }

    /// Whether the file is still the one the record describes (nothing
    /// wrote to it since it was opened: its ctime would have moved).
    pub(crate) fn unchanged(&self) -> bool {
        rustix::fs::statx(&self.file, "", AtFlags::EMPTY_PATH, statx_mask())
            .is_ok_and(|st| Identity::of(&st) == self.identity)
    }
}

impl OldArchive {
    /// The archive at `path` if it is the one `written` describes.
    fn open(path: &Path, written: Written) -> Option<Self> {
        // A path that is not the file we wrote is not even opened (it
        // could be a device); the descriptor is then checked again.
        let st = rustix::fs::statx(
            rustix::fs::CWD,
            path,
            AtFlags::SYMLINK_NOFOLLOW,
            statx_mask(),
        )
        .ok()?;
        if !is_regular(&st) || Identity::of(&st) != written.identity {
            return None;
        }
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let st = rustix::fs::statx(&fd, "", AtFlags::EMPTY_PATH, statx_mask()).ok()?;
        if !is_regular(&st) || st.stx_nlink != 1 || Identity::of(&st) != written.identity {
            tracing::debug!("{}: not the file this builder wrote there", path.display());
            return None;
        }
        Some(Self {
            file: File::from(fd),
            path: path.to_owned(),
            identity: written.identity,
            bodies: written.bodies,
        })
    }
}

impl Place<'_> {
    /// The archive at the output path, if it is the one the record
    /// describes.
    pub(crate) fn old(&self) -> Option<OldArchive> {
        let written = self.written()?;
        let path = std::path::absolute(&self.out).ok()?;
        (written.path == path).then_some(())?;
        OldArchive::open(&path, written)
    }
}

/// How many recorded archives a build looks for layers in.
const MAX_RECORDED: usize = 32;

/// The archives this builder wrote (per the cache's records, the most
/// recent first) that are still exactly what it wrote, except the one at
/// `except`: a build reads cached layers from them.
pub(crate) fn recorded_archives(cache: &Cache, except: &Path) -> Vec<OldArchive> {
    let except = std::path::absolute(except).ok();
    cache
        .output_records(MAX_RECORDED)
        .iter()
        .filter_map(|bytes| serde_json::from_slice::<Written>(bytes).ok())
        .filter(|w| w.is_sound() && w.path.is_absolute() && Some(&w.path) != except.as_ref())
        .filter_map(|w| OldArchive::open(&w.path.clone(), w))
        .collect()
}

/// Moves `len` bytes of `file` from `src` to `dst` (the ranges may
/// overlap): through a buffer, in the order that reads every byte before
/// it is written over.
fn move_within(file: &File, src: u64, dst: u64, len: u64) -> std::io::Result<()> {
    let mut buf = vec![0u8; crate::tarw::COPY_BUF];
    let chunk = buf.len() as u64;
    let mut done = 0u64;
    while done < len {
        let n = chunk.min(len - done);
        // Going right: from the end; going left: from the start.
        let off = if dst > src { len - done - n } else { done };
        let b = &mut buf[..usize::try_from(n).unwrap_or(0)];
        file.read_exact_at(b, src + off)?;
        file.write_all_at(b, dst + off)?;
        done += n;
    }
    Ok(())
}

/// Renames the moved output back, unedited.
fn restore(moved: tempfile::NamedTempFile<()>, out: &Path) {
    if let Err(e) = moved.persist_noclobber(out) {
        tracing::debug!("cannot put {} back: {}", out.display(), e.error);
    }
}

/// What an edit did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Edited {
    /// Blob bodies left where they were on disk.
    pub kept: usize,
    /// Blob bodies of the new archive.
    pub bodies: usize,
}

/// How an edit failed.
enum Failed {
    /// Before the file was changed: it can be put back as it was.
    Untouched(Error),
    /// After: the file is half-edited.
    Touched(Error),
}

/// What an edit does.
struct Plan {
    /// For each new body, the old body it keeps in place, if any.
    keep: Vec<Option<usize>>,
    /// For each new literal run, whether it must be written.
    write_literal: Vec<bool>,
}

impl Plan {
    fn new(old: &Written, new: &Layout<'_>) -> Self {
        let mut keep = kept(old, new);
        if let Some(first) = first_move(old, new, &keep) {
            tracing::debug!("writing over the archive from {first}");
            for (k, b) in keep.iter_mut().zip(&new.bodies) {
                if b.at >= first {
                    *k = None;
                }
            }
        }
        let n = new.bodies.len();
        let write_literal = new
            .literals
            .iter()
            .enumerate()
            .map(|(k, lit)| {
                // The old literal between the old bodies that the new
                // neighbours of this one keep, if they are neighbours there
                // too.
                let left = if k == 0 {
                    Some(0)
                } else {
                    keep[k - 1].map(|i| i + 1)
                };
                let right = if k == n {
                    Some(old.bodies.len())
                } else {
                    keep[k]
                };
                !matches!((left, right), (Some(l), Some(r)) if l == r && old.literals[l] == lit.digest)
            })
            .collect();
        Self {
            keep,
            write_literal,
        }
    }

    /// Edits `file` (at `path`) into `new`.
    /// The bodies of `new` read from `from` (the archive this edit
    /// changes) that are not kept in place: `(index, from, to)`, when they
    /// can move within the file (see [`Plan::apply`]); `None` when not.
    fn moves(&self, new: &Layout<'_>, from: Option<&OldArchive>) -> Option<Vec<(usize, u64, u64)>> {
        let moves: Vec<(usize, u64, u64)> = new
            .bodies
            .iter()
            .zip(&self.keep)
            .enumerate()
            .filter(|(_, (_, k))| k.is_none())
            .filter_map(|(i, (b, _))| match (b.src, from) {
                (super::Src::At { file, at, .. }, Some(o)) if std::ptr::eq(file, &o.file) => {
                    Some((i, at, b.at))
                }
                _ => None,
            })
            .collect();
        let in_order = moves.windows(2).all(|w| w[0].1 < w[1].1);
        (moves.is_empty() || in_order).then_some(moves)
    }

    /// Edits `file` (at `path`) into `new`; bodies read from `from`, the
    /// archive being edited, are moved within it first (before anything
    /// is written over them).
    fn apply(
        &self,
        file: &File,
        path: &Path,
        new: &Layout<'_>,
        from: Option<&OldArchive>,
    ) -> Result<(), Failed> {
        let touched = |e| Failed::Touched(Error::io("write", path, e));
        // Moves: the bodies keep their order, so moving those that go left
        // first to last, then those that go right last to first, never
        // writes over bytes still to be read.
        let moves = self
            .moves(new, from)
            .ok_or_else(|| Failed::Untouched(Error::malformed(path, "a layer cannot move")))?;
        let len_of = |i: usize| new.bodies.get(i).map_or(0, |b| b.len);
        for &(i, src, dst) in moves.iter().filter(|m| m.2 < m.1) {
            move_within(file, src, dst, len_of(i)).map_err(touched)?;
        }
        for &(i, src, dst) in moves.iter().rev().filter(|m| m.2 > m.1) {
            move_within(file, src, dst, len_of(i)).map_err(touched)?;
        }
        file.set_len(new.size).map_err(touched)?;
        for (l, _) in new
            .literals
            .iter()
            .zip(&self.write_literal)
            .filter(|(_, w)| **w)
        {
            file.write_all_at(&l.bytes, l.at).map_err(touched)?;
        }
        copy_bodies(
            file,
            path,
            new.bodies
                .iter()
                .enumerate()
                .zip(&self.keep)
                .filter(|((i, _), k)| k.is_none() && !moves.iter().any(|m| m.0 == *i))
                .map(|((_, b), _)| b),
        )
        .map_err(Failed::Touched)?;
        // A rebuild that changed nothing writes nothing: the output is
        // still rewritten as far as its mtime says.
        let now = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        };
        let omit = rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        };
        rustix::fs::futimens(
            file.as_fd(),
            &rustix::fs::Timestamps {
                last_access: omit,
                last_modification: now,
            },
        )
        .map_err(|e| touched(e.into()))?;
        Ok(())
    }
}

/// For each new body, the old body with the same digest that stays in
/// place: the heaviest set (by bytes) whose old order is the new order.
fn kept(old: &Written, new: &Layout<'_>) -> Vec<Option<usize>> {
    let candidate: Vec<Option<usize>> = new
        .bodies
        .iter()
        .map(|b| {
            old.bodies
                .iter()
                .position(|o| o.digest == *b.digest && o.len == b.len)
        })
        .collect();
    // best[j]: bytes of the heaviest increasing chain ending at j; from[j]
    // its previous element. Images have at most a few hundred blobs.
    let n = candidate.len();
    let mut best = vec![0u64; n];
    let mut from: Vec<Option<usize>> = vec![None; n];
    for j in 0..n {
        let Some(oj) = candidate[j] else { continue };
        best[j] = new.bodies[j].len;
        for i in 0..j {
            if let Some(oi) = candidate[i]
                && oi < oj
                && best[i] + new.bodies[j].len > best[j]
            {
                best[j] = best[i] + new.bodies[j].len;
                from[j] = Some(i);
            }
        }
    }
    let mut keep = vec![None; n];
    let mut at = (0..n)
        .filter(|&j| candidate[j].is_some())
        .max_by_key(|&j| (best[j], std::cmp::Reverse(j)));
    while let Some(j) = at {
        keep[j] = candidate[j];
        at = from[j];
    }
    keep
}

/// Where the first kept body whose offset changed starts, in the old or
/// the new layout, whichever is earlier: from there on, the edit writes
/// everything over.
fn first_move(old: &Written, new: &Layout<'_>, keep: &[Option<usize>]) -> Option<u64> {
    new.bodies.iter().zip(keep).find_map(|(b, k)| {
        let at = old.bodies.get((*k)?)?.at;
        (at != b.at).then_some(at.min(b.at))
    })
}

/// Removes what an edit interrupted by a crash left next to `out`: a
/// `.NAME.edit-*` file that no live build holds locked.
pub(crate) fn sweep(out: &Path) {
    let dir = parent_of(out);
    let prefix = format!(".{}.edit-", file_name(out));
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for e in entries.flatten() {
        if !e.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let p = e.path();
        let Ok(fd) = rustix::fs::open(
            &p,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        ) else {
            continue;
        };
        let regular = rustix::fs::statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::TYPE)
            .is_ok_and(|st| is_regular(&st));
        if regular && rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive).is_ok() {
            match std::fs::remove_file(&p) {
                Ok(()) => tracing::debug!("removed {}, left by an interrupted edit", p.display()),
                Err(e) => tracing::debug!("cannot remove {}: {e}", p.display()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_move_within_a_file_keeps_every_byte_whichever_way_it_goes() {
        let len = crate::tarw::COPY_BUF as u64 * 2 + 12_345;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        for (src, dst) in [(100, 4196), (4196, 100), (0, 1), (1, 0), (5000, 5000 + len)] {
            let f = tempfile::tempfile().unwrap();
            f.write_all_at(&data, src).unwrap();
            move_within(&f, src, dst, len).unwrap();
            let mut got = vec![0u8; usize::try_from(len).unwrap()];
            f.read_exact_at(&mut got, dst).unwrap();
            assert!(got == data, "from {src} to {dst}");
        }
    }
}
