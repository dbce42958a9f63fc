//! How a trusted candidate build is confined and run, as one library
//! call: the checkout's settings ([`ProjectSettings::for_checkout`]), the
//! mode the confinement resolver gives for a build or an evaluation
//! ([`OperatorChoice::resolve`]), the backend [`vs_sandbox::select`]
//! chooses for it (the run's container, or bwrap or Landlock on the
//! host), enforcement required, and the build with a
//! fixed environment ([`BuildCheckout::build`]).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use vs_docker::DockerOptions;
use vs_sandbox::config::PolicyConfig;
use vs_sandbox::{
    AnySandbox, ConfineMode, Enforcement, OperatorChoice, Purpose, Resolved, RunPlace, Workspace,
    select,
};

use crate::build::{BuildCheckout, BuildSpec, TrustedBuild};
use crate::error::{Result, RuntimeError};
use crate::id::{CandidateId, RunId};
use crate::run::EvalPlace;
use crate::settings::ProjectSettings;
use crate::state::StateLayout;

/// Where a build is confined.
#[derive(Debug)]
pub enum BuildConfinement {
    /// On the host: bwrap (`Auto`, `Bwrap`) or Landlock.
    Host(ConfineMode),
    /// In a container of the run's pinned image.
    Docker(Box<DockerOptions>),
}

/// The confinement of a build of `program` in `checkout`, under the
/// project's `config` with `protected` read-only: enforcement required, no
/// devices, the checkout's root as the working directory. `env` is the
/// caller's environment (bwrap and the program's host resources are found
/// through its `PATH`).
pub fn build_confinement(
    checkout: &Path,
    config: PolicyConfig,
    protected: &[PathBuf],
    program: &OsStr,
    how: BuildConfinement,
    env: &[(OsString, OsString)],
    helper: PathBuf,
) -> Result<AnySandbox> {
    let settings = ProjectSettings::for_checkout(Workspace::open(checkout)?, config, protected)?;
    let mut request = settings.sandbox_request(program, env, None, helper);
    request.devices = Vec::new();
    let (choice, place) = match how {
        BuildConfinement::Host(mode) => (OperatorChoice::decided(mode), RunPlace::Host),
        BuildConfinement::Docker(options) => {
            request.docker = Some(options);
            (
                OperatorChoice::decided(ConfineMode::Auto),
                RunPlace::Container("docker"),
            )
        }
    };
    let Resolved { mode, enforcement } =
        choice.resolve(Purpose::Build, place, Enforcement::Required)?;
    select(request, mode, enforcement)?.ok_or_else(|| {
        RuntimeError::Sandbox(
            vs_sandbox::SandboxUnavailableError::new(
                "build confinement",
                "no confinement was set up",
                "a candidate build never runs unconfined",
            )
            .into(),
        )
    })
}

/// What a build or an evaluation of `run` keeps read-only: `[task]
/// protected`, `[gate] protect` and the run's baseline roots.
pub fn protected_paths(layout: &StateLayout, run: &RunId) -> Result<Vec<PathBuf>> {
    Ok(crate::gate::ProtectedSet::for_build(layout, run)?
        .map(|set| set.roots().iter().map(PathBuf::from).collect())
        .unwrap_or_default())
}

/// What confines one evaluation command on the host.
#[derive(Debug)]
pub struct EvalConfineRequest<'a> {
    /// The evaluation's checkout and `HOME`.
    pub place: EvalPlace<'a>,
    /// The project's `[sandbox]`, from the operator's project.
    pub config: PolicyConfig,
    /// Kept read-only ([`protected_paths`]).
    pub protected: &'a [PathBuf],
    /// The command's program.
    pub program: &'a OsStr,
    /// bwrap (`Auto`, `Bwrap`) or Landlock.
    pub mode: ConfineMode,
    /// The caller's environment (for `PATH` and the host resources).
    pub env: &'a [(OsString, OsString)],
    /// The launch helper (the vibesys executable).
    pub helper: PathBuf,
    /// Keep the network (`[check] network` / `[measure] network`).
    pub network: bool,
    /// The run's accelerator device nodes.
    pub devices: Vec<PathBuf>,
}

/// The confinement of one evaluation command on the host: the checkout as
/// the workspace (writable), the protected paths and the project's
/// `[sandbox]` paths read-only, the run state hidden (everything outside
/// the checkout is, but host resources: the project and its run state are
/// not bound), the fresh `HOME` the only other writable path, no network
/// unless asked for, the run's devices; enforcement required.
pub fn evaluation_confinement(request: EvalConfineRequest<'_>) -> Result<AnySandbox> {
    let settings = ProjectSettings::for_checkout(
        Workspace::open(request.place.checkout)?,
        request.config,
        request.protected,
    )?;
    let mut confine = settings.sandbox_request(request.program, request.env, None, request.helper);
    confine.network = request.network;
    confine.devices = request.devices;
    confine.state = vs_sandbox::ProviderState {
        writable: vec![request.place.home.to_path_buf()],
        ..Default::default()
    };
    let Resolved { mode, enforcement } = OperatorChoice::decided(request.mode).resolve(
        Purpose::Evaluation,
        RunPlace::Host,
        Enforcement::Required,
    )?;
    select(confine, mode, enforcement)?.ok_or_else(|| {
        RuntimeError::Sandbox(
            vs_sandbox::SandboxUnavailableError::new(
                "evaluation confinement",
                "no confinement was set up",
                "check and measure never run candidate code unconfined",
            )
            .into(),
        )
    })
}

/// The confinement of one evaluation command in a fresh container of the
/// run's pinned image (`options`: the image, a run id of its own, the
/// run's devices): nothing the agent left running or wrote outside its
/// commit reaches it. The checkout's policy is the host's, the fresh
/// `HOME` is mounted read-write at its own path, the network is the
/// command's; the container is resolved and started by
/// [`vs_sandbox::select`] as every other confinement. `request.mode` and
/// `request.devices` are the host's and are not read.
pub fn evaluation_container(
    request: EvalConfineRequest<'_>,
    mut options: DockerOptions,
) -> Result<vs_docker::DockerSandbox> {
    let settings = ProjectSettings::for_checkout(
        Workspace::open(request.place.checkout)?,
        request.config,
        request.protected,
    )?;
    options.network = request.network;
    options.extra_mounts.push(vs_docker::ExtraMount {
        source: request.place.home.to_path_buf(),
        target: request.place.home.to_path_buf(),
        read_only: false,
    });
    let mut confine = settings.sandbox_request(request.program, request.env, None, request.helper);
    // The container's network is the command's (open or none): no egress
    // door is planned for it.
    confine.egress = None;
    confine.docker = Some(Box::new(options));
    let Resolved { mode, enforcement } = OperatorChoice::decided(ConfineMode::Auto).resolve(
        Purpose::Evaluation,
        RunPlace::Container("docker"),
        Enforcement::Required,
    )?;
    let started = match select(confine, mode, enforcement)? {
        Some(AnySandbox::Docker(sandbox)) => sandbox
            .into_any()
            .downcast::<vs_docker::DockerSandbox>()
            .ok(),
        _ => None,
    };
    match started {
        Some(sandbox) => Ok(*sandbox),
        None => Err(RuntimeError::Sandbox(
            vs_sandbox::SandboxUnavailableError::new(
                "evaluation confinement",
                "no container was started",
                "check and measure never run candidate code unconfined",
            )
            .into(),
        )),
    }
}

/// The whole environment of a build: `PATH` (the caller's, else a fixed
/// one), `HOME` (the checkout) and a fixed locale, plus `extra`; nothing
/// else of the caller's reaches it.
pub fn build_env(
    path_var: Option<OsString>,
    checkout: &Path,
    extra: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let mut env = vec![
        (
            "PATH".into(),
            path_var.unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
        ),
        ("HOME".into(), checkout.as_os_str().to_owned()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    env.extend(extra.iter().cloned());
    env
}

/// One trusted build, as `vibesys build` asks for it.
#[derive(Debug)]
pub struct BuildRequest<'a> {
    /// The project (its run state holds the task and the records).
    pub layout: &'a StateLayout,
    /// The task's `[build]`, from the operator's project.
    pub spec: &'a BuildSpec,
    /// The project's `[sandbox]`, from the operator's project.
    pub config: PolicyConfig,
    /// The run the build belongs to.
    pub run: &'a RunId,
    /// The revision to build.
    pub commit: &'a str,
    /// Where it is confined.
    pub confinement: BuildConfinement,
    /// The caller's environment (for `PATH` and the host resources).
    pub env: &'a [(OsString, OsString)],
    /// Variables added to the build's fixed environment.
    pub extra_env: Vec<(OsString, OsString)>,
    /// The launch helper (the vibesys executable).
    pub helper: PathBuf,
    /// The checkout's name, when the caller had to know it beforehand
    /// ([`BuildCheckout::fresh_id`]); `None`: a fresh one.
    pub checkout: Option<CandidateId>,
}

/// Runs a trusted build: the task's `[build]` from the operator's
/// project, a fresh checkout of `commit`, the build confined there, its
/// outputs verified and recorded outside every workspace. Returns the
/// commit checked out and the outcome (a rejected build is an `Err` of
/// [`BuildError::BuildFailed`](crate::BuildError::BuildFailed), `BuildTimedOut`, `OutputRejected` or
/// `ProtectedPathsChanged`).
pub fn run_build(request: BuildRequest<'_>) -> (Option<String>, Result<TrustedBuild>) {
    let mut commit = None;
    let outcome = (|| {
        let spec = request.spec;
        let checkout = match &request.checkout {
            Some(id) => BuildCheckout::create_as(request.layout, request.run, id, request.commit)?,
            None => BuildCheckout::create(request.layout, request.run, request.commit)?,
        };
        commit = Some(checkout.commit().to_owned());
        let program = spec.argv().first().map(OsString::from).unwrap_or_default();
        let protected = protected_paths(request.layout, request.run)?;
        let sandbox = build_confinement(
            checkout.path(),
            request.config,
            &protected,
            &program,
            request.confinement,
            request.env,
            request.helper,
        )?;
        let path_var = request
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        let root = std::fs::canonicalize(checkout.path())
            .map_err(|e| RuntimeError::io("resolve", checkout.path(), e))?;
        let child_env = build_env(path_var, &root, &request.extra_env);
        checkout.build(spec, &sandbox, &child_env)
    })();
    (commit, outcome)
}
