//! `vibesys`: the command-line front of the vibesys crates.
//!
//! Each command parses its arguments (clap), resolves them into validated
//! settings (`vs_runtime::ProjectSettings`), calls a library operation
//! (`vs_sandbox::select` for every confined launch) and maps the result to
//! an exit status. The hidden helpers are run by `vs_runtime::helper_entry`
//! before any parsing. `vibesys run`'s placement of candidates and its
//! Slurm broker child are vs-runtime's (`run_host`, `broker::child`). When
//! vibesys itself fails it prints `vibesys: error: ...` and exits 125;
//! otherwise a confined command's own status passes through.

mod broker_cmd;
mod build_cmd;
mod docker_cmd;
mod doctor_cmd;
mod env_args;
mod exec_cmd;
mod gate_cmd;
mod image_cmd;
mod image_load;
mod output;
mod policy_cmd;
mod project;
mod remote_cmd;
mod run_cmd;
mod run_env_cmd;
mod run_progress;
mod session_cmd;
mod state_cmd;

use std::process::ExitCode;

use clap::{Args, FromArgMatches, Parser, Subcommand};

/// Exit status when vibesys itself fails (as `env`, `timeout`, `podman run`).
pub const EXIT_VIBESYS_ERROR: u8 = 125;

/// Confinement and hermetic images for AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "vibesys", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    #[command(about = exec_cmd::ABOUT)]
    Exec(exec_cmd::ExecArgs),
    /// Show the project's policy and the plan each backend applies.
    Policy(policy_cmd::PolicyCmdArgs),
    /// Launch a provider CLI (codex, claude, gemini) or any command confined.
    Session(session_cmd::SessionArgs),
    /// Report which confinement mechanisms work on this host.
    Doctor(doctor_cmd::DoctorArgs),
    /// Build, inspect, load, pin, verify, push and pull OCI images.
    Image(image_cmd::ImageArgs),
    /// Create and inspect the run state below `.vibesys/state/`.
    State(state_cmd::StateArgs),
    /// The accuracy gate: record and check protected paths.
    Gate(gate_cmd::GateArgs),
    /// Trusted candidate build: run [build] confined in a fresh checkout, verify and record its outputs.
    Build(build_cmd::BuildArgs),
    /// Run candidates end to end: confined agents, the gate, the trusted build, check and measure.
    Run(run_cmd::RunArgs),
    /// Run environments: which command runner and confinement each uses.
    #[command(name = "run-env")]
    RunEnv(run_env_cmd::RunEnvCmdArgs),
    /// The slurm run environment's host command broker and its client.
    Broker(broker_cmd::BrokerArgs),
}

/// The allocator of the static (musl) build, the binary vibesys ships.
/// musl's own malloc (mallocng) maps and unmaps pages for its slot groups
/// as they fill and empty: a confined launch made ~95 `mmap`/`munmap`
/// calls and touched ~85 fresh heap pages, a tenth of the launch.
/// dlmalloc (pure Rust, the allocator of Rust's own wasm targets) takes
/// memory in 64 KiB+ segments and keeps what it frees: a Landlock launch
/// took 0.91x the time, a bwrap launch 0.95x, a cold image build 0.93x
/// (docs/sandboxing.md, "The allocator of the static build"). glibc
/// builds keep glibc's malloc.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() -> ExitCode {
    // The hidden helpers a confined command is launched through (their
    // protocol is vs-sandbox's, their dispatch vs-runtime's): no
    // command-line parsing of ours on the launch path.
    if let Some(status) = vs_runtime::helper_entry::run_if_helper(std::env::args_os()) {
        return ExitCode::from(u8::try_from(status).unwrap_or(EXIT_VIBESYS_ERROR));
    }
    let cli = match parse() {
        Ok(cli) => cli,
        Err(err) => {
            // --help and --version print and succeed; a usage error is a
            // vibesys failure like any other (the command did not run).
            let code = if err.use_stderr() {
                EXIT_VIBESYS_ERROR
            } else {
                0
            };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    vs_runtime::logging::init_stderr();
    let result = match cli.command {
        Command::Exec(args) => exec_cmd::run(args),
        Command::Policy(args) => policy_cmd::run(args),
        Command::Doctor(args) => doctor_cmd::run(args),
        Command::Session(args) => session_cmd::run(args),
        Command::Image(args) => image_cmd::run(args),
        Command::State(args) => state_cmd::run(args),
        Command::Gate(args) => gate_cmd::run(args),
        Command::Build(args) => build_cmd::run(args),
        Command::Run(args) => run_cmd::run(args),
        Command::RunEnv(args) => run_env_cmd::run_env(args),
        Command::Broker(args) => broker_cmd::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("vibesys: error: {err:#}");
            ExitCode::from(EXIT_VIBESYS_ERROR)
        }
    }
}

/// The command line. `exec` is on the launch path of every confined
/// command, so for it only its own parser is built: clap builds every
/// subcommand's otherwise, a third of vibesys's start-up. It is the same
/// `ExecArgs` under the same name and text as in the whole tree, so its
/// help and errors read the same (tests/cli_text.rs).
fn parse() -> Result<Cli, clap::Error> {
    if std::env::args_os().nth(1).is_some_and(|a| a == "exec") {
        let exec = exec_cmd::ExecArgs::augment_args(clap::Command::new("exec"))
            .about(exec_cmd::ABOUT)
            .long_about(None);
        let cli = clap::Command::new("vibesys")
            .subcommand_required(true)
            .subcommand(exec);
        return Cli::from_arg_matches(&cli.try_get_matches()?);
    }
    Cli::try_parse()
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// The fast path's `exec` is the whole tree's.
    #[test]
    fn exec_parser_matches_the_full_tree() {
        let full = Cli::command();
        let exec = full
            .find_subcommand("exec")
            .map(|c| c.get_about().map(ToString::to_string));
        assert_eq!(exec, Some(Some(exec_cmd::ABOUT.to_owned())));
    }
}
