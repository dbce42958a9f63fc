//! What a run shows a person: the status table of `vibesys run status`
//! ([`RunStatus`]'s `Display`) and the words of its progress lines.
//!
//! Records can carry text a confined command wrote (an error of the
//! agent's container): control characters are escaped before anything
//! reaches a terminal ([`terminal_safe_cut`]).

use std::fmt;

use crate::run::record::{CandidateRecord, CandidateState, PhaseRecord, PhaseStatus, RunState};
use crate::run::status::{RunStatus, metric_value};

/// The longest phase detail shown in a progress line, in characters.
pub const MAX_DETAIL: usize = 300;

/// The longest error or metrics text of a status row, in characters.
const MAX_TAIL: usize = 160;

/// At most `max` characters of `text`, control characters (escape
/// sequences, carriage returns, newlines) escaped.
pub fn terminal_safe_cut(text: &str, max: usize) -> String {
    let mut out = String::new();
    for c in text.chars().take(max) {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

impl PhaseRecord {
    /// The plain progress line of a phase that ended (for logs and
    /// scripts): `candidate N: PHASE passed (1.00 s): DETAIL`.
    pub fn plain_line(&self, candidate: u32, phase: &str) -> String {
        let detail = self
            .detail
            .as_deref()
            .map(|d| format!(": {}", terminal_safe_cut(d, MAX_DETAIL)))
            .unwrap_or_default();
        let word = match self.status {
            PhaseStatus::Passed => "passed",
            PhaseStatus::Failed => "FAILED",
            PhaseStatus::Skipped => "skipped",
            PhaseStatus::Stopped => "stopped",
        };
        format!(
            "candidate {candidate}: {phase} {word} ({:.2} s){detail}",
            self.duration_secs
        )
    }

    /// A phase that ended, as a live line lists it: `agent 3s`,
    /// `gate FAILED`.
    pub fn live_word(&self, phase: &str) -> String {
        match self.status {
            PhaseStatus::Skipped => format!("{phase} skipped"),
            // Times under a second would only crowd the line.
            PhaseStatus::Passed if self.duration_secs < 1.0 => phase.to_owned(),
            PhaseStatus::Passed => format!("{phase} {:.0}s", self.duration_secs),
            PhaseStatus::Failed => format!("{phase} FAILED"),
            PhaseStatus::Stopped => format!("{phase} stopped {:.0}s", self.duration_secs),
        }
    }
}

impl CandidateRecord {
    /// A finished attempt's result, as its live line ends:
    /// `passed`, `FAILED: ERROR`, `stopped`.
    pub fn result_text(&self) -> String {
        match self.state {
            CandidateState::Passed => "passed".to_owned(),
            CandidateState::Failed => format!(
                "FAILED: {}",
                terminal_safe_cut(self.error.as_deref().unwrap_or("unknown"), MAX_DETAIL)
            ),
            // Stopped (Ctrl-C): resume restarts it.
            CandidateState::Running | CandidateState::Pending => "stopped".to_owned(),
        }
    }
}

/// The status table, best first.
impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let run = &self.run;
        let state = match run.state {
            RunState::Running => "running",
            RunState::Interrupted => "interrupted",
            RunState::Finished => "finished",
        };
        writeln!(
            f,
            "run {}  {}  environment {}  provider {}  {state}",
            run.run_id, run.created_at, run.environment, run.provider
        )?;
        writeln!(
            f,
            "{:<3} {:<8} {:<6} {:<7} {:<7} {:<7} {:<8} {:>9}  metrics / error",
            "#", "state", "agent", "gate", "build", "check", "measure", "time(s)"
        )?;
        for c in &self.candidates {
            let phase = |name: &str| match c.phases.get(name).map(|p| p.status) {
                Some(PhaseStatus::Passed) => "pass",
                Some(PhaseStatus::Failed) => "FAIL",
                Some(PhaseStatus::Skipped) => "-",
                Some(PhaseStatus::Stopped) => "stopped",
                None => "",
            };
            let state = match c.state {
                CandidateState::Passed => "passed",
                CandidateState::Failed => "failed",
                CandidateState::Running => "running",
                CandidateState::Pending => "pending",
            };
            let secs: f64 = c.phases.values().map(|p| p.duration_secs).sum();
            let agent = match c.phases.get("agent").map(|p| p.status) {
                Some(PhaseStatus::Stopped) => "stop".to_owned(),
                _ => c.agent_exit.map(|e| e.to_string()).unwrap_or_default(),
            };
            let tail = match (&c.error, &c.metrics) {
                // An error can quote what a confined command wrote.
                (Some(e), _) => terminal_safe_cut(e, MAX_TAIL),
                (None, Some(m)) => {
                    let mut s = serde_json::Value::Object(m.clone()).to_string();
                    if let Some(v) = metric_value(run, c) {
                        s = format!("{v} | {s}");
                    }
                    terminal_safe_cut(&s, MAX_TAIL)
                }
                _ => String::new(),
            };
            let tail = match c.egress_denials.len() {
                0 => tail,
                n => format!("[egress refused {n}] {tail}"),
            };
            writeln!(
                f,
                "{:<3} {:<8} {:<6} {:<7} {:<7} {:<7} {:<8} {:>9.2}  {}",
                c.candidate,
                state,
                agent,
                phase("gate"),
                phase("build"),
                phase("check"),
                phase("measure"),
                secs,
                tail
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let text = terminal_safe_cut("a\u{1b}[2Jb\rc\nd\u{9b}e", MAX_DETAIL);
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert_eq!(text, "a\\u{1b}[2Jb\\rc\\nd\\u{9b}e");
    }

    #[test]
    fn details_are_cut() {
        assert_eq!(
            terminal_safe_cut(&"x".repeat(1000), MAX_DETAIL).len(),
            MAX_DETAIL
        );
    }
}
