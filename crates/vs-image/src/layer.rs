//! Writing one layer: entries sorted, hardlinks kept within the layer,
//! content hashed while written (diff_id before compression, digest after),
//! written to a temporary file and renamed to `blobs/sha256/<hex>`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::digest::{Digest, DigestExt as _, HashWriter};
use crate::error::Error;
use crate::input::{Entry, Group, Kind};
use crate::known::{FileDigest, FileHashReader, KnownDigests, SeenDigests};
use crate::options::Compression;
use crate::tarw::TarWriter;

/// What a written layer is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LayerMeta {
    pub digest: Digest,
    pub diff_id: Digest,
    pub size: u64,
    pub uncompressed_size: u64,
    /// Each group of the layer with the digest of its listing.
    pub groups: Vec<(String, Digest)>,
}

/// What a layer keeps of each of its groups.
pub(crate) struct GroupInfo {
    pub name: String,
    /// See [`Group::host_root`].
    pub host_root: std::sync::Arc<Path>,
}

/// A layer to write: its groups, already merged and deduplicated.
pub(crate) struct LayerPlan {
    pub groups: Vec<GroupInfo>,
    pub entries: Vec<(usize, Entry)>,
}

impl LayerPlan {
    /// Merges groups into one sorted entry list; parents shared between
    /// groups appear once. Two different non-directory entries at one path
    /// are an error.
    pub(crate) fn new(groups: Vec<Group>) -> Result<Self, Error> {
        // Every entry in input order (per group: its parents, then its
        // entries), sorted by path with a stable sort so that entries at one
        // path are merged in input order: the first real directory wins
        // over synthetic parents, anything else twice is an error.
        let mut infos = Vec::with_capacity(groups.len());
        let mut items: Vec<Option<(usize, Entry, bool)>> = Vec::new();
        for (gi, g) in groups.into_iter().enumerate() {
            items.reserve(g.parents.len() + g.entries.len());
            items.extend(g.parents.into_iter().map(|p| Some((gi, p, true))));
            items.extend(g.entries.into_iter().map(|e| Some((gi, e, false))));
            infos.push(GroupInfo {
                name: g.name,
                host_root: g.host_root,
            });
        }
        let path = |i: usize| items[i].as_ref().map_or("", |(_, e, _)| e.path.as_str());
        let mut order: Vec<usize> = (0..items.len()).collect();
        order.sort_by(|&a, &b| path(a).cmp(path(b)));
        let mut entries: Vec<(usize, Entry)> = Vec::with_capacity(order.len());
        // (input position, error) of the first conflict in input order.
        let mut conflict: Option<(usize, Error)> = None;
        let mut kept: Option<(usize, Entry, bool)> = None;
        for &i in &order {
            let Some((gi, e, synthetic)) = items[i].take() else {
                continue;
            };
            let same = kept.as_ref().is_some_and(|(_, old, _)| old.path == e.path);
            if !same {
                if let Some((kgi, ke, _)) = kept.take() {
                    entries.push((kgi, ke));
                }
                kept = Some((gi, e, synthetic));
                continue;
            }
            let Some((_, old, old_synthetic)) = kept.as_mut() else {
                continue;
            };
            let both_dirs = matches!(old.kind, Kind::Dir) && matches!(e.kind, Kind::Dir);
            let err = if synthetic {
                // A parent where something already is: keep what is there.
                None
            } else if both_dirs {
                if *old_synthetic {
                    kept = Some((gi, e, false));
                }
                None
            } else if *old_synthetic && matches!(old.kind, Kind::Dir) {
                Some(Error::InputPath {
                    path: format!("/{}", e.path).into(),
                    reason: "is a directory in another input".to_owned(),
                })
            } else {
                Some(Error::InputPath {
                    path: format!("/{}", e.path).into(),
                    reason: "given by two inputs".to_owned(),
                })
            };
            if let Some(err) = err
                && conflict.as_ref().is_none_or(|(at, _)| i < *at)
            {
                conflict = Some((i, err));
            }
        }
        if let Some((_, err)) = conflict {
            return Err(err);
        }
        if let Some((kgi, ke, _)) = kept.take() {
            entries.push((kgi, ke));
        }
        Ok(Self {
            groups: infos,
            entries,
        })
    }

    /// The host file of entry `e` of group `gi`.
    pub(crate) fn source(&self, gi: usize, e: &Entry) -> PathBuf {
        self.groups[gi].host_root.join(&e.path)
    }

    pub(crate) fn size(&self) -> u64 {
        self.entries.iter().map(|(_, e)| e.size()).sum()
    }

    /// Writes the layer to `sink` and returns what it is, where its blob
    /// file is (`None` when written into an archive), and the content
    /// digest of each group's files (see [`crate::known`]).
    /// `helper`: hash and write the layer's bytes on a helper thread (worth
    /// it when a core would otherwise be idle). `known`: per group, the
    /// digests of its files as last read, used for files with the same
    /// stamp instead of hashing them again.
    pub(crate) fn write(
        &self,
        sink: Sink<'_>,
        compression: Compression,
        mtime: u64,
        helper: bool,
        known: &[Option<KnownDigests>],
    ) -> Result<(LayerMeta, Option<PathBuf>, Vec<SeenDigests>), Error> {
        let (tmp, out, out_path) = match sink {
            Sink::Dir(dir) => {
                let tmp = tempfile::Builder::new()
                    .prefix(".layer-")
                    .tempfile_in(dir)
                    .map_err(|e| Error::io("create temporary file in", dir, e))?;
                let path = tmp.path().to_owned();
                let file = tmp
                    .as_file()
                    .try_clone()
                    .map_err(|e| Error::io("open", &path, e))?;
                (Some(tmp), Out::File(file), path)
            }
            Sink::At { file, path, at } => {
                if compression != Compression::None {
                    return Err(Error::io(
                        "write a compressed layer into",
                        path,
                        io::Error::other("its size is not known before it is written"),
                    ));
                }
                (None, Out::At { file, at }, path.to_owned())
            }
        };
        let tmp_path = out_path;
        let blob = HashWriter::new(BufWriter::with_capacity(1 << 20, out));
        let enc = Enc::new(blob, compression).map_err(|e| Error::io("write", &tmp_path, e))?;
        let diff = if compression == Compression::None {
            HashWriter::counting(enc)
        } else {
            HashWriter::new(enc)
        };
        // Uncompressed, the layer's bytes can be hashed and written on a
        // helper thread (the bytes are the same however they are cut; a
        // compressor's output may not be).
        let helper = helper && compression == Compression::None;
        // Each group's listing: paths, modes, link targets and the BLAKE3
        // of each file's content as read for the layer.
        let ((group_hashers, seen), diff) =
            crate::pipe::write_through(diff, helper, &tmp_path, |w| {
                let mut tar = TarWriter::new(w, mtime);
                let mut group_hashers: Vec<Sha256> =
                    self.groups.iter().map(|_| Sha256::new()).collect();
                let mut seen: Vec<SeenDigests> =
                    self.groups.iter().map(|_| SeenDigests::default()).collect();
                self.write_entries(&mut tar, &mut group_hashers, known, &mut seen)?;
                tar.finish().map_err(|e| Error::io("write", &tmp_path, e))?;
                Ok((group_hashers, seen))
            })?;
        let (enc, diff_id, uncompressed_size) = diff.finish();
        let blob = enc.finish().map_err(|e| Error::io("write", &tmp_path, e))?;
        let (buf, digest, size) = blob.finish();
        let out = buf
            .into_inner()
            .map_err(|e| Error::io("write", &tmp_path, e.into_error()))?;
        drop(out);
        let diff_id = if compression == Compression::None {
            digest.clone()
        } else {
            diff_id
        };
        let dest = match (tmp, sink) {
            (Some(tmp), Sink::Dir(dir)) => {
                let dest = dir.join(digest.hex());
                crate::perm::publish_file(tmp.as_file())
                    .map_err(|e| Error::io("chmod", &dest, e))?;
                tmp.persist(&dest)
                    .map_err(|e| Error::io("rename into place", &dest, e.error))?;
                Some(dest)
            }
            _ => None,
        };
        let groups = self
            .groups
            .iter()
            .zip(group_hashers)
            .map(|(g, h)| (g.name.clone(), Digest::from_hasher(h)))
            .collect();
        Ok((
            LayerMeta {
                digest,
                diff_id,
                size,
                uncompressed_size,
                groups,
            },
            dest,
            seen,
        ))
    }

    /// Calls `f` with each entry in order and what the layer holds for
    /// it: a later path of a file with more than one link becomes a hard
    /// link to the first. [`LayerPlan::write`] and [`LayerPlan::tar_size`]
    /// both walk the entries through here, so they cannot disagree.
    fn each_step(
        &self,
        mut f: impl FnMut(usize, &Entry, Step<'_>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut links: HashMap<(u64, u64), &str> = HashMap::new();
        for (gi, e) in &self.entries {
            let step = match &e.kind {
                Kind::Dir => Step::Dir,
                Kind::Symlink(t) => Step::Symlink(t),
                Kind::Inline(b) => Step::Inline(b),
                Kind::File {
                    size,
                    dev,
                    ino,
                    nlink,
                } => {
                    let first = (*nlink > 1)
                        .then(|| links.get(&(*dev, *ino)).copied())
                        .flatten();
                    match first {
                        Some(first) => Step::Hardlink(first),
                        None => {
                            if *nlink > 1 {
                                links.insert((*dev, *ino), e.path.as_str());
                            }
                            Step::File(*size)
                        }
                    }
                }
            };
            f(*gi, e, step)?;
        }
        Ok(())
    }

    /// The exact size of the layer's tar stream (uncompressed), from the
    /// scanned sizes: what [`LayerPlan::write`] writes unless a file
    /// changes size meanwhile, which it refuses.
    pub(crate) fn tar_size(&self) -> Result<u64, Error> {
        let mut tar = TarWriter::new(Counter(0), 0);
        self.each_step(|_, e, step| {
            let err = |err| Error::io("lay out layer entry", format!("/{}", e.path), err);
            match step {
                Step::Dir => tar.dir(&e.path, e.mode),
                Step::Symlink(t) => tar.symlink(&e.path, t),
                Step::Hardlink(first) => tar.hardlink(&e.path, first),
                Step::Inline(b) => tar.bytes(&e.path, e.mode, b),
                Step::File(size) => tar.file_header(&e.path, e.mode, size).and_then(|()| {
                    tar.inner_mut().0 += size;
                    tar.pad_after(size)
                }),
            }
            .map_err(err)
        })?;
        let end = tar
            .finish()
            .map_err(|e| Error::io("lay out", "a layer", e))?;
        Ok(end.0)
    }

    /// Writes every entry into `tar` and its listing into its group's
    /// hasher; notes each file's content digest in its group's `seen`,
    /// taken from `known` when the file's stamp is the one it was read
    /// with.
    fn write_entries<W: Write>(
        &self,
        tar: &mut TarWriter<W>,
        group_hashers: &mut [Sha256],
        known: &[Option<KnownDigests>],
        seen: &mut [SeenDigests],
    ) -> Result<(), Error> {
        self.each_step(|gi, e, step| {
            let entry_err = |err| Error::io("write layer entry", format!("/{}", e.path), err);
            let gh = &mut group_hashers[gi];
            // "PATH\0MODE\0" (the mode in octal, no leading zeros), then
            // what the entry is; written piece by piece, without the
            // allocations a format! per entry makes.
            gh.update(e.path.as_bytes());
            gh.update(b"\0");
            gh.update(octal(e.mode, &mut [0u8; 12]));
            gh.update(b"\0");
            match step {
                Step::Dir => {
                    listing_line(gh, b'd', b"");
                    tar.dir(&e.path, e.mode).map_err(entry_err)?;
                }
                Step::Symlink(t) => {
                    listing_line(gh, b'l', t.as_bytes());
                    tar.symlink(&e.path, t).map_err(entry_err)?;
                }
                Step::Inline(b) => {
                    listing_line(gh, b'f', FileDigest::of(b).hex_into(&mut [0u8; 64]));
                    tar.bytes(&e.path, e.mode, b).map_err(entry_err)?;
                }
                Step::Hardlink(first) => {
                    listing_line(gh, b'h', first.as_bytes());
                    tar.hardlink(&e.path, first).map_err(entry_err)?;
                }
                Step::File(size) => {
                    let src = self.source(gi, e);
                    let read = |err| Error::io("read", &src, err);
                    let mut f = File::open(&src).map_err(read)?;
                    let stamp = crate::known::stamp_of(e);
                    let was = stamp.and_then(|s| known.get(gi)?.as_ref()?.get(&e.path, &s));
                    let d = match was {
                        Some(d) => {
                            tar.file(&e.path, e.mode, size, &mut f).map_err(read)?;
                            d
                        }
                        None => {
                            let mut r = FileHashReader::new(f);
                            tar.file(&e.path, e.mode, size, &mut r).map_err(read)?;
                            r.finish().map_err(read)?
                        }
                    };
                    listing_line(gh, b'f', d.hex_into(&mut [0u8; 64]));
                    if let (Some(s), Some(k)) = (stamp, seen.get_mut(gi)) {
                        k.insert(&e.path, s, &d);
                    }
                }
            }
            Ok(())
        })
    }
}

/// Where [`LayerPlan::write`] puts a layer.
#[derive(Clone, Copy)]
pub(crate) enum Sink<'a> {
    /// A new file named by its digest in this directory.
    Dir(&'a Path),
    /// An archive being written (at `path`), from offset `at` on: the
    /// layer's place planned from [`LayerPlan::tar_size`] (uncompressed
    /// layers only).
    At {
        file: &'a File,
        path: &'a Path,
        at: u64,
    },
}

/// The file a layer's bytes go to.
enum Out<'a> {
    File(File),
    /// Positioned writes from `at` on (the archive's descriptor is shared
    /// by the layers written into it in parallel).
    At {
        file: &'a File,
        at: u64,
    },
}

impl Write for Out<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::File(f) => f.write(buf),
            Self::At { file, at } => {
                let n = file.write_at(buf, *at)?;
                *at += n as u64;
                Ok(n)
            }
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What a layer holds for one entry (see [`LayerPlan::each_step`]).
enum Step<'a> {
    Dir,
    Symlink(&'a str),
    Inline(&'a [u8]),
    /// A hard link to the earlier path named.
    Hardlink(&'a str),
    /// A regular file's content, of this size.
    File(u64),
}

/// A writer that only counts.
struct Counter(u64);

impl Write for Counter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The rest of an entry's listing line after `PATH NUL MODE NUL`: its
/// kind, the value, a newline (docs/images.md, "The listing"), hashed
/// piece by piece.
fn listing_line(gh: &mut Sha256, kind: u8, value: &[u8]) {
    gh.update([kind]);
    gh.update(value);
    gh.update(b"\n");
}

/// `v` in octal without leading zeros (as `format!("{v:o}")`), in `buf`:
/// the tar header's encoder (11 digits hold any `u32`; the 12th byte
/// takes its NUL), leading zeros cut.
fn octal(v: u32, buf: &mut [u8; 12]) -> &[u8] {
    crate::tarw::octal_into(buf, u64::from(v));
    let digits = &buf[..11];
    let first = digits.iter().position(|d| *d != b'0').unwrap_or(10);
    &digits[first..]
}

/// Cache key of the layer made of `groups`: everything that determines its
/// bytes — each group's name, then its parents and entries in the order
/// they were scanned (the same inputs scan in the same order), with mode,
/// type, size, link count, inode, device, mtime and ctime of files (the
/// content hash of inline files), symlink targets, compression and mtime.
/// Made from the groups as they are, so that a layer found in the cache
/// is never merged.
pub(crate) fn cache_key(groups: &[Group], compression: Compression, mtime: u64) -> Digest {
    let mut h = Sha256::new();
    h.update(format!(
        "vs-image layer v5\0{}\0{mtime}\0",
        compression.as_str()
    ));
    for g in groups {
        h.update(g.name.as_bytes());
        h.update(b"\0");
    }
    h.update(b"\n");
    // Each entry is encoded compactly into one buffer and hashed with one
    // call (the key hashes every entry of every rebuild).
    let mut buf: Vec<u8> = Vec::with_capacity(256);
    for (gi, g) in groups.iter().enumerate() {
        h.update((gi as u32).to_le_bytes());
        let parents = g.parents.iter().map(|e| (b'P', e));
        for (role, e) in parents.chain(g.entries.iter().map(|e| (b'E', e))) {
            let s = e.stamp;
            buf.clear();
            buf.push(role);
            buf.extend_from_slice(&(e.path.len() as u32).to_le_bytes());
            buf.extend_from_slice(e.path.as_bytes());
            buf.extend_from_slice(&(e.mode as u16).to_le_bytes());
            match &e.kind {
                Kind::Dir => buf.push(b'd'),
                Kind::File { size, nlink, .. } => {
                    buf.push(b'f');
                    for v in [*size, *nlink, s.ino, s.dev, s.mtime as u64, s.ctime as u64] {
                        buf.extend_from_slice(&v.to_le_bytes());
                    }
                    for v in [s.mtime_ns as u32, s.ctime_ns as u32] {
                        buf.extend_from_slice(&v.to_le_bytes());
                    }
                }
                Kind::Inline(b) => {
                    buf.push(b'i');
                    buf.extend_from_slice(&Sha256::digest(b));
                }
                Kind::Symlink(t) => {
                    buf.push(b'l');
                    buf.extend_from_slice(&(t.len() as u32).to_le_bytes());
                    buf.extend_from_slice(t.as_bytes());
                }
            }
            h.update(&buf);
        }
    }
    Digest::from_hasher(h)
}

enum Enc<W: Write> {
    None(W),
    Gzip(flate2::write::GzEncoder<W>),
    Zstd(zstd::stream::write::Encoder<'static, W>),
}

impl<W: Write> Enc<W> {
    fn new(w: W, c: Compression) -> io::Result<Self> {
        Ok(match c {
            Compression::None => Self::None(w),
            Compression::Gzip => Self::Gzip(
                flate2::GzBuilder::new()
                    .mtime(0)
                    .operating_system(255)
                    .write(w, flate2::Compression::new(6)),
            ),
            Compression::Zstd => {
                let mut e = zstd::stream::write::Encoder::new(w, 3)?;
                e.include_checksum(false)?;
                Self::Zstd(e)
            }
        })
    }

    fn finish(self) -> io::Result<W> {
        match self {
            Self::None(w) => Ok(w),
            Self::Gzip(e) => e.finish(),
            Self::Zstd(e) => e.finish(),
        }
    }
}

impl<W: Write> Write for Enc<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::None(w) => w.write(buf),
            Self::Gzip(e) => e.write(buf),
            Self::Zstd(e) => e.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::None(w) => w.flush(),
            Self::Gzip(e) => e.flush(),
            Self::Zstd(e) => e.flush(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_is_formats() {
        for v in [
            0u32,
            1,
            7,
            8,
            0o644,
            0o755,
            0o4755,
            0o7777,
            0o177777,
            u32::MAX,
        ] {
            assert_eq!(octal(v, &mut [0u8; 12]), format!("{v:o}").as_bytes());
        }
    }

    /// The SBOM digests of a layer's groups, written with `known`.
    fn write(
        root: &Path,
        out: &Path,
        known: &[Option<KnownDigests>],
    ) -> (LayerMeta, Vec<KnownDigests>) {
        let plan = LayerPlan::new(crate::input::scan_root(root, false).unwrap()).unwrap();
        let (meta, _, seen) = plan
            .write(Sink::Dir(out), Compression::None, 1, false, known)
            .unwrap();
        (meta, seen.iter().map(known_of).collect())
    }

    fn known_of(seen: &SeenDigests) -> KnownDigests {
        KnownDigests::decode(seen.encoded()).unwrap()
    }

    #[test]
    fn a_known_file_digest_is_used_only_while_the_file_is_unchanged() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("d")).unwrap();
        std::fs::write(root.join("d/a"), b"a").unwrap();
        std::fs::write(root.join("d/b"), b"b").unwrap();
        let out = t.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        let (meta, seen) = write(&root, &out, &[]);
        assert_eq!(seen.len(), 1);
        assert_eq!(
            seen[0].get(
                "d/a",
                &crate::known::stamp_of(&scanned(&root, "d/a")).unwrap()
            ),
            Some(FileDigest::of(b"a"))
        );
        // With what was seen, the same digests: nothing hashed differs.
        let known: Vec<Option<KnownDigests>> = seen.into_iter().map(Some).collect();
        let (again, _) = write(&root, &out, &known);
        assert_eq!(again, meta);
        // A known digest is taken as it is while the stamp matches (a
        // wrong one shows in the group's digest, not in the layer's)...
        let mut wrong = SeenDigests::default();
        let a = crate::known::stamp_of(&scanned(&root, "d/a")).unwrap();
        wrong.insert("d/a", a, &FileDigest::of(b"not a"));
        let (lied, _) = write(&root, &out, &[Some(known_of(&wrong))]);
        assert_eq!(lied.digest, meta.digest);
        assert_ne!(lied.groups, meta.groups);
        // ... and not once the file changed.
        std::fs::write(root.join("d/a"), b"A").unwrap();
        let (changed, seen) = write(&root, &out, &[Some(known_of(&wrong))]);
        let a = crate::known::stamp_of(&scanned(&root, "d/a")).unwrap();
        assert_eq!(seen[0].get("d/a", &a), Some(FileDigest::of(b"A")));
        assert_ne!(changed.digest, meta.digest);
    }

    #[test]
    fn the_planned_size_is_the_written_size() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        let long = "d".repeat(120);
        std::fs::create_dir_all(root.join(&long).join("sub")).unwrap();
        for (i, len) in [0usize, 1, 511, 512, 513, 4096, 70_000].iter().enumerate() {
            std::fs::write(root.join(format!("f{i}")), vec![7u8; *len]).unwrap();
        }
        std::fs::write(root.join(&long).join("sub").join("n".repeat(110)), b"x").unwrap();
        std::os::unix::fs::symlink("t".repeat(150), root.join("long-link")).unwrap();
        std::os::unix::fs::symlink("f1", root.join("link")).unwrap();
        std::fs::hard_link(root.join("f5"), root.join("hard")).unwrap();
        let plan = LayerPlan::new(crate::input::scan_root(&root, false).unwrap()).unwrap();
        let out = t.path().join("out");
        std::fs::create_dir_all(&out).unwrap();
        let planned = plan.tar_size().unwrap();
        let (meta, path, _) = plan
            .write(Sink::Dir(&out), Compression::None, 1, false, &[])
            .unwrap();
        assert_eq!(planned, meta.size);
        assert_eq!(planned, std::fs::metadata(path.unwrap()).unwrap().len());
        // Written at an offset of another file: the same bytes there.
        let archive = t.path().join("archive");
        let f = File::options()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&archive)
            .unwrap();
        let (at_meta, none, _) = plan
            .write(
                Sink::At {
                    file: &f,
                    path: &archive,
                    at: 8192,
                },
                Compression::None,
                1,
                false,
                &[],
            )
            .unwrap();
        assert!(none.is_none());
        assert_eq!(at_meta, meta);
        let bytes = std::fs::read(&archive).unwrap();
        let blob = std::fs::read(out.join(meta.digest.hex())).unwrap();
        assert_eq!(&bytes[8192..], &blob[..]);
        // A compressed layer's size is not known before: refused.
        assert!(
            plan.write(
                Sink::At {
                    file: &f,
                    path: &archive,
                    at: 0,
                },
                Compression::Gzip,
                1,
                false,
                &[],
            )
            .is_err()
        );
    }

    /// The scanned entry of `path` below `root`.
    fn scanned(root: &Path, path: &str) -> Entry {
        crate::input::scan_root(root, false)
            .unwrap()
            .into_iter()
            .flat_map(|g| g.entries)
            .find(|e| e.path == path)
            .unwrap()
    }
}
