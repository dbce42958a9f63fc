//! `vibesys state ...`: the run-state layout (vs-runtime).

use clap::{Args, Subcommand};

/// Arguments of `vibesys state`.
#[derive(Debug, Args)]
pub struct StateArgs {
    #[command(subcommand)]
    command: StateCommand,
}

#[derive(Debug, Subcommand)]
enum StateCommand {}

/// Runs `vibesys state ...` and returns the exit status.
pub fn run(args: StateArgs) -> anyhow::Result<u8> {
    match args.command {}
}
