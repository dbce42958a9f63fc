//! A pulled image as a squashfs rootfs: its checked layers unpacked in
//! order into a private directory (upper layers win, OCI whiteouts
//! honoured, nothing written through a symlink), then packed as a build
//! packs its rootfs ([`crate::squashfs::pack`]).
//!
//! Every file and directory stays open to its owner while it sits in the
//! private directory (a 0555 directory must take the files a layer puts
//! in it, a 0000 file must be read by mksquashfs, the directory must be
//! removed), also when pulling as an unprivileged user; the image's own
//! mode of such an entry goes into the squashfs through a pseudo file.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
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
    let mut modes = Modes::new();
    for (d, blob) in layers {
        unpack(d, blob, &root, &mut modes)?;
    }
    let pseudo = stage.path().join("modes.pf");
    let text = pseudo_modes(&root, &modes)?;
    std::fs::write(&pseudo, text).map_err(|e| Error::io("write", &pseudo, e))?;
    let img = stage.path().join("image.sqfs");
    crate::squashfs::pack(&root, &img, epoch, compression, Some(&pseudo))?;
    std::fs::rename(&img, out).map_err(|e| Error::io("rename into place", out, e))
}

/// The image's mode of each entry whose mode was widened for its owner
/// while unpacking, by path below the root (with the layer that set it).
type Modes = BTreeMap<PathBuf, (Digest, u32)>;

/// Owner access every directory (rwx) and file (rw) needs while unpacked.
fn owner_access(is_dir: bool) -> u32 {
    if is_dir { 0o700 } else { 0o600 }
}

/// Forgets the modes of `rel` and everything below it (removed or
/// replaced).
fn forget(modes: &mut Modes, rel: &Path) {
    modes.retain(|k, _| !k.starts_with(rel));
}

/// mksquashfs pseudo definitions (`PATH m MODE 0 0`) giving back the
/// modes widened while unpacking, for the entries still there. A name
/// that the pseudo file format would have to quote is refused rather than
/// quoted: such a name with such a mode is no image's need.
fn pseudo_modes(root: &Path, modes: &Modes) -> Result<String, Error> {
    let mut text = String::new();
    for (rel, (layer, mode)) in modes {
        let still =
            std::fs::symlink_metadata(root.join(rel)).is_ok_and(|m| m.is_dir() || m.is_file());
        if !still {
            continue;
        }
        let name = rel.to_str().unwrap_or_default();
        let plain = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._-+@:,=~".contains(&b));
        if !plain {
            return Err(unsafe_entry(
                layer,
                &rel.display().to_string(),
                format!("its mode {mode:o} lacks owner access and its name is not plain ASCII"),
            ));
        }
        text.push_str(&format!("{name} m {mode:o} 0 0\n"));
    }
    Ok(text)
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

fn unpack(layer: &Digest, blob: &Path, root: &Path, modes: &mut Modes) -> Result<(), Error> {
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
                forget_below(modes, rel.parent().unwrap_or(Path::new("")));
            } else {
                // `.wh..` or `.wh...` would remove the directory or its
                // parent: a whiteout names one entry.
                let one = matches!(
                    Path::new(hidden)
                        .components()
                        .collect::<Vec<_>>()
                        .as_slice(),
                    [Component::Normal(_)]
                );
                if !one {
                    return Err(unsafe_entry(layer, &name, "a whiteout of no single entry"));
                }
                remove(&parent.join(hidden))?;
                forget(modes, &rel.with_file_name(hidden));
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
            forget(modes, &rel);
        }
        let inside = e
            .unpack_in(root)
            .map_err(|err| unsafe_entry(layer, &name, format!("cannot unpack: {err}")))?;
        if !inside {
            return Err(unsafe_entry(layer, &name, "escapes the root"));
        }
        if ty.is_dir() || ty.is_file() || ty == tar::EntryType::Continuous {
            let mode = e.header().mode().map_err(bad)? & 0o7777;
            let need = owner_access(ty.is_dir());
            if mode & need == need {
                modes.remove(&rel);
            } else {
                std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode | need))
                    .map_err(|err| Error::io("chmod", &dest, err))?;
                modes.insert(rel, (layer.clone(), mode));
            }
        }
    }
    Ok(())
}

/// Forgets the modes of everything strictly below `dir` (an opaque
/// whiteout emptied it).
fn forget_below(modes: &mut Modes, dir: &Path) {
    modes.retain(|k, _| !(k.starts_with(dir) && k != dir));
}
