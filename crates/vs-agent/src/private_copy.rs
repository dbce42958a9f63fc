//! Private copies of a provider's home-level state files.
//!
//! Claude Code keeps `~/.claude.json` (a file beside `~/.claude/`) and
//! reads `mcpServers` and project settings from it: an agent that could
//! write it would plant a command its CLI runs later, unconfined. A
//! session therefore gets a copy, seeded from the user's file, in a
//! vibesys-owned directory the agent cannot otherwise reach (outside the
//! workspace and the state directories; the sandbox's `/tmp` is private),
//! bound read-write at the file's path inside the sandbox. The user's file
//! is never written by the session; the copy goes with the session.

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use vs_sandbox::PrivateFile;

use crate::error::AgentError;

/// The largest user file copied (`~/.claude.json` grows with project
/// history; beyond this the session refuses to start rather than truncate).
pub const MAX_COPY_BYTES: u64 = 64 << 20;

/// A fresh directory of one session, mode 0700, removed on drop.
#[derive(Debug)]
pub struct SessionDir {
    path: PathBuf,
}

impl SessionDir {
    /// Creates a fresh session directory below [`default_base`].
    pub fn create() -> Result<Self, AgentError> {
        Self::create_in(&default_base())
    }

    /// Creates a fresh session directory below `base`, which is created
    /// when missing and must be a directory of the current user (not a
    /// symlink); it is set to mode 0700.
    pub fn create_in(base: &Path) -> Result<Self, AgentError> {
        let err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| AgentError::SessionDir { path, source }
        };
        match std::fs::DirBuilder::new().mode(0o700).create(base) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(err(base)(e)),
        }
        let meta = std::fs::symlink_metadata(base).map_err(err(base))?;
        if !meta.is_dir() || meta.uid() != current_uid() {
            return Err(err(base)(std::io::Error::other(
                "not a directory owned by the current user",
            )));
        }
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700))
            .map_err(err(base))?;
        let base = std::fs::canonicalize(base).map_err(err(base))?;
        remove_orphans(&base);
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        for attempt in 0..16u32 {
            let path = base.join(format!("{}-{stamp:x}-{attempt}", std::process::id()));
            match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                Ok(()) => return Ok(Self { path }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(err(&path)(e)),
            }
        }
        Err(err(&base)(std::io::Error::other(
            "no fresh session directory name",
        )))
    }

    /// The directory (canonical).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies the user's file `user_file` into this directory (under its
    /// own file name) and returns the copy, to be bound at `user_file`.
    /// The user's file is opened without following a final symlink, must
    /// be a regular file of at most [`MAX_COPY_BYTES`]; a missing one
    /// seeds `{}` (an empty JSON configuration).
    pub fn seed(&self, user_file: &Path) -> Result<PrivateFile, AgentError> {
        let name =
            user_file
                .file_name()
                .map(PathBuf::from)
                .ok_or_else(|| AgentError::PrivateCopy {
                    path: user_file.to_path_buf(),
                    reason: "has no file name".into(),
                })?;
        let content = read_user_file(user_file)?;
        let dest = self.path.join(&name);
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&dest)?;
            std::io::Write::write_all(&mut f, &content)?;
            f.sync_all()
        };
        write().map_err(|source| AgentError::SessionDir {
            path: dest.clone(),
            source,
        })?;
        Ok(PrivateFile {
            dir: self.path.clone(),
            name,
            target: user_file.to_path_buf(),
        })
    }
}

impl Drop for SessionDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.path) {
            tracing::warn!(path = %self.path.display(), "cannot remove the session directory: {e}");
        }
    }
}

/// Removes the directories of sessions whose process is gone (a session
/// killed with SIGKILL cannot remove its own): each is named after its
/// pid; one whose pid is alive (or reused) is left alone.
fn remove_orphans(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid != std::process::id() && !Path::new("/proc").join(pid.to_string()).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// `$XDG_RUNTIME_DIR/vibesys-session` when `XDG_RUNTIME_DIR` is absolute,
/// else `$TMPDIR/vibesys-session-<uid>` (the sandbox's own `/tmp` is a
/// private tmpfs, so the agent never sees the host's).
pub fn default_base() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d).join("vibesys-session"),
        _ => std::env::temp_dir().join(format!("vibesys-session-{}", current_uid())),
    }
}

fn current_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

fn read_user_file(path: &Path) -> Result<Vec<u8>, AgentError> {
    use rustix::fs::{Mode, OFlags};
    let refuse = |reason: String| AgentError::PrivateCopy {
        path: path.to_path_buf(),
        reason,
    };
    let fd = match rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(b"{}\n".to_vec()),
        Err(rustix::io::Errno::LOOP) => {
            return Err(refuse(
                "is a symbolic link (the copy is taken only from a regular file)".into(),
            ));
        }
        Err(e) => return Err(refuse(format!("cannot open it: {e}"))),
    };
    let file = std::fs::File::from(fd);
    let meta = file
        .metadata()
        .map_err(|e| refuse(format!("cannot inspect it: {e}")))?;
    if !meta.is_file() {
        return Err(refuse("is not a regular file".into()));
    }
    if meta.len() > MAX_COPY_BYTES {
        return Err(refuse(format!(
            "is larger than {MAX_COPY_BYTES} bytes ({} bytes)",
            meta.len()
        )));
    }
    let mut content = Vec::new();
    file.take(MAX_COPY_BYTES + 1)
        .read_to_end(&mut content)
        .map_err(|e| refuse(format!("cannot read it: {e}")))?;
    if content.len() as u64 > MAX_COPY_BYTES {
        return Err(refuse(format!(
            "grew beyond {MAX_COPY_BYTES} bytes while read"
        )));
    }
    Ok(content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_has_the_users_content_and_goes_with_the_session() {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join(".claude.json");
        std::fs::write(&user, "{\"numStartups\": 3}\n").unwrap();
        let dir = SessionDir::create_in(&tmp.path().join("sessions")).unwrap();
        let copy = dir.seed(&user).unwrap();
        assert_eq!(copy.target, user);
        assert!(copy.is_well_formed());
        assert_eq!(
            std::fs::read_to_string(copy.source()).unwrap(),
            "{\"numStartups\": 3}\n"
        );
        let mode = std::fs::metadata(dir.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let path = dir.path().to_path_buf();
        drop(dir);
        assert!(!path.exists());
        // A missing user file seeds an empty configuration.
        let dir = SessionDir::create_in(&tmp.path().join("sessions")).unwrap();
        let copy = dir.seed(&tmp.path().join("none/.claude.json")).unwrap();
        assert_eq!(std::fs::read_to_string(copy.source()).unwrap(), "{}\n");
    }

    #[test]
    fn directories_of_dead_sessions_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().join("sessions");
        let live = SessionDir::create_in(&base).unwrap();
        // pid_max is at most 2^22: this pid never runs.
        let dead = base.join("4294967295-0-0");
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join(".claude.json"), "{}").unwrap();
        let other = base.join("not-a-session");
        std::fs::create_dir(&other).unwrap();
        let next = SessionDir::create_in(&base).unwrap();
        assert!(!dead.exists());
        assert!(other.exists() && live.path().exists() && next.path().exists());
    }

    #[test]
    fn a_symlink_or_a_fifo_is_never_copied() {
        let tmp = tempfile::tempdir().unwrap();
        let secret = tmp.path().join("secret");
        std::fs::write(&secret, "SECRET").unwrap();
        let link = tmp.path().join(".claude.json");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let dir = SessionDir::create_in(&tmp.path().join("sessions")).unwrap();
        let err = dir.seed(&link).unwrap_err().to_string();
        assert!(err.contains("symbolic link"), "{err}");
        let fifo = tmp.path().join("fifo/.claude.json");
        std::fs::create_dir_all(fifo.parent().unwrap()).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let err = dir.seed(&fifo).unwrap_err().to_string();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn a_base_of_someone_else_or_a_symlink_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("real");
        std::fs::create_dir(&real).unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = SessionDir::create_in(&link).unwrap_err().to_string();
        assert!(err.contains("not a directory owned"), "{err}");
    }
}
