//! The one place that turns a confinement mode into a backend.
//!
//! Every entry point (exec, session, build, run) asks the resolver
//! ([`crate::resolve`]) for the mode, builds a [`ConfineRequest`] and
//! calls [`select`], which turns the mode into a backend
//! ([`Backend::for_mode`]). The result is an [`AnySandbox`], which implements
//! [`Confinement`] by an exhaustive match, so call sites carry no `cfg`
//! and no backend type.
//!
//! Enforcement is checked both ways: the caller states what it requires,
//! the backend reports what it enforces ([`Confinement::report`]), and a
//! required enforcement with an incomplete report is refused, unless the
//! caller chose the weaker backend explicitly (Landlock), which logs each
//! unenforced path.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::bwrap::{BwrapOptions, HostSandbox, find_bwrap};
use crate::confinement::{Confinement, EnforcementReport};
use crate::container::{ContainerBackend, ContainerPlan, ContainerSandbox};
use crate::controls::{ConfineMode, Enforcement, allow_unconfined};
use crate::egress::{EgressDoor, Entrance, EntranceKind};
use crate::error::{SandboxError, SandboxUnavailableError};
use crate::landlock::{LandlockOptions, LandlockSandbox};
use crate::policy::ResolvedPolicy;
use crate::private_file::PrivateFile;
pub use crate::resolve::Backend;
use crate::resources::{HostResources, ResourceOrigin};
use crate::seatbelt::{SeatbeltNetwork, SeatbeltSandbox};

/// A provider's state outside the project (see `vs_agent::StateBinds`):
/// the only host paths besides the project a session may write.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderState {
    /// State directories, read-only as a whole (host resources of origin
    /// `ProviderState`).
    pub read_only: Vec<PathBuf>,
    /// Entries inside them bound read-write (directories or files, each
    /// from a descriptor opened beneath its parent with no symlink), and
    /// private copies of whole state directories (Codex's, which its CLI
    /// finds through `CODEX_HOME`), read-write at their own paths.
    pub writable: Vec<PathBuf>,
    /// The user's home-level files a private copy stands in for.
    pub user_files: Vec<PathBuf>,
    /// The private copies, bound read-write at the user files' paths.
    pub private_files: Vec<PrivateFile>,
}

/// Everything a backend needs besides the mode: what the entry point
/// decided, once.
#[derive(Debug)]
pub struct ConfineRequest<'a> {
    /// The project policy, validated against its workspace.
    pub policy: &'a ResolvedPolicy,
    /// Read-only host paths.
    pub resources: HostResources,
    /// The vibesys executable (the launch helper).
    pub helper: PathBuf,
    /// Keep the host network.
    pub network: bool,
    /// Egress by allow-list (with `network`): the network is taken away
    /// and this proxy is the one door back (its entrance must be the one
    /// the backend reaches: [`Backend::egress_entrance`]).
    pub egress: Option<crate::egress::EgressDoor>,
    /// The directory the command starts in, inside the workspace (the
    /// workspace root when `None`).
    pub chdir: Option<PathBuf>,
    /// `[sandbox] max_processes`.
    pub max_processes: u64,
    /// Host device nodes to bind (only bwrap can).
    pub devices: Vec<PathBuf>,
    /// The provider's state, for sessions.
    pub state: ProviderState,
    /// The container's options, for [`ConfineMode::Docker`] (the run's
    /// pinned image, its run id, mounts): vs-docker's `DockerOptions`,
    /// handed in (this crate knows no Engine; see [`crate::container`]).
    pub docker: Option<Box<dyn ContainerBackend>>,
    /// `PATH`, where bwrap is looked up.
    pub path_var: Option<OsString>,
    /// The bwrap executable, when the caller names it (else found in
    /// `path_var`).
    pub bwrap_program: Option<PathBuf>,
}

impl<'a> ConfineRequest<'a> {
    /// A request with no provider state, devices or Docker options.
    pub fn new(policy: &'a ResolvedPolicy, resources: HostResources, helper: PathBuf) -> Self {
        Self {
            policy,
            resources,
            helper,
            network: true,
            egress: None,
            chdir: None,
            max_processes: crate::limits::DEFAULT_MAX_PROCESSES,
            devices: Vec::new(),
            state: ProviderState::default(),
            docker: None,
            path_var: None,
            bwrap_program: None,
        }
    }
}

/// One of the confinement backends, chosen by [`select`].
#[derive(Debug)]
pub enum AnySandbox {
    /// bubblewrap (Linux).
    Host(HostSandbox),
    /// Landlock (Linux), the weaker backend.
    Landlock(LandlockSandbox),
    /// Seatbelt (macOS).
    Seatbelt(SeatbeltSandbox),
    /// A Docker container from a pinned image (vs-docker's
    /// `DockerSandbox`).
    Docker(Box<dyn ContainerSandbox>),
}

/// Chooses and builds the backend for `mode`: `auto` is bubblewrap on
/// Linux and Seatbelt on macOS; `bwrap`, `landlock` and `docker` are what
/// they say. `Ok(None)` only when confinement is disabled and not
/// required (logged loudly). A required enforcement with paths the
/// backend does not enforce is refused, unless Landlock was chosen.
pub fn select(
    request: ConfineRequest<'_>,
    mode: ConfineMode,
    enforcement: Enforcement,
) -> Result<Option<AnySandbox>, SandboxError> {
    if allow_unconfined(mode, enforcement)? {
        return Ok(None);
    }
    let backend = Backend::for_mode(mode)?;
    if let Some(door) = request.egress.as_ref().filter(|_| request.network)
        && !door_is_open(door)
    {
        return Err(SandboxError::Unsupported {
            backend: "egress",
            reason: format!(
                "the egress allow-list's proxy is not running ({}): this entry point does not start it; use --no-network or drop allow_hosts here",
                match &door.entrance {
                    Entrance::Handover(socket) => format!("{} is missing", socket.display()),
                    Entrance::Loopback(_) => "no port".into(),
                }
            ),
        });
    }
    let sandbox = match plan(request, backend)? {
        Plan::Bwrap(s) => AnySandbox::Host(s),
        Plan::Landlock(s) => AnySandbox::Landlock(s),
        Plan::Seatbelt(s) => AnySandbox::Seatbelt(s),
        Plan::Docker { policy, container } => AnySandbox::Docker(container.start(policy)?),
    };
    check_enforcement(sandbox.report(), mode, enforcement)?;
    Ok(Some(sandbox))
}

/// Whether a door leads to a running proxy (a plan's door does not).
fn door_is_open(door: &EgressDoor) -> bool {
    match &door.entrance {
        Entrance::Handover(socket) => socket.exists(),
        Entrance::Loopback(port) => *port != 0,
    }
}

/// What a backend would apply, built without starting anything: the
/// host backends' sandboxes are pure plans; Docker's is the container's
/// plan (starting it is [`select`]'s).
#[derive(Debug)]
pub enum Plan<'a> {
    /// The bwrap sandbox.
    Bwrap(HostSandbox),
    /// The Landlock sandbox.
    Landlock(LandlockSandbox),
    /// The Seatbelt sandbox.
    Seatbelt(SeatbeltSandbox),
    /// The container's plan (vs-docker's `PlannedContainer`: options,
    /// mounts, masks, security options, report) and the policy it lowers.
    Docker {
        /// The policy it lowers.
        policy: &'a ResolvedPolicy,
        /// The plan, lowered once.
        container: Box<dyn ContainerPlan>,
    },
}

impl Plan<'_> {
    /// What the backend enforces.
    pub fn report(&self) -> &EnforcementReport {
        match self {
            Self::Bwrap(s) => s.report(),
            Self::Landlock(s) => s.report(),
            Self::Seatbelt(s) => s.report(),
            Self::Docker { container, .. } => container.report(),
        }
    }
}

/// Lowers the request with `backend` into the plan [`select`] would run
/// (`policy show` prints it; `select` builds its sandboxes from it).
pub fn plan(request: ConfineRequest<'_>, backend: Backend) -> Result<Plan<'_>, SandboxError> {
    check_entrance(&request, backend)?;
    match backend {
        Backend::Bwrap => bwrap(request),
        Backend::Landlock => landlock(request),
        Backend::Seatbelt => seatbelt(request),
        Backend::Docker => docker(request),
    }
}

/// Refuses a required enforcement that the backend's report does not
/// meet, unless the caller chose Landlock, whose gaps are documented and
/// logged at start-up.
pub fn check_enforcement(
    report: &EnforcementReport,
    mode: ConfineMode,
    enforcement: Enforcement,
) -> Result<(), SandboxUnavailableError> {
    if enforcement != Enforcement::Required || report.is_complete() {
        return Ok(());
    }
    if mode == ConfineMode::Landlock {
        // Chosen explicitly: the sandbox logs each path when it first wraps
        // a command.
        return Ok(());
    }
    let missing: Vec<String> = report
        .not_enforced()
        .map(|p| format!("{} ({})", p.path.display(), p.access.name()))
        .collect();
    Err(SandboxUnavailableError::new(
        report.backend,
        format!(
            "enforcement is required and the backend does not enforce {}",
            missing.join(", ")
        ),
        "use a backend that enforces every policy path (bwrap on Linux), or choose landlock explicitly to accept its documented gaps",
    ))
}

fn bwrap(request: ConfineRequest<'_>) -> Result<Plan<'_>, SandboxError> {
    let options = BwrapOptions {
        program: match request.bwrap_program {
            Some(p) => p,
            None => find_bwrap(request.path_var.as_deref())?,
        },
        network: request.network,
        egress: request.egress.filter(|_| request.network),
        chdir: request.chdir,
        helper: request.helper,
        writable: request.state.writable,
        private_files: request.state.private_files,
        max_processes: request.max_processes,
        proc_read_only: crate::proc_cover::read_only_entries(Path::new("/proc")),
        devices: request.devices,
    };
    let mut resources = request.resources;
    for dir in &request.state.read_only {
        resources.add(dir, ResourceOrigin::ProviderState);
    }
    Ok(Plan::Bwrap(HostSandbox::new(
        request.policy,
        &resources,
        &options,
    )?))
}

/// Refuses an egress door the backend cannot use (a proxy started for
/// another backend): an allow-list never silently means the open network,
/// nor a closed one that looks like a door.
fn check_entrance(request: &ConfineRequest<'_>, backend: Backend) -> Result<(), SandboxError> {
    let Some(door) = request.egress.as_ref().filter(|_| request.network) else {
        return Ok(());
    };
    let wanted = backend.egress_entrance();
    if door.entrance.kind() == wanted {
        return Ok(());
    }
    let describe = |kind: EntranceKind| match kind {
        EntranceKind::Handover => "a listener handed over the proxy's Unix socket",
        EntranceKind::Loopback => "the proxy's own port on the host loopback",
    };
    Err(SandboxError::Unsupported {
        backend: backend.name(),
        reason: format!(
            "the egress proxy was started to be reached through {}, and this backend reaches it only through {}: start it for this backend (EgressProxy::{})",
            describe(door.entrance.kind()),
            describe(wanted),
            match wanted {
                EntranceKind::Handover => "start",
                EntranceKind::Loopback => "start_loopback",
            }
        ),
    })
}

fn landlock(request: ConfineRequest<'_>) -> Result<Plan<'_>, SandboxError> {
    let unsupported = |reason: String| SandboxError::Unsupported {
        backend: "landlock",
        reason,
    };
    if !request.devices.is_empty() {
        return Err(unsupported(format!(
            "device nodes {:?} are to be bound and Landlock cannot grant a device without granting all of /dev; use --confine bwrap",
            request.devices
        )));
    }
    let state = request.state;
    // Landlock cannot bind a private copy at another path: the user's file
    // is readable and NOT writable (the CLI may then fail to save its
    // state; it cannot plant configuration).
    let mut resources = request.resources;
    for dir in &state.read_only {
        resources.add(dir, ResourceOrigin::ProviderState);
    }
    for user_file in &state.user_files {
        if state.writable.iter().any(|w| user_file.starts_with(w)) {
            return Err(unsupported(format!(
                "{} lies inside the provider's writable state directory, where Landlock cannot make it read-only; use --confine bwrap",
                user_file.display()
            )));
        }
        tracing::warn!(
            path = %user_file.display(),
            "landlock: the provider's file is read-only in this session (no private copy: Landlock cannot remap a path)"
        );
        resources.add(user_file, ResourceOrigin::ProviderState);
    }
    let options = LandlockOptions {
        network: request.network,
        helper: request.helper,
        writable: state.writable,
        max_processes: request.max_processes,
        chdir: request.chdir,
        egress: request.egress.filter(|_| request.network),
    };
    Ok(Plan::Landlock(LandlockSandbox::new(
        request.policy,
        &resources,
        &options,
    )?))
}

fn seatbelt(request: ConfineRequest<'_>) -> Result<Plan<'_>, SandboxError> {
    if !request.devices.is_empty() {
        return Err(SandboxError::Unsupported {
            backend: "seatbelt",
            reason: format!("device nodes {:?} cannot be granted", request.devices),
        });
    }
    let network = match (request.network, &request.egress) {
        (false, _) => SeatbeltNetwork::None,
        (true, None) => SeatbeltNetwork::Open,
        (true, Some(door)) => match door.loopback_port() {
            Some(port) => SeatbeltNetwork::Proxy(port),
            // check_entrance refused it already; never the open network.
            None => SeatbeltNetwork::None,
        },
    };
    let tmpdir = std::env::temp_dir();
    Ok(Plan::Seatbelt(SeatbeltSandbox::new(
        request.policy,
        &tmpdir,
        network,
        request.chdir,
    )))
}

fn docker(request: ConfineRequest<'_>) -> Result<Plan<'_>, SandboxError> {
    let Some(options) = request.docker else {
        return Err(SandboxError::Unsupported {
            backend: "docker",
            reason: "no container options were given (the pinned image and the run id)".into(),
        });
    };
    let egress = request.egress.filter(|_| request.network);
    Ok(Plan::Docker {
        policy: request.policy,
        container: options.plan(request.policy, egress)?,
    })
}

impl AnySandbox {
    /// Runs `command` confined and waits: vibesys stays the parent (a
    /// subreaper for the host backends) and whatever the command leaves
    /// behind is killed when it exits. `env` is the command's whole
    /// environment (`None`: inherited; for Docker the container's
    /// allow-list applies); it starts in the request's `chdir`. Returns
    /// the command's exit code (128+N for signal N); an error means the
    /// command did not run.
    pub fn run(
        &self,
        command: &[OsString],
        env: Option<&[(OsString, OsString)]>,
    ) -> Result<i32, SandboxError> {
        if command.first().is_none_or(|p| p.is_empty()) {
            return Err(SandboxError::InvalidCommand(
                "the command's program is empty".into(),
            ));
        }
        match self {
            Self::Host(s) => {
                // bwrap reports a program it cannot execute as its own
                // status 1: judged on the host first, as 127 or 126.
                let path_var = match env {
                    Some(env) => env
                        .iter()
                        .find(|(k, _)| k == "PATH")
                        .map(|(_, v)| v.clone()),
                    None => std::env::var_os("PATH"),
                };
                if let Some(err) =
                    crate::process::lookup::exec_error(&command[0], path_var.as_deref(), s.chdir())
                {
                    return Ok(crate::launch::exec_failure(&command[0], &err));
                }
                crate::launch::run_bwrap(&s.launch_plan(env), command, s.process_limit())
            }
            Self::Landlock(s) => {
                s.log_gaps_once();
                crate::launch::run_landlock(
                    s.plan(),
                    command,
                    s.process_limit(),
                    env,
                    Some(s.chdir()),
                )
            }
            Self::Seatbelt(s) => {
                let argv = s.wrap(command)?;
                let Some((program, args)) = argv.split_first() else {
                    return Err(SandboxError::InvalidCommand("the command is empty".into()));
                };
                let mut cmd = std::process::Command::new(program);
                cmd.args(args).current_dir(s.chdir());
                if let Some(env) = env {
                    cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
                }
                crate::launch::terminate_with_parent(&mut cmd);
                let status = cmd.status().map_err(|source| SandboxError::Os {
                    what: format!("starting {}", program.to_string_lossy()),
                    source,
                })?;
                Ok(crate::launch::exit_code(status))
            }
            Self::Docker(s) => s.run(command),
        }
    }

    fn inner(&self) -> &dyn Confinement {
        match self {
            Self::Host(s) => s,
            Self::Landlock(s) => s,
            Self::Seatbelt(s) => s,
            Self::Docker(s) => s.as_ref(),
        }
    }
}

impl Confinement for AnySandbox {
    fn backend(&self) -> &'static str {
        self.inner().backend()
    }

    fn wrap(&self, argv: &[OsString]) -> Result<Vec<OsString>, SandboxError> {
        self.inner().wrap(argv)
    }

    fn agent_path(&self, host: &Path) -> PathBuf {
        self.inner().agent_path(host)
    }

    fn report(&self) -> &EnforcementReport {
        self.inner().report()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::confinement::PathEnforcement;
    use crate::policy::Access;

    fn report(enforced: bool) -> EnforcementReport {
        EnforcementReport {
            backend: "test",
            workspace: "/w".into(),
            paths: vec![PathEnforcement {
                path: "docs".into(),
                access: Access::ReadOnly,
                enforced,
                how: String::new(),
            }],
            outside: String::new(),
            hardening: Vec::new(),
            gaps: Vec::new(),
        }
    }

    fn door(entrance: Entrance) -> EgressDoor {
        EgressDoor {
            allow: crate::egress::AllowList::parse(["pypi.org"]).unwrap(),
            entrance,
        }
    }

    /// Each backend takes only the door it can reach: Seatbelt the proxy's
    /// loopback port (lowered into its profile), the others a handed-over
    /// listener; a proxy started for the other kind is refused, naming
    /// both, never lowered as an open or silently closed network.
    #[test]
    fn each_backend_takes_only_the_door_it_reaches() {
        let dir = tempfile::tempdir().unwrap();
        let ws = crate::policy::Workspace::open(dir.path()).unwrap();
        let policy = crate::policy::ProjectPathPolicy::empty()
            .resolve(&ws)
            .unwrap();
        let request = |entrance: Entrance| {
            let mut r = ConfineRequest::new(&policy, HostResources::none(), "/bin/true".into());
            r.egress = Some(door(entrance));
            r.bwrap_program = Some("/usr/bin/bwrap".into());
            r
        };
        let Plan::Seatbelt(s) =
            plan(request(Entrance::Loopback(40000)), Backend::Seatbelt).unwrap()
        else {
            panic!("not a Seatbelt plan");
        };
        assert!(
            s.plan()
                .profile
                .contains("(allow network-outbound (remote tcp4 \"localhost:40000\"))")
        );
        let err = plan(
            request(Entrance::Handover("/run/x.sock".into())),
            Backend::Seatbelt,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("start_loopback"), "{err}");
        for backend in [Backend::Bwrap, Backend::Landlock, Backend::Docker] {
            let err = plan(request(Entrance::Loopback(40000)), backend)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("host loopback") && err.contains(backend.name()),
                "{backend:?}: {err}"
            );
        }
        // With the network off the door is moot: Seatbelt lowers none.
        let mut off = request(Entrance::Handover("/run/x.sock".into()));
        off.network = false;
        let Plan::Seatbelt(s) = plan(off, Backend::Seatbelt).unwrap() else {
            panic!("not a Seatbelt plan");
        };
        let profile = &s.plan().profile;
        assert!(
            profile.contains("(allow network* (local unix))\n")
                && !profile.contains("(allow network*)\n")
                && !profile.contains("remote tcp4"),
            "{profile}"
        );
    }

    /// A planned door (no proxy running) is refused by `select`.
    #[test]
    fn a_planned_door_is_not_open() {
        assert!(!door_is_open(&door(Entrance::Loopback(0))));
        assert!(door_is_open(&door(Entrance::Loopback(40000))));
        assert!(!door_is_open(&door(Entrance::Handover(
            "/nonexistent/egress.sock".into()
        ))));
    }

    #[test]
    fn an_incomplete_report_is_refused_unless_landlock_was_chosen() {
        let gap = report(false);
        let err = check_enforcement(&gap, ConfineMode::Auto, Enforcement::Required).unwrap_err();
        assert!(err.reason.contains("docs (read-only)"), "{err}");
        check_enforcement(&gap, ConfineMode::Landlock, Enforcement::Required).unwrap();
        check_enforcement(&gap, ConfineMode::Bwrap, Enforcement::Optional).unwrap();
        check_enforcement(&report(true), ConfineMode::Bwrap, Enforcement::Required).unwrap();
    }
}
