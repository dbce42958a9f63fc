//! Writing an image as one tar: the hybrid archive (OCI layout plus Docker
//! `manifest.json` into `blobs/sha256/`), an oci-archive, or a
//! docker-archive. Members are sorted, written with the same deterministic
//! headers as layers, to a temporary file renamed into place. The layout
//! (every member's offset) is computed first from the blobs' sizes, so the
//! blobs are copied into place in parallel.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::digest::Digest;
use crate::error::Error;
use crate::files::{file_name, parent_of};
use crate::oci;
use crate::options::OutputFormat;
use crate::tarw::TarWriter;

/// The small documents of an archive.
pub(crate) struct Docs<'a> {
    pub index: &'a [u8],
    pub docker_manifest: &'a [u8],
    pub docker_only_manifest: &'a [u8],
    pub repositories: &'a [u8],
    pub config: &'a Digest,
    pub layers: &'a [Digest],
}

enum Member<'a> {
    Dir,
    Bytes(&'a [u8]),
    File(PathBuf),
}

/// Writes the archive to a temporary file renamed into place.
pub(crate) fn write(
    format: OutputFormat,
    out: &Path,
    blobs: &[(Digest, PathBuf)],
    docs: &Docs<'_>,
    epoch: u64,
) -> Result<(), Error> {
    let mut members: Vec<(String, Member<'_>)> = Vec::new();
    match format {
        OutputFormat::Archive | OutputFormat::OciArchive => {
            members.push(("blobs".to_owned(), Member::Dir));
            members.push(("blobs/sha256".to_owned(), Member::Dir));
            for (d, p) in blobs {
                members.push((d.blob_path(), Member::File(p.clone())));
            }
            members.push(("index.json".to_owned(), Member::Bytes(docs.index)));
            members.push(("oci-layout".to_owned(), Member::Bytes(oci::OCI_LAYOUT)));
            if format == OutputFormat::Archive {
                members.push((
                    "manifest.json".to_owned(),
                    Member::Bytes(docs.docker_manifest),
                ));
                members.push(("repositories".to_owned(), Member::Bytes(docs.repositories)));
            }
        }
        OutputFormat::DockerArchive => {
            let find = |d: &Digest| {
                blobs
                    .iter()
                    .find(|(b, _)| b == d)
                    .map(|(_, p)| p.clone())
                    .ok_or_else(|| Error::MissingBlob {
                        digest: d.to_string(),
                        referenced_by: "docker-archive".to_owned(),
                    })
            };
            members.push((
                format!("{}.json", docs.config.hex()),
                Member::File(find(docs.config)?),
            ));
            for l in docs.layers {
                members.push((format!("{}.tar", l.hex()), Member::File(find(l)?)));
            }
            members.push((
                "manifest.json".to_owned(),
                Member::Bytes(docs.docker_only_manifest),
            ));
            members.push(("repositories".to_owned(), Member::Bytes(docs.repositories)));
        }
        OutputFormat::Oci | OutputFormat::Squashfs => {
            return Err(Error::malformed(out, "not an archive format"));
        }
    }
    members.sort_by(|a, b| a.0.cmp(&b.0));
    members.dedup_by(|a, b| a.0 == b.0);

    let dir = parent_of(out);
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.tmp-", file_name(out)))
        .tempfile_in(&dir)
        .map_err(|e| Error::io("create temporary file in", &dir, e))?;
    let tmp_path = tmp.path().to_owned();
    let (pieces, copies, total) = lay_out(&members, epoch, &tmp_path)?;
    let f = tmp.as_file();
    f.set_len(total)
        .map_err(|e| Error::io("write", &tmp_path, e))?;
    for (at, bytes) in &pieces {
        f.write_all_at(bytes, *at)
            .map_err(|e| Error::io("write", &tmp_path, e))?;
    }
    // The blobs go to their places in parallel, biggest first, moved by
    // the kernel (`copy_file_range`) rather than through userspace.
    let mut copies = copies;
    copies.sort_by_key(|c| std::cmp::Reverse(c.size));
    copies
        .par_iter()
        .with_max_len(1)
        .try_for_each(|c| c.run(f, &tmp_path))?;
    // No fsync: a crash can leave the renamed file incomplete after a power
    // loss, which `inspect --verify` (end marker, digests) always detects;
    // the peers (skopeo, docker save) do not sync either.
    crate::perm::publish_file(tmp.as_file()).map_err(|e| Error::io("chmod", &tmp_path, e))?;
    replace_file(tmp, out)
}

/// A file member's content: `size` bytes of `src` copied to `at`.
struct Copy<'a> {
    src: &'a Path,
    at: u64,
    size: u64,
}

impl Copy<'_> {
    /// Copies exactly `size` bytes of `src` into `out` at `at`; a source
    /// that is shorter is an error (it was stat'ed for the header).
    fn run(&self, out: &File, out_path: &Path) -> Result<(), Error> {
        let src = File::open(self.src).map_err(|e| Error::io("read", self.src, e))?;
        let shrank = || {
            Error::io(
                "read",
                self.src,
                std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "file shrank while being copied",
                ),
            )
        };
        let (mut off_in, mut off_out) = (0u64, self.at);
        let end = self.at + self.size;
        while off_out < end {
            let want = usize::try_from(end - off_out)
                .unwrap_or(usize::MAX)
                .min(1 << 30);
            match rustix::fs::copy_file_range(
                &src,
                Some(&mut off_in),
                out,
                Some(&mut off_out),
                want,
            ) {
                Ok(0) => return Err(shrank()),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                // No in-kernel copy between these files: through a buffer.
                Err(
                    rustix::io::Errno::XDEV
                    | rustix::io::Errno::NOSYS
                    | rustix::io::Errno::INVAL
                    | rustix::io::Errno::OPNOTSUPP,
                ) => return self.run_buffered(&src, off_in, off_out, out, out_path),
                Err(e) => return Err(Error::io("write", out_path, e.into())),
            }
        }
        Ok(())
    }

    fn run_buffered(
        &self,
        src: &File,
        mut off_in: u64,
        mut off_out: u64,
        out: &File,
        out_path: &Path,
    ) -> Result<(), Error> {
        let mut buf = vec![0u8; crate::tarw::COPY_BUF];
        let end = self.at + self.size;
        while off_out < end {
            let want = usize::try_from(end - off_out)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = src
                .read_at(&mut buf[..want], off_in)
                .map_err(|e| Error::io("read", self.src, e))?;
            if n == 0 {
                return Err(Error::io(
                    "read",
                    self.src,
                    std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "file shrank while being copied",
                    ),
                ));
            }
            out.write_all_at(&buf[..n], off_out)
                .map_err(|e| Error::io("write", out_path, e))?;
            off_in += n as u64;
            off_out += n as u64;
        }
        Ok(())
    }
}

/// The archive's bytes as (offset, bytes) pieces written by vibesys
/// (headers, small members, padding, end marker) and the file members
/// copied between them; and the total size.
#[allow(clippy::type_complexity)]
fn lay_out<'a>(
    members: &'a [(String, Member<'_>)],
    epoch: u64,
    tmp_path: &Path,
) -> Result<(Vec<(u64, Vec<u8>)>, Vec<Copy<'a>>, u64), Error> {
    let io = |e| Error::io("write", tmp_path, e);
    let mut tar = TarWriter::new(Vec::new(), epoch);
    let mut pieces = Vec::new();
    let mut copies = Vec::new();
    // Offset of the first byte held in `tar`'s buffer.
    let mut at = 0u64;
    for (name, m) in members {
        match m {
            Member::Dir => tar.dir(name, 0o755).map_err(io)?,
            Member::Bytes(b) => tar.bytes(name, 0o644, b).map_err(io)?,
            Member::File(p) => {
                let size = std::fs::metadata(p)
                    .map_err(|e| Error::io("read", p, e))?
                    .len();
                tar.file_header(name, 0o644, size).map_err(io)?;
                let head = std::mem::take(tar.inner_mut());
                let content_at = at + head.len() as u64;
                pieces.push((at, head));
                copies.push(Copy {
                    src: p,
                    at: content_at,
                    size,
                });
                at = content_at + size;
                tar.pad_after(size).map_err(io)?;
            }
        }
    }
    let tail = tar.finish().map_err(io)?;
    let total = at + tail.len() as u64;
    pieces.push((at, tail));
    Ok((pieces, copies, total))
}

/// Moves the finished `tmp` to `out`. An existing regular file is swapped
/// out atomically (`RENAME_EXCHANGE`) and then removed: a plain rename
/// over it makes ext4 (`auto_da_alloc`) write the whole new file back
/// before the rename returns (0.1-0.4 s for a 550 MB archive here).
pub(crate) fn replace_file(tmp: tempfile::NamedTempFile, out: &Path) -> Result<(), Error> {
    if std::fs::symlink_metadata(out).is_ok_and(|m| m.file_type().is_file()) {
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            tmp.path(),
            rustix::fs::CWD,
            out,
            rustix::fs::RenameFlags::EXCHANGE,
        ) {
            // The temporary name now holds the old output: dropping `tmp`
            // removes it.
            Ok(()) => return Ok(()),
            Err(e) => tracing::debug!("rename exchange onto {}: {e}", out.display()),
        }
    }
    tmp.persist(out)
        .map_err(|e| Error::io("rename into place", out, e.error))?;
    Ok(())
}
