//! Canonical paths for many paths that share their ancestors (the host
//! resources: dozens of `/etc` entries, toolchain directories): each
//! directory is resolved once, one `readlink` per distinct component,
//! instead of once for every path that passes through it, as
//! `std::fs::canonicalize` (`realpath`) does.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::path::{Component, Path, PathBuf};

/// Symbolic links followed for one path before giving up (as `ELOOP`).
const MAX_LINKS: u32 = 40;

/// A cache of resolved paths; the same results as
/// `std::fs::canonicalize` for absolute paths (relative ones are passed
/// to it). Meant to live for one computation: it does not notice a link
/// changed after it was resolved.
#[derive(Debug, Default)]
pub(crate) struct RealPaths {
    known: HashMap<PathBuf, PathBuf>,
}

impl RealPaths {
    /// An empty cache.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The canonical form of `path`: absolute, no `.`, `..` or symbolic
    /// link. Fails as `realpath` does (a missing component, a
    /// non-directory in the middle, a loop).
    pub(crate) fn canonicalize(&mut self, path: &Path) -> io::Result<PathBuf> {
        if !path.is_absolute() {
            return std::fs::canonicalize(path);
        }
        let mut links = 0;
        self.walk(PathBuf::from("/"), path, &mut links)
    }

    /// Resolves `rest` below the canonical directory `cur`.
    fn walk(&mut self, mut cur: PathBuf, rest: &Path, links: &mut u32) -> io::Result<PathBuf> {
        for component in rest.components() {
            match component {
                Component::RootDir => cur = PathBuf::from("/"),
                Component::CurDir | Component::Prefix(_) => {}
                Component::ParentDir => {
                    // As realpath: `..` of a file is ENOTDIR, not its parent.
                    if cur != Path::new("/") && !std::fs::metadata(&cur)?.is_dir() {
                        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
                    }
                    cur.pop();
                }
                Component::Normal(name) => cur = self.step(&cur, name, links)?,
            }
        }
        Ok(cur)
    }

    /// The canonical form of `dir/name`, `dir` being canonical.
    fn step(&mut self, dir: &Path, name: &OsStr, links: &mut u32) -> io::Result<PathBuf> {
        let candidate = dir.join(name);
        if let Some(real) = self.known.get(&candidate) {
            return Ok(real.clone());
        }
        let real = match std::fs::read_link(&candidate) {
            Ok(target) => {
                *links += 1;
                if *links > MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                self.walk(dir.to_path_buf(), &target, links)?
            }
            // Not a symbolic link, but there.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => candidate.clone(),
            Err(e) => return Err(e),
        };
        self.known.insert(candidate, real.clone());
        Ok(real)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_std_canonicalize_on_real_links() {
        let dir = std::env::temp_dir().join(format!("vs-realpath-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("a/b")).unwrap();
        std::fs::write(dir.join("a/b/f"), "x").unwrap();
        std::os::unix::fs::symlink("a/b", dir.join("rel")).unwrap();
        std::os::unix::fs::symlink(dir.join("a"), dir.join("abs")).unwrap();
        std::os::unix::fs::symlink("../b/f", dir.join("a/b/up")).unwrap();
        std::os::unix::fs::symlink("loop2", dir.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", dir.join("loop2")).unwrap();
        let mut cache = RealPaths::new();
        for p in [
            "rel/f",
            "abs/b/f",
            "a/b/up",
            "rel/up",
            "a/./b/../b/f",
            "abs/../rel",
            "missing",
            "a/b/f/x",
            "a/b/f/..",
            "a/b/f/../f",
            "loop1",
            "rel/f",
        ] {
            let p = dir.join(p);
            let ours = cache.canonicalize(&p);
            match std::fs::canonicalize(&p) {
                Ok(want) => assert_eq!(ours.unwrap(), want, "{}", p.display()),
                Err(_) => assert!(ours.is_err(), "{}: {ours:?}", p.display()),
            }
        }
        for p in ["/", "/etc/os-release", "/bin/sh", "/proc/self"] {
            let p = Path::new(p);
            if let Ok(want) = std::fs::canonicalize(p) {
                assert_eq!(RealPaths::new().canonicalize(p).unwrap(), want);
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
