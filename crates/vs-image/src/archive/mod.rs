//! Writing an image as one tar: the hybrid archive (OCI layout plus Docker
//! `manifest.json` into `blobs/sha256/`), an oci-archive, or a
//! docker-archive.
//!
//! The layout is made for rebuilds that change one layer:
//!
//! * Members come in a fixed order that puts what rarely changes first:
//!   `oci-layout` and the directories, then the layers bottom first (a
//!   rebuild usually changes an upper one), then the other blobs (config,
//!   manifests, SBOM, empty JSON) by digest, then `index.json`,
//!   `manifest.json` and `repositories`. A docker-archive has its layers,
//!   then its config, `manifest.json` and `repositories`.
//! * Every blob's data starts at a multiple of [`ALIGN`] of the archive: a
//!   PAX `x` header with only a `comment` record fills the space before
//!   the member's header ([`crate::tarw::TarWriter::pax_filler`]). The
//!   whole pages of a blob's data (its body) are then page-aligned in both
//!   the blob file and the archive, so a file system with reflinks
//!   (XFS, btrfs) shares them instead of copying (`copy_file_range` does
//!   that by itself), and an archive can be edited in place page by page
//!   ([`edit`]).
//!
//! The layout is computed first (every member's offset from the blobs'
//! sizes); a new archive is then written to a temporary file renamed into
//! place, bodies copied in parallel by the kernel. With a cache, the
//! builder records what it wrote and edits that archive in place on the
//! next build instead of writing it again (see [`edit`]).

mod edit;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::cache::Cache;
use crate::digest::Digest;
use crate::error::Error;
use crate::files::{file_name, parent_of};
use crate::oci;
use crate::options::OutputFormat;
use crate::tarw::{MIN_FILLER, TarWriter};

/// Every blob's data starts at a multiple of this offset of the archive
/// (the page size, and the block size of the usual file systems).
pub(crate) const ALIGN: u64 = 4096;

/// The small documents of an archive.
pub(crate) struct Docs<'a> {
    pub index: &'a [u8],
    pub docker_manifest: &'a [u8],
    pub docker_only_manifest: &'a [u8],
    pub repositories: &'a [u8],
    pub config: &'a Digest,
    pub layers: &'a [Digest],
}

/// What a member holds.
enum Content<'a> {
    Dir,
    Bytes(&'a [u8]),
    /// A blob from its file: its data starts at a multiple of [`ALIGN`].
    Blob(&'a Digest, &'a Path),
}

/// The members of an archive of `format`, in their order (see the module
/// documentation), each blob once.
fn members<'a>(
    format: OutputFormat,
    blobs: &'a [(Digest, PathBuf)],
    docs: &'a Docs<'a>,
    out: &Path,
) -> Result<Vec<(String, Content<'a>)>, Error> {
    let find = |d: &Digest| {
        blobs
            .iter()
            .find(|(b, _)| b == d)
            .map(|(b, p)| (b, p.as_path()))
            .ok_or_else(|| Error::MissingBlob {
                digest: d.to_string(),
                referenced_by: format!("the {} archive", format.as_str()),
            })
    };
    let mut layers: Vec<&Digest> = Vec::new();
    for l in docs.layers {
        if !layers.contains(&l) {
            layers.push(l);
        }
    }
    let mut members = Vec::new();
    match format {
        OutputFormat::Archive | OutputFormat::OciArchive => {
            members.push(("oci-layout".to_owned(), Content::Bytes(oci::OCI_LAYOUT)));
            members.push(("blobs".to_owned(), Content::Dir));
            members.push(("blobs/sha256".to_owned(), Content::Dir));
            for l in &layers {
                let (d, p) = find(l)?;
                members.push((d.blob_path(), Content::Blob(d, p)));
            }
            // `blobs` is sorted by digest.
            for (d, p) in blobs.iter().filter(|(d, _)| !layers.contains(&d)) {
                members.push((d.blob_path(), Content::Blob(d, p)));
            }
            members.push(("index.json".to_owned(), Content::Bytes(docs.index)));
            if format == OutputFormat::Archive {
                members.push((
                    "manifest.json".to_owned(),
                    Content::Bytes(docs.docker_manifest),
                ));
                members.push(("repositories".to_owned(), Content::Bytes(docs.repositories)));
            }
        }
        OutputFormat::DockerArchive => {
            for l in &layers {
                let (d, p) = find(l)?;
                members.push((format!("{}.tar", d.hex()), Content::Blob(d, p)));
            }
            let (d, p) = find(docs.config)?;
            members.push((format!("{}.json", d.hex()), Content::Blob(d, p)));
            members.push((
                "manifest.json".to_owned(),
                Content::Bytes(docs.docker_only_manifest),
            ));
            members.push(("repositories".to_owned(), Content::Bytes(docs.repositories)));
        }
        OutputFormat::Oci | OutputFormat::Squashfs => {
            return Err(Error::malformed(out, "not an archive format"));
        }
    }
    Ok(members)
}

/// Bytes of the archive written from memory: headers, small members, the
/// last partial page of each blob's data, padding, the end marker.
pub(crate) struct Literal {
    /// Offset in the archive.
    pub at: u64,
    pub bytes: Vec<u8>,
    /// sha256 of `bytes`.
    pub digest: Digest,
}

impl Literal {
    fn new(at: u64, bytes: Vec<u8>) -> Self {
        let digest = Digest::of(&bytes);
        Self { at, bytes, digest }
    }
}

/// The whole pages of a blob's data: its first `len` bytes (a multiple of
/// [`ALIGN`]), at offset `at` (a multiple of [`ALIGN`]) of the archive.
pub(crate) struct Body<'a> {
    pub at: u64,
    pub len: u64,
    pub digest: &'a Digest,
    pub src: &'a Path,
}

/// The bytes of an archive: `literals[k]` lies right before `bodies[k]`,
/// the last literal ends the archive (so there is one literal more than
/// bodies, and every body sits between two literals).
pub(crate) struct Layout<'a> {
    pub literals: Vec<Literal>,
    pub bodies: Vec<Body<'a>>,
    pub size: u64,
}

/// Lays the members out: every blob's size is read (and the last partial
/// page of its data), nothing is written.
fn lay_out<'a>(members: &[(String, Content<'a>)], epoch: u64) -> Result<Layout<'a>, Error> {
    let mut tar = TarWriter::new(Vec::new(), epoch);
    let mut literals = Vec::new();
    let mut bodies = Vec::new();
    // Offset of the first byte held in `tar`'s buffer.
    let mut at = 0u64;
    for (name, content) in members {
        let in_memory = |e| Error::io("lay out archive member", name, e);
        match content {
            Content::Dir => tar.dir(name, 0o755).map_err(in_memory)?,
            Content::Bytes(b) => tar.bytes(name, 0o644, b).map_err(in_memory)?,
            Content::Blob(digest, src) => {
                let f = File::open(src).map_err(|e| Error::io("read", *src, e))?;
                let size = f.metadata().map_err(|e| Error::io("stat", *src, e))?.len();
                let mut head = TarWriter::new(Vec::new(), epoch);
                head.file_header(name, 0o644, size).map_err(in_memory)?;
                let head = std::mem::take(head.inner_mut());
                let here = at + tar.inner_mut().len() as u64;
                let data_at = (here + (MIN_FILLER + head.len()) as u64).next_multiple_of(ALIGN);
                let filler = usize::try_from(data_at - here).unwrap_or(usize::MAX) - head.len();
                tar.pax_filler(filler).map_err(in_memory)?;
                tar.raw(&head).map_err(in_memory)?;
                let body = size / ALIGN * ALIGN;
                if body > 0 {
                    literals.push(Literal::new(at, std::mem::take(tar.inner_mut())));
                    bodies.push(Body {
                        at: data_at,
                        len: body,
                        digest,
                        src,
                    });
                    at = data_at + body;
                }
                let mut tail = vec![0u8; usize::try_from(size - body).unwrap_or(0)];
                f.read_exact_at(&mut tail, body)
                    .map_err(|e| Error::io("read", *src, e))?;
                tar.raw(&tail).map_err(in_memory)?;
                tar.pad_after(size).map_err(in_memory)?;
            }
        }
    }
    let end = tar
        .finish()
        .map_err(|e| Error::io("lay out", "the archive", e))?;
    let size = at + end.len() as u64;
    literals.push(Literal::new(at, end));
    Ok(Layout {
        literals,
        bodies,
        size,
    })
}

/// Writes the archive of `format` to `out`: in place when `out` is the
/// archive this builder last wrote there (see [`edit`]), else to a
/// temporary file renamed into place. With a cache, records what it wrote
/// for the next build.
pub(crate) fn write(
    format: OutputFormat,
    out: &Path,
    blobs: &[(Digest, PathBuf)],
    docs: &Docs<'_>,
    epoch: u64,
    cache: Option<&Cache>,
) -> Result<(), Error> {
    let members = members(format, blobs, docs, out)?;
    let layout = lay_out(&members, epoch)?;
    match put(out, &layout, cache, edit::dirty_bound())? {
        Put::Edited(e) => tracing::debug!(
            "{} edited in place: {} of {} blob bodies kept where they were, {} ranges shifted",
            out.display(),
            e.kept,
            e.bodies,
            e.shifts
        ),
        Put::New => tracing::debug!("{} written anew", out.display()),
    }
    Ok(())
}

/// How an archive got to its output path.
#[derive(Debug)]
pub(crate) enum Put {
    /// The archive there was edited in place.
    Edited(edit::Edited),
    /// A new file was written and renamed into place.
    New,
}

/// Puts the archive laid out in `layout` at `out` (see [`write()`]); `dirty`
/// bounds the bytes the page cache holds dirty (see [`edit`]).
fn put(
    out: &Path,
    layout: &Layout<'_>,
    cache: Option<&Cache>,
    dirty: Option<u64>,
) -> Result<Put, Error> {
    edit::sweep(out);
    let place = cache.and_then(|c| edit::Place::of(out, c));
    if let Some(place) = &place
        && let Some((file, edited)) = place.edit(layout, dirty)
    {
        place.record(&file, layout);
        return Ok(Put::Edited(edited));
    }
    let file = write_new(out, layout)?;
    if let Some(place) = &place {
        place.record(&file, layout);
    }
    Ok(Put::New)
}

/// Writes the whole archive to a temporary file next to `out` and moves it
/// into place; returns the file (now at `out`).
fn write_new(out: &Path, layout: &Layout<'_>) -> Result<File, Error> {
    let dir = parent_of(out);
    let tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.tmp-", file_name(out)))
        .tempfile_in(&dir)
        .map_err(|e| Error::io("create temporary file in", &dir, e))?;
    let tmp_path = tmp.path().to_owned();
    let f = tmp.as_file();
    f.set_len(layout.size)
        .map_err(|e| Error::io("write", &tmp_path, e))?;
    for l in &layout.literals {
        f.write_all_at(&l.bytes, l.at)
            .map_err(|e| Error::io("write", &tmp_path, e))?;
    }
    copy_bodies(f, &tmp_path, layout.bodies.iter())?;
    // No fsync: a crash can leave the renamed file incomplete after a power
    // loss, which `inspect --verify` (end marker, digests) always detects;
    // the peers (skopeo, docker save) do not sync either.
    crate::perm::publish_file(tmp.as_file()).map_err(|e| Error::io("chmod", &tmp_path, e))?;
    replace_file(tmp, out)
}

/// Copies the bodies into `out` in parallel, biggest first, moved by the
/// kernel (`copy_file_range`, which shares the pages on a file system with
/// reflinks) rather than through userspace.
fn copy_bodies<'a, 'b: 'a>(
    out: &File,
    out_path: &Path,
    bodies: impl Iterator<Item = &'a Body<'b>>,
) -> Result<(), Error> {
    let mut bodies: Vec<&Body<'_>> = bodies.collect();
    bodies.sort_by_key(|b| std::cmp::Reverse(b.len));
    bodies
        .par_iter()
        .with_max_len(1)
        .try_for_each(|b| b.copy(out, out_path))
}

impl Body<'_> {
    /// Copies the first `len` bytes of `src` into `out` at `at`; a source
    /// that is shorter is an error (it was stat'ed for the header).
    fn copy(&self, out: &File, out_path: &Path) -> Result<(), Error> {
        let src = File::open(self.src).map_err(|e| Error::io("read", self.src, e))?;
        let (mut off_in, mut off_out) = (0u64, self.at);
        let end = self.at + self.len;
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
                Ok(0) => return Err(shrank(self.src)),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                // No in-kernel copy between these files: through a buffer.
                Err(
                    rustix::io::Errno::XDEV
                    | rustix::io::Errno::NOSYS
                    | rustix::io::Errno::INVAL
                    | rustix::io::Errno::OPNOTSUPP,
                ) => return self.copy_buffered(&src, off_in, off_out, out, out_path),
                Err(e) => return Err(Error::io("write", out_path, e.into())),
            }
        }
        Ok(())
    }

    fn copy_buffered(
        &self,
        src: &File,
        mut off_in: u64,
        mut off_out: u64,
        out: &File,
        out_path: &Path,
    ) -> Result<(), Error> {
        let mut buf = vec![0u8; crate::tarw::COPY_BUF];
        let end = self.at + self.len;
        while off_out < end {
            let want = usize::try_from(end - off_out)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            let n = src
                .read_at(&mut buf[..want], off_in)
                .map_err(|e| Error::io("read", self.src, e))?;
            if n == 0 {
                return Err(shrank(self.src));
            }
            out.write_all_at(&buf[..n], off_out)
                .map_err(|e| Error::io("write", out_path, e))?;
            off_in += n as u64;
            off_out += n as u64;
        }
        Ok(())
    }
}

fn shrank(src: &Path) -> Error {
    Error::io(
        "read",
        src,
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "file shrank while being copied",
        ),
    )
}

/// Moves the finished `tmp` to `out` and returns it. An existing regular
/// file is swapped out atomically (`RENAME_EXCHANGE`) and then removed: a
/// plain rename over it makes ext4 (`auto_da_alloc`) write the whole new
/// file back before the rename returns (0.1-0.4 s for a 550 MB archive
/// here).
pub(crate) fn replace_file(tmp: tempfile::NamedTempFile, out: &Path) -> Result<File, Error> {
    if std::fs::symlink_metadata(out).is_ok_and(|m| m.file_type().is_file()) {
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            tmp.path(),
            rustix::fs::CWD,
            out,
            rustix::fs::RenameFlags::EXCHANGE,
        ) {
            // The temporary name now holds the old output: dropping the
            // path removes it.
            Ok(()) => return Ok(tmp.into_parts().0),
            Err(e) => tracing::debug!("rename exchange onto {}: {e}", out.display()),
        }
    }
    tmp.persist(out)
        .map_err(|e| Error::io("rename into place", out, e.error))
}

#[cfg(test)]
mod tests;
