//! `vibesys run-env show`: which command runner and which confinement each
//! run environment uses, and `run-env eval` (see `remote_cmd`).

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use serde::Serialize;
use vs_runtime::environment::ALL_ENVIRONMENTS;
use vs_runtime::{EnvironmentDescription, RunEnvironment};

use crate::env_args::RunEnvArgs;
use crate::output::{print_json, print_text};

/// `vibesys run-env`.
#[derive(Debug, Args)]
pub struct RunEnvCmdArgs {
    #[command(subcommand)]
    command: RunEnvCommand,
}

#[derive(Debug, Subcommand)]
enum RunEnvCommand {
    /// Show which command runner and confinement an environment uses, and
    /// whether this build can run anything in it.
    Show {
        #[command(flatten)]
        env: RunEnvArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Dispatch one candidate's trusted check and measure to Modal or
    /// SkyPilot through the service's own client (docs/remote.md).
    Eval(crate::remote_cmd::EvalArgs),
}

#[derive(Serialize)]
struct RunEnvShow {
    default: &'static str,
    environments: Vec<EnvShow>,
}

/// One environment as shown: its description and, for a service, the
/// image its evaluation runs in (from the current directory's
/// `vibesys.toml`).
#[derive(Serialize)]
struct EnvShow {
    #[serde(flatten)]
    description: EnvironmentDescription,
    #[serde(skip_serializing_if = "Option::is_none")]
    image: Option<RemoteImage>,
}

/// The image a service runs the evaluation in, and whether it is the
/// pinned one from a registry.
#[derive(Serialize)]
struct RemoteImage {
    /// `[modal] image` / `[skypilot] image` as written, if set.
    configured: Option<String>,
    /// A registry reference by digest (`HOST/REPO@sha256:...`).
    by_digest: bool,
    /// What that means, for people.
    note: String,
}

const PUSH_HINT: &str = "push the pinned image with `vibesys image push ARCHIVE REF --lock images/images.lock` and name the printed REF@sha256:... (docs/remote.md)";

/// What `[modal] image` (`modal`) or `[skypilot] image` says about the
/// evaluation's image.
fn remote_image(
    env: RunEnvironment,
    remote: &vs_runtime::remote::config::RemoteConfig,
) -> Option<RemoteImage> {
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

/// Runs `vibesys run-env`.
pub fn run_env(args: RunEnvCmdArgs) -> anyhow::Result<u8> {
    let (env, json) = match args.command {
        RunEnvCommand::Show { env, json } => (env, json),
        RunEnvCommand::Eval(eval) => return crate::remote_cmd::run(eval),
    };
    let selected = env.resolve()?;
    let chosen: Vec<RunEnvironment> = match selected {
        Some(e) => vec![e],
        None => ALL_ENVIRONMENTS.to_vec(),
    };
    // The services' images from the current directory's vibesys.toml;
    // none there: the defaults.
    let remote = std::env::current_dir()
        .ok()
        .and_then(|d| vs_runtime::remote::config::load_remote(&d).ok())
        .unwrap_or_default();
    let environments: Vec<EnvShow> = chosen
        .into_iter()
        .map(|e| EnvShow {
            description: e.describe(),
            image: remote_image(e, &remote),
        })
        .collect();
    let show = RunEnvShow {
        default: RunEnvironment::default().name(),
        environments,
    };
    if json {
        print_json(&serde_json::to_value(&show)?)?;
        return Ok(0);
    }
    let mut text = String::new();
    for e in &show.environments {
        let d = &e.description;
        let default = if d.name == show.default {
            " (default)"
        } else {
            ""
        };
        let status = match &d.availability {
            vs_runtime::Availability::Available => "available".to_owned(),
            vs_runtime::Availability::NotAvailable { reason } => {
                format!("not available here: {reason}")
            }
        };
        let _ = writeln!(
            text,
            "{}{default}\n  runner:      {}\n  confinement: {}\n  evaluation:  {}\n  status:      {status}",
            d.name, d.runner, d.confinement, d.evaluation
        );
        if let Some(i) = &e.image {
            let _ = writeln!(text, "  image:       {}", i.note);
        }
    }
    print_text(&text)?;
    Ok(0)
}
