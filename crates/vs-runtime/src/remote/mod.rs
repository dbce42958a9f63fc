//! The `modal` and `skypilot` run environments (DESIGN.md section 7): the
//! agent works in the local editor container (no devices); a candidate's
//! heavy evaluation, the trusted `check` then `measure` of its measured
//! commit (preceded by the task's trusted `[build]` when the operator
//! asks for it: [`TrustedEvaluation::build`]), is dispatched to the
//! service through the service's own client (`sky`, `modal`), installed
//! on the host by `scripts/remote-clients.sh`.
//!
//! The API is one call, [`dispatch`]: input is the run, the candidate
//! number, its measured commit and its checkout (the workdir sent to the
//! service), the trusted commands ([`TrustedEvaluation`], from the
//! operator's `vibesys.toml`) and the operator's `[skypilot]` / `[modal]`
//! ([`RemoteConfig`]). It writes below `runs/<run>/remote/<candidate>/`:
//! the generated task (`task.yaml`) or module (`evaluate.py`), the
//! client's bounded output (`client.log`) and, when the evaluation
//! reported back, `result.json` (the returned [`RemoteOutcome`]) and,
//! when the build ran there, `build.json` ([`RemoteBuildRecord`]). The
//! caller records the candidate's own result (`candidates/<n>.json`). A
//! client that refuses (no login, no network) leaves no `result.json`
//! and nothing else of the run changed.

pub mod client;
pub mod commit_eval;
pub mod config;
pub(crate) mod error;
pub mod modal;
pub mod skypilot;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use client::{ClientStatus, Clients, Missing, Service};
pub use config::{
    EvalCommand, ModalConfig, RemoteBuild, RemoteConfig, SkypilotConfig, TrustedEvaluation,
};
pub use error::RemoteError;

use crate::error::{Result, RuntimeError};
use crate::fsutil::{ensure_dir_chain, random_bytes, read_bounded, write_atomic};
use crate::id::RunId;
use crate::state::StateLayout;
use client::{ClientCall, Stopped, client_env, last_line, plain_text, run_client};

/// Most bytes of measure's stdout brought back.
pub const MAX_MEASURE_BYTES: usize = 1 << 20;
/// Most bytes of the client's output kept in the outcome (its end).
pub const MAX_OUTPUT_TAIL: usize = 64 * 1024;
/// Time SkyPilot gets on top of check and measure (provisioning, setup,
/// sync, teardown).
const SKYPILOT_SLACK: Duration = Duration::from_secs(3600);
/// Time `modal run` gets on top of the function's own timeout.
const MODAL_SLACK: Duration = Duration::from_secs(600);
/// Time a teardown (`sky down`) gets.
const TEARDOWN_LIMIT: Duration = Duration::from_secs(600);

/// Which service an evaluation is dispatched to.
pub type RemoteService = Service;

/// One trusted command's result on the service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandResult {
    /// Its exit status (`None` when it was killed at its time limit).
    pub exit_code: Option<i32>,
    /// Whether it ran past its time limit.
    #[serde(default)]
    pub timed_out: bool,
    /// Its stdout (measure only; at most [`MAX_MEASURE_BYTES`]).
    #[serde(default)]
    pub stdout: String,
    /// Why it could not start, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl CommandResult {
    /// From a shell's exit status (`timeout` exits 124 at the limit).
    pub fn from_exit(code: i32, stdout: String) -> Self {
        Self {
            exit_code: Some(code),
            timed_out: code == 124 || code == 137,
            stdout,
            error: None,
        }
    }

    fn succeeded(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out
    }
}

/// One declared build output as the service reported it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputReport {
    /// The declared path (`[build] outputs`), relative to the checkout.
    pub path: String,
    /// Its size in bytes, when it is a regular file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Its sha256 (lowercase hex), when it is a regular file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Why it is not a verified output (missing, not a regular file, a
    /// symlink on its way), when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The trusted build's result on the service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildResult {
    /// Its exit status (`None` when it was killed at its time limit).
    pub exit_code: Option<i32>,
    /// Whether it ran past its time limit.
    #[serde(default)]
    pub timed_out: bool,
    /// The end of its stdout and stderr (at most [`MAX_BUILD_LOG_BYTES`]).
    #[serde(default)]
    pub log: String,
    /// Why it could not start, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The declared outputs, verified on the service (only after exit 0).
    #[serde(default)]
    pub outputs: Vec<OutputReport>,
}

/// Most bytes of the build's output brought back (its end).
pub const MAX_BUILD_LOG_BYTES: usize = 64 * 1024;

/// What the service reported for the build, check and measure. A result
/// of a vibesys without remote builds (no `build`) still parses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EvalResult {
    /// The trusted build, when the evaluation asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildResult>,
    /// `check` (`None` only when the build failed: it did not run).
    #[serde(default)]
    pub check: Option<CommandResult>,
    /// `measure` (run only when check succeeded).
    pub measure: Option<CommandResult>,
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl EvalResult {
    /// Checks the result against what was asked (`build`) and returns
    /// why the build failed, if it did: an exit status other than 0, its
    /// time limit, or a declared output not reported as a verified
    /// regular file. A result that does not fit what was asked (a build
    /// reported that was not asked for or the reverse, check run after a
    /// failed build, no check after a good one) is refused.
    pub fn build_failure(
        &self,
        build: Option<&RemoteBuild>,
        service: &'static str,
    ) -> std::result::Result<Option<String>, RemoteError> {
        let bad = |reason: &str| RemoteError::InvalidResult {
            service,
            reason: reason.to_owned(),
        };
        let failure = match (build, &self.build) {
            (None, None) => None,
            (None, Some(_)) => return Err(bad("it reported a build that was not asked for")),
            (Some(_), None) => return Err(bad("it reported no result of the asked build")),
            (Some(asked), Some(r)) => build_verdict(asked, r, service),
        };
        match (&failure, &self.check) {
            (Some(_), Some(_)) => Err(bad("check ran after a failed build")),
            (None, None) => Err(bad("it reported no result of check")),
            _ => Ok(failure),
        }
    }
}

fn build_verdict(asked: &RemoteBuild, r: &BuildResult, service: &str) -> Option<String> {
    if let Some(e) = &r.error {
        return Some(format!("the build could not start on {service}: {e}"));
    }
    if r.timed_out {
        return Some(format!(
            "the build ran past its time limit ({} s) on {service}",
            asked.timeout_secs
        ));
    }
    match r.exit_code {
        Some(0) => {}
        Some(code) => return Some(format!("the build exited with status {code} on {service}")),
        None => return Some(format!("the build was killed on {service}")),
    }
    if r.outputs.len() != asked.outputs.len() {
        return Some(format!(
            "{service} reported {} build outputs, {} are declared",
            r.outputs.len(),
            asked.outputs.len()
        ));
    }
    for (want, got) in asked.outputs.iter().zip(&r.outputs) {
        if &got.path != want {
            return Some(format!(
                "{service} reported build output {:?} where {want:?} is declared",
                got.path.chars().take(200).collect::<String>()
            ));
        }
        if let Some(e) = &got.error {
            return Some(format!(
                "declared build output {want:?} is not a regular file on {service}: {}",
                e.chars().take(200).collect::<String>()
            ));
        }
        if got.size.is_none() || !got.sha256.as_deref().is_some_and(is_sha256) {
            return Some(format!(
                "{service} reported no size and sha256 of build output {want:?}"
            ));
        }
    }
    None
}

/// `build.json` of a candidate's remote record: the build as the service
/// reported it, with each output's size and sha256 computed there.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RemoteBuildRecord {
    /// Version of this record ([`REMOTE_BUILD_SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// `modal` or `skypilot`.
    pub environment: &'static str,
    /// The measured commit that was built.
    pub commit: String,
    /// `[build] argv`.
    pub argv: Vec<String>,
    /// Whether the build succeeded with every declared output verified.
    pub passed: bool,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Its exit status.
    pub exit_code: Option<i32>,
    /// Whether it ran past its time limit.
    pub timed_out: bool,
    /// The outputs as verified on the service.
    pub outputs: Vec<OutputReport>,
    /// The local trusted build did not run for this candidate.
    pub local_build_skipped: bool,
}

/// Version of [`RemoteBuildRecord`].
pub const REMOTE_BUILD_SCHEMA_VERSION: u32 = 1;

/// One candidate's evaluation to dispatch.
#[derive(Clone, Copy, Debug)]
pub struct RemoteRequest<'a> {
    /// The project (its run state must be initialized).
    pub project: &'a Path,
    /// The run.
    pub run: &'a RunId,
    /// The candidate number.
    pub candidate: u32,
    /// The measured commit (full hex id).
    pub commit: &'a str,
    /// A checkout of exactly that commit: sent to the service as the
    /// workdir. It must not be inside the run state's `runs/`.
    pub workdir: &'a Path,
    /// The trusted commands.
    pub evaluation: &'a TrustedEvaluation,
    /// The operator's `[skypilot]` and `[modal]`.
    pub config: &'a RemoteConfig,
}

/// The result of a dispatched evaluation (also `result.json`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RemoteOutcome {
    /// `modal` or `skypilot`.
    pub environment: &'static str,
    /// The run.
    pub run: String,
    /// The candidate number.
    pub candidate: u32,
    /// The measured commit.
    pub commit: String,
    /// check and measure as the service reported them.
    pub result: EvalResult,
    /// measure's stdout as a JSON object, when it printed one.
    pub metrics: Option<serde_json::Map<String, serde_json::Value>>,
    /// Why there are no metrics, when there are none.
    pub metrics_error: Option<String>,
    /// Why the build on the service failed, when it was asked for and
    /// failed (check and measure then did not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build_error: Option<String>,
    /// The build (when asked) succeeded with its outputs verified, check
    /// exited 0 and measure exited 0 with a JSON object.
    pub passed: bool,
    /// The record directory (`runs/<run>/remote/<candidate>`).
    pub record_dir: PathBuf,
    /// The end of the client's output (at most [`MAX_OUTPUT_TAIL`] bytes).
    pub output_tail: String,
    /// When the client started (RFC 3339 UTC).
    pub started_at: String,
    /// When it finished.
    pub finished_at: String,
}

fn is_commit_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64) && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn tail(text: &str) -> String {
    let mut start = text.len().saturating_sub(MAX_OUTPUT_TAIL);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_owned()
}

/// The directory whose files travel to the service: a real directory that
/// neither holds nor lies in the run's record (which never leaves the host).
fn checked_workdir(workdir: &Path, layout: &StateLayout) -> Result<PathBuf> {
    let workdir =
        std::fs::canonicalize(workdir).map_err(|e| RuntimeError::io("resolve", workdir, e))?;
    if !workdir.is_dir() {
        return Err(RuntimeError::NotADirectory {
            path: workdir,
            found: "not a directory",
        });
    }
    // The run's record never leaves the host.
    let runs = std::fs::canonicalize(layout.runs_dir()).unwrap_or_else(|_| layout.runs_dir());
    if workdir.starts_with(&runs) || runs.starts_with(&workdir) {
        return Err(RuntimeError::Remote {
            source: RemoteError::WorkdirHoldsRecord { workdir, runs },
        });
    }
    Ok(workdir)
}

/// The client's arguments for `service`, its time limit, and (Modal) the
/// file its entrypoint writes the result to; the task or module written
/// to the candidate's record directory first.
fn client_args(
    service: Service,
    request: &RemoteRequest<'_>,
    name: &str,
    workdir: &Path,
    record_dir: &Path,
    nonce: &str,
) -> Result<(Vec<OsString>, Duration, Option<PathBuf>)> {
    let remote = |e: RemoteError| RuntimeError::Remote { source: e };
    let eval = request.evaluation;
    let sky_cfg = &request.config.skypilot;
    let commands = Duration::from_secs(
        eval.check.timeout_secs
            + eval.measure.timeout_secs
            + eval.build.as_ref().map_or(0, |b| b.timeout_secs),
    );
    Ok(match service {
        Service::Skypilot => {
            let script = skypilot::run_script(eval, nonce);
            let task = skypilot::task(
                sky_cfg,
                name,
                workdir,
                request.run.as_str(),
                request.candidate,
                request.commit,
                &script,
            );
            let text = serde_json::to_string_pretty(&task).map_err(|e| {
                remote(RemoteError::InvalidResult {
                    service: "SkyPilot",
                    reason: format!("cannot encode the task: {e}"),
                })
            })?;
            let task_file = record_dir.join("task.yaml");
            write_atomic(&task_file, text.as_bytes())?;
            (
                skypilot::launch_args(sky_cfg, name, &task_file),
                commands + SKYPILOT_SLACK,
                None,
            )
        }
        Service::Modal => {
            let spec = modal::ModalSpec::new(
                &request.config.modal,
                name.to_owned(),
                request.run.as_str(),
                request.candidate,
                request.commit,
                workdir,
                eval,
            );
            let module = record_dir.join("evaluate.py");
            write_atomic(
                &module,
                modal::module_source(&spec).map_err(remote)?.as_bytes(),
            )?;
            let out = record_dir.join(".modal-result.json");
            let _ = std::fs::remove_file(&out);
            (
                modal::run_args(&module, &out),
                Duration::from_secs(spec.timeout_secs) + MODAL_SLACK,
                Some(out),
            )
        }
    })
}

/// The metrics `measure` printed (one JSON object), or why there are none.
fn metrics_of(
    result: &EvalResult,
    build_failed: bool,
) -> (
    Option<serde_json::Map<String, serde_json::Value>>,
    Option<String>,
) {
    match &result.measure {
        Some(m) if m.succeeded() => {
            match serde_json::from_str::<serde_json::Value>(m.stdout.trim()) {
                Ok(serde_json::Value::Object(map)) => (Some(map), None),
                Ok(_) => (
                    None,
                    Some("measure printed JSON that is not an object".to_owned()),
                ),
                Err(e) => (
                    None,
                    Some(format!("measure did not print one JSON object: {e}")),
                ),
            }
        }
        Some(m) if m.timed_out => (None, Some("measure ran past its time limit".to_owned())),
        Some(m) => (None, Some(format!("measure exited with {:?}", m.exit_code))),
        None if build_failed => (
            None,
            Some("the build failed, check and measure did not run".to_owned()),
        ),
        None => (None, Some("check failed, measure did not run".to_owned())),
    }
}

/// Dispatches one candidate's evaluation to `service` and waits for it,
/// streaming the client's output to stderr when `stream`. `cancel` (set
/// by the caller's SIGINT/SIGTERM handler) stops the client and tears
/// down what it started. Returns the outcome when the service reported
/// one (a failed check is an outcome, not an error); an error when the
/// client refused, failed, timed out or was interrupted.
pub fn dispatch(
    service: Service,
    request: &RemoteRequest<'_>,
    clients: &Clients,
    cancel: &AtomicBool,
    stream: bool,
) -> Result<RemoteOutcome> {
    let remote = |e: RemoteError| RuntimeError::Remote { source: e };
    if !is_commit_id(request.commit) {
        return Err(RuntimeError::InvalidRevision {
            rev: request.commit.chars().take(80).collect(),
            reason: "a remote evaluation needs the full commit id",
        });
    }
    let layout = StateLayout::open(request.project)?;
    layout.require_initialized()?;
    clients.require_outside(layout.project()).map_err(remote)?;
    let program = clients.require(service).map_err(remote)?;
    let workdir = checked_workdir(request.workdir, &layout)?;
    let run_dir = layout.ensure_run_dir(request.run)?;
    let record_dir = ensure_dir_chain(
        &run_dir,
        &Path::new("remote").join(request.candidate.to_string()),
    )?;
    // A stale result of an earlier dispatch never stands for this one.
    let result_path = record_dir.join("result.json");
    let build_path = record_dir.join("build.json");
    for stale in [&result_path, &build_path] {
        match std::fs::remove_file(stale) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(RuntimeError::io("remove stale result", stale, e)),
        }
    }
    let mut nonce = [0u8; 16];
    random_bytes(&mut nonce)?;
    let nonce = format!("vibesys-{}", hex::encode(nonce));
    let name = skypilot::cluster_name(request.run.as_str(), request.candidate);
    let eval = request.evaluation;
    let env = client_env(clients);
    let log = record_dir.join("client.log");
    let started_at = crate::time::now_rfc3339();
    let sky_cfg = &request.config.skypilot;

    let (args, limit, modal_result) =
        client_args(service, request, &name, &workdir, &record_dir, &nonce)?;
    let program_name = program.display().to_string();
    let teardown = |why: &str| -> String {
        if service != Service::Skypilot {
            return String::new();
        }
        let never = AtomicBool::new(false);
        let down_log = record_dir.join("teardown.log");
        tracing::warn!("{why}: tearing down {name} ({program_name} down)");
        let args = skypilot::teardown_args(sky_cfg, &name);
        let call = ClientCall {
            program: &program,
            args: &args,
            env: &env,
            cwd: &record_dir,
            log: &down_log,
            timeout: TEARDOWN_LIMIT,
            stream,
        };
        match run_client(&call, &never) {
            Ok(Ok(r)) if r.status.success() => format!("; {name} was torn down"),
            _ => format!(
                "; tearing down {name} may have failed (see {}); run `{program_name} down {name}`",
                down_log.display()
            ),
        }
    };
    let call = ClientCall {
        program: &program,
        args: &args,
        env: &env,
        cwd: &record_dir,
        log: &log,
        timeout: limit,
        stream,
    };
    let run = match run_client(&call, cancel).map_err(remote)? {
        Ok(run) => run,
        Err(Stopped::Interrupted) => {
            let teardown = teardown("interrupted");
            return Err(remote(RemoteError::Interrupted {
                program: program_name.clone(),
                teardown,
            }));
        }
        Err(Stopped::TimedOut) => {
            teardown("timed out");
            return Err(remote(RemoteError::TimedOut {
                program: program_name.clone(),
                secs: limit.as_secs(),
                log,
            }));
        }
    };
    let text = plain_text(&run.output);
    // Modal reports through the result file its entrypoint writes on the
    // host; SkyPilot through the marked lines of the streamed logs. When
    // neither reported, the client's words say why.
    let result = match &modal_result {
        Some(out) => match read_bounded(out.as_path(), (4 * MAX_MEASURE_BYTES) as u64)? {
            Some(bytes) => {
                let _ = std::fs::remove_file(out);
                Ok(modal::parse_result(&bytes).map_err(remote)?)
            }
            None => Err(modal::classify_refusal(&text, &program)),
        },
        None => skypilot::parse_output(&text, &nonce)
            .map_err(|_| skypilot::classify_refusal(&text, &program)),
    };
    let result = match result {
        Ok(r) => r,
        Err(Some(refusal)) => return Err(remote(refusal)),
        Err(None) => {
            teardown("the client failed");
            return Err(remote(RemoteError::ClientFailed {
                program: program_name.clone(),
                status: run.status.to_string(),
                said: last_line(&text),
                log,
            }));
        }
    };
    let build_error = result
        .build_failure(eval.build.as_ref(), service.title())
        .map_err(remote)?;
    let (metrics, metrics_error) = metrics_of(&result, build_error.is_some());
    let environment = match service {
        Service::Skypilot => "skypilot",
        Service::Modal => "modal",
    };
    if let (Some(asked), Some(built)) = (&eval.build, &result.build) {
        let record = RemoteBuildRecord {
            schema_version: REMOTE_BUILD_SCHEMA_VERSION,
            environment,
            commit: request.commit.to_owned(),
            argv: asked.argv.clone(),
            passed: build_error.is_none(),
            error: build_error.clone(),
            exit_code: built.exit_code,
            timed_out: built.timed_out,
            outputs: built.outputs.clone(),
            local_build_skipped: true,
        };
        let bytes = serde_json::to_vec_pretty(&record).map_err(|e| {
            remote(RemoteError::InvalidResult {
                service: service.title(),
                reason: format!("cannot encode the build record: {e}"),
            })
        })?;
        write_atomic(&build_path, &bytes)?;
    }
    let outcome = RemoteOutcome {
        environment,
        run: request.run.as_str().to_owned(),
        candidate: request.candidate,
        commit: request.commit.to_owned(),
        passed: build_error.is_none()
            && result.check.as_ref().is_some_and(CommandResult::succeeded)
            && metrics.is_some(),
        build_error,
        result,
        metrics,
        metrics_error,
        record_dir: record_dir.clone(),
        output_tail: tail(&text),
        started_at,
        finished_at: crate::time::now_rfc3339(),
    };
    let bytes = serde_json::to_vec_pretty(&outcome).map_err(|e| {
        remote(RemoteError::InvalidResult {
            service: service.title(),
            reason: format!("cannot encode the outcome: {e}"),
        })
    })?;
    write_atomic(&result_path, &bytes)?;
    Ok(outcome)
}
