//! Canonical paths for many paths that share their ancestors (the host
//! resources: dozens of `/etc` entries, toolchain directories): each
//! directory is resolved once, one `readlink` per distinct component,
//! instead of once for every path that passes through it, as
//! `std::fs::canonicalize` (`realpath`) does. [`canonicalize`] is the
//! same for one path, without the C library's allocator.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Symbolic links followed for one path before giving up (as `ELOOP`).
const MAX_LINKS: u32 = 40;

/// The canonical form of `path`, as `std::fs::canonicalize` gives it,
/// without the C library: musl's `realpath` (the static build's) allocates
/// its result with its own allocator, which maps and unmaps a page for it
/// on every call. A relative path is resolved from the current directory.
pub fn canonicalize(path: &Path) -> io::Result<PathBuf> {
    if path.is_absolute() {
        RealPaths::new().canonicalize(path)
    } else if path.as_os_str().is_empty() {
        Err(io::Error::from_raw_os_error(libc::ENOENT))
    } else {
        RealPaths::new().canonicalize(&std::env::current_dir()?.join(path))
    }
}

/// A cache of resolved paths; the same results as
/// `std::fs::canonicalize` for absolute paths (relative ones are passed
/// to it). Meant to live for one computation: it does not notice a link
/// changed after it was resolved. Paths are handled as bytes: a host
/// resource set resolves dozens of paths on every launch.
#[derive(Debug, Default)]
pub(crate) struct RealPaths {
    /// `canonical-dir/name` → its canonical form.
    known: HashMap<Vec<u8>, Vec<u8>>,
    /// The C string of the path `readlink` is asked about.
    scratch: Vec<u8>,
    /// Where `readlink` writes (its capacity; reused, never zeroed).
    target: Vec<u8>,
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
            return canonicalize(path);
        }
        let mut links = 0;
        let bytes = path.as_os_str().as_bytes();
        let real = self.walk(b"/".to_vec(), bytes, &mut links)?;
        // A trailing `/` (or `/.`) names a directory, as for realpath.
        if (bytes.ends_with(b"/") || bytes.ends_with(b"/."))
            && !std::fs::metadata(OsStr::from_bytes(&real))?.is_dir()
        {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        Ok(PathBuf::from(OsStr::from_bytes(&real)))
    }

    /// Resolves `rest` below the canonical directory `cur`.
    fn walk(&mut self, mut cur: Vec<u8>, rest: &[u8], links: &mut u32) -> io::Result<Vec<u8>> {
        if rest.first() == Some(&b'/') {
            cur.clear();
            cur.push(b'/');
        }
        for name in rest.split(|b| *b == b'/') {
            match name {
                b"" | b"." => {}
                b".." => {
                    // As realpath: `..` of a file is ENOTDIR, not its parent.
                    if cur != b"/" && !std::fs::metadata(OsStr::from_bytes(&cur))?.is_dir() {
                        return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
                    }
                    let cut = cur.iter().rposition(|b| *b == b'/').unwrap_or(0);
                    cur.truncate(cut.max(1));
                }
                _ => cur = self.step(cur, name, links)?,
            }
        }
        Ok(cur)
    }

    /// The canonical form of `dir/name`, `dir` being canonical.
    fn step(&mut self, mut dir: Vec<u8>, name: &[u8], links: &mut u32) -> io::Result<Vec<u8>> {
        let parent_len = dir.len();
        if dir != b"/" {
            dir.push(b'/');
        }
        dir.extend_from_slice(name);
        let candidate = dir;
        if let Some(real) = self.known.get(&candidate) {
            return Ok(real.clone());
        }
        let real = match self.read_link(&candidate) {
            Ok(target) => {
                *links += 1;
                if *links > MAX_LINKS {
                    return Err(io::Error::from_raw_os_error(libc::ELOOP));
                }
                let mut parent = candidate.clone();
                parent.truncate(parent_len);
                self.walk(parent, &target, links)?
            }
            // Not a symbolic link, but there.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => candidate.clone(),
            Err(e) => return Err(e),
        };
        self.known.insert(candidate, real.clone());
        Ok(real)
    }

    /// `readlink(path)`, into a reused buffer.
    fn read_link(&mut self, path: &[u8]) -> io::Result<Vec<u8>> {
        const CAP: usize = libc::PATH_MAX as usize;
        self.scratch.clear();
        self.scratch.extend_from_slice(path);
        self.scratch.push(0);
        self.target.clear();
        self.target.reserve(CAP);
        // SAFETY: `scratch` is NUL-terminated and holds no other NUL (a
        // path's bytes); readlink writes at most CAP bytes into the
        // target's spare capacity, which is at least CAP.
        let n = unsafe {
            libc::readlink(
                self.scratch.as_ptr().cast(),
                self.target.as_mut_ptr().cast(),
                CAP,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = n as usize;
        if n >= CAP {
            // Possibly truncated: let std read it whole.
            return std::fs::read_link(OsStr::from_bytes(path))
                .map(|t| t.into_os_string().into_vec());
        }
        // SAFETY: readlink initialised the first `n` bytes.
        unsafe { self.target.set_len(n) };
        Ok(self.target.clone())
    }
}

#[cfg(test)]
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
        std::os::unix::fs::symlink(dir.join("abs/b/up"), dir.join("chain")).unwrap();
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
            "abs//b/./f",
            "rel/",
            "abs/b/../../rel/up",
            "chain",
            "a/b/f/",
            "a/b/f/.",
            "rel/.",
        ] {
            let p = dir.join(p);
            let ours = cache.canonicalize(&p);
            match std::fs::canonicalize(&p) {
                Ok(want) => assert_eq!(ours.unwrap(), want, "{}", p.display()),
                Err(_) => assert!(ours.is_err(), "{}: {ours:?}", p.display()),
            }
        }
        for p in [
            "/",
            "/etc/os-release",
            "/bin/sh",
            "/proc/self",
            "/..",
            "/usr/../bin/.",
        ] {
            let p = Path::new(p);
            if let Ok(want) = std::fs::canonicalize(p) {
                assert_eq!(RealPaths::new().canonicalize(p).unwrap(), want);
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn relative_and_empty_paths_agree_with_std() {
        for p in [
            "",
            ".",
            "..",
            "./src",
            "src/../Cargo.toml",
            "missing",
            "Cargo.toml/",
        ] {
            let p = Path::new(p);
            match std::fs::canonicalize(p) {
                Ok(want) => assert_eq!(canonicalize(p).unwrap(), want, "{}", p.display()),
                Err(_) => assert!(canonicalize(p).is_err(), "{}", p.display()),
            }
        }
    }
}
