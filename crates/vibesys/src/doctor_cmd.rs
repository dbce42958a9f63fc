//! `vibesys doctor`: which confinement mechanisms work here, and why not.

use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;
use serde::Serialize;

/// Arguments of `vibesys doctor`.
#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when the default mechanism (bwrap on Linux) works, 1 otherwise."
)]
pub struct DoctorArgs {
    /// Print JSON: {"checks": [{"name", "ok", "detail", "fix"}]}.
    #[arg(long)]
    json: bool,
}

/// One mechanism and whether it works.
#[derive(Debug, Serialize)]
struct Check {
    name: &'static str,
    ok: bool,
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
}

/// Runs `vibesys doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<u8> {
    let mut checks = vec![
        check_bwrap(),
        check_landlock(),
        check_processes(),
        check_docker(),
        check_nix(),
        check_slurm(),
        check_remote(vs_runtime::remote::Service::Modal),
        check_remote(vs_runtime::remote::Service::Skypilot),
    ];
    checks.extend(check_history());
    let default_ok = checks.first().is_some_and(|c| c.ok);
    if args.json {
        crate::output::print_json(&serde_json::json!({ "checks": checks }))?;
    } else {
        let mut text = String::new();
        for c in &checks {
            text.push_str(&format!(
                "{:<9} {:<4} {}\n",
                c.name,
                if c.ok { "ok" } else { "FAIL" },
                c.detail
            ));
            if let Some(fix) = &c.fix {
                text.push_str(&format!("               fix: {fix}\n"));
            }
        }
        crate::output::print_text(&text)?;
    }
    Ok(if default_ok { 0 } else { 1 })
}

/// For the project in the current directory (when it is one): hidden
/// paths whose content git history still holds.
fn check_history() -> Option<Check> {
    let args = crate::project::PolicyArgs::for_current_dir();
    let project = args.plan().ok()?;
    let found = vs_runtime::policy_show::hidden_in_history(&project);
    Some(Check {
        name: "history",
        ok: found.is_empty(),
        detail: if found.is_empty() {
            "no hidden path of this project is in git history".into()
        } else {
            format!(
                "hidden paths in git history (readable through .git/objects): {}",
                found.join(" ")
            )
        },
        fix: (!found.is_empty()).then(|| vs_runtime::policy_show::HISTORY_FIX.to_owned()),
    })
}

fn check_bwrap() -> Check {
    let program = match vs_sandbox::bwrap::find_bwrap(std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err(e) => {
            return Check {
                name: "bwrap",
                ok: false,
                detail: e.reason,
                fix: Some(e.fix),
            };
        }
    };
    let version = Command::new(&program)
        .arg("--version")
        .stderr(Stdio::null())
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    match vs_sandbox::launch::probe_bwrap(&program) {
        Ok(()) => Check {
            name: "bwrap",
            ok: true,
            detail: format!(
                "{version} at {}; creates user namespaces",
                program.display()
            ),
            fix: None,
        },
        Err(e) => Check {
            name: "bwrap",
            ok: false,
            detail: e.reason,
            fix: Some(e.fix),
        },
    }
}

fn check_landlock() -> Check {
    let abi = vs_sandbox::launch::landlock_abi();
    Check {
        name: "landlock",
        ok: abi >= 1,
        detail: if abi >= 1 {
            format!(
                "kernel ABI {abi} (read-only and hidden paths are not enforced by this backend)"
            )
        } else {
            "the kernel does not support Landlock (or it is disabled)".into()
        },
        fix: (abi < 1).then(|| "use Linux 5.13+ with landlock in the lsm= list".into()),
    }
}

/// Which mechanism bounds the processes of a host-confined run here, for
/// the default `[sandbox] max_processes`.
fn check_processes() -> Check {
    let limit = vs_sandbox::ProcessLimit::choose(vs_sandbox::limits::DEFAULT_MAX_PROCESSES);
    let bounded = limit.max().is_some();
    Check {
        name: "processes",
        ok: bounded,
        detail: limit
            .describe()
            .trim_start_matches("processes: ")
            .to_owned(),
        fix: (!bounded).then(|| {
            "delegate a cgroup v2 subtree with the pids controller (systemd: Delegate=pids), make a v1 pids hierarchy writable, or allow unprivileged user namespaces".into()
        }),
    }
}

fn check_docker() -> Check {
    use vs_docker::{Engine, engine_socket};
    let sock = engine_socket();
    let fail = |detail: String, fix: &str| Check {
        name: "docker",
        ok: false,
        detail,
        fix: Some(fix.into()),
    };
    let engine = match Engine::connect() {
        Ok(e) => e,
        Err(e) => {
            return fail(
                format!("no Engine at {}: {e}", sock.display()),
                "start the Docker Engine, or use the host environment (bwrap)",
            );
        }
    };
    match engine.version(Duration::from_secs(5)) {
        Ok(version) => Check {
            name: "docker",
            ok: true,
            detail: format!(
                "Engine {version} answers at {}; {}; {}",
                sock.display(),
                pinned_images(&engine),
                crate::docker_cmd::execute_summary()
            ),
            fix: None,
        },
        Err(vs_sandbox::DockerError::Timeout { .. }) => fail(
            format!("the Engine at {} did not answer within 5 s", sock.display()),
            "check the Docker Engine, or use the host environment (bwrap)",
        ),
        Err(e) => fail(
            format!("no Engine at {}: {e}", sock.display()),
            "start the Docker Engine, check that this user may use it, or use the host environment (bwrap)",
        ),
    }
}

/// Which images pinned in the lock the Engine holds (by pinned ID and
/// layers), as one line.
fn pinned_images(engine: &vs_docker::Engine) -> String {
    let Ok(lock_path) = crate::docker_cmd::find_lock(None) else {
        return "no images.lock found, pinned images not checked".into();
    };
    let lock = match vs_image::Lock::load(&lock_path) {
        Ok(l) => l,
        Err(e) => return format!("cannot read {}: {e}", lock_path.display()),
    };
    let mut parts = Vec::new();
    for name in lock.images.keys() {
        let state = match crate::docker_cmd::pin_from_lock(&lock, name, &lock_path) {
            Ok(pin) => match engine.check_pinned(&pin) {
                Ok(id) => format!("{name} loaded ({id})"),
                Err(vs_sandbox::SandboxError::Docker(vs_sandbox::DockerError::ImageMissing {
                    ..
                })) => format!("{name} not loaded"),
                Err(e) => format!("{name} MISMATCH ({e})"),
            },
            Err(e) => format!("{name}: {e:#}"),
        };
        parts.push(state);
    }
    if parts.is_empty() {
        format!("{} pins no image", lock_path.display())
    } else {
        format!(
            "pinned images ({}): {}",
            lock_path.display(),
            parts.join(", ")
        )
    }
}

fn check_nix() -> Check {
    match Command::new("nix")
        .arg("--version")
        .stderr(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => Check {
            name: "nix",
            ok: true,
            detail: String::from_utf8_lossy(&o.stdout).trim().to_owned(),
            fix: None,
        },
        _ => Check {
            name: "nix",
            ok: false,
            detail: "nix was not found in PATH".into(),
            fix: Some(
                "install Nix (Debian: apt-get install nix-bin) to build images with the flake"
                    .into(),
            ),
        },
    }
}

/// The modal and skypilot run environments: the service's client in the
/// tool directory (pinned version) and its credentials on the host.
fn check_remote(service: vs_runtime::remote::Service) -> Check {
    let status = vs_runtime::remote::Clients::discover().status(service);
    let fixes: Vec<String> = [&status.installed, &status.configured]
        .into_iter()
        .filter_map(|r| r.as_ref().err().map(|m| m.fix.clone()))
        .collect();
    Check {
        name: match service {
            vs_runtime::remote::Service::Modal => "modal",
            vs_runtime::remote::Service::Skypilot => "skypilot",
        },
        ok: status.is_available(),
        detail: status.summary(),
        fix: (!fixes.is_empty()).then(|| fixes.join("; then ")),
    }
}

fn check_slurm() -> Check {
    match vs_runtime::broker::slurm::cluster_nodes() {
        Ok(nodes) if !nodes.is_empty() => Check {
            name: "slurm",
            ok: true,
            detail: format!(
                "controller answers; nodes: {}",
                nodes
                    .iter()
                    .map(|n| format!("{} {} (gres {})", n.name, n.state, n.gres))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            fix: None,
        },
        Ok(_) => Check {
            name: "slurm",
            ok: false,
            detail: "the controller answers but reports no node".into(),
            fix: Some("add NodeName lines to slurm.conf and start slurmd on the nodes".into()),
        },
        Err(e) => Check {
            name: "slurm",
            ok: false,
            detail: e.to_string(),
            fix: Some(
                "for the slurm run environment: install Slurm's client tools and reach a controller (scripts/slurm-up.sh starts a one-node cluster here); see docs/slurm.md"
                    .into(),
            ),
        },
    }
}
