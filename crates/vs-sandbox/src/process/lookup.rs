//! Whether a command's program can be executed, judged before a launch
//! whose launcher cannot tell the difference afterwards.
//!
//! bwrap reports a program it cannot execute as its own exit status 1
//! (`bwrap: execvp X: ...`), the same as a command that ran and failed.
//! The sandbox shows a subset of the host's files (plus a fresh `/proc`,
//! `/dev` and an empty `/tmp`), so a program the host does not have, the
//! sandbox does not have either: looked up on the host the way `execvp`
//! looks it up in the sandbox, a miss is reported as 127 and a file that
//! cannot be executed as 126, as the Landlock launcher and shells do. A
//! program the host has is left to the launch (the sandbox may still hide
//! it: then bwrap's status stands).

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// `execvp`'s search path when `PATH` is unset (glibc's, bwrap's C
/// library).
pub(crate) const EXECVP_DEFAULT_PATH: &str = "/bin:/usr/bin";

/// What an empty entry of a `PATH` stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EmptyEntry {
    /// The current directory, as for `execvp`.
    CurrentDir,
    /// Nothing: the entry is not searched (the runner's search, Linux
    /// only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Skip,
}

/// The paths a search for `program` (a name without `/`) tries, in order:
/// each entry of `path_var` joined with it, an entry relative to `dir`
/// when one is given (else to the current directory).
pub(crate) fn search_path<'a>(
    program: &'a OsStr,
    path_var: &'a OsStr,
    dir: Option<&'a Path>,
    empty: EmptyEntry,
) -> impl Iterator<Item = PathBuf> + 'a {
    path_var
        .as_bytes()
        .split(|&b| b == b':')
        .filter(move |entry| !entry.is_empty() || empty == EmptyEntry::CurrentDir)
        .map(move |entry| {
            let entry = Path::new(OsStr::from_bytes(entry));
            dir.map_or_else(|| entry.to_path_buf(), |d| d.join(entry))
                .join(program)
        })
}

/// Whether `path` is a regular file with an execute bit set (for anyone).
pub(crate) fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why `execvp(program)` would fail in a sandbox whose command starts in
/// `dir` with `PATH` = `path_var`, or `None` when it finds a candidate it
/// can execute. `NotFound` when nothing by that name exists; `EACCES` when
/// something does but none can be executed (a directory, no execute
/// permission), as `execvp` reports it.
pub(crate) fn exec_error(
    program: &OsStr,
    path_var: Option<&OsStr>,
    dir: &Path,
) -> Option<io::Error> {
    if program.is_empty() {
        return Some(io::Error::from_raw_os_error(libc::ENOENT));
    }
    if program.as_bytes().contains(&b'/') {
        return check(&dir.join(program)).err();
    }
    let path_var = path_var.unwrap_or(OsStr::new(EXECVP_DEFAULT_PATH));
    let mut denied = None;
    for candidate in search_path(program, path_var, Some(dir), EmptyEntry::CurrentDir) {
        match check(&candidate) {
            Ok(()) => return None,
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => denied = Some(e),
            Err(_) => {}
        }
    }
    Some(denied.unwrap_or_else(|| io::Error::from_raw_os_error(libc::ENOENT)))
}

/// `Ok` when `path` is a file its user may execute; `EACCES` for a
/// directory or a file without execute permission; the look-up's error
/// otherwise.
fn check(path: &Path) -> io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if meta.is_dir() {
        return Err(io::Error::from_raw_os_error(libc::EACCES));
    }
    rustix::fs::access(path, rustix::fs::Access::EXEC_OK).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn code(e: Option<io::Error>) -> Option<i32> {
        e.map(|e| e.raw_os_error().unwrap())
    }

    #[test]
    fn programs_are_looked_up_as_execvp_does() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("bin")).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("bin/tool"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(root.join("bin/tool"), PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::write(root.join("plain"), "data").unwrap();
        std::fs::set_permissions(root.join("plain"), PermissionsExt::from_mode(0o644)).unwrap();
        let path = OsStr::new("/nonexistent:bin");
        // Found through a relative PATH entry, resolved from `dir`.
        assert!(exec_error(OsStr::new("tool"), Some(path), root).is_none());
        assert!(exec_error(OsStr::new("./bin/tool"), None, root).is_none());
        assert!(exec_error(OsStr::new("sh"), None, root).is_none());
        // Missing everywhere: ENOENT (127).
        assert_eq!(
            code(exec_error(OsStr::new("no-such-tool"), Some(path), root)),
            Some(libc::ENOENT)
        );
        assert_eq!(
            code(exec_error(OsStr::new("./missing"), None, root)),
            Some(libc::ENOENT)
        );
        assert_eq!(
            code(exec_error(OsStr::new(""), None, root)),
            Some(libc::ENOENT)
        );
        // A directory, or a file without execute permission: EACCES
        // (126), also when found only through PATH, unless a later entry
        // has an executable one. Root may execute any file with an x bit,
        // but none of these has one.
        assert_eq!(
            code(exec_error(OsStr::new("./sub"), None, root)),
            Some(libc::EACCES)
        );
        assert_eq!(
            code(exec_error(OsStr::new("./plain"), None, root)),
            Some(libc::EACCES)
        );
        assert_eq!(
            code(exec_error(OsStr::new("plain"), Some(OsStr::new(":")), root)),
            Some(libc::EACCES)
        );
        std::fs::write(root.join("bin/plain"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(root.join("bin/plain"), PermissionsExt::from_mode(0o755)).unwrap();
        assert!(exec_error(OsStr::new("plain"), Some(OsStr::new(":bin")), root).is_none());
    }
}
