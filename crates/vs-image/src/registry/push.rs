//! `push`: an image archive or layout to a registry, blobs the registry
//! lacks first, then the manifest, then the SBOM as its referrer.

use std::io::Read;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use futures_util::stream;
use oci_client::RegistryOperation;
use oci_client::client::Client;
use oci_spec::image::{Descriptor, ImageConfiguration, ImageIndex, MediaType};
use serde::Serialize;

use super::connect::{Conn, err, runtime};
use super::reference::ImageRef;
use super::{RegistryOptions, TransferProgress};
use crate::digest::{Digest, DigestExt};
use crate::error::Error;
use crate::json::canonical;
use crate::lock::Lock;
use crate::oci::{self, media};
use crate::read::{self, OciImage, Store};
use vs_pin::{FoundId, FoundImage};

/// What to push where.
#[derive(Debug, Clone)]
pub struct PushOptions {
    /// An image archive (the default archive, an oci-archive) or OCI layout.
    pub image: PathBuf,
    /// Where to: `HOST[:PORT]/REPO[:TAG]`; without a tag, the image is
    /// reachable by digest only.
    pub target: ImageRef,
    /// A lock the image must be pinned in; the reference it was pushed to
    /// is recorded there.
    pub lock: Option<PathBuf>,
    /// How to reach the registry.
    pub registry: RegistryOptions,
}

/// What happened to one blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlobAction {
    /// The registry had it already.
    Present,
    /// Mounted from another repository of the same registry.
    Mounted,
    /// Uploaded.
    Uploaded,
}

/// One blob of a push.
#[derive(Debug, Clone, Serialize)]
pub struct PushedBlob {
    /// Its digest.
    pub digest: Digest,
    /// Its size.
    pub size: u64,
    /// What was done.
    pub action: BlobAction,
}

/// The result of a push (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
pub struct PushReport {
    /// `REGISTRY/REPO@sha256:...`: the image by digest.
    pub reference: String,
    /// The tag pushed, if any.
    pub tag: Option<String>,
    /// The image manifest digest.
    pub manifest_digest: Digest,
    /// The image config digest (the Docker image ID).
    pub config_digest: Digest,
    /// The SBOM artifact manifest pushed as the image's referrer.
    pub sbom_manifest_digest: Option<Digest>,
    /// Every blob, in the order handled.
    pub blobs: Vec<PushedBlob>,
    /// Bytes uploaded.
    pub uploaded_bytes: u64,
    /// The lock entry that pinned the image and now records the reference.
    pub lock_image: Option<String>,
}

impl PushReport {
    /// The one-line summary of a push of `image` (the CLI prints it on
    /// stderr, the reference alone on stdout): blobs uploaded, present and
    /// mounted, and the entry of `lock` that records the push.
    pub fn summary(&self, image: &Path, lock: Option<&Path>) -> String {
        let count = |act| self.blobs.iter().filter(|b| b.action == act).count();
        format!(
            "pushed {}: {} blobs uploaded ({}), {} present, {} mounted{}",
            image.display(),
            count(BlobAction::Uploaded),
            crate::report::human_size(self.uploaded_bytes),
            count(BlobAction::Present),
            count(BlobAction::Mounted),
            match &self.lock_image {
                Some(n) => format!(
                    "; {} records it for {n}",
                    lock.unwrap_or(Path::new("")).display()
                ),
                None => String::new(),
            }
        )
    }
}

/// Blobs up to this size are read into memory and sent in one request.
const SMALL: u64 = 8 << 20;
/// The read size of a streamed upload.
const CHUNK: usize = 1 << 20;

/// Pushes `opts.image` to `opts.target` (see the module documentation).
pub fn push(opts: &PushOptions, progress: &dyn TransferProgress) -> Result<PushReport, Error> {
    if let Some(d) = opts.target.digest() {
        return Err(Error::Reference {
            reference: opts.target.to_string(),
            reason: format!("push names a repository and maybe a tag, not a digest ({d})"),
        });
    }
    let img = read::open_oci(&opts.image)?;
    let manifest_digest = oci::digest(&img.manifest_desc)?;
    let config_desc = img.manifest.config().clone();
    let config_digest = oci::digest(&config_desc)?;
    let lock = match &opts.lock {
        Some(p) => Some(Lock::load(p)?),
        None => None,
    };
    let lock_image = match (&lock, &opts.lock) {
        (Some(l), Some(p)) => Some(check_pinned(&img, l, p, &config_digest, &manifest_digest)?),
        _ => None,
    };
    // Other repositories of this registry the lock saw the image pushed to:
    // blobs are mounted from them rather than sent again.
    let mount_from: Vec<ImageRef> = match (&lock, &lock_image) {
        (Some(l), Some(name)) => l.images.get(name).map_or_else(Vec::new, |i| {
            i.pushed
                .iter()
                .filter_map(|r| r.parse::<ImageRef>().ok())
                .filter(|r| {
                    r.registry() == opts.target.registry() && !r.same_repository(&opts.target)
                })
                .collect()
        }),
        _ => Vec::new(),
    };
    let rt = runtime()?;
    let mut report = rt.block_on(push_async(
        opts,
        &img,
        &mount_from,
        progress,
        &manifest_digest,
        &config_digest,
    ))?;
    if let (Some(p), Some(name)) = (&opts.lock, &lock_image) {
        // Read again just before writing: another pin may have happened.
        let mut fresh = Lock::load(p)?;
        if let Some(entry) = fresh.images.get_mut(name) {
            entry.record_push(&report.reference);
        }
        fresh.save(p)?;
    }
    report.lock_image = lock_image;
    Ok(report)
}

/// The lock entry the image is pinned by (its name from the layout's
/// annotations): digests and layers must match the pin.
fn check_pinned(
    img: &OciImage,
    lock: &Lock,
    lock_path: &Path,
    config_digest: &Digest,
    manifest_digest: &Digest,
) -> Result<String, Error> {
    let name = img
        .manifest_desc
        .annotations()
        .as_ref()
        .and_then(|a| a.get(oci::CONTAINERD_NAME))
        .map(|r| r.rsplit_once(':').map_or(r.as_str(), |(n, _)| n).to_owned())
        .ok_or_else(|| Error::malformed(img_path(img), "index.json names no image"))?;
    let entry = lock.images.get(&name).ok_or_else(|| Error::NotPinned {
        image: name.clone(),
        lock: lock_path.to_owned(),
    })?;
    let config_bytes = img
        .store
        .read_blob(img.manifest.config(), "the image manifest")?;
    let config: ImageConfiguration = read::parse("image config", &config_bytes)?;
    let diff_ids = config
        .rootfs()
        .diff_ids()
        .iter()
        .map(|d| d.parse())
        .collect::<Result<Vec<Digest>, _>>()?;
    entry.pin(&name).check(&FoundImage {
        id: FoundId::Documents {
            config: config_digest.clone(),
            manifest: Some(manifest_digest.clone()),
        },
        diff_ids,
    })?;
    if entry.manifest_digest.is_none() {
        return Err(Error::NotPinned {
            image: format!("{name} (its manifest digest)"),
            lock: lock_path.to_owned(),
        });
    }
    Ok(name)
}

fn img_path(img: &OciImage) -> PathBuf {
    img.store.path().to_owned()
}

async fn push_async(
    opts: &PushOptions,
    img: &OciImage,
    mount_from: &[ImageRef],
    progress: &dyn TransferProgress,
    manifest_digest: &Digest,
    config_digest: &Digest,
) -> Result<PushReport, Error> {
    let target = &opts.target;
    let conn = Conn::open(target, &opts.registry, RegistryOperation::Push).await?;
    let mut blobs = Vec::new();
    let mut uploaded_bytes = 0;
    let mut chunked: Option<Client> = None;
    let send = |d: &Descriptor| -> Result<(Digest, u64), Error> { Ok((oci::digest(d)?, d.size())) };
    let mut image_blobs: Vec<(Digest, u64)> = Vec::new();
    for l in img.manifest.layers() {
        image_blobs.push(send(l)?);
    }
    image_blobs.push(send(img.manifest.config())?);
    let mut sbom_blobs: Vec<(Digest, u64)> = Vec::new();
    if let Some((_, _, sm)) = &img.sbom {
        sbom_blobs.push(send(sm.config())?);
        for l in sm.layers() {
            sbom_blobs.push(send(l)?);
        }
    }
    for (digest, size) in image_blobs.iter().chain(&sbom_blobs) {
        if blobs.iter().any(|b: &PushedBlob| &b.digest == digest) {
            continue;
        }
        let action = put_blob(
            &conn,
            &mut chunked,
            target,
            &img.store,
            digest,
            *size,
            mount_from,
            progress,
        )
        .await?;
        if action == BlobAction::Uploaded {
            uploaded_bytes += size;
        }
        blobs.push(PushedBlob {
            digest: digest.clone(),
            size: *size,
            action,
        });
    }
    // The manifest: by tag (which stores it by digest too), else by digest.
    let by_digest = target.with_digest(manifest_digest);
    let manifest_ref = match target.tag() {
        Some(t) => target.with_tag(t),
        None => by_digest.clone(),
    };
    put_manifest(
        &conn,
        &manifest_ref,
        &img.manifest_bytes,
        MediaType::ImageManifest,
    )
    .await?;
    let mut sbom_manifest_digest = None;
    if let Some((sd, bytes, _)) = &img.sbom {
        put_manifest(
            &conn,
            &target.with_digest(sd),
            bytes,
            MediaType::ImageManifest,
        )
        .await?;
        add_referrer(&conn, target, manifest_digest, sd, bytes.len() as u64).await?;
        sbom_manifest_digest = Some(sd.clone());
    }
    Ok(PushReport {
        reference: by_digest.to_string(),
        tag: target.tag().map(str::to_owned),
        manifest_digest: manifest_digest.clone(),
        config_digest: config_digest.clone(),
        sbom_manifest_digest,
        blobs,
        uploaded_bytes,
        lock_image: None,
    })
}

async fn put_manifest(
    conn: &Conn,
    r: &ImageRef,
    bytes: &[u8],
    media: MediaType,
) -> Result<(), Error> {
    let ct = http_content_type(media.as_ref(), r)?;
    conn.client
        .push_manifest_raw(r.oci(), bytes.to_vec(), ct)
        .await
        .map_err(err(r))?;
    Ok(())
}

fn http_content_type(media: &str, r: &ImageRef) -> Result<http::HeaderValue, Error> {
    media.parse().map_err(|_| Error::Registry {
        reference: r.to_string(),
        reason: format!("media type {media:?} is not a header value"),
    })
}

/// Makes the blob `digest` present in the target repository: HEAD, else a
/// mount from a repository that has it, else an upload (one request;
/// chunks when the registry refuses that).
#[allow(clippy::too_many_arguments)]
async fn put_blob(
    conn: &Conn,
    chunked: &mut Option<Client>,
    target: &ImageRef,
    store: &Store,
    digest: &Digest,
    size: u64,
    mount_from: &[ImageRef],
    progress: &dyn TransferProgress,
) -> Result<BlobAction, Error> {
    let d = digest.to_string();
    let r = target.oci();
    if conn.client.blob_exists(r, &d).await.map_err(err(target))? {
        return Ok(BlobAction::Present);
    }
    for source in mount_from {
        match conn.client.mount_blob(r, source.oci(), &d).await {
            Ok(()) if conn.client.blob_exists(r, &d).await.unwrap_or(false) => {
                return Ok(BlobAction::Mounted);
            }
            Ok(()) => {}
            Err(e) => tracing::debug!("mount of {d} from {source} refused: {e}"),
        }
    }
    progress.start(digest, size);
    let name = digest.blob_path();
    let sent = upload(&conn.client, store, &name, target, digest, size, progress).await;
    let sent = match sent {
        Err(e @ Error::Registry { .. }) => {
            tracing::debug!("monolithic upload of {d} failed ({e}); trying chunks");
            if chunked.is_none() {
                *chunked = Some(conn.chunked(target).await?);
            }
            match chunked {
                Some(c) => upload(c, store, &name, target, digest, size, progress).await,
                None => Err(e),
            }
        }
        r => r,
    };
    progress.finish(digest);
    sent?;
    Ok(BlobAction::Uploaded)
}

/// Sends one blob, read from the image while it is sent.
async fn upload(
    client: &Client,
    store: &Store,
    name: &str,
    target: &ImageRef,
    digest: &Digest,
    size: u64,
    progress: &dyn TransferProgress,
) -> Result<(), Error> {
    let d = digest.to_string();
    if size <= SMALL {
        let mut reader = store.open(name)?;
        let mut buf = Vec::with_capacity(size as usize);
        reader
            .by_ref()
            .take(size)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io("read", store.path().join(name), e))?;
        progress.advance(digest, size);
        client
            .push_blob(target.oci(), buf, &d)
            .await
            .map_err(err(target))?;
        return Ok(());
    }
    // The stream reads the image in chunks (a blocking read of a local
    // file between requests); the registry checks the digest at the end.
    let path = store.path().join(name);
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let chunks = stream::unfold((store.open(name)?, size), move |(mut r, left)| {
        let tx = tx.clone();
        let path = path.clone();
        async move {
            if left == 0 {
                return None;
            }
            let mut buf = vec![0u8; CHUNK.min(left as usize)];
            match r.read_exact(&mut buf) {
                Ok(()) => {
                    let n = buf.len() as u64;
                    let _ = tx.send(n);
                    Some((Ok(Bytes::from(buf)), (r, left - n)))
                }
                Err(e) => Some((
                    Err(oci_client::errors::OciDistributionError::IoError(
                        std::io::Error::new(e.kind(), format!("{}: {e}", path.display())),
                    )),
                    (r, 0),
                )),
            }
        }
    });
    let push = client.push_blob_stream(target.oci(), chunks, &d, Some(size));
    let mut push = std::pin::pin!(push);
    // Report progress while the upload runs.
    loop {
        tokio::select! {
            r = &mut push => {
                while let Ok(n) = rx.try_recv() { progress.advance(digest, n); }
                r.map_err(err(target))?;
                return Ok(());
            }
            () = tokio::time::sleep(std::time::Duration::from_millis(100)) => {
                while let Ok(n) = rx.try_recv() { progress.advance(digest, n); }
            }
        }
    }
}

/// Adds the SBOM manifest to the image's referrers tag (`sha256-<hex>`,
/// an index of the manifests whose subject is the image), as OCI
/// distribution 1.1 asks of a client when the registry has no referrers
/// API; registries with one list it there as well.
async fn add_referrer(
    conn: &Conn,
    target: &ImageRef,
    subject: &Digest,
    sbom_manifest: &Digest,
    size: u64,
) -> Result<(), Error> {
    let tag_ref = target.with_tag(&format!("sha256-{}", subject.hex()));
    let accept = [MediaType::ImageIndex.to_string()];
    let accept: Vec<&str> = accept.iter().map(String::as_str).collect();
    let mut index = match conn
        .client
        .pull_manifest_raw(tag_ref.oci(), &conn.auth, &accept)
        .await
    {
        Ok((bytes, _)) if bytes.len() as u64 <= super::MAX_DOC => {
            read::parse::<ImageIndex>("referrers index", &bytes)?
        }
        Ok((bytes, _)) => {
            return Err(Error::Registry {
                reference: tag_ref.to_string(),
                reason: format!(
                    "its referrers index is {} bytes, above the limit of {}",
                    bytes.len(),
                    super::MAX_DOC
                ),
            });
        }
        // Only a tag that is not there starts a fresh index: any other
        // failure (a 5xx, a time-out, auth) would drop the image's other
        // referrers (signatures, attestations) when the new index is put.
        Err(e) if !is_missing(&e) => return Err(err(&tag_ref)(e)),
        Err(_) => {
            let mut i = ImageIndex::default();
            i.set_schema_version(2);
            i.set_media_type(Some(MediaType::ImageIndex));
            i.set_manifests(Vec::new());
            i
        }
    };
    let d = sbom_manifest.to_oci()?;
    if index.manifests().iter().any(|m| m.digest() == &d) {
        return Ok(());
    }
    let mut desc = oci::descriptor(MediaType::ImageManifest, sbom_manifest, size)?;
    desc.set_artifact_type(Some(media::spdx()));
    let mut manifests = index.manifests().clone();
    manifests.push(desc);
    index.set_manifests(manifests);
    let bytes = canonical("referrers index", &index)?;
    put_manifest(conn, &tag_ref, &bytes, MediaType::ImageIndex).await
}

/// Whether `e` says the manifest asked for does not exist (404, or the
/// registry's MANIFEST_UNKNOWN / NAME_UNKNOWN / NOT_FOUND codes).
fn is_missing(e: &oci_client::errors::OciDistributionError) -> bool {
    use oci_client::errors::OciDistributionError;
    use oci_client::errors::OciErrorCode;
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::ServerError { code, .. } => *code == 404,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().all(|x| {
            matches!(
                x.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown | OciErrorCode::NotFound
            )
        }),
        _ => false,
    }
}
