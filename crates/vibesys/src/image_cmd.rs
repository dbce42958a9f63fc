//! `vibesys image ...`: build, inspect, pin, verify (vs-image).
//!
//! Thin: arguments are resolved into [`vs_image::BuildOptions`] (or a path
//! and a lock) before any work starts; the library does the work and
//! renders its reports (`Display`); this module prints. `--json` outputs
//! are stable: their keys are the serde field names of `BuildReport`,
//! `InspectReport`, `PinRecord` and the registry reports, documented in
//! docs/images.md.

use std::io::Write;
use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use vs_image::progress::{BuildBar, TransferBars};
use vs_image::{BuildOptions, Compression, ImageSpec, OutputFormat, Source};

/// Arguments of `vibesys image`.
#[derive(Debug, Args)]
pub struct ImageArgs {
    #[command(subcommand)]
    command: ImageCommand,
}

#[derive(Debug, Subcommand)]
enum ImageCommand {
    /// Build a reproducible image from a spec (images/*.toml).
    ///
    /// Contents come from --root, --path or --references-graph, else from
    /// the spec's [host] section. Every entry gets mtime SOURCE_DATE_EPOCH
    /// (default 1), uid/gid 0 and a normalised mode, so the same inputs give
    /// the same digests anywhere. Built layers are cached (--cache,
    /// VIBESYS_IMAGE_CACHE, else $XDG_CACHE_HOME or ~/.cache/vibesys/images);
    /// an unwritable cache is skipped silently.
    Build(BuildArgs),
    /// Show an image's layers, digests, config and SBOM; --verify re-hashes
    /// every blob and checks every layer entry.
    Inspect(InspectArgs),
    /// Verify images and record their digests in the lock file.
    ///
    /// Each PATH (archive or OCI layout) is verified like `inspect --verify`,
    /// then its manifest digest, config digest, layer diff_ids and (for
    /// archives) file digest and path are written to the lock atomically.
    Pin(PinArgs),
    /// Check images against the lock file.
    ///
    /// Each PATH given is verified (every blob re-hashed) and compared with
    /// the lock entry of its image name: config digest, manifest digest,
    /// layer diff_ids and, for a pinned archive of the same format, the file
    /// digest. Without PATH, every archive recorded in the lock (paths are
    /// relative to the lock file) is checked that way. Any mismatch fails
    /// with an error naming the pinned and the found digest.
    Verify(VerifyArgs),
    /// Stream an archive into the Docker Engine and check it against the lock.
    ///
    /// Refuses an archive or a loaded image whose digests differ from the
    /// lock, naming both; a no-op when the pinned image is already loaded.
    Load(crate::image_load::LoadArgs),
    /// Push an image archive or OCI layout to a registry; prints REPO@sha256:...
    ///
    /// Every blob is checked with HEAD first and only what the registry
    /// lacks is uploaded (mounted from another repository of the registry
    /// when the lock records the image there), then the image manifest
    /// (tagged when REF has a tag), then the SBOM as the manifest's
    /// referrer. Credentials come from ~/.docker/config.json (auths,
    /// credsStore, credHelpers) or the containers auth.json. With --lock
    /// the image must be the pinned one, and the lock records where it
    /// was pushed.
    Push(PushArgs),
    /// Pull an image by digest from a registry into an archive or layout.
    ///
    /// Only REF@sha256:... is fetched (a tag alone is refused unless --lock
    /// pins what it must resolve to). Every blob is checked against its
    /// descriptor while it is written to a temporary directory next to
    /// --out; the output is put in place only when all is checked, with
    /// the bytes a local build of the image writes.
    Pull(PullArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FormatArg {
    /// One tar that is both an oci-archive and a docker-archive.
    Archive,
    /// An OCI image layout directory.
    Oci,
    /// An OCI image layout in a tar.
    OciArchive,
    /// A `docker save` style tar.
    DockerArchive,
    /// A flattened rootfs as squashfs (enroot, Charliecloud).
    Squashfs,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum CompressionArg {
    /// Plain tar layers (fastest for local loading).
    None,
    /// gzip level 6.
    Gzip,
    /// zstd level 3.
    Zstd,
}

#[derive(Debug, Args)]
struct BuildArgs {
    /// The image spec (TOML).
    spec: PathBuf,
    /// Output path: a file, or a directory for --format oci.
    #[arg(long)]
    out: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "archive")]
    format: FormatArg,
    /// A root directory whose tree becomes the image's `/` (device nodes,
    /// fifos and sockets below its /dev are skipped).
    #[arg(long, conflicts_with_all = ["paths", "references_graph"])]
    root: Option<PathBuf>,
    /// Host paths, kept at their absolute location in the image.
    #[arg(long = "path", value_name = "P", num_args = 1.., conflicts_with = "references_graph")]
    paths: Vec<PathBuf>,
    /// A Nix exportReferencesGraph file: every store path of the closure.
    #[arg(long, value_name = "FILE")]
    references_graph: Option<PathBuf>,
    /// Layer compression.
    #[arg(long, value_enum, default_value = "none")]
    compression: CompressionArg,
    /// Layer cache directory.
    #[arg(long, env = "VIBESYS_IMAGE_CACHE", value_name = "DIR")]
    cache: Option<PathBuf>,
    /// Do not read or write the layer cache (wins over --cache and
    /// VIBESYS_IMAGE_CACHE).
    #[arg(long)]
    no_cache: bool,
    /// Print the build report as JSON.
    #[arg(long)]
    json: bool,
}

/// How to reach a registry (push and pull).
#[derive(Debug, Args)]
struct RegistryArgs {
    /// PEM CA certificates to trust besides the system's roots.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<PathBuf>,
    /// Allow plain HTTP to a registry that is not on loopback (a loopback
    /// registry without TLS is spoken to in plain HTTP anyway).
    #[arg(long)]
    insecure_http: bool,
}

impl RegistryArgs {
    fn options(&self) -> vs_image::registry::RegistryOptions {
        vs_image::registry::RegistryOptions {
            ca_file: self.ca_file.clone(),
            insecure_http: self.insecure_http,
        }
    }
}

#[derive(Debug, Args)]
struct PushArgs {
    /// The image: an archive (the default archive or an oci-archive) or an
    /// OCI layout directory.
    image: PathBuf,
    /// Where to: HOST[:PORT]/REPO[:TAG].
    reference: String,
    /// A lock the image must be pinned in; records the pushed reference.
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Print the push report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PullFormatArg {
    /// One tar that is both an oci-archive and a docker-archive.
    Archive,
    /// An OCI image layout directory.
    Oci,
    /// An OCI image layout in a tar.
    OciArchive,
    /// A `docker save` style tar.
    DockerArchive,
    /// The image's layers flattened into a squashfs rootfs (enroot,
    /// Charliecloud), as `image build --format squashfs` writes it.
    Squashfs,
}

#[derive(Debug, Args)]
struct PullArgs {
    /// HOST[:PORT]/REPO@sha256:... (or HOST/REPO:TAG with --lock).
    reference: String,
    /// Output path: a file, or a directory for --format oci.
    #[arg(long)]
    out: PathBuf,
    /// Output format.
    #[arg(long, value_enum, default_value = "archive")]
    format: PullFormatArg,
    /// A lock the pulled image must match (and that a tag must resolve to).
    #[arg(long, value_name = "FILE")]
    lock: Option<PathBuf>,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Print the pull report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct InspectArgs {
    /// An image archive or OCI layout directory.
    path: PathBuf,
    /// Re-hash every blob, compare diff_ids, check every layer entry.
    #[arg(long)]
    verify: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct PinArgs {
    /// Image archives or OCI layout directories.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// The lock file.
    #[arg(long, default_value = "images/images.lock")]
    lock: PathBuf,
    /// Print what was pinned as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    /// Images to check; default: every archive recorded in the lock.
    paths: Vec<PathBuf>,
    /// The lock file.
    #[arg(long, default_value = "images/images.lock")]
    lock: PathBuf,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `vibesys image ...` and returns the exit status.
pub fn run(args: ImageArgs) -> anyhow::Result<u8> {
    match args.command {
        ImageCommand::Build(a) => build(a),
        ImageCommand::Inspect(a) => inspect(a),
        ImageCommand::Pin(a) => pin(a),
        ImageCommand::Verify(a) => verify(a),
        ImageCommand::Load(a) => crate::image_load::run(a),
        ImageCommand::Push(a) => push(a),
        ImageCommand::Pull(a) => pull(a),
    }
}

/// Prints `value` as pretty JSON.
fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    crate::output::print_json(&serde_json::to_value(value)?)
}

fn build(a: BuildArgs) -> anyhow::Result<u8> {
    let spec = ImageSpec::load(&a.spec)?;
    let source = Source::select(a.root, a.references_graph, &a.paths)?;
    let format = match a.format {
        FormatArg::Archive => OutputFormat::Archive,
        FormatArg::Oci => OutputFormat::Oci,
        FormatArg::OciArchive => OutputFormat::OciArchive,
        FormatArg::DockerArchive => OutputFormat::DockerArchive,
        FormatArg::Squashfs => OutputFormat::Squashfs,
    };
    let compression = match a.compression {
        CompressionArg::None => Compression::None,
        CompressionArg::Gzip => Compression::Gzip,
        CompressionArg::Zstd => Compression::Zstd,
    };
    if a.out.as_os_str().is_empty() {
        bail!("--out is empty");
    }
    let env = std::env::var_os;
    let opts = BuildOptions {
        spec,
        out: a.out,
        format,
        source,
        compression,
        source_date_epoch: vs_image::source_date_epoch(
            std::env::var("SOURCE_DATE_EPOCH").ok().as_deref(),
        )?,
        cache: match a.cache {
            _ if a.no_cache => None,
            Some(dir) => Some(dir),
            None => vs_image::default_cache_dir(
                env("XDG_CACHE_HOME").as_deref(),
                env("HOME").as_deref(),
            ),
        },
    };
    let report = vs_image::build(&opts, &BuildBar::on_stderr())?;
    show(a.json, &report, &report)
}

/// Prints `data` as JSON, or `text` for people.
fn show(json: bool, data: &impl Serialize, text: &impl std::fmt::Display) -> anyhow::Result<u8> {
    if json {
        print_json(data)?;
    } else {
        crate::output::print_text(&text.to_string())?;
    }
    Ok(0)
}

fn inspect(a: InspectArgs) -> anyhow::Result<u8> {
    let report = vs_image::inspect(&a.path, a.verify)?;
    show(a.json, &report, &report)
}

fn pin(a: PinArgs) -> anyhow::Result<u8> {
    let report = vs_image::pin_images(&a.lock, &a.paths)?;
    show(a.json, &report.records, &report)
}

fn verify(a: VerifyArgs) -> anyhow::Result<u8> {
    let report = vs_image::verify_images(&a.lock, &a.paths)?;
    show(a.json, &report.records, &report)
}

fn push(a: PushArgs) -> anyhow::Result<u8> {
    let opts = vs_image::registry::PushOptions {
        image: a.image,
        target: a.reference.parse()?,
        lock: a.lock,
        registry: a.registry.options(),
    };
    let r = vs_image::registry::push(&opts, &TransferBars::on_stderr("push"))?;
    if a.json {
        print_json(&r)?;
    } else {
        eprintln!("{}", r.summary(&opts.image, opts.lock.as_deref()));
        crate::output::print_text(&format!("{}\n", r.reference))?;
    }
    Ok(0)
}

fn pull(a: PullArgs) -> anyhow::Result<u8> {
    let format = match a.format {
        PullFormatArg::Archive => OutputFormat::Archive,
        PullFormatArg::Oci => OutputFormat::Oci,
        PullFormatArg::OciArchive => OutputFormat::OciArchive,
        PullFormatArg::DockerArchive => OutputFormat::DockerArchive,
        PullFormatArg::Squashfs => OutputFormat::Squashfs,
    };
    let opts = vs_image::registry::PullOptions {
        source: a.reference.parse()?,
        out: a.out,
        format,
        lock: a.lock,
        registry: a.registry.options(),
    };
    let bars = TransferBars::on_stderr("pull").stopped_by_signals()?;
    match vs_image::registry::pull(&opts, &bars) {
        Ok(report) => show(a.json, &report, &report),
        // Interrupted, as a run is: 130.
        Err(e @ vs_image::Error::Interrupted { .. }) => {
            let _ = writeln!(std::io::stderr(), "vibesys: {e}");
            Ok(130)
        }
        Err(e) => Err(e.into()),
    }
}
