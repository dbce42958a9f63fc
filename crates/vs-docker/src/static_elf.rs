//! Whether a file is a static ELF executable (no program interpreter), so
//! it can run inside any image.

use std::io::{self, Read};
use std::path::Path;

use object::LittleEndian;
use object::elf::{self, FileHeader64};
use object::read::elf::{FileHeader as _, ProgramHeader as _};

/// Program headers read at most (a real executable has a dozen).
const MAX_PHDRS: u16 = 256;

/// Why a file cannot serve as the in-container command server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StaticElfError {
    /// The file cannot be read.
    #[error("cannot read {path:?}: {source}")]
    Read {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Not a 64-bit little-endian ELF executable.
    #[error("{path:?} is not a 64-bit little-endian ELF executable")]
    NotElf {
        /// The file.
        path: std::path::PathBuf,
    },
    /// It needs a dynamic loader.
    #[error(
        "{path:?} is dynamically linked (it has a program interpreter), so it cannot run inside the image; build a static vibesys with scripts/build-static.sh"
    )]
    Dynamic {
        /// The file.
        path: std::path::PathBuf,
    },
}

/// Checks that `path` is a regular file holding a static ELF64 LE
/// executable (static-pie included: it has no `PT_INTERP`).
pub fn check_static_executable(path: &Path) -> Result<(), StaticElfError> {
    let read_err = |source| StaticElfError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read_err)?;
    if !meta.is_file() {
        return Err(read_err(io::Error::other("not a regular file")));
    }
    let mut f = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    // The ELF header is 64 bytes; program headers follow within the first pages.
    (&mut f)
        .take(64 * 1024)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    match has_interp(&bytes) {
        None => Err(StaticElfError::NotElf {
            path: path.to_path_buf(),
        }),
        Some(true) => Err(StaticElfError::Dynamic {
            path: path.to_path_buf(),
        }),
        Some(false) => Ok(()),
    }
}

/// `Some(has PT_INTERP)` for an ELF64 LE executable within `b`, else `None`.
/// The `object` crate parses the header and the program-header table
/// (magic, class, byte order, version, entry size, table inside `b`); the
/// type and the bound on the number of headers stay ours.
fn has_interp(b: &[u8]) -> Option<bool> {
    let header = FileHeader64::<LittleEndian>::parse(b).ok()?;
    let endian = header.endian().ok()?;
    if !matches!(header.e_type(endian), elf::ET_EXEC | elf::ET_DYN) {
        return None;
    }
    let phnum = header.e_phnum(endian);
    if phnum == 0 || phnum > MAX_PHDRS {
        return None;
    }
    let phdrs = header.program_headers(endian, b).ok()?;
    Some(phdrs.iter().any(|p| p.p_type(endian) == elf::PT_INTERP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_binary_is_dynamic_or_static_and_text_is_not_elf() {
        // The test binary itself is a valid ELF either way.
        let exe = std::env::current_exe().unwrap();
        let b = std::fs::read(&exe).unwrap();
        assert!(has_interp(&b).is_some());
        assert!(has_interp(b"#!/bin/sh\n").is_none());
        assert!(has_interp(&b[..40]).is_none());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        std::fs::write(&f, "not elf").unwrap();
        assert!(matches!(
            check_static_executable(&f),
            Err(StaticElfError::NotElf { .. })
        ));
        assert!(matches!(
            check_static_executable(dir.path()),
            Err(StaticElfError::Read { .. })
        ));
    }

    #[test]
    fn header_bounds_hold() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(has_interp(&exe).is_some());
        // More program headers than the bound: refused before the table is read.
        let mut many = exe.clone();
        many[56..58].copy_from_slice(&(MAX_PHDRS + 1).to_le_bytes());
        assert!(has_interp(&many).is_none());
        // A table that runs past what was read: refused.
        let phoff = usize::try_from(u64::from_le_bytes(exe[32..40].try_into().unwrap())).unwrap();
        assert!(has_interp(&exe[..phoff + 8]).is_none());
        // Big-endian or 32-bit idents: refused.
        let mut be = exe.clone();
        be[5] = 2;
        assert!(has_interp(&be).is_none());
        let mut c32 = exe;
        c32[4] = 1;
        assert!(has_interp(&c32).is_none());
    }

    #[test]
    fn busybox_static_is_static_and_ls_is_dynamic() {
        let p = Path::new("/bin/busybox");
        assert!(
            p.exists(),
            "/bin/busybox is missing: install busybox-static (scripts/install-deps.sh)"
        );
        check_static_executable(p).unwrap();
        let ls = std::fs::read("/bin/ls").unwrap();
        assert_eq!(has_interp(&ls), Some(true));
        assert!(matches!(
            check_static_executable(Path::new("/bin/ls")),
            Err(StaticElfError::Dynamic { .. })
        ));
    }
}
