//! `vibesys doctor`: which confinement mechanisms and run environments
//! work here, and why not. The host's own mechanisms are vs-sandbox's
//! checks; Docker (and the pinned images it holds), Nix, Slurm, the
//! remote services and the project's git history are checked here.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use vs_docker::{Engine, ImagePin, engine_socket};
use vs_sandbox::doctor::{Check, DoctorReport, check_bwrap, check_landlock, check_processes};
use vs_sandbox::{DockerError, SandboxError};

use crate::policy_show::{HISTORY_FIX, hidden_in_history};
use crate::remote::{Clients, Service};
use crate::settings::ProjectSettings;

/// Every check, bubblewrap's (the default mechanism's) first; `helper` is
/// this executable (or why it cannot be located), `project` the project
/// in the current directory when it is one.
pub fn report(helper: &Result<PathBuf, String>, project: Option<&ProjectSettings>) -> DoctorReport {
    let mut checks = vec![
        check_bwrap(std::env::var_os("PATH").as_deref()),
        check_landlock(),
        check_processes(),
        check_docker(helper),
        check_nix(),
        check_slurm(),
        check_remote(Service::Modal),
        check_remote(Service::Skypilot),
    ];
    checks.extend(project.map(check_history));
    DoctorReport { checks }
}

/// Hidden paths of the project whose content git history still holds.
fn check_history(project: &ProjectSettings) -> Check {
    let found = hidden_in_history(project);
    if found.is_empty() {
        Check::ok(
            "history",
            "no hidden path of this project is in git history",
        )
    } else {
        Check::fail(
            "history",
            format!(
                "hidden paths in git history (readable through .git/objects): {}",
                found.join(" ")
            ),
            HISTORY_FIX,
        )
    }
}

/// The Docker Engine answers; which pinned images it holds, and how
/// framework commands would reach a container.
fn check_docker(helper: &Result<PathBuf, String>) -> Check {
    let sock = engine_socket();
    let engine = match Engine::connect() {
        Ok(e) => e,
        Err(e) => {
            return Check::fail(
                "docker",
                format!("no Engine at {}: {e}", sock.display()),
                "start the Docker Engine, or use the host environment (bwrap)",
            );
        }
    };
    match engine.version(Duration::from_secs(5)) {
        Ok(version) => Check::ok(
            "docker",
            format!(
                "Engine {version} answers at {}; {}; {}",
                sock.display(),
                pinned_images(&engine),
                execute_summary(helper)
            ),
        ),
        Err(DockerError::Timeout { .. }) => Check::fail(
            "docker",
            format!("the Engine at {} did not answer within 5 s", sock.display()),
            "check the Docker Engine, or use the host environment (bwrap)",
        ),
        Err(e) => Check::fail(
            "docker",
            format!("no Engine at {}: {e}", sock.display()),
            "start the Docker Engine, check that this user may use it, or use the host environment (bwrap)",
        ),
    }
}

/// Which images pinned in the lock the Engine holds (by pinned ID and
/// layers), as one line.
fn pinned_images(engine: &Engine) -> String {
    let Ok(lock_path) = crate::container::find_lock(None) else {
        return "no images.lock found, pinned images not checked".into();
    };
    let lock = match vs_image::Lock::load(&lock_path) {
        Ok(l) => l,
        Err(e) => return format!("cannot read {}: {e}", lock_path.display()),
    };
    let parts: Vec<String> = lock
        .images
        .iter()
        .map(
            |(name, locked)| match engine.check_pinned(&ImagePin::from_locked(name, locked)) {
                Ok(id) => format!("{name} loaded ({id})"),
                Err(SandboxError::Docker(DockerError::ImageMissing { .. })) => {
                    format!("{name} not loaded")
                }
                Err(e) => format!("{name} MISMATCH ({e})"),
            },
        )
        .collect();
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

/// How framework commands would reach a run's container, as one phrase.
fn execute_summary(helper: &Result<PathBuf, String>) -> String {
    match helper {
        Ok(exe) => crate::container_options::command_path_summary(exe),
        Err(e) => e.clone(),
    }
}

/// Nix, which builds images with the flake.
fn check_nix() -> Check {
    match Command::new("nix")
        .arg("--version")
        .stderr(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => {
            Check::ok("nix", String::from_utf8_lossy(&o.stdout).trim().to_owned())
        }
        _ => Check::fail(
            "nix",
            "nix was not found in PATH",
            "install Nix (Debian: apt-get install nix-bin) to build images with the flake",
        ),
    }
}

/// The modal and skypilot run environments: the service's client in the
/// tool directory (pinned version) and its credentials on the host.
fn check_remote(service: Service) -> Check {
    let status = Clients::discover().status(service);
    let fixes: Vec<String> = [&status.installed, &status.configured]
        .into_iter()
        .filter_map(|r| r.as_ref().err().map(|m| m.fix.clone()))
        .collect();
    Check {
        name: match service {
            Service::Modal => "modal",
            Service::Skypilot => "skypilot",
        },
        ok: status.is_available(),
        detail: status.summary(),
        fix: (!fixes.is_empty()).then(|| fixes.join("; then ")),
    }
}

/// The Slurm controller answers and reports nodes.
fn check_slurm() -> Check {
    match crate::broker::slurm::cluster_nodes() {
        Ok(nodes) if !nodes.is_empty() => Check::ok(
            "slurm",
            format!(
                "controller answers; nodes: {}",
                nodes
                    .iter()
                    .map(|n| format!("{} {} (gres {})", n.name, n.state, n.gres))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        Ok(_) => Check::fail(
            "slurm",
            "the controller answers but reports no node",
            "add NodeName lines to slurm.conf and start slurmd on the nodes",
        ),
        Err(e) => Check::fail(
            "slurm",
            e.to_string(),
            "for the slurm run environment: install Slurm's client tools and reach a controller (scripts/slurm-up.sh starts a one-node cluster here); see docs/slurm.md",
        ),
    }
}
