//! `LandlockSandbox`: the policy lowered to Landlock rules.
//!
//! Landlock only adds rights below a path; it cannot carve read-only or
//! hidden paths out of a writable project. Those paths are reported as NOT
//! ENFORCED and logged at start-up. vibesys (or the `vibesys
//! internal-landlock` helper that `wrap` puts in front) stays the parent:
//! the launched child drops every capability, leaves the terminal's
//! session, restricts itself to the rules and installs the seccomp filters
//! right before it executes the command ([`crate::launch::run_landlock`]),
//! so nothing else in vibesys runs restricted.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::confinement::{Confinement, EnforcementReport};
use crate::error::SandboxError;
use crate::limits::ProcessLimit;
use crate::policy::{Access, ResolvedPolicy};
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

/// Options of the Landlock backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LandlockOptions {
    /// Allow TCP (the default); `false` denies TCP bind and connect (ABI 4+).
    pub network: bool,
    /// The executable that applies the rules (`vibesys`).
    pub helper: PathBuf,
    /// Host paths outside the project granted read-write (a provider's
    /// state directory, for instance).
    pub writable: Vec<PathBuf>,
    /// `[sandbox] max_processes`: the most processes the tree may hold.
    pub max_processes: u64,
    /// The directory [`crate::AnySandbox::run`] starts the command in
    /// (inside the workspace), or the workspace root when `None`.
    pub chdir: Option<PathBuf>,
}

/// The Landlock rules for a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LandlockPlan {
    /// Paths granted read and execute.
    pub read: Vec<PathBuf>,
    /// Paths granted every file-system right.
    pub write: Vec<PathBuf>,
    /// Whether TCP stays allowed.
    pub network: bool,
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
            let real = std::fs::canonicalize(tree).unwrap_or_else(|_| tree.to_path_buf());
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
        // Landlock cannot take a right back below a granted directory, so a
        // resource that holds a host secret (/etc/ssl with ssl/private,
        // /etc granted whole) is granted entry by entry around it.
        let secrets: Vec<PathBuf> = resources.secrets().into_iter().map(|s| s.path).collect();
        // A secret is recognised by its file identity, whatever the path
        // a rule names it by (a symlink, a hard link): one stat per rule
        // instead of a canonicalisation.
        let identities: Vec<(u64, u64)> = secrets.iter().filter_map(|s| identity(s)).collect();
        let mut read: Vec<PathBuf> = Vec::new();
        for r in resources.iter().filter(|r| r.symlink_target.is_none()) {
            grant_around(&r.path, &secrets, &identities, &mut read, 0);
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
        })
    }
}

/// Agent confinement with Landlock (Linux 5.13+). Weaker than bwrap:
/// never chosen automatically.
#[derive(Debug, Clone)]
pub struct LandlockSandbox {
    plan: LandlockPlan,
    chdir: PathBuf,
    helper: PathBuf,
    limit: ProcessLimit,
    report: EnforcementReport,
}

impl LandlockSandbox {
    /// Plans Landlock confinement and logs every policy path it cannot
    /// enforce.
    pub fn new(
        policy: &ResolvedPolicy,
        resources: &HostResources,
        options: &LandlockOptions,
    ) -> Result<Self, SandboxError> {
        let mut plan = LandlockPlan::new(policy, resources, options.network)?;
        for w in &options.writable {
            if policy.workspace().root().starts_with(w) {
                return Err(SandboxError::UnsafeWorkspace {
                    backend: "landlock",
                    workspace: policy.workspace().root().to_path_buf(),
                    reason: format!("the writable path {} contains it", w.display()),
                });
            }
            plan.write.push(w.clone());
        }
        let limit = ProcessLimit::choose(options.max_processes);
        let report = landlock_report(policy, options.network, &limit);
        for gap in &report.gaps {
            tracing::warn!("landlock: {gap}");
        }
        for gap in report.not_enforced() {
            tracing::warn!(
                path = %gap.path.display(),
                access = gap.access.name(),
                "landlock: {}",
                gap.how
            );
        }
        Ok(Self {
            plan,
            chdir: options
                .chdir
                .clone()
                .unwrap_or_else(|| policy.workspace().root().to_path_buf()),
            helper: options.helper.clone(),
            limit,
            report,
        })
    }

    /// The rules this sandbox applies.
    pub fn plan(&self) -> &LandlockPlan {
        &self.plan
    }

    /// What bounds the processes of the confined tree.
    pub fn process_limit(&self) -> &ProcessLimit {
        &self.limit
    }

    /// The directory the command starts in.
    pub fn chdir(&self) -> &Path {
        &self.chdir
    }
}

/// The report of what the Landlock backend enforces on this kernel.
pub fn landlock_report(
    policy: &ResolvedPolicy,
    network: bool,
    limit: &ProcessLimit,
) -> EnforcementReport {
    let abi = crate::launch::landlock_abi();
    let mut report = EnforcementReport::for_policy("landlock", policy, |access| match access {
        Access::ReadOnly => (
            false,
            "NOT ENFORCED: Landlock cannot make a path read-only inside a writable workspace"
                .into(),
        ),
        Access::Hidden => (
            false,
            "NOT ENFORCED: Landlock cannot hide a path inside a readable workspace".into(),
        ),
    });
    report.outside =
        "reads outside the project and host resources denied; writes outside the project, /tmp and a few devices denied"
            .into();
    report.hardening = vec![
        format!("kernel Landlock ABI {abi}"),
        "every capability dropped before exec: effective, permitted, inheritable, ambient and the bounding set; securebits locked (uid 0 regains nothing through execve); no_new_privs".into(),
        "a new session: no controlling terminal to inject into".into(),
        format!("seccomp (the bwrap program): {}", crate::bwrap::SECCOMP_SUMMARY),
        "Unix sockets: socket(AF_UNIX) refused by seccomp, so no named socket (the Docker socket, the D-Bus system bus) is reachable; socketpair allowed".into(),
        if abi >= 6 {
            "Landlock scoping: signals to, and abstract unix sockets of, processes outside the sandbox denied".into()
        } else {
            format!("NO Landlock scoping (ABI {abi} < 6): signals to processes of the same user outside are allowed")
        },
        "a supervisor process (a subreaper) between vibesys and the command forwards signals and kills everything the command leaves behind when it exits, and the whole tree when vibesys dies (also of SIGKILL)".into(),
        limit.describe(),
    ];
    report.hardening.push(if network {
        "network: allowed".into()
    } else {
        format!(
            "network: TCP bind and connect denied by Landlock (ABI 4+); seccomp refuses what Landlock's network rules do not govern: {}",
            UNGOVERNED_NETWORK
        )
    });
    report.gaps = vec![
        "read-only and hidden paths are not enforced".into(),
        "/tmp and /dev/shm are shared with the host".into(),
        "no private /proc: processes of the same user are listed".into(),
        format!(
            "the kernel's Landlock ABI {abi} has no right for Unix sockets: they are refused outright (also inside the project), not scoped"
        ),
    ];
    if let ProcessLimit::Unbounded { reason } = limit {
        report
            .gaps
            .push(format!("the number of processes is not bounded: {reason}"));
    }
    report
}

/// What [`crate::linux::seccomp::SocketRules::deny_network`] refuses.
pub const UNGOVERNED_NETWORK: &str = "UDP, MPTCP, SCTP, raw and every other non-TCP IPv4/IPv6 socket, every other address family (netlink, packet, vsock, ...), listen() and TCP Fast Open sends";

impl Confinement for LandlockSandbox {
    fn backend(&self) -> &'static str {
        "landlock"
    }

    /// [`Helper::Landlock`](crate::helper::Helper::Landlock): the helper
    /// applies the rules in the command's child and stays its parent.
    fn wrap(&self, argv: &[OsString]) -> Result<Vec<OsString>, SandboxError> {
        if argv.is_empty() {
            return Err(SandboxError::InvalidCommand("the command is empty".into()));
        }
        Ok(crate::helper::Helper::Landlock {
            plan: self.plan.clone(),
            limit: self.limit.clone(),
            argv: argv.to_vec(),
        }
        .argv(&self.helper))
    }

    fn agent_path(&self, host: &Path) -> PathBuf {
        host.to_path_buf()
    }

    fn report(&self) -> &EnforcementReport {
        &self.report
    }
}

/// Adds `path` to `out`, or, when a secret lies below it, every entry of it
/// but the secrets (recursively, a few levels deep at most: the secrets sit
/// one or two levels below a granted directory).
fn grant_around(
    path: &Path,
    secrets: &[PathBuf],
    identities: &[(u64, u64)],
    out: &mut Vec<PathBuf>,
    depth: u8,
) {
    // A rule on a symlink grants its target: never one that is a secret.
    if secrets.iter().any(|s| s == path) || identity(path).is_some_and(|i| identities.contains(&i))
    {
        return;
    }
    let holds_secret = secrets.iter().any(|s| s.starts_with(path));
    if !holds_secret || depth >= 6 {
        out.push(path.to_path_buf());
        return;
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let mut names: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    names.sort();
    for entry in names {
        grant_around(&entry, secrets, identities, out, depth + 1);
    }
}

/// The (device, inode) a path names, following symlinks.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}
