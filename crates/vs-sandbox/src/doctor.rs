//! `vibesys doctor`'s checks of this host's confinement mechanisms
//! (bubblewrap, Landlock, the process bound), each a [`Check`] record,
//! and the report they make.

use std::fmt;
use std::process::{Command, Stdio};

use serde::Serialize;

use crate::limits::{DEFAULT_MAX_PROCESSES, ProcessLimit};

/// One mechanism and whether it works here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The mechanism (`bwrap`, `landlock`, ...).
    pub name: &'static str,
    /// Whether it works.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// How to make it work, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

impl Check {
    /// A mechanism that works.
    pub fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            ok: true,
            detail: detail.into(),
            fix: None,
        }
    }

    /// A mechanism that does not work, and how to fix it.
    pub fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            name,
            ok: false,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }
}

/// Each check in order: the first is the default mechanism's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DoctorReport {
    /// The checks, the default mechanism's first.
    pub checks: Vec<Check>,
}

impl DoctorReport {
    /// Whether the default mechanism (the first check) works.
    pub fn default_ok(&self) -> bool {
        self.checks.first().is_some_and(|c| c.ok)
    }
}

/// One line per check (`NAME OK|FAIL DETAIL`), its fix below it.
impl fmt::Display for DoctorReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.checks {
            writeln!(
                f,
                "{:<9} {:<4} {}",
                c.name,
                if c.ok { "ok" } else { "FAIL" },
                c.detail
            )?;
            if let Some(fix) = &c.fix {
                writeln!(f, "               fix: {fix}")?;
            }
        }
        Ok(())
    }
}

/// bubblewrap: found in `path` (the caller's PATH) and able to create
/// user namespaces.
pub fn check_bwrap(path: Option<&std::ffi::OsStr>) -> Check {
    let program = match crate::bwrap::find_bwrap(path) {
        Ok(p) => p,
        Err(e) => return Check::fail("bwrap", e.reason, e.fix),
    };
    let version = Command::new(&program)
        .arg("--version")
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    match crate::launch::probe_bwrap(&program) {
        Ok(()) => Check::ok(
            "bwrap",
            format!(
                "{version} at {}; creates user namespaces",
                program.display()
            ),
        ),
        Err(e) => Check::fail("bwrap", e.reason, e.fix),
    }
}

/// Landlock: the kernel's ABI version.
pub fn check_landlock() -> Check {
    let abi = crate::launch::landlock_abi();
    if abi >= 1 {
        Check::ok(
            "landlock",
            format!(
                "kernel ABI {abi} (read-only and hidden paths are not enforced by this backend)"
            ),
        )
    } else {
        Check::fail(
            "landlock",
            "the kernel does not support Landlock (or it is disabled)",
            "use Linux 5.13+ with landlock in the lsm= list",
        )
    }
}

/// Which mechanism bounds the processes of a host-confined run here, for
/// the default `[sandbox] max_processes`.
pub fn check_processes() -> Check {
    let limit = ProcessLimit::choose(DEFAULT_MAX_PROCESSES);
    let detail = limit
        .describe()
        .trim_start_matches("processes: ")
        .to_owned();
    if limit.max().is_some() {
        Check::ok("processes", detail)
    } else {
        Check::fail(
            "processes",
            detail,
            "delegate a cgroup v2 subtree with the pids controller (systemd: Delegate=pids), make a v1 pids hierarchy writable, or allow unprivileged user namespaces",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_prints_one_line_per_check_and_each_fix_below() {
        let report = DoctorReport {
            checks: vec![
                Check::ok("bwrap", "bubblewrap 0.9.0"),
                Check::fail("nix", "nix was not found in PATH", "install Nix"),
            ],
        };
        assert!(report.default_ok());
        assert_eq!(
            report.to_string(),
            "bwrap     ok   bubblewrap 0.9.0\nnix       FAIL nix was not found in PATH\n               fix: install Nix\n"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["checks"][0].get("fix"), None);
        assert_eq!(json["checks"][1]["fix"], "install Nix");
    }
}
