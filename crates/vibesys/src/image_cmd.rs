//! `vibesys image ...`: build, inspect, pin, verify (vs-image).
//!
//! Thin: arguments are resolved into [`vs_image::BuildOptions`] (or a path
//! and a lock) before any work starts; the library does the work; this
//! module prints. `--json` outputs are stable: their keys are the serde
//! field names of `BuildReport`, `InspectReport` and the pin/verify records
//! below, documented in docs/images.md.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::{Args, Subcommand, ValueEnum};
use serde::Serialize;
use vs_image::{BuildOptions, Compression, ImageSpec, InspectReport, Lock, OutputFormat, Source};

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

fn out() -> std::io::StdoutLock<'static> {
    std::io::stdout().lock()
}

fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    let mut o = out();
    serde_json::to_writer_pretty(&mut o, v)?;
    writeln!(o)?;
    Ok(())
}

/// `SOURCE_DATE_EPOCH`, default 1.
fn source_date_epoch() -> anyhow::Result<u64> {
    match std::env::var("SOURCE_DATE_EPOCH") {
        Err(_) => Ok(1),
        Ok(v) if v.is_empty() => Ok(1),
        Ok(v) => v
            .parse()
            .with_context(|| format!("SOURCE_DATE_EPOCH={v:?} is not a non-negative integer")),
    }
}

/// The cache directory: explicit, else XDG, else ~/.cache; none if unknown.
fn default_cache() -> Option<PathBuf> {
    let nonempty = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    // Never create a home directory: the Nix sandbox sets HOME to a path
    // that does not exist (/homeless-shelter).
    nonempty("XDG_CACHE_HOME")
        .filter(|p| p.is_absolute() && p.is_dir())
        .or_else(|| {
            nonempty("HOME")
                .filter(|h| h.is_absolute() && h.is_dir())
                .map(|h| h.join(".cache"))
        })
        .map(|p| p.join("vibesys").join("images"))
}

fn absolute(p: &Path) -> anyhow::Result<String> {
    let abs = std::path::absolute(p).with_context(|| format!("cannot resolve {}", p.display()))?;
    let s = abs
        .to_str()
        .with_context(|| format!("{} is not valid UTF-8", abs.display()))?;
    // Drop a trailing slash; keep the path otherwise as given (no symlink resolution).
    let s = s.trim_end_matches('/');
    Ok(if s.is_empty() {
        "/".to_owned()
    } else {
        s.to_owned()
    })
}

struct Bar(indicatif::ProgressBar);

impl vs_image::Progress for Bar {
    fn begin(&self, layers: usize, bytes: u64) {
        self.0.set_length(bytes);
        self.0.set_message(format!("{layers} layers"));
    }
    fn layer_done(&self, bytes: u64, _cached: bool) {
        self.0.inc(bytes);
    }
}

fn build(a: BuildArgs) -> anyhow::Result<u8> {
    let spec = ImageSpec::load(&a.spec)?;
    let source = if let Some(r) = &a.root {
        Source::Root(r.clone())
    } else if let Some(g) = &a.references_graph {
        Source::ReferencesGraph(g.clone())
    } else if !a.paths.is_empty() {
        Source::Paths(
            a.paths
                .iter()
                .map(|p| absolute(p))
                .collect::<anyhow::Result<_>>()?,
        )
    } else {
        Source::Spec
    };
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
    let opts = BuildOptions {
        spec,
        out: a.out.clone(),
        format,
        source,
        compression,
        source_date_epoch: source_date_epoch()?,
        cache: if a.no_cache {
            None
        } else {
            a.cache.clone().or_else(default_cache)
        },
    };
    let report = if std::io::stderr().is_terminal() {
        let pb = indicatif::ProgressBar::new(0);
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} {elapsed}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let bar = Bar(pb);
        let r = vs_image::build(&opts, &bar);
        bar.0.finish_and_clear();
        r?
    } else {
        vs_image::build(&opts, &())?
    };
    if a.json {
        print_json(&report)?;
        return Ok(0);
    }
    let mut o = out();
    writeln!(
        o,
        "built {}:{} ({}) -> {}",
        report.name,
        report.tag,
        report.format.as_str(),
        report.out.display()
    )?;
    if let Some(d) = &report.manifest_digest {
        writeln!(o, "  manifest  {d}")?;
    }
    if let Some(d) = &report.config_digest {
        writeln!(o, "  config    {d}  (image ID)")?;
    }
    if !report.layers.is_empty() {
        let cached = report.layers.iter().filter(|l| l.cached).count();
        let size: u64 = report.layers.iter().map(|l| l.size).sum();
        writeln!(
            o,
            "  layers    {} ({cached} from cache), {}",
            report.layers.len(),
            human(size)
        )?;
    }
    if let Some(d) = &report.archive_digest {
        writeln!(o, "  file      {d}")?;
    }
    Ok(0)
}

fn human(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
    } else {
        format!("{n} B")
    }
}

fn inspect(a: InspectArgs) -> anyhow::Result<u8> {
    let r = vs_image::inspect(&a.path, a.verify)?;
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    let mut o = out();
    let name = format!(
        "{}:{}",
        r.name.as_deref().unwrap_or("<unnamed>"),
        r.tag.as_deref().unwrap_or("latest")
    );
    writeln!(o, "{name}  ({}, {})", r.format, r.platform)?;
    if let Some(d) = &r.manifest_digest {
        writeln!(o, "manifest  {d}")?;
    }
    writeln!(o, "config    {}  (image ID)", r.config_digest)?;
    for key in ["Entrypoint", "Cmd", "User", "WorkingDir"] {
        if let Some(v) = r.config.get(key) {
            writeln!(o, "{:<9} {v}", key.to_lowercase())?;
        }
    }
    writeln!(
        o,
        "layers    {} ({})",
        r.layers.len(),
        human(r.total_layer_size)
    )?;
    for (i, l) in r.layers.iter().enumerate() {
        writeln!(
            o,
            "  {:>3}  {}  {:>10}  diff_id {}",
            i + 1,
            l.digest,
            human(l.size),
            l.diff_id
        )?;
    }
    match &r.sbom {
        Some(s) => writeln!(
            o,
            "sbom      {} ({}, {} packages)",
            s.digest, s.spdx_version, s.packages
        )?,
        None => writeln!(o, "sbom      none")?,
    }
    if let Some(d) = &r.archive_digest {
        writeln!(o, "file      {d}")?;
    }
    if r.verified {
        writeln!(
            o,
            "verified: every blob re-hashed, every layer entry checked"
        )?;
    }
    Ok(0)
}

#[derive(Serialize)]
struct PinRecord {
    path: PathBuf,
    name: String,
    format: String,
    manifest_digest: Option<vs_image::Digest>,
    config_digest: vs_image::Digest,
    archive_digest: Option<vs_image::Digest>,
}

fn lock_dir(lock: &Path) -> PathBuf {
    match lock.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

fn pin(a: PinArgs) -> anyhow::Result<u8> {
    let mut lock = Lock::load_or_default(&a.lock)?;
    let dir = lock_dir(&a.lock);
    let mut records = Vec::new();
    for p in &a.paths {
        let r = vs_image::inspect(p, true)?;
        let rel = if p.is_dir() {
            None
        } else {
            Some(vs_image::relative_to(p, &dir)?)
        };
        lock.pin(&r, rel)?;
        records.push(record(&r));
    }
    lock.save(&a.lock)?;
    if a.json {
        print_json(&records)?;
    } else {
        let mut o = out();
        for r in &records {
            writeln!(
                o,
                "pinned {} ({}) {} in {}",
                r.name,
                r.format,
                r.config_digest,
                a.lock.display()
            )?;
        }
    }
    Ok(0)
}

fn record(r: &InspectReport) -> PinRecord {
    PinRecord {
        path: r.path.clone(),
        name: r.name.clone().unwrap_or_default(),
        format: r.format.clone(),
        manifest_digest: r.manifest_digest.clone(),
        config_digest: r.config_digest.clone(),
        archive_digest: r.archive_digest.clone(),
    }
}

fn verify(a: VerifyArgs) -> anyhow::Result<u8> {
    let lock = Lock::load(&a.lock)?;
    let dir = lock_dir(&a.lock);
    let paths: Vec<PathBuf> = if a.paths.is_empty() {
        lock.images
            .values()
            .flat_map(|i| i.archives.values().map(|x| dir.join(&x.path)))
            .collect()
    } else {
        a.paths.clone()
    };
    let mut records = Vec::new();
    for p in &paths {
        let r = vs_image::inspect(p, true).with_context(|| format!("verifying {}", p.display()))?;
        lock.check_report(&r, &a.lock)?;
        records.push(record(&r));
    }
    if a.json {
        print_json(&records)?;
    } else {
        let mut o = out();
        for r in &records {
            writeln!(
                o,
                "ok {} ({}) {} matches {}",
                r.name,
                r.format,
                r.path.display(),
                a.lock.display()
            )?;
        }
        if records.is_empty() {
            writeln!(
                o,
                "{}: {} images pinned, no archives recorded to check",
                a.lock.display(),
                lock.images.len()
            )?;
        }
    }
    Ok(0)
}

/// Blobs below this size get no progress bar.
const BAR_MIN: u64 = 32 << 20;

/// Progress bars for large blobs on a terminal's stderr; nothing when
/// stderr is piped.
struct Transfer {
    bars: Option<indicatif::MultiProgress>,
    current: std::sync::Mutex<Option<indicatif::ProgressBar>>,
    verb: &'static str,
    /// Set by SIGINT/SIGTERM when the transfer stops cleanly on them.
    stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Transfer {
    fn new(verb: &'static str) -> Self {
        Self {
            bars: std::io::stderr()
                .is_terminal()
                .then(indicatif::MultiProgress::new),
            current: std::sync::Mutex::new(None),
            verb,
            stop: None,
        }
    }

    /// A transfer that SIGINT or SIGTERM stops at its next chunk (the pull
    /// then removes what it wrote); a second signal ends the process at
    /// once.
    fn stopped_by_signals(mut self) -> anyhow::Result<Self> {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register_conditional_shutdown(
                sig,
                130,
                std::sync::Arc::clone(&stop),
            )
            .context("cannot install the SIGINT/SIGTERM handler")?;
            signal_hook::flag::register(sig, std::sync::Arc::clone(&stop))
                .context("cannot install the SIGINT/SIGTERM handler")?;
        }
        self.stop = Some(stop);
        Ok(self)
    }
}

impl vs_image::registry::TransferProgress for Transfer {
    fn start(&self, digest: &vs_image::Digest, size: u64) {
        let Some(m) = &self.bars else { return };
        if size < BAR_MIN {
            return;
        }
        let pb = m.add(indicatif::ProgressBar::new(size));
        pb.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        pb.set_message(format!("{} {}", self.verb, &digest.hex()[..12]));
        if let Ok(mut c) = self.current.lock() {
            *c = Some(pb);
        }
    }
    fn advance(&self, _digest: &vs_image::Digest, n: u64) {
        if let Ok(c) = self.current.lock()
            && let Some(pb) = c.as_ref()
        {
            pb.inc(n);
        }
    }
    fn finish(&self, _digest: &vs_image::Digest) {
        if let Ok(mut c) = self.current.lock()
            && let Some(pb) = c.take()
        {
            pb.finish_and_clear();
        }
    }
    fn cancelled(&self) -> bool {
        self.stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::Relaxed))
    }
}

fn push(a: PushArgs) -> anyhow::Result<u8> {
    let opts = vs_image::registry::PushOptions {
        image: a.image.clone(),
        target: a.reference.parse()?,
        lock: a.lock.clone(),
        registry: a.registry.options(),
    };
    let r = vs_image::registry::push(&opts, &Transfer::new("push"))?;
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    let count = |act| r.blobs.iter().filter(|b| b.action == act).count();
    use vs_image::registry::BlobAction;
    eprintln!(
        "pushed {}: {} blobs uploaded ({}), {} present, {} mounted{}",
        a.image.display(),
        count(BlobAction::Uploaded),
        human(r.uploaded_bytes),
        count(BlobAction::Present),
        count(BlobAction::Mounted),
        match &r.lock_image {
            Some(n) => format!(
                "; {} records it for {n}",
                a.lock.as_deref().unwrap_or(Path::new("")).display()
            ),
            None => String::new(),
        }
    );
    writeln!(out(), "{}", r.reference)?;
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
        out: a.out.clone(),
        format,
        lock: a.lock.clone(),
        registry: a.registry.options(),
    };
    let r = match vs_image::registry::pull(&opts, &Transfer::new("pull").stopped_by_signals()?) {
        Ok(r) => r,
        // Interrupted, as a run is: 130.
        Err(e @ vs_image::Error::Interrupted { .. }) => {
            let _ = writeln!(std::io::stderr(), "vibesys: {e}");
            return Ok(130);
        }
        Err(e) => return Err(e.into()),
    };
    if a.json {
        print_json(&r)?;
        return Ok(0);
    }
    writeln!(
        out(),
        "pulled {} ({}:{}) -> {} ({}, {} blobs, {})",
        r.reference,
        r.name,
        r.tag,
        r.out.display(),
        r.format.as_str(),
        r.blobs,
        human(r.bytes)
    )?;
    Ok(0)
}
