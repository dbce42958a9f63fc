//! Writing one layer: entries sorted, hardlinks kept within the layer,
//! content hashed while written (diff_id before compression, digest after),
//! written to a temporary file and renamed to `blobs/sha256/<hex>`.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use crate::build::Compression;
use crate::digest::{HashReader, HashWriter};
use crate::input::{Entry, Group, Kind};
use crate::tarw::TarWriter;
use crate::{Digest, Error};

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
        let mut map: BTreeMap<String, (usize, Entry, bool)> = BTreeMap::new();
        let mut infos = Vec::with_capacity(groups.len());
        for (gi, g) in groups.into_iter().enumerate() {
            for p in g.parents {
                map.entry(p.path.clone()).or_insert((gi, p, true));
            }
            for e in g.entries {
                match map.get(&e.path) {
                    Some((_, old, synthetic))
                        if matches!(old.kind, Kind::Dir) && matches!(e.kind, Kind::Dir) =>
                    {
                        if *synthetic {
                            map.insert(e.path.clone(), (gi, e, false));
                        }
                    }
                    Some((_, old, true)) if matches!(old.kind, Kind::Dir) => {
                        return Err(Error::InputPath {
                            path: format!("/{}", e.path).into(),
                            reason: "is a directory in another input".to_owned(),
                        });
                    }
                    Some(_) => {
                        return Err(Error::InputPath {
                            path: format!("/{}", e.path).into(),
                            reason: "given by two inputs".to_owned(),
                        });
                    }
                    None => {
                        map.insert(e.path.clone(), (gi, e, false));
                    }
                }
            }
            infos.push(GroupInfo { name: g.name });
        }
        let entries = map.into_values().map(|(gi, e, _)| (gi, e)).collect();
        Ok(Self {
            groups: infos,
            entries,
        })
    }

    pub(crate) fn size(&self) -> u64 {
        self.entries.iter().map(|(_, e)| e.size()).sum()
    }

    /// Cache key: everything that determines the layer's bytes.
    pub(crate) fn cache_key(&self, compression: Compression, mtime: u64) -> Digest {
        let mut h = Sha256::new();
        h.update(format!(
            "vs-image layer v2\0{}\0{mtime}\0",
            compression.as_str()
        ));
        for g in &self.groups {
            h.update(g.name.as_bytes());
            h.update(b"\0");
        }
        h.update(b"\n");
        let num = |h: &mut Sha256, v: u64| h.update(v.to_le_bytes());
        for (gi, e) in &self.entries {
            let s = e.stamp;
            num(&mut h, *gi as u64);
            num(&mut h, e.path.len() as u64);
            h.update(e.path.as_bytes());
            num(&mut h, u64::from(e.mode));
            match &e.kind {
                Kind::Dir => h.update(b"d"),
                Kind::File { size, .. } => {
                    h.update(b"f");
                    for v in [
                        *size,
                        s.mtime as u64,
                        s.mtime_ns as u64,
                        s.ctime as u64,
                        s.ctime_ns as u64,
                        s.ino,
                        s.dev,
                    ] {
                        num(&mut h, v);
                    }
                }
                Kind::Inline(b) => {
                    h.update(b"i");
                    h.update(Sha256::digest(b));
                }
                Kind::Symlink(t) => {
                    h.update(b"l");
                    num(&mut h, t.len() as u64);
                    h.update(t.as_bytes());
                }
            }
        }
        Digest::from_hasher(h)
    }

    /// Writes the layer into `dir` as `<hex>` and returns what it is.
    pub(crate) fn write(
        &self,
        dir: &Path,
        compression: Compression,
        mtime: u64,
    ) -> Result<(LayerMeta, PathBuf), Error> {
        let tmp = tempfile::Builder::new()
            .prefix(".layer-")
            .tempfile_in(dir)
            .map_err(|e| Error::io("create temporary file in", dir, e))?;
        let tmp_path = tmp.path().to_owned();
        let file = tmp
            .as_file()
            .try_clone()
            .map_err(|e| Error::io("open", &tmp_path, e))?;
        let blob = HashWriter::new(BufWriter::with_capacity(1 << 20, file));
        let enc = Enc::new(blob, compression).map_err(|e| Error::io("write", &tmp_path, e))?;
        let diff = if compression == Compression::None {
            HashWriter::counting(enc)
        } else {
            HashWriter::new(enc)
        };
        let mut tar = TarWriter::new(diff, mtime);
        let mut group_hashers: Vec<Sha256> = self.groups.iter().map(|_| Sha256::new()).collect();
        let mut links: HashMap<(u64, u64), &str> = HashMap::new();
        for (gi, e) in &self.entries {
            let gh = &mut group_hashers[*gi];
            gh.update(format!("{}\0{:o}\0", e.path, e.mode));
            match &e.kind {
                Kind::Dir => {
                    gh.update(b"d\n");
                    tar.dir(&e.path, e.mode).map_err(|err| {
                        Error::io("write layer entry", format!("/{}", e.path), err)
                    })?;
                }
                Kind::Symlink(t) => {
                    gh.update(format!("l{t}\n"));
                    tar.symlink(&e.path, t).map_err(|err| {
                        Error::io("write layer entry", format!("/{}", e.path), err)
                    })?;
                }
                Kind::Inline(b) => {
                    gh.update(b"f");
                    gh.update(Sha256::digest(b));
                    gh.update(b"\n");
                    tar.bytes(&e.path, e.mode, b).map_err(|err| {
                        Error::io("write layer entry", format!("/{}", e.path), err)
                    })?;
                }
                Kind::File {
                    src,
                    size,
                    dev,
                    ino,
                    nlink,
                } => {
                    if *nlink > 1 {
                        if let Some(first) = links.get(&(*dev, *ino)) {
                            gh.update(format!("h{first}\n"));
                            tar.hardlink(&e.path, first).map_err(|err| {
                                Error::io("write layer entry", format!("/{}", e.path), err)
                            })?;
                            continue;
                        }
                        links.insert((*dev, *ino), e.path.as_str());
                    }
                    let f = File::open(src).map_err(|err| Error::io("read", src, err))?;
                    let mut r = HashReader::new(f);
                    tar.file(&e.path, e.mode, *size, &mut r)
                        .map_err(|err| Error::io("read", src, err))?;
                    let (d, _) = r.finish().map_err(|err| Error::io("read", src, err))?;
                    gh.update(format!("f{}\n", d.hex()));
                }
            }
        }
        let diff = tar.finish().map_err(|e| Error::io("write", &tmp_path, e))?;
        let (enc, diff_id, uncompressed_size) = diff.finish();
        let blob = enc.finish().map_err(|e| Error::io("write", &tmp_path, e))?;
        let (buf, digest, size) = blob.finish();
        let file = buf
            .into_inner()
            .map_err(|e| Error::io("write", &tmp_path, e.into_error()))?;
        drop(file);
        let diff_id = if compression == Compression::None {
            digest.clone()
        } else {
            diff_id
        };
        let dest = dir.join(digest.hex());
        crate::perm::publish_file(tmp.as_file()).map_err(|e| Error::io("chmod", &dest, e))?;
        tmp.persist(&dest)
            .map_err(|e| Error::io("rename into place", &dest, e.error))?;
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
        ))
    }
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
