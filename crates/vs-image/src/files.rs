//! File helpers of the writers: output names, atomic writes, replacing an
//! output directory only once the new one is complete.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// The directory `p` is written in (`.` for a bare file name).
pub(crate) fn parent_of(p: &Path) -> PathBuf {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// The file name of `p`, for naming temporary files beside it.
pub(crate) fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "image".to_owned())
}

/// Writes `bytes` to `dir/name` atomically (temporary file + rename).
pub(crate) fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), Error> {
    let dest = dir.join(name);
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| Error::io("create temporary file in", dir, e))?;
    std::io::Write::write_all(&mut tmp, bytes).map_err(|e| Error::io("write", &dest, e))?;
    crate::perm::publish_file(tmp.as_file()).map_err(|e| Error::io("chmod", &dest, e))?;
    tmp.persist(&dest)
        .map_err(|e| Error::io("rename into place", &dest, e.error))?;
    Ok(())
}

/// An existing output directory may be replaced only when it is empty or
/// an OCI layout (never a directory given by mistake).
fn replaceable(dir: &Path) -> bool {
    dir.join("oci-layout").is_file() || std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none())
}

/// Moves the finished `stage` directory to `out`, replacing an existing
/// directory only after the new one is complete.
pub(crate) fn replace_dir(stage: &Path, out: &Path) -> Result<(), Error> {
    match std::fs::symlink_metadata(out) {
        Err(_) => std::fs::rename(stage, out).map_err(|e| Error::io("rename into place", out, e)),
        Ok(m) if m.is_dir() && !replaceable(out) => {
            let _ = std::fs::remove_dir_all(stage);
            Err(Error::InputPath {
                path: out.to_owned(),
                reason: "exists and is neither empty nor an OCI layout: refusing to replace it"
                    .to_owned(),
            })
        }
        Ok(m) if m.is_dir() => {
            let old = stage.with_extension("old");
            std::fs::rename(out, &old).map_err(|e| Error::io("move aside", out, e))?;
            std::fs::rename(stage, out).map_err(|e| Error::io("rename into place", out, e))?;
            std::fs::remove_dir_all(&old).map_err(|e| Error::io("remove", &old, e))
        }
        Ok(_) => {
            let _ = std::fs::remove_dir_all(stage);
            Err(Error::InputPath {
                path: out.to_owned(),
                reason: "exists and is not a directory".to_owned(),
            })
        }
    }
}
