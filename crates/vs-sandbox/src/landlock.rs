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

pub use crate::landlock_rules::{LandlockPlan, WRITABLE_DEVICES, WRITABLE_TREES};

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
    /// Egress by allow-list (with `network`): the command gets a network
    /// namespace of its own whose one listener is handed to this proxy.
    pub egress: Option<crate::egress::EgressDoor>,
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
    /// Set once the gaps are logged: at the first launch, never at
    /// planning (`policy show` prints them in the report instead).
    gaps_logged: std::sync::OnceLock<()>,
}

impl LandlockSandbox {
    /// Plans Landlock confinement; every policy path it cannot enforce is
    /// in its report, and logged when it first wraps a command.
    pub fn new(
        policy: &ResolvedPolicy,
        resources: &HostResources,
        options: &LandlockOptions,
    ) -> Result<Self, SandboxError> {
        let restricted = options.network && options.egress.is_some();
        let mut plan = LandlockPlan::new(policy, resources, options.network && !restricted)?;
        if restricted {
            // A door without a socket (select refuses one) leaves the
            // network closed.
            plan.egress = options
                .egress
                .as_ref()
                .and_then(|d| d.socket())
                .map(Path::to_path_buf);
        }
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
        let mut report = landlock_report(policy, options.network && !restricted, &limit);
        if let (true, Some(door)) = (restricted, &options.egress) {
            report.hardening.push(format!(
                "egress: a network namespace of its own (an unprivileged caller's in a user namespace of its own), its loopback's one listener at 127.0.0.1:{} accepted from outside by vibesys's proxy (named by HTTPS_PROXY, HTTP_PROXY and ALL_PROXY), which admits only {}; TCP connect only to that port (Landlock), every other family refused (seccomp); no resolver inside",
                crate::egress::INSIDE_PORT,
                door.allow
            ));
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
            gaps_logged: std::sync::OnceLock::new(),
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

    /// Logs what this sandbox leaves unenforced, the first time a command
    /// is launched under it.
    pub(crate) fn log_gaps_once(&self) {
        self.gaps_logged.get_or_init(|| log_gaps(&self.report));
    }
}

/// The gap every Landlock sandbox has (its paths are listed when a policy
/// names any).
const PATHS_GAP: &str = "read-only and hidden paths are not enforced";

/// Logs what Landlock leaves unenforced, once, as one warning: the policy
/// paths it cannot carve out of the project, then the other gaps
/// (`policy show --backend landlock` has them one per line).
fn log_gaps(report: &EnforcementReport) {
    let mut line = String::new();
    for access in [Access::ReadOnly, Access::Hidden] {
        let paths: Vec<String> = report
            .not_enforced()
            .filter(|g| g.access == access)
            .map(|g| g.path.display().to_string())
            .collect();
        if !paths.is_empty() {
            let sep = if line.is_empty() { "" } else { "; " };
            line += &format!("{sep}{} {}", access.name(), paths.join(", "));
        }
    }
    let paths = if line.is_empty() {
        String::new()
    } else {
        format!("NOT ENFORCED: {line} (Landlock cannot carve them out of the writable project); ")
    };
    let others: Vec<&str> = report
        .gaps
        .iter()
        .map(String::as_str)
        .filter(|g| paths.is_empty() || *g != PATHS_GAP)
        .collect();
    tracing::warn!(
        "landlock: {paths}{}; see `vibesys policy show --backend landlock`",
        others.join("; ")
    );
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
        format!("seccomp: {NAMESPACE_SUMMARY}"),
        "Unix sockets: socket(AF_UNIX) refused by seccomp, so no named socket (the Docker socket, the D-Bus system bus) is reachable; socketpair allowed".into(),
        if abi >= 6 {
            "Landlock scoping: signals to, and abstract unix sockets of, processes outside the sandbox denied".into()
        } else {
            format!("NO Landlock scoping (ABI {abi} < 6): signals to processes of the same user outside are allowed")
        },
        if matches!(limit, ProcessLimit::Cgroup { .. }) {
            "vibesys (a subreaper) is the command's parent and kills everything the command leaves behind when it exits; a watchdog beside the command kills the run's pids cgroup when vibesys dies (also of SIGKILL)".into()
        } else {
            "a supervisor process (a subreaper) between vibesys and the command forwards signals and kills everything the command leaves behind when it exits, and the whole tree when vibesys dies (also of SIGKILL)".into()
        },
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
        PATHS_GAP.into(),
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

/// What the Landlock program refuses beyond bwrap's: namespace creation
/// ([`crate::syscall_rules::NAMESPACE_DENIED`],
/// [`crate::syscall_rules::CLONE_NAMESPACE_FLAGS`],
/// [`crate::syscall_rules::CLONE3`]).
pub const NAMESPACE_SUMMARY: &str = "no new namespaces: unshare, setns and clone with a namespace flag (CLONE_NEWUSER, NEWNET, NEWNS, ...) refused (EPERM); clone3 refused with ENOSYS (its flags are out of seccomp's reach; the C library falls back to clone)";

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
        self.log_gaps_once();
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
