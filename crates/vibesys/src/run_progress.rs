//! A run's progress on stderr. On a terminal, one live line per candidate:
//! a spinner, the time since it started, each phase that ended with its
//! time, and the phase it is in; a finished candidate's line stays, with
//! its result (and the failure, cut to the terminal's width). Piped or
//! redirected, one plain line per phase that ended, for logs and scripts.
//!
//! The texts (control characters escaped) come from vs-runtime's
//! [`vs_runtime::run::report`]; here they are drawn.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use vs_runtime::run::launch::RunObserver;
use vs_runtime::run::{CandidateRecord, PhaseRecord};

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
}

impl RunObserver for RunProgress {
    fn notice(&self, text: &str) {
        eprintln!("vibesys: {text}");
    }

    fn phase_started(&self, candidate: u32, phase: &str) {
        if let Self::Terminal(lines) = self {
            lines.update(candidate, |line| {
                line.bar
                    .set_message(format!("{} {phase} …", line.summary()));
            });
        }
    }

    fn phase_ended(&self, candidate: u32, phase: &str, record: &PhaseRecord) {
        match self {
            Self::Plain(lock) => {
                let _guard = lock.lock();
                eprintln!("vibesys: {}", record.plain_line(candidate, phase));
            }
            Self::Terminal(lines) => lines.update(candidate, |line| {
                line.ended.push(record.live_word(phase));
                line.bar.set_message(line.summary());
            }),
        }
    }

    /// A candidate's attempt ended: its line shows the result and stays.
    fn candidate_finished(&self, record: &CandidateRecord) {
        let Self::Terminal(lines) = self else {
            return;
        };
        lines.update(record.candidate, |line| {
            line.bar.set_style(finished_style());
            line.bar
                .finish_with_message(format!("{} → {}", line.summary(), record.result_text()));
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
