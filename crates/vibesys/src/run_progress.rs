//! A run's progress on stderr. On a terminal, one live line per candidate:
//! a spinner, the time since it started, each phase that ended with its
//! time, and the phase it is in; a finished candidate's line stays, with
//! its result (and the failure, cut to the terminal's width). Piped or
//! redirected, one plain line per phase that ended, for logs and scripts.
//!
//! Phase details can carry text a confined command wrote (an error of the
//! agent's container): control characters are escaped before anything
//! reaches the terminal.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use vs_runtime::run::{CandidateRecord, CandidateState, PhaseRecord, PhaseStatus};

/// The longest phase detail shown, in characters.
const MAX_DETAIL: usize = 300;

/// Where progress goes: live lines on a terminal, plain lines otherwise.
pub(crate) enum RunProgress {
    /// stderr is not a terminal.
    Plain(Mutex<()>),
    /// stderr is a terminal.
    Terminal(Lines),
}

/// The live lines, one per candidate, in candidate order.
pub(crate) struct Lines {
    multi: MultiProgress,
    candidates: Mutex<BTreeMap<u32, Line>>,
}

struct Line {
    bar: ProgressBar,
    /// The phases that ended: `agent 3.0s`, `gate FAILED`.
    ended: Vec<String>,
}

impl RunProgress {
    /// Live lines when stderr is a terminal, plain lines otherwise.
    pub(crate) fn for_stderr() -> Self {
        if std::io::stderr().is_terminal() {
            Self::Terminal(Lines {
                multi: MultiProgress::with_draw_target(ProgressDrawTarget::stderr()),
                candidates: Mutex::new(BTreeMap::new()),
            })
        } else {
            Self::Plain(Mutex::new(()))
        }
    }

    /// A candidate's phase started.
    pub(crate) fn phase_started(&self, candidate: u32, phase: &str) {
        if let Self::Terminal(lines) = self {
            lines.update(candidate, |line| {
                line.bar
                    .set_message(format!("{} {phase} …", line.summary()));
            });
        }
    }

    /// A candidate's phase ended.
    pub(crate) fn phase_ended(&self, candidate: u32, phase: &str, record: &PhaseRecord) {
        match self {
            Self::Plain(lock) => {
                let _guard = lock.lock();
                let detail = record
                    .detail
                    .as_deref()
                    .map(|d| format!(": {}", terminal_safe(d)))
                    .unwrap_or_default();
                eprintln!(
                    "vibesys: candidate {candidate}: {phase} {} ({:.2} s){detail}",
                    status_word(record.status),
                    record.duration_secs
                );
            }
            Self::Terminal(lines) => lines.update(candidate, |line| {
                line.ended.push(match record.status {
                    PhaseStatus::Skipped => format!("{phase} skipped"),
                    // Times under a second would only crowd the line.
                    PhaseStatus::Passed if record.duration_secs < 1.0 => phase.to_owned(),
                    PhaseStatus::Passed => format!("{phase} {:.0}s", record.duration_secs),
                    PhaseStatus::Failed => format!("{phase} FAILED"),
                    PhaseStatus::Stopped => format!("{phase} stopped {:.0}s", record.duration_secs),
                });
                line.bar.set_message(line.summary());
            }),
        }
    }

    /// A candidate's attempt ended: its line shows the result and stays.
    pub(crate) fn candidate_finished(&self, record: &CandidateRecord) {
        let Self::Terminal(lines) = self else {
            return;
        };
        lines.update(record.candidate, |line| {
            let result = match record.state {
                CandidateState::Passed => "passed".to_owned(),
                CandidateState::Failed => format!(
                    "FAILED: {}",
                    terminal_safe(record.error.as_deref().unwrap_or("unknown"))
                ),
                // Stopped (Ctrl-C): resume restarts it.
                CandidateState::Running | CandidateState::Pending => "stopped".to_owned(),
            };
            line.bar.set_style(finished_style());
            line.bar
                .finish_with_message(format!("{} → {result}", line.summary()));
        });
    }
}

impl Lines {
    /// Runs `f` on candidate `n`'s line, adding the line (in candidate
    /// order) on its first event.
    fn update(&self, n: u32, f: impl FnOnce(&mut Line)) {
        let Ok(mut candidates) = self.candidates.lock() else {
            return;
        };
        if !candidates.contains_key(&n) {
            let bar = ProgressBar::new_spinner()
                .with_style(live_style())
                .with_prefix(format!("candidate {n}"));
            let bar = match candidates.range(n..).next() {
                Some((_, after)) => self.multi.insert_before(&after.bar, bar),
                None => self.multi.add(bar),
            };
            bar.enable_steady_tick(Duration::from_millis(120));
            candidates.insert(
                n,
                Line {
                    bar,
                    ended: Vec::new(),
                },
            );
        }
        if let Some(line) = candidates.get_mut(&n) {
            f(line);
        }
    }
}

impl Line {
    fn summary(&self) -> String {
        self.ended.join(" · ")
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        // A line never finished (an error before the candidate ended) is
        // left as it was drawn, not cleared.
        if let Ok(candidates) = self.candidates.lock() {
            for line in candidates.values() {
                if !line.bar.is_finished() {
                    line.bar.abandon();
                }
            }
        }
    }
}

fn live_style() -> ProgressStyle {
    ProgressStyle::with_template("{spinner} {prefix} [{elapsed}] {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn finished_style() -> ProgressStyle {
    ProgressStyle::with_template("  {prefix} [{elapsed}] {wide_msg}")
        .unwrap_or_else(|_| ProgressStyle::default_spinner())
}

fn status_word(status: PhaseStatus) -> &'static str {
    match status {
        PhaseStatus::Passed => "passed",
        PhaseStatus::Failed => "FAILED",
        PhaseStatus::Skipped => "skipped",
        PhaseStatus::Stopped => "stopped",
    }
}

/// At most [`MAX_DETAIL`] characters of `text`, control characters
/// (escape sequences, carriage returns, newlines) escaped.
fn terminal_safe(text: &str) -> String {
    terminal_safe_cut(text, MAX_DETAIL)
}

/// At most `max` characters of `text`, control characters escaped.
pub(crate) fn terminal_safe_cut(text: &str, max: usize) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let text = terminal_safe("a\u{1b}[2Jb\rc\nd\u{9b}e");
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert_eq!(text, "a\\u{1b}[2Jb\\rc\\nd\\u{9b}e");
    }

    #[test]
    fn details_are_cut() {
        assert_eq!(terminal_safe(&"x".repeat(1000)).len(), MAX_DETAIL);
    }
}
