//! `vibesys run status`: a run's candidates, best first.

use std::cmp::Ordering;

use serde::Serialize;

use crate::RunError;
use crate::error::Result;
use crate::id::RunId;
use crate::run::record::{CandidateRecord, CandidateState, RunRecord, RunStore};
use crate::state::StateLayout;
use crate::task::Goal;

/// A run and its candidates, best first.
#[derive(Debug, Clone, Serialize)]
pub struct RunStatus {
    /// `run.json`.
    pub run: RunRecord,
    /// Every candidate, best first: passed ones by the ranking metric,
    /// then passed ones without it, then unfinished, then failed.
    pub candidates: Vec<CandidateRecord>,
}

/// Reads a run's records; `run` `None` means the newest run.
pub fn run_status(layout: &StateLayout, run: Option<&RunId>) -> Result<RunStatus> {
    let run = match run {
        Some(r) => r.clone(),
        None => crate::run::record::list_runs(layout)?
            .into_iter()
            .max_by(|a, b| a.as_str().cmp(b.as_str()))
            .ok_or_else(|| {
                crate::error::RuntimeError::from(RunError::NoRuns {
                    path: layout.runs_dir(),
                })
            })?,
    };
    let store = RunStore::open(layout, &run)?;
    let record = store.load_run()?;
    let mut candidates = Vec::new();
    for n in 1..=record.candidates {
        candidates.push(store.load_candidate(n)?);
    }
    sort_best_first(&record, &mut candidates);
    Ok(RunStatus {
        run: record,
        candidates,
    })
}

/// The ranking metric's value of a candidate.
pub fn metric_value(run: &RunRecord, c: &CandidateRecord) -> Option<f64> {
    let metric = run.task.measure.as_ref()?.metric.as_ref()?;
    c.metrics.as_ref()?.get(metric)?.as_f64()
}

fn rank(c: &CandidateRecord) -> u8 {
    match c.state {
        CandidateState::Passed => 0,
        CandidateState::Running | CandidateState::Pending => 1,
        CandidateState::Failed => 2,
    }
}

/// Sorts candidates best first (see [`RunStatus::candidates`]).
pub fn sort_best_first(run: &RunRecord, candidates: &mut [CandidateRecord]) {
    let goal = run
        .task
        .measure
        .as_ref()
        .map(|m| m.goal)
        .unwrap_or_default();
    candidates.sort_by(|a, b| {
        rank(a).cmp(&rank(b)).then_with(|| {
            match (metric_value(run, a), metric_value(run, b)) {
                (Some(x), Some(y)) => {
                    let o = x.partial_cmp(&y).unwrap_or(Ordering::Equal);
                    if goal == Goal::Max { o.reverse() } else { o }
                }
                (Some(_), None) => Ordering::Less,
                (None, Some(_)) => Ordering::Greater,
                (None, None) => Ordering::Equal,
            }
            .then(a.candidate.cmp(&b.candidate))
        })
    });
}
