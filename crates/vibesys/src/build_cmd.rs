//! `vibesys build`: the trusted candidate build (arguments → settings →
//! `vs_runtime::build_run::trusted_build` → print).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use vs_runtime::build_run::{BuildSettings, trusted_build};
use vs_sandbox::ConfineMode;

use crate::env_args::RunEnvArgs;
use crate::output::{print_json, print_text};
use crate::project::{helper_exe, host_env};

/// Exit status when the build ran but did not produce verified outputs.
const EXIT_BUILD_REJECTED: u8 = 1;

/// The `--confine` values of `build`: never docker or none here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BuildConfine {
    /// Follow VIBESYS_AGENT_SANDBOX (default: bubblewrap).
    Auto,
    /// bubblewrap: namespaces, read-only host, masked hidden paths.
    Bwrap,
    /// Landlock: weaker; read-only and hidden paths are NOT enforced.
    Landlock,
}

/// Arguments of `vibesys build`.
#[derive(Debug, Args)]
#[command(after_help = "\
Runs the [build] argv of the project's vibesys.toml (argv = [...], outputs = [...],
optional timeout_secs) under agent confinement in a fresh checkout of --commit, then
verifies each declared output (inside the checkout, no symlink on its path, a regular file)
and records its sha256 in .vibesys/state/runs/RUN/builds/COMMIT.json; the verified bytes are
copied read-only to .vibesys/state/runs/RUN/artifacts/SHA256. The task ([build], [gate] protect)
comes from the project's own vibesys.toml, never from the commit built. Protected paths
([gate] protect, and the run's gate baseline) are scanned in the checkout before and after
the build: a build that changes, adds or removes one (other than a declared output) is
rejected, naming each. vibesys's own git calls ignore system and global git configuration,
neutralize the repository's command-valued keys (hooks, filters, fsmonitor, ...) and refuse
includes (see docs/sandboxing.md).

Run environments: docker (default) confines the build in a container of its own from the
pinned editor image (VIBESYS_DOCKER_IMAGE, VIBESYS_IMAGES_LOCK); host uses bubblewrap or
Landlock (--confine); slurm starts the run's broker and builds in the editor container as
docker does, with the broker's agent socket at /run/vibesys/agent.sock (no devices; jobs run
confined on compute nodes, see docs/slurm.md); modal and skypilot: this command does not
dispatch a build; with [modal] build = true or [skypilot] build = true in vibesys.toml the
build runs on the service before check and measure, in `vibesys run` and `vibesys run-env
eval` (see docs/remote.md).
A build never runs unconfined: with VIBESYS_AGENT_SANDBOX=off it refuses (exit 125), even
with --no-require-enforcement.

Exit status: 0 verified; 1 the build ran but failed, timed out, changed a protected path or
an output was rejected (nothing recorded); 125 vibesys could not run it (nothing ran).")]
pub struct BuildArgs {
    /// The project directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    project: Option<PathBuf>,
    /// The run id (^[a-z0-9][a-z0-9._-]{0,127}$).
    #[arg(long, value_name = "RUN_ID")]
    run: String,
    /// The commit (any git revision) to build.
    #[arg(long, value_name = "REV")]
    commit: String,
    /// The host run environment's mechanism; `auto` follows VIBESYS_AGENT_SANDBOX.
    #[arg(long, value_enum, default_value_t = BuildConfine::Auto)]
    confine: BuildConfine,
    #[command(flatten)]
    env: RunEnvArgs,
    /// Accepted for symmetry with `exec`; a build still never runs unconfined.
    #[arg(long = "no-require-enforcement")]
    no_require_enforcement: bool,
    /// Print the build record as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `vibesys build`.
pub fn run(args: BuildArgs) -> anyhow::Result<u8> {
    let report = trusted_build(BuildSettings {
        project: args.project.as_deref(),
        environment: args.env.resolve()?.unwrap_or_default(),
        run: &args.run,
        commit: &args.commit,
        confine: match args.confine {
            BuildConfine::Auto => ConfineMode::Auto,
            BuildConfine::Bwrap => ConfineMode::Bwrap,
            BuildConfine::Landlock => ConfineMode::Landlock,
        },
        slurm_gpu: args.env.slurm_gpu_alias(),
        helper: helper_exe()?,
        env: host_env(),
    })?;
    for line in report.output_lines() {
        eprintln!("{line}");
    }
    if !report.is_verified() {
        eprintln!("vibesys: error: {report}");
    }
    if args.json {
        print_json(&serde_json::to_value(report.json())?)?;
    } else if report.is_verified() {
        print_text(&report.to_string())?;
    }
    Ok(if report.is_verified() {
        0
    } else {
        EXIT_BUILD_REJECTED
    })
}
