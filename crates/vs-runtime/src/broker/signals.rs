//! `vibesys broker serve`'s stop: SIGTERM or SIGINT cancels every job the
//! broker submitted.

use super::{BrokerError, ShutdownHandle};

/// Installs the SIGTERM/SIGINT handler: on the first signal, `notice` is
/// told its number and the broker is stopped through `handle` (it then
/// cancels the run's jobs). The handler is armed when this returns.
pub fn stop_on_signals(
    handle: ShutdownHandle,
    notice: impl FnOnce(i32) + Send + 'static,
) -> Result<(), BrokerError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map_err(|source| {
        BrokerError::Io {
            what: "install the SIGTERM/SIGINT handler".to_owned(),
            source,
        }
    })?;
    std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            notice(sig);
            handle.shutdown();
        }
    });
    Ok(())
}
