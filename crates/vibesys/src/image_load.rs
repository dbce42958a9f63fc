//! `vibesys image load PATH`: check an image archive against
//! `images/images.lock` ([`vs_image::check_archive`]), then stream it into
//! the Docker Engine and check what it holds against the pin
//! ([`vs_docker::load`]).

use std::path::PathBuf;

use vs_docker::ImagePin;

/// Arguments of `vibesys image load`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// An image archive built by `vibesys image build` (the default hybrid
    /// archive or a docker-archive).
    path: PathBuf,
    /// The lock file.
    #[arg(long, default_value = "images/images.lock")]
    lock: PathBuf,
    /// Print what was done as JSON: {"image", "id", "id_kind", "loaded", "bytes"}.
    #[arg(long)]
    json: bool,
}

/// Runs `vibesys image load`.
pub fn run(args: LoadArgs) -> anyhow::Result<u8> {
    // The archive's own metadata against the lock, before anything is
    // uploaded.
    let archive = vs_image::check_archive(&args.path, &args.lock)?;
    let pin = ImagePin::from_locked(&archive.name, &archive.pinned);
    let report = vs_docker::load(&args.path, &pin, &archive.tag)?;
    if args.json {
        crate::output::print_json(&serde_json::to_value(&report)?)?;
    } else {
        crate::output::print_text(&report.to_string())?;
    }
    Ok(0)
}
