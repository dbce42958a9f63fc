//! Starting the confined command without copying vibesys's address space.
//!
//! A `fork` copies every page-table entry of vibesys (a 14 MB binary and
//! its heap) and then both processes take copy-on-write faults on every
//! page they write, only for the child to throw it all away at `execve`.
//! The child here shares vibesys's memory instead (`clone` with
//! `CLONE_VM | CLONE_VFORK`, as glibc's `posix_spawn` does), runs on a
//! stack of its own, makes the prepared set-up's raw system calls and
//! executes the command; vibesys is suspended until then, so the child is
//! the only one touching the shared memory, and everything it reads was
//! allocated before the clone.
//!
//! The child starts with every signal blocked and resets every caught
//! signal (and std's ignored `SIGPIPE`) to its default before it unblocks
//! any: no handler of vibesys ever runs on the shared memory.
#![allow(unsafe_code)]

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::lookup::{EXECVP_DEFAULT_PATH, EmptyEntry, search_path};
use crate::error::SandboxError;
use crate::fd_slot::FIRST_SLOT_FD;

/// The command as a confined launch starts it.
#[derive(Debug)]
pub struct Exec<'a> {
    /// The program (looked up in `PATH` when it has no `/`) and its
    /// arguments.
    pub argv: &'a [OsString],
    /// The command's whole environment; `None` inherits vibesys's.
    pub env: Option<&'a [(OsString, OsString)]>,
    /// The directory it starts in; `None` keeps vibesys's.
    pub cwd: Option<&'a Path>,
    /// Descriptors placed at 3, 4, ... in the child; every other inherited
    /// descriptor above stderr is closed (bwrap's descriptor slots). With
    /// none, inherited descriptors are left as they are (a backend that
    /// wants them closed says so in its set-up).
    pub fds: Vec<OwnedFd>,
}

impl Exec<'_> {
    /// The command's `PATH`: its environment's, else vibesys's.
    fn path_var(&self) -> Option<OsString> {
        match self.env {
            Some(env) => env
                .iter()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| v.clone()),
            None => std::env::var_os("PATH"),
        }
    }
}

fn cstring(bytes: &[u8]) -> Result<CString, SandboxError> {
    CString::new(bytes).map_err(|_| {
        SandboxError::InvalidCommand(format!(
            "{:?} contains a NUL byte",
            String::from_utf8_lossy(bytes)
        ))
    })
}

/// `Exec` as `execve` takes it, every byte allocated before the clone.
pub(crate) struct ExecImage {
    /// The paths tried in turn, as `execvp` does: the program itself when
    /// it has a `/`, else each `PATH` directory joined with it.
    candidates: Vec<CString>,
    /// For each candidate, `sh CANDIDATE ARGS...`: what `execvp` runs for
    /// a file without a `#!` line (`ENOEXEC`).
    sh_argvs: Vec<Vec<*const libc::c_char>>,
    owned_argv: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _owned_env: Vec<CString>,
    envp: *const *const libc::c_char,
    _envp: Vec<*const libc::c_char>,
    cwd: Option<CString>,
    fds: Vec<RawFd>,
    _owned_fds: Vec<OwnedFd>,
}

unsafe extern "C" {
    /// The process environment (POSIX).
    static environ: *const *const libc::c_char;
}

impl ExecImage {
    /// Allocates everything `execve` needs; fails on a NUL byte or an
    /// empty command.
    pub(crate) fn new(exec: Exec<'_>) -> Result<Self, SandboxError> {
        let Some(program) = exec.argv.first() else {
            return Err(SandboxError::InvalidCommand("the command is empty".into()));
        };
        if program.is_empty() {
            return Err(SandboxError::InvalidCommand(
                "the command's program is empty".into(),
            ));
        }
        let candidates = if program.as_bytes().contains(&b'/') {
            vec![cstring(program.as_bytes())?]
        } else {
            let path = exec.path_var();
            let path = path.as_deref().unwrap_or(OsStr::new(EXECVP_DEFAULT_PATH));
            search_path(program, path, None, EmptyEntry::CurrentDir)
                .map(|c| cstring(c.as_os_str().as_bytes()))
                .collect::<Result<Vec<_>, _>>()?
        };
        let owned_argv = exec
            .argv
            .iter()
            .map(|a| cstring(a.as_bytes()))
            .collect::<Result<Vec<_>, _>>()?;
        let argv: Vec<*const libc::c_char> = owned_argv
            .iter()
            .map(|a| a.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let sh_argvs = candidates
            .iter()
            .map(|c| {
                [c"sh".as_ptr(), c.as_ptr()]
                    .into_iter()
                    .chain(owned_argv.iter().skip(1).map(|a| a.as_ptr()))
                    .chain(std::iter::once(std::ptr::null()))
                    .collect()
            })
            .collect();
        let owned_env = match exec.env {
            Some(env) => env
                .iter()
                .map(|(k, v)| {
                    let mut kv = Vec::with_capacity(k.len() + 1 + v.len());
                    kv.extend_from_slice(k.as_bytes());
                    kv.push(b'=');
                    kv.extend_from_slice(v.as_bytes());
                    cstring(&kv)
                })
                .collect::<Result<Vec<_>, _>>()?,
            None => Vec::new(),
        };
        let envp_vec: Vec<*const libc::c_char> = owned_env
            .iter()
            .map(|e| e.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect();
        let envp = if exec.env.is_some() {
            envp_vec.as_ptr()
        } else {
            // SAFETY: reading the pointer; the environment is not changed
            // by vibesys while a launch is prepared.
            unsafe { environ }
        };
        let cwd = exec
            .cwd
            .map(|c| cstring(c.as_os_str().as_bytes()))
            .transpose()?;
        Ok(Self {
            candidates,
            sh_argvs,
            owned_argv,
            argv,
            _owned_env: owned_env,
            envp,
            _envp: envp_vec,
            cwd,
            fds: exec.fds.iter().map(AsRawFd::as_raw_fd).collect(),
            _owned_fds: exec.fds,
        })
    }

    /// The program as named, for messages.
    pub(crate) fn program(&self) -> &OsStr {
        self.owned_argv
            .first()
            .map_or(OsStr::new(""), |p| OsStr::from_bytes(p.as_bytes()))
    }
}

/// What the child reports when it fails, through the launch's report
/// pipe: a stage number (see `supervise::STAGES`) and an errno.
pub(crate) type Failed = (u8, i32);

/// Stage numbers of the steps this module's child takes itself.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChildStages {
    /// Placing the descriptor slots.
    pub fds: u8,
    /// Changing to the command's directory.
    pub chdir: u8,
    /// Executing the command.
    pub exec: u8,
}

/// The child's side: the image, the prepared set-up (raw system calls
/// only; it returns the stage that failed), the mask the command starts
/// with, and the report pipe's write end (close-on-exec, at 256 or up).
pub(crate) struct Child<'a> {
    pub image: &'a ExecImage,
    pub setup: &'a (dyn Fn() -> Result<(), Failed> + Sync),
    pub mask: libc::sigset_t,
    pub report: RawFd,
    pub stages: ChildStages,
}

const STACK: usize = 64 * 1024;
const GUARD: usize = 4096;

/// Starts `child` in a process that shares this one's memory and returns
/// its pid once it has executed the command or exited (this thread is
/// suspended until then). A failure of the child shows on the report
/// pipe; only a failure to start it at all is an error here.
pub(crate) fn spawn(child: &Child<'_>) -> Result<libc::pid_t, SandboxError> {
    let os = |what: &str| SandboxError::Os {
        what: what.into(),
        source: std::io::Error::last_os_error(),
    };
    // SAFETY: an anonymous private mapping of our own.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK + GUARD,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(os("allocating the launcher's stack"));
    }
    // SAFETY: the lowest page of the mapping above becomes inaccessible,
    // so an overflow of the child's stack faults instead of writing into
    // vibesys's memory below it.
    if unsafe { libc::mprotect(base, GUARD, libc::PROT_NONE) } != 0 {
        let e = os("guarding the launcher's stack");
        // SAFETY: our own mapping, unused.
        unsafe { libc::munmap(base, STACK + GUARD) };
        return Err(e);
    }
    // SAFETY: sigset_t is plain data; the calls change this thread's mask
    // only (restored below). The child starts with every signal blocked.
    let saved = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut saved: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut saved);
        saved
    };
    // SAFETY: the child runs `child_main` on the stack above (the top of
    // the mapping) with `child`; both stay alive until clone returns, and
    // with CLONE_VFORK it returns only once the child has executed or
    // exited. The child reads only memory prepared before this call and
    // makes raw system calls. Its descriptor table and signal
    // dispositions are copies (no CLONE_FILES, no CLONE_SIGHAND).
    let pid = unsafe {
        libc::clone(
            child_main,
            base.cast::<u8>().add(STACK + GUARD).cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            std::ptr::from_ref::<Child<'_>>(child).cast_mut().cast(),
        )
    };
    let err = (pid < 0).then(|| os("starting the confined command"));
    // SAFETY: restores the mask saved above; the child has executed or
    // exited, so nothing runs on the stack any more.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &saved, std::ptr::null_mut());
        libc::munmap(base, STACK + GUARD);
    }
    match err {
        Some(e) => Err(e),
        None => Ok(pid),
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Reports `failed` on the pipe and exits with `code`.
///
/// # Safety
/// Only in the clone's child.
unsafe fn fail(report: RawFd, (stage, errno): Failed, code: i32) -> ! {
    let mut msg = [0u8; 5];
    msg[0] = stage;
    msg[1..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: a write of a stack buffer, then _exit.
    unsafe {
        libc::write(report, msg.as_ptr().cast(), msg.len());
        libc::_exit(code)
    }
}

/// Sets every caught signal, and an ignored `SIGPIPE` (std ignores it),
/// back to its default: the command starts as from a plain shell, and no
/// handler of vibesys can run in this process once signals are unblocked.
///
/// # Safety
/// Only in the clone's child (its dispositions are its own copy).
unsafe fn reset_signal_dispositions() {
    // SAFETY: sigaction on stack memory, for this process only.
    unsafe {
        for sig in 1..libc::SIGRTMAX() + 1 {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            let caught = old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN;
            if caught || (sig == libc::SIGPIPE && old.sa_sigaction == libc::SIG_IGN) {
                let mut dfl: libc::sigaction = std::mem::zeroed();
                dfl.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &dfl, std::ptr::null_mut());
            }
        }
    }
}

/// The clone's child; never returns.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Child` that `spawn` keeps alive until this
    // process has executed or exited; every pointer in it was prepared by
    // the parent. Only raw system calls follow, with every signal blocked
    // until the dispositions are reset.
    unsafe {
        let child = &*arg.cast::<Child<'_>>();
        let image = child.image;
        reset_signal_dispositions();
        if !image.fds.is_empty() {
            for (i, fd) in image.fds.iter().enumerate() {
                if libc::dup2(*fd, FIRST_SLOT_FD + i as RawFd) < 0 {
                    fail(
                        child.report,
                        (child.stages.fds, errno()),
                        crate::exit_codes::EXIT_CONFINE_FAILED,
                    );
                }
            }
            // Everything above the slots closes at exec (the report pipe
            // already does).
            crate::linux::fds::close_from(FIRST_SLOT_FD + image.fds.len() as RawFd);
        }
        if let Some(cwd) = &image.cwd
            && libc::chdir(cwd.as_ptr()) < 0
        {
            fail(
                child.report,
                (child.stages.chdir, errno()),
                crate::exit_codes::EXIT_CONFINE_FAILED,
            );
        }
        if let Err(failed) = (child.setup)() {
            fail(child.report, failed, crate::exit_codes::EXIT_CONFINE_FAILED);
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &child.mask, std::ptr::null_mut());
        // As execvp: ENOENT-like errors go on to the next candidate, EACCES
        // is remembered and reported when nothing else ran, anything else
        // stops the search.
        let mut last = libc::ENOENT;
        let mut denied = false;
        for (path, sh_argv) in image.candidates.iter().zip(&image.sh_argvs) {
            libc::execve(path.as_ptr(), image.argv.as_ptr(), image.envp);
            match errno() {
                libc::ENOEXEC => {
                    libc::execve(c"/bin/sh".as_ptr(), sh_argv.as_ptr(), image.envp);
                    last = errno();
                    break;
                }
                libc::EACCES => {
                    denied = true;
                    last = libc::EACCES;
                }
                libc::ENOENT
                | libc::ENOTDIR
                | libc::ELOOP
                | libc::ENAMETOOLONG
                | libc::ENODEV
                | libc::ESTALE
                | libc::ETIMEDOUT => {
                    if !denied {
                        last = errno();
                    }
                }
                e => {
                    last = e;
                    break;
                }
            }
        }
        let code = if last == libc::ENOENT {
            crate::exit_codes::EXIT_NOT_FOUND
        } else {
            crate::exit_codes::EXIT_CANNOT_EXECUTE
        };
        fail(child.report, (child.stages.exec, last), code)
    }
}
