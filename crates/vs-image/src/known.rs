//! The content digests of a group's files as the last layer write read
//! them, kept in the layer cache, so that rewriting a layer after one of
//! its files changed hashes only that file for the SBOM (the layer itself
//! is hashed whole, as always). A digest is reused only while the file's
//! size, device, inode, mtime and ctime are the ones it was read with: the
//! trust the layer cache's keys already place in them.
//!
//! A file's digest is BLAKE3 ([`FileDigest`]): it only enters the group
//! listings of the SBOM (a vibesys format, see `docs/images.md`), where no
//! format asks for SHA-256, and a cold build computes it over every byte a
//! second time, beside the layer's own SHA-256.

use std::collections::HashMap;
use std::io::{self, Read};
use std::path::Path;

use crate::digest::Digest;
use crate::input::{Entry, Kind};

/// The BLAKE3 of a file's content, as the SBOM's group listings name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileDigest([u8; 32]);

impl FileDigest {
    /// The digest of `bytes`.
    pub(crate) fn of(bytes: &[u8]) -> Self {
        Self(*blake3::hash(bytes).as_bytes())
    }

    /// Lowercase hex, as the listings write it, into a buffer: no
    /// allocation (a layer writes one per file).
    pub(crate) fn hex_into<'a>(&self, buf: &'a mut [u8; 64]) -> &'a [u8] {
        // 64 bytes hold the 32 bytes' hex exactly: encoding cannot fail.
        let _ = hex::encode_to_slice(self.0, buf);
        &buf[..]
    }
}

/// A reader that computes the [`FileDigest`] of what passes through it.
pub(crate) struct FileHashReader<R> {
    inner: R,
    hasher: blake3::Hasher,
}

impl<R: Read> FileHashReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: blake3::Hasher::new(),
        }
    }

    /// Reads the rest to the end, then returns the digest.
    pub(crate) fn finish(mut self) -> io::Result<FileDigest> {
        io::copy(&mut self, &mut io::sink())?;
        Ok(FileDigest(*self.hasher.finalize().as_bytes()))
    }
}

impl<R: Read> Read for FileHashReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// What a file's digest is valid for: size, device, inode, mtime (s, ns),
/// ctime (s, ns).
pub(crate) type FileStamp = [u64; 7];

/// The stamp of a host file entry; `None` for anything else.
pub(crate) fn stamp_of(e: &Entry) -> Option<FileStamp> {
    let Kind::File { size, dev, ino, .. } = e.kind else {
        return None;
    };
    let s = e.stamp;
    Some([
        size,
        dev,
        ino,
        s.mtime as u64,
        s.mtime_ns as u64,
        s.ctime as u64,
        s.ctime_ns as u64,
    ])
}

const MAGIC: &[u8] = b"vs-image file digests v2 blake3\n";

/// Content digests of one group's files by path, as read from the cache.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct KnownDigests {
    files: HashMap<String, (FileStamp, [u8; 32])>,
}

impl KnownDigests {
    /// The cache key of a group's digests: where its files are read from
    /// and its name.
    pub(crate) fn key(host_root: &Path, group: &str) -> Digest {
        let mut k = b"vs-image group files v2\0".to_vec();
        k.extend_from_slice(host_root.as_os_str().as_encoded_bytes());
        k.push(0);
        k.extend_from_slice(group.as_bytes());
        Digest::of(&k)
    }

    /// The digest of the file at `path`, if it was read with `stamp`.
    pub(crate) fn get(&self, path: &str, stamp: &FileStamp) -> Option<FileDigest> {
        self.files
            .get(path)
            .filter(|(s, _)| s == stamp)
            .map(|(_, raw)| FileDigest(*raw))
    }

    /// Reads what [`SeenDigests::encoded`] wrote; `None` when it is not
    /// that (another version, cut short).
    pub(crate) fn decode(bytes: &[u8]) -> Option<Self> {
        let mut rest = bytes.strip_prefix(MAGIC)?;
        let mut take = |n: usize| -> Option<&[u8]> {
            let (head, tail) = rest.split_at_checked(n)?;
            rest = tail;
            Some(head)
        };
        let mut files = HashMap::new();
        while let Some(len) = take(4) {
            let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
            let path = std::str::from_utf8(take(len)?).ok()?.to_owned();
            let mut stamp = [0u64; 7];
            for v in &mut stamp {
                *v = u64::from_le_bytes(take(8)?.try_into().ok()?);
            }
            let raw: [u8; 32] = take(32)?.try_into().ok()?;
            files.insert(path, (stamp, raw));
        }
        // `take(4)` stops only at the end or mid-record: only the end is whole.
        rest.is_empty().then_some(Self { files })
    }
}

/// The content digests a layer write notes for one group, encoded as they
/// come (no map, no copy of the paths: a cold build notes every file): per
/// file its path's length and bytes, the stamp and the raw digest, little
/// endian.
#[derive(Debug)]
pub(crate) struct SeenDigests {
    bytes: Vec<u8>,
}

impl Default for SeenDigests {
    fn default() -> Self {
        Self {
            bytes: MAGIC.to_vec(),
        }
    }
}

impl SeenDigests {
    /// Notes the digest of the file at `path` read with `stamp`.
    pub(crate) fn insert(&mut self, path: &str, stamp: FileStamp, digest: &FileDigest) {
        self.bytes
            .extend_from_slice(&(path.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(path.as_bytes());
        for v in stamp {
            self.bytes.extend_from_slice(&v.to_le_bytes());
        }
        self.bytes.extend_from_slice(&digest.0);
    }

    /// Whether no file was noted.
    pub(crate) fn is_empty(&self) -> bool {
        self.bytes.len() == MAGIC.len()
    }

    /// What [`KnownDigests::decode`] reads.
    pub(crate) fn encoded(&self) -> &[u8] {
        &self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_it_did_not_write() {
        let mut seen = SeenDigests::default();
        assert!(seen.is_empty());
        let d = FileDigest::of(b"content");
        seen.insert("usr/bin/a", [1, 2, 3, 4, 5, 6, 7], &d);
        seen.insert("étc/b", [9; 7], &FileDigest::of(b"other"));
        assert!(!seen.is_empty());
        let bytes = seen.encoded();
        let known = KnownDigests::decode(bytes).unwrap();
        assert_eq!(known.get("usr/bin/a", &[1, 2, 3, 4, 5, 6, 7]), Some(d));
        assert_eq!(known.get("étc/b", &[9; 7]), Some(FileDigest::of(b"other")));
        assert_eq!(known.get("usr/bin/a", &[1, 2, 3, 4, 5, 6, 8]), None);
        assert_eq!(known.get("usr/bin/c", &[1, 2, 3, 4, 5, 6, 7]), None);
        assert!(KnownDigests::decode(&bytes[..bytes.len() - 1]).is_none());
        assert!(KnownDigests::decode(b"something else").is_none());
        assert_eq!(
            KnownDigests::decode(SeenDigests::default().encoded()).unwrap(),
            KnownDigests::default()
        );
    }
}
