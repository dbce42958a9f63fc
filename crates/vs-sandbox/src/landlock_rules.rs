//! The Landlock rules a policy lowers to ([`LandlockPlan`]): what the
//! confined command may read and execute, and what it may write. Pure data
//! and the file-system look-ups that build it; applying it is
//! `crate::linux::landlock_apply`'s, the sandbox around it
//! [`crate::landlock`]'s.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::SandboxError;
use crate::policy::ResolvedPolicy;
use crate::resources::HostResources;

/// Devices a confined command may write.
pub const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// Trees granted read-write besides the workspace. A workspace inside one
/// of them would be writable through it, so it is refused.
pub const WRITABLE_TREES: &[&str] = &["/tmp", "/dev/shm", "/var/tmp"];

/// The Landlock rules for a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LandlockPlan {
    /// Paths granted read and execute.
    pub read: Vec<PathBuf>,
    /// Paths granted every file-system right.
    pub write: Vec<PathBuf>,
    /// Whether TCP stays allowed.
    pub network: bool,
    /// An egress allow-list: the egress proxy's socket on the host. The
    /// command then gets a network namespace of its own whose one open
    /// listener is handed to it (TCP connect only to that port; `network`
    /// is false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<PathBuf>,
}

impl LandlockPlan {
    /// Lowers a resolved policy and resources into rules.
    pub fn new(
        policy: &ResolvedPolicy,
        resources: &HostResources,
        network: bool,
    ) -> Result<Self, SandboxError> {
        let root = policy.workspace().root();
        for tree in WRITABLE_TREES {
            let tree = Path::new(tree);
            let real = crate::realpath::canonicalize(tree).unwrap_or_else(|_| tree.to_path_buf());
            if root.starts_with(tree) || root.starts_with(&real) {
                return Err(SandboxError::UnsafeWorkspace {
                    backend: "landlock",
                    workspace: root.to_path_buf(),
                    reason: format!(
                        "it lies below {}, which Landlock must grant read-write; move the project elsewhere or use bwrap",
                        tree.display()
                    ),
                });
            }
        }
        // /etc as one rule, as bwrap binds it, when no host secret below it
        // is readable here (for any caller but root, typically): else its
        // needed entries one by one. Landlock cannot take a right back
        // below a granted directory, so a resource that holds a secret
        // (/etc/ssl with ssl/private) is granted entry by entry around it.
        let whole = resources.with_whole_etc(policy.workspace());
        let found = whole.secrets();
        let secrets: Vec<PathBuf> = found.iter().map(|s| s.path.clone()).collect();
        let etc = Path::new(crate::resources::WHOLE_ETC);
        let resources = if secrets.iter().any(|s| s.starts_with(etc)) {
            resources
        } else {
            &whole
        };
        // A secret is recognised by its file identity, whatever the path
        // a rule names it by (a symlink, a hard link): one stat per rule
        // instead of a canonicalisation.
        let identities: Vec<(u64, u64)> = found.iter().map(|s| s.identity).collect();
        let secrets = Secrets::new(&secrets, identities);
        let mut read: Vec<PathBuf> = Vec::new();
        for r in resources.iter().filter(|r| r.symlink_target.is_none()) {
            grant_around(&r.path, r.identity, &secrets, &mut read, 0);
        }
        read.push("/proc".into());
        read.push("/dev".into());
        let mut write = vec![root.to_path_buf()];
        write.extend(WRITABLE_TREES.iter().map(PathBuf::from));
        write.extend(WRITABLE_DEVICES.iter().map(PathBuf::from));
        let mut seen = std::collections::BTreeSet::new();
        write.retain(|p| (p == root || p.exists()) && seen.insert(p.clone()));
        Ok(Self {
            read,
            write,
            network,
            egress: None,
        })
    }
}

/// The host secrets a grant must go around, indexed for the questions
/// [`grant_around`] asks of every resource and entry.
struct Secrets<'a> {
    /// The secrets' paths.
    paths: HashSet<&'a Path>,
    /// Every ancestor of a secret, the secret included: `path` holds a
    /// secret (`secret.starts_with(path)`) exactly when it is one of them.
    holders: HashSet<&'a Path>,
    /// The secrets' file identities.
    identities: Vec<(u64, u64)>,
}

impl<'a> Secrets<'a> {
    fn new(secrets: &'a [PathBuf], identities: Vec<(u64, u64)>) -> Self {
        Self {
            paths: secrets.iter().map(PathBuf::as_path).collect(),
            holders: secrets.iter().flat_map(|s| s.ancestors()).collect(),
            identities,
        }
    }
}

/// Adds `path` to `out`, or, when a secret lies below it, every entry of it
/// but the secrets (recursively, a few levels deep at most: the secrets sit
/// one or two levels below a granted directory).
fn grant_around(
    path: &Path,
    known: Option<(u64, u64)>,
    secrets: &Secrets<'_>,
    out: &mut Vec<PathBuf>,
    depth: u8,
) {
    // A rule on a symlink grants its target: never one that is a secret.
    // (`known`: the identity the resource set already looked up.)
    let id = || known.or_else(|| identity(path));
    if secrets.paths.contains(path)
        || (!secrets.identities.is_empty() && id().is_some_and(|i| secrets.identities.contains(&i)))
    {
        return;
    }
    let holds_secret = secrets.holders.contains(path);
    if !holds_secret || depth >= 6 {
        out.push(path.to_path_buf());
        return;
    }
    let Ok(names) = crate::fsread::dir_names(path) else {
        return;
    };
    let mut names: Vec<PathBuf> = names.into_iter().map(|n| path.join(n)).collect();
    names.sort();
    for entry in names {
        grant_around(&entry, None, secrets, out, depth + 1);
    }
}

/// The (device, inode) a path names, following symlinks.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
