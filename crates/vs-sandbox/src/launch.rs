//! Running a confined command: the bwrap launcher (descriptors, status,
//! exit codes) and the Landlock helper. Platform-neutral signatures; on
//! other systems each returns [`SandboxError::UnsupportedPlatform`].

use std::ffi::OsString;

use crate::bwrap::BwrapPlan;
use crate::error::SandboxError;
use crate::fd_slot::FdSlot;
use crate::landlock_rules::LandlockPlan;
use crate::limits::ProcessLimit;
#[cfg(target_os = "linux")]
use crate::process::supervise::{ChildSetup, Exec, Prepared, SpawnFailure};
#[cfg(target_os = "linux")]
use std::path::Path;

pub use crate::exit_codes::{
    EXIT_CANNOT_EXECUTE, EXIT_CONFINE_FAILED, EXIT_NOT_FOUND, EXIT_USAGE, exec_failure_code,
    exit_code,
};

/// Makes the process `cmd` starts receive SIGTERM when the thread that
/// spawned it exits, vibesys killed with SIGKILL included (Linux:
/// `PR_SET_PDEATHSIG`; elsewhere nothing is armed).
pub fn terminate_with_parent(cmd: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    crate::process::parent_death::terminate_with_parent(cmd);
    #[cfg(not(target_os = "linux"))]
    let _ = cmd;
}

/// Runs `command` under the bwrap plan as a child, waits, and returns its
/// exit code (128+N for signal N). vibesys stays the parent (a subreaper)
/// and bounds the tree with `limit`; whatever the command leaves behind is
/// killed when it exits. A sandbox that fails to set up (the command never
/// started) is an error, diagnosed with a namespace probe.
#[cfg(target_os = "linux")]
pub fn run_bwrap(
    plan: &BwrapPlan,
    command: &[OsString],
    limit: &ProcessLimit,
) -> Result<i32, SandboxError> {
    use std::io::Read;

    use crate::linux::fds::SlotFds;

    let (mut status_reader, status_writer) =
        std::io::pipe().map_err(|source| SandboxError::Os {
            what: "creating the status pipe".into(),
            source,
        })?;
    let fds = SlotFds::prepare(&plan.fds, vec![status_writer.into()])?;
    let status_fd = crate::bwrap::FIRST_SLOT_FD + fds.count() as i32 - 1;
    let mut argv: Vec<OsString> = vec![plan.program.clone().into_os_string()];
    argv.extend(plan.args.iter().map(OsString::from));
    argv.extend(["--json-status-fd".into(), status_fd.to_string().into()]);
    argv.extend(plan.env_tail.iter().map(OsString::from));
    argv.push("--".into());
    argv.extend(plan.command(command));
    let mut prepared = Prepared::new("bwrap", bwrap_setup(limit), limit)?;
    // The status writer's only copies go with the exec image: EOF on the
    // reader once bwrap and what it leaves are gone.
    let spawned = prepared.spawn(Exec {
        argv: &argv,
        env: None,
        cwd: None,
        fds: fds.into_fds(),
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(SpawnFailure::Confine(e)) => {
            prepared.finish();
            return Err(e);
        }
        Err(SpawnFailure::Exec { program, error }) => {
            prepared.finish();
            return Err(SandboxError::Os {
                what: format!("starting {}", Path::new(&program).display()),
                source: error,
            });
        }
    };
    let status = prepared
        .wait(&mut child)
        .map_err(|source| SandboxError::Os {
            what: "waiting for bwrap".into(),
            source,
        })?;
    prepared.finish();
    // Read once bwrap is gone, without a reader thread on the launch
    // path: its few status lines (well below a pipe's buffer) are
    // written by then, and the read cannot block (non-blocking, and
    // every other holder of the write end was killed by `finish`).
    let mut report = Vec::new();
    set_nonblocking(&status_reader);
    let _ = (&mut status_reader)
        .take(64 * 1024)
        .read_to_end(&mut report);
    let started = String::from_utf8_lossy(&report).contains("\"child-pid\"");
    if !started {
        crate::linux::probe::probe_bwrap(&plan.program)?;
        return Err(crate::controls::SandboxUnavailableError::new(
            "bwrap",
            format!(
                "bubblewrap failed to set up the sandbox (exit code {}; its message is above)",
                exit_code(status)
            ),
            "check that every policy path and host resource exists, or run `vibesys doctor`",
        )
        .into());
    }
    Ok(exit_code(status))
}

/// The launcher's side of a bwrap launch (bwrap does the command's own
/// hardening). With a pids cgroup as the limit, bwrap is vibesys's own
/// child: the cgroup holds the whole tree, a watchdog beside bwrap kills
/// it if vibesys dies (bwrap also has `--die-with-parent` and
/// `PR_SET_PDEATHSIG`, and its pid namespace dies with it), and vibesys,
/// the subreaper, kills what is left when bwrap exits: one fork on the
/// launch path instead of two. Otherwise a supervisor stands between
/// them (see [`ChildSetup::supervise`]).
#[cfg(target_os = "linux")]
fn bwrap_setup(limit: &ProcessLimit) -> ChildSetup {
    ChildSetup {
        supervise: !matches!(limit, ProcessLimit::Cgroup { .. }),
        ..ChildSetup::default()
    }
}

/// Makes `reader` non-blocking (best effort: should it fail, the read
/// still ends, as `finish` killed every other holder of the write end).
#[cfg(target_os = "linux")]
fn set_nonblocking(reader: &std::io::PipeReader) {
    use std::os::fd::AsFd;
    let _ = rustix::fs::fcntl_getfl(reader.as_fd()).and_then(|flags| {
        rustix::fs::fcntl_setfl(reader.as_fd(), flags | rustix::fs::OFlags::NONBLOCK)
    });
}

/// Stub: bubblewrap exists only on Linux.
#[cfg(not(target_os = "linux"))]
pub fn run_bwrap(
    _plan: &BwrapPlan,
    _command: &[OsString],
    _limit: &ProcessLimit,
) -> Result<i32, SandboxError> {
    Err(SandboxError::UnsupportedPlatform { backend: "bwrap" })
}

/// The helper: creates the descriptors `slots` name at 3, 4, ..., closes
/// every other inherited descriptor and runs `argv` (bwrap) as its child
/// under `limit`, staying its parent (a subreaper) and killing whatever is
/// left when it exits. Returns the exit status to use: the command's own,
/// or 125/126/127 with the error to print.
#[cfg(target_os = "linux")]
pub fn run_with_fds(
    slots: &[FdSlot],
    argv: &[OsString],
    limit: &ProcessLimit,
) -> Result<i32, SandboxError> {
    if let Some((program, err)) = bwrap_command_error(argv) {
        return Ok(exec_failure(program, &err));
    }
    let fds = crate::linux::fds::SlotFds::prepare(slots, Vec::new())?;
    let mut prepared = Prepared::new("bwrap", bwrap_setup(limit), limit)?;
    let spawned = prepared.spawn(Exec {
        argv,
        env: None,
        cwd: None,
        fds: fds.into_fds(),
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(SpawnFailure::Confine(e)) => {
            prepared.finish();
            return Err(e);
        }
        Err(SpawnFailure::Exec { program, error }) => {
            prepared.finish();
            return Ok(exec_failure(&program, &error));
        }
    };
    let status = prepared
        .wait(&mut child)
        .map_err(|source| SandboxError::Os {
            what: "waiting for bwrap".into(),
            source,
        });
    prepared.finish();
    Ok(exit_code(status?))
}

/// Why the command of a bwrap line (`bwrap ARGS -- CMD`, a plan of ours)
/// could not be executed, judged on the host as
/// [`crate::process::lookup::exec_error`] does: in the plan's `--chdir`,
/// with its `--setenv PATH` (after `--clearenv`) or this process's `PATH`.
#[cfg(target_os = "linux")]
fn bwrap_command_error(argv: &[OsString]) -> Option<(&std::ffi::OsStr, std::io::Error)> {
    let split = argv.iter().position(|a| a == "--")?;
    let (args, mut command) = (&argv[1..split], &argv[split + 1..]);
    // Behind the egress forwarder (bound in, so not on the host at that
    // path): the command after the forwarder's own `--`.
    if command
        .first()
        .is_some_and(|p| p == crate::egress::INSIDE_HELPER)
    {
        let inner = command.iter().position(|a| a == "--")?;
        command = &command[inner + 1..];
    }
    let program = command.first()?;
    let mut chdir = None;
    let mut path_var = std::env::var_os("PATH");
    // Only `--setenv` takes values that may look like options; every
    // other value in a plan is a path, a number or `ALL`.
    let mut i = 0;
    while i < args.len() {
        match args[i].to_str() {
            Some("--chdir") => {
                chdir = args.get(i + 1).map(std::path::PathBuf::from);
                i += 2;
            }
            Some("--clearenv") => {
                path_var = None;
                i += 1;
            }
            Some("--setenv") => {
                if args.get(i + 1).is_some_and(|k| k == "PATH") {
                    path_var = args.get(i + 2).cloned();
                }
                i += 3;
            }
            _ => i += 1,
        }
    }
    let err = crate::process::lookup::exec_error(program, path_var.as_deref(), &chdir?)?;
    Some((program.as_os_str(), err))
}

/// Stub: descriptor slots are for bwrap, which exists only on Linux.
#[cfg(not(target_os = "linux"))]
pub fn run_with_fds(
    _slots: &[FdSlot],
    _argv: &[OsString],
    _limit: &ProcessLimit,
) -> Result<i32, SandboxError> {
    Err(SandboxError::UnsupportedPlatform { backend: "bwrap" })
}

/// Runs `argv` under the Landlock plan below this process, in `cwd` (else
/// the current directory), with exactly `env` (else the inherited
/// environment), waits, and returns its exit code (128+N for signal N).
///
/// This process becomes a subreaper, bounds the tree with `limit` and
/// forwards SIGINT, SIGTERM, SIGHUP and SIGQUIT. With a pids cgroup as
/// the limit, the command is its child and a watchdog beside it kills the
/// cgroup if vibesys dies; otherwise its child is a small supervisor
/// (kills the tree when the command exits or when vibesys dies, exits
/// with the command's status). Without a supervisor the command's process
/// shares vibesys's memory until it executes (no copy of vibesys's address
/// space, see `crate::process::spawn`). The command, before it executes: joins
/// the run's pids cgroup, takes SIGKILL as its
/// parent-death signal, starts a new session, enters a user namespace of
/// its own when not root (so its bounding set can be dropped and
/// `RLIMIT_NPROC` counts only the tree), locks the securebits, drops the
/// bounding set and ambient capabilities, sets no_new_privs, restricts
/// itself to the ruleset, installs the bwrap seccomp program plus the
/// socket rules, drops every remaining capability and marks inherited
/// descriptors above stderr close-on-exec. A failure of any step is an
/// error and the command never runs.
#[cfg(target_os = "linux")]
pub fn run_landlock(
    plan: &LandlockPlan,
    argv: &[OsString],
    limit: &ProcessLimit,
    env: Option<&[(OsString, OsString)]>,
    cwd: Option<&std::path::Path>,
) -> Result<i32, SandboxError> {
    use crate::linux::seccomp::{SocketRules, landlock_programs};

    if argv.is_empty() {
        return Err(SandboxError::InvalidCommand("the command is empty".into()));
    }
    let (ruleset, outcome) = crate::linux::landlock_apply::prepare(plan)?;
    if !outcome.fully_enforced {
        tracing::info!(
            abi = outcome.abi,
            "landlock partially enforced (older kernel ABI)"
        );
    }
    let egress = match &plan.egress {
        Some(socket) => Some((crate::linux::netns::channel()?, socket.clone())),
        None => None,
    };
    let (egress_parent, egress_child) = match egress {
        Some(((parent, child), socket)) => (Some((parent, socket)), Some(child)),
        None => (None, None),
    };
    let setup = ChildSetup {
        egress_channel: egress_child,
        // A cgroup holds the whole tree, so vibesys (the subreaper) can
        // be the command's parent, with a watchdog beside the command for
        // the case of vibesys being SIGKILLed: one fork on the launch
        // path instead of two. Otherwise only a supervisor between them
        // can find what the command leaves behind.
        supervise: !matches!(limit, ProcessLimit::Cgroup { .. }),
        new_session: true,
        user_namespace: wants_user_namespace(),
        nproc: None,
        drop_capabilities: true,
        landlock: Some(ruleset),
        // With an allow-list too: UDP, raw, MPTCP and every family but
        // TCP refused, and no listening (the one listener was made before).
        seccomp: landlock_programs(SocketRules {
            deny_unix: true,
            deny_network: !plan.network,
        })?,
        close_inherited: true,
    };
    // The proxy variables of an allow-list win over the caller's.
    let egress_env: Option<Vec<(OsString, OsString)>> = plan.egress.as_ref().map(|_| {
        let mut vars: Vec<(OsString, OsString)> = match env {
            Some(env) => env.to_vec(),
            None => std::env::vars_os().collect(),
        };
        let proxy = crate::egress::proxy_env();
        vars.retain(|(k, _)| !proxy.iter().any(|(p, _)| k == p.as_str()));
        vars.extend(proxy.into_iter().map(|(k, v)| (k.into(), v.into())));
        vars
    });
    let env = egress_env.as_deref().or(env);
    let mut prepared = Prepared::new("landlock", setup, limit)?;
    let spawned = prepared.spawn(Exec {
        argv,
        env,
        cwd,
        fds: Vec::new(),
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(SpawnFailure::Confine(e)) => {
            prepared.finish();
            return Err(e);
        }
        Err(SpawnFailure::Exec { program, error }) => {
            prepared.finish();
            return Ok(exec_failure(&program, &error));
        }
    };
    // The listener the command's namespace sent (before it executed):
    // handed to the proxy, which accepts on it from outside the sandbox.
    if let Some((channel, socket)) = egress_parent {
        match crate::linux::netns::receive_listener(&channel)
            .and_then(|l| hand_to_proxy(&l, &socket))
        {
            Ok(()) => {}
            Err(e) => {
                let _ = rustix::process::kill_process(
                    rustix::process::Pid::from_raw(child.id() as i32)
                        .unwrap_or(rustix::process::Pid::INIT),
                    rustix::process::Signal::KILL,
                );
                let _ = prepared.wait(&mut child);
                prepared.finish();
                return Err(e);
            }
        }
    }
    let status = prepared
        .wait(&mut child)
        .map_err(|source| SandboxError::Os {
            what: "waiting for the confined command".into(),
            source,
        });
    prepared.finish();
    Ok(exit_code(status?))
}

/// Hands `listener` (made in a sandbox's network namespace) to the egress
/// proxy's datagram `socket`.
#[cfg(target_os = "linux")]
fn hand_to_proxy(listener: &std::net::TcpListener, socket: &Path) -> Result<(), SandboxError> {
    use std::os::fd::AsRawFd;
    let fail = |source| SandboxError::Os {
        what: format!(
            "handing the sandbox's listener to the egress proxy at {}",
            socket.display()
        ),
        source,
    };
    let sock = std::os::unix::net::UnixDatagram::unbound().map_err(fail)?;
    sock.connect(socket).map_err(fail)?;
    crate::linux::netns::send_fd(sock.as_raw_fd(), listener.as_raw_fd()).map_err(fail)
}

/// Whether the Landlock child tries a user namespace of its own: when not
/// root (it lets the bounding set be dropped; where the host refuses one,
/// no_new_privs keeps that set from granting anything). A process limit of
/// `RLIMIT_NPROC` requires one (see `ChildSetup`).
#[cfg(target_os = "linux")]
fn wants_user_namespace() -> bool {
    !crate::process::pids::is_root()
}

/// Prints why `program` could not be executed and returns the status.
pub(crate) fn exec_failure(program: &std::ffi::OsStr, err: &std::io::Error) -> i32 {
    eprintln!("vibesys: cannot execute {program:?}: {err}");
    exec_failure_code(err)
}

/// Stub: Landlock exists only on Linux.
#[cfg(not(target_os = "linux"))]
pub fn run_landlock(
    _plan: &LandlockPlan,
    _argv: &[OsString],
    _limit: &ProcessLimit,
    _env: Option<&[(OsString, OsString)]>,
    _cwd: Option<&std::path::Path>,
) -> Result<i32, SandboxError> {
    Err(SandboxError::UnsupportedPlatform {
        backend: "landlock",
    })
}

/// The kernel's Landlock ABI version (0 when unsupported or not Linux).
pub fn landlock_abi() -> i32 {
    #[cfg(target_os = "linux")]
    {
        crate::linux::probe::landlock_abi()
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// Checks that bwrap can create a user namespace on this host.
pub fn probe_bwrap(
    program: &std::path::Path,
) -> Result<(), crate::controls::SandboxUnavailableError> {
    #[cfg(target_os = "linux")]
    {
        crate::linux::probe::probe_bwrap(program)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = program;
        Err(crate::controls::SandboxUnavailableError::new(
            "bwrap",
            "bubblewrap exists only on Linux",
            "use the seatbelt backend on macOS",
        ))
    }
}
