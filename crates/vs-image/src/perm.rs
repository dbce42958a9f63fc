//! Modes of what the builder publishes: temporary files are created 0600,
//! but an image, its blobs and the lock are meant to be shared (an HPC
//! site installs them on a shared file system), so they get the modes a
//! plain `open(2)`/`mkdir(2)` would give under the process umask.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::OnceLock;

/// The process umask, read from /proc/self/status (022 when unknown);
/// reading it this way does not change it, unlike `umask(2)`.
fn umask() -> u32 {
    static UMASK: OnceLock<u32> = OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Umask:"))
                    .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            })
            .unwrap_or(0o022)
    })
}

/// Gives a file about to be published the mode `0666 & !umask`.
pub(crate) fn publish_file(file: &std::fs::File) -> std::io::Result<()> {
    file.set_permissions(std::fs::Permissions::from_mode(0o666 & !umask()))
}

/// Gives a directory about to be published the mode `0777 & !umask`.
pub(crate) fn publish_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777 & !umask()))
}
