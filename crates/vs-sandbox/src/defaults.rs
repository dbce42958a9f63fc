//! The protections every project gets with no policy written: credentials
//! hidden, and what confines and judges the agent read-only (`.git`,
//! `vibesys.toml`, `.vibesys/`), with the provider CLIs' project
//! configuration (`.claude/`, `.mcp.json`, `.codex/`, `.gemini/`). An operator drops one only by naming it in
//! `[sandbox] widen`, and every drop is logged at start-up.
//!
//! Pure data and validation, like the rest of the policy: the only I/O is
//! looking at which of the default paths exist (a hidden path must exist
//! where it is applied; a read-only path that does not exist has nothing
//! to protect).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::PolicyError;
use crate::policy::{Access, ProjectPathPolicy, Workspace, WorkspaceRelPath};

/// Files at the project root hidden by default (credentials).
pub const DEFAULT_HIDDEN_FILES: &[&str] = &["agent.toml", ".env"];

/// Root entries whose names start with this are hidden too (`.env.local`).
pub const DEFAULT_HIDDEN_PREFIX: &str = ".env.";

/// Paths read-only by default: history, the framework's files, and the
/// provider CLIs' project configuration. The agent reads history; the
/// framework commits. A provider's project settings (`.claude/`,
/// `.mcp.json`, `.codex/`, `.gemini/`) name hooks, MCP servers and other
/// commands that the operator's next unconfined CLI in this project runs,
/// as `.git/hooks` names what git runs.
pub const DEFAULT_READ_ONLY: &[&str] = &[
    ".git",
    "vibesys.toml",
    ".vibesys",
    ".claude",
    ".mcp.json",
    ".codex",
    ".gemini",
];

/// The parts of `.git` that stay read-only when the agent may commit
/// (`git = "commit"`): everything git executes or takes configuration
/// from. The rest (objects, refs, index, logs, HEAD) becomes writable.
pub const GIT_CONFIGURATION: &[&str] = &["config", "config.worktree", "hooks", "info", "modules"];

/// What the agent may do with `.git` (`[sandbox] git`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GitAccess {
    /// `.git` is read-only as a whole (the default).
    #[default]
    ReadOnly,
    /// Objects, refs, index and logs are writable; configuration and hooks
    /// ([`GIT_CONFIGURATION`]) are not.
    Commit,
}

/// A default protection and what became of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DefaultEntry {
    /// The path.
    pub path: WorkspaceRelPath,
    /// Its default access.
    pub access: Access,
    /// Dropped by `[sandbox] widen`.
    pub widened: bool,
}

/// The default protections of a workspace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Defaults {
    /// Each default path that exists, in a fixed order.
    pub entries: Vec<DefaultEntry>,
    /// How `.git` is protected.
    pub git: GitAccess,
}

impl Defaults {
    /// The defaults that apply to `workspace`: the listed paths that exist
    /// (root `.env.*` entries found by listing the root), minus `widen`.
    /// A `widen` entry that names no default is an error, so a typo cannot
    /// look like a protection was dropped or kept.
    pub fn for_workspace(
        workspace: &Workspace,
        git: GitAccess,
        widen: &[WorkspaceRelPath],
    ) -> Result<Self, PolicyError> {
        let root = workspace.root();
        let exists = |rel: &Path| root.join(rel).symlink_metadata().is_ok();
        let mut hidden: Vec<PathBuf> = DEFAULT_HIDDEN_FILES
            .iter()
            .map(PathBuf::from)
            .filter(|p| exists(p))
            .collect();
        // Fail closed: a root that cannot be listed (searchable but not
        // readable, `chmod 311`) would leave a `.env.production` readable
        // by its well-known name, unhidden.
        let names = crate::fsread::dir_names(root).map_err(|e| PolicyError::BadWorkspace {
            path: root.to_path_buf(),
            reason: format!(
                "it cannot be listed ({e}), so its {DEFAULT_HIDDEN_PREFIX}* files cannot be found and hidden; make it readable by the user running vibesys"
            ),
        })?;
        let is_env_file = |n: &[u8]| {
            n.starts_with(DEFAULT_HIDDEN_PREFIX.as_bytes()) && n.len() > DEFAULT_HIDDEN_PREFIX.len()
        };
        let mut env_files: Vec<PathBuf> = Vec::new();
        for name in names {
            if !is_env_file(name.as_bytes()) {
                continue;
            }
            // Fail closed: policy paths are UTF-8, so such a name could
            // not be hidden. Only someone who can write the project's root
            // can make one, and they could as well delete the project.
            let name = match name.into_string() {
                Ok(name) => name,
                Err(name) => {
                    return Err(PolicyError::BadWorkspace {
                        path: root.to_path_buf(),
                        reason: format!(
                            "it holds {name:?}, a {DEFAULT_HIDDEN_PREFIX}* file whose name is not UTF-8, which vibesys cannot hide; rename it"
                        ),
                    });
                }
            };
            env_files.push(PathBuf::from(name));
        }
        env_files.sort();
        hidden.extend(env_files);
        let mut read_only: Vec<PathBuf> = Vec::new();
        for p in DEFAULT_READ_ONLY {
            let p = PathBuf::from(p);
            if !exists(&p) {
                continue;
            }
            let is_git_dir = p == Path::new(".git") && root.join(&p).is_dir();
            if git == GitAccess::Commit && is_git_dir {
                read_only.extend(
                    GIT_CONFIGURATION
                        .iter()
                        .map(|c| p.join(c))
                        .filter(|c| exists(c)),
                );
            } else {
                read_only.push(p);
            }
        }
        let mut entries = Vec::new();
        for (list, access) in [(hidden, Access::Hidden), (read_only, Access::ReadOnly)] {
            for p in list {
                let path = WorkspaceRelPath::new(&p)?;
                let widened = widen.contains(&path);
                entries.push(DefaultEntry {
                    path,
                    access,
                    widened,
                });
            }
        }
        // A name that is a default elsewhere (a checkout without `.env`)
        // is fine; one that is never a default is a typo.
        let is_default_name = |w: &WorkspaceRelPath| {
            let text = w.to_string();
            DEFAULT_HIDDEN_FILES.contains(&text.as_str())
                || DEFAULT_READ_ONLY.contains(&text.as_str())
                || (text.starts_with(DEFAULT_HIDDEN_PREFIX) && !text.contains('/'))
                || GIT_CONFIGURATION
                    .iter()
                    .any(|c| text == format!(".git/{c}"))
        };
        if let Some(unknown) = widen.iter().find(|w| !is_default_name(w)) {
            return Err(PolicyError::NotADefault {
                path: unknown.as_path().to_path_buf(),
            });
        }
        for e in entries.iter().filter(|e| e.widened) {
            tracing::warn!(
                path = %e.path,
                access = e.access.name(),
                "default protection WIDENED by [sandbox] widen: the agent can {} it",
                match e.access {
                    Access::Hidden => "read",
                    Access::ReadOnly => "write",
                }
            );
        }
        Ok(Self { entries, git })
    }

    /// `policy` with the defaults added. On a path both name, the default
    /// wins (only `widen` weakens one); an operator entry redundant under a
    /// read-only default (read-only below read-only) is dropped; a default
    /// already covered by an operator entry (below a hidden path, or
    /// read-only below read-only) is not added. A hidden path below a
    /// read-only one stays, as everywhere.
    pub fn apply(&self, policy: &ProjectPathPolicy) -> Result<ProjectPathPolicy, PolicyError> {
        let defaults: Vec<(&WorkspaceRelPath, Access)> = self
            .entries
            .iter()
            .filter(|e| !e.widened)
            .map(|e| (&e.path, e.access))
            .collect();
        let mut read_only: Vec<WorkspaceRelPath> = Vec::new();
        let mut hidden: Vec<WorkspaceRelPath> = Vec::new();
        for (path, access) in policy.entries() {
            let same = defaults.iter().any(|(d, _)| *d == path);
            let redundant = access == Access::ReadOnly
                && defaults
                    .iter()
                    .any(|(d, a)| *a == Access::ReadOnly && path.is_strictly_below(d));
            if same || redundant {
                if same {
                    tracing::info!(path = %path, "policy path is also a default protection; the default applies");
                }
                continue;
            }
            match access {
                Access::ReadOnly => read_only.push(path.clone()),
                Access::Hidden => hidden.push(path.clone()),
            }
        }
        for (path, access) in defaults {
            let covered = policy.entries().any(|(p, a)| {
                path.is_strictly_below(p) && (a == Access::Hidden || access == Access::ReadOnly)
            });
            if covered {
                continue;
            }
            match access {
                Access::ReadOnly => read_only.push(path.clone()),
                Access::Hidden => hidden.push(path.clone()),
            }
        }
        ProjectPathPolicy::new(&read_only, &hidden)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        for d in [
            ".git/hooks",
            ".git/objects",
            ".vibesys/state/runs",
            "secrets",
        ] {
            std::fs::create_dir_all(r.join(d)).unwrap();
        }
        for f in [
            "agent.toml",
            ".env",
            ".env.local",
            "vibesys.toml",
            ".git/config",
            ".environment",
        ] {
            std::fs::write(r.join(f), "x").unwrap();
        }
        let w = Workspace::open(r).unwrap();
        (dir, w)
    }

    fn rel(p: &str) -> WorkspaceRelPath {
        WorkspaceRelPath::new(p).unwrap()
    }

    #[test]
    fn defaults_cover_credentials_history_and_the_framework() {
        let (_d, w) = ws();
        let d = Defaults::for_workspace(&w, GitAccess::ReadOnly, &[]).unwrap();
        let p = d.apply(&ProjectPathPolicy::empty()).unwrap();
        let hidden: Vec<_> = p.hidden().iter().map(ToString::to_string).collect();
        assert_eq!(hidden, ["agent.toml", ".env", ".env.local"]);
        let ro: Vec<_> = p.read_only().iter().map(ToString::to_string).collect();
        assert_eq!(ro, [".git", "vibesys.toml", ".vibesys"]);
    }

    #[test]
    fn commit_mode_keeps_configuration_read_only() {
        let (_d, w) = ws();
        let d = Defaults::for_workspace(&w, GitAccess::Commit, &[]).unwrap();
        let p = d.apply(&ProjectPathPolicy::empty()).unwrap();
        let ro: Vec<_> = p.read_only().iter().map(ToString::to_string).collect();
        assert_eq!(
            ro,
            [".git/config", ".git/hooks", "vibesys.toml", ".vibesys"]
        );
    }

    #[test]
    fn operators_merge_and_widen_explicitly() {
        let (_d, w) = ws();
        // A weaker operator entry on a default path does not weaken it; a
        // redundant read-only below .vibesys is dropped; a hidden path
        // below a read-only default stays.
        let op = ProjectPathPolicy::new(
            ["agent.toml", ".vibesys/state", "secrets"],
            [".vibesys/state/runs"],
        )
        .unwrap();
        let d = Defaults::for_workspace(&w, GitAccess::ReadOnly, &[]).unwrap();
        let p = d.apply(&op).unwrap();
        assert!(p.hidden().contains(&rel("agent.toml")));
        assert!(!p.read_only().contains(&rel(".vibesys/state")));
        assert!(p.hidden().contains(&rel(".vibesys/state/runs")));
        assert!(p.read_only().contains(&rel("secrets")));

        let d = Defaults::for_workspace(&w, GitAccess::ReadOnly, &[rel(".env")]).unwrap();
        let p = d.apply(&ProjectPathPolicy::empty()).unwrap();
        assert!(!p.hidden().contains(&rel(".env")));
        assert!(d.entries.iter().any(|e| e.path == rel(".env") && e.widened));

        let err = Defaults::for_workspace(&w, GitAccess::ReadOnly, &[rel("src")]).unwrap_err();
        assert!(err.to_string().contains("src"), "{err}");
    }
}
