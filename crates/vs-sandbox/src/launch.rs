//! Running a confined command: the bwrap launcher (descriptors, status,
//! exit codes) and the Landlock helper. Platform-neutral signatures; on
//! other systems each returns [`SandboxError::UnsupportedPlatform`].

use std::ffi::OsString;

use crate::bwrap::{BwrapPlan, FdSlot};
use crate::error::SandboxError;
use crate::landlock::LandlockPlan;

/// The hidden helper subcommand that realises a bwrap plan's descriptors.
pub const HELPER_SUBCOMMAND: &str = "internal-launch";

/// Helper exit status: its own arguments were malformed.
pub const EXIT_USAGE: i32 = 122;
/// Helper exit status: confinement could not be applied; nothing ran.
pub const EXIT_CONFINE_FAILED: i32 = 125;
/// Helper exit status: the command exists but cannot be executed.
pub const EXIT_CANNOT_EXECUTE: i32 = 126;
/// Helper exit status: the command was not found.
pub const EXIT_NOT_FOUND: i32 = 127;

/// The exit code a shell would report: the code, or 128+N for signal N.
pub fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(sig)) => 128 + sig,
        (None, None) => EXIT_CONFINE_FAILED,
    }
}

/// Maps an `exec` failure to the helper's exit status.
pub fn exec_failure_code(err: &std::io::Error) -> i32 {
    if err.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXECUTE
    }
}

/// Runs `command` under the bwrap plan as a child, waits, and returns its
/// exit code (128+N for signal N). A sandbox that fails to set up (the
/// command never started) is an error, diagnosed with a namespace probe.
#[cfg(target_os = "linux")]
pub fn run_bwrap(plan: &BwrapPlan, command: &[OsString]) -> Result<i32, SandboxError> {
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
    argv.extend([
        "--json-status-fd".into(),
        status_fd.to_string().into(),
        "--".into(),
    ]);
    argv.extend(command.iter().cloned());
    let mut cmd = fds.command(&argv)?;
    let mut child = cmd.spawn().map_err(|source| SandboxError::Os {
        what: format!("starting {}", plan.program.display()),
        source,
    })?;
    // Our copy of the writer went with `cmd`; drop it so EOF arrives.
    drop(cmd);
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = (&mut status_reader).take(64 * 1024).read_to_end(&mut buf);
        buf
    });
    let status = child.wait().map_err(|source| SandboxError::Os {
        what: "waiting for bwrap".into(),
        source,
    })?;
    let report = reader.join().unwrap_or_default();
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

/// Stub: bubblewrap exists only on Linux.
#[cfg(not(target_os = "linux"))]
pub fn run_bwrap(_plan: &BwrapPlan, _command: &[OsString]) -> Result<i32, SandboxError> {
    Err(SandboxError::UnsupportedPlatform { backend: "bwrap" })
}

/// The helper: creates the descriptors `slots` name at 3, 4, ..., closes
/// every other inherited descriptor and replaces this process with
/// `argv`. Returns only on failure, with the exit status to use.
#[cfg(target_os = "linux")]
pub fn exec_with_fds(slots: &[FdSlot], argv: &[OsString]) -> (i32, SandboxError) {
    use std::os::unix::process::CommandExt;

    let fds = match crate::linux::fds::SlotFds::prepare(slots, Vec::new()) {
        Ok(fds) => fds,
        Err(e) => return (EXIT_CONFINE_FAILED, e),
    };
    let mut cmd = match fds.command(argv) {
        Ok(cmd) => cmd,
        Err(e) => return (EXIT_USAGE, e),
    };
    let err = cmd.exec();
    (
        exec_failure_code(&err),
        SandboxError::Os {
            what: format!("executing {:?}", argv.first().cloned().unwrap_or_default()),
            source: err,
        },
    )
}

/// Stub: descriptor slots are for bwrap, which exists only on Linux.
#[cfg(not(target_os = "linux"))]
pub fn exec_with_fds(_slots: &[FdSlot], _argv: &[OsString]) -> (i32, SandboxError) {
    (
        EXIT_CONFINE_FAILED,
        SandboxError::UnsupportedPlatform { backend: "bwrap" },
    )
}

/// Applies the Landlock plan to this process, closes inherited
/// descriptors above stderr, and replaces this process with `argv`.
/// Returns only on failure, with the exit status to use: the command
/// never runs unconfined.
#[cfg(target_os = "linux")]
pub fn landlock_exec(plan: &LandlockPlan, argv: &[OsString]) -> (i32, SandboxError) {
    use std::os::unix::process::CommandExt;

    let Some((program, args)) = argv.split_first() else {
        return (
            EXIT_USAGE,
            SandboxError::InvalidCommand("the command is empty".into()),
        );
    };
    match crate::linux::landlock_apply::restrict_self(plan) {
        Ok(outcome) => {
            if !outcome.fully_enforced {
                tracing::info!(
                    abi = outcome.abi,
                    "landlock partially enforced (older kernel ABI)"
                );
            }
        }
        Err(e) => return (EXIT_CONFINE_FAILED, e),
    }
    crate::linux::fds::cloexec_inherited();
    let err = std::process::Command::new(program).args(args).exec();
    (
        exec_failure_code(&err),
        SandboxError::Os {
            what: format!("executing {program:?}"),
            source: err,
        },
    )
}

/// Stub: Landlock exists only on Linux.
#[cfg(not(target_os = "linux"))]
pub fn landlock_exec(_plan: &LandlockPlan, _argv: &[OsString]) -> (i32, SandboxError) {
    (
        EXIT_CONFINE_FAILED,
        SandboxError::UnsupportedPlatform {
            backend: "landlock",
        },
    )
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
