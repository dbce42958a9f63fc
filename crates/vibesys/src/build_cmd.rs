//! `vibesys build`: the trusted candidate build (arguments → settings →
//! `vs_runtime::build_confine::run_build` → print).

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{Args, ValueEnum};
use serde::Serialize;
use vs_docker::DockerOptions;
use vs_runtime::broker::child::{self, BrokerChild, BrokerStart};
use vs_runtime::build_confine::{BuildConfinement, BuildRequest, run_build};
use vs_runtime::{
    BuildError, BuildRecord, BuildSpec, RunEnvironment, RunId, RuntimeError, StateLayout,
    open_run_environment,
};
use vs_sandbox::ConfineMode;
use vs_sandbox::config::PolicyConfig;
use vs_sandbox::controls::SANDBOX_ENV;
use vs_sandbox::{Enforcement, OperatorChoice, Purpose};

use std::fmt::Write as _;

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

/// A build's outcome in `--json` (`verified`, `rejected`).
#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum BuildStatus {
    Verified,
    Rejected,
}

#[derive(Serialize)]
struct BuildJson<'a> {
    status: BuildStatus,
    run_environment: &'static str,
    record_path: Option<PathBuf>,
    record: Option<&'a BuildRecord>,
    error: Option<String>,
}

/// Runs `vibesys build`.
pub fn run(args: BuildArgs) -> anyhow::Result<u8> {
    let environment = args.env.resolve()?.unwrap_or_default();
    let mode = build_mode(&args, environment)?;
    let run = RunId::new(&args.run)?;
    let project = match &args.project {
        Some(p) => p.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let opened = open_run_environment(&project, environment, &run)?;
    opened.require_available()?;
    if !matches!(
        environment,
        RunEnvironment::Host | RunEnvironment::Docker | RunEnvironment::Slurm
    ) {
        bail!("the {environment} run environment does not run trusted builds in this build");
    }
    let layout = StateLayout::open(&project)?;
    let spec = BuildSpec::load(&layout)?;
    let config = PolicyConfig::load(layout.project())?;
    // For docker, the pinned image is checked before anything is checked out.
    let mut docker = match environment {
        RunEnvironment::Docker | RunEnvironment::Slurm => Some(docker_options(&layout, &config)?),
        _ => None,
    };
    // The checkout is named before anything starts: the slurm build's
    // broker socket is bound to it.
    let checkout = vs_runtime::BuildCheckout::fresh_id()?;
    // slurm: a broker of the build's own, stopped (with every job it
    // submitted) when this function returns, after the container. Its one
    // socket in the container runs jobs only in the build's checkout (never
    // the project or a candidate's worktree: the build runs candidate
    // code), and it lists and cancels only that checkout's jobs, never
    // those of a live run of the same id.
    let broker = match (environment, docker.as_mut()) {
        (RunEnvironment::Slurm, Some(options)) => {
            let broker = BrokerChild::start(BrokerStart {
                helper: &crate::project::helper_exe()?,
                project: layout.project(),
                run: run.as_str(),
                agent_gpu: args.env.slurm_gpu_alias(),
                candidates: 0,
                checkout: Some(checkout.as_str()),
                allow_hosts: &[],
                no_network: false,
            })?;
            let socket = broker
                .checkout_socket()
                .context("the build's broker serves no socket for its checkout")?;
            child::editor_options(options, socket)?;
            Some(broker)
        }
        _ => None,
    };
    let mut extra_env = Vec::new();
    if broker.is_some() {
        extra_env.push((
            child::BROKER_SOCKET_ENV.into(),
            child::AGENT_SOCKET_IN_CONTAINER.into(),
        ));
    }
    let (commit, outcome) = run_build(BuildRequest {
        layout: &layout,
        spec: &spec,
        config,
        run: &run,
        commit: &args.commit,
        confinement: match docker {
            Some(options) => BuildConfinement::Docker(Box::new(options)),
            None => BuildConfinement::Host(mode),
        },
        env: &host_env(),
        extra_env,
        helper: helper_exe()?,
        checkout: Some(checkout),
    });
    drop(broker);
    let commit = commit.unwrap_or_else(|| args.commit.clone());
    report(&args, environment, &commit, outcome)
}

/// The host mechanism of a build, checked against its run environment
/// before anything is checked out or run (a build never runs unconfined).
fn build_mode(args: &BuildArgs, environment: RunEnvironment) -> anyhow::Result<ConfineMode> {
    let flag = match args.confine {
        BuildConfine::Auto => ConfineMode::Auto,
        BuildConfine::Bwrap => ConfineMode::Bwrap,
        BuildConfine::Landlock => ConfineMode::Landlock,
    };
    let resolved = OperatorChoice::read(flag, std::env::var_os(SANDBOX_ENV).as_deref())?.resolve(
        Purpose::Build,
        environment.confine_place(environment.name()),
        Enforcement::Required,
    )?;
    Ok(resolved.mode)
}

/// Prints a build's outcome (text or `--json`) and maps it to the exit
/// status: 0 verified, 1 rejected; other failures are vibesys's own.
fn report(
    args: &BuildArgs,
    environment: RunEnvironment,
    commit: &str,
    outcome: vs_runtime::Result<vs_runtime::TrustedBuild>,
) -> anyhow::Result<u8> {
    match outcome {
        Ok(build) => {
            print_build_output(build.output());
            if args.json {
                print_json(&serde_json::to_value(BuildJson {
                    status: BuildStatus::Verified,
                    run_environment: environment.name(),
                    record_path: Some(build.path()),
                    record: Some(build.record()),
                    error: None,
                })?)?;
            } else {
                let r = build.record();
                let mut text = format!(
                    "verified build of {} in run {} ({}), recorded in {}\n",
                    r.commit,
                    r.run_id,
                    r.confinement,
                    build.path().display()
                );
                for o in &r.outputs {
                    let _ = writeln!(
                        text,
                        "  {}  sha256:{}  {} bytes  -> .vibesys/state/{}",
                        o.path, o.sha256, o.size, o.artifact
                    );
                }
                print_text(&text)?;
            }
            Ok(0)
        }
        Err(
            e @ RuntimeError::Build(
                BuildError::BuildFailed { .. }
                | BuildError::BuildTimedOut { .. }
                | BuildError::OutputRejected { .. }
                | BuildError::ProtectedPathsChanged { .. },
            ),
        ) => {
            eprintln!("vibesys: error: build of {commit} rejected: {e}");
            if args.json {
                print_json(&serde_json::to_value(BuildJson {
                    status: BuildStatus::Rejected,
                    run_environment: environment.name(),
                    record_path: None,
                    record: None,
                    error: Some(e.to_string()),
                })?)?;
            }
            Ok(EXIT_BUILD_REJECTED)
        }
        Err(e) => Err(e.into()),
    }
}

/// What the build printed, on stderr: each line behind `build| `, with
/// control characters escaped (the build is candidate code).
fn print_build_output(output: &str) {
    for line in output.lines() {
        eprintln!(
            "build| {}",
            vs_runtime::run::report::terminal_safe_cut(line, usize::MAX)
        );
    }
}

/// The Docker options of a build: the pinned editor image (or
/// `VIBESYS_DOCKER_IMAGE`) from the lock, a container id of its own.
fn docker_options(layout: &StateLayout, config: &PolicyConfig) -> anyhow::Result<DockerOptions> {
    docker_options_with_id(layout, config, crate::docker_cmd::fresh_run_id("build"))
}

/// As [`docker_options`], with the container's run id given.
pub(crate) fn docker_options_with_id(
    layout: &StateLayout,
    config: &PolicyConfig,
    run_id: String,
) -> anyhow::Result<DockerOptions> {
    let mut options = crate::docker_cmd::base_options(None, Some(layout.project()), run_id)?;
    options.network = config.network.unwrap_or(true);
    Ok(options)
}
