//! A command run under a supervisor of its own, its standard streams pipes
//! to vibesys: what [`crate::LocalShellRunner`] starts on Linux.
//!
//! Each run forks a small supervisor that marks itself a child subreaper
//! and forks the command in a process group of its own, so every
//! descendant (including ones that called `setsid` or double-forked) stays
//! its child. `SIGTERM` to the supervisor (a timeout, a cancellation, or
//! vibesys's death through `PR_SET_PDEATHSIG`) makes it kill the command's
//! group and then, round after round, every child it has, until none is
//! left ([`super::tree::kill_tree`]); it does the same when the command
//! exits on its own. It reports how the command ended, or why it never
//! ran, on a pipe: 8-byte messages (a tag, a value), written atomically.
//!
//! vibesys is not made a subreaper itself: it would adopt orphans of every
//! concurrent run (and of unrelated children) into one process, with no
//! way to tell them apart.
//!
//! Everything between `fork` and `execve`/`_exit` here runs in a child of
//! a multi-threaded process, so it only calls async-signal-safe system
//! calls on memory prepared before the fork: no allocation, no locks, no
//! panics.
#![allow(unsafe_code)]

use std::ffi::{CString, c_char};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use libc::{c_int, pid_t};

use super::fd::{self, ReadOutcome};
use super::status::Exit;
use super::tree::{kill_tree, reap};

/// How long the supervisor may take to kill the tree, after `SIGTERM`,
/// before it is itself `SIGKILL`ed (it should need milliseconds).
pub(crate) const SUPERVISOR_GRACE: Duration = Duration::from_secs(5);
/// Pipe size asked for (best effort) so large outputs need fewer wake-ups.
const PIPE_SIZE: c_int = 1024 * 1024;

const TAG_EXITED: u32 = 1;
const TAG_SIGNALED: u32 = 2;
const TAG_EXEC_FAILED: u32 = 3;
const TAG_CHDIR_FAILED: u32 = 4;
const TAG_SETUP_FAILED: u32 = 5;
const TAG_FORK_FAILED: u32 = 6;

/// A system call needed to start or follow the run failed.
#[derive(Debug, thiserror::Error)]
#[error("{operation} failed: {source}")]
pub(crate) struct OsFailure {
    /// What was being done (a system call's name).
    pub operation: &'static str,
    /// The error.
    #[source]
    pub source: io::Error,
}

fn failed(operation: &'static str) -> impl FnOnce(io::Error) -> OsFailure {
    move |source| OsFailure { operation, source }
}

/// The command as `execve` takes it, prepared before the fork (the child
/// may not allocate): the resolved program, its arguments and whole
/// environment (`NAME=value`), and its working directory.
pub(crate) struct ExecImage {
    program: CString,
    cwd: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl ExecImage {
    /// An image from parts the caller checked.
    pub(crate) fn new(
        program: CString,
        argv: Vec<CString>,
        envp: Vec<CString>,
        cwd: CString,
    ) -> Self {
        Self {
            program,
            cwd,
            argv,
            envp,
        }
    }

    /// NULL-terminated pointer arrays into `self` (valid while it lives).
    fn pointers(&self) -> (Vec<*const c_char>, Vec<*const c_char>) {
        let nul_terminated = |v: &[CString]| {
            let mut p: Vec<*const c_char> = v.iter().map(|a| a.as_ptr()).collect();
            p.push(std::ptr::null());
            p
        };
        (nul_terminated(&self.argv), nul_terminated(&self.envp))
    }
}

/// Everything the forked processes need, prepared before `fork`.
struct ChildPlan<'a> {
    parent_pid: pid_t,
    program: &'a CString,
    argv: &'a [*const c_char],
    envp: &'a [*const c_char],
    cwd: &'a CString,
    stdin_r: RawFd,
    out_w: RawFd,
    err_w: RawFd,
    report_w: RawFd,
    /// vibesys's ends of the pipes, closed in the supervisor.
    parent_ends: [RawFd; 4],
}

/// A started run: vibesys's ends of the command's pipes (non-blocking)
/// and its supervisor.
pub(crate) struct PipedRun {
    /// The command's stdin, when bytes are to be written to it.
    pub stdin: Option<OwnedFd>,
    /// The command's stdout.
    pub stdout: OwnedFd,
    /// The command's stderr.
    pub stderr: OwnedFd,
    /// Its supervisor.
    pub supervisor: Supervisor,
}

/// Starts `image` under a supervisor. With `pipe_stdin`, the command's
/// stdin is a pipe ([`PipedRun::stdin`]); without, `/dev/null`.
pub(crate) fn spawn(image: &ExecImage, pipe_stdin: bool) -> Result<PipedRun, OsFailure> {
    let (argv_ptrs, envp_ptrs) = image.pointers();
    let (stdin_r, stdin_w) = if pipe_stdin {
        let (r, w) = fd::pipe().map_err(failed("pipe2"))?;
        (r, Some(w))
    } else {
        let f = std::fs::File::open("/dev/null").map_err(failed("open /dev/null"))?;
        let r = fd::clear_of_stdio(OwnedFd::from(f)).map_err(failed("fcntl(F_DUPFD_CLOEXEC)"))?;
        (r, None)
    };
    let (out_r, out_w) = fd::pipe().map_err(failed("pipe2"))?;
    let (err_r, err_w) = fd::pipe().map_err(failed("pipe2"))?;
    let (report_r, report_w) = fd::pipe().map_err(failed("pipe2"))?;
    for r in [&out_r, &err_r] {
        fd::grow_pipe(r.as_fd(), PIPE_SIZE);
    }

    let plan = ChildPlan {
        // SAFETY: getpid has no preconditions.
        parent_pid: unsafe { libc::getpid() },
        program: &image.program,
        argv: &argv_ptrs,
        envp: &envp_ptrs,
        cwd: &image.cwd,
        stdin_r: stdin_r.as_raw_fd(),
        out_w: out_w.as_raw_fd(),
        err_w: err_w.as_raw_fd(),
        report_w: report_w.as_raw_fd(),
        parent_ends: [
            stdin_w.as_ref().map_or(-1, AsRawFd::as_raw_fd),
            out_r.as_raw_fd(),
            err_r.as_raw_fd(),
            report_r.as_raw_fd(),
        ],
    };

    // SAFETY: the child only runs `supervise`, which is async-signal-safe
    // and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(failed("fork")(io::Error::last_os_error()));
    }
    if pid == 0 {
        // SAFETY: we are the freshly forked child; `plan` points into memory
        // fork copied.
        unsafe { supervise(&plan) }
    }
    let supervisor = Supervisor {
        pid,
        reaped: false,
        report: Some(report_r),
        report_bytes: Vec::new(),
    };
    drop((stdin_r, out_w, err_w, report_w));
    for r in [&out_r, &err_r]
        .into_iter()
        .chain(supervisor.report.as_ref())
        .chain(stdin_w.as_ref())
    {
        fd::set_nonblocking(r.as_fd()).map_err(failed("fcntl(O_NONBLOCK)"))?;
    }
    Ok(PipedRun {
        stdin: stdin_w,
        stdout: out_r,
        stderr: err_r,
        supervisor,
    })
}

fn errno() -> c_int {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Writes one report message. Async-signal-safe.
fn report(fd: RawFd, tag: u32, value: i32) {
    let mut msg = [0u8; 8];
    let (t, v) = msg.split_at_mut(4);
    t.copy_from_slice(&tag.to_ne_bytes());
    v.copy_from_slice(&value.to_ne_bytes());
    // SAFETY: writes 8 bytes from a live stack buffer; failure is ignored
    // because nobody is left to tell.
    unsafe {
        libc::write(fd, msg.as_ptr().cast(), msg.len());
    }
}

/// The supervisor: runs in the first forked process, never returns.
///
/// # Safety
/// Must be called only in a freshly forked child; every pointer in `plan`
/// must be valid (they point into the parent's memory, copied by fork).
unsafe fn supervise(plan: &ChildPlan<'_>) -> ! {
    // SAFETY: only async-signal-safe calls on memory prepared before fork.
    unsafe {
        // If vibesys dies, SIGTERM us, which means "kill the tree".
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong);
        if libc::getppid() != plan.parent_pid {
            libc::_exit(1);
        }
        if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong) != 0 {
            report(plan.report_w, TAG_SETUP_FAILED, errno());
            libc::_exit(1);
        }
        // Our own group: terminal signals aimed at vibesys's group do not
        // reach the supervisor or the command.
        libc::setpgid(0, 0);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        // SIGCHLD ignored would make the kernel auto-reap our children.
        libc::signal(libc::SIGCHLD, libc::SIG_DFL);
        for fd in plan.parent_ends {
            if fd >= 0 {
                libc::close(fd);
            }
        }

        let command = libc::fork();
        if command < 0 {
            report(plan.report_w, TAG_FORK_FAILED, errno());
            libc::_exit(1);
        }
        if command == 0 {
            exec_command(plan);
        }
        // Also from here, so the group exists before we may need to kill it.
        libc::setpgid(command, command);
        libc::close(plan.stdin_r);
        libc::close(plan.out_w);
        libc::close(plan.err_w);

        let mut status: Option<c_int> = None;
        loop {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let sig = libc::sigwaitinfo(&set, &mut info);
            reap(command, &mut status, libc::WNOHANG);
            // Kill on request, and when the command is gone (leftovers).
            if sig == libc::SIGTERM || status.is_some() {
                break;
            }
        }
        if status.is_none() {
            // The command is not reaped, so its pid (and group id) is
            // still ours.
            libc::kill(-command, libc::SIGKILL);
        }
        kill_tree(command, &mut status);
        match status.and_then(Exit::from_wait_status) {
            Some(Exit::Code(code)) => report(plan.report_w, TAG_EXITED, code),
            Some(Exit::Signal(sig)) => report(plan.report_w, TAG_SIGNALED, sig),
            None => {}
        }
        libc::_exit(0)
    }
}

/// The command process: set up stdio, cwd, signals, then `execve`.
///
/// # Safety
/// As [`supervise`].
unsafe fn exec_command(plan: &ChildPlan<'_>) -> ! {
    // SAFETY: only async-signal-safe calls on memory prepared before fork.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
        // Rust programs ignore SIGPIPE; ignored dispositions survive execve.
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::setpgid(0, 0);
        // All pipe ends are >= 3 (see `fd::pipe`), so these cannot clobber.
        if libc::dup2(plan.stdin_r, 0) < 0
            || libc::dup2(plan.out_w, 1) < 0
            || libc::dup2(plan.err_w, 2) < 0
        {
            report(plan.report_w, TAG_SETUP_FAILED, errno());
            libc::_exit(127);
        }
        // Nothing vibesys opened leaks into the command (best effort: needs
        // Linux 5.11; descriptors opened by std are close-on-exec anyway).
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
        if libc::chdir(plan.cwd.as_ptr()) != 0 {
            report(plan.report_w, TAG_CHDIR_FAILED, errno());
            libc::_exit(127);
        }
        libc::execve(
            plan.program.as_ptr(),
            plan.argv.as_ptr(),
            plan.envp.as_ptr(),
        );
        report(plan.report_w, TAG_EXEC_FAILED, errno());
        libc::_exit(127)
    }
}

/// How a piped run ended, from its supervisor's report.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The command ran and ended so.
    Ran(Exit),
    /// `execve` of the program failed.
    ExecFailed(io::Error),
    /// The working directory could not be entered.
    ChdirFailed(io::Error),
    /// The supervisor or the command could not set itself up.
    SetupFailed(io::Error),
    /// The supervisor could not fork the command.
    ForkFailed(io::Error),
    /// The supervisor ended without a report; how it ended.
    SupervisorLost(String),
}

/// The supervisor as seen from vibesys. Dropping it without
/// [`Self::finish`] (an error or a panic mid-run) still kills the tree
/// and reaps.
pub(crate) struct Supervisor {
    pid: pid_t,
    reaped: bool,
    /// The report pipe, until it ends (the supervisor exited).
    report: Option<OwnedFd>,
    report_bytes: Vec<u8>,
}

impl Supervisor {
    fn signal(&self, sig: c_int) {
        if !self.reaped {
            // SAFETY: plain kill(2) on our unreaped child, whose pid cannot
            // have been reused.
            unsafe {
                libc::kill(self.pid, sig);
            }
        }
    }

    /// Asks the supervisor to kill the command's whole tree.
    pub(crate) fn kill_tree(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Kills the supervisor itself (when it did not end within
    /// [`SUPERVISOR_GRACE`] of [`Self::kill_tree`]).
    pub(crate) fn kill(&self) {
        self.signal(libc::SIGKILL);
    }

    /// The report pipe to wait on, until it ended.
    pub(crate) fn report_fd(&self) -> Option<BorrowedFd<'_>> {
        self.report.as_ref().map(AsFd::as_fd)
    }

    /// Reads what the report pipe has; true once it ended (the supervisor
    /// is gone).
    pub(crate) fn read_report(&mut self) -> bool {
        let Some(fd) = &self.report else { return true };
        let mut small = [0u8; 64];
        match fd::read_some(fd.as_fd(), &mut small) {
            ReadOutcome::Data(n) => {
                // At most a handful of 8-byte messages ever arrive.
                if self.report_bytes.len() < 1024 {
                    self.report_bytes
                        .extend_from_slice(small.get(..n).unwrap_or_default());
                }
                false
            }
            ReadOutcome::Eof => {
                self.report = None;
                true
            }
            ReadOutcome::WouldBlock => false,
        }
    }

    /// Waits for the supervisor to exit and reads how the run ended.
    pub(crate) fn finish(mut self) -> Ended {
        let status = self.wait();
        read_report(&self.report_bytes, status)
    }

    /// Blocks until the supervisor exits; returns its wait status.
    fn wait(&mut self) -> Option<c_int> {
        loop {
            let mut st: c_int = 0;
            // SAFETY: waitpid on our own child with a valid out-pointer.
            let r = unsafe { libc::waitpid(self.pid, &mut st, 0) };
            if r == self.pid {
                self.reaped = true;
                return Some(st);
            }
            if r < 0 && errno() == libc::EINTR {
                continue;
            }
            // ECHILD: someone else reaped it (SIGCHLD ignored by the host).
            self.reaped = true;
            return None;
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        self.kill_tree();
        let until = Instant::now() + SUPERVISOR_GRACE;
        while Instant::now() < until {
            let mut st: c_int = 0;
            // SAFETY: non-blocking waitpid on our own child.
            let r = unsafe { libc::waitpid(self.pid, &mut st, libc::WNOHANG) };
            if r != 0 {
                self.reaped = true;
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.kill();
        self.wait();
    }
}

/// How the run ended, from the report pipe's messages; `supervisor_status`
/// is the supervisor's own wait status (`None`: reaped elsewhere). A
/// failure to start the command outranks any exit status.
fn read_report(bytes: &[u8], supervisor_status: Option<c_int>) -> Ended {
    // The value of each tag (1 to 6) last sent.
    let mut said: [Option<i32>; 7] = [None; 7];
    for msg in bytes.chunks_exact(8) {
        let (t, v) = msg.split_at(4);
        let (Ok(t), Ok(v)) = (<[u8; 4]>::try_from(t), <[u8; 4]>::try_from(v)) else {
            continue;
        };
        if let Some(slot) = said.get_mut(u32::from_ne_bytes(t) as usize) {
            *slot = Some(i32::from_ne_bytes(v));
        }
    }
    let tag = |t: u32| said.get(t as usize).copied().flatten();
    let os = io::Error::from_raw_os_error;
    if let Some(e) = tag(TAG_EXEC_FAILED) {
        return Ended::ExecFailed(os(e));
    }
    if let Some(e) = tag(TAG_CHDIR_FAILED) {
        return Ended::ChdirFailed(os(e));
    }
    if let Some(e) = tag(TAG_SETUP_FAILED) {
        return Ended::SetupFailed(os(e));
    }
    if let Some(e) = tag(TAG_FORK_FAILED) {
        return Ended::ForkFailed(os(e));
    }
    match (tag(TAG_EXITED), tag(TAG_SIGNALED)) {
        (Some(code), _) => Ended::Ran(Exit::Code(code)),
        (None, Some(sig)) => Ended::Ran(Exit::Signal(sig)),
        (None, None) => {
            Ended::SupervisorLost(match supervisor_status.and_then(Exit::from_wait_status) {
                Some(Exit::Signal(sig)) => format!("killed by signal {sig}"),
                Some(Exit::Code(code)) => format!("exit status {code}"),
                None => "reaped elsewhere".to_owned(),
            })
        }
    }
}
