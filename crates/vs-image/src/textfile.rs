//! Reading a file someone else may have written (a spec, a lock, a
//! references graph, a cache record): a regular file (checked on the
//! opened descriptor that is then read), opened without blocking (a fifo
//! cannot hang the build), read with a size cap (a link to `/dev/zero`
//! cannot grow memory); text is UTF-8.

use std::io::Read;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use crate::error::Error;

/// Why [`read_bounded`] returned no bytes.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Opening or reading failed (a final symlink, with `NOFOLLOW`).
    Io(std::io::Error),
    /// A fifo, device, socket or directory.
    NotRegular,
    /// More than the limit.
    TooLarge,
}

/// The bytes of the regular file `path`, at most `limit` of them, opened
/// with `extra` added to the flags (`NOFOLLOW` for a file whose name
/// must not lead elsewhere).
pub(crate) fn read_bounded(path: &Path, limit: u64, extra: OFlags) -> Result<Vec<u8>, Refused> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY | extra,
        Mode::empty(),
    )
    .map_err(|e| Refused::Io(e.into()))?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(Refused::Io)?;
    if !meta.is_file() {
        return Err(Refused::NotRegular);
    }
    if meta.len() > limit {
        return Err(Refused::TooLarge);
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(Refused::Io)?;
    if bytes.len() as u64 > limit {
        return Err(Refused::TooLarge);
    }
    Ok(bytes)
}

/// Reads `path` as text of at most `limit` bytes; `refuse` turns a reason
/// (not a regular file, too large, not UTF-8) into the caller's error.
pub(crate) fn read_text(
    path: &Path,
    limit: u64,
    refuse: impl Fn(String) -> Error,
) -> Result<String, Error> {
    let bytes = read_bounded(path, limit, OFlags::empty()).map_err(|r| match r {
        Refused::Io(e) => Error::io("read", path, e),
        Refused::NotRegular => {
            refuse("not a regular file (a fifo, device, socket or directory)".to_owned())
        }
        Refused::TooLarge => refuse(format!("larger than {} MiB", limit >> 20)),
    })?;
    String::from_utf8(bytes).map_err(|_| refuse("not UTF-8".to_owned()))
}
