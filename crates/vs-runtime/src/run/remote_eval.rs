//! `check` and `measure` of a `modal` or `skypilot` run: the candidate's
//! committed commit, checked out fresh, goes to the service through
//! [`crate::remote::dispatch`]; its outcome lands in the candidate's
//! record as the local route's does (the same phases, logs and metrics
//! rules). The commands are the run's task ([`TrustedEvaluation::from_task`]):
//! one parser of `[check]` and `[measure]`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vs_sandbox::runner::CancellationToken;

use super::{PhaseStatus, Phases, RunRecord, metrics_from_stdout};
use crate::RunError;
use crate::build::BuildCheckout;
use crate::error::{Result, RuntimeError};
use crate::remote::{
    self, Clients, CommandResult, RemoteConfig, RemoteRequest, Service, TrustedEvaluation,
};
use crate::state::StateLayout;
use crate::task::TaskSpec;

/// What a remote evaluation needs, validated: the trusted commands, the
/// operator's `[skypilot]`/`[modal]`, and the installed client (outside
/// the project). Called before a run is recorded and again per candidate.
pub(super) fn plan(
    layout: &StateLayout,
    task: &TaskSpec,
    service: Service,
) -> Result<(TrustedEvaluation, RemoteConfig, Clients)> {
    let path = remote::config::config_path(layout.project());
    let remote = |e| RuntimeError::Remote { source: e };
    let mut evaluation = TrustedEvaluation::from_task(task, &path).map_err(remote)?;
    let config = remote::config::load_remote(layout.project())?;
    // Check and measure run on the service, in its checkout of the commit:
    // the build outputs they load must be made there, in the same
    // dispatch. A local build's verified outputs never reach the service.
    if crate::build::BuildSpec::load(layout).is_ok() && !config.builds_on(service) {
        let (title, table) = (service.title(), service.package().0);
        return Err(RunError::InvalidRunRequest {
            reason: format!(
                "the task has a [build] and check and measure run on {title}: set [{table}] build = true so that the build runs there, before them, in the same checkout (a local build's outputs do not reach the service)"
            ),
        }.into());
    }
    evaluation.build = remote::config::load_build(layout.project(), &config, service)?;
    let clients = Clients::discover();
    clients.require_outside(layout.project()).map_err(remote)?;
    clients.require(service).map_err(remote)?;
    Ok((evaluation, config, clients))
}

/// Whether the operator asks for the task's `[build]` to run on
/// `service` (then the local trusted build is skipped); an invalid
/// configuration is reported by [`plan`], so it reads as `false` here.
pub(super) fn builds_remotely(layout: &StateLayout, service: Service) -> bool {
    remote::config::load_remote(layout.project()).is_ok_and(|c| c.builds_on(service))
}

/// Dispatches candidate `n`'s `commit` and records the build (when it
/// runs on the service), check and measure.
pub(super) fn evaluate(
    p: &mut Phases<'_>,
    run: &RunRecord,
    n: u32,
    commit: &str,
    service: Service,
    cancel: &CancellationToken,
) -> std::result::Result<(), String> {
    let layout = p.store.layout().clone();
    let record_dir = p.store.dir().join("remote").join(n.to_string());
    let remote_build = builds_remotely(&layout, service);
    let t = p.start(if remote_build { "build" } else { "check" });
    p.rec.evaluated_in = Some(if remote_build {
        format!(
            "{}: build, check and measure; the local trusted build was skipped (record {})",
            service.title(),
            record_dir.display()
        )
    } else {
        format!("{} (record {})", service.title(), record_dir.display())
    });
    let outcome = (|| -> Result<remote::RemoteOutcome> {
        let (evaluation, config, clients) = plan(&layout, &run.task, service)?;
        let checkout = BuildCheckout::create(&layout, &run.run_id, commit)?;
        let request = RemoteRequest {
            project: layout.project(),
            run: &run.run_id,
            candidate: n,
            commit: checkout.commit(),
            workdir: checkout.path(),
            evaluation: &evaluation,
            config: &config,
        };
        // The run's token stops the client (and tears down what it
        // started) through the flag dispatch polls.
        let stop = AtomicBool::new(false);
        let finished = AtomicBool::new(false);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                while !finished.load(Ordering::SeqCst) {
                    if cancel.is_cancelled() {
                        stop.store(true, Ordering::SeqCst);
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            let result = remote::dispatch(service, &request, &clients, &stop, false);
            finished.store(true, Ordering::SeqCst);
            result
        })
    })();
    let outcome = match outcome {
        Ok(o) => o,
        Err(_) if cancel.is_cancelled() => {
            p.cancelled = true;
            return Ok(());
        }
        Err(e) => {
            // The first phase on the service is the one that failed.
            return p.done(
                if remote_build { "build" } else { "check" },
                t,
                Err(format!("{} evaluation: {e}", service.title())),
            );
        }
    };
    let client_log = outcome.record_dir.join("client.log");
    if let Some(build) = &outcome.result.build {
        let _ = p.store.save_log(n, "build", &build_log_bytes(build));
        let status = match &outcome.build_error {
            None => Ok(PhaseStatus::Passed),
            Some(e) => Err(format!(
                "{e}; check and measure did not run (record {})",
                outcome.record_dir.join("build.json").display()
            )),
        };
        p.done("build", t, status)?;
    }
    let t = Instant::now();
    let Some(check) = &outcome.result.check else {
        return p.done(
            "check",
            t,
            Err(format!(
                "{} reported no result of check (see {})",
                service.title(),
                client_log.display()
            )),
        );
    };
    let _ = p
        .store
        .save_log(n, "check", &log_bytes(check, &outcome.output_tail));
    let status = verdict(check, run.task.check.timeout_secs, service).map_err(|e| {
        if check.error.is_some() || check.timed_out {
            e
        } else {
            format!(
                "{e}: the candidate is not correct (output: {})",
                client_log.display()
            )
        }
    });
    p.done("check", t, status.map(|()| PhaseStatus::Passed))?;

    let Some(measure) = &run.task.measure else {
        return p.done("measure", Instant::now(), Ok(PhaseStatus::Skipped));
    };
    let t = Instant::now();
    let metrics = match &outcome.result.measure {
        None => Err(format!(
            "{} reported no result of measure (see {})",
            service.title(),
            client_log.display()
        )),
        Some(m) => {
            let _ = p.store.save_log(n, "measure", &log_bytes(m, ""));
            verdict(m, measure.command.timeout_secs, service).and_then(|()| {
                metrics_from_stdout(m.stdout.as_bytes(), m.stdout.len() as u64, false, measure)
            })
        }
    };
    match metrics {
        Ok(m) => {
            p.rec.metrics = Some(m);
            p.done("measure", t, Ok(PhaseStatus::Passed))
        }
        Err(e) => p.done("measure", t, Err(e)),
    }
}

/// A command's result on the service: exit 0 in time, or why not.
fn verdict(
    r: &CommandResult,
    timeout_secs: u64,
    service: Service,
) -> std::result::Result<(), String> {
    let on = service.title();
    if let Some(e) = &r.error {
        return Err(format!("could not start on {on}: {e}"));
    }
    if r.timed_out {
        return Err(format!("timed out after {timeout_secs} s on {on}"));
    }
    match r.exit_code {
        Some(0) => Ok(()),
        Some(code) => Err(format!("exited with status {code} on {on}")),
        None => Err(format!("was killed on {on}")),
    }
}

/// The log of a build on the service: its status, outputs and the end
/// of its output.
fn build_log_bytes(b: &remote::BuildResult) -> Vec<u8> {
    let mut out = format!(
        "== exit {:?}{}\n",
        b.exit_code,
        if b.timed_out { " (timed out)" } else { "" }
    );
    if let Some(e) = &b.error {
        out.push_str(&format!("== could not start: {e}\n"));
    }
    for o in &b.outputs {
        match (&o.error, o.size, &o.sha256) {
            (Some(e), _, _) => out.push_str(&format!("== output {}: {e}\n", o.path)),
            (None, Some(size), Some(sha)) => out.push_str(&format!(
                "== output {}: {size} bytes, sha256 {sha}\n",
                o.path
            )),
            _ => out.push_str(&format!("== output {}: not reported\n", o.path)),
        }
    }
    out.push_str(&format!(
        "== output of the build (its end, {} bytes)\n",
        b.log.len()
    ));
    out.push_str(&b.log);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.into_bytes()
}

/// The log of a remote command: its stdout as reported, then the end of
/// the client's output.
fn log_bytes(r: &CommandResult, client_tail: &str) -> Vec<u8> {
    let mut out = format!(
        "== exit {:?}{}\n== stdout ({} bytes)\n{}",
        r.exit_code,
        if r.timed_out { " (timed out)" } else { "" },
        r.stdout.len(),
        r.stdout
    );
    if !out.ends_with('\n') {
        out.push('\n');
    }
    if !client_tail.is_empty() {
        out.push_str("== the client's output (its end)\n");
        out.push_str(client_tail);
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    out.into_bytes()
}
