//! `pull`: an image by digest from a registry into an output format, each
//! blob checked against its descriptor while it is written.

use std::io::Write;
use std::path::{Path, PathBuf};

use futures_util::StreamExt;
use oci_client::RegistryOperation;
use oci_spec::image::{Descriptor, ImageConfiguration, ImageManifest, MediaType};
use serde::Serialize;
use sha2::{Digest as _, Sha256};

use super::connect::{Conn, err, runtime};
use super::reference::ImageRef;
use super::{MAX_DOC, RegistryOptions, TransferProgress};
use crate::archive::{BlobSrc, Sources};
use crate::build::{Output, put_output, stage_dir};
use crate::digest::{Digest, DigestExt};
use crate::error::Error;
use crate::lock::Lock;
use crate::oci::{self, SpdxDocument, media};
use crate::options::{Compression, OutputFormat};
use crate::read;
use vs_pin::{FoundId, FoundImage};

/// What to pull where.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// `HOST/REPO@sha256:...`; a tag alone only with `lock`.
    pub source: ImageRef,
    /// The output path.
    pub out: PathBuf,
    /// The output format.
    pub format: OutputFormat,
    /// A lock the pulled image must match; it also says what a tag must
    /// resolve to.
    pub lock: Option<PathBuf>,
    /// How to reach the registry.
    pub registry: RegistryOptions,
}

/// The result of a pull (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct PullReport {
    /// `REGISTRY/REPO@sha256:...` pulled.
    pub reference: String,
    /// The image name (from its SBOM, else the repository).
    pub name: String,
    /// The image tag (from its SBOM, else the reference's, else `latest`).
    pub tag: String,
    /// The output format.
    pub format: OutputFormat,
    /// The output path.
    pub out: PathBuf,
    /// The image manifest digest.
    pub manifest_digest: Digest,
    /// The image config digest (the Docker image ID).
    pub config_digest: Digest,
    /// The SBOM artifact manifest found as the image's referrer.
    pub sbom_manifest_digest: Option<Digest>,
    /// Blobs fetched.
    pub blobs: usize,
    /// Bytes fetched.
    pub bytes: u64,
    /// The lock entry the image matched.
    pub lock_image: Option<String>,
}

impl std::fmt::Display for PullReport {
    /// One line: what was pulled, as which image, to where, and how much.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "pulled {} ({}:{}) -> {} ({}, {} blobs, {})",
            self.reference,
            self.name,
            self.tag,
            self.out.display(),
            self.format.as_str(),
            self.blobs,
            crate::report::human_size(self.bytes)
        )
    }
}

/// Pulls `opts.source` into `opts.out` (see the module documentation).
pub fn pull(opts: &PullOptions, progress: &dyn TransferProgress) -> Result<PullReport, Error> {
    if opts.out.as_os_str().is_empty() {
        return Err(Error::InputPath {
            path: opts.out.clone(),
            reason: "the output path is empty".to_owned(),
        });
    }
    let lock = match &opts.lock {
        Some(p) => Some((Lock::load(p)?, p.clone())),
        None => None,
    };
    let rt = runtime()?;
    rt.block_on(pull_async(opts, lock.as_ref(), progress))
}

/// The lock entry a reference selects: the image the lock records as
/// pushed to this repository, else the one named like the repository's
/// last component.
fn lock_entry<'a>(lock: &'a Lock, lock_path: &Path, r: &ImageRef) -> Result<&'a str, Error> {
    let pushed_here = lock.images.iter().find(|(_, i)| {
        i.pushed
            .iter()
            .filter_map(|p| p.parse::<ImageRef>().ok())
            .any(|p| p.same_repository(r))
    });
    if let Some((name, _)) = pushed_here {
        return Ok(name);
    }
    let last = r.repository().rsplit('/').next().unwrap_or_default();
    lock.images
        .get_key_value(last)
        .map(|(k, _)| k.as_str())
        .ok_or_else(|| Error::NotPinned {
            image: format!(
                "{} (no image pushed to it, none named {last})",
                r.repository_name()
            ),
            lock: lock_path.to_owned(),
        })
}

async fn pull_async(
    opts: &PullOptions,
    lock: Option<&(Lock, PathBuf)>,
    progress: &dyn TransferProgress,
) -> Result<PullReport, Error> {
    let src = &opts.source;
    let conn = Conn::open(src, &opts.registry, RegistryOperation::Pull).await?;
    let pinned = match lock {
        Some((l, p)) => {
            let name = lock_entry(l, p, src)?;
            Some((name.to_owned(), l.images.get(name), p))
        }
        None => None,
    };
    let manifest_digest = match (src.digest(), &pinned) {
        (Some(d), _) => d.clone(),
        (None, Some((name, Some(entry), lock_path))) => {
            let pin = entry
                .manifest_digest
                .clone()
                .ok_or_else(|| Error::NotPinned {
                    image: format!("{name} (its manifest digest)"),
                    lock: lock_path.to_path_buf(),
                })?;
            // The tag must resolve to the pinned manifest: a moved tag is
            // refused, never followed.
            let found = conn
                .client
                .fetch_manifest_digest(src.oci(), &conn.auth)
                .await
                .map_err(err(src))?;
            if found != pin.to_string() {
                return Err(Error::PinMismatch {
                    image: name.clone(),
                    field: format!("manifest digest of {src}"),
                    pinned: pin.to_string(),
                    found,
                });
            }
            pin
        }
        (None, _) => {
            return Err(Error::Reference {
                reference: src.to_string(),
                reason: "pull takes a digest (REF@sha256:...): a tag can move; give --lock to pull a tag that must resolve to the pinned digest".to_owned(),
            });
        }
    };
    let by_digest = src.with_digest(&manifest_digest);

    // The image manifest, checked against the digest asked for.
    let accept = [
        MediaType::ImageManifest.to_string(),
        MediaType::ImageIndex.to_string(),
        media::DOCKER_MANIFEST.to_owned(),
    ];
    let accept: Vec<&str> = accept.iter().map(String::as_str).collect();
    let (mbytes, _) = conn
        .client
        .pull_manifest_raw(by_digest.oci(), &conn.auth, &accept)
        .await
        .map_err(err(&by_digest))?;
    check_doc(&manifest_digest, None, &mbytes)?;
    let manifest: ImageManifest = read::parse(&format!("manifest {manifest_digest}"), &mbytes)?;
    if manifest.media_type().as_ref() != Some(&MediaType::ImageManifest)
        || manifest.artifact_type().is_some()
    {
        return Err(Error::Registry {
            reference: by_digest.to_string(),
            reason: "not an OCI image manifest (an index, a Docker schema 2 manifest or an artifact): pull the digest of one image manifest".to_owned(),
        });
    }

    let (stage, blobs) = stage_dir(&opts.out)?;
    write_blob_file(&blobs, &manifest_digest, &mbytes)?;
    let mut fetched = 1usize;
    let mut bytes = mbytes.len() as u64;

    // The config: small, read whole and checked; the pin is checked before
    // any layer is fetched.
    let config_digest = oci::digest(manifest.config())?;
    let cbytes = fetch_doc(&conn, &by_digest, manifest.config()).await?;
    write_blob_file(&blobs, &config_digest, &cbytes)?;
    fetched += 1;
    bytes += cbytes.len() as u64;
    let config: ImageConfiguration = read::parse(&format!("config {config_digest}"), &cbytes)?;
    let diff_ids = config
        .rootfs()
        .diff_ids()
        .iter()
        .map(|d| d.parse())
        .collect::<Result<Vec<Digest>, _>>()?;
    if diff_ids.len() != manifest.layers().len() {
        return Err(Error::Registry {
            reference: by_digest.to_string(),
            reason: format!(
                "the config lists {} diff_ids for {} layers",
                diff_ids.len(),
                manifest.layers().len()
            ),
        });
    }
    let mut lock_image = None;
    if let Some((name, entry, lock_path)) = &pinned {
        let entry = entry.ok_or_else(|| Error::NotPinned {
            image: name.clone(),
            lock: lock_path.to_path_buf(),
        })?;
        entry.pin(name).check(&FoundImage {
            id: FoundId::Documents {
                config: config_digest.clone(),
                manifest: Some(manifest_digest.clone()),
            },
            diff_ids: diff_ids.clone(),
        })?;
        lock_image = Some(name.clone());
    }

    // The layers, streamed to files and checked while written.
    let mut layer_digests = Vec::new();
    for l in manifest.layers() {
        let d = oci::digest(l)?;
        if !layer_digests.contains(&d) {
            go_on(progress, &opts.out)?;
            bytes += fetch_blob(&conn, &by_digest, l, &d, &blobs, progress, &opts.out).await?;
            fetched += 1;
        }
        layer_digests.push(d);
    }

    go_on(progress, &opts.out)?;
    if opts.format == OutputFormat::Squashfs {
        // The rootfs of the checked layers, compressed as the layers are.
        let compression = match manifest.layers().last().map(Descriptor::media_type) {
            Some(MediaType::ImageLayerGzip) => Compression::Gzip,
            Some(MediaType::ImageLayerZstd) => Compression::Zstd,
            _ => Compression::None,
        };
        let files: Vec<(Digest, PathBuf)> = layer_digests
            .iter()
            .map(|d| (d.clone(), blobs.join(d.hex())))
            .collect();
        super::rootfs::write(&files, compression, created_epoch(&config), &opts.out)?;
        drop(stage);
        return Ok(PullReport {
            reference: by_digest.to_string(),
            name: src.repository().to_owned(),
            tag: src.tag().unwrap_or("latest").to_owned(),
            format: opts.format,
            out: opts.out.clone(),
            manifest_digest,
            config_digest,
            sbom_manifest_digest: None,
            blobs: fetched,
            bytes,
            lock_image,
        });
    }

    // The SBOM, found as the image's referrer.
    let sbom = find_sbom(&conn, &by_digest, &manifest_digest, &blobs).await?;
    let (name, tag, sbom_desc) = match &sbom {
        Some(s) => {
            fetched += 3;
            (s.name.clone(), s.tag.clone(), Some(s.desc.clone()))
        }
        None => {
            tracing::warn!(
                "{by_digest} has no SBOM referrer: the image is named after the repository, and its archive is not byte for byte a local build's"
            );
            (
                src.repository().to_owned(),
                src.tag().unwrap_or("latest").to_owned(),
                None,
            )
        }
    };
    let epoch = created_epoch(&config);
    let mut mdesc = oci::descriptor(
        MediaType::ImageManifest,
        &manifest_digest,
        mbytes.len() as u64,
    )?;
    let index = oci::layout_index(&mut mdesc, sbom_desc.as_ref(), &name, &tag)?;
    let mut blob_files: Vec<(Digest, BlobSrc)> = Vec::new();
    let rd = std::fs::read_dir(&blobs).map_err(|e| Error::io("read directory", &blobs, e))?;
    for e in rd {
        let e = e.map_err(|e| Error::io("read directory", &blobs, e))?;
        let n = e.file_name();
        let Some(hex) = n.to_str() else { continue };
        if let Ok(d) = format!("sha256:{hex}").parse::<Digest>() {
            blob_files.push((d, BlobSrc::File(e.path())));
        }
    }
    blob_files.sort_by(|a, b| a.0.cmp(&b.0));
    go_on(progress, &opts.out)?;
    put_output(
        &Output {
            format: opts.format,
            out: &opts.out,
            name: &name,
            tag: &tag,
            config_digest: &config_digest,
            layer_digests: &layer_digests,
            index: &index,
            blob_files: &blob_files,
            epoch,
        },
        stage,
        Sources {
            new: None,
            own: None,
            others: &[],
        },
        None,
    )?;
    Ok(PullReport {
        reference: by_digest.to_string(),
        name,
        tag,
        format: opts.format,
        out: opts.out.clone(),
        manifest_digest,
        config_digest,
        sbom_manifest_digest: sbom.map(|s| s.digest),
        blobs: fetched,
        bytes,
        lock_image,
    })
}

/// Stops the pull when the operator asked to ([`TransferProgress::cancelled`]).
fn go_on(progress: &dyn TransferProgress, out: &Path) -> Result<(), Error> {
    if progress.cancelled() {
        return Err(Error::Interrupted {
            out: out.to_owned(),
        });
    }
    Ok(())
}

/// The config's `created` as seconds since the epoch (the archive's
/// member times), 1 (SOURCE_DATE_EPOCH's default) when absent or odd.
fn created_epoch(config: &ImageConfiguration) -> u64 {
    config
        .created()
        .as_deref()
        .and_then(|c| c.parse::<jiff::Timestamp>().ok())
        .and_then(|t| u64::try_from(t.as_second()).ok())
        .unwrap_or(1)
}

/// Checks a document against its digest (and size, when known).
fn check_doc(digest: &Digest, size: Option<u64>, bytes: &[u8]) -> Result<(), Error> {
    if bytes.len() as u64 > MAX_DOC {
        return Err(Error::SizeMismatch {
            blob: digest.to_string(),
            expected: size.unwrap_or(MAX_DOC),
            found: bytes.len() as u64,
        });
    }
    read::check_blob(
        digest,
        size.unwrap_or(bytes.len() as u64),
        &Digest::of(bytes),
        bytes.len() as u64,
    )
}

/// Writes a checked document into the stage's blobs.
fn write_blob_file(blobs: &Path, d: &Digest, bytes: &[u8]) -> Result<(), Error> {
    let p = blobs.join(d.hex());
    std::fs::write(&p, bytes).map_err(|e| Error::io("write", &p, e))?;
    publish(&p)
}

fn publish(p: &Path) -> Result<(), Error> {
    let f = std::fs::File::open(p).map_err(|e| Error::io("open", p, e))?;
    crate::perm::publish_file(&f).map_err(|e| Error::io("chmod", p, e))
}

/// A small blob (config, SBOM, empty JSON), read whole (at most
/// [`MAX_DOC`]) and checked.
async fn fetch_doc(conn: &Conn, r: &ImageRef, desc: &Descriptor) -> Result<Vec<u8>, Error> {
    let d = oci::digest(desc)?;
    if desc.size() > MAX_DOC {
        return Err(Error::Registry {
            reference: r.to_string(),
            reason: format!(
                "blob {d} of {} bytes is too large for a document",
                desc.size()
            ),
        });
    }
    let mut s = conn
        .client
        .pull_blob_stream(r.oci(), d.to_string().as_str())
        .await
        .map_err(err(r))?;
    let mut buf = Vec::new();
    while let Some(chunk) = s.stream.next().await {
        match chunk {
            Ok(c) => {
                buf.extend_from_slice(&c);
                if buf.len() as u64 > desc.size() {
                    return Err(Error::SizeMismatch {
                        blob: d.to_string(),
                        expected: desc.size(),
                        found: buf.len() as u64,
                    });
                }
            }
            Err(e) => return Err(stream_error(r, &d, desc.size(), &buf, e)),
        }
    }
    check_doc(&d, Some(desc.size()), &buf)?;
    Ok(buf)
}

/// The error of a blob stream that broke off: a digest mismatch when the
/// bytes received are all there and wrong, else the transfer error.
fn stream_error(r: &ImageRef, d: &Digest, size: u64, got: &[u8], e: std::io::Error) -> Error {
    if got.len() as u64 == size {
        let found = Digest::of(got);
        if &found != d {
            return Error::DigestMismatch {
                blob: d.to_string(),
                expected: d.to_string(),
                found: found.to_string(),
            };
        }
    }
    Error::Registry {
        reference: r.to_string(),
        reason: format!("blob {d}: {e}"),
    }
}

/// Streams a layer into the stage's blobs, hashing as it writes; refuses
/// more bytes than the descriptor says, and a wrong digest or size.
async fn fetch_blob(
    conn: &Conn,
    r: &ImageRef,
    desc: &Descriptor,
    d: &Digest,
    blobs: &Path,
    progress: &dyn TransferProgress,
    out: &Path,
) -> Result<u64, Error> {
    let size = desc.size();
    let path = blobs.join(d.hex());
    let mut f = std::io::BufWriter::with_capacity(
        1 << 20,
        std::fs::File::create(&path).map_err(|e| Error::io("create", &path, e))?,
    );
    let mut s = conn
        .client
        .pull_blob_stream(r.oci(), d.to_string().as_str())
        .await
        .map_err(err(r))?;
    progress.start(d, size);
    let mut h = Sha256::new();
    let mut n = 0u64;
    let result = loop {
        match s.stream.next().await {
            None => break Ok(()),
            Some(Ok(c)) => {
                if progress.cancelled() {
                    break Err(Error::Interrupted {
                        out: out.to_owned(),
                    });
                }
                n += c.len() as u64;
                if n > size {
                    break Err(Error::SizeMismatch {
                        blob: d.to_string(),
                        expected: size,
                        found: n,
                    });
                }
                h.update(&c);
                if let Err(e) = f.write_all(&c) {
                    break Err(Error::io("write", &path, e));
                }
                progress.advance(d, c.len() as u64);
            }
            Some(Err(e)) => {
                let found = Digest::from_hasher(h.clone());
                break Err(if n == size && &found != d {
                    Error::DigestMismatch {
                        blob: d.to_string(),
                        expected: d.to_string(),
                        found: found.to_string(),
                    }
                } else {
                    Error::Registry {
                        reference: r.to_string(),
                        reason: format!("blob {d}: {e}"),
                    }
                });
            }
        }
    };
    progress.finish(d);
    result?;
    let file = f
        .into_inner()
        .map_err(|e| Error::io("write", &path, e.into_error()))?;
    crate::perm::publish_file(&file).map_err(|e| Error::io("chmod", &path, e))?;
    read::check_blob(d, size, &Digest::from_hasher(h), n)?;
    Ok(n)
}

/// The SBOM a vibesys push put beside an image.
struct Sbom {
    digest: Digest,
    desc: Descriptor,
    name: String,
    tag: String,
}

/// Finds the image's SBOM among its referrers (the referrers API, else
/// the referrers tag), fetches and checks its manifest, SPDX document and
/// empty config into the stage. The first (by digest) that is a vibesys
/// SBOM of this image wins; none is not an error.
async fn find_sbom(
    conn: &Conn,
    r: &ImageRef,
    subject: &Digest,
    blobs: &Path,
) -> Result<Option<Sbom>, Error> {
    let spdx = media::spdx().to_string();
    let index = match conn.client.pull_referrers(r.oci(), Some(&spdx)).await {
        Ok(i) => i,
        Err(e) => {
            tracing::debug!("{r}: no referrers: {e}");
            return Ok(None);
        }
    };
    let mut candidates: Vec<Digest> = index
        .manifests
        .iter()
        .filter(|m| m.artifact_type.as_deref() == Some(spdx.as_str()))
        .filter_map(|m| m.digest.parse().ok())
        .collect();
    candidates.sort();
    candidates.dedup();
    let accept = [MediaType::ImageManifest.to_string()];
    let accept: Vec<&str> = accept.iter().map(String::as_str).collect();
    for sd in candidates {
        let sref = r.with_digest(&sd);
        let Ok((sbytes, _)) = conn
            .client
            .pull_manifest_raw(sref.oci(), &conn.auth, &accept)
            .await
        else {
            continue;
        };
        check_doc(&sd, None, &sbytes)?;
        let sm: ImageManifest = read::parse(&format!("sbom manifest {sd}"), &sbytes)?;
        let refers = sm
            .subject()
            .as_ref()
            .and_then(|s| oci::digest(s).ok())
            .is_some_and(|s| &s == subject);
        let [doc] = sm.layers().as_slice() else {
            continue;
        };
        if !refers || sm.artifact_type().as_ref() != Some(&media::spdx()) {
            continue;
        }
        let dbytes = fetch_doc(conn, r, doc).await?;
        let spdx_doc: SpdxDocument = read::parse("sbom", &dbytes)?;
        let Some(image) = spdx_doc
            .packages
            .iter()
            .find(|p| p.spdxid == "SPDXRef-Image")
        else {
            continue;
        };
        let (Some(tag), name) = (image.version_info.clone(), image.name.clone()) else {
            continue;
        };
        let ebytes = fetch_doc(conn, r, sm.config()).await?;
        write_blob_file(blobs, &sd, &sbytes)?;
        write_blob_file(blobs, &oci::digest(doc)?, &dbytes)?;
        write_blob_file(blobs, &oci::digest(sm.config())?, &ebytes)?;
        return Ok(Some(Sbom {
            desc: oci::descriptor(MediaType::ImageManifest, &sd, sbytes.len() as u64)?,
            digest: sd,
            name,
            tag,
        }));
    }
    Ok(None)
}
