//! The confinement trait every `*Sandbox` type implements, and the report
//! of what a backend enforces.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::SandboxError;
use crate::policy::{Access, ResolvedPolicy};

/// Restricts an agent process: what it may read, write and not see.
pub trait Confinement {
    /// The backend's name (`bwrap`, `landlock`, `seatbelt`, `docker`).
    fn backend(&self) -> &'static str;

    /// Rewrites `argv` into an argv that runs it confined.
    fn wrap(&self, argv: &[OsString]) -> Result<Vec<OsString>, SandboxError>;

    /// Maps a host path to the path the confined process sees.
    fn agent_path(&self, host: &Path) -> PathBuf;

    /// What this backend enforces, and what it does not.
    fn report(&self) -> &EnforcementReport;
}

/// How one policy path is treated by a backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PathEnforcement {
    /// The path as written, relative to the workspace.
    pub path: PathBuf,
    /// Read-only or hidden.
    pub access: Access,
    /// Whether the backend enforces it.
    pub enforced: bool,
    /// How (or why not).
    pub how: String,
}

/// What a backend enforces, stated explicitly.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EnforcementReport {
    /// The backend.
    pub backend: &'static str,
    /// The workspace, as the confined process sees it.
    pub workspace: PathBuf,
    /// Each policy path.
    pub paths: Vec<PathEnforcement>,
    /// What confines reads and writes outside the project.
    pub outside: String,
    /// Other guarantees (namespaces, seccomp, network).
    pub hardening: Vec<String>,
    /// Known gaps, each a sentence.
    pub gaps: Vec<String>,
}

impl EnforcementReport {
    /// Starts a report with every policy path marked the same way.
    pub fn for_policy(
        backend: &'static str,
        policy: &ResolvedPolicy,
        how: impl Fn(Access) -> (bool, String),
    ) -> Self {
        let paths = policy
            .entries()
            .iter()
            .map(|e| {
                let (enforced, how) = how(e.access);
                PathEnforcement {
                    path: e.rel.as_path().to_path_buf(),
                    access: e.access,
                    enforced,
                    how,
                }
            })
            .collect();
        Self {
            backend,
            workspace: policy.workspace().root().to_path_buf(),
            paths,
            outside: String::new(),
            hardening: Vec::new(),
            gaps: Vec::new(),
        }
    }

    /// The policy paths the backend does not enforce.
    pub fn not_enforced(&self) -> impl Iterator<Item = &PathEnforcement> {
        self.paths.iter().filter(|p| !p.enforced)
    }

    /// True when every policy path is enforced.
    pub fn is_complete(&self) -> bool {
        self.paths.iter().all(|p| p.enforced)
    }
}
