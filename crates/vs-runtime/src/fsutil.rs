//! Small filesystem helpers: atomic writes, bounded reads, symlink-safe
//! directory creation.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Result, RuntimeError};

/// Why [`copy_hashed`] stopped.
#[derive(Debug)]
pub(crate) enum CopyError {
    /// Reading the source failed.
    Read(io::Error),
    /// Writing the destination failed.
    Write(io::Error),
    /// The source held more than the limit.
    TooLarge,
}

/// Copies `src` to `dst` through one bounded buffer, hashing every byte
/// that passes (sha256), and stops past `limit` bytes: the size and the
/// hex digest of what was copied.
pub(crate) fn copy_hashed(
    src: &mut impl Read,
    dst: &mut impl Write,
    limit: u64,
) -> std::result::Result<(u64, String), CopyError> {
    use sha2::{Digest, Sha256};
    const BUF_SIZE: usize = 1024 * 1024;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF_SIZE];
    let mut size: u64 = 0;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(CopyError::Read(e)),
        };
        size += n as u64;
        if size > limit {
            return Err(CopyError::TooLarge);
        }
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n]).map_err(CopyError::Write)?;
    }
    Ok((size, hex::encode(hasher.finalize())))
}

/// Describes a file type for error messages (one vocabulary with the
/// sandbox policy's errors).
pub(crate) fn kind_name(ft: &fs::FileType) -> &'static str {
    vs_sandbox::policy::file_type_name(ft)
}

/// Writes `bytes` to `path` atomically: a temp file in the same directory
/// (`.<name>.<pid>.<n>.tmp`), fsync, rename over `path`, fsync the directory.
/// Readers see the old content or the new one, never a partial file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let result = (|| -> io::Result<()> {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        Ok(())
    })();
    if let Err(source) = result {
        let _ = fs::remove_file(&tmp);
        return Err(RuntimeError::io("write", &tmp, source));
    }
    if let Err(source) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(RuntimeError::io("rename into", path, source));
    }
    // Persist the rename; a failure here leaves a complete file in place.
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// Reads a regular file (never through a final symlink, never blocking on
/// a fifo, checked on the descriptor it reads) of at most `limit` bytes.
/// Returns `Ok(None)` when it does not exist.
pub(crate) fn read_bounded(path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
    use vs_sandbox::fsread::{self, BoundedReadError};
    fsread::read_bounded(path, limit).map_err(|e| match e {
        BoundedReadError::Io { path, source } => RuntimeError::io("read", &path, source),
        BoundedReadError::NotAFile { path, found } => RuntimeError::NotAFile { path, found },
        BoundedReadError::TooLarge { path, limit } => RuntimeError::TooLarge { path, limit },
        // A cause added later: still a failed read of this file, saying why.
        other => RuntimeError::io(
            "read",
            other.path().to_owned(),
            io::Error::other(other.to_string()),
        ),
    })
}

/// Opens a file for reading without following a final symlink and without
/// blocking on a fifo.
pub(crate) fn open_nofollow(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// Makes `root/rel` exist as a chain of real directories. Every component
/// below `root` must be a directory (not a symlink, not a file); missing ones
/// are created. `rel` must be relative and free of `..`.
pub(crate) fn ensure_dir_chain(root: &Path, rel: &Path) -> Result<PathBuf> {
    walk_dir_chain(root, rel, true)?.ok_or_else(|| {
        RuntimeError::io(
            "create directory",
            root.join(rel),
            io::Error::from(io::ErrorKind::NotFound),
        )
    })
}

/// Checks that `root/rel` is a chain of real directories (no symlink, no
/// other file type on any component) without creating anything. Returns
/// the path, or `None` when a component is missing.
pub(crate) fn existing_dir_chain(root: &Path, rel: &Path) -> Result<Option<PathBuf>> {
    walk_dir_chain(root, rel, false)
}

/// Walks `rel` below `root` component by component, refusing anything but
/// a real directory; a missing component is created when `create`, else
/// the walk ends with `None`.
fn walk_dir_chain(root: &Path, rel: &Path, create: bool) -> Result<Option<PathBuf>> {
    let mut cur = root.to_path_buf();
    let not_a_dir = |path: PathBuf, m: &fs::Metadata| RuntimeError::NotADirectory {
        path,
        found: kind_name(&m.file_type()),
    };
    for comp in rel.components() {
        match comp {
            Component::Normal(c) => cur.push(c),
            Component::CurDir => continue,
            _ => {
                return Err(RuntimeError::io(
                    "resolve",
                    rel,
                    io::Error::new(io::ErrorKind::InvalidInput, "not a plain relative path"),
                ));
            }
        }
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(m) => return Err(not_a_dir(cur, &m)),
            Err(e) if e.kind() == io::ErrorKind::NotFound && !create => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => match fs::create_dir(&cur) {
                Ok(()) => {}
                // Lost a race: accept it only if it is a real directory.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let m = fs::symlink_metadata(&cur)
                        .map_err(|e| RuntimeError::io("inspect", &cur, e))?;
                    if !m.file_type().is_dir() {
                        return Err(not_a_dir(cur, &m));
                    }
                }
                Err(e) => return Err(RuntimeError::io("create directory", &cur, e)),
            },
            Err(e) => return Err(RuntimeError::io("inspect", &cur, e)),
        }
    }
    Ok(Some(cur))
}

/// Fills `buf` from the system random source.
pub(crate) fn random_bytes(buf: &mut [u8]) -> Result<()> {
    let path = Path::new("/dev/urandom");
    let mut f = File::open(path).map_err(|e| RuntimeError::io("open", path, e))?;
    f.read_exact(buf)
        .map_err(|e| RuntimeError::io("read", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn dir_chain_refuses_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(other.path(), dir.path().join("a")).unwrap();
        let err = ensure_dir_chain(dir.path(), Path::new("a/b")).unwrap_err();
        assert!(matches!(err, RuntimeError::NotADirectory { .. }), "{err}");
        assert!(!other.path().join("b").exists());
        let err = existing_dir_chain(dir.path(), Path::new("a/b")).unwrap_err();
        assert!(matches!(err, RuntimeError::NotADirectory { .. }), "{err}");
        fs::create_dir(dir.path().join("c")).unwrap();
        assert!(
            existing_dir_chain(dir.path(), Path::new("c/d"))
                .unwrap()
                .is_none()
        );
        assert!(
            existing_dir_chain(dir.path(), Path::new("c"))
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_hashed_copy_is_the_bytes_and_their_sha256_within_the_limit() {
        let data = b"abc".repeat(1000);
        let mut out = Vec::new();
        let (size, hex) = copy_hashed(&mut &data[..], &mut out, 3000).unwrap();
        assert_eq!((size, out.as_slice()), (3000, &data[..]));
        use sha2::Digest;
        assert_eq!(hex, hex::encode(sha2::Sha256::digest(&data)));
        assert!(matches!(
            copy_hashed(&mut &data[..], &mut Vec::new(), 2999),
            Err(CopyError::TooLarge)
        ));
    }

    #[test]
    fn bounded_read_limits() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, b"12345").unwrap();
        assert!(read_bounded(&p, 5).unwrap().is_some());
        assert!(matches!(
            read_bounded(&p, 4),
            Err(RuntimeError::TooLarge { .. })
        ));
        assert!(read_bounded(&dir.path().join("nope"), 5).unwrap().is_none());
    }
}
