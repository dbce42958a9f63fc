//! Linux implementation of [`super::LocalShellRunner`]: a per-run
//! supervisor process that is a child subreaper (see the type's docs).
//!
//! Everything between `fork` and `execve`/`_exit` in this module runs in a
//! child of a multi-threaded process, so it only calls async-signal-safe
//! system calls on memory prepared before the fork: no allocation, no
//! locks, no panics.

#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use libc::{c_char, c_int, pid_t};

use super::capture::HeadTail;
use super::{CommandResult, CommandSpec, DEFAULT_SEARCH_PATH, RunnerError};
use crate::process::lookup::{EmptyEntry, is_executable_file, search_path};
use crate::process::status::Exit;
use crate::process::tree::{kill_tree, reap};

/// How long the supervisor may take to kill the tree before it is itself
/// `SIGKILL`ed (it should need milliseconds).
const SUPERVISOR_GRACE: Duration = Duration::from_secs(5);
/// How often a cancellation token is checked.
const CANCEL_TICK: Duration = Duration::from_millis(20);
/// One read from a pipe.
const READ_CHUNK: usize = 256 * 1024;
/// Pipe size asked for (best effort) so large outputs need fewer wake-ups.
const PIPE_SIZE: c_int = 1024 * 1024;

// Messages from the supervisor (and from the command before `execve`) to
// vibesys on the report pipe: a tag and a value, 8 bytes, written atomically.
const TAG_EXITED: u32 = 1;
const TAG_SIGNALED: u32 = 2;
const TAG_EXEC_FAILED: u32 = 3;
const TAG_CHDIR_FAILED: u32 = 4;
const TAG_SETUP_FAILED: u32 = 5;
const TAG_FORK_FAILED: u32 = 6;

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

fn os_err(operation: &'static str) -> RunnerError {
    RunnerError::Os {
        operation,
        source: io::Error::last_os_error(),
    }
}

fn cstring(what: &'static str, bytes: &[u8]) -> Result<CString, RunnerError> {
    CString::new(bytes).map_err(|_| RunnerError::NulByte {
        what,
        value: String::from_utf8_lossy(bytes).into_owned(),
    })
}

/// Finds the program: as given when it contains `/`, else in the command's
/// own `PATH`.
fn resolve_program(
    program: &OsStr,
    cwd: &Path,
    env: &BTreeMap<OsString, OsString>,
) -> Result<PathBuf, RunnerError> {
    if program.as_bytes().contains(&b'/') {
        // `execve` runs after `chdir`, so a relative path is relative to cwd.
        return Ok(cwd.join(program));
    }
    let search = env
        .get(OsStr::new("PATH"))
        .cloned()
        .unwrap_or_else(|| OsString::from(DEFAULT_SEARCH_PATH));
    // An empty entry would mean the working directory: never searched.
    if let Some(found) =
        search_path(program, &search, Some(cwd), EmptyEntry::Skip).find(|c| is_executable_file(c))
    {
        return Ok(found);
    }
    Err(RunnerError::ProgramNotFound {
        program: program.to_string_lossy().into_owned(),
        search_path: search.to_string_lossy().into_owned(),
    })
}

fn final_env(spec: &CommandSpec) -> Result<BTreeMap<OsString, OsString>, RunnerError> {
    let mut env: BTreeMap<OsString, OsString> = if spec.inherit_env {
        std::env::vars_os().collect()
    } else {
        BTreeMap::new()
    };
    for (name, value) in &spec.env {
        let n = name.as_bytes();
        if n.is_empty() || n.contains(&b'=') || n.contains(&0) {
            return Err(RunnerError::InvalidEnvName {
                name: name.to_string_lossy().into_owned(),
            });
        }
        env.insert(name.clone(), value.clone());
    }
    Ok(env)
}

/// A pipe whose both ends are close-on-exec and numbered 3 or above, so
/// moving them onto 0, 1 and 2 in the child can never clobber one another.
fn pipe() -> Result<(OwnedFd, OwnedFd), RunnerError> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(os_err("pipe2"));
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by us.
    let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    Ok((high_fd(r)?, high_fd(w)?))
}

fn high_fd(fd: OwnedFd) -> Result<OwnedFd, RunnerError> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl on a descriptor we own; F_DUPFD_CLOEXEC returns a new one.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(os_err("fcntl(F_DUPFD_CLOEXEC)"));
    }
    // SAFETY: `new` is a freshly duplicated descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

fn set_nonblocking(fd: &OwnedFd) -> Result<(), RunnerError> {
    // SAFETY: fcntl flag get/set on a descriptor we own.
    let ok = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(())
    } else {
        Err(os_err("fcntl(O_NONBLOCK)"))
    }
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
        // All pipe ends are >= 3 (see `pipe`), so these cannot clobber.
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

/// The supervisor as seen from vibesys. Dropping it without [`Self::wait`]
/// (an error or a panic mid-run) still kills the tree and reaps.
struct Supervisor {
    pid: pid_t,
    reaped: bool,
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
        self.signal(libc::SIGTERM);
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
        self.signal(libc::SIGKILL);
        self.wait();
    }
}

/// Blocks SIGPIPE on the calling thread while it writes to the command's
/// stdin, so a command that exits early yields EPIPE instead of killing
/// vibesys; on drop, discards a pending SIGPIPE and restores the mask.
struct SigpipeBlock {
    old: libc::sigset_t,
    was_blocked: bool,
}

impl SigpipeBlock {
    fn new() -> Self {
        // SAFETY: sigset manipulation on local values; pthread_sigmask on
        // the calling thread only.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            let was_blocked = libc::sigismember(&old, libc::SIGPIPE) == 1;
            Self { old, was_blocked }
        }
    }
}

impl Drop for SigpipeBlock {
    fn drop(&mut self) {
        if self.was_blocked {
            return;
        }
        // SAFETY: as in `new`; sigtimedwait with a zero timeout only
        // consumes an already pending SIGPIPE.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGPIPE);
            let zero = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == libc::SIGPIPE {}
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut());
        }
    }
}

enum ReadOutcome {
    Data(usize),
    Eof,
    WouldBlock,
}

fn read_some(fd: &OwnedFd, buf: &mut [u8]) -> ReadOutcome {
    loop {
        // SAFETY: reads into a live buffer of the given length.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n > 0 {
            return ReadOutcome::Data(n as usize);
        }
        if n == 0 {
            return ReadOutcome::Eof;
        }
        match errno() {
            libc::EINTR => continue,
            libc::EAGAIN => return ReadOutcome::WouldBlock,
            // Any other read error ends the stream.
            _ => return ReadOutcome::Eof,
        }
    }
}

/// One output stream being collected.
struct Stream {
    fd: Option<OwnedFd>,
    capture: HeadTail,
}

impl Stream {
    /// Reads what is available (a bounded number of chunks per wake-up, so
    /// the other stream is served too).
    fn pump(&mut self, buf: &mut [u8]) {
        for _ in 0..16 {
            let Some(fd) = &self.fd else { return };
            match read_some(fd, buf) {
                ReadOutcome::Data(n) => self.capture.push(buf.get(..n).unwrap_or_default()),
                ReadOutcome::Eof => self.fd = None,
                ReadOutcome::WouldBlock => return,
            }
        }
    }
}

/// What the report pipe said.
#[derive(Default)]
struct Report {
    exited: Option<i32>,
    signaled: Option<i32>,
    exec_failed: Option<i32>,
    chdir_failed: Option<i32>,
    setup_failed: Option<i32>,
    fork_failed: Option<i32>,
}

impl Report {
    fn parse(bytes: &[u8]) -> Self {
        let mut r = Self::default();
        for msg in bytes.chunks_exact(8) {
            let (t, v) = msg.split_at(4);
            let (Ok(t), Ok(v)) = (<[u8; 4]>::try_from(t), <[u8; 4]>::try_from(v)) else {
                continue;
            };
            let value = i32::from_ne_bytes(v);
            let slot = match u32::from_ne_bytes(t) {
                TAG_EXITED => &mut r.exited,
                TAG_SIGNALED => &mut r.signaled,
                TAG_EXEC_FAILED => &mut r.exec_failed,
                TAG_CHDIR_FAILED => &mut r.chdir_failed,
                TAG_SETUP_FAILED => &mut r.setup_failed,
                TAG_FORK_FAILED => &mut r.fork_failed,
                _ => continue,
            };
            *slot = Some(value);
        }
        r
    }
}

fn min_opt(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The command as `execve` takes it, allocated before the fork (the
/// child may not allocate): the program resolved in `PATH`, its arguments,
/// environment and working directory as C strings.
struct ExecImage {
    program_path: PathBuf,
    program: CString,
    cwd: CString,
    argv: Vec<CString>,
    envp: Vec<CString>,
}

impl ExecImage {
    fn new(spec: &CommandSpec) -> Result<Self, RunnerError> {
        let program_arg = spec.argv.first().ok_or(RunnerError::EmptyCommand)?;
        let cwd_meta = std::fs::metadata(&spec.cwd).and_then(|m| {
            if m.is_dir() {
                Ok(m)
            } else {
                Err(io::Error::from(io::ErrorKind::NotADirectory))
            }
        });
        if let Err(source) = cwd_meta {
            return Err(RunnerError::WorkingDirectory {
                path: spec.cwd.clone(),
                source,
            });
        }
        let env = final_env(spec)?;
        let program_path = resolve_program(program_arg, &spec.cwd, &env)?;
        let program = cstring("program path", program_path.as_os_str().as_bytes())?;
        let cwd = cstring("working directory", spec.cwd.as_os_str().as_bytes())?;
        let argv = spec
            .argv
            .iter()
            .map(|a| cstring("argument", a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let envp = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.as_bytes().to_vec();
                kv.push(b'=');
                kv.extend_from_slice(v.as_bytes());
                cstring("environment variable", &kv)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            program_path,
            program,
            cwd,
            argv,
            envp,
        })
    }

    /// NULL-terminated pointer arrays into `self` (valid while it lives).
    fn pointers(&self) -> (Vec<*const c_char>, Vec<*const c_char>) {
        let mut argv: Vec<*const c_char> = self.argv.iter().map(|a| a.as_ptr()).collect();
        argv.push(std::ptr::null());
        let mut envp: Vec<*const c_char> = self.envp.iter().map(|e| e.as_ptr()).collect();
        envp.push(std::ptr::null());
        (argv, envp)
    }
}

/// What the event loop waits for next.
struct Timers {
    now: Instant,
    /// The command's timeout, while nothing was signalled yet.
    deadline: Option<Instant>,
    /// Whether a cancellation token is polled.
    cancel_tick: bool,
    /// When SIGKILL follows the SIGTERM already sent.
    kill_at: Option<Instant>,
    /// When to stop draining the pipes after the supervisor ended.
    drain_until: Option<Instant>,
}

/// How long `poll` sleeps (-1: until a descriptor is ready), rounded up so
/// the loop does not spin just before a deadline.
fn poll_timeout(t: Timers) -> c_int {
    let until = |at: Option<Instant>| at.map(|a| a.saturating_duration_since(t.now));
    let mut wait = min_opt(until(t.deadline), t.cancel_tick.then_some(CANCEL_TICK));
    wait = min_opt(wait, until(t.kill_at));
    wait = min_opt(wait, until(t.drain_until));
    match wait {
        None => -1,
        Some(w) => c_int::try_from(w.as_millis().saturating_add(1)).unwrap_or(c_int::MAX),
    }
}

/// The command's exit code and signal from the supervisor's report, or why
/// it never ran.
fn outcome(
    report: &Report,
    supervisor_status: Option<c_int>,
    program: &Path,
    cwd: &Path,
) -> Result<(i32, Option<i32>), RunnerError> {
    if let Some(e) = report.exec_failed {
        return Err(RunnerError::Exec {
            program: program.to_path_buf(),
            source: io::Error::from_raw_os_error(e),
        });
    }
    if let Some(e) = report.chdir_failed {
        return Err(RunnerError::WorkingDirectory {
            path: cwd.to_path_buf(),
            source: io::Error::from_raw_os_error(e),
        });
    }
    if let Some(e) = report.setup_failed {
        return Err(RunnerError::Os {
            operation: "supervisor setup",
            source: io::Error::from_raw_os_error(e),
        });
    }
    if let Some(e) = report.fork_failed {
        return Err(RunnerError::Os {
            operation: "fork of the command",
            source: io::Error::from_raw_os_error(e),
        });
    }
    let exit = match (report.exited, report.signaled) {
        (Some(code), _) => Some(Exit::Code(code)),
        (None, Some(sig)) => Some(Exit::Signal(sig)),
        (None, None) => None,
    };
    match exit {
        Some(exit) => Ok((exit.code(), exit.signal())),
        None => Err(RunnerError::SupervisorLost {
            detail: match supervisor_status {
                Some(st) if libc::WIFSIGNALED(st) => {
                    format!("killed by signal {}", libc::WTERMSIG(st))
                }
                Some(st) => format!("exit status {}", libc::WEXITSTATUS(st)),
                None => "reaped elsewhere".to_owned(),
            },
        }),
    }
}

pub(super) fn run(
    spec: &CommandSpec,
    output_cap: usize,
    drain_grace: Duration,
) -> Result<CommandResult, RunnerError> {
    let image = ExecImage::new(spec)?;
    let (argv_ptrs, envp_ptrs) = image.pointers();

    let (stdin_r, stdin_w) = match &spec.stdin {
        Some(_) => {
            let (r, w) = pipe()?;
            (r, Some(w))
        }
        None => {
            let f = std::fs::File::open("/dev/null").map_err(|source| RunnerError::Os {
                operation: "open /dev/null",
                source,
            })?;
            (high_fd(OwnedFd::from(f))?, None)
        }
    };
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (report_r, report_w) = pipe()?;
    for fd in [&out_r, &err_r] {
        // SAFETY: fcntl on our pipe; failure only costs throughput.
        unsafe {
            libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE);
        }
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

    let start = Instant::now();
    // SAFETY: the child only runs `supervise`, which is async-signal-safe
    // and never returns.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(os_err("fork"));
    }
    if pid == 0 {
        // SAFETY: we are the freshly forked child; `plan` points into memory
        // fork copied.
        unsafe { supervise(&plan) }
    }
    let mut supervisor = Supervisor { pid, reaped: false };
    drop((stdin_r, out_w, err_w, report_w));

    let mut stdin = stdin_w;
    for fd in [&out_r, &err_r, &report_r]
        .into_iter()
        .chain(stdin.as_ref())
    {
        set_nonblocking(fd)?;
    }
    let stdin_data: &[u8] = spec.stdin.as_deref().unwrap_or_default();
    let mut stdin_off = 0usize;
    let _sigpipe = stdin.as_ref().map(|_| SigpipeBlock::new());

    let mut out = Stream {
        fd: Some(out_r),
        capture: HeadTail::new(output_cap),
    };
    let mut err = Stream {
        fd: Some(err_r),
        capture: HeadTail::new(output_cap),
    };
    let mut report_fd = Some(report_r);
    let mut report_bytes: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; READ_CHUNK];

    let deadline = spec.timeout.map(|t| start + t);
    let mut timed_out = false;
    let mut cancelled = false;
    let mut kill_sent: Option<Instant> = None;
    let mut supervisor_killed = false;
    let mut supervisor_done: Option<Instant> = None;

    loop {
        let now = Instant::now();
        if let Some(done) = supervisor_done {
            if out.fd.is_none() && err.fd.is_none() {
                break;
            }
            if now >= done + drain_grace {
                // A stray process still holds a pipe: stop waiting for it.
                break;
            }
            // The command is gone: nobody reads stdin any more.
            stdin = None;
        }
        if kill_sent.is_none() && supervisor_done.is_none() {
            if spec.cancel.as_ref().is_some_and(|c| c.is_cancelled()) {
                cancelled = true;
            } else if deadline.is_some_and(|d| now >= d) {
                timed_out = true;
            }
            if cancelled || timed_out {
                supervisor.signal(libc::SIGTERM);
                kill_sent = Some(now);
            }
        }
        if let Some(sent) = kill_sent
            && supervisor_done.is_none()
            && !supervisor_killed
            && now >= sent + SUPERVISOR_GRACE
        {
            supervisor.signal(libc::SIGKILL);
            supervisor_killed = true;
        }

        let timeout_ms = poll_timeout(Timers {
            now,
            deadline: (kill_sent.is_none() && supervisor_done.is_none())
                .then_some(deadline)
                .flatten(),
            cancel_tick: kill_sent.is_none() && supervisor_done.is_none() && spec.cancel.is_some(),
            kill_at: kill_sent
                .filter(|_| supervisor_done.is_none() && !supervisor_killed)
                .map(|sent| sent + SUPERVISOR_GRACE),
            drain_until: supervisor_done.map(|done| done + drain_grace),
        });

        let mut fds: Vec<libc::pollfd> = Vec::with_capacity(4);
        let mut slots = [usize::MAX; 4];
        let entries = [
            (out.fd.as_ref(), libc::POLLIN),
            (err.fd.as_ref(), libc::POLLIN),
            (report_fd.as_ref(), libc::POLLIN),
            (stdin.as_ref(), libc::POLLOUT),
        ];
        for (i, (fd, events)) in entries.into_iter().enumerate() {
            if let Some(fd) = fd {
                slots[i] = fds.len();
                fds.push(libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events,
                    revents: 0,
                });
            }
        }
        // SAFETY: `fds` is a live array of `fds.len()` pollfd structs.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) };
        if n < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return Err(os_err("poll"));
        }
        let ready = |i: usize| fds.get(slots[i]).is_some_and(|p| p.revents != 0);
        let (out_ready, err_ready, report_ready, stdin_ready) =
            (ready(0), ready(1), ready(2), ready(3));
        if out_ready {
            out.pump(&mut buf);
        }
        if err_ready {
            err.pump(&mut buf);
        }
        if stdin_ready && let Some(fd) = &stdin {
            let rest = stdin_data.get(stdin_off..).unwrap_or_default();
            // SAFETY: writes from a live slice of the given length.
            let w = unsafe { libc::write(fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            if w >= 0 {
                stdin_off += w as usize;
                if stdin_off >= stdin_data.len() {
                    stdin = None;
                }
            } else if !matches!(errno(), libc::EINTR | libc::EAGAIN) {
                // EPIPE: the command stopped reading; that is its business.
                stdin = None;
            }
        }
        if report_ready && let Some(fd) = &report_fd {
            let mut small = [0u8; 64];
            match read_some(fd, &mut small) {
                ReadOutcome::Data(n) => {
                    // At most a handful of 8-byte messages ever arrive.
                    if report_bytes.len() < 1024 {
                        report_bytes.extend_from_slice(small.get(..n).unwrap_or_default());
                    }
                }
                ReadOutcome::Eof => {
                    report_fd = None;
                    supervisor_done = Some(Instant::now());
                }
                ReadOutcome::WouldBlock => {}
            }
        }
    }
    let duration = start.elapsed();
    let supervisor_status = supervisor.wait();

    let (exit_code, signal) = outcome(
        &Report::parse(&report_bytes),
        supervisor_status,
        &image.program_path,
        &spec.cwd,
    )?;
    Ok(CommandResult {
        exit_code,
        signal,
        timed_out,
        cancelled,
        duration,
        stdout: out.capture.finish(),
        stderr: err.capture.finish(),
    })
}
