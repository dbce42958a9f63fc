//! The exit statuses of a confined launch: the command's own, or the
//! launcher's when it failed (122 usage, 125 confinement failed, 126 cannot
//! execute, 127 not found), as every launcher and helper reports them.

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
    crate::process::Exit::from_std(status).map_or(EXIT_CONFINE_FAILED, crate::process::Exit::code)
}

/// Maps an `exec` failure to the helper's exit status.
pub fn exec_failure_code(err: &std::io::Error) -> i32 {
    if err.kind() == std::io::ErrorKind::NotFound {
        EXIT_NOT_FOUND
    } else {
        EXIT_CANNOT_EXECUTE
    }
}
