//! A session's launcher run to its end with the operator's signals
//! forwarded to it.

use std::process::{Command, ExitStatus};

/// Runs `cmd` to its end: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to this
/// process go to the launcher (which hands them to the command) instead
/// of ending it, so a session stopped that way still ends as any other:
/// the provider's kept state goes back and the session directory goes (a
/// parent killed outright takes the launcher with it:
/// `terminate_with_parent`).
pub fn wait_forwarding_signals(cmd: &mut Command) -> std::io::Result<ExitStatus> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])?;
    let handle = signals.handle();
    vs_sandbox::launch::terminate_with_parent(cmd);
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        Err(e) => {
            handle.close();
            return Err(e);
        }
    };
    let pid = rustix::process::Pid::from_raw(child.id() as i32);
    let forwarder = std::thread::spawn(move || {
        for sig in signals.forever() {
            if let (Some(pid), Some(sig)) = (pid, rustix::process::Signal::from_named_raw(sig)) {
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
    });
    // The child stays unreaped (its pid not reusable) until `wait`
    // returns; the forwarder is stopped right after.
    let status = child.wait();
    handle.close();
    let _ = forwarder.join();
    status
}
