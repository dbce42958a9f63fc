//! `SeatbeltSandbox` (macOS): the policy lowered to a Seatbelt profile.
//!
//! The base profile lives in `seatbelt_base.sbpl`; the generated rules
//! refer to paths only through `(param "NAME")`, and the paths travel as
//! `-D NAME=PATH` arguments of `sandbox-exec`, so no path is ever parsed
//! as profile text. Profile generation is platform-neutral (unit-tested on
//! Linux); running it needs macOS.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::confinement::{Confinement, EnforcementReport};
use crate::error::SandboxError;
use crate::policy::{Access, ResolvedPolicy};

/// The base profile text.
pub const BASE_PROFILE: &str = include_str!("seatbelt_base.sbpl");

/// The `sandbox-exec` executable.
pub const SANDBOX_EXEC: &str = "/usr/bin/sandbox-exec";

/// A Seatbelt profile and the parameters it expects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SeatbeltPlan {
    /// The profile text (base plus generated rules).
    pub profile: String,
    /// `-D` parameters, in order.
    pub params: Vec<(String, PathBuf)>,
}

impl SeatbeltPlan {
    /// Lowers a resolved policy into a profile and its parameters.
    pub fn new(policy: &ResolvedPolicy, tmpdir: &Path, network: bool) -> Self {
        let root = policy.workspace().root();
        let mut params = vec![
            ("WORKSPACE".to_owned(), root.to_path_buf()),
            ("TMPDIR".to_owned(), tmpdir.to_path_buf()),
        ];
        let mut profile = String::from(BASE_PROFILE);
        profile.push_str("\n; generated from the project path policy\n");
        // Ancestors of the project may not be listed.
        for (i, ancestor) in root.ancestors().skip(1).enumerate() {
            let name = format!("ANCESTOR_{i}");
            let _ = writeln!(
                profile,
                "(deny file-read-data (literal (param \"{name}\")))"
            );
            params.push((name, ancestor.to_path_buf()));
        }
        let (mut ro, mut hidden) = (0, 0);
        for entry in policy.entries() {
            let name = match entry.access {
                Access::ReadOnly => {
                    ro += 1;
                    let name = format!("READ_ONLY_{}", ro - 1);
                    let _ = writeln!(profile, "(deny file-write* (subpath (param \"{name}\")))");
                    name
                }
                Access::Hidden => {
                    hidden += 1;
                    let name = format!("HIDDEN_{}", hidden - 1);
                    let _ = writeln!(
                        profile,
                        "(deny file-read* file-write* (subpath (param \"{name}\")))"
                    );
                    name
                }
            };
            params.push((name, entry.host.clone()));
        }
        if network {
            profile.push_str("(allow network*)\n");
        } else {
            profile.push_str("(allow network* (local unix))\n");
        }
        Self { profile, params }
    }

    /// The full argv: `sandbox-exec -p PROFILE -D K=V ... -- argv`.
    pub fn argv(&self, command: &[OsString]) -> Vec<OsString> {
        let mut out: Vec<OsString> = vec![
            SANDBOX_EXEC.into(),
            "-p".into(),
            self.profile.clone().into(),
        ];
        for (name, path) in &self.params {
            let mut kv = OsString::from(format!("-D{name}="));
            kv.push(path.as_os_str());
            out.push(kv);
        }
        out.push("--".into());
        out.extend(command.iter().cloned());
        out
    }
}

/// Agent confinement with macOS Seatbelt (`sandbox-exec`).
#[derive(Debug, Clone)]
pub struct SeatbeltSandbox {
    plan: SeatbeltPlan,
    chdir: PathBuf,
    report: EnforcementReport,
}

impl SeatbeltSandbox {
    /// Plans Seatbelt confinement; the command starts in `chdir` (inside
    /// the workspace), else the workspace root.
    pub fn new(
        policy: &ResolvedPolicy,
        tmpdir: &Path,
        network: bool,
        chdir: Option<PathBuf>,
    ) -> Self {
        Self {
            plan: SeatbeltPlan::new(policy, tmpdir, network),
            chdir: chdir.unwrap_or_else(|| policy.workspace().root().to_path_buf()),
            report: seatbelt_report(policy),
        }
    }

    /// The directory the command starts in.
    pub fn chdir(&self) -> &Path {
        &self.chdir
    }

    /// The profile and parameters.
    pub fn plan(&self) -> &SeatbeltPlan {
        &self.plan
    }
}

/// The report of what the Seatbelt backend enforces.
pub fn seatbelt_report(policy: &ResolvedPolicy) -> EnforcementReport {
    let mut report = EnforcementReport::for_policy("seatbelt", policy, |access| {
        match access {
        Access::ReadOnly => (true, "writes denied by the profile".into()),
        Access::Hidden => (
            true,
            "reads and writes denied by the profile (reads fail with EPERM rather than showing an empty path)".into(),
        ),
    }
    });
    report.outside =
        "writes outside the project and temp dir denied; reads broad (listing ancestors of the project denied)".into();
    report.gaps = vec!["reads outside the project are allowed (Seatbelt profiles stay usable only with broad reads)".into()];
    report
}

impl Confinement for SeatbeltSandbox {
    fn backend(&self) -> &'static str {
        "seatbelt"
    }

    fn wrap(&self, argv: &[OsString]) -> Result<Vec<OsString>, SandboxError> {
        if argv.is_empty() {
            return Err(SandboxError::InvalidCommand("the command is empty".into()));
        }
        if !cfg!(target_os = "macos") {
            return Err(SandboxError::UnsupportedPlatform {
                backend: "seatbelt",
            });
        }
        Ok(self.plan.argv(argv))
    }

    fn agent_path(&self, host: &Path) -> PathBuf {
        host.to_path_buf()
    }

    fn report(&self) -> &EnforcementReport {
        &self.report
    }
}
