//! `vibesys`: the command-line front of the vibesys crates.
//!
//! The binary is thin: it parses arguments (clap), resolves them into
//! validated settings, calls a library operation and maps the result to an
//! exit status. When vibesys itself fails it prints `vibesys: error: ...`
//! and exits 125; otherwise a confined command's own status passes through.

mod gate_cmd;
mod image_cmd;
mod state_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    /// Build, inspect, load, pin and verify OCI images.
    Image(image_cmd::ImageArgs),
    /// Create and inspect the run state below `.vibesys/state/`.
    State(state_cmd::StateArgs),
    /// The accuracy gate: record and check protected paths.
    Gate(gate_cmd::GateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging();
    let result = match cli.command {
        Command::Image(args) => image_cmd::run(args),
        Command::State(args) => state_cmd::run(args),
        Command::Gate(args) => gate_cmd::run(args),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("vibesys: error: {err:#}");
            ExitCode::from(EXIT_VIBESYS_ERROR)
        }
    }
}

/// Log to stderr; `VIBESYS_LOG` (an `EnvFilter` directive) sets the level.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("VIBESYS_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .try_init();
}
