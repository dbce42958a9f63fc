//! `vibesys doctor`: which confinement mechanisms work here, and why not.

use clap::Args;

/// Arguments of `vibesys doctor`.
#[derive(Debug, Args)]
#[command(
    after_help = "Exit status: 0 when the default mechanism (bwrap on Linux) works, 1 otherwise."
)]
pub struct DoctorArgs {
    /// Print JSON: {"checks": [{"name", "ok", "detail", "fix"}]}.
    #[arg(long)]
    json: bool,
}

/// Runs `vibesys doctor`.
pub fn run(args: DoctorArgs) -> anyhow::Result<u8> {
    let helper = crate::project::helper_exe().map_err(|e| format!("{e:#}"));
    // The project in the current directory, when it is one: its hidden
    // paths are looked for in git history.
    let project = crate::project::PolicyArgs::for_current_dir().plan().ok();
    let report = vs_runtime::doctor::report(&helper, project.as_ref());
    if args.json {
        crate::output::print_json(&serde_json::to_value(&report)?)?;
    } else {
        crate::output::print_text(&report.to_string())?;
    }
    Ok(if report.default_ok() { 0 } else { 1 })
}
