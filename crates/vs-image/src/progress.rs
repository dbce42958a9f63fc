//! Progress bars on a terminal's stderr for a build ([`BuildBar`], a
//! [`Progress`]) and for registry transfers ([`TransferBars`], a
//! [`TransferProgress`] that SIGINT/SIGTERM can stop). When stderr is not
//! a terminal they draw nothing.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::digest::Digest;
use crate::options::Progress;
use crate::registry::TransferProgress;

/// Blobs below this size get no transfer bar.
const BAR_MIN: u64 = 32 << 20;

/// Why progress reporting cannot be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProgressError {
    /// The signal handlers of [`TransferBars::stopped_by_signals`] cannot
    /// be installed.
    #[error("cannot install the SIGINT/SIGTERM handler")]
    Signals(#[source] std::io::Error),
}

/// A bar style from `template`, the default one if the template is bad.
fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
}

/// One bar for a whole build: layers done out of the bytes to write,
/// cleared when dropped.
pub struct BuildBar(Option<ProgressBar>);

impl BuildBar {
    /// A bar on stderr when it is a terminal, else nothing.
    pub fn on_stderr() -> Self {
        Self(std::io::stderr().is_terminal().then(|| {
            let pb = ProgressBar::new(0);
            pb.set_style(style(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {elapsed}",
            ));
            pb
        }))
    }
}

impl Progress for BuildBar {
    fn begin(&self, layers: usize, bytes: u64) {
        if let Some(pb) = &self.0 {
            pb.set_length(bytes);
            pb.set_message(format!("{layers} layers"));
        }
    }
    fn layer_done(&self, bytes: u64, _cached: bool) {
        if let Some(pb) = &self.0 {
            pb.inc(bytes);
        }
    }
}

impl Drop for BuildBar {
    fn drop(&mut self) {
        if let Some(pb) = &self.0 {
            pb.finish_and_clear();
        }
    }
}

/// A bar per large blob of a push or pull, on stderr when it is a
/// terminal.
pub struct TransferBars {
    bars: Option<MultiProgress>,
    current: Mutex<Option<ProgressBar>>,
    verb: &'static str,
    /// Set by SIGINT/SIGTERM when the transfer stops cleanly on them.
    stop: Option<Arc<AtomicBool>>,
}

impl TransferBars {
    /// Bars labelled `verb` (`push`, `pull`) and the blob's short digest.
    pub fn on_stderr(verb: &'static str) -> Self {
        Self {
            bars: std::io::stderr().is_terminal().then(MultiProgress::new),
            current: Mutex::new(None),
            verb,
            stop: None,
        }
    }

    /// A transfer that SIGINT or SIGTERM stops at its next chunk (a pull
    /// then removes what it wrote); a second signal ends the process at
    /// once with status 130.
    pub fn stopped_by_signals(mut self) -> Result<Self, ProgressError> {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(&stop))
                .map_err(ProgressError::Signals)?;
            signal_hook::flag::register(sig, Arc::clone(&stop)).map_err(ProgressError::Signals)?;
        }
        self.stop = Some(stop);
        Ok(self)
    }
}

impl TransferProgress for TransferBars {
    fn start(&self, digest: &Digest, size: u64) {
        let Some(m) = &self.bars else { return };
        if size < BAR_MIN {
            return;
        }
        let pb = m.add(ProgressBar::new(size));
        pb.set_style(style(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
        ));
        pb.set_message(format!("{} {}", self.verb, &digest.hex()[..12]));
        if let Ok(mut c) = self.current.lock() {
            *c = Some(pb);
        }
    }
    fn advance(&self, _digest: &Digest, n: u64) {
        if let Ok(c) = self.current.lock()
            && let Some(pb) = c.as_ref()
        {
            pb.inc(n);
        }
    }
    fn finish(&self, _digest: &Digest) {
        if let Ok(mut c) = self.current.lock()
            && let Some(pb) = c.take()
        {
            pb.finish_and_clear();
        }
    }
    fn cancelled(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(Ordering::Relaxed))
    }
}
