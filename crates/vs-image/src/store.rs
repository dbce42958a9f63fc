//! Store paths of a references graph, cached by name.
//!
//! A Nix store path is immutable by construction: Nix writes it once,
//! makes it read-only with mtime 1 and never changes it while it is valid;
//! its contents are those of its NAR (no hardlinks, no setuid, modes 0444
//! or 0555). So a layer made of whole store paths can be keyed by the
//! paths themselves, as nix2container does, and a rebuild need not stat
//! the files of cached store paths at all.
//!
//! The trust is limited: only paths that came from a references graph, lie
//! directly in the Nix store directory, have a well-formed store path name
//! and whose top-level entry looks like Nix left it (mtime 1, no write bit)
//! are keyed this way. The key also holds the top-level entry's device,
//! inode and ctime, so a path deleted by the garbage collector and added
//! again, or replaced, is read again. What stays trusted is that nobody
//! edits files inside a valid store path in place (Nix never does;
//! `nix-store --verify --check-contents` detects it). Every other input is
//! keyed by the metadata of all its files.

use sha2::{Digest as _, Sha256};

use crate::digest::{Digest, DigestExt as _};
use crate::options::Compression;

/// The Nix store directory: `NIX_STORE_DIR` (the variable Nix itself
/// reads) when it is an absolute normalised path, else `/nix/store`.
pub(crate) fn store_dir() -> String {
    std::env::var("NIX_STORE_DIR")
        .ok()
        .filter(|d| crate::spec::normalize_abs(d).is_some())
        .unwrap_or_else(|| "/nix/store".to_owned())
}

/// Nix's base-32 alphabet (no e, o, t, u).
const BASE32: &[u8] = b"0123456789abcdfghijklmnpqrsvwxyz";

/// Whether `name` is a store path base name: 32 base-32 digits, `-`, and
/// a name of the characters Nix allows, not starting with `.`.
pub(crate) fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    if b.len() < 34 || b.len() > 32 + 1 + 211 || b[32] != b'-' {
        return false;
    }
    let rest = &b[33..];
    b[..32].iter().all(|c| BASE32.contains(c))
        && !rest.starts_with(b".")
        && rest
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || b"+-._?=".contains(c))
}

/// What the key records of a store path's top-level entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TopStamp {
    dev: u64,
    ino: u64,
    ctime: i64,
    ctime_ns: u32,
    mode: u16,
}

/// The top-level stamp of `path` if it may be keyed by name, else why not.
pub(crate) fn trusted(path: &str, store_dir: &str) -> Result<TopStamp, &'static str> {
    let name = path
        .strip_prefix(store_dir)
        .and_then(|r| r.strip_prefix('/'))
        .ok_or("not in the Nix store directory")?;
    if !valid_name(name) {
        return Err("not a store path name directly in the store directory");
    }
    let m = rustix::fs::statx(
        rustix::fs::CWD,
        path,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        rustix::fs::StatxFlags::TYPE
            | rustix::fs::StatxFlags::MODE
            | rustix::fs::StatxFlags::INO
            | rustix::fs::StatxFlags::MTIME
            | rustix::fs::StatxFlags::CTIME,
    )
    .map_err(|_| "cannot be stat'ed")?;
    // Nix canonicalises every store path's mtime to 1.
    if m.stx_mtime.tv_sec != 1 {
        return Err("mtime is not 1 (not as Nix leaves a valid store path)");
    }
    let is_link =
        rustix::fs::FileType::from_raw_mode(u32::from(m.stx_mode)) == rustix::fs::FileType::Symlink;
    if !is_link && m.stx_mode & 0o222 != 0 {
        return Err("writable (not as Nix leaves a valid store path)");
    }
    Ok(TopStamp {
        dev: rustix::fs::makedev(m.stx_dev_major, m.stx_dev_minor),
        ino: m.stx_ino,
        ctime: m.stx_ctime.tv_sec,
        ctime_ns: m.stx_ctime.tv_nsec,
        mode: m.stx_mode,
    })
}

/// Cache key of a layer made of the store paths `paths` (with their
/// stamps): the names, the options that shape the layer's bytes, and the
/// format version.
pub(crate) fn layer_key(
    paths: &[(String, TopStamp)],
    compression: Compression,
    epoch: u64,
    allow_setuid: bool,
) -> Digest {
    let mut h = Sha256::new();
    h.update(format!(
        "vs-image store layer v2\0{}\0{epoch}\0{allow_setuid}\0",
        compression.as_str()
    ));
    for (p, s) in paths {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p.as_bytes());
        for v in [
            s.dev,
            s.ino,
            s.ctime as u64,
            u64::from(s.ctime_ns),
            u64::from(s.mode),
        ] {
            h.update(v.to_le_bytes());
        }
    }
    Digest::from_hasher(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_path_names() {
        assert!(valid_name("0123456789abcdfghijklmnpqrsvwxyz-bash-5.2"));
        assert!(valid_name("s8dgh4jgk6vyq4zbpm2n6rqhwg5l3r3i-a+b_c?d=e"));
        for bad in [
            "0123456789abcdfghijklmnpqrsvwxyz",
            "0123456789abcdfghijklmnpqrsvwxyz-",
            "0123456789abcdfghijklmnpqrsvwxye-bash",
            "0123456789abcdfghijklmnpqrsvwxyz-.hidden",
            "0123456789abcdfghijklmnpqrsvwxyz-a/b",
            "short-bash",
        ] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn outside_the_store_is_not_trusted() {
        assert!(trusted("/tmp/x", "/nix/store").is_err());
        assert!(trusted("/nix/store/abc/def", "/nix/store").is_err());
        assert!(
            trusted(
                "/nix/storex/0123456789abcdfghijklmnpqrsvwxyz-a",
                "/nix/store"
            )
            .is_err()
        );
    }
}
