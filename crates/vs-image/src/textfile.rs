//! Reading a spec, a lock or a references graph: a regular file (checked
//! on the opened descriptor), opened without blocking (a fifo cannot hang
//! the build), read with a size cap (a link to `/dev/zero` cannot grow
//! memory), and UTF-8.

use std::io::Read;
use std::path::Path;

use rustix::fs::{Mode, OFlags};

use crate::error::Error;

/// Reads `path` as text of at most `limit` bytes; `refuse` turns a reason
/// (not a regular file, too large, not UTF-8) into the caller's error.
pub(crate) fn read_text(
    path: &Path,
    limit: u64,
    refuse: impl Fn(String) -> Error,
) -> Result<String, Error> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| Error::io("read", path, e.into()))?;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| Error::io("read", path, e))?;
    if !meta.is_file() {
        return Err(refuse(
            "not a regular file (a fifo, device, socket or directory)".to_owned(),
        ));
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io("read", path, e))?;
    if bytes.len() as u64 > limit {
        return Err(refuse(format!("larger than {} MiB", limit >> 20)));
    }
    String::from_utf8(bytes).map_err(|_| refuse("not UTF-8".to_owned()))
}
