//! Reading a small file that someone else may control: a regular file,
//! opened without following a final symlink and without blocking (a fifo
//! cannot hang the reader), checked on the descriptor that is then read,
//! and read with a size cap (a link to `/dev/zero` cannot grow memory).

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Why a bounded file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BoundedReadError {
    /// Opening or reading failed.
    #[error("cannot read {path:?}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The path is a symlink, fifo, device, socket or directory.
    #[error("{path:?} is a {found}, not a regular file")]
    NotAFile {
        /// The file.
        path: PathBuf,
        /// What was found.
        found: &'static str,
    },
    /// The file holds more than the limit.
    #[error("{path:?} is larger than {limit} bytes")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
}

impl BoundedReadError {
    /// The file the error is about.
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. } | Self::NotAFile { path, .. } | Self::TooLarge { path, .. } => {
                path
            }
        }
    }
}

/// Opens `path` for reading: no final symlink (`O_NOFOLLOW`), no blocking
/// open of a fifo (`O_NONBLOCK`), and checks on the opened descriptor that
/// it is a regular file. `Ok(None)` when nothing is there.
pub fn open_regular(path: &Path) -> Result<Option<File>, BoundedReadError> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW on a symlink: ELOOP; say what it is.
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(BoundedReadError::NotAFile {
                path: path.to_path_buf(),
                found: "symlink",
            });
        }
        Err(source) => {
            return Err(BoundedReadError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let meta = file.metadata().map_err(|source| BoundedReadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.file_type().is_file() {
        return Err(BoundedReadError::NotAFile {
            path: path.to_path_buf(),
            found: crate::policy::file_type_name(&meta.file_type()),
        });
    }
    Ok(Some(file))
}

/// Reads a regular file of at most `limit` bytes (see [`open_regular`]).
/// `Ok(None)` when it does not exist.
pub fn read_bounded(path: &Path, limit: u64) -> Result<Option<Vec<u8>>, BoundedReadError> {
    let Some(file) = open_regular(path)? else {
        return Ok(None);
    };
    let mut buf = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|source| BoundedReadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    if buf.len() as u64 > limit {
        return Err(BoundedReadError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(Some(buf))
}

/// The names in directory `path` (without `.` and `..`), unsorted, read
/// with `getdents64` into a buffer of Rust's allocator: std's `read_dir`
/// goes through the C library's `opendir`, whose buffer the static
/// build's musl allocator maps and unmaps on every call. A final symlink
/// is followed, as `read_dir` does.
pub fn dir_names(path: &Path) -> std::io::Result<Vec<std::ffi::OsString>> {
    use rustix::fs::{Mode, OFlags};
    use std::os::unix::ffi::OsStrExt;
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut names = Vec::new();
    for entry in rustix::fs::Dir::new(fd)? {
        let name = entry?;
        let name = name.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(std::ffi::OsStr::from_bytes(name).to_owned());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "12345").unwrap();
        assert_eq!(read_bounded(&file, 5).unwrap().unwrap(), b"12345");
        assert!(matches!(
            read_bounded(&file, 4),
            Err(BoundedReadError::TooLarge { limit: 4, .. })
        ));
        assert!(read_bounded(&dir.path().join("none"), 5).unwrap().is_none());

        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let err = read_bounded(&link, 5).unwrap_err();
        assert!(err.to_string().contains("symlink"), "{err}");

        let fifo = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(status.success());
        // Returns at once (no writer would ever come).
        let err = read_bounded(&fifo, 5).unwrap_err();
        assert!(err.to_string().contains("fifo"), "{err}");

        let err = read_bounded(dir.path(), 5).unwrap_err();
        assert!(err.to_string().contains("directory"), "{err}");
    }

    #[test]
    fn dir_names_lists_what_read_dir_lists() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        for name in ["a", ".hidden", "with space"] {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::os::unix::fs::symlink("nowhere", dir.path().join("link")).unwrap();
        std::fs::write(dir.path().join(std::ffi::OsStr::from_bytes(b"\xff")), "").unwrap();
        let mut ours = dir_names(dir.path()).unwrap();
        ours.sort();
        let mut want: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        want.sort();
        assert_eq!(ours, want);
        assert!(dir_names(&dir.path().join("a")).is_err());
        assert!(dir_names(&dir.path().join("missing")).is_err());
    }
}
