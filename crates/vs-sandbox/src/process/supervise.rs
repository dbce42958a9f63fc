//! The launcher side of a confined run: vibesys stays the parent (a
//! subreaper) of the confined tree, bounds it, and kills what it leaves
//! behind; the child side is a list of raw system calls prepared in the
//! parent and made between fork and exec (async-signal-safe: no
//! allocation, no locks).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::error::SandboxError;
use crate::limits::ProcessLimit;

use super::pids::PidsCgroup;
pub use super::spawn::Exec;
use super::spawn::ExecImage;
use super::status::Exit;
use super::stdio_relay::{Relay, StdioSwap};
use super::tree::kill_leftovers;
use super::tree::{kill_listed, kill_tree, reap, reap_one};

/// Makes this process the subreaper of its descendants: orphans of the
/// confined tree are reparented to it instead of to init.
pub fn become_subreaper() -> Result<(), SandboxError> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(SandboxError::Os {
            what: "becoming the subreaper of the confined tree".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Everything the child does between fork and exec, prepared here.
#[derive(Debug, Default)]
pub struct ChildSetup {
    /// Fork once more: the launched process stays as the tree's
    /// supervisor (a subreaper that forwards signals, kills the tree when
    /// the command exits or when vibesys dies, and exits with the
    /// command's status) and its child becomes the command. Without it,
    /// the command is vibesys's child; with a pids cgroup, a watchdog
    /// then kills the cgroup if vibesys dies.
    pub supervise: bool,
    /// Start a new session (no controlling terminal).
    pub new_session: bool,
    /// Enter a user namespace mapping only our uid and gid, where the
    /// host allows one (its bounding set can then be dropped).
    pub user_namespace: bool,
    /// `RLIMIT_NPROC` (soft and hard).
    pub nproc: Option<u64>,
    /// Drop every capability: securebits locked, bounding set, ambient,
    /// then effective/permitted/inheritable after the filters.
    pub drop_capabilities: bool,
    /// A Landlock ruleset to restrict to (sets no_new_privs first).
    pub landlock: Option<OwnedFd>,
    /// Seccomp programs to install, in order (sets no_new_privs first).
    pub seccomp: Vec<Vec<libc::sock_filter>>,
    /// Mark every descriptor from 3 up close-on-exec.
    pub close_inherited: bool,
    /// An egress allow-list: take a network namespace of its own and send
    /// a listener on its loopback over this channel
    /// ([`crate::linux::netns::enter_and_listen`]).
    pub egress_channel: Option<OwnedFd>,
}

/// The stages of [`ChildSetup`], named in errors.
const STAGES: &[&str] = &[
    "setting the parent-death signal",
    "joining the run's pids cgroup",
    "starting a new session",
    "entering a user namespace",
    "writing the user namespace's id maps",
    "setting RLIMIT_NPROC",
    "dropping the capability bounding set",
    "clearing ambient capabilities",
    "setting no_new_privs",
    "applying the Landlock ruleset",
    "installing the seccomp filter",
    "dropping capabilities",
    "the parent exited during set-up",
    "forking the command from its supervisor",
    "placing the sandbox's descriptors",
    "changing to the command's directory",
    "executing the command",
    "taking a network namespace of its own (an egress allow-list under Landlock needs one: root, or an unprivileged user namespace)",
    "bringing up the loopback of the new network namespace",
    "listening for the egress proxy in the new network namespace",
];

/// Where the clone's child reports its own steps in [`STAGES`].
const SPAWN_STAGES: super::spawn::ChildStages = super::spawn::ChildStages {
    fds: 14,
    chdir: 15,
    exec: 16,
};

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// NOROOT, NO_SETUID_FIXUP and NO_CAP_AMBIENT_RAISE, each with its lock,
/// plus KEEP_CAPS_LOCKED: uid 0 regains nothing through execve.
const SECUREBITS_LOCKED: libc::c_ulong = 0b1110_1111;

/// Signals vibesys forwards to the command instead of dying of them (the
/// command, in a session of its own, does not get the terminal's).
const FORWARDED: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// The forwarded signals and SIGCHLD, blocked in this thread while the
/// command runs and taken with `sigwaitinfo`; the previous mask comes
/// back on drop (and in the child before exec).
struct Signals {
    old: libc::sigset_t,
    set: libc::sigset_t,
}

impl Signals {
    fn block() -> Result<Self, SandboxError> {
        // SAFETY: sigset_t is plain data; the calls fill sets we own and
        // change only this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for sig in FORWARDED.iter().chain(&[libc::SIGCHLD]) {
                libc::sigaddset(&mut set, *sig);
            }
            let r = libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            if r != 0 {
                return Err(SandboxError::Os {
                    what: "blocking signals to forward".into(),
                    source: std::io::Error::from_raw_os_error(r),
                });
            }
            Ok(Self { old, set })
        }
    }

    /// Waits for `child`, forwarding SIGINT, SIGTERM, SIGHUP and SIGQUIT.
    fn wait(&self, child: &mut Launched) -> std::io::Result<std::process::ExitStatus> {
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            // SAFETY: siginfo_t is plain data that sigwaitinfo fills.
            let sig = unsafe {
                let mut info: libc::siginfo_t = std::mem::zeroed();
                libc::sigwaitinfo(&self.set, &mut info)
            };
            if sig < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if sig != libc::SIGCHLD {
                // SAFETY: kill has no memory effects; the child is unreaped.
                unsafe { libc::kill(child.id() as i32, sig) };
            }
        }
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        // SAFETY: restores this thread's mask from a set we own.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// The started command: a std child (forked) or the pid of the clone's
/// child ([`super::spawn`]); vibesys reaps it either way.
#[derive(Debug)]
pub enum Launched {
    /// Started by std's `Command`.
    Std(std::process::Child),
    /// Started by [`super::spawn::spawn`].
    Raw(libc::pid_t),
}

impl Launched {
    /// The child's pid.
    pub fn id(&self) -> u32 {
        match self {
            Self::Std(c) => c.id(),
            Self::Raw(pid) => *pid as u32,
        }
    }

    /// Its status, once it has exited (reaping it).
    pub fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Self::Std(c) => c.try_wait(),
            Self::Raw(pid) => {
                let mut status = 0;
                loop {
                    // SAFETY: waitpid writes one int we own.
                    let r = unsafe { libc::waitpid(*pid, &mut status, libc::WNOHANG) };
                    if r == 0 {
                        return Ok(None);
                    }
                    if r == *pid {
                        return Ok(Some(std::process::ExitStatus::from_raw(status)));
                    }
                    let e = std::io::Error::last_os_error();
                    if e.kind() != std::io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// Why [`Prepared::spawn`] started nothing.
#[derive(Debug)]
pub enum SpawnFailure {
    /// The set-up failed (the sandbox is unavailable or the request is
    /// invalid): the command never ran.
    Confine(SandboxError),
    /// The set-up held, but the command could not be executed (not found,
    /// not executable).
    Exec {
        /// The program as named.
        program: std::ffi::OsString,
        /// Why.
        error: std::io::Error,
    },
}

/// A launch being prepared: the child side and what the parent keeps.
pub struct Prepared {
    signals: Signals,
    backend: &'static str,
    setup: ChildSetup,
    cgroup: Option<PidsCgroup>,
    procs: Option<File>,
    parent_pid: i32,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
    paths: [CString; 4],
    /// The run's cgroup and its parent's `cgroup.procs`, for a supervisor
    /// that outlives vibesys to leave and remove it.
    cgroup_paths: Option<(CString, CString)>,
    report: (std::io::PipeReader, Option<std::io::PipeWriter>),
    /// Kills the run's cgroup if vibesys dies (runs without a supervisor).
    watchdog: Option<Watchdog>,
    /// Copies between the command's standard pipes and host files.
    relay: Relay,
}

/// Moves `fd` to a number of at least 256 (close-on-exec), clear of the
/// descriptors a launch places at 3, 4, ... before this hook runs.
fn high(fd: OwnedFd) -> Result<OwnedFd, SandboxError> {
    use std::os::fd::AsFd;
    super::fd::dup_at_least(fd.as_fd(), 256).map_err(|source| SandboxError::Os {
        what: "moving a launcher descriptor".into(),
        source,
    })
}

fn cstr(s: &str) -> CString {
    CString::new(s).unwrap_or_default()
}

impl Prepared {
    /// Becomes the subreaper, creates the run's cgroup (when `limit` is
    /// one) and prepares `setup` for the child. `limit`'s rlimit variant
    /// sets `setup.nproc`.
    pub fn new(
        backend: &'static str,
        mut setup: ChildSetup,
        limit: &ProcessLimit,
    ) -> Result<Self, SandboxError> {
        become_subreaper()?;
        let signals = Signals::block()?;
        let (cgroup, procs) = match limit {
            ProcessLimit::Cgroup {
                version,
                parent,
                max,
            } => {
                let cg = PidsCgroup::create(parent, *version, *max)?;
                let procs = high(cg.join_file()?.into())?;
                (Some(cg), Some(File::from(procs)))
            }
            ProcessLimit::UserNamespaceRlimit { max } => {
                setup.nproc = Some(*max);
                (None, None)
            }
            ProcessLimit::Unbounded { .. } => (None, None),
        };
        // SAFETY: these calls take no arguments and cannot fail.
        let (pid, uid, gid) = unsafe { (libc::getpid(), libc::geteuid(), libc::getegid()) };
        let (reader, writer) = std::io::pipe().map_err(|source| SandboxError::Os {
            what: "creating the set-up status pipe".into(),
            source,
        })?;
        let writer = std::io::PipeWriter::from(high(writer.into())?);
        let cgroup_paths = cgroup.as_ref().and_then(|cg| {
            use std::os::unix::ffi::OsStrExt;
            let dir = CString::new(cg.dir().as_os_str().as_bytes()).ok()?;
            let parent = cg.dir().parent()?.join("cgroup.procs");
            Some((dir, CString::new(parent.as_os_str().as_bytes()).ok()?))
        });
        // Without a supervisor, what kills the tree when vibesys is
        // SIGKILLed is a watchdog beside the command, off its launch path.
        let watchdog = match (&cgroup, setup.supervise) {
            (Some(cg), false) => Some(Watchdog::start(cg)?),
            _ => None,
        };
        Ok(Self {
            signals,
            backend,
            setup,
            cgroup,
            procs,
            parent_pid: pid,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            paths: [
                cstr("/proc/self/setgroups"),
                cstr("/proc/self/uid_map"),
                cstr("/proc/self/gid_map"),
                cstr("/dev/tty"),
            ],
            report: (reader, Some(writer)),
            cgroup_paths,
            watchdog,
            relay: Relay::none(),
        })
    }

    /// The child's plan, its raw pointers into `self`.
    fn child_plan(&self) -> ChildPlan {
        let procs = self.procs.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        let landlock = self.setup.landlock.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        let s = &self.setup;
        ChildPlan {
            old_mask: self.signals.old,
            supervise: self.setup.supervise,
            cgroup_paths: self
                .cgroup_paths
                .as_ref()
                .map_or([std::ptr::null(); 2], |(d, p)| [d.as_ptr(), p.as_ptr()]),
            parent_pid: self.parent_pid,
            procs,
            new_session: s.new_session,
            user_namespace: s.user_namespace || s.nproc.is_some(),
            user_namespace_required: s.nproc.is_some(),
            nproc: s.nproc,
            drop_capabilities: s.drop_capabilities,
            landlock,
            seccomp: s
                .seccomp
                .iter()
                .map(|p| libc::sock_fprog {
                    len: p.len() as u16,
                    filter: p.as_ptr() as *mut libc::sock_filter,
                })
                .collect(),
            close_inherited: s.close_inherited,
            egress_channel: s.egress_channel.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            maps: [
                (self.paths[0].as_ptr(), b"deny".as_ptr(), 4),
                (
                    self.paths[1].as_ptr(),
                    self.uid_map.as_ptr(),
                    self.uid_map.len(),
                ),
                (
                    self.paths[2].as_ptr(),
                    self.gid_map.as_ptr(),
                    self.gid_map.len(),
                ),
            ],
            tty: self.paths[3].as_ptr(),
        }
    }

    /// Installs the child side on `cmd` (after any other pre_exec hook).
    fn install(&mut self, cmd: &mut Command) {
        let writer = self.report.1.take();
        let err_fd = writer.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        let plan = self.child_plan();
        // SAFETY: the closure makes raw system calls on integers and on
        // pointers into `self` (filters, maps, paths), which the caller
        // keeps alive until the spawn returns; it allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let _ = &writer;
                plan.run(true).map_err(|(stage, errno)| {
                    let mut msg = [0u8; 5];
                    msg[0] = stage;
                    msg[1..].copy_from_slice(&errno.to_ne_bytes());
                    libc::write(err_fd, msg.as_ptr().cast(), msg.len());
                    std::io::Error::from_raw_os_error(errno)
                })
            });
        }
    }

    /// Starts `exec` with the prepared set-up. Without a supervisor the
    /// child shares vibesys's memory until it executes the command
    /// ([`super::spawn`]: no copy of vibesys's address space); with one,
    /// a `fork` (the supervisor outlives the launch as its own process).
    ///
    /// A standard descriptor of vibesys that is a host file reaches the
    /// command as a pipe vibesys copies ([`super::stdio_relay`]).
    pub fn spawn(&mut self, exec: Exec<'_>) -> Result<Launched, SpawnFailure> {
        let swap = StdioSwap::begin().map_err(SpawnFailure::Confine)?;
        let launched = if self.setup.supervise {
            self.spawn_forked(exec)
        } else {
            self.spawn_shared(exec)
        };
        self.relay = swap.end();
        launched
    }

    /// [`Prepared::spawn`] from a process sharing vibesys's memory.
    fn spawn_shared(&mut self, exec: Exec<'_>) -> Result<Launched, SpawnFailure> {
        let image = ExecImage::new(exec).map_err(SpawnFailure::Confine)?;
        let writer = self.report.1.take();
        let err_fd = writer.as_ref().map_or(-1, AsRawFd::as_raw_fd);
        let plan = self.child_plan();
        let setup = || plan.run(false);
        let child = super::spawn::Child {
            image: &image,
            setup: &setup,
            mask: self.signals.old,
            report: err_fd,
            stages: SPAWN_STAGES,
        };
        let pid = super::spawn::spawn(&child);
        // The child has executed (its copy closed on exec) or exited: EOF
        // comes once ours is gone too.
        drop(writer);
        let pid = pid.map_err(SpawnFailure::Confine)?;
        let launched = Launched::Raw(pid);
        match self.read_failure() {
            None => Ok(launched),
            Some((stage, errno)) if stage == SPAWN_STAGES.exec => {
                reap_one(pid);
                Err(SpawnFailure::Exec {
                    program: image.program().to_owned(),
                    error: std::io::Error::from_raw_os_error(errno),
                })
            }
            Some(failed) => {
                reap_one(pid);
                Err(SpawnFailure::Confine(self.failure_error(failed)))
            }
        }
    }

    /// [`Prepared::spawn`] through std's `fork` and a pre-exec hook.
    fn spawn_forked(&mut self, exec: Exec<'_>) -> Result<Launched, SpawnFailure> {
        let Some((program, args)) = exec.argv.split_first() else {
            return Err(SpawnFailure::Confine(SandboxError::InvalidCommand(
                "the command is empty".into(),
            )));
        };
        let mut cmd = if exec.fds.is_empty() {
            let mut cmd = Command::new(program);
            cmd.args(args);
            cmd
        } else {
            crate::linux::fds::SlotFds::from_fds(exec.fds)
                .command(exec.argv)
                .map_err(SpawnFailure::Confine)?
        };
        if let Some(env) = exec.env {
            cmd.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
        if let Some(dir) = exec.cwd {
            cmd.current_dir(dir);
        }
        self.install(&mut cmd);
        let spawned = cmd.spawn();
        drop(cmd);
        if let Some(failed) = self.read_failure() {
            let _ = spawned.map(|mut c| c.wait());
            return Err(SpawnFailure::Confine(self.failure_error(failed)));
        }
        spawned
            .map(Launched::Std)
            .map_err(|error| SpawnFailure::Exec {
                program: program.clone(),
                error,
            })
    }

    /// After the spawn (and after the last write end is gone): the stage
    /// that failed in the child and its errno, if one did.
    fn read_failure(&mut self) -> Option<Failed> {
        let mut buf = [0u8; 5];
        let mut got = 0;
        while got < buf.len() {
            match self.report.0.read(&mut buf[got..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        if got < buf.len() {
            return None;
        }
        Some((buf[0], i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]])))
    }

    /// The error for a stage that failed in the child.
    fn failure_error(&self, (stage, errno): Failed) -> SandboxError {
        let stage = STAGES.get(stage as usize).copied().unwrap_or("set-up");
        crate::controls::SandboxUnavailableError::new(
            self.backend,
            format!(
                "{stage} failed in the launcher: {}",
                std::io::Error::from_raw_os_error(errno)
            ),
            "run `vibesys doctor` to see what this host supports",
        )
        .into()
    }

    /// Waits for the command, forwarding SIGINT, SIGTERM, SIGHUP and
    /// SIGQUIT to it (vibesys does not die of them while it runs).
    pub fn wait(&self, child: &mut Launched) -> std::io::Result<std::process::ExitStatus> {
        self.signals.wait(child)
    }

    /// After the command exited: kills everything it left behind and
    /// removes the run's cgroup.
    pub fn finish(mut self) {
        self.watchdog = None;
        self.procs = None;
        if let Some(cg) = self.cgroup.take() {
            cg.kill_and_remove();
        }
        kill_leftovers();
        std::mem::replace(&mut self.relay, Relay::none()).finish(RELAY_DRAIN_LIMIT);
    }
}

/// How long [`Prepared::finish`] waits for the standard pipes to drain
/// once the tree is gone.
const RELAY_DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The child's plan: plain data and raw pointers only.
struct ChildPlan {
    old_mask: libc::sigset_t,
    supervise: bool,
    /// The run's cgroup directory and its parent's `cgroup.procs` (null
    /// without a cgroup).
    cgroup_paths: [*const libc::c_char; 2],
    parent_pid: i32,
    procs: RawFd,
    new_session: bool,
    user_namespace: bool,
    /// `RLIMIT_NPROC` is the limit: without the namespace it would count
    /// every process of the user, so failing to enter one is an error.
    user_namespace_required: bool,
    nproc: Option<u64>,
    drop_capabilities: bool,
    landlock: RawFd,
    seccomp: Vec<libc::sock_fprog>,
    close_inherited: bool,
    egress_channel: RawFd,
    maps: [(*const libc::c_char, *const u8, usize); 3],
    tty: *const libc::c_char,
}

// SAFETY: the raw pointers are only dereferenced in the forked child, while
// the `Prepared` they point into is alive in the parent's copy of memory.
unsafe impl Send for ChildPlan {}
// SAFETY: as above; the plan is never mutated.
unsafe impl Sync for ChildPlan {}

use super::spawn::Failed;

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn check(stage: u8, r: libc::c_long) -> Result<(), Failed> {
    if r < 0 { Err((stage, errno())) } else { Ok(()) }
}

impl ChildPlan {
    /// Runs in the child between fork and exec. `restore_mask`: set the
    /// command's signal mask here (after a fork); the clone's child of
    /// [`super::spawn`] sets it itself right before `execve`.
    fn run(&self, restore_mask: bool) -> Result<(), Failed> {
        // SAFETY: raw system calls on integers and on pointers prepared by
        // the parent and valid in this copy of its memory.
        unsafe {
            // The forwarded signals and SIGCHLD stay blocked (as in vibesys)
            // until the command's branch: the supervisor must not miss the
            // command's SIGCHLD before it waits for it.
            let mut parent = self.parent_pid;
            if self.supervise {
                // This process becomes the tree's supervisor; SIGTERM when
                // vibesys dies means "kill the tree".
                check(
                    0,
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0) as libc::c_long,
                )?;
                if libc::getppid() != self.parent_pid {
                    return Err((12, libc::ESRCH));
                }
                if self.procs >= 0 {
                    check(
                        1,
                        libc::write(self.procs, b"0".as_ptr().cast(), 1) as libc::c_long,
                    )?;
                }
                let me = libc::getpid();
                let command = libc::fork();
                check(13, command as libc::c_long)?;
                if command > 0 {
                    supervise_tree(command, self.parent_pid, self.cgroup_paths);
                }
                parent = me;
            }
            if restore_mask {
                libc::pthread_sigmask(libc::SIG_SETMASK, &self.old_mask, std::ptr::null_mut());
            }
            check(
                0,
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) as libc::c_long,
            )?;
            if libc::getppid() != parent {
                return Err((12, libc::ESRCH));
            }
            if self.procs >= 0 && !self.supervise {
                check(
                    1,
                    libc::write(self.procs, b"0".as_ptr().cast(), 1) as libc::c_long,
                )?;
            }
            if self.new_session && libc::setsid() < 0 {
                // A process-group leader cannot start a session: give up
                // the controlling terminal instead.
                let fd = libc::open(self.tty, libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
                if fd >= 0 {
                    libc::ioctl(fd, libc::TIOCNOTTY);
                    libc::close(fd);
                }
            }
            let entered = self.user_namespace && libc::unshare(libc::CLONE_NEWUSER) == 0;
            if self.user_namespace_required && !entered {
                return Err((3, errno()));
            }
            if entered {
                for (i, (path, data, len)) in self.maps.iter().enumerate() {
                    let fd = libc::open(*path, libc::O_WRONLY | libc::O_CLOEXEC);
                    // setgroups is missing on old kernels; the maps are not.
                    if fd < 0 && i == 0 {
                        continue;
                    }
                    check(4, fd as libc::c_long)?;
                    let w = libc::write(fd, (*data).cast(), *len);
                    libc::close(fd);
                    check(4, w as libc::c_long)?;
                }
            }
            if self.egress_channel >= 0 {
                crate::linux::netns::enter_and_listen(
                    self.egress_channel,
                    crate::egress::INSIDE_PORT,
                )
                .map_err(|(step, e)| (17 + step, e))?;
            }
            if let Some(max) = self.nproc {
                let lim = libc::rlimit {
                    rlim_cur: max,
                    rlim_max: max,
                };
                check(5, libc::setrlimit(libc::RLIMIT_NPROC, &lim) as libc::c_long)?;
            }
            if self.drop_capabilities {
                // Needs CAP_SETPCAP: root and a fresh user namespace have
                // it; otherwise there is nothing to keep uid 0 from.
                libc::prctl(libc::PR_SET_SECUREBITS, SECUREBITS_LOCKED, 0, 0, 0);
                for cap in 0..64 {
                    if libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 {
                        match errno() {
                            libc::EINVAL => break,
                            // Without CAP_SETPCAP the set cannot shrink;
                            // no_new_privs keeps it from granting anything.
                            libc::EPERM => break,
                            e => return Err((6, e)),
                        }
                    }
                }
                check(
                    7,
                    libc::prctl(
                        libc::PR_CAP_AMBIENT,
                        libc::PR_CAP_AMBIENT_CLEAR_ALL,
                        0,
                        0,
                        0,
                    ) as libc::c_long,
                )?;
            }
            if self.landlock >= 0 || !self.seccomp.is_empty() || self.drop_capabilities {
                check(
                    8,
                    libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long,
                )?;
            }
            if self.landlock >= 0 {
                check(
                    9,
                    libc::syscall(libc::SYS_landlock_restrict_self, self.landlock, 0),
                )?;
            }
            for prog in &self.seccomp {
                check(
                    10,
                    libc::syscall(
                        libc::SYS_seccomp,
                        libc::SECCOMP_SET_MODE_FILTER,
                        0,
                        prog as *const libc::sock_fprog,
                    ),
                )?;
            }
            if self.drop_capabilities {
                let mut header = CapHeader {
                    version: LINUX_CAPABILITY_VERSION_3,
                    pid: 0,
                };
                let data = [CapData {
                    effective: 0,
                    permitted: 0,
                    inheritable: 0,
                }; 2];
                check(
                    11,
                    libc::syscall(
                        libc::SYS_capset,
                        &mut header as *mut CapHeader,
                        data.as_ptr(),
                    ),
                )?;
            }
            if self.close_inherited {
                crate::linux::fds::close_from(3);
            }
        }
        Ok(())
    }
}

/// The supervisor between vibesys and the command (see
/// [`ChildSetup::supervise`]); async-signal-safe, never returns.
///
/// # Safety
/// Only in a forked child, as the parent of `command`.
unsafe fn supervise_tree(
    command: libc::pid_t,
    vibesys: libc::pid_t,
    cgroup: [*const libc::c_char; 2],
) -> ! {
    // SAFETY: plain system calls on integers and stack memory.
    unsafe {
        // Keep nothing open but stdio: std's exec-status pipe must see EOF
        // when the command executes.
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            for fd in 3..1024 {
                libc::close(fd);
            }
        }
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        // A group of our own: a kill aimed at vibesys's process group
        // reaches vibesys, whose death (SIGTERM, above) makes us kill the
        // tree, instead of taking the supervisor down with it.
        libc::setpgid(0, 0);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        for sig in FORWARDED {
            libc::sigaddset(&mut set, sig);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        let mut status: Option<libc::c_int> = None;
        reap(command, &mut status, libc::WNOHANG);
        while status.is_none() {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigwaitinfo(&set, &mut info);
            reap(command, &mut status, libc::WNOHANG);
            if status.is_some() {
                break;
            }
            if sig > 0 && sig != libc::SIGCHLD {
                if libc::getppid() != vibesys {
                    break;
                }
                libc::kill(command, sig);
            }
        }
        // Kill what is left (orphans are ours: we are their subreaper).
        kill_tree(command, &mut status);
        // vibesys is gone: nobody else will remove the run's cgroup. Leave
        // it for its parent, then remove it (it is empty now).
        if libc::getppid() != vibesys && !cgroup[0].is_null() {
            let fd = libc::open(cgroup[1], libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
            }
            libc::rmdir(cgroup[0]);
        }
        match status.and_then(Exit::from_wait_status) {
            Some(Exit::Code(code)) => libc::_exit(code),
            Some(Exit::Signal(sig)) => {
                libc::signal(sig, libc::SIG_DFL);
                let mut one: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut one);
                libc::sigaddset(&mut one, sig);
                libc::pthread_sigmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
                let lim = libc::rlimit {
                    rlim_cur: 0,
                    rlim_max: 0,
                };
                libc::setrlimit(libc::RLIMIT_CORE, &lim);
                libc::kill(libc::getpid(), sig);
                libc::_exit(128 + sig)
            }
            _ => libc::_exit(crate::exit_codes::EXIT_CONFINE_FAILED),
        }
    }
}

/// What the watchdog needs, prepared by vibesys: plain data that stays
/// put (boxed) for the watchdog's whole life.
struct WatchdogPlan {
    /// The read end of a pipe whose only writer is vibesys: EOF means
    /// vibesys is gone.
    alive: RawFd,
    vibesys: libc::pid_t,
    /// The run cgroup's `cgroup.procs`, `cgroup.kill` (v2) and directory.
    procs: CString,
    kill: Option<CString>,
    dir: CString,
}

/// A process beside the command (a child of vibesys, in a process group
/// of its own, outside the run's cgroup) that kills everything in the
/// run's cgroup and removes it when vibesys dies without doing so
/// (SIGKILL). It shares vibesys's memory (`CLONE_VM`, like
/// `posix_spawn`): starting it copies no page tables, so it costs the
/// launch next to nothing, and while vibesys lives it only blocks in
/// `read`. vibesys kills and reaps it when the run ends.
struct Watchdog {
    pid: libc::pid_t,
    stack: *mut libc::c_void,
    /// vibesys's end of the pipe, held until the watchdog is dead.
    _alive: OwnedFd,
    plan: Box<WatchdogPlan>,
}

const WATCHDOG_STACK: usize = 256 * 1024;

impl Watchdog {
    fn start(cg: &PidsCgroup) -> Result<Self, SandboxError> {
        use std::os::unix::ffi::OsStrExt;
        let path = |p: std::path::PathBuf| {
            CString::new(p.as_os_str().as_bytes()).map_err(|_| SandboxError::Os {
                what: "naming the run's cgroup".into(),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            })
        };
        let (reader, writer) = std::io::pipe().map_err(|source| SandboxError::Os {
            what: "creating the watchdog's pipe".into(),
            source,
        })?;
        let reader = OwnedFd::from(reader);
        let plan = Box::new(WatchdogPlan {
            alive: reader.as_raw_fd(),
            // SAFETY: getpid has no arguments and cannot fail.
            vibesys: unsafe { libc::getpid() },
            procs: path(cg.dir().join("cgroup.procs"))?,
            kill: if cg.version() == 2 {
                Some(path(cg.dir().join("cgroup.kill"))?)
            } else {
                None
            },
            dir: path(cg.dir().to_path_buf())?,
        });
        let os = |what: &str| SandboxError::Os {
            what: what.into(),
            source: std::io::Error::last_os_error(),
        };
        // SAFETY: an anonymous private mapping of our own.
        let stack = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                WATCHDOG_STACK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            )
        };
        if stack == libc::MAP_FAILED {
            return Err(os("allocating the watchdog's stack"));
        }
        // SAFETY: the child runs `watchdog_main` on its own stack (the top
        // of the mapping above, which outlives it: Drop kills and reaps
        // it before unmapping), reading only `plan`, which is boxed and
        // outlives it too; it makes raw system calls only. Its descriptor
        // table is a copy (no CLONE_FILES).
        let pid = unsafe {
            libc::clone(
                watchdog_main,
                stack.cast::<u8>().add(WATCHDOG_STACK).cast(),
                libc::CLONE_VM | libc::SIGCHLD,
                std::ptr::from_ref::<WatchdogPlan>(&plan).cast_mut().cast(),
            )
        };
        if pid < 0 {
            let e = os("starting the watchdog of the run");
            // SAFETY: no child uses the mapping.
            unsafe { libc::munmap(stack, WATCHDOG_STACK) };
            return Err(e);
        }
        drop(reader);
        Ok(Self {
            pid,
            stack,
            _alive: writer.into(),
            plan,
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // SAFETY: the pid is our unreaped child; once it is reaped nothing
        // runs on the stack any more.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            while libc::waitpid(self.pid, &mut status, libc::__WALL) < 0 && errno() == libc::EINTR {
            }
            libc::munmap(self.stack, WATCHDOG_STACK);
        }
        let _ = &self.plan;
    }
}

/// The watchdog (see [`Watchdog`]): waits for vibesys to die, then kills
/// the run's cgroup and removes it. Raw system calls only.
extern "C" fn watchdog_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the boxed plan, alive for this process's life;
    // plain system calls on it and on stack memory.
    unsafe {
        let plan = &*arg.cast::<WatchdogPlan>();
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
        // Keep only the pipe: nothing of vibesys's (its terminal, its
        // output pipes, the write end) stays open through us.
        let fd = plan.alive as libc::c_uint;
        if fd > 0 {
            libc::syscall(libc::SYS_close_range, 0u32, fd - 1, 0u32);
        }
        libc::syscall(libc::SYS_close_range, fd + 1, u32::MAX, 0u32);
        // A group of our own: a kill aimed at vibesys's group spares us.
        libc::setpgid(0, 0);
        let mut byte = 0u8;
        loop {
            let n = libc::read(plan.alive, (&raw mut byte).cast(), 1);
            if n <= 0 && libc::getppid() != plan.vibesys {
                break;
            }
        }
        if let Some(kill) = &plan.kill {
            let fd = libc::open(kill.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, b"1".as_ptr().cast(), 1);
                libc::close(fd);
            }
        }
        // Bounded like the supervisor's rounds: ~5 s.
        for _ in 0..5000 {
            kill_listed(plan.procs.as_ptr());
            if libc::rmdir(plan.dir.as_ptr()) == 0 {
                break;
            }
            // The killed wait to be reaped (by whoever reaps vibesys's
            // orphans) before the cgroup can go.
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: 1_000_000,
            };
            libc::nanosleep(&pause, std::ptr::null_mut());
        }
        libc::_exit(0)
    }
}
