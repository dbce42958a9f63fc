//! `HostSandbox`: the policy lowered to a bubblewrap command line.
//!
//! The plan is pure data: the exact bwrap argv plus the file descriptors
//! it reads (the seccomp program and empty mask files), numbered from 3.
//! [`crate::launch`] realises those descriptors and runs bwrap.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::confinement::{Confinement, EnforcementReport};
use crate::controls::SandboxUnavailableError;
use crate::error::SandboxError;
pub use crate::fd_slot::{FIRST_SLOT_FD, FdSlot};
use crate::limits::ProcessLimit;
use crate::policy::{Access, PathKind, ResolvedPolicy, metadata_paths};
use crate::private_file::PrivateFile;
use crate::resources::HostResources;

pub use crate::proc_cover::PROC_COVERED_BY_BWRAP;

/// Options of the bubblewrap backend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BwrapOptions {
    /// The bwrap executable.
    pub program: PathBuf,
    /// Keep the host network (the default: agents reach their model API).
    pub network: bool,
    /// Egress by allow-list: the network is unshared and the proxy's
    /// socket is bound in, with the forwarder in front of the command.
    pub egress: Option<crate::egress::EgressDoor>,
    /// The directory the command starts in (inside the workspace), or the
    /// workspace root when `None`.
    pub chdir: Option<PathBuf>,
    /// The executable that realises the plan's descriptors (`vibesys`).
    pub helper: PathBuf,
    /// Host paths outside the project bound read-write (the entries of a
    /// provider's state directory its CLI must write), each from a
    /// descriptor opened beneath its parent with no symlink on the way:
    /// directories or single-link regular files. Empty for `vibesys exec`.
    pub writable: Vec<PathBuf>,
    /// Private copies bound read-write at another path (a provider's
    /// home-level file, see [`PrivateFile`]), each from a descriptor opened
    /// beneath its vibesys-owned directory with no symlink on the way.
    pub private_files: Vec<PrivateFile>,
    /// `[sandbox] max_processes`: the most processes the tree may hold.
    pub max_processes: u64,
    /// The entries of the sandbox's fresh `/proc` bound read-only over
    /// themselves: [`crate::proc_cover::read_only_entries`] of the host's
    /// `/proc` (the rule, not a list; bwrap covers
    /// [`PROC_COVERED_BY_BWRAP`] itself).
    pub proc_read_only: Vec<PathBuf>,
    /// Host device nodes bound over bwrap's minimal `/dev` (an
    /// accelerator's nodes), each checked by
    /// [`crate::config::check_device_node`]: a path that fails the check is
    /// an error of [`HostSandbox::new`], never silently skipped.
    pub devices: Vec<PathBuf>,
}

/// The exact bubblewrap invocation for a policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BwrapPlan {
    /// The bwrap executable.
    pub program: PathBuf,
    /// Arguments before `--` and the command.
    pub args: Vec<String>,
    /// Descriptors the arguments refer to, numbered from 3 in order.
    pub fds: Vec<FdSlot>,
    /// Arguments after the command's environment (the proxy variables of
    /// an allow-list: they win over the caller's).
    pub env_tail: Vec<String>,
    /// What runs in front of the command (the egress forwarder).
    pub command_prefix: Vec<String>,
}

impl BwrapPlan {
    /// Lowers a resolved policy and resources into a bwrap command line.
    pub fn new(policy: &ResolvedPolicy, resources: &HostResources, options: &BwrapOptions) -> Self {
        // Whole read-only trees with the secrets masked, not one bind per
        // entry: bwrap's cost grows with every mount.
        let resources = &resources.with_whole_etc(policy.workspace());
        let mut b = PlanBuilder::default();
        b.namespaces(options);
        b.host(resources);
        b.system(options);
        b.provider_state(options);
        let (env_tail, command_prefix) = b.egress(options);
        b.workspace(policy);
        let chdir = start_dir(policy, options);
        b.args(["--chdir".to_owned(), chdir.display().to_string()]);
        BwrapPlan {
            program: options.program.clone(),
            args: b.args,
            fds: b.fds,
            env_tail,
            command_prefix,
        }
    }

    /// The full argv: bwrap, its arguments, `--`, the command.
    pub fn argv(&self, command: &[OsString]) -> Vec<OsString> {
        let mut argv = Vec::with_capacity(self.args.len() + command.len() + 2);
        argv.push(self.program.clone().into_os_string());
        argv.extend(self.args.iter().map(OsString::from));
        argv.extend(self.env_tail.iter().map(OsString::from));
        argv.push("--".into());
        argv.extend(self.command(command));
        argv
    }

    /// The command as bwrap runs it: behind the egress forwarder when
    /// there is one.
    pub fn command(&self, command: &[OsString]) -> Vec<OsString> {
        self.command_prefix
            .iter()
            .map(OsString::from)
            .chain(command.iter().cloned())
            .collect()
    }
}

#[derive(Default)]
struct PlanBuilder {
    args: Vec<String>,
    fds: Vec<FdSlot>,
}

impl PlanBuilder {
    /// The namespaces, hardening flags and the seccomp program.
    fn namespaces(&mut self, options: &BwrapOptions) {
        self.args([
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
        ]);
        self.arg("--unshare-cgroup-try");
        if !options.network || options.egress.is_some() {
            self.arg("--unshare-net");
        }
        self.args([
            "--die-with-parent",
            "--new-session",
            "--disable-userns",
            "--cap-drop",
            "ALL",
        ]);
        let seccomp = self.slot(FdSlot::Seccomp);
        self.arg("--seccomp");
        self.arg(seccomp.to_string());
    }

    /// A private `/tmp`, the host resources read-only, and the host
    /// secrets below them masked.
    fn host(&mut self, resources: &HostResources) {
        // The private /tmp first: a resource below /tmp (a tool, a linked
        // worktree's gitdir) is then bound onto it instead of hidden by it.
        self.args(["--tmpfs", "/tmp"]);
        for res in resources.iter() {
            let path = res.path.display().to_string();
            match &res.symlink_target {
                Some(target) => {
                    self.args(["--symlink".to_owned(), target.display().to_string(), path]);
                }
                None => self.args(["--ro-bind-try".to_owned(), path.clone(), path]),
            }
        }
        // Secrets below a granted /etc stay unreadable, however /etc was
        // granted (the fixed subset, an operator's `--allow /etc`, ...).
        for secret in resources.secrets() {
            let path = secret.path.display().to_string();
            match secret.kind {
                PathKind::Directory => {
                    self.args(["--perms", "0555", "--tmpfs"]);
                    self.arg(path.clone());
                    self.args(["--remount-ro".to_owned(), path]);
                }
                PathKind::File => {
                    // Mode 0: with /etc bound whole the secret's name
                    // exists inside; reading it fails (no capability
                    // overrides the mode) instead of yielding nothing.
                    let fd = self.slot(FdSlot::Empty);
                    self.args(["--perms", "0000", "--ro-bind-data"]);
                    self.args([fd.to_string(), path]);
                }
            }
        }
    }

    /// Fresh `/proc` (its global knobs read-only) and `/dev`, and the
    /// device nodes asked for.
    fn system(&mut self, options: &BwrapOptions) {
        self.args(["--proc", "/proc"]);
        // Root inside is never root outside: every global entry of /proc
        // a write bit makes writable for root is read-only, whoever runs
        // bwrap (its own cover never binds /proc/sys and knows only
        // PROC_COVERED_BY_BWRAP).
        for knob in &options.proc_read_only {
            let knob = knob.display().to_string();
            self.args(["--ro-bind-try".to_owned(), knob.clone(), knob]);
        }
        self.args(["--dev", "/dev"]);
        for dev in &options.devices {
            let dev = dev.display().to_string();
            self.args(["--dev-bind".to_owned(), dev.clone(), dev]);
        }
    }

    /// The provider's state: the entries its CLI must write, read-write
    /// over the state directory (a read-only host resource), and the
    /// private copies.
    fn provider_state(&mut self, options: &BwrapOptions) {
        // Over the state directory, bound read-only as a host resource:
        // each entry the CLI must write, from a descriptor opened beneath
        // its parent with no symlink (a swap cannot redirect the bind).
        for w in &options.writable {
            let (Some(parent), Some(name)) = (w.parent(), w.file_name()) else {
                continue;
            };
            let kind = if w.is_dir() {
                PathKind::Directory
            } else {
                PathKind::File
            };
            let fd = self.slot(FdSlot::Bind {
                root: parent.to_path_buf(),
                rel: PathBuf::from(name),
                kind,
            });
            self.args([
                "--bind-fd".to_owned(),
                fd.to_string(),
                w.display().to_string(),
            ]);
        }
        // After the state directories: a copy that stands in for a file
        // inside one (`CLAUDE_CONFIG_DIR/.claude.json`) is bound over it.
        for private in options.private_files.iter().filter(|p| p.is_well_formed()) {
            let fd = self.slot(FdSlot::Bind {
                root: private.dir.clone(),
                rel: private.name.clone(),
                kind: PathKind::File,
            });
            self.args([
                "--bind-fd".to_owned(),
                fd.to_string(),
                private.target.display().to_string(),
            ]);
        }
    }

    /// An allow-list's one door: the proxy's socket and the forwarder
    /// bound in; returns the proxy variables and the forwarder's argv.
    fn egress(&mut self, options: &BwrapOptions) -> (Vec<String>, Vec<String>) {
        use crate::egress::{INSIDE_HELPER, INSIDE_SOCKET};
        // A door without a socket (select refuses one) leaves the network
        // unshared with no way out.
        let Some(socket) = options.egress.as_ref().and_then(|d| d.socket()) else {
            return (Vec::new(), Vec::new());
        };
        self.args([
            "--bind".to_owned(),
            socket.display().to_string(),
            INSIDE_SOCKET.to_owned(),
        ]);
        self.args([
            "--ro-bind".to_owned(),
            options.helper.display().to_string(),
            INSIDE_HELPER.to_owned(),
        ]);
        let mut env = Vec::new();
        for (k, v) in crate::egress::proxy_env() {
            env.extend(["--setenv".to_owned(), k, v]);
        }
        let prefix = crate::egress::forwarder_argv(INSIDE_HELPER, INSIDE_SOCKET, &[])
            .into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        (env, prefix)
    }

    /// The workspace from a checked descriptor, its metadata directories
    /// and the ancestors of protected paths as mount points, then each
    /// policy path read-only or masked.
    fn workspace(&mut self, policy: &ResolvedPolicy) {
        let ws = policy.workspace().root();
        let ws_text = ws.display().to_string();
        let bind = |b: &mut Self, rel: &Path, kind: PathKind, flag: &str, dest: String| {
            let fd = b.slot(FdSlot::Bind {
                root: ws.to_path_buf(),
                rel: rel.to_path_buf(),
                kind,
            });
            b.args([flag.to_owned(), fd.to_string(), dest]);
        };
        bind(
            self,
            Path::new("."),
            PathKind::Directory,
            "--bind-fd",
            ws_text,
        );
        // Metadata dirs become mount points: renaming them away fails.
        let metadata = metadata_paths(policy.workspace());
        for meta in &metadata {
            // A policy entry (`.git` read-only by default) is bound below.
            if policy.entries().iter().any(|e| &e.host == meta) {
                continue;
            }
            let kind = if meta.is_dir() {
                PathKind::Directory
            } else {
                PathKind::File
            };
            let rel = meta.strip_prefix(ws).unwrap_or(meta);
            bind(self, rel, kind, "--bind-fd", meta.display().to_string());
        }
        // So do the directories above each protected path: moving an
        // ancestor away cannot take the protected path with it.
        for dir in policy.ancestors() {
            if metadata.contains(&dir) {
                continue;
            }
            let rel = dir.strip_prefix(ws).unwrap_or(&dir);
            bind(
                self,
                rel,
                PathKind::Directory,
                "--bind-fd",
                dir.display().to_string(),
            );
        }
        for entry in policy.entries() {
            let host = entry.host.display().to_string();
            match (entry.access, entry.kind) {
                (Access::ReadOnly, kind) => {
                    bind(self, &entry.resolved_rel, kind, "--ro-bind-fd", host);
                }
                (Access::Hidden, PathKind::Directory) => {
                    self.args(["--perms", "0555", "--tmpfs"]);
                    self.arg(host.clone());
                    self.args(["--remount-ro".to_owned(), host]);
                }
                (Access::Hidden, PathKind::File) => {
                    let fd = self.slot(FdSlot::Empty);
                    self.args(["--perms", "0444", "--ro-bind-data"]);
                    self.args([fd.to_string(), host]);
                }
            }
        }
    }

    fn arg(&mut self, a: impl Into<String>) {
        self.args.push(a.into());
    }
    fn args<S: Into<String>>(&mut self, list: impl IntoIterator<Item = S>) {
        self.args.extend(list.into_iter().map(Into::into));
    }
    fn slot(&mut self, slot: FdSlot) -> i32 {
        self.fds.push(slot);
        FIRST_SLOT_FD + self.fds.len() as i32 - 1
    }
}

/// Agent confinement with bubblewrap: namespaces, a read-only host, the
/// workspace read-write, read-only paths re-bound, hidden paths masked.
#[derive(Debug, Clone)]
pub struct HostSandbox {
    plan: BwrapPlan,
    /// Where the command starts (the plan's `--chdir`).
    chdir: PathBuf,
    helper: PathBuf,
    limit: ProcessLimit,
    report: EnforcementReport,
}

impl HostSandbox {
    /// Plans confinement for a resolved policy. Fails with
    /// [`SandboxUnavailableError`] when bwrap cannot be found.
    pub fn new(
        policy: &ResolvedPolicy,
        resources: &HostResources,
        options: &BwrapOptions,
    ) -> Result<Self, SandboxError> {
        if !crate::process::lookup::is_executable_file(&options.program) {
            return Err(bwrap_missing(&options.program).into());
        }
        for dev in &options.devices {
            crate::config::check_device_node(dev).map_err(|reason| SandboxError::Device {
                path: dev.clone(),
                reason,
            })?;
        }
        let plan = BwrapPlan::new(policy, resources, options);
        let chdir = start_dir(policy, options).to_path_buf();
        let limit = ProcessLimit::choose(options.max_processes);
        let report = bwrap_report(policy, options, &limit);
        if let ProcessLimit::Unbounded { reason } = &limit {
            tracing::warn!("bwrap: the number of processes is not bounded: {reason}");
        }
        Ok(Self {
            plan,
            chdir,
            helper: options.helper.clone(),
            limit,
            report,
        })
    }

    /// The exact plan this sandbox applies.
    pub fn plan(&self) -> &BwrapPlan {
        &self.plan
    }

    /// The directory the command starts in.
    pub fn chdir(&self) -> &Path {
        &self.chdir
    }

    /// The plan [`crate::AnySandbox::run`] launches: [`HostSandbox::plan`]
    /// giving the command exactly `env` (inherited when `None`).
    pub fn launch_plan(&self, env: Option<&[(OsString, OsString)]>) -> BwrapPlan {
        let mut plan = self.plan.clone();
        plan.args.extend(env_args(env));
        plan.args.append(&mut plan.env_tail);
        plan
    }

    /// What bounds the processes of the confined tree.
    pub fn process_limit(&self) -> &ProcessLimit {
        &self.limit
    }
}

/// The directory the command starts in: `options.chdir` when it lies in
/// the workspace, else the workspace root.
fn start_dir<'a>(policy: &'a ResolvedPolicy, options: &'a BwrapOptions) -> &'a Path {
    options
        .chdir
        .as_deref()
        .filter(|c| c.starts_with(policy.workspace().root()))
        .unwrap_or(policy.workspace().root())
}

/// What the shared seccomp program refuses (both host backends).
pub const SECCOMP_SUMMARY: &str = "ptrace, process_vm_readv/writev, io_uring, keyctl, bpf, userfaultfd, openat2, the TIOCSTI/TIOCLINUX ioctls and every mode with a set-uid or set-gid bit (chmod family, open/creat/mknod) denied";

/// The report of what the bwrap backend enforces.
pub fn bwrap_report(
    policy: &ResolvedPolicy,
    options: &BwrapOptions,
    limit: &ProcessLimit,
) -> EnforcementReport {
    let mut report = EnforcementReport::for_policy("bwrap", policy, |access| {
        match access {
        Access::ReadOnly => (true, "re-bound read-only (--ro-bind)".into()),
        Access::Hidden => (
            true,
            "masked by an empty read-only directory (tmpfs, remounted read-only) or empty read-only file".into(),
        ),
    }
    });
    report.outside = "only host resources, read-only (/etc whole, its host secrets masked); a private /tmp, fresh /proc and /dev".into();
    report.hardening = vec![
        "new user, pid, ipc, uts and cgroup namespaces".into(),
        "all capabilities dropped; nested user namespaces disabled".into(),
        "--die-with-parent, --new-session (no TIOCSTI terminal injection)".into(),
        format!("seccomp: {SECCOMP_SUMMARY}"),
        "no descriptors inherited beyond 0, 1, 2".into(),
        if matches!(limit, ProcessLimit::Cgroup { .. }) {
            "vibesys (a subreaper) is bwrap's parent and kills what is left when bwrap exits; a watchdog beside bwrap kills the run's pids cgroup when vibesys dies (bwrap also dies with it: --die-with-parent); the pid namespace dies with the command".into()
        } else {
            "a supervisor process (a subreaper) between vibesys and bwrap kills what is left when bwrap exits and the whole tree when vibesys dies; the pid namespace dies with the command".into()
        },
        limit.describe(),
        "metadata directories (.git, .hg, .svn, .jj) are mount points: they cannot be renamed away".into(),
        "workspace paths are bound from descriptors opened beneath the workspace with no symlink on the way (--bind-fd): a swap cannot redirect a bind".into(),
        "the directories above protected paths are mount points: renaming one cannot move a protected path away".into(),
        format!(
            "/proc: every entry outside the per-process ones that a write bit in its mode makes writable for root is read-only (root inside is not root outside): {} by bwrap, {} by the plan",
            PROC_COVERED_BY_BWRAP.join(", "),
            if options.proc_read_only.is_empty() {
                "none".to_owned()
            } else {
                options
                    .proc_read_only
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        ),
        "host secrets below a granted path (/etc/shadow, sudoers, ssl/private, ssh host keys, ...) are masked".into(),
    ];
    if !options.writable.is_empty() {
        let kept: Vec<String> = options
            .writable
            .iter()
            .map(|w| w.display().to_string())
            .collect();
        report.hardening.push(format!(
            "provider state: read-only but for what its CLI must write, bound read-write from descriptors: {}",
            kept.join(", ")
        ));
    }
    for private in &options.private_files {
        report.hardening.push(format!(
            "{} is a private copy ({}) bound read-write: writes never reach the user's file",
            private.target.display(),
            private.source().display()
        ));
    }
    if !options.devices.is_empty() {
        let names: Vec<String> = options
            .devices
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        report.hardening.push(format!(
            "host devices bound over the minimal /dev (--dev-bind, each a character device reached with no symlink): {}",
            names.join(", ")
        ));
    }
    report.hardening.push(match (&options.egress, options.network) {
        (Some(door), true) => format!(
            "network: unshared; the one door out is vibesys's proxy (its socket bound in; the sandbox's loopback listener at 127.0.0.1:{}, named by HTTPS_PROXY, HTTP_PROXY and ALL_PROXY, is handed to it and accepted from outside), admitting only {}; no resolver inside",
            crate::egress::INSIDE_PORT,
            door.allow
        ),
        (None, true) => "network: shared with the host (agents reach their model API)".into(),
        (_, false) => "network: unshared (loopback only)".into(),
    });
    if let ProcessLimit::Unbounded { reason } = limit {
        report
            .gaps
            .push(format!("the number of processes is not bounded: {reason}"));
    }
    if options.network && options.egress.is_none() {
        report.gaps.push(
            "with the host network, abstract unix sockets of host daemons remain reachable; use --no-network to close them".into(),
        );
    }
    report
}

fn bwrap_missing(program: &Path) -> SandboxUnavailableError {
    SandboxUnavailableError::new(
        "bwrap",
        format!("bubblewrap was not found at {:?} or in PATH", program),
        "install it (Debian/Ubuntu: apt-get install bubblewrap; Fedora: dnf install bubblewrap), or choose VIBESYS_AGENT_SANDBOX=landlock",
    )
}

/// bwrap arguments that give the command exactly `env` (nothing when the
/// environment is inherited). A variable whose name or value is not UTF-8
/// is dropped, logged by name.
pub fn env_args(env: Option<&[(OsString, OsString)]>) -> Vec<String> {
    let Some(env) = env else {
        return Vec::new();
    };
    let mut out = vec!["--clearenv".to_owned()];
    for (k, v) in env {
        match (k.to_str(), v.to_str()) {
            (Some(k), Some(v)) => out.extend(["--setenv".to_owned(), k.to_owned(), v.to_owned()]),
            _ => tracing::warn!(
                name = %k.to_string_lossy(),
                "dropping an environment variable whose value is not UTF-8"
            ),
        }
    }
    out
}

/// Finds bwrap in `PATH` (given explicitly); the error names what to install.
pub fn find_bwrap(path_var: Option<&std::ffi::OsStr>) -> Result<PathBuf, SandboxUnavailableError> {
    crate::resources::find_program(std::ffi::OsStr::new("bwrap"), path_var)
        .ok_or_else(|| bwrap_missing(Path::new("bwrap")))
}

impl Confinement for HostSandbox {
    fn backend(&self) -> &'static str {
        "bwrap"
    }

    /// [`Helper::Launch`](crate::helper::Helper::Launch): the helper
    /// creates the descriptors, closes every other one, runs bwrap as its
    /// child under the process limit and waits for it.
    fn wrap(&self, argv: &[OsString]) -> Result<Vec<OsString>, SandboxError> {
        if argv.is_empty() {
            return Err(SandboxError::InvalidCommand("the command is empty".into()));
        }
        Ok(crate::helper::Helper::Launch {
            slots: self.plan.fds.clone(),
            limit: self.limit.clone(),
            argv: self.plan.argv(argv),
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
