//! The log of one `vibesys session`'s egress refusals: `egress.jsonl` in
//! the session's own directory of the run state
//! ([`StateLayout::create_session_dir`], below `local/`: hidden from the
//! agent), one JSON object a line as the egress proxy writes each refusal
//! ([`vs_sandbox::egress::Denial`]: `time`, `host`, `port`, `reason`,
//! `via`, and `pid` and `command` when known), append-only, at most
//! [`vs_sandbox::egress::denials::MAX_KEPT_DENIALS`] lines.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Result, RuntimeError};
use crate::state::StateLayout;

/// The log's name in the session's directory.
pub const EGRESS_LOG: &str = "egress.jsonl";

/// A session's refusal log, created and open for appending.
#[derive(Debug)]
pub struct SessionEgressLog {
    path: PathBuf,
    file: File,
}

impl SessionEgressLog {
    /// Creates the log of a new session in `layout`'s run state (a new
    /// session directory; the file new, owner-only, never through a
    /// symlink).
    pub fn create(layout: &StateLayout) -> Result<Self> {
        let path = layout.create_session_dir()?.join(EGRESS_LOG);
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| RuntimeError::io("create", &path, e))?;
        Ok(Self { path, file })
    }

    /// Where the log is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Has `proxy` append its refusals to the log from now on.
    pub fn attach(&self, proxy: &vs_sandbox::egress::EgressProxy) -> Result<()> {
        let file = self
            .file
            .try_clone()
            .map_err(|e| RuntimeError::io("duplicate the descriptor of", &self.path, e))?;
        proxy.log_to(file);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_session_gets_a_new_private_log_in_the_hidden_state() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let layout = StateLayout::open(dir.path()).unwrap();
        let a = SessionEgressLog::create(&layout).unwrap();
        let b = SessionEgressLog::create(&layout).unwrap();
        assert_ne!(a.path(), b.path());
        for log in [&a, &b] {
            assert!(log.path().starts_with(layout.sessions_dir()), "{log:?}");
            assert!(log.path().starts_with(layout.local_dir()));
            let mode = std::fs::metadata(log.path()).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
    }

    /// A symlink planted at `local/sessions` is refused, not followed.
    #[test]
    fn a_symlinked_sessions_dir_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let layout = StateLayout::open(dir.path()).unwrap();
        std::fs::create_dir_all(layout.local_dir()).unwrap();
        std::os::unix::fs::symlink(outside.path(), layout.sessions_dir()).unwrap();
        assert!(SessionEgressLog::create(&layout).is_err());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
