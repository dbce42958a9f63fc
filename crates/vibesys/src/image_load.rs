//! `vibesys image load PATH`: stream an image archive into the Docker
//! Engine and check what it holds against `images/images.lock`
//! ([`vs_sandbox::docker::load`] does the work).

use std::path::PathBuf;

use vs_image::IdKind;

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
    let report = vs_sandbox::docker::load(&args.path, &args.lock)?;
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
