//! A pulled image as a squashfs rootfs: its checked layers unpacked in
//! order into a private directory (upper layers win, OCI whiteouts
//! honoured, nothing written through a symlink), then packed as a build
//! packs its rootfs ([`crate::squashfs::pack`]).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Component, Path};

use crate::digest::Digest;
use crate::error::Error;
use crate::options::Compression;

/// Unpacks the layers (blob files, bottom first) into a fresh private
/// directory and packs it into `out` (temporary file + rename).
pub(crate) fn write(
    layers: &[(Digest, std::path::PathBuf)],
    compression: Compression,
    epoch: u64,
    out: &Path,
) -> Result<(), Error> {
    let out_dir = crate::files::parent_of(out);
    // Private (0700): set-uid files of the image never sit where another
    // user could run them.
    let stage = tempfile::Builder::new()
        .prefix(&format!(".{}.tmp-", crate::files::file_name(out)))
        .tempdir_in(&out_dir)
        .map_err(|e| Error::io("create temporary directory in", &out_dir, e))?;
    let root = stage.path().join("rootfs");
    std::fs::create_dir(&root).map_err(|e| Error::io("create", &root, e))?;
    for (d, blob) in layers {
        unpack(d, blob, &root)?;
    }
    let img = stage.path().join("image.sqfs");
    crate::squashfs::pack(&root, &img, epoch, compression)?;
    std::fs::rename(&img, out).map_err(|e| Error::io("rename into place", out, e))
}

fn unsafe_entry(layer: &Digest, entry: &str, reason: impl Into<String>) -> Error {
    Error::UnsafeEntry {
        layer: layer.to_string(),
        entry: entry.to_owned(),
        reason: reason.into(),
    }
}

/// The entry's path relative to the root, each component normal.
fn relative(layer: &Digest, raw: &Path) -> Result<std::path::PathBuf, Error> {
    let mut rel = std::path::PathBuf::new();
    for c in raw.components() {
        match c {
            Component::Normal(p) => rel.push(p),
            Component::CurDir => {}
            _ => {
                return Err(unsafe_entry(
                    layer,
                    &raw.display().to_string(),
                    "escapes the root",
                ));
            }
        }
    }
    Ok(rel)
}

/// Refuses a path whose ancestors below `root` include a symlink.
fn no_symlink_above(layer: &Digest, root: &Path, rel: &Path) -> Result<(), Error> {
    let mut p = root.to_path_buf();
    let n = rel.components().count();
    for (i, c) in rel.components().enumerate() {
        if i + 1 == n {
            break;
        }
        p.push(c);
        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(unsafe_entry(
                layer,
                &rel.display().to_string(),
                format!(
                    "/{} is a symlink",
                    p.strip_prefix(root).unwrap_or(&p).display()
                ),
            ));
        }
    }
    Ok(())
}

fn remove(p: &Path) -> Result<(), Error> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p).map_err(|e| Error::io("remove", p, e)),
        Ok(_) => std::fs::remove_file(p).map_err(|e| Error::io("remove", p, e)),
        Err(_) => Ok(()),
    }
}

fn unpack(layer: &Digest, blob: &Path, root: &Path) -> Result<(), Error> {
    let f = File::open(blob).map_err(|e| Error::io("open", blob, e))?;
    let mut br = BufReader::with_capacity(1 << 20, f);
    let head = br.fill_buf().map_err(|e| Error::io("read", blob, e))?;
    let dec: Box<dyn Read> = if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(flate2::bufread::MultiGzDecoder::new(br))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(
            zstd::stream::read::Decoder::with_buffer(br).map_err(|e| Error::io("read", blob, e))?,
        )
    } else {
        Box::new(br)
    };
    let mut ar = tar::Archive::new(dec);
    ar.set_preserve_permissions(true);
    ar.set_preserve_mtime(false);
    ar.set_unpack_xattrs(false);
    ar.set_overwrite(true);
    let bad = |e: std::io::Error| unsafe_entry(layer, "", format!("unreadable: {e}"));
    for e in ar.entries().map_err(bad)? {
        let mut e = e.map_err(bad)?;
        let raw = e.path().map_err(bad)?.into_owned();
        let name = raw.display().to_string();
        let rel = relative(layer, &raw)?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        no_symlink_above(layer, root, &rel)?;
        let dest = root.join(&rel);
        let ty = e.header().entry_type();
        let file_name = rel
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_owned();
        if let Some(hidden) = file_name.strip_prefix(".wh.") {
            let parent = dest.parent().unwrap_or(root);
            if hidden == ".wh..opq" {
                if let Ok(rd) = std::fs::read_dir(parent) {
                    for c in rd.flatten() {
                        remove(&c.path())?;
                    }
                }
            } else {
                remove(&parent.join(hidden))?;
            }
            continue;
        }
        if !(ty.is_file()
            || ty.is_dir()
            || ty.is_symlink()
            || ty.is_hard_link()
            || ty == tar::EntryType::Continuous)
        {
            if ty.is_pax_global_extensions()
                || ty.is_pax_local_extensions()
                || ty.is_gnu_longname()
                || ty.is_gnu_longlink()
            {
                continue;
            }
            return Err(unsafe_entry(layer, &name, "not a file, directory or link"));
        }
        // An upper layer replaces what a lower one had, unless both are
        // directories.
        if let Ok(m) = std::fs::symlink_metadata(&dest)
            && !(m.is_dir() && ty.is_dir())
        {
            remove(&dest)?;
        }
        let inside = e
            .unpack_in(root)
            .map_err(|err| unsafe_entry(layer, &name, format!("cannot unpack: {err}")))?;
        if !inside {
            return Err(unsafe_entry(layer, &name, "escapes the root"));
        }
    }
    Ok(())
}
