//! `vibesys run-env show`: which command runner and which confinement
//! each run environment uses, whether this build can run it, and for a
//! service the image its evaluation runs in.

use std::fmt;
use std::path::Path;

use serde::Serialize;

use crate::environment::{ALL_ENVIRONMENTS, Availability, EnvironmentDescription, RunEnvironment};
use crate::remote::config::RemoteConfig;

/// The environments shown, and the default's name.
#[derive(Debug, Serialize)]
pub struct EnvironmentReport {
    /// The default environment's name.
    pub default: &'static str,
    /// The environments, in [`ALL_ENVIRONMENTS`] order (or the one
    /// selected).
    pub environments: Vec<EnvironmentShown>,
}

/// One environment as shown: its description and, for a service, the
/// image its evaluation runs in.
#[derive(Debug, Serialize)]
pub struct EnvironmentShown {
    /// What the environment uses and whether it is available.
    #[serde(flatten)]
    pub description: EnvironmentDescription,
    /// A service's evaluation image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<RemoteImage>,
}

/// The image a service runs the evaluation in, and whether it is the
/// pinned one from a registry.
#[derive(Debug, Serialize)]
pub struct RemoteImage {
    /// `[modal] image` / `[skypilot] image` as written, if set.
    pub configured: Option<String>,
    /// A registry reference by digest (`HOST/REPO@sha256:...`).
    pub by_digest: bool,
    /// What that means, for people.
    pub note: String,
}

const PUSH_HINT: &str = "push the pinned image with `vibesys image push ARCHIVE REF --lock images/images.lock` and name the printed REF@sha256:... (docs/remote.md)";

impl EnvironmentReport {
    /// The `selected` environment (`None`: every one), the services'
    /// images from `project`'s `vibesys.toml` (none there, or no
    /// project: the defaults).
    pub fn new(selected: Option<RunEnvironment>, project: Option<&Path>) -> Self {
        let chosen: Vec<RunEnvironment> = match selected {
            Some(e) => vec![e],
            None => ALL_ENVIRONMENTS.to_vec(),
        };
        let remote = project
            .and_then(|d| crate::remote::config::load_remote(d).ok())
            .unwrap_or_default();
        let environments = chosen
            .into_iter()
            .map(|e| EnvironmentShown {
                description: e.describe(),
                image: remote_image(e, &remote),
            })
            .collect();
        Self {
            default: RunEnvironment::default().name(),
            environments,
        }
    }
}

/// What `[modal] image` (`modal`) or `[skypilot] image` says about the
/// evaluation's image.
fn remote_image(env: RunEnvironment, remote: &RemoteConfig) -> Option<RemoteImage> {
    let (configured, default) = match env {
        RunEnvironment::Modal => (remote.modal.image.clone(), "Modal's debian_slim"),
        RunEnvironment::Skypilot => (remote.skypilot.image.clone(), "the cloud's default image"),
        _ => return None,
    };
    let reference = match (&configured, env) {
        (Some(i), RunEnvironment::Skypilot) => i.strip_prefix("docker:").map(str::to_owned),
        (Some(i), _) => Some(i.clone()),
        (None, _) => None,
    };
    let by_digest = reference
        .as_deref()
        .and_then(|r| r.parse::<vs_image::registry::ImageRef>().ok())
        .is_some_and(|r| r.digest().is_some());
    let note = match (&configured, &reference, by_digest) {
        (None, _, _) => format!("{default}: the pinned image is not in a registry; {PUSH_HINT}"),
        (Some(c), None, _) => format!("{c} is not a registry image; {PUSH_HINT}"),
        (Some(_), Some(r), false) => {
            format!("{r} is not pinned by digest (a tag can move); {PUSH_HINT}")
        }
        (Some(_), Some(r), true) => format!("{r}: in a registry, by digest"),
    };
    Some(RemoteImage {
        configured,
        by_digest,
        note,
    })
}

impl fmt::Display for EnvironmentReport {
    /// Each environment: its name (and whether it is the default), runner,
    /// confinement, evaluation, status and image.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.environments {
            let d = &e.description;
            let default = if d.name == self.default {
                " (default)"
            } else {
                ""
            };
            let status = match &d.availability {
                Availability::Available => "available".to_owned(),
                Availability::NotAvailable { reason } => format!("not available here: {reason}"),
            };
            writeln!(
                f,
                "{}{default}\n  runner:      {}\n  confinement: {}\n  evaluation:  {}\n  status:      {status}",
                d.name, d.runner, d.confinement, d.evaluation
            )?;
            if let Some(i) = &e.image {
                writeln!(f, "  image:       {}", i.note)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_without_an_image_is_told_to_push_one() {
        let report = EnvironmentReport::new(Some(RunEnvironment::Modal), None);
        let text = report.to_string();
        assert!(text.starts_with("modal\n  runner:"), "{text}");
        assert!(
            text.contains(
                "  image:       Modal's debian_slim: the pinned image is not in a registry; push"
            ),
            "{text}"
        );
        let docker = EnvironmentReport::new(Some(RunEnvironment::Docker), None);
        assert!(docker.to_string().starts_with("docker (default)\n"));
        assert!(docker.environments[0].image.is_none());
    }

    #[test]
    fn a_skypilot_image_by_digest_is_pinned() {
        let mut remote = RemoteConfig::default();
        remote.skypilot.image = Some(format!("docker:ghcr.io/o/i@sha256:{}", "a".repeat(64)));
        let image = remote_image(RunEnvironment::Skypilot, &remote).unwrap();
        assert!(image.by_digest, "{}", image.note);
        remote.skypilot.image = Some("docker:ghcr.io/o/i:latest".into());
        let image = remote_image(RunEnvironment::Skypilot, &remote).unwrap();
        assert!(!image.by_digest);
        assert!(
            image.note.contains("not pinned by digest"),
            "{}",
            image.note
        );
    }
}
