//! `vibesys image load PATH`: check an image archive against
//! `images/images.lock` (vs-image reads it), then stream it into the Docker
//! Engine and check what it holds against the pin
//! ([`vs_docker::load`]).

use std::path::PathBuf;

use anyhow::Context as _;
use vs_docker::ImagePin;
use vs_image::{IdKind, Lock};

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
    let archive = vs_image::inspect(&args.path, false)
        .with_context(|| format!("cannot read image archive {:?}", args.path))?;
    let lock = Lock::load(&args.lock)?;
    lock.check_report(&archive, &args.lock)?;
    // `check_report` refuses an image without a name.
    let name = archive.name.clone().with_context(|| {
        format!(
            "cannot read image archive {:?}: it names no image",
            args.path
        )
    })?;
    let tag = archive.tag.as_deref().unwrap_or("latest");
    let pin = ImagePin::from_locked(&name, lock.image(&name, &args.lock)?);
    let report = vs_docker::load(&args.path, &pin, tag)?;
    if args.json {
        crate::output::print_json(&serde_json::to_value(&report)?)?;
    } else {
        crate::output::print_text(&format!(
            "{} {} as {} ({} digest){}\n",
            if report.loaded {
                "loaded"
            } else {
                "already loaded:"
            },
            report.image,
            report.id,
            match report.id_kind {
                IdKind::Config => "config",
                IdKind::Manifest => "manifest",
            },
            if report.loaded {
                format!(", {} bytes streamed", report.bytes)
            } else {
                String::new()
            }
        ))?;
    }
    Ok(0)
}
