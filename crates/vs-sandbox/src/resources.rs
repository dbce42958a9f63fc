//! `HostResources`: the read-only host paths a confined agent needs.
//!
//! System roots, a subset of `/etc` (never `/etc/shadow` and friends; bwrap
//! binds `/etc` whole and masks the secrets instead), the
//! command's own install root, `PATH` entries, toolchain homes, and the
//! operator's `VIBESYS_AGENT_SANDBOX_ALLOW` list. A resource that is the
//! workspace or one of its ancestors is refused with a log line: it would
//! unconfine the project.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::policy::Workspace;

/// System directories exposed read-only when they exist.
pub const SYSTEM_ROOTS: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/opt",
    "/nix/store",
    "/run/current-system",
];

/// Entries of `/etc` an agent needs (name resolution, TLS, users, locale,
/// loader). Secrets such as `/etc/shadow` are deliberately absent.
pub const ETC_ENTRIES: &[&str] = &[
    "alternatives",
    "bash.bashrc",
    "ca-certificates",
    "ca-certificates.conf",
    "debian_version",
    "environment",
    "gai.conf",
    "gitconfig",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "locale.gen",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki",
    "profile",
    "profile.d",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
    "terminfo",
    "timezone",
    "vim",
];

/// Host secrets that stay unreadable inside a sandbox even when a granted
/// directory holds them (`/etc` granted whole, `/etc/ssl` for its
/// certificates, ...): each is masked by an empty file or directory.
/// Entries ending in `*` name the matching entries of that directory.
pub const HOST_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssl/private",
    "/etc/ssh/ssh_host_*",
    "/etc/security/opasswd",
    "/etc/krb5.keytab",
    "/etc/NetworkManager/system-connections",
    "/etc/ppp/chap-secrets",
    "/etc/ppp/pap-secrets",
    "/etc/docker/key.json",
    "/etc/munge/munge.key",
    "/etc/slurm/slurmdbd.conf",
    "/etc/credstore",
    "/etc/credstore.encrypted",
    "/etc/wireguard",
    "/etc/ipsec.secrets",
    "/etc/ipsec.d/private",
    "/etc/letsencrypt/archive",
    "/etc/letsencrypt/keys",
    "/etc/pki/tls/private",
    "/etc/mysql/debian.cnf",
    "/etc/postfix/sasl_passwd",
];

/// The system tree a masking backend (bwrap) binds whole, read-only, in
/// place of the [`ETC_ENTRIES`] it would otherwise bind one by one: every
/// mount costs bwrap a parse of its mount table, so one bind plus a mask
/// per [`HOST_SECRETS`] entry present is far cheaper than ~35 binds.
/// Landlock cannot mask, so it keeps the entries.
pub const WHOLE_ETC: &str = "/etc";

/// A host secret below a granted resource, masked in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostSecret {
    /// The secret's path (the same inside and outside).
    pub path: PathBuf,
    /// File or directory (the mask has the same kind).
    pub kind: crate::policy::PathKind,
    /// (device, inode) of the file, as found: what a Landlock grant
    /// recognises it by, whatever path names it.
    #[serde(skip)]
    pub identity: (u64, u64),
}

/// Toolchain home variables whose directories are exposed when set.
pub const TOOLCHAIN_VARS: &[&str] = &[
    "CARGO_HOME",
    "RUSTUP_HOME",
    "GOROOT",
    "JAVA_HOME",
    "PYENV_ROOT",
    "NVM_DIR",
    "VOLTA_HOME",
    "BUN_INSTALL",
    "DENO_INSTALL",
    "CONDA_PREFIX",
    "VIRTUAL_ENV",
];

/// Why a resource is in the set (for `policy show` and logs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ResourceOrigin {
    /// A system root or `/etc` entry.
    System,
    /// The install root of the confined command.
    Command,
    /// A `PATH` entry.
    PathEntry,
    /// A toolchain home variable.
    Toolchain,
    /// `VIBESYS_AGENT_SANDBOX_ALLOW` or `--allow`.
    Operator,
    /// A provider's home-level state file (`~/.claude.json`) granted
    /// read-only where no private copy can stand in for it (Landlock).
    ProviderState,
}

/// One read-only host path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostResource {
    /// The path as it appears in the sandbox.
    pub path: PathBuf,
    /// When `path` is a symlink: its target as stored in the link.
    pub symlink_target: Option<PathBuf>,
    /// Why it is there.
    pub origin: ResourceOrigin,
    /// What it names, symlinks followed: (device, inode), when known.
    #[serde(skip)]
    pub(crate) identity: Option<(u64, u64)>,
    /// Whether `path` itself was a symlink when it was added (its parent
    /// may still hold one).
    #[serde(skip)]
    pub(crate) leaf_link: bool,
}

/// The read-only host paths a confined agent may read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct HostResources {
    /// Keyed by [`key`]: ordered as `Path` orders, compared as bytes.
    #[serde(serialize_with = "serialize_entries")]
    entries: BTreeMap<Vec<u8>, HostResource>,
}

fn serialize_entries<S: serde::Serializer>(
    entries: &BTreeMap<Vec<u8>, HostResource>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(entries.values().map(|r| (&r.path, r)))
}

/// A path's components, each preceded by a NUL byte (which no component
/// holds): byte order of keys is `Path`'s component order (a directory
/// sorts right before everything below it; `/a/b` before `/a-b`), so the
/// set is compared with `memcmp` instead of component iteration.
pub(crate) fn key(path: &Path) -> Vec<u8> {
    let bytes = path.as_os_str().as_encoded_bytes();
    let mut out = Vec::with_capacity(bytes.len() + 2);
    for c in path.components() {
        out.push(0);
        out.extend_from_slice(c.as_os_str().as_encoded_bytes());
    }
    out
}

/// (device, inode) of a file's metadata.
fn identity_of(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

impl HostResources {
    /// No resources at all.
    pub fn none() -> Self {
        Self::default()
    }

    /// System roots and the `/etc` subset that exist on this host.
    pub fn system() -> Self {
        let mut set = Self::default();
        for root in SYSTEM_ROOTS {
            set.add(Path::new(root), ResourceOrigin::System);
        }
        let etc = Path::new("/etc");
        for name in ETC_ENTRIES {
            set.add(&etc.join(name), ResourceOrigin::System);
        }
        set
    }

    /// The resources for running `program` with the given environment:
    /// system roots, the program's install root, every absolute `PATH`
    /// entry, toolchain homes, and `VIBESYS_AGENT_SANDBOX_ALLOW`. Values are
    /// taken from `env` (never from the process environment implicitly).
    pub fn for_command<'a>(
        program: &OsStr,
        env: impl IntoIterator<Item = (&'a OsStr, &'a OsStr)>,
    ) -> Self {
        let env: BTreeMap<&OsStr, &OsStr> = env.into_iter().collect();
        let mut set = Self::system();
        let path_var = env.get(OsStr::new("PATH")).copied();
        if let Some(path_var) = path_var {
            for entry in std::env::split_paths(path_var) {
                if entry.is_absolute() {
                    set.add(&entry, ResourceOrigin::PathEntry);
                }
            }
        }
        if let Some(found) = find_program(program, path_var)
            && let Some(root) = install_root(&found, env.get(OsStr::new("HOME")).copied())
        {
            set.add(&root, ResourceOrigin::Command);
        }
        for var in TOOLCHAIN_VARS {
            if let Some(value) = env.get(OsStr::new(var)) {
                let p = Path::new(value);
                if p.is_absolute() {
                    set.add(p, ResourceOrigin::Toolchain);
                }
            }
        }
        // rustup's proxies in ~/.cargo/bin need the toolchains in ~/.rustup.
        if let (Some(home), Some(path_var)) = (env.get(OsStr::new("HOME")), path_var)
            && !env.contains_key(OsStr::new("RUSTUP_HOME"))
        {
            let cargo_bin = Path::new(home).join(".cargo/bin");
            if std::env::split_paths(path_var).any(|p| p == cargo_bin) {
                set.add(&Path::new(home).join(".rustup"), ResourceOrigin::Toolchain);
            }
        }
        if let Some(allow) = env.get(OsStr::new(crate::controls::ALLOW_ENV)) {
            set.add_allow_list(allow);
        }
        set
    }

    /// These resources for a backend that masks [`HOST_SECRETS`] (bwrap):
    /// the [`ETC_ENTRIES`] collapsed into [`WHOLE_ETC`], bound read-only as
    /// one tree (secrets masked by the plan), unless `/etc` would unconfine
    /// `workspace` (then nothing of it is added). Other resources stay as
    /// they are; [`HostResources::iter`] already drops the nested ones.
    pub fn with_whole_etc(&self, workspace: &Workspace) -> Self {
        let etc = Path::new(WHOLE_ETC);
        let mut set = self.clone();
        let grants_etc = ETC_ENTRIES.iter().any(|name| {
            set.entries
                .get(&key(&etc.join(name)))
                .is_some_and(|r| r.origin == ResourceOrigin::System)
        });
        if grants_etc && !set.entries.contains_key(&key(etc)) {
            let mut whole = Self::default();
            whole.add(etc, ResourceOrigin::System);
            if whole.retain_safe_for(workspace).is_empty() {
                set.entries.extend(whole.entries);
            }
        }
        set
    }

    /// Adds each absolute entry of a `PATH`-style list as an operator
    /// resource; relative entries are ignored with a log line.
    pub fn add_allow_list(&mut self, list: &OsStr) {
        for entry in std::env::split_paths(list) {
            if entry.as_os_str().is_empty() {
                continue;
            }
            if entry.is_absolute() {
                self.add(&entry, ResourceOrigin::Operator);
            } else {
                tracing::warn!(path = %entry.display(), "ignoring relative path in {}", crate::controls::ALLOW_ENV);
            }
        }
    }

    /// Adds one path if it exists (symlinks are kept as symlinks and their
    /// target added too, so the layout inside matches the host).
    pub fn add(&mut self, path: &Path, origin: ResourceOrigin) {
        self.add_depth(path, origin, 0);
    }

    fn add_depth(&mut self, path: &Path, origin: ResourceOrigin, depth: u8) {
        let k = key(path);
        if depth > 8 || self.entries.contains_key(&k) {
            return;
        }
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        if path.to_str().is_none_or(|s| s.contains(['\n', '\r'])) {
            tracing::warn!(path = %path.display(), "ignoring host resource with an unprintable path");
            return;
        }
        // Directory symlinks are recreated as symlinks; file symlinks are
        // bound through (bwrap and Landlock follow them for the source).
        let (symlink_target, identity) = if meta.file_type().is_symlink() {
            let target = std::fs::metadata(path).ok();
            let is_dir = target.as_ref().is_some_and(std::fs::Metadata::is_dir);
            (
                if is_dir {
                    std::fs::read_link(path).ok()
                } else {
                    None
                },
                target.as_ref().map(identity_of),
            )
        } else {
            (None, Some(identity_of(&meta)))
        };
        let is_dir_link = symlink_target.is_some();
        self.entries.insert(
            k,
            HostResource {
                path: path.to_path_buf(),
                symlink_target,
                origin,
                identity,
                leaf_link: meta.file_type().is_symlink(),
            },
        );
        if is_dir_link
            && let Ok(real) = crate::realpath::canonicalize(path)
            && !self.covers(&real)
        {
            self.add_depth(&real, origin, depth + 1);
        }
    }

    /// True when `path` is a resource directory (not a symlink) or lies
    /// below one.
    fn covers(&self, path: &Path) -> bool {
        path.ancestors().any(|a| {
            self.entries
                .get(&key(a))
                .is_some_and(|e| e.symlink_target.is_none())
        })
    }

    /// Drops every resource that is the workspace or one of its ancestors
    /// (each with a log line), and those inside the workspace (already
    /// visible). Returns the refused paths.
    pub fn retain_safe_for(&mut self, workspace: &Workspace) -> Vec<PathBuf> {
        let root = workspace.root();
        // The workspace and its ancestors, by what they are: a resource
        // naming one of them (through any path: a symlink, a bind mount)
        // is refused without resolving its path.
        let root_id = std::fs::metadata(root).ok().map(|m| identity_of(&m));
        let ancestors: Vec<(u64, u64)> = root_id
            .into_iter()
            .chain(
                root.ancestors()
                    .skip(1)
                    .filter_map(|a| std::fs::metadata(a).ok().map(|m| identity_of(&m))),
            )
            .collect();
        let mut refused = Vec::new();
        let mut real_paths = crate::realpath::RealPaths::new();
        self.entries.retain(|_, res| {
            let path = &res.path;
            // A project-local command (`./build.sh`, `bin/tool`) has the
            // workspace itself as its install root: already visible, so
            // nothing to grant and nothing to warn about.
            let is_root = path.as_path() == root || res.identity.is_some_and(|i| Some(i) == root_id);
            if is_root && res.origin == ResourceOrigin::Command {
                tracing::debug!(resource = %path.display(), "the command lives in the workspace");
                return false;
            }
            let names_ancestor = res.identity.is_some_and(|i| ancestors.contains(&i));
            if names_ancestor || root.starts_with(path) {
                tracing::warn!(
                    resource = %path.display(),
                    workspace = %root.display(),
                    origin = ?res.origin,
                    "refusing host resource: it is the workspace or an ancestor of it and would unconfine the project"
                );
                refused.push(path.clone());
                return false;
            }
            if path.starts_with(root) {
                return false;
            }
            // Inside the workspace through a symlink: already visible.
            // When the resource itself was no symlink, only its directory
            // needs resolving (shared by most resources: one look-up).
            let real = match (res.leaf_link, path.parent(), path.file_name()) {
                (false, Some(parent), Some(name)) => {
                    real_paths.canonicalize(parent).map(|p| p.join(name))
                }
                _ => real_paths.canonicalize(path),
            };
            !real.is_ok_and(|real| real.starts_with(root))
        });
        refused
    }

    /// The resources, sorted by path, without those already visible
    /// through an enclosing resource directory.
    pub fn iter(&self) -> impl Iterator<Item = &HostResource> {
        // One pass: the map is ordered by components, so everything below
        // a directory follows it; an entry is nested exactly when it lies
        // below the last directory kept.
        let mut outer: Option<&[u8]> = None;
        self.entries.iter().filter_map(move |(k, r)| {
            // Below `o` exactly when `o` is a proper prefix of the key
            // ending at a component boundary (the next byte is a NUL).
            if outer.is_some_and(|o| k.len() > o.len() && k.starts_with(o) && k[o.len()] == 0) {
                return None;
            }
            outer = if r.symlink_target.is_none() {
                Some(k.as_slice())
            } else {
                None
            };
            Some(r)
        })
    }

    /// The [`HOST_SECRETS`] present on this host that a resource would
    /// expose, sorted by path. Symlinked secrets are followed to what they
    /// name, which is masked when it lies below a resource too.
    pub fn secrets(&self) -> Vec<HostSecret> {
        let mut found = BTreeMap::new();
        let mut creds: Option<Creds> = None;
        let mut real_paths = crate::realpath::RealPaths::new();
        for pattern in HOST_SECRETS {
            for path in expand_secret(Path::new(pattern)) {
                let Ok(meta) = std::fs::metadata(&path) else {
                    continue;
                };
                // What this user cannot read, the sandbox (the same user,
                // fewer rights) cannot either; bwrap could not even place
                // a mask there.
                let creds = creds.get_or_insert_with(Creds::current);
                if !creds.may_read(&path, &meta) {
                    continue;
                }
                let real = real_paths.canonicalize(&path);
                let kind = if meta.is_dir() {
                    crate::policy::PathKind::Directory
                } else {
                    crate::policy::PathKind::File
                };
                // A path that is its own canonical form is no symlink (its
                // last component was just read as none): no second look.
                let candidates = match real {
                    Ok(real) if real == path => vec![(path, true)],
                    Ok(real) => vec![(path, false), (real, false)],
                    Err(_) => vec![(path, false)],
                };
                for (candidate, canonical) in candidates {
                    // Below a root exactly when one of its ancestors (itself
                    // included) is one: a few look-ups, not one component
                    // comparison per resource.
                    let exposed = self.covers(&candidate);
                    if exposed
                        && (canonical
                            || std::fs::symlink_metadata(&candidate).is_ok_and(|m| !m.is_symlink()))
                    {
                        found.insert(
                            candidate.clone(),
                            HostSecret {
                                path: candidate,
                                kind,
                                identity: identity_of(&meta),
                            },
                        );
                    }
                }
            }
        }
        found.into_values().collect()
    }

    /// For a linked git worktree (its `.git` is a file `gitdir: PATH`): the
    /// worktree's git directory and the repository's common directory
    /// (objects, refs), read-only, so `git log` and `git status` work
    /// inside and nothing of the repository can be changed. Read with a
    /// size cap; a missing or malformed `.git` file adds nothing.
    pub fn add_linked_git(&mut self, workspace: &Workspace) {
        let dot_git = workspace.root().join(".git");
        let Ok(Some(bytes)) = crate::fsread::read_bounded(&dot_git, 4096) else {
            return;
        };
        let text = String::from_utf8_lossy(&bytes);
        let Some(gitdir) = text.lines().find_map(|l| l.strip_prefix("gitdir: ")) else {
            return;
        };
        let gitdir = workspace.root().join(gitdir.trim());
        let Ok(gitdir) = std::fs::canonicalize(&gitdir) else {
            return;
        };
        // The `.git` file lies in the workspace, where the agent may have
        // written it: trust it only when git's own back-link, written in
        // the repository outside the workspace, names this worktree, and
        // the gitdir is `<common>/worktrees/<name>` of a real repository.
        let back = match crate::fsread::read_bounded(&gitdir.join("gitdir"), 4096) {
            Ok(Some(b)) => std::fs::canonicalize(String::from_utf8_lossy(&b).trim()).ok(),
            _ => None,
        };
        let Ok(own) = std::fs::canonicalize(&dot_git) else {
            return;
        };
        if back.as_deref() != Some(own.as_path()) {
            tracing::warn!(gitdir = %gitdir.display(), "ignoring the .git file: its gitdir does not link back to this worktree");
            return;
        }
        let common = match crate::fsread::read_bounded(&gitdir.join("commondir"), 4096) {
            Ok(Some(b)) => {
                std::fs::canonicalize(gitdir.join(String::from_utf8_lossy(&b).trim())).ok()
            }
            _ => None,
        };
        let Some(common) = common else {
            return;
        };
        let in_worktrees = gitdir.parent() == Some(common.join("worktrees").as_path());
        if !in_worktrees || !common.join("objects").is_dir() {
            tracing::warn!(gitdir = %gitdir.display(), "ignoring the .git file: not a worktree of a repository");
            return;
        }
        let common = Some(common);
        for dir in std::iter::once(gitdir).chain(common) {
            self.add(&dir, ResourceOrigin::System);
        }
    }

    /// True when `path` is one of the resources.
    pub fn contains(&self, path: &Path) -> bool {
        self.entries.contains_key(&key(path))
    }
}

/// The caller's identity as the kernel checks file permissions inside a
/// sandbox: the effective uid and groups, with no capability (every
/// backend drops them, so not even root overrides a mode).
struct Creds {
    uid: u32,
    gids: Vec<u32>,
    /// Directories already asked about: may they be searched? (Every
    /// secret lies below `/` and most below `/etc`.)
    searchable: std::collections::HashMap<PathBuf, bool>,
}

impl Creds {
    /// The effective uid, gid and supplementary groups (on Linux from
    /// three system calls, not a parse of `/proc/self/status`).
    #[cfg(target_os = "linux")]
    fn current() -> Self {
        let mut gids: Vec<u32> = rustix::process::getgroups()
            .unwrap_or_default()
            .into_iter()
            .map(rustix::process::Gid::as_raw)
            .collect();
        gids.push(rustix::process::getegid().as_raw());
        Self {
            uid: rustix::process::geteuid().as_raw(),
            gids,
            searchable: std::collections::HashMap::new(),
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn current() -> Self {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let field = |name: &str| -> Vec<u32> {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| {
                    v.split_whitespace()
                        .filter_map(|n| n.parse().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let uid = field("Uid:").get(1).copied().unwrap_or(u32::MAX);
        let mut gids = field("Groups:");
        gids.extend(field("Gid:").get(1));
        Self {
            uid,
            gids,
            searchable: std::collections::HashMap::new(),
        }
    }

    fn allowed(&self, meta: &std::fs::Metadata, bit: u32) -> bool {
        use std::os::unix::fs::MetadataExt;
        let mode = meta.mode();
        if meta.uid() == self.uid {
            mode & (bit << 6) != 0
        } else if self.gids.contains(&meta.gid()) {
            mode & (bit << 3) != 0
        } else {
            mode & bit != 0
        }
    }

    /// True when every directory on the way may be searched and the path
    /// itself (whose metadata, symlinks followed, is `meta`) read, by mode
    /// bits alone.
    fn may_read(&mut self, path: &Path, meta: &std::fs::Metadata) -> bool {
        let mut cur = PathBuf::from("/");
        for part in path.components().skip(1) {
            let searchable = match self.searchable.get(&cur) {
                Some(known) => *known,
                None => {
                    let ok = std::fs::metadata(&cur).is_ok_and(|m| self.allowed(&m, 0o1));
                    self.searchable.insert(cur.clone(), ok);
                    ok
                }
            };
            if !searchable {
                return false;
            }
            cur.push(part);
        }
        self.allowed(meta, 0o4)
    }
}

/// The paths a [`HOST_SECRETS`] entry names: itself, or for `dir/prefix*`
/// the entries of `dir` starting with `prefix`.
fn expand_secret(pattern: &Path) -> Vec<PathBuf> {
    let Some(name) = pattern.file_name().and_then(OsStr::to_str) else {
        return Vec::new();
    };
    let Some(prefix) = name.strip_suffix('*') else {
        return vec![pattern.to_path_buf()];
    };
    let Some(dir) = pattern.parent() else {
        return Vec::new();
    };
    let Ok(names) = crate::fsread::dir_names(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = names
        .into_iter()
        .filter(|n| n.to_str().is_some_and(|n| n.starts_with(prefix)))
        .map(|n| dir.join(n))
        .collect();
    out.sort();
    out
}

/// Finds `program` the way `execvp` would, in the given `PATH`.
pub fn find_program(program: &OsStr, path_var: Option<&OsStr>) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 || p.is_absolute() {
        return p.is_file().then(|| p.to_path_buf());
    }
    use crate::process::lookup::{EmptyEntry, is_executable_file, search_path};
    let path_var = path_var.unwrap_or_default();
    search_path(program, path_var, None, EmptyEntry::CurrentDir).find(|c| is_executable_file(c))
}

/// The install root of an executable: the directory holding it, or its
/// parent when that directory is a `bin` of a prefix that is not `/` nor
/// the home directory itself.
fn install_root(executable: &Path, home: Option<&OsStr>) -> Option<PathBuf> {
    let real = crate::realpath::canonicalize(executable).ok()?;
    let dir = real.parent()?;
    if dir.file_name() == Some(OsStr::new("bin"))
        && let Some(prefix) = dir.parent()
        && prefix != Path::new("/")
        && home.is_none_or(|h| Path::new(h) != prefix)
    {
        return Some(prefix.to_path_buf());
    }
    Some(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_of_the_workspace_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("proj");
        std::fs::create_dir(&ws).unwrap();
        let workspace = Workspace::open(&ws).unwrap();
        let mut set = HostResources::none();
        set.add(dir.path(), ResourceOrigin::Operator);
        set.add(&ws, ResourceOrigin::Operator);
        set.add(Path::new("/usr"), ResourceOrigin::System);
        let refused = set.retain_safe_for(&workspace);
        assert_eq!(refused.len(), 2, "{refused:?}");
        assert!(set.contains(Path::new("/usr")));
    }

    /// A command that lives in the project has the workspace as its
    /// install root: dropped (already visible), not refused; an operator's
    /// resource naming the workspace and a command beside it still are.
    #[test]
    fn a_project_local_command_is_not_refused() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("proj");
        std::fs::create_dir(&ws).unwrap();
        std::os::unix::fs::symlink(&ws, base.join("ws-link")).unwrap();
        let workspace = Workspace::open(&ws).unwrap();
        let mut set = HostResources::none();
        set.add(&ws, ResourceOrigin::Command);
        set.add(&base.join("ws-link"), ResourceOrigin::Command);
        assert!(set.retain_safe_for(&workspace).is_empty());
        assert_eq!(set.iter().count(), 0);
        let mut set = HostResources::none();
        set.add(&ws, ResourceOrigin::Operator);
        set.add(&base, ResourceOrigin::Command);
        assert_eq!(set.retain_safe_for(&workspace).len(), 2);
        assert_eq!(set.iter().count(), 0);
    }

    /// A resource that names the workspace or an ancestor through a
    /// symlink is refused; one that leads into the workspace through a
    /// symlink is dropped (bound elsewhere it would show the workspace's
    /// hidden paths); a lexical prefix that is not a path prefix is kept.
    #[test]
    fn links_to_the_workspace_are_caught() {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let ws = base.join("proj");
        std::fs::create_dir_all(ws.join("bin")).unwrap();
        std::fs::create_dir_all(base.join("proj-tools/bin")).unwrap();
        std::os::unix::fs::symlink(&base, base.join("up")).unwrap();
        std::os::unix::fs::symlink(&ws, base.join("ws-link")).unwrap();
        let workspace = Workspace::open(&ws).unwrap();
        let mut set = HostResources::none();
        for p in ["up", "ws-link", "ws-link/bin", "proj-tools/bin"] {
            set.add(&base.join(p), ResourceOrigin::PathEntry);
        }
        let refused = set.retain_safe_for(&workspace);
        assert!(refused.contains(&base.join("up")), "{refused:?}");
        assert!(refused.contains(&base.join("ws-link")), "{refused:?}");
        assert!(!set.contains(&base.join("ws-link/bin")));
        assert!(set.contains(&base.join("proj-tools/bin")));
        assert!(set.iter().all(|r| !r.path.starts_with(&ws)));
    }

    #[test]
    fn a_forged_git_file_exposes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("proj");
        let host = dir.path().join("host-secrets");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(host.join("objects")).unwrap();
        // The agent writes `.git` pointing at a host directory.
        std::fs::write(ws.join(".git"), format!("gitdir: {}\n", host.display())).unwrap();
        let workspace = Workspace::open(&ws).unwrap();
        let mut set = HostResources::none();
        set.add_linked_git(&workspace);
        assert_eq!(set.iter().count(), 0);
        // Even with a commondir file planted: no back-link, nothing.
        std::fs::write(host.join("commondir"), "..\n").unwrap();
        set.add_linked_git(&workspace);
        assert_eq!(set.iter().count(), 0);
    }

    #[test]
    fn a_masking_backend_gets_etc_whole() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::open(dir.path()).unwrap();
        let set = HostResources::system().with_whole_etc(&workspace);
        let paths: Vec<PathBuf> = set.iter().map(|r| r.path.clone()).collect();
        assert!(paths.contains(&PathBuf::from("/etc")), "{paths:?}");
        assert!(
            !paths
                .iter()
                .any(|p| p.starts_with("/etc") && p != Path::new("/etc")),
            "{paths:?}"
        );
        // Landlock's set keeps the entries.
        assert!(!HostResources::system().contains(Path::new("/etc")));
        // /etc is never added where it would unconfine the project.
        let etc_ws = Workspace::open("/etc").unwrap();
        let set = HostResources::system().with_whole_etc(&etc_ws);
        assert!(!set.contains(Path::new("/etc")));
    }

    #[test]
    fn nested_resources_are_listed_once() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("a/b")).unwrap();
        std::fs::create_dir_all(d.join("a-b")).unwrap();
        std::os::unix::fs::symlink(d.join("a-b"), d.join("l")).unwrap();
        let mut set = HostResources::none();
        for p in ["a/b", "a", "a-b", "l"] {
            set.add(&d.join(p), ResourceOrigin::Operator);
        }
        let listed: Vec<PathBuf> = set.iter().map(|r| r.path.clone()).collect();
        assert_eq!(listed, [d.join("a"), d.join("a-b"), d.join("l")]);
    }

    #[test]
    fn shadow_is_never_a_resource() {
        let set = HostResources::system();
        assert!(!set.contains(Path::new("/etc/shadow")));
        assert!(!set.contains(Path::new("/etc")));
    }
}
