//! `vibesys run-env eval`: dispatch one candidate's trusted evaluation to
//! Modal or SkyPilot through the service's own client, without the run
//! command (the same library call `vibesys run` makes).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Context;
use clap::Args;
use vs_runtime::RunId;
use vs_runtime::remote::commit_eval::{self, CommitEval};

use crate::env_args::RunEnvArgs;
use crate::output::{print_json, print_text};
use crate::project::dir_or_cwd;

/// Exit status when the evaluation ran and the candidate failed it.
const EXIT_EVALUATION_FAILED: u8 = 1;

/// Arguments of `vibesys run-env eval`.
#[derive(Debug, Args)]
#[command(after_help = "\
Checks out --commit (any revision of the project) in a fresh worktree and dispatches its
trusted evaluation to the service: [check] argv (exit 0 = correct), then, when it passed,
[measure] argv (prints one JSON object of metrics), each with its timeout_secs, from the
project's own vibesys.toml. [skypilot] (cloud, region, accelerators, image, use_spot,
launcher, build) and [modal] (gpu, image, python_version, timeout_secs, build) configure where
it runs; unknown keys and invalid values are refused naming the key before any client is
called. With build = true the task's [build] argv runs first on the service, its declared
outputs are verified there (regular file, size, sha256; recorded in build.json), and a
failed build stops the evaluation before check.

The clients are the host's `sky` and `modal` from $VIBESYS_TOOLS/remote-clients
(scripts/remote-clients.sh installs them); the services' credentials stay on the host.
Written below .vibesys/state/runs/RUN/remote/N/: task.yaml (SkyPilot) or evaluate.py (Modal),
client.log, result.json once the service reported (and build.json with a build). Ctrl-C stops the client and tears
down the SkyPilot cluster. See docs/remote.md.

Exit status: 0 the candidate passed (build when asked, check 0, measure 0 with a JSON
object); 1 it failed the evaluation (result.json says how); 125 vibesys or the client failed (e.g. no login:
the message names the credential and the command that fixes it; nothing recorded).")]
pub struct EvalArgs {
    #[command(flatten)]
    env: RunEnvArgs,
    /// The project directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// The run id (^[a-z0-9][a-z0-9._-]{0,127}$).
    #[arg(long, value_name = "RUN_ID")]
    run: String,
    /// The candidate number.
    #[arg(long, value_name = "N")]
    candidate: u32,
    /// The candidate's measured commit (any git revision).
    #[arg(long, value_name = "REV")]
    commit: String,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `vibesys run-env eval`.
pub fn run(args: EvalArgs) -> anyhow::Result<u8> {
    let service = commit_eval::service(args.env.resolve()?)?;
    let run = RunId::new(&args.run)?;
    let project = dir_or_cwd(args.project.as_deref())?;
    let eval = CommitEval::prepare(&project, run, args.candidate, &args.commit, service)?;
    let cancel = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&cancel))
            .context("cannot install the SIGINT/SIGTERM handler")?;
    }
    let outcome = eval.dispatch(&cancel, !args.json)?;
    if args.json {
        print_json(&serde_json::to_value(&outcome)?)?;
    } else {
        print_text(&outcome.to_string())?;
    }
    Ok(if outcome.passed {
        0
    } else {
        EXIT_EVALUATION_FAILED
    })
}
