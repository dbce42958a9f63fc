//! `vibesys run`: one command that runs a task's candidates end to end
//! (DESIGN.md sections 6 and 7).
//!
//! A run is prepared here ([`prepare_run`]): the task is read from the
//! operator's `vibesys.toml`, the gate baseline of the protected paths is
//! recorded and `runs/<id>/run.json` is written before anything runs.
//! [`execute_run`] then runs every unfinished candidate, up to `jobs` at a
//! time, each in its own worktree:
//!
//! 1. the agent's turn, confined by the run environment ([`RunHost`]);
//! 2. outside confinement, the framework commits the candidate's changes
//!    with the hardened git ([`crate::git`]), within the task's
//!    [`CommitLimits`], and keeps the commit as
//!    `refs/vibesys/runs/<run>/<n>`;
//! 3. the accuracy gate: a changed, added or removed protected path fails
//!    the candidate, naming each;
//! 4. the trusted build (`[build]`, when the task has one);
//! 5. `check` and `measure` in a fresh checkout of the commit holding the
//!    build's verified outputs, with a fresh `HOME` ([`EvalCheckout`]),
//!    each through the confined runner the environment opens for it
//!    ([`RunHost::evaluator`]); the checkout's protected paths are
//!    compared with the baseline afterwards.
//!
//! Every phase is recorded in `runs/<id>/candidates/<n>.json` as it ends.
//! One candidate's failure never stops another; a cancelled run (Ctrl-C)
//! leaves the unfinished candidates `running`, and [`open_for_resume`]
//! with [`execute_run`] restarts them in the recorded environment.
//!
//! What differs between environments (how the agent is confined, which
//! runner evaluates) is the [`RunHost`] the caller supplies; where a
//! run's evaluation is dispatched to a remote service is decided in one
//! place, [`dispatch::evaluation_route`]: `modal` and `skypilot` send the
//! candidate's commit to their service ([`crate::remote::dispatch`])
//! instead of asking the host for a runner.

pub mod accelerator;
pub mod dispatch;
pub mod evaluation;
pub mod launch;
pub mod record;
mod remote_eval;
pub mod report;
pub mod status;

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use vs_sandbox::runner::CancellationToken;
use vs_sandbox::{CommandResult, CommandRunner, CommandSpec, Confinement};

use crate::BuildError;
use crate::build::{BuildCheckout, BuildSpec, TrustedBuild};
use crate::environment::RunEnvironment;
use crate::error::{Result, RuntimeError};
use crate::fsutil::{ensure_dir_chain, random_bytes, write_atomic};
use crate::gate::{self, GateBaseline, GateEntry, ProtectedSet};
use crate::id::{CandidateId, RunId};
use crate::state::{STATE_DIR, StateLayout};
use crate::task::{CommitLimits, EvalCommand, MeasureSpec, TaskSpec};
use crate::worktree::CandidateWorktree;
use crate::{git, time};

pub use crate::run_error::RunError;
pub use evaluation::{EvalCheckout, EvalPlace};
pub use record::{
    CandidateRecord, CandidateState, ImageRecord, PhaseRecord, PhaseStatus, RunRecord, RunState,
    RunStore,
};

/// Most candidates one run may have.
pub const MAX_CANDIDATES: u32 = 64;
/// Most bytes of one JSON object `measure` may print.
pub const MAX_METRICS_BYTES: u64 = 1024 * 1024;
/// Most bytes of each output stream kept in a log.
const LOG_BYTES: usize = 256 * 1024;

/// An error of the caller's environment (starting a container, building
/// a confinement), carried through the run as text in the record.
pub type HostError = Box<dyn std::error::Error + Send + Sync>;

/// A candidate, as the [`RunHost`] sees it.
#[derive(Debug, Clone)]
pub struct CandidateContext<'a> {
    /// The run.
    pub run: &'a RunRecord,
    /// The candidate's number, 1-based.
    pub number: u32,
    /// Its worktree (the agent's workspace).
    pub worktree: &'a Path,
    /// `objective.md` in the worktree's `agent-visible/<run>/`.
    pub objective: &'a Path,
}

/// The agent's turn as it ended.
#[derive(Debug, Clone)]
pub struct AgentOutcome {
    /// Its exit status (128 + N when killed by signal N).
    pub exit_code: i32,
    /// Whether the run was cancelled while it ran.
    pub cancelled: bool,
    /// What it printed, bounded (kept as `logs/<n>-agent.log`).
    pub log: Vec<u8>,
    /// Connections the egress allow-list refused.
    pub egress_denials: Vec<record::EgressDenial>,
}

/// The confined command runner one `check` or `measure` goes through.
pub struct Evaluator {
    /// The runner (`DockerSandbox::execute` in the evaluation's container,
    /// the host backend on the host, a confined Slurm job).
    pub runner: Box<dyn CommandRunner + Send>,
    /// Where it runs, for the record (a container ID, `host, confined by
    /// bwrap`).
    pub location: String,
    /// `PATH` of the commands.
    pub path_var: OsString,
}

/// What a run environment supplies: the agent's confined turn, the
/// confinement of a trusted build, and the trusted command runner.
pub trait RunHost: Sync {
    /// Runs the agent's turn in `candidate.worktree`, confined with
    /// enforcement required; kills it (tree and container) when `cancel`
    /// fires.
    fn agent_turn(
        &self,
        candidate: &CandidateContext<'_>,
        cancel: &CancellationToken,
    ) -> std::result::Result<AgentOutcome, HostError>;

    /// The confinement of the trusted build in `checkout`.
    fn build_confinement(
        &self,
        candidate: &CandidateContext<'_>,
        checkout: &Path,
    ) -> std::result::Result<Box<dyn Confinement>, HostError>;

    /// The confined runner for one evaluation `command` (`check` or
    /// `measure`) in `place`: a fresh checkout of the measured commit
    /// (writable; the protected paths and the evaluator read-only, the run
    /// state hidden), its fresh `HOME` (writable), no network unless
    /// `command.network`. Opened after the agent's processes are gone.
    fn evaluator(
        &self,
        candidate: &CandidateContext<'_>,
        place: EvalPlace<'_>,
        command: &EvalCommand,
    ) -> std::result::Result<Evaluator, HostError>;

    /// Progress: a candidate's phase started (nothing by default).
    fn phase_started(&self, _candidate: u32, _phase: &str) {}

    /// Progress: a candidate's phase ended.
    fn progress(&self, candidate: u32, phase: &str, record: &PhaseRecord);

    /// Progress: a candidate's attempt ended, its record saved (nothing by
    /// default). A stopped candidate is still `running` (resume restarts
    /// it).
    fn candidate_finished(&self, _record: &CandidateRecord) {}
}

/// What `run start` asks for.
#[derive(Debug, Clone)]
pub struct StartRequest {
    /// Where it runs.
    pub environment: RunEnvironment,
    /// The pinned image (container environments).
    pub image: Option<ImageRecord>,
    /// The provider's name.
    pub provider: String,
    /// The agent's argv.
    pub agent_argv: Vec<String>,
    /// Variables the provider's launch sets.
    pub agent_env: BTreeMap<String, String>,
    /// The prompt.
    pub prompt: Option<String>,
    /// How many candidates.
    pub candidates: u32,
    /// How many at once.
    pub jobs: u32,
    /// The operator's `CUDA_VISIBLE_DEVICES`.
    pub cuda_visible_devices: Option<String>,
    /// The accelerator backend [`choose_environment`] chose `environment`
    /// for.
    pub accelerator_backend: accelerator::AcceleratorBackend,
    /// `--allow-host` patterns (validated by the caller).
    pub allow_hosts: Vec<String>,
}

/// Where a run's agent goes ([`accelerator::choose_environment`] decides,
/// from the request and the project's `[vibesys] accelerator_backend`, on
/// this platform). `run start` calls it before anything else and logs its
/// `why`.
pub fn choose_environment(
    layout: &StateLayout,
    requested: Option<RunEnvironment>,
) -> Result<accelerator::EnvironmentChoice> {
    Ok(accelerator::choose_environment(
        requested,
        accelerator_backend(layout)?,
        std::env::consts::OS,
    ))
}

/// Whether a run can start in `environment`, checked before anything
/// else (no container, no record): its evaluation route exists and, for
/// `modal` and `skypilot`, the task has `[measure]`, the operator's
/// `[modal]`/`[skypilot]` is valid and the client is installed.
pub fn preflight(layout: &StateLayout, environment: RunEnvironment) -> Result<()> {
    if let dispatch::EvaluationRoute::Remote(service) = dispatch::evaluation_route(environment)? {
        layout.require_initialized()?;
        remote_eval::plan(layout, &TaskSpec::load(layout)?, service)?;
    }
    Ok(())
}

/// A new run id: `run-YYYYMMDD-HHMMSS-<6 hex>` (short enough for the
/// container names of its candidates).
pub fn fresh_run_id() -> Result<RunId> {
    let mut nonce = [0u8; 3];
    random_bytes(&mut nonce)?;
    let stamp: String = time::now_rfc3339()
        .chars()
        .filter(char::is_ascii_digit)
        .collect();
    let (date, clock) = stamp.split_at(stamp.len().min(8));
    RunId::new(&format!("run-{date}-{clock}-{}", hex::encode(nonce)))
}

/// Prepares a run: reads the task, resolves the base commit, records the
/// gate baseline and writes `run.json` and a pending record per
/// candidate, before anything runs.
pub fn prepare_run(layout: &StateLayout, request: StartRequest) -> Result<(RunStore, RunRecord)> {
    let route = dispatch::evaluation_route(request.environment)?;
    if request.candidates == 0 || request.candidates > MAX_CANDIDATES {
        return Err(RunError::InvalidRunRequest {
            reason: format!(
                "--candidates must be between 1 and {MAX_CANDIDATES} (got {})",
                request.candidates
            ),
        }
        .into());
    }
    if request.jobs == 0 || request.jobs > MAX_CANDIDATES {
        return Err(RunError::InvalidRunRequest {
            reason: format!(
                "--jobs must be between 1 and {MAX_CANDIDATES} (got {})",
                request.jobs
            ),
        }
        .into());
    }
    if request.agent_argv.is_empty() {
        return Err(RunError::InvalidRunRequest {
            reason: "the agent command is empty".to_owned(),
        }
        .into());
    }
    layout.require_initialized()?;
    let task = TaskSpec::load(layout)?;
    // A remote evaluation's commands, configuration and client must be
    // valid and present before anything is recorded.
    if let dispatch::EvaluationRoute::Remote(service) = route {
        remote_eval::plan(layout, &task, service)?;
    }
    // A [build] that is present must be valid before anything runs.
    match BuildSpec::load(layout) {
        Ok(_) | Err(RuntimeError::Build(BuildError::BuildNotConfigured { .. })) => {}
        Err(e) => return Err(e),
    }
    let base = git::run(
        layout.project(),
        &[
            OsStr::new("rev-parse"),
            OsStr::new("--verify"),
            OsStr::new("HEAD^{commit}"),
        ],
    )?;
    let base_commit = String::from_utf8_lossy(&base).trim().to_owned();
    let mut protect: Vec<PathBuf> = task.protected_paths();
    for p in ProtectedSet::configured(layout)? {
        if !protect.contains(&p) {
            protect.push(p);
        }
    }
    // `[sandbox] devices` is checked (character devices below /dev/, no
    // symlink) when the configuration is read.
    let sandbox_devices = vs_sandbox::config::PolicyConfig::load(layout.project())
        .map_err(|e| RunError::InvalidRunRequest {
            reason: e.to_string(),
        })?
        .devices;
    // The environment must be the one the backend decides (a request
    // that bypassed `choose_environment` is refused, not run elsewhere).
    let backend = request.accelerator_backend;
    let decided = accelerator::environment_for_backend(
        Some(request.environment),
        backend,
        std::env::consts::OS,
    );
    if decided != request.environment {
        return Err(RunError::InvalidRunRequest {
            reason: format!(
                "the accelerator backend {} runs the agent in the {decided} run environment here, not in {}",
                backend.name(),
                request.environment
            ),
        }.into());
    }
    let mut accelerators = accelerator::plan(
        request.environment,
        attach_accelerator(layout)?,
        request.cuda_visible_devices.as_deref(),
        &sandbox_devices,
        &accelerator::HostAccelerators::probe(),
    )?;
    accelerators.backend = backend;
    let run = fresh_run_id()?;
    let store = RunStore::create(layout, &run)?;
    let protected = if protect.is_empty() {
        Vec::new()
    } else {
        let set = ProtectedSet::resolve(layout, &protect)?;
        GateBaseline::record(layout, &run, &set)?.protect().to_vec()
    };
    let record = RunRecord {
        schema_version: record::RUN_SCHEMA_VERSION,
        run_id: run,
        created_at: time::now_rfc3339(),
        environment: request.environment,
        image: request.image,
        provider: request.provider,
        agent_argv: request.agent_argv,
        agent_env: request.agent_env,
        prompt: request.prompt,
        candidates: request.candidates,
        jobs: request.jobs,
        base_commit,
        task,
        protected,
        accelerators,
        allow_hosts: request.allow_hosts,
        state: RunState::Running,
    };
    store.save_run(&record)?;
    for n in 1..=record.candidates {
        store.save_candidate(&CandidateRecord::pending(n))?;
    }
    write_objective(layout.project(), &record)?;
    Ok((store, record))
}

/// `vibesys.toml` of the project is invalid: `reason` says why.
fn invalid_config(layout: &StateLayout, reason: String) -> RuntimeError {
    RuntimeError::from(RunError::InvalidTask {
        path: layout.project().join(crate::gate::CONFIG_FILE),
        reason,
    })
}

/// The value of `[vibesys] KEY` in the project's own `vibesys.toml`.
fn vibesys_setting(layout: &StateLayout, key: &str) -> Result<Option<toml::Value>> {
    let path = layout.project().join(crate::gate::CONFIG_FILE);
    let Some(bytes) = crate::fsutil::read_bounded(&path, 1024 * 1024)? else {
        return Ok(None);
    };
    let text =
        String::from_utf8(bytes).map_err(|_| invalid_config(layout, "not UTF-8".to_owned()))?;
    let table: toml::Table =
        toml::from_str(&text).map_err(|e| invalid_config(layout, e.to_string()))?;
    Ok(table.get("vibesys").and_then(|v| v.get(key)).cloned())
}

/// `[vibesys] attach_accelerator` of the project's own `vibesys.toml`
/// (default false).
fn attach_accelerator(layout: &StateLayout) -> Result<bool> {
    match vibesys_setting(layout, "attach_accelerator")? {
        None => Ok(false),
        Some(toml::Value::Boolean(b)) => Ok(b),
        Some(_) => Err(invalid_config(
            layout,
            "vibesys.attach_accelerator must be true or false".to_owned(),
        )),
    }
}

/// `[vibesys] accelerator_backend` of the project's own `vibesys.toml`
/// (default `portable`).
pub fn accelerator_backend(layout: &StateLayout) -> Result<accelerator::AcceleratorBackend> {
    let Some(value) = vibesys_setting(layout, "accelerator_backend")? else {
        return Ok(accelerator::AcceleratorBackend::Portable);
    };
    value
        .as_str()
        .and_then(accelerator::AcceleratorBackend::parse)
        .ok_or_else(|| {
            invalid_config(
                layout,
                format!(
                    "vibesys.accelerator_backend must be \"portable\" or \"metal\" (got {value})"
                ),
            )
        })
}

/// Opens a run to resume it: the record must exist, the task must be the
/// one it started with, and its environment is kept.
pub fn open_for_resume(layout: &StateLayout, run: &RunId) -> Result<(RunStore, RunRecord)> {
    let store = RunStore::open(layout, run)?;
    let record = store.load_run()?;
    dispatch::evaluation_route(record.environment)?;
    let current = TaskSpec::load(layout)?;
    if current.digest != record.task.digest {
        return Err(RunError::TaskChanged {
            run: run.to_string(),
            recorded: record.task.digest.clone(),
            current: current.digest,
        }
        .into());
    }
    Ok((store, record))
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The run's state afterwards.
    pub state: RunState,
    /// Every candidate's record.
    pub candidates: Vec<CandidateRecord>,
}

/// Runs every unfinished candidate of the run, up to `record.jobs` at a
/// time; one candidate's failure never stops another. Holds the run's
/// lock throughout (a second `run resume` of the same run is refused).
pub fn execute_run(
    store: &RunStore,
    record: &mut RunRecord,
    host: &dyn RunHost,
    cancel: &CancellationToken,
) -> Result<RunOutcome> {
    let _lock = lock_run(store)?;
    let mut todo = Vec::new();
    for n in 1..=record.candidates {
        if store.load_candidate(n)?.unfinished() {
            todo.push(n);
        }
    }
    record.state = RunState::Running;
    store.save_run(record)?;
    let next = AtomicUsize::new(0);
    let failures: Mutex<Vec<RuntimeError>> = Mutex::new(Vec::new());
    let jobs = (record.jobs as usize).clamp(1, todo.len().max(1));
    let shared: &RunRecord = record;
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    if cancel.is_cancelled() {
                        break;
                    }
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(&n) = todo.get(i) else { break };
                    if let Err(e) = run_candidate(store, shared, n, host, cancel) {
                        // The record could not be written: nothing else
                        // of this candidate can be trusted.
                        if let Ok(mut f) = failures.lock() {
                            f.push(e);
                        }
                    }
                }
            });
        }
    });
    if let Some(e) = failures.into_inner().ok().and_then(|mut f| f.pop()) {
        record.state = RunState::Interrupted;
        store.save_run(record)?;
        return Err(e);
    }
    let mut candidates = Vec::new();
    for n in 1..=record.candidates {
        candidates.push(store.load_candidate(n)?);
    }
    record.state = if candidates.iter().any(CandidateRecord::unfinished) {
        RunState::Interrupted
    } else {
        RunState::Finished
    };
    store.save_run(record)?;
    Ok(RunOutcome {
        state: record.state,
        candidates,
    })
}

/// `runs/<id>/lock`, held (flock) while candidates run.
fn lock_run(store: &RunStore) -> Result<File> {
    let path = store.dir().join("lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o600)
        .open(&path)
        .map_err(|e| RuntimeError::io("open", &path, e))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
        |_| {
            RuntimeError::from(RunError::RunInProgress {
                run: store.run_id().to_string(),
            })
        },
    )?;
    Ok(file)
}

/// The workspace-relative directory of a run's agent-visible documents.
pub fn agent_visible_rel(run: &RunId) -> PathBuf {
    Path::new(STATE_DIR)
        .join("agent-visible")
        .join(run.as_str())
}

/// Writes `agent-visible/<run>/objective.md` below `root` (the project, or
/// a candidate's worktree, where the policy makes it read-only).
fn write_objective(root: &Path, record: &RunRecord) -> Result<PathBuf> {
    let dir = ensure_dir_chain(root, &agent_visible_rel(&record.run_id))?;
    let path = dir.join("objective.md");
    write_atomic(&path, record.task.objective_markdown().as_bytes())?;
    Ok(path)
}

/// One candidate, every phase; errors of a phase go into its record.
/// Returns an error only when the record itself cannot be written.
fn run_candidate(
    store: &RunStore,
    run: &RunRecord,
    n: u32,
    host: &dyn RunHost,
    cancel: &CancellationToken,
) -> Result<()> {
    let mut rec = store.load_candidate(n)?;
    rec.state = CandidateState::Running;
    rec.attempts = rec.attempts.saturating_add(1);
    rec.started_at = Some(time::now_rfc3339());
    rec.finished_at = None;
    rec.phases.clear();
    rec.error = None;
    rec.agent_exit = None;
    rec.commit = None;
    rec.evaluated_in = None;
    rec.metrics = None;
    store.save_candidate(&rec)?;
    let mut phases = Phases {
        store,
        host,
        rec,
        cancelled: false,
    };
    let result = candidate_phases(&mut phases, run, n, cancel);
    let mut rec = phases.rec;
    match result {
        Ok(()) if !phases.cancelled => rec.state = CandidateState::Passed,
        Ok(()) => {}
        Err(e) => {
            rec.state = CandidateState::Failed;
            rec.error = Some(e);
        }
    }
    if cancel.is_cancelled() && rec.state != CandidateState::Passed {
        // Stopped, not failed: resume restarts it.
        rec.state = CandidateState::Running;
        rec.error = None;
    } else {
        rec.finished_at = Some(time::now_rfc3339());
    }
    store.save_candidate(&rec)?;
    host.candidate_finished(&rec);
    Ok(())
}

struct Phases<'a> {
    store: &'a RunStore,
    host: &'a dyn RunHost,
    rec: CandidateRecord,
    cancelled: bool,
}

impl Phases<'_> {
    /// A phase starts: says so and returns its start time.
    fn start(&self, phase: &str) -> Instant {
        self.host.phase_started(self.rec.candidate, phase);
        Instant::now()
    }

    /// Records one phase; a failure becomes the candidate's error.
    fn done(
        &mut self,
        phase: &str,
        started: Instant,
        outcome: std::result::Result<PhaseStatus, String>,
    ) -> std::result::Result<(), String> {
        let (status, detail) = match &outcome {
            Ok(s) => (*s, None),
            Err(e) => (PhaseStatus::Failed, Some(e.clone())),
        };
        let record = PhaseRecord {
            status,
            duration_secs: round_ms(started.elapsed()),
            detail,
        };
        self.host.progress(self.rec.candidate, phase, &record);
        self.rec.phases.insert(phase.to_owned(), record);
        // A record that cannot be written is reported by the caller.
        let _ = self.store.save_candidate(&self.rec);
        outcome.map(drop).map_err(|e| format!("{phase}: {e}"))
    }
}

fn round_ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

fn candidate_phases(
    p: &mut Phases<'_>,
    run: &RunRecord,
    n: u32,
    cancel: &CancellationToken,
) -> std::result::Result<(), String> {
    let layout = p.store.layout().clone();
    let id = CandidateId::new(&n.to_string()).map_err(|e| e.to_string())?;

    // Prepare: a fresh worktree (a resumed candidate starts over).
    let t = p.start("prepare");
    let prepared = prepare_worktree(&layout, run, &id);
    let (worktree, objective) = match prepared {
        Ok(v) => v,
        Err(e) => return p.done("prepare", t, Err(e)),
    };
    p.done("prepare", t, Ok(PhaseStatus::Passed))?;
    let ctx = CandidateContext {
        run,
        number: n,
        worktree: worktree.path(),
        objective: &objective,
    };

    // The agent's turn, confined.
    let route = dispatch::evaluation_route(run.environment).map_err(|e| e.to_string())?;
    let t = p.start("agent");
    let outcome = match p.host.agent_turn(&ctx, cancel) {
        Ok(o) => o,
        Err(e) => return p.done("agent", t, Err(format!("{e}"))),
    };
    let _ = p.store.save_log(n, "agent", &outcome.log);
    p.rec.egress_denials = outcome.egress_denials.clone();
    if outcome.cancelled || cancel.is_cancelled() {
        // Stopped, not ended: its exit status is the stop's, not the
        // agent's; the time it ran is kept.
        p.cancelled = true;
        return p.done("agent", t, Ok(PhaseStatus::Stopped));
    }
    p.rec.agent_exit = Some(outcome.exit_code);
    let agent = if outcome.exit_code == 0 {
        Ok(PhaseStatus::Passed)
    } else {
        Err(format!(
            "the agent exited with status {} (its output: {})",
            outcome.exit_code,
            p.store.log_path(n, "agent").display()
        ))
    };
    p.done("agent", t, agent)?;

    // Outside confinement: the framework commits, with the hardened git,
    // within the task's bounds.
    let t = p.start("commit");
    let commit = commit_candidate(&layout, run, n, worktree.path(), cancel);
    let commit = match commit {
        Ok(c) => c,
        Err(e) => return p.done("commit", t, Err(e.to_string())),
    };
    p.rec.commit = Some(commit.clone());
    p.done("commit", t, Ok(PhaseStatus::Passed))?;

    // The accuracy gate.
    let t = p.start("gate");
    let gate = gate_candidate(&layout, run, worktree.path());
    p.done("gate", t, gate)?;

    // The trusted build, here or (when the operator asks for it) on the
    // service, recorded by the remote evaluation.
    let remote_build = match route {
        dispatch::EvaluationRoute::Remote(service) => {
            remote_eval::builds_remotely(&layout, service)
        }
        _ => false,
    };
    let mut built = false;
    if !remote_build {
        let t = p.start("build");
        let build = build_candidate(p.host, &ctx, &layout, &commit);
        built = build == Ok(PhaseStatus::Passed);
        p.done("build", t, build)?;
    }
    if cancel.is_cancelled() {
        p.cancelled = true;
        return Ok(());
    }

    // check and measure in a fresh checkout of the commit, the verified
    // build outputs placed in it, through the environment's confined
    // runner, or on the service.
    if let dispatch::EvaluationRoute::Remote(service) = route {
        return remote_eval::evaluate(p, run, n, &commit, service, cancel);
    }
    let t = p.start("check");
    let checkout = match eval_checkout(&layout, run, n, &commit, built) {
        Ok(c) => c,
        Err(e) => return p.done("check", t, Err(e)),
    };
    let result = evaluate(p.host, &ctx, &checkout, &run.task.check, cancel);
    let check = match &result {
        Ok((r, location)) => {
            p.rec.evaluated_in = Some(location.clone());
            let _ = p.store.save_log(n, "check", &log_bytes(r));
            if r.cancelled {
                p.cancelled = true;
                return Ok(());
            }
            if r.success() {
                evaluation_left_protected(&layout, run, &checkout, "check")
                    .map(|()| PhaseStatus::Passed)
            } else if r.timed_out {
                Err(format!("timed out after {} s", run.task.check.timeout_secs))
            } else {
                Err(format!(
                    "exited with status {}: the candidate is not correct (output: {})",
                    r.exit_code,
                    p.store.log_path(n, "check").display()
                ))
            }
        }
        Err(e) => Err(e.clone()),
    };
    p.done("check", t, check)?;

    let Some(measure) = &run.task.measure else {
        return p.done("measure", Instant::now(), Ok(PhaseStatus::Skipped));
    };
    let t = p.start("measure");
    let result = evaluate(p.host, &ctx, &checkout, &measure.command, cancel);
    let metrics = match result {
        Ok((r, location)) => {
            // Where the measured number came from.
            p.rec.evaluated_in = Some(location);
            let _ = p.store.save_log(n, "measure", &log_bytes(&r));
            if r.cancelled {
                p.cancelled = true;
                return Ok(());
            }
            parse_metrics(&r, measure).and_then(|m| {
                evaluation_left_protected(&layout, run, &checkout, "measure").map(|()| m)
            })
        }
        Err(e) => Err(e),
    };
    match metrics {
        Ok(m) => {
            p.rec.metrics = Some(m);
            p.done("measure", t, Ok(PhaseStatus::Passed))
        }
        Err(e) => p.done("measure", t, Err(e)),
    }
}

/// The evaluation's checkout of `commit`, with the verified outputs of its
/// trusted build when `built`.
fn eval_checkout(
    layout: &StateLayout,
    run: &RunRecord,
    n: u32,
    commit: &str,
    built: bool,
) -> std::result::Result<EvalCheckout, String> {
    let build = if built {
        Some(TrustedBuild::load(layout, &run.run_id, commit).map_err(|e| e.to_string())?)
    } else {
        None
    };
    EvalCheckout::create(layout, &run.run_id, n, commit, build.as_ref())
        .map_err(|e| format!("cannot prepare the evaluation's checkout of {commit}: {e}"))
}

/// The protected paths and the placed build outputs of the evaluation's
/// checkout after `what` ran: a change (which confinement should have
/// stopped, or which a candidate's program made to an output before
/// `measure` loads it) fails the candidate, naming each path.
fn evaluation_left_protected(
    layout: &StateLayout,
    run: &RunRecord,
    checkout: &EvalCheckout,
    what: &str,
) -> std::result::Result<(), String> {
    checkout.verify_outputs(what)?;
    if run.protected.is_empty() {
        return Ok(());
    }
    let mut differences =
        gate_differences(layout, run, checkout.path()).map_err(|e| e.to_string())?;
    // The build's outputs (and the directories holding them) were placed
    // there by vibesys.
    if let Ok(spec) = BuildSpec::load(layout) {
        differences.retain(|d| !(d.change == gate::Change::Added && spec.makes(&d.path)));
    }
    if differences.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "protected paths changed while {what} ran: {}",
            gate::describe_differences(&differences)
        ))
    }
}

/// A fresh worktree for candidate `id` at the base commit, checked against
/// the gate baseline before anything runs, with `objective.md` in it.
fn prepare_worktree(
    layout: &StateLayout,
    run: &RunRecord,
    id: &CandidateId,
) -> std::result::Result<(CandidateWorktree, PathBuf), String> {
    CandidateWorktree::discard(layout, &run.run_id, id).map_err(|e| e.to_string())?;
    if let Ok(n) = id.as_str().parse::<u32>() {
        evaluation::discard_stale(layout, &run.run_id, n).map_err(|e| e.to_string())?;
    }
    let wt = CandidateWorktree::create_at_commit(layout, &run.run_id, id, &run.base_commit)
        .map_err(|e| e.to_string())?;
    if !run.protected.is_empty() {
        let differences = gate_differences(layout, run, wt.path()).map_err(|e| e.to_string())?;
        if !differences.is_empty() {
            return Err(format!(
                "the protected paths of the project's working tree differ from the base commit {} ({}): commit them before the run",
                run.base_commit,
                gate::describe_differences(&differences)
            ));
        }
    }
    let objective = write_objective(wt.path(), run).map_err(|e| e.to_string())?;
    Ok((wt, objective))
}

fn gate_differences(
    layout: &StateLayout,
    run: &RunRecord,
    root: &Path,
) -> Result<Vec<gate::GateDifference>> {
    let baseline = GateBaseline::load(layout, &run.run_id)?;
    let set = ProtectedSet::for_build(layout, &run.run_id)?;
    let current: BTreeMap<String, GateEntry> = match set {
        Some(set) => set.snapshot(root, &run.run_id)?,
        None => BTreeMap::new(),
    };
    Ok(gate::diff(baseline.entries(), &current))
}

fn gate_candidate(
    layout: &StateLayout,
    run: &RunRecord,
    worktree: &Path,
) -> std::result::Result<PhaseStatus, String> {
    if run.protected.is_empty() {
        return Ok(PhaseStatus::Skipped);
    }
    let differences = gate_differences(layout, run, worktree).map_err(|e| e.to_string())?;
    if differences.is_empty() {
        Ok(PhaseStatus::Passed)
    } else {
        Err(format!(
            "protected paths differ from the baseline: {}",
            gate::describe_differences(&differences)
        ))
    }
}

/// Commits everything the agent changed (never the run state) with the
/// hardened git, and keeps the commit as `refs/vibesys/runs/<run>/<n>`.
/// The task's [`CommitLimits`] bound it: every file git would read (new,
/// or changed since the checkout) is measured by `lstat` first, and a file
/// or the total over its limit fails the candidate, naming it, before git
/// reads any of them; `git add` and `git commit` are killed at the time
/// limit.
fn commit_candidate(
    layout: &StateLayout,
    run: &RunRecord,
    n: u32,
    worktree: &Path,
    cancel: &CancellationToken,
) -> Result<String> {
    let os = OsStr::new;
    let limits = run.task.commit;
    let deadline = Instant::now() + Duration::from_secs(limits.timeout_secs);
    let exclude = format!(":(exclude){STATE_DIR}");
    check_commit_size(worktree, &exclude, &limits)?;
    if Instant::now() >= deadline || cancel.is_cancelled() {
        return Err(RunError::CommitTimedOut {
            secs: limits.timeout_secs,
        }
        .into());
    }
    git::run_until(
        worktree,
        &[os("add"), os("-A"), os("--"), os("."), os(&exclude)],
        deadline,
        limits.timeout_secs,
    )?;
    let message = format!("vibesys run {} candidate {n}", run.run_id);
    git::run_until(
        worktree,
        &[
            os("-c"),
            os("user.name=vibesys"),
            os("-c"),
            os("user.email=vibesys@localhost"),
            os("commit"),
            os("--quiet"),
            os("--no-verify"),
            os("--no-gpg-sign"),
            os("--allow-empty"),
            os("-m"),
            os(&message),
        ],
        deadline,
        limits.timeout_secs,
    )?;
    let out = git::run(
        worktree,
        &[os("rev-parse"), os("--verify"), os("HEAD^{commit}")],
    )?;
    let commit = String::from_utf8_lossy(&out).trim().to_owned();
    let name = format!("refs/vibesys/runs/{}/{n}", run.run_id);
    git::run(
        layout.project(),
        &[os("update-ref"), os(&name), os(&commit)],
    )?;
    Ok(commit)
}

/// Measures, without reading them, the files `git add -A` would read in
/// `worktree`: untracked ones that are not ignored and tracked ones whose
/// stat differs from the index (`git ls-files --others --modified`, which
/// reads names and stat data only). Their apparent sizes (holes count)
/// must stay within `limits`.
fn check_commit_size(worktree: &Path, exclude: &str, limits: &CommitLimits) -> Result<()> {
    let os = OsStr::new;
    let mut total: u64 = 0;
    let mut over: Option<RuntimeError> = None;
    git::for_each_nul_record(
        worktree,
        &[
            os("ls-files"),
            os("-z"),
            os("--others"),
            os("--modified"),
            os("--exclude-standard"),
            os("--"),
            os("."),
            os(exclude),
        ],
        |record| {
            if over.is_some() || record.is_empty() {
                return;
            }
            let rel = Path::new(OsStr::from_bytes(record));
            let Ok(meta) = std::fs::symlink_metadata(worktree.join(rel)) else {
                // Removed: nothing to read.
                return;
            };
            let size = if meta.file_type().is_file() {
                meta.len()
            } else {
                0
            };
            let name = String::from_utf8_lossy(record).chars().take(1024).collect();
            if size > limits.max_file_bytes {
                over = Some(RuntimeError::from(RunError::CommitFileTooLarge {
                    path: name,
                    size,
                    limit: limits.max_file_bytes,
                }));
                return;
            }
            total = total.saturating_add(size);
            if total > limits.max_total_bytes {
                over = Some(RuntimeError::from(RunError::CommitTotalTooLarge {
                    path: name,
                    limit: limits.max_total_bytes,
                }));
            }
        },
    )?;
    match over {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn build_candidate(
    host: &dyn RunHost,
    ctx: &CandidateContext<'_>,
    layout: &StateLayout,
    commit: &str,
) -> std::result::Result<PhaseStatus, String> {
    let spec = match BuildSpec::load(layout) {
        Ok(s) => s,
        Err(RuntimeError::Build(BuildError::BuildNotConfigured { .. })) => {
            return Ok(PhaseStatus::Skipped);
        }
        Err(e) => return Err(e.to_string()),
    };
    let checkout =
        BuildCheckout::create(layout, &ctx.run.run_id, commit).map_err(|e| e.to_string())?;
    let confinement = host
        .build_confinement(ctx, checkout.path())
        .map_err(|e| format!("{e}"))?;
    let path_var =
        std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    let env = vec![
        (OsString::from("PATH"), path_var),
        (
            OsString::from("HOME"),
            checkout.path().as_os_str().to_owned(),
        ),
        (OsString::from("LANG"), OsString::from("C.UTF-8")),
    ];
    checkout
        .build(&spec, confinement.as_ref(), &env)
        .map(|_| PhaseStatus::Passed)
        .map_err(|e| e.to_string())
}

/// Runs `command` in the evaluation's checkout through the runner the
/// host opens for it, with the minimal environment: `PATH`, the fresh
/// `HOME`, a fixed locale. Returns the result and where it ran.
fn evaluate(
    host: &dyn RunHost,
    ctx: &CandidateContext<'_>,
    checkout: &EvalCheckout,
    command: &EvalCommand,
    cancel: &CancellationToken,
) -> std::result::Result<(CommandResult, String), String> {
    let evaluator = host
        .evaluator(ctx, checkout.place(), command)
        .map_err(|e| format!("{e}"))?;
    let mut spec = CommandSpec::new(command.argv.iter().map(OsString::from), checkout.path())
        .timeout(Duration::from_secs(command.timeout_secs))
        .cancel_token(cancel.clone());
    spec.env.insert("PATH".into(), evaluator.path_var.clone());
    spec.env
        .insert("HOME".into(), checkout.home().as_os_str().to_owned());
    spec.env.insert("LANG".into(), "C.UTF-8".into());
    let result = evaluator.runner.run(&spec).map_err(|e| {
        format!(
            "cannot run {:?} in {}: {e}",
            command.argv.first().map(String::as_str).unwrap_or(""),
            evaluator.location
        )
    })?;
    Ok((result, evaluator.location))
}

/// stdout and stderr of a result, each bounded, for a log.
fn log_bytes(r: &CommandResult) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, stream) in [("stdout", &r.stdout), ("stderr", &r.stderr)] {
        let bytes = stream.bytes();
        out.extend_from_slice(format!("== {name} ({} bytes)\n", stream.total_bytes()).as_bytes());
        out.extend_from_slice(&bytes[..bytes.len().min(LOG_BYTES)]);
        if !bytes.ends_with(b"\n") {
            out.push(b'\n');
        }
    }
    out
}

/// The metrics `measure` printed: it must succeed and print exactly one
/// JSON object of at most [`MAX_METRICS_BYTES`]; the ranking metric, when
/// the task names one, must be a number in it.
fn parse_metrics(
    r: &CommandResult,
    measure: &MeasureSpec,
) -> std::result::Result<serde_json::Map<String, serde_json::Value>, String> {
    if r.timed_out {
        return Err(format!(
            "timed out after {} s",
            measure.command.timeout_secs
        ));
    }
    if !r.success() {
        return Err(format!("exited with status {}", r.exit_code));
    }
    metrics_from_stdout(
        r.stdout.bytes(),
        r.stdout.total_bytes(),
        r.stdout.is_truncated(),
        measure,
    )
}

/// The one JSON object of metrics a succeeded `measure` printed (`total`
/// bytes, of which `stdout` was kept); the ranking metric, when the task
/// names one, must be a number in it. Both routes go through this.
fn metrics_from_stdout(
    stdout: &[u8],
    total: u64,
    truncated: bool,
    measure: &MeasureSpec,
) -> std::result::Result<serde_json::Map<String, serde_json::Value>, String> {
    if total > MAX_METRICS_BYTES || truncated {
        return Err(format!(
            "printed {total} bytes; at most {MAX_METRICS_BYTES} bytes of one JSON object are accepted"
        ));
    }
    let text = String::from_utf8_lossy(stdout);
    let value: serde_json::Value = serde_json::from_str(text.trim()).map_err(|e| {
        if text.trim().is_empty() {
            "printed nothing; it must print one JSON object of metrics".to_owned()
        } else {
            format!("did not print one JSON object of metrics: {e}")
        }
    })?;
    let serde_json::Value::Object(map) = value else {
        return Err(
            "printed JSON that is not an object; it must print one JSON object of metrics"
                .to_owned(),
        );
    };
    if let Some(metric) = &measure.metric
        && !map.get(metric).is_some_and(serde_json::Value::is_number)
    {
        return Err(format!(
            "the metric {metric:?} ([measure] metric) is missing or not a number"
        ));
    }
    Ok(map)
}
