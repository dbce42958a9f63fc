//! `vibesys image ...`: build, inspect, load, pin, verify (vs-image).

use clap::{Args, Subcommand};

/// Arguments of `vibesys image`.
#[derive(Debug, Args)]
pub struct ImageArgs {
    #[command(subcommand)]
    command: ImageCommand,
}

#[derive(Debug, Subcommand)]
enum ImageCommand {}

/// Runs `vibesys image ...` and returns the exit status.
pub fn run(args: ImageArgs) -> anyhow::Result<u8> {
    match args.command {}
}
