//! A private copy of a provider's whole state directory, for a CLI that
//! cannot run with it read-only ([`agentshim::Provider::private_state_var`]:
//! Codex).
//!
//! The session's CLI works on a copy seeded from the user's directory (at
//! most [`MAX_SEED_BYTES`] and [`MAX_SEED_ENTRIES`]; symbolic links are
//! copied as links, never followed; sockets, FIFOs, devices and SQLite
//! `-shm` files and the CLI's logs are left out), in the session directory
//! ([`crate::SessionDir`]), writable in the session. Afterwards only the
//! provider's [`agentshim::KeptEntry`]s go back to the user's directory
//! ([`PrivateStateDir::return_kept`]): regular files only, read without
//! following a symlink, each at most [`MAX_RETURN_FILE_BYTES`], written
//! beneath descriptors opened with no symlink on the way, atomically (a
//! temporary file renamed over the old one), never over anything but a
//! regular file, at most [`MAX_RETURN_BYTES`] in all. An append-only log
//! (`*.jsonl`: the history, the thread index, each rollout) only ever
//! grows in the user's directory: it gets what the session appended after
//! the last line it was seeded with, so lines the user's own CLI wrote
//! meanwhile stay, and a session that rewrote or emptied it changes
//! nothing of what was there. Below a kept directory any other file is
//! only created, never written over one of the user's. Everything else the session wrote
//! (configuration, skills, shell snapshots, PATH aliases, databases, new
//! files) goes with the copy.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, Mode, OFlags};

use crate::error::AgentError;

/// The most bytes of the user's state directory copied into a session;
/// past it the rest is left out (with a warning).
pub const MAX_SEED_BYTES: u64 = 1 << 30;
/// The most entries copied into a session; past it the rest is left out.
pub const MAX_SEED_ENTRIES: usize = 100_000;
/// The deepest directory level copied or returned.
const MAX_DEPTH: usize = 32;
/// The largest file that goes back to the user's directory.
pub const MAX_RETURN_FILE_BYTES: u64 = 256 << 20;
/// The most files (and directories) that go back after one session.
pub const MAX_RETURN_FILES: usize = 20_000;
/// The most bytes that go back after one session (a sparse file in the
/// copy costs the agent nothing, and is written whole to the user's).
pub const MAX_RETURN_BYTES: u64 = 1 << 30;
/// The longest last line of a seeded log remembered to find where the
/// session's appended lines start.
const MAX_LAST_LINE: usize = 64 * 1024;

/// A session's private copy of one state directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateStateDir {
    /// The user's directory (canonical).
    pub user: PathBuf,
    /// The copy, inside the session directory.
    pub copy: PathBuf,
    /// Each kept file right after seeding, by its path relative to the
    /// copy: an append-only `*.jsonl` log (at any depth) as where it
    /// ended, any other top-level file by its content.
    seeded: BTreeMap<PathBuf, Seeded>,
}

impl PrivateStateDir {
    /// Copies `user` (a canonical directory) to `copy` (a path that must
    /// not exist yet, in a directory only vibesys writes).
    pub fn seed(
        provider: &agentshim::Provider,
        user: &Path,
        copy: &Path,
    ) -> Result<Self, AgentError> {
        let mut budget = Budget {
            bytes: MAX_SEED_BYTES,
            entries: MAX_SEED_ENTRIES,
            skipped: 0,
        };
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AgentError::SessionDir { path, source }
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(copy)
            .map_err(err(copy))?;
        copy_tree(user, copy, 0, &mut budget).map_err(err(copy))?;
        if budget.skipped > 0 {
            tracing::warn!(
                path = %user.display(),
                skipped = budget.skipped,
                "the provider's state directory is larger than the session's copy may be ({MAX_SEED_BYTES} bytes, {MAX_SEED_ENTRIES} entries): the rest is not in the session"
            );
        }
        let mut seeded = BTreeMap::new();
        for kept in provider.kept_entries() {
            let rel = Path::new(kept.name);
            if kept.is_dir {
                seed_logs(copy, rel, 0, &mut seeded);
            } else if kept.name.ends_with(".jsonl") {
                if let Some(end) = LogEnd::of(&copy.join(rel)) {
                    seeded.insert(rel.to_path_buf(), Seeded::Log(end));
                }
            } else if let Ok(Some(content)) = read_bounded(&copy.join(rel), MAX_RETURN_FILE_BYTES) {
                seeded.insert(rel.to_path_buf(), Seeded::Content(content));
            }
        }
        Ok(Self {
            user: user.to_path_buf(),
            copy: copy.to_path_buf(),
            seeded,
        })
    }

    /// Copies the provider's kept entries from the copy back to the
    /// user's directory (see the module's documentation). Failures are
    /// warned about, one per entry, and never stop the others.
    pub fn return_kept(&self, provider: &agentshim::Provider) {
        let user = match open_dir(None, &self.user) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(path = %self.user.display(), "cannot open the provider's state directory to return the session's transcripts: {e}");
                return;
            }
        };
        let copy = match open_dir(None, &self.copy) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(path = %self.copy.display(), "cannot open the session's copy of the provider's state: {e}");
                return;
            }
        };
        self.return_within(
            provider,
            ReturnBudget {
                entries: MAX_RETURN_FILES,
                bytes: MAX_RETURN_BYTES,
                rewritten: 0,
            },
            (&copy, &user),
        );
    }

    fn return_within(
        &self,
        provider: &agentshim::Provider,
        mut budget: ReturnBudget,
        (copy, user): (&OwnedFd, &OwnedFd),
    ) {
        for kept in provider.kept_entries() {
            let rel = Path::new(kept.name);
            let done = if kept.is_dir {
                self.return_dir(copy, user, rel, 0, &mut budget)
            } else {
                self.return_file(copy, user, rel, &mut budget)
            };
            if let Err(e) = done {
                tracing::warn!(path = %self.user.join(kept.name).display(), "the session's copy did not go back: {e}");
            }
        }
        if budget.rewritten > 0 {
            tracing::warn!(
                path = %self.user.display(),
                logs = budget.rewritten,
                "the session rewrote logs it was seeded with (not only appended to them): yours are left as they are"
            );
        }
    }

    /// The file `rel` (its last component beneath `copy`) into the same
    /// name beneath `user`.
    fn return_file(
        &self,
        copy: &OwnedFd,
        user: &OwnedFd,
        rel: &Path,
        budget: &mut ReturnBudget,
    ) -> std::io::Result<()> {
        let Some(name) = rel.file_name().and_then(|n| n.to_str()) else {
            return Ok(());
        };
        budget.take_entry()?;
        let Some(content) = read_copy(copy, name, budget.bytes)? else {
            return Ok(());
        };
        let log = name.ends_with(".jsonl");
        let top = rel.parent() == Some(Path::new(""));
        let sent = match self.seeded.get(rel) {
            // Unchanged in the session: the user's stays as it is now.
            Some(Seeded::Content(seeded)) if *seeded == content => 0,
            Some(Seeded::Log(end)) => match end.appended(&content) {
                Some(tail) => append(user, name, tail)?,
                None => {
                    budget.rewritten += 1;
                    0
                }
            },
            // A log the session started at the top (history, index) is
            // shared: it gets appended.
            None if log && top => append(user, name, &content)?,
            // Below a kept directory (a rollout, anything else) a file is
            // only created: one of the user's is never written over.
            _ if !top => match create(user, name, &content)? {
                Some(sent) => sent,
                None => {
                    if read_at(user, name).ok().flatten().as_deref() != Some(&content[..]) {
                        budget.rewritten += 1;
                    }
                    0
                }
            },
            _ if read_at(user, name).ok().flatten().as_deref() == Some(&content[..]) => 0,
            _ => replace(user, name, &content)?,
        };
        budget.bytes = budget.bytes.saturating_sub(sent);
        Ok(())
    }

    /// Each regular file below `rel` (its last component beneath `src`,
    /// the copy) into the same name beneath `parent` (the user's side),
    /// recursively; both sides walked from descriptors with no symlink
    /// followed.
    fn return_dir(
        &self,
        src: &OwnedFd,
        parent: &OwnedFd,
        rel: &Path,
        depth: usize,
        budget: &mut ReturnBudget,
    ) -> std::io::Result<()> {
        let Some(name) = rel.file_name().and_then(|n| n.to_str()) else {
            return Ok(());
        };
        if depth > MAX_DEPTH {
            return Ok(());
        }
        let from = match open_dir(Some(src), Path::new(name)) {
            Ok(fd) => fd,
            Err(e)
                if e.raw_os_error() == Some(rustix::io::Errno::NOENT.raw_os_error())
                    || e.raw_os_error() == Some(rustix::io::Errno::NOTDIR.raw_os_error())
                    || e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) =>
            {
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        budget.take_entry()?;
        match rustix::fs::mkdirat(parent, name, Mode::from_raw_mode(0o700)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let dir = open_dir(Some(parent), Path::new(name))?;
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&from)? {
            let entry = entry?;
            let Ok(child) = entry.file_name().to_str() else {
                continue;
            };
            if child == "." || child == ".." {
                continue;
            }
            if names.len() >= budget.entries {
                break;
            }
            names.push((child.to_owned(), entry.file_type()));
        }
        for (child, ft) in names {
            let rel = rel.join(&child);
            let done = if ft == rustix::fs::FileType::Directory {
                self.return_dir(&from, &dir, &rel, depth + 1, budget)
            } else if ft == rustix::fs::FileType::RegularFile {
                self.return_file(&from, &dir, &rel, budget)
            } else {
                Ok(())
            };
            match done {
                Err(e) if budget.spent() => return Err(e),
                Err(e) => {
                    tracing::warn!(path = %self.user.join(&rel).display(), "the session's copy did not go back: {e}");
                }
                Ok(()) => {}
            }
        }
        Ok(())
    }
}

/// What may still go back after one session.
struct ReturnBudget {
    entries: usize,
    bytes: u64,
    /// Logs the session rewrote (not only appended to): left alone.
    rewritten: usize,
}

impl ReturnBudget {
    fn take_entry(&mut self) -> std::io::Result<()> {
        if self.entries == 0 {
            return Err(std::io::Error::other(format!(
                "more than {MAX_RETURN_FILES} files and directories to return; the rest stays in the copy"
            )));
        }
        self.entries -= 1;
        Ok(())
    }

    fn spent(&self) -> bool {
        self.entries == 0 || self.bytes == 0
    }
}

/// Where a seeded log ended: its length and its last line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct LogEnd {
    len: usize,
    last_line: Vec<u8>,
}

impl LogEnd {
    /// The end of the regular file at `path` (our own fresh copy);
    /// `None` when missing or not a regular file.
    fn of(path: &Path) -> Option<Self> {
        let content = read_bounded(path, MAX_RETURN_FILE_BYTES).ok()??;
        let body = content.strip_suffix(b"\n").unwrap_or(&content);
        let start = body.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        // A longer line is remembered by its end: only the plain
        // "appended after the end" case then finds it.
        let start = start.max(content.len().saturating_sub(MAX_LAST_LINE));
        Some(Self {
            len: content.len(),
            last_line: content[start..].to_vec(),
        })
    }

    /// What `now` holds after the seeded content: the bytes past its end
    /// when the session only appended, else past the first whole line
    /// equal to the seeded last line (the CLI trimmed its oldest lines);
    /// `None` when the seeded last line is gone (the session rewrote it).
    fn appended<'a>(&self, now: &'a [u8]) -> Option<&'a [u8]> {
        if self.len == 0 {
            return Some(now);
        }
        let last = &self.last_line[..];
        if now.len() >= self.len && now[..self.len].ends_with(last) {
            return Some(&now[self.len..]);
        }
        let mut start = 0;
        while start < now.len() {
            let end = now[start..]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(now.len(), |i| start + i + 1);
            if &now[start..end] == last {
                return Some(&now[end..]);
            }
            start = end;
        }
        None
    }
}

/// Records where each regular `*.jsonl` below `rel` in `copy` (our own
/// fresh copy) ends.
fn seed_logs(copy: &Path, rel: &Path, depth: usize, seeded: &mut BTreeMap<PathBuf, Seeded>) {
    if depth > MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(copy.join(rel)) else {
        return;
    };
    for entry in entries.flatten() {
        let Ok(ft) = entry.file_type() else {
            continue;
        };
        let rel = rel.join(entry.file_name());
        if ft.is_dir() {
            seed_logs(copy, &rel, depth + 1, seeded);
        } else if ft.is_file()
            && rel.extension() == Some(std::ffi::OsStr::new("jsonl"))
            && let Some(end) = LogEnd::of(&copy.join(&rel))
        {
            seeded.insert(rel, Seeded::Log(end));
        }
    }
}

/// A kept file as seeded.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seeded {
    Log(LogEnd),
    Content(Vec<u8>),
}

struct Budget {
    bytes: u64,
    entries: usize,
    skipped: usize,
}

fn copy_tree(src: &Path, dst: &Path, depth: usize, budget: &mut Budget) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(src)?.flatten().collect();
    // Files before directories: the configuration at the top is copied
    // before any large tree of transcripts can use up the budget.
    entries.sort_by_key(|e| {
        (
            e.file_type().map(|t| t.is_dir()).unwrap_or(true),
            e.file_name(),
        )
    });
    for entry in entries {
        let name = entry.file_name();
        let from = src.join(&name);
        let to = dst.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(&from) else {
            continue;
        };
        if budget.entries == 0 {
            budget.skipped += 1;
            continue;
        }
        budget.entries -= 1;
        let ft = meta.file_type();
        if depth == 0 && skipped_at_top(&name) {
            continue;
        }
        if ft.is_symlink() {
            if let Ok(target) = std::fs::read_link(&from) {
                std::os::unix::fs::symlink(target, &to)?;
            }
        } else if ft.is_dir() {
            if depth >= MAX_DEPTH {
                budget.skipped += 1;
                continue;
            }
            std::fs::DirBuilder::new().mode(0o700).create(&to)?;
            copy_tree(&from, &to, depth + 1, budget)?;
        } else if ft.is_file() && !name.to_string_lossy().ends_with("-shm") {
            if meta.len() > budget.bytes {
                budget.skipped += 1;
                continue;
            }
            // Streamed, never whole in memory (a rollout may be large).
            let src = match rustix::fs::open(
                &from,
                OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => std::fs::File::from(fd),
                Err(_) => {
                    budget.skipped += 1;
                    continue;
                }
            };
            if !src.metadata().is_ok_and(|m| m.is_file()) {
                budget.skipped += 1;
                continue;
            }
            // The user's permission bits (a skill's script stays
            // executable), never set-id bits.
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777)
                .open(&to)?;
            let copied = std::io::copy(&mut src.take(budget.bytes), &mut f)?;
            budget.bytes -= copied;
        }
    }
    Ok(())
}

/// Top-level entries never seeded: Codex's logs (`log/`, the
/// `logs_*.sqlite` database and its journals), which can grow large, never
/// go back, and which the CLI recreates.
fn skipped_at_top(name: &std::ffi::OsStr) -> bool {
    let name = name.to_string_lossy();
    name == "log" || (name.starts_with("logs_") && name.contains(".sqlite"))
}

/// Opens a directory beneath `parent` (or absolute) with no symlink on
/// the way.
fn open_dir(parent: Option<&OwnedFd>, path: &Path) -> std::io::Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    Ok(match parent {
        Some(p) => rustix::fs::openat(p, path, flags, Mode::empty())?,
        None => rustix::fs::open(path, flags, Mode::empty())?,
    })
}

/// Opens the file at `path` (beneath `parent`, or as given) for reading,
/// following no symlink and not blocking on a FIFO; `None` when it is
/// missing or a symlink.
fn open_no_follow(parent: Option<&OwnedFd>, path: &Path) -> std::io::Result<Option<OwnedFd>> {
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let opened = match parent {
        Some(p) => rustix::fs::openat(p, path, flags, Mode::empty()),
        None => rustix::fs::open(path, flags, Mode::empty()),
    };
    match opened {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

fn read_bounded(path: &Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let Some(fd) = open_no_follow(None, path)? else {
        return Ok(None);
    };
    read_fd(fd, max)
}

/// A regular file beneath `dir`, read without following a symlink and
/// bounded; `None` when missing or not a regular file.
fn read_at(dir: &OwnedFd, name: &str) -> std::io::Result<Option<Vec<u8>>> {
    let Some(fd) = open_no_follow(Some(dir), Path::new(name))? else {
        return Ok(None);
    };
    read_fd(fd, MAX_RETURN_FILE_BYTES)
}

/// A regular file of the session's copy beneath `dir`, read as
/// [`read_at`] does, at most `max` bytes; `None` also when it has another
/// hard link (the agent linked a file it may not read into the copy: its
/// content must not reach the user's directory, where the next session's
/// seed would hand it over).
fn read_copy(dir: &OwnedFd, name: &str, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let Some(fd) = open_no_follow(Some(dir), Path::new(name))? else {
        return Ok(None);
    };
    let st = rustix::fs::fstat(&fd)?;
    if st.st_nlink > 1 {
        return Err(std::io::Error::other(
            "has more than one hard link in the session's copy: left out",
        ));
    }
    read_fd(fd, max.min(MAX_RETURN_FILE_BYTES))
}

fn read_fd(fd: OwnedFd, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    let file = std::fs::File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(None);
    }
    if meta.len() > max {
        return Err(std::io::Error::other(format!(
            "is larger than {max} bytes ({} bytes)",
            meta.len()
        )));
    }
    let mut content = Vec::new();
    file.take(max + 1).read_to_end(&mut content)?;
    if content.len() as u64 > max {
        return Err(std::io::Error::other(format!(
            "grew beyond {max} bytes while read"
        )));
    }
    Ok(Some(content))
}

/// Whether `name` beneath `dir` is missing or a regular file (the only
/// things a returned file may replace).
fn replaceable(dir: &OwnedFd, name: &str) -> std::io::Result<bool> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile
        ),
        Err(rustix::io::Errno::NOENT) => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Writes `content` as `name` beneath `dir`: a fresh temporary file,
/// synced, renamed over the old one.
fn replace(dir: &OwnedFd, name: &str, content: &[u8]) -> std::io::Result<u64> {
    if !replaceable(dir, name)? {
        return Err(std::io::Error::other(format!(
            "{name} is not a regular file in your directory: left alone"
        )));
    }
    let tmp = format!(".{name}.vibesys-{}", std::process::id());
    let fd = rustix::fs::openat(
        dir,
        tmp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut file = std::fs::File::from(fd);
    let written = file.write_all(content).and_then(|()| file.sync_all());
    let renamed = written.and_then(|()| {
        rustix::fs::renameat(dir, tmp.as_str(), dir, name).map_err(std::io::Error::from)
    });
    if renamed.is_err() {
        let _ = rustix::fs::unlinkat(dir, tmp.as_str(), AtFlags::empty());
    }
    renamed.map(|()| content.len() as u64)
}

/// Writes `content` as a new file `name` beneath `dir`; one that exists
/// (the user's own, maybe not seeded) is left alone (`None`).
fn create(dir: &OwnedFd, name: &str, content: &[u8]) -> std::io::Result<Option<u64>> {
    let fd = match rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::EXIST) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut file = std::fs::File::from(fd);
    file.write_all(content)?;
    file.sync_all()?;
    Ok(Some(content.len() as u64))
}

/// Appends `tail` to `name` beneath `dir` (created, mode 0600, when
/// missing), which must be a regular file.
fn append(dir: &OwnedFd, name: &str, tail: &[u8]) -> std::io::Result<u64> {
    if tail.is_empty() {
        return Ok(0);
    }
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )?;
    let mut file = std::fs::File::from(fd);
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{name} is not a regular file in your directory: left alone"
        )));
    }
    file.write_all(tail)?;
    file.sync_all()?;
    Ok(tail.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes each `(path, content)` beneath `root`, creating the
    /// directories on the way.
    fn write_files(root: &Path, files: &[(&str, &str)]) {
        for (path, content) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
    }

    /// A temporary directory holding the user's codex home (`codex/`,
    /// created) and the place of the session's copy (`copy/`, not yet).
    fn codex_dirs() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("codex");
        std::fs::create_dir_all(&user).unwrap();
        let copy = tmp.path().join("copy");
        (tmp, user, copy)
    }

    /// Asserts that the file at `path` holds exactly `expected`.
    fn assert_file_is(path: impl AsRef<Path>, expected: &str) {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).unwrap();
        assert_eq!(text, expected, "{}", path.display());
    }

    #[test]
    fn only_kept_entries_go_back_and_never_through_a_symlink() {
        let (tmp, user, copy) = codex_dirs();
        write_files(
            &user,
            &[
                ("config.toml", "model = \"x\"\n"),
                ("history.jsonl", "{\"a\":1}\n"),
                ("auth.json", "{\"t\":1}"),
                ("sessions/2026/old.jsonl", "old\n"),
            ],
        );
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, user.join("archived_sessions")).unwrap();
        std::fs::create_dir_all(user.join("skills/mine")).unwrap();
        std::fs::write(user.join("skills/mine/run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(
            user.join("skills/mine/run.sh"),
            std::os::unix::fs::PermissionsExt::from_mode(0o4755),
        )
        .unwrap();
        std::fs::write(user.join("logs_2.sqlite"), "big").unwrap();
        let p = agentshim::Provider::Codex;
        let dir = PrivateStateDir::seed(&p, &user, &copy).unwrap();
        let mode = std::fs::metadata(copy.join("skills/mine/run.sh"))
            .unwrap()
            .permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o7777,
            0o755
        );
        assert!(!copy.join("logs_2.sqlite").exists());
        assert_file_is(copy.join("config.toml"), "model = \"x\"\n");
        // The session writes.
        std::fs::write(copy.join("config.toml"), "notify = [\"evil\"]\n").unwrap();
        std::fs::create_dir_all(copy.join("skills/.system")).unwrap();
        write_files(
            &copy,
            &[
                ("skills/.system/x.md", "evil"),
                ("new-top", "evil"),
                ("sessions/2026/new.jsonl", "new\n"),
                ("history.jsonl", "{\"a\":1}\n{\"b\":2}\n"),
            ],
        );
        // The user's CLI appends meanwhile, and logs in.
        std::fs::write(user.join("auth.json"), "{\"t\":2}").unwrap();
        std::fs::OpenOptions::new()
            .append(true)
            .open(user.join("history.jsonl"))
            .unwrap()
            .write_all(b"{\"u\":3}\n")
            .unwrap();
        // A symlink the agent planted in a kept directory is not followed.
        std::fs::remove_file(copy.join("archived_sessions")).unwrap();
        std::fs::create_dir(copy.join("archived_sessions")).unwrap();
        std::fs::write(copy.join("archived_sessions/a.jsonl"), "a").unwrap();
        std::os::unix::fs::symlink("/etc/shadow", copy.join("sessions/2026/link")).unwrap();
        dir.return_kept(&p);
        assert_file_is(user.join("config.toml"), "model = \"x\"\n");
        assert!(!user.join("skills/.system").exists() && !user.join("new-top").exists());
        assert_file_is(user.join("sessions/2026/new.jsonl"), "new\n");
        assert_file_is(
            user.join("history.jsonl"),
            "{\"a\":1}\n{\"u\":3}\n{\"b\":2}\n",
        );
        assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
        // An auth.json the session left unchanged never clobbers a newer one.
        assert_file_is(user.join("auth.json"), "{\"t\":2}");
        assert!(!user.join("sessions/2026/link").exists());
    }

    /// The logs only ever grow in the user's directory: a session that
    /// empties or rewrites one (or an old rollout) changes nothing of what
    /// was there; one that appends, or that trimmed the oldest lines as
    /// the CLI does past `history.max_bytes`, adds its own lines only.
    #[test]
    fn logs_only_grow_in_the_users_directory() {
        let (_tmp, user, copy) = codex_dirs();
        write_files(
            &user,
            &[
                ("history.jsonl", "h1\nh2\nh3\n"),
                ("session_index.jsonl", "i1\ni2\n"),
                ("sessions/2026/old.jsonl", "o1\no2\n"),
                ("sessions/2026/grown.jsonl", "g1\n"),
                ("sessions/2026/notes.txt", "mine\n"),
            ],
        );
        let p = agentshim::Provider::Codex;
        let dir = PrivateStateDir::seed(&p, &user, &copy).unwrap();
        // The CLI trimmed the oldest history line and appended one.
        std::fs::write(copy.join("history.jsonl"), "h2\nh3\nh4\n").unwrap();
        // The agent emptied the index, rewrote an old rollout, and a
        // resumed thread appended to another.
        write_files(
            &copy,
            &[
                ("session_index.jsonl", "forged\n"),
                ("sessions/2026/old.jsonl", "evil\n"),
                ("sessions/2026/grown.jsonl", "g1\ng2\n"),
                ("sessions/2026/notes.txt", "evil\n"),
                ("sessions/2026/new.txt", "new\n"),
            ],
        );
        // A rollout the user's CLI wrote meanwhile under a name the
        // session also used is not clobbered.
        std::fs::write(user.join("sessions/2026/mine.jsonl"), "mine\n").unwrap();
        std::fs::write(copy.join("sessions/2026/mine.jsonl"), "theirs\n").unwrap();
        dir.return_kept(&p);
        let read = |rel: &str| std::fs::read_to_string(user.join(rel)).unwrap();
        assert_eq!(read("history.jsonl"), "h1\nh2\nh3\nh4\n");
        assert_eq!(read("session_index.jsonl"), "i1\ni2\n");
        assert_eq!(read("sessions/2026/old.jsonl"), "o1\no2\n");
        assert_eq!(read("sessions/2026/grown.jsonl"), "g1\ng2\n");
        assert_eq!(read("sessions/2026/mine.jsonl"), "mine\n");
        assert_eq!(read("sessions/2026/notes.txt"), "mine\n");
        assert_eq!(read("sessions/2026/new.txt"), "new\n");
    }

    /// What goes back is bounded in bytes (a sparse file costs the agent
    /// nothing) and never carries a file the agent hard-linked into the
    /// copy.
    #[test]
    fn returns_are_bounded_and_never_a_hard_link() {
        let (tmp, user, copy) = codex_dirs();
        let p = agentshim::Provider::Codex;
        let dir = PrivateStateDir::seed(&p, &user, &copy).unwrap();
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "SECRET").unwrap();
        std::fs::create_dir_all(copy.join("sessions/x")).unwrap();
        std::fs::hard_link(&secret, copy.join("sessions/x/linked.jsonl")).unwrap();
        std::fs::File::create(copy.join("sessions/x/sparse.jsonl"))
            .unwrap()
            .set_len(4096)
            .unwrap();
        std::fs::write(copy.join("sessions/x/small.jsonl"), "ok\n").unwrap();
        let fd = |p: &Path| open_dir(None, p).unwrap();
        dir.return_within(
            &p,
            ReturnBudget {
                entries: 100,
                bytes: 1024,
                rewritten: 0,
            },
            (&fd(&copy), &fd(&user)),
        );
        assert!(!user.join("sessions/x/linked.jsonl").exists());
        assert!(!user.join("sessions/x/sparse.jsonl").exists());
        assert_file_is(user.join("sessions/x/small.jsonl"), "ok\n");
    }
}
