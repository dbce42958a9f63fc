//! `build`: spec + inputs -> layers -> documents -> output format (the
//! orchestrator; the types it takes and returns live in `options` and
//! `report`, the file helpers in `files`).

use std::path::{Path, PathBuf};

use oci_spec::image::{Descriptor, MediaType};
use rayon::prelude::*;

use crate::archive::{self, ArchiveId, BlobSrc, NewArchive, OldArchive};
use crate::cache::{Cache, link_or_copy};
use crate::digest::Digest;
use crate::error::Error;
use crate::files::{file_name, parent_of, replace_dir, write_file};
use crate::graph::ReferencesGraph;
use crate::input::{self, Entry, Group, Kind};
use crate::known::KnownDigests;
use crate::layer::{LayerMeta, LayerPlan, Sink};
use crate::mounts;
use crate::oci::{self, media};
use crate::options::{BuildOptions, Compression, OutputFormat, Progress, Source};
use crate::report::{BuildReport, BuiltLayer};
use crate::spec::{ExtraFile, FileKind, ImageSpec, normalize_abs};
use crate::squashfs;

/// Name of the group holding the spec's extra files.
pub(crate) const EXTRA_GROUP: &str = "extra files";

fn extra_group(spec: &ImageSpec, source: &Source) -> Result<Option<Group>, Error> {
    // The [host] files go with host contents: a root or a closure is
    // complete (a Debian root has its own /bin/sh).
    let host_files: &[ExtraFile] = if matches!(source, Source::ReferencesGraph(_) | Source::Root(_))
    {
        &[]
    } else {
        &spec.host.files
    };
    if spec.files.is_empty() && host_files.is_empty() {
        return Ok(None);
    }
    let mut entries = Vec::new();
    let mut parents: Vec<Entry> = Vec::new();
    for f in spec.files.iter().chain(host_files) {
        let rel = normalize_abs(&f.path).ok_or_else(|| Error::SpecInvalid {
            field: format!("files[{}]", f.path),
            reason: "not normalised".to_owned(),
        })?;
        let mode = f.mode_bits()?;
        let kind = match f.kind {
            FileKind::File => Kind::Inline(f.content.clone().unwrap_or_default().into_bytes()),
            FileKind::Dir => Kind::Dir,
            FileKind::Symlink => {
                let t = f.target.clone().unwrap_or_default();
                input::check_symlink(&rel, &t)?;
                Kind::Symlink(t)
            }
        };
        let comps: Vec<&str> = rel.split('/').collect();
        for i in 1..comps.len() {
            let p = comps[..i].join("/");
            if !parents.iter().any(|e| e.path == p) {
                parents.push(Entry::dir(p, 0o755));
            }
        }
        entries.push(Entry {
            path: rel,
            kind,
            mode,
            stamp: input::Stamp::default(),
        });
    }
    Ok(Some(Group {
        name: EXTRA_GROUP.to_owned(),
        host_root: std::sync::Arc::from(Path::new("/")),
        parents,
        entries,
        size: 0,
    }))
}

fn groups_of(opts: &BuildOptions) -> Result<Vec<Group>, Error> {
    let spec = &opts.spec;
    let allow = spec.allow_setuid;
    match &opts.source {
        Source::Root(r) => input::scan_root(r, allow),
        Source::Paths(p) => input::scan_paths(p, allow, input::PathKind::Host),
        Source::ReferencesGraph(f) => {
            let order = graph_order(f)?;
            input::scan_paths(&order, allow, input::PathKind::Store)
        }
        Source::Spec => {
            if let Some(r) = &spec.host.root {
                input::scan_root(Path::new(r), allow)
            } else if !spec.host.paths.is_empty() {
                input::scan_paths(&spec.host.paths, allow, input::PathKind::Host)
            } else if !spec.files.is_empty() {
                Ok(Vec::new())
            } else {
                Err(Error::SpecInvalid {
                    field: "host".to_owned(),
                    reason: "no contents: give --root, --path or --references-graph, or host.paths / host.root".to_owned(),
                })
            }
        }
    }
}

/// The store paths of a references graph file, most popular first.
fn graph_order(file: &Path) -> Result<Vec<String>, Error> {
    let g = ReferencesGraph::load(file)?;
    let order: Vec<String> = g.by_popularity().into_iter().map(|(p, _)| p).collect();
    input::check_inputs(&order)?;
    Ok(order)
}

/// Splits groups into at most `cap` layers: one per group, the remainder
/// merged into the last, the `top` groups (extra files, mount points) on
/// top.
fn plan(groups: Vec<Group>, top: Vec<Group>, cap: u32) -> Vec<Vec<Group>> {
    let mut layers = split_slots(groups, !top.is_empty(), cap);
    if !top.is_empty() {
        layers.push(top);
    }
    layers
}

/// The groups of the top layer: the spec's extra files, then the mount
/// points that neither the content (`seen`) nor the extra files provide.
fn top_groups(spec: &ImageSpec, extra: Option<Group>, mut seen: mounts::Seen) -> Vec<Group> {
    let mut top = Vec::new();
    if let Some(e) = extra {
        seen.note_group(&e);
        top.push(e);
    }
    if spec.mount_points
        && let Some(m) = mounts::group(&seen)
    {
        top.push(m);
    }
    top
}

/// Splits `items` into at most `cap` layers (one slot kept for the extra
/// files when `extra`): one item per layer, the remainder in the last.
fn split_slots<T>(items: Vec<T>, extra: bool, cap: u32) -> Vec<Vec<T>> {
    let slots = (cap as usize).saturating_sub(usize::from(extra)).max(1);
    let mut layers = Vec::new();
    let mut it = items.into_iter();
    let mut n = 0;
    for g in it.by_ref() {
        n += 1;
        if n == slots {
            let mut last = vec![g];
            last.extend(it.by_ref());
            layers.push(last);
            break;
        }
        layers.push(vec![g]);
    }
    layers
}

/// A layer before its cache lookup.
enum Pending {
    /// Scanned: the groups of the layer, every entry known.
    Groups(Vec<Group>),
    /// Whole store paths of a references graph, not read yet; `key` is
    /// their name key when every path may be keyed by name (see
    /// [`crate::store`]), else the layer is scanned and keyed by its files.
    Store {
        paths: Vec<String>,
        key: Option<Digest>,
    },
}

/// The layers of a build, bottom first. Store paths whose name key is
/// enough are not read here.
fn pending_layers(opts: &BuildOptions) -> Result<Vec<Pending>, Error> {
    let extra = extra_group(&opts.spec, &opts.source)?;
    let cap = opts.spec.layer_cap;
    let mut seen = mounts::Seen::default();
    let Source::ReferencesGraph(file) = &opts.source else {
        let groups = groups_of(opts)?;
        for g in &groups {
            seen.note_group(g);
        }
        let top = top_groups(&opts.spec, extra, seen);
        return Ok(plan(groups, top, cap)
            .into_iter()
            .map(Pending::Groups)
            .collect());
    };
    let order = graph_order(file)?;
    for p in &order {
        seen.note_opaque(p);
    }
    let top = top_groups(&opts.spec, extra, seen);
    let store = crate::store::store_dir();
    let keyed = opts.cache.is_some();
    let mut out: Vec<Pending> = split_slots(order, !top.is_empty(), cap)
        .into_par_iter()
        .map(|paths| {
            let stamps: Option<Vec<_>> = keyed
                .then(|| {
                    paths
                        .iter()
                        .map(|p| match crate::store::trusted(p, &store) {
                            Ok(s) => Some((p.clone(), s)),
                            Err(why) => {
                                tracing::debug!("{p}: keyed by its files: {why}");
                                None
                            }
                        })
                        .collect()
                })
                .flatten();
            let key = stamps.map(|s| {
                crate::store::layer_key(
                    &s,
                    opts.compression,
                    opts.source_date_epoch,
                    opts.spec.allow_setuid,
                )
            });
            Pending::Store { paths, key }
        })
        .collect();
    if !top.is_empty() {
        out.push(Pending::Groups(top));
    }
    Ok(out)
}

/// Reads whole store paths into one layer plan.
fn scan_store(paths: &[String], allow_setuid: bool) -> Result<LayerPlan, Error> {
    LayerPlan::new(input::scan_paths(
        paths,
        allow_setuid,
        input::PathKind::Store,
    )?)
}

/// A layer after its cache lookup.
enum Looked {
    /// From the cache: what it is and where its blob is.
    Hit(LayerMeta, BlobSrc),
    /// To write, and the key to cache it under.
    Miss(LayerPlan, Option<Digest>),
}

/// The archives a build may read cached layers from (see
/// [`archive::old_archives`]).
#[derive(Default)]
struct Olds {
    own: Option<OldArchive>,
    others: Vec<OldArchive>,
}

impl Olds {
    /// Where the blob `digest` of `size` bytes is in one of the archives:
    /// the one at the output path first (a rebuild keeps it in place).
    fn find(&self, digest: &Digest, size: u64) -> Option<BlobSrc> {
        let own = self
            .own
            .as_ref()
            .and_then(|o| Some((ArchiveId::Own, o.find(digest, size)?)));
        let (archive, at) = own.or_else(|| {
            self.others
                .iter()
                .enumerate()
                .find_map(|(i, o)| Some((ArchiveId::Other(i), o.find(digest, size)?)))
        })?;
        Some(BlobSrc::InArchive { archive, at, size })
    }
}

/// Looks a layer up in the cache, reading (scanning) it only as needed. A
/// cached layer without a blob file of its own is read from an archive
/// that holds it (`olds`), or written again.
fn look_up(
    p: Pending,
    cache: Option<&Cache>,
    olds: &Olds,
    opts: &BuildOptions,
) -> Result<Looked, Error> {
    let allow = opts.spec.allow_setuid;
    let epoch = opts.source_date_epoch;
    let Some(cache) = cache else {
        let plan = match p {
            Pending::Groups(groups) => LayerPlan::new(groups)?,
            Pending::Store { paths, .. } => scan_store(&paths, allow)?,
        };
        return Ok(Looked::Miss(plan, None));
    };
    let hit = |key: &Digest| -> Option<Looked> {
        let (meta, blob) = cache.lookup(key)?;
        let src = match blob {
            Some(path) => BlobSrc::File(path),
            None => olds.find(&meta.digest, meta.size)?,
        };
        Some(Looked::Hit(meta, src))
    };
    let groups = match p {
        Pending::Store {
            paths,
            key: Some(key),
        } => {
            if let Some(h) = hit(&key) {
                return Ok(h);
            }
            return Ok(Looked::Miss(scan_store(&paths, allow)?, Some(key)));
        }
        Pending::Store { paths, key: None } => {
            input::scan_paths(&paths, allow, input::PathKind::Store)?
        }
        Pending::Groups(groups) => groups,
    };
    // The key is made from the groups as scanned: a layer found in the
    // cache is never merged and sorted.
    let key = crate::layer::cache_key(&groups, opts.compression, epoch);
    if let Some(h) = hit(&key) {
        return Ok(h);
    }
    Ok(Looked::Miss(LayerPlan::new(groups)?, Some(key)))
}

/// A layer of the image: what it is, where its blob is, whether it came
/// from the cache.
type Built = (LayerMeta, BlobSrc, bool);

/// The image's documents, written to the stage's blobs.
struct Documents {
    config_digest: Digest,
    manifest_digest: Digest,
    sbom_digest: Digest,
    sbom_manifest_digest: Digest,
    /// `index.json`'s bytes.
    index: Vec<u8>,
}

/// Builds an image as described by `opts`.
pub fn build(opts: &BuildOptions, progress: &dyn Progress) -> Result<BuildReport, Error> {
    match build_once(opts, progress, true) {
        // The layers a rebuild kept in the old archive are lost: build
        // them again.
        Err(Error::OldArchiveChanged { path }) => {
            tracing::warn!(
                "{} changed while the rebuild read its layers: building them again",
                path.display()
            );
            build_once(opts, progress, false)
        }
        r => r,
    }
}

/// [`build`]; `keep_old`: reuse the layers of the archive this builder
/// last wrote at the output path.
fn build_once(
    opts: &BuildOptions,
    progress: &dyn Progress,
    keep_old: bool,
) -> Result<BuildReport, Error> {
    opts.spec.validate()?;
    let t0 = std::time::Instant::now();
    let pending = pending_layers(opts)?;
    tracing::debug!("inputs scanned at {:?}", t0.elapsed());
    let packages = packages_of(&pending);
    if opts.format == OutputFormat::Squashfs {
        return build_squashfs(opts, pending, progress);
    }
    let (stage, blobs) = stage_dir(&opts.out)?;
    let cache = opts.cache.as_deref().and_then(Cache::open);
    let is_archive = !matches!(opts.format, OutputFormat::Oci);
    // Layers written into an archive are cached there, not as files.
    let olds = match &cache {
        Some(c) if keep_old => {
            let (own, others) = archive::old_archives(&opts.out, c);
            Olds {
                own: own.filter(|_| is_archive),
                others,
            }
        }
        _ => Olds::default(),
    };
    let looked: Vec<Looked> = pending
        .into_par_iter()
        .map(|p| look_up(p, cache.as_ref(), &olds, opts))
        .collect::<Result<_, Error>>()?;
    tracing::debug!("layers looked up in the cache at {:?}", t0.elapsed());
    // A new archive gets its new layers written straight into it, at the
    // places planned from their sizes: they are not written to blob files
    // first and copied.
    let direct = if is_archive && olds.own.is_none() && opts.compression == Compression::None {
        Some(Direct::plan(opts, &looked)?)
    } else {
        None
    };
    let built = write_layers(
        looked,
        cache.as_ref(),
        opts,
        &blobs,
        direct.as_ref(),
        progress,
    )?;

    tracing::debug!("layers written at {:?}", t0.elapsed());
    let docs = write_documents(opts, &built, &blobs, &packages)?;

    tracing::debug!("documents written at {:?}", t0.elapsed());
    let blob_files = blob_files(opts, &built, &blobs, &docs, &olds)?;
    let sources = archive::Sources {
        new: direct.map(|d| d.archive),
        own: olds.own.as_ref(),
        others: &olds.others,
    };
    let archive_digest = write_output(
        opts,
        stage,
        &built,
        &blob_files,
        &docs,
        sources,
        cache.as_ref(),
    )?;

    tracing::debug!("output in place at {:?}", t0.elapsed());
    Ok(BuildReport {
        name: opts.spec.name.clone(),
        tag: opts.spec.tag.clone(),
        format: opts.format,
        out: opts.out.clone(),
        manifest_digest: Some(docs.manifest_digest),
        config_digest: Some(docs.config_digest),
        sbom_digest: Some(docs.sbom_digest),
        layers: built
            .iter()
            .map(|(m, _, cached)| BuiltLayer {
                digest: m.digest.clone(),
                diff_id: m.diff_id.clone(),
                size: m.size,
                cached: *cached,
                groups: m.groups.iter().map(|(n, _)| n.clone()).collect(),
            })
            .collect(),
        archive_digest,
    })
}

/// The packages that the scanned layers' package databases list (store
/// paths not read yet list none).
fn packages_of(pending: &[Pending]) -> Vec<crate::packages::Package> {
    let scanned: Vec<&Group> = pending
        .iter()
        .flat_map(|p| match p {
            Pending::Groups(g) => g.as_slice(),
            Pending::Store { .. } => &[],
        })
        .collect();
    crate::packages::of_groups(&scanned)
}

/// Scans every layer (no cache) and writes the squashfs image.
fn build_squashfs(
    opts: &BuildOptions,
    pending: Vec<Pending>,
    progress: &dyn Progress,
) -> Result<BuildReport, Error> {
    let allow = opts.spec.allow_setuid;
    let plans = pending
        .into_par_iter()
        .map(|p| match p {
            Pending::Groups(groups) => LayerPlan::new(groups),
            Pending::Store { paths, .. } => scan_store(&paths, allow),
        })
        .collect::<Result<Vec<_>, Error>>()?;
    squashfs::build(opts, &plans, progress)
}

/// A temporary directory next to `out`, readable by all, with its
/// `blobs/sha256` directory (returned second).
pub(crate) fn stage_dir(out: &Path) -> Result<(tempfile::TempDir, PathBuf), Error> {
    let out_dir = parent_of(out);
    let stage = tempfile::Builder::new()
        .prefix(&format!(".{}.tmp-", file_name(out)))
        .tempdir_in(&out_dir)
        .map_err(|e| Error::io("create temporary directory in", &out_dir, e))?;
    crate::perm::publish_dir(stage.path()).map_err(|e| Error::io("chmod", stage.path(), e))?;
    let blobs = stage.path().join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs).map_err(|e| Error::io("create", &blobs, e))?;
    Ok((stage, blobs))
}

/// The smallest layer written straight into a new archive.
const DIRECT_MIN: u64 = 1 << 16;

/// A new archive and where each layer's data goes in it (see
/// [`archive::plan_layers`]), with the size each new layer must have.
struct Direct {
    archive: NewArchive,
    /// Per layer, bottom first: where its data starts.
    at: Vec<u64>,
    /// Per layer: its size as planned.
    size: Vec<u64>,
}

impl Direct {
    fn plan(opts: &BuildOptions, looked: &[Looked]) -> Result<Self, Error> {
        let size = looked
            .par_iter()
            .map(|l| match l {
                Looked::Hit(meta, _) => Ok(meta.size),
                Looked::Miss(plan, _) => plan.tar_size(),
            })
            .collect::<Result<Vec<u64>, Error>>()?;
        let at = archive::plan_layers(opts.format, &size, opts.source_date_epoch)?;
        Ok(Self {
            archive: NewArchive::create(&opts.out)?,
            at,
            size,
        })
    }
}

/// Writes the layers that missed the cache: to `blobs` (and the cache), or
/// with `direct` straight into the new archive (the cache records them
/// without a blob file); in parallel, reporting progress; bottom first.
fn write_layers(
    looked: Vec<Looked>,
    cache: Option<&Cache>,
    opts: &BuildOptions,
    blobs: &Path,
    direct: Option<&Direct>,
    progress: &dyn Progress,
) -> Result<Vec<Built>, Error> {
    let epoch = opts.source_date_epoch;
    let size = |l: &Looked| match l {
        Looked::Hit(meta, _) => meta.uncompressed_size,
        Looked::Miss(plan, _) => plan.size(),
    };
    progress.begin(looked.len(), looked.iter().map(size).sum());
    // Fewer layers to write than threads (a rebuild): each writer gets a
    // helper thread that hashes and writes what it produces.
    let misses = looked
        .iter()
        .filter(|l| matches!(l, Looked::Miss(..)))
        .count();
    let helper = misses < rayon::current_num_threads();
    let new = direct.map(|d| d.archive.src());
    looked
        .into_par_iter()
        .enumerate()
        .map(|(i, l)| match l {
            Looked::Hit(meta, src) => {
                tracing::debug!("layer {} from cache", meta.digest);
                progress.layer_done(meta.uncompressed_size, true);
                Ok((meta, src, true))
            }
            Looked::Miss(p, key) => {
                // The digests of each group's files as last written, so
                // that only changed files are hashed again for the SBOM.
                let keys: Vec<Digest> = p
                    .groups
                    .iter()
                    .map(|g| KnownDigests::key(&g.host_root, &g.name))
                    .collect();
                let known: Vec<Option<KnownDigests>> = keys
                    .iter()
                    .map(|k| cache.and_then(|c| c.known(k)))
                    .collect();
                // Small layers go to blob files all the same: the cache
                // keeps them as files, and copying them costs nothing.
                let place = direct
                    .zip(new.as_ref())
                    .and_then(|(d, n)| {
                        Some((d.at.get(i).copied()?, d.size.get(i).copied()?, n))
                    })
                    .filter(|(_, size, _)| *size >= DIRECT_MIN);
                let sink = match place {
                    Some((at, _, n)) => Sink::At {
                        file: n.file,
                        path: n.path,
                        at,
                    },
                    None => Sink::Dir(blobs),
                };
                let (meta, path, seen) = p.write(sink, opts.compression, epoch, helper, &known)?;
                let src = match (path, place) {
                    (Some(path), _) => BlobSrc::File(path),
                    (None, Some((at, size, n))) => {
                        if meta.size != size {
                            return Err(Error::io(
                                "write a layer into",
                                n.path,
                                std::io::Error::other(format!(
                                    "the layer has {} bytes, {size} were planned: a file changed while it was read",
                                    meta.size
                                )),
                            ));
                        }
                        BlobSrc::InArchive {
                            archive: ArchiveId::New,
                            at,
                            size,
                        }
                    }
                    (None, None) => {
                        return Err(Error::io(
                            "write",
                            blobs,
                            std::io::Error::other("a layer was written nowhere"),
                        ));
                    }
                };
                if let (Some(c), Some(key)) = (cache, key) {
                    let file = match &src {
                        BlobSrc::File(path) => Some(path.as_path()),
                        BlobSrc::InArchive { .. } => None,
                    };
                    c.store(&key, &meta, file);
                    for (k, s) in keys.iter().zip(&seen) {
                        if !s.is_empty() {
                            c.store_known(k, s);
                        }
                    }
                }
                progress.layer_done(p.size(), false);
                Ok((meta, src, false))
            }
        })
        .collect()
}

/// Writes the config, the image manifest, the SBOM and its manifest and
/// the empty JSON to `blobs`, and makes `index.json` naming them.
fn write_documents(
    opts: &BuildOptions,
    built: &[Built],
    blobs: &Path,
    packages: &[crate::packages::Package],
) -> Result<Documents, Error> {
    let epoch = opts.source_date_epoch;
    let layer_media = opts.compression.media_type();
    let layers: Vec<Descriptor> = built
        .iter()
        .map(|(m, _, _)| oci::descriptor(layer_media.clone(), &m.digest, m.size))
        .collect::<Result<_, _>>()?;
    let diff_ids: Vec<Digest> = built.iter().map(|(m, _, _)| m.diff_id.clone()).collect();
    let history = layer_history(built);
    let config = oci::config(&opts.spec, &diff_ids, &history, epoch)?;
    let config = oci::write_blob(blobs, MediaType::ImageConfig, &config)?;
    let config_digest = oci::digest(&config)?;
    let manifest = oci::manifest(&config, &layers, &opts.spec.annotations)?;
    let mut manifest = oci::write_blob(blobs, MediaType::ImageManifest, &manifest)?;
    let manifest_digest = oci::digest(&manifest)?;

    let sbom_groups = sbom_groups(built);
    let sbom = oci::sbom(&opts.spec, &config_digest, &sbom_groups, packages, epoch)?;
    let sbom = oci::write_blob(blobs, media::spdx(), &sbom)?;
    let sbom_digest = oci::digest(&sbom)?;
    oci::write_blob(blobs, MediaType::EmptyJSON, oci::EMPTY_JSON)?;
    let sbom_manifest = oci::sbom_manifest(&manifest, &sbom, epoch)?;
    let sbom_manifest = oci::write_blob(blobs, MediaType::ImageManifest, &sbom_manifest)?;
    let sbom_manifest_digest = oci::digest(&sbom_manifest)?;
    let index = oci::layout_index(
        &mut manifest,
        Some(&sbom_manifest),
        &opts.spec.name,
        &opts.spec.tag,
    )?;
    Ok(Documents {
        config_digest,
        manifest_digest,
        sbom_digest,
        sbom_manifest_digest,
        index,
    })
}

/// The config's history: one line per layer naming its first group.
fn layer_history(built: &[Built]) -> Vec<String> {
    built
        .iter()
        .map(|(m, _, _)| {
            let first = m.groups.first().map(|g| g.0.as_str()).unwrap_or("");
            match m.groups.len() {
                0 | 1 => format!("vibesys image build: {first}"),
                n => format!("vibesys image build: {first} and {} more", n - 1),
            }
        })
        .collect()
}

/// The SBOM's groups: every group of every layer, with its layer's diff_id.
fn sbom_groups(built: &[Built]) -> Vec<oci::SbomGroup<'_>> {
    built
        .iter()
        .flat_map(|(m, _, _)| {
            m.groups.iter().map(move |(n, d)| oci::SbomGroup {
                name: n,
                digest: d,
                layer: &m.diff_id,
            })
        })
        .collect()
}

/// Every blob of the image and its file, sorted and deduplicated; an OCI
/// layout gets cached layers copied (or linked) into its `blobs`, also
/// those read from an archive.
fn blob_files(
    opts: &BuildOptions,
    built: &[Built],
    blobs: &Path,
    docs: &Documents,
    olds: &Olds,
) -> Result<Vec<(Digest, BlobSrc)>, Error> {
    // Layers that came from the cache live outside the stage.
    let mut blob_files: Vec<(Digest, BlobSrc)> = Vec::new();
    for (m, src, cached) in built {
        let dest = blobs.join(m.digest.hex());
        match src {
            BlobSrc::File(path)
                if *cached && opts.format == OutputFormat::Oci && !dest.exists() =>
            {
                link_or_copy(path, &dest)
                    .map_err(|e| Error::io("copy cached layer to", &dest, e))?;
                blob_files.push((m.digest.clone(), BlobSrc::File(dest)));
            }
            BlobSrc::InArchive { archive, at, size } if opts.format == OutputFormat::Oci => {
                if !dest.exists() {
                    let old = match archive {
                        ArchiveId::Own => olds.own.as_ref(),
                        ArchiveId::Other(i) => olds.others.get(*i),
                        ArchiveId::New => None,
                    };
                    let Some(old) = old else {
                        return Err(Error::MissingBlob {
                            digest: m.digest.to_string(),
                            referenced_by: "the OCI layout".to_owned(),
                        });
                    };
                    old.copy_out(*at, *size, &dest)?;
                }
                blob_files.push((m.digest.clone(), BlobSrc::File(dest)));
            }
            _ => blob_files.push((m.digest.clone(), src.clone())),
        }
    }
    for d in [
        &docs.config_digest,
        &docs.manifest_digest,
        &docs.sbom_digest,
        &docs.sbom_manifest_digest,
        &Digest::of(oci::EMPTY_JSON),
    ] {
        blob_files.push((d.clone(), BlobSrc::File(blobs.join(d.hex()))));
    }
    blob_files.sort_by(|a, b| a.0.cmp(&b.0));
    blob_files.dedup_by(|a, b| a.0 == b.0);
    Ok(blob_files)
}

/// Puts the output in place (see [`put_output`]).
fn write_output(
    opts: &BuildOptions,
    stage: tempfile::TempDir,
    built: &[Built],
    blob_files: &[(Digest, BlobSrc)],
    docs: &Documents,
    sources: archive::Sources<'_>,
    cache: Option<&Cache>,
) -> Result<Option<Digest>, Error> {
    let layer_digests: Vec<Digest> = built.iter().map(|(m, _, _)| m.digest.clone()).collect();
    put_output(
        &Output {
            format: opts.format,
            out: &opts.out,
            name: &opts.spec.name,
            tag: &opts.spec.tag,
            config_digest: &docs.config_digest,
            layer_digests: &layer_digests,
            index: &docs.index,
            blob_files,
            epoch: opts.source_date_epoch,
        },
        stage,
        sources,
        cache,
    )
}

/// What an image's output is made of: its name, its documents and where
/// each blob is. A build and a pull (`crate::registry`) both write an
/// image through [`put_output`], so the same image gives the same bytes.
pub(crate) struct Output<'a> {
    pub format: OutputFormat,
    pub out: &'a Path,
    pub name: &'a str,
    pub tag: &'a str,
    pub config_digest: &'a Digest,
    /// The image's layers, bottom first.
    pub layer_digests: &'a [Digest],
    /// `index.json`'s bytes.
    pub index: &'a [u8],
    /// Every blob and where it is, sorted by digest, each once.
    pub blob_files: &'a [(Digest, BlobSrc)],
    pub epoch: u64,
}

/// Puts the output in place: the stage (whose `blobs/sha256` holds the
/// blobs) renamed to an OCI layout, or an archive written from the blobs
/// (the stage then removed).
pub(crate) fn put_output(
    o: &Output<'_>,
    stage: tempfile::TempDir,
    sources: archive::Sources<'_>,
    cache: Option<&Cache>,
) -> Result<Option<Digest>, Error> {
    let config_digest = o.config_digest;
    let repo_tag = format!("{}:{}", o.name, o.tag);
    let top = o
        .layer_digests
        .last()
        .cloned()
        .unwrap_or_else(|| config_digest.clone());
    let layer_digests = o.layer_digests;
    Ok(match o.format {
        OutputFormat::Oci => {
            write_file(stage.path(), "oci-layout", oci::OCI_LAYOUT)?;
            write_file(stage.path(), "index.json", o.index)?;
            let stage = stage.keep();
            replace_dir(&stage, o.out)?;
            None
        }
        f => {
            let archive_docs = archive::Docs {
                index: o.index,
                docker_manifest: &oci::docker_manifest(
                    &config_digest.blob_path(),
                    &repo_tag,
                    &layer_digests
                        .iter()
                        .map(Digest::blob_path)
                        .collect::<Vec<_>>(),
                )?,
                docker_only_manifest: &oci::docker_manifest(
                    &format!("{}.json", config_digest.hex()),
                    &repo_tag,
                    &layer_digests
                        .iter()
                        .map(|d| format!("{}.tar", d.hex()))
                        .collect::<Vec<_>>(),
                )?,
                repositories: &oci::repositories(o.name, o.tag, &top)?,
                config: config_digest,
                layers: layer_digests,
            };
            archive::write(
                f,
                o.out,
                o.blob_files,
                sources,
                &archive_docs,
                o.epoch,
                cache,
            )?;
            drop(stage);
            None
        }
    })
}
