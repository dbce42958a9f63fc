//! `vibesys gate ...`: the accuracy gate (vs-runtime).

use clap::{Args, Subcommand};

/// Arguments of `vibesys gate`.
#[derive(Debug, Args)]
pub struct GateArgs {
    #[command(subcommand)]
    command: GateCommand,
}

#[derive(Debug, Subcommand)]
enum GateCommand {}

/// Runs `vibesys gate ...` and returns the exit status.
pub fn run(args: GateArgs) -> anyhow::Result<u8> {
    match args.command {}
}
