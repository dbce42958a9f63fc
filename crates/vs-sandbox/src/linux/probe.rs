//! Probes of what this host supports.
#![allow(unsafe_code)]

use std::path::Path;
use std::process::{Command, Stdio};

use crate::controls::SandboxUnavailableError;

/// The kernel's Landlock ABI version, or 0 when unsupported. Probed once
/// per process (the report and the ruleset both ask; the kernel's answer
/// cannot change while we run).
pub fn landlock_abi() -> i32 {
    static ABI: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *ABI.get_or_init(probe_landlock_abi)
}

fn probe_landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with the VERSION flag, landlock_create_ruleset takes no
    // attribute pointer and returns a number; it has no other effect.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if v < 0 { 0 } else { v as i32 }
}

/// Checks that `bwrap` can create a user namespace here; the error quotes
/// bwrap and says how to fix it.
pub fn probe_bwrap(program: &Path) -> Result<(), SandboxUnavailableError> {
    let out = Command::new(program)
        .args([
            "--unshare-user",
            "--unshare-pid",
            "--ro-bind",
            "/",
            "/",
            "--",
            "/bin/true",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| {
            SandboxUnavailableError::new(
                "bwrap",
                format!("cannot run {}: {e}", program.display()),
                "install bubblewrap (apt-get install bubblewrap)",
            )
        })?;
    if out.status.success() {
        return Ok(());
    }
    let mut msg = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    msg.truncate(500);
    Err(SandboxUnavailableError::new(
        "bwrap",
        format!("bwrap cannot create a user namespace here ({msg})"),
        "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 and user.max_user_namespaces>0; on Ubuntu 24.04+ kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile for bwrap), or run in the docker environment",
    ))
}
