//! `vibesys run-env eval`: one candidate's trusted evaluation of any
//! commit of the project, dispatched to a service without a run (the same
//! [`dispatch`] `vibesys run` makes), in two steps so that the caller arms
//! its interrupt handler only once the checkout exists.

use std::fmt;
use std::path::Path;
use std::sync::atomic::AtomicBool;

use super::{Clients, RemoteError, RemoteOutcome, RemoteRequest, Service, dispatch};
use super::{RemoteConfig, TrustedEvaluation};
use crate::build::BuildCheckout;
use crate::environment::RunEnvironment;
use crate::error::RuntimeError;
use crate::id::RunId;
use crate::state::StateLayout;

/// Why a commit's evaluation could not be prepared or dispatched.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommitEvalError {
    /// The run state, the configuration or the checkout failed.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The service's client is missing or misplaced.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// No run environment was selected.
    #[error("vibesys run-env eval needs --run-environment modal or skypilot")]
    NoService,
    /// The selected run environment is not a service.
    #[error(
        "vibesys run-env eval dispatches to a service: --run-environment modal or skypilot, not {environment}"
    )]
    NotAService {
        /// The environment selected.
        environment: RunEnvironment,
    },
}

/// The service of the selected run environment (`modal`, `skypilot`).
pub fn service(selected: Option<RunEnvironment>) -> Result<Service, CommitEvalError> {
    let environment = selected.ok_or(CommitEvalError::NoService)?;
    environment
        .remote_service()
        .ok_or(CommitEvalError::NotAService { environment })
}

/// A commit's evaluation, validated and checked out, ready to dispatch.
pub struct CommitEval {
    layout: StateLayout,
    run: RunId,
    candidate: u32,
    service: Service,
    evaluation: TrustedEvaluation,
    config: RemoteConfig,
    clients: Clients,
    checkout: BuildCheckout,
}

impl CommitEval {
    /// Validates the operator's configuration (before anything runs),
    /// finds the service's client and checks out `commit` (any revision)
    /// in a fresh worktree of `project`'s run `run`.
    pub fn prepare(
        project: &Path,
        run: RunId,
        candidate: u32,
        commit: &str,
        service: Service,
    ) -> Result<Self, CommitEvalError> {
        let layout = StateLayout::open(project)?;
        layout.require_initialized()?;
        let (mut evaluation, config) = super::config::load(layout.project())?;
        evaluation.build = super::config::load_build(layout.project(), &config, service)?;
        let clients = Clients::discover();
        clients.require_outside(layout.project())?;
        clients.require(service)?;
        let checkout = BuildCheckout::create(&layout, &run, commit)?;
        Ok(Self {
            layout,
            run,
            candidate,
            service,
            evaluation,
            config,
            clients,
            checkout,
        })
    }

    /// Dispatches the evaluation (`cancel` stops the client, `stream`
    /// shows its output on stderr) and removes the checkout.
    pub fn dispatch(
        self,
        cancel: &AtomicBool,
        stream: bool,
    ) -> Result<RemoteOutcome, CommitEvalError> {
        let request = RemoteRequest {
            project: self.layout.project(),
            run: &self.run,
            candidate: self.candidate,
            commit: self.checkout.commit(),
            workdir: self.checkout.path(),
            evaluation: &self.evaluation,
            config: &self.config,
        };
        Ok(dispatch(
            self.service,
            &request,
            &self.clients,
            cancel,
            stream,
        )?)
    }
}

impl fmt::Display for RemoteOutcome {
    /// The outcome for people: the verdict, then build, check, metrics and
    /// the record, one a line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} candidate {} of run {} (commit {}): {}",
            self.environment,
            self.candidate,
            self.run,
            self.commit,
            if self.passed { "passed" } else { "FAILED" },
        )?;
        if let Some(build) = &self.result.build {
            match &self.build_error {
                None => writeln!(
                    f,
                    "  build:   passed, {} outputs verified on the service (record {})",
                    build.outputs.len(),
                    self.record_dir.join("build.json").display()
                )?,
                Some(e) => writeln!(f, "  build:   FAILED: {e}")?,
            }
        }
        match &self.result.check {
            Some(check) => writeln!(
                f,
                "  check:   exit {:?}{}",
                check.exit_code,
                if check.timed_out { " (timed out)" } else { "" },
            )?,
            None => writeln!(f, "  check:   not run")?,
        }
        match (&self.metrics, &self.metrics_error) {
            (Some(m), _) => writeln!(f, "  metrics: {}", serde_json::Value::Object(m.clone()))?,
            (None, Some(e)) => writeln!(f, "  metrics: none ({e})")?,
            (None, None) => {}
        }
        writeln!(
            f,
            "  record:  {}",
            self.record_dir.join("result.json").display()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::{CommandResult, EvalResult};

    #[test]
    fn only_a_service_is_dispatched_to() {
        assert_eq!(
            service(Some(RunEnvironment::Modal)).unwrap(),
            Service::Modal
        );
        assert!(matches!(service(None), Err(CommitEvalError::NoService)));
        let err = service(Some(RunEnvironment::Slurm)).unwrap_err();
        assert!(
            err.to_string().ends_with("modal or skypilot, not slurm"),
            "{err}"
        );
    }

    #[test]
    fn the_outcome_reads_verdict_check_metrics_and_record() {
        let check = CommandResult {
            exit_code: Some(1),
            timed_out: false,
            stdout: String::new(),
            error: None,
        };
        let outcome = RemoteOutcome {
            environment: "modal",
            run: "r1".into(),
            candidate: 2,
            commit: "c0ffee".into(),
            result: EvalResult {
                build: None,
                check: Some(check),
                measure: None,
            },
            metrics: None,
            metrics_error: Some("check failed".into()),
            build_error: None,
            passed: false,
            record_dir: "/rec".into(),
            output_tail: String::new(),
            started_at: String::new(),
            finished_at: String::new(),
        };
        assert_eq!(
            outcome.to_string(),
            "modal candidate 2 of run r1 (commit c0ffee): FAILED\n  check:   exit Some(1)\n  metrics: none (check failed)\n  record:  /rec/result.json\n"
        );
    }
}
