//! Whether a file is a static ELF executable (no program interpreter), so
//! it can run inside any image.

use std::io::{self, Read};
use std::path::Path;

/// `PT_INTERP`: the program header naming the dynamic loader.
const PT_INTERP: u32 = 3;
/// Program headers read at most (a real executable has a dozen).
const MAX_PHDRS: u16 = 256;

/// Why a file cannot serve as the in-container command server.
#[derive(Debug, thiserror::Error)]
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

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// `Some(has PT_INTERP)` for an ELF64 LE executable within `b`, else `None`.
fn has_interp(b: &[u8]) -> Option<bool> {
    // magic, ELFCLASS64, ELFDATA2LSB
    if b.get(..6)? != b"\x7fELF\x02\x01" {
        return None;
    }
    // e_type: ET_EXEC (2) or ET_DYN (3, PIE)
    if !matches!(u16_at(b, 16)?, 2 | 3) {
        return None;
    }
    let phoff = usize::try_from(u64_at(b, 32)?).ok()?;
    let phentsize = usize::from(u16_at(b, 54)?);
    let phnum = u16_at(b, 56)?;
    if phentsize < 4 || phnum == 0 || phnum > MAX_PHDRS {
        return None;
    }
    let mut interp = false;
    for i in 0..usize::from(phnum) {
        let at = phoff.checked_add(i.checked_mul(phentsize)?)?;
        if u32_at(b, at)? == PT_INTERP {
            interp = true;
        }
    }
    Some(interp)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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
