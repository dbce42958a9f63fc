//! Reading an image back (OCI layout directory, hybrid archive,
//! oci-archive, docker-archive) and verifying it: every blob re-hashed,
//! every layer's uncompressed digest compared with the config's diff_ids,
//! every layer entry checked for names and links that escape the root.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use oci_spec::image::{
    Descriptor, ImageConfiguration, ImageIndex, ImageManifest, MediaType, OciLayout,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::digest::{Digest, HashReader};
use crate::error::Error;
use crate::oci::{self, DockerManifestEntry, SpdxDocument, media};

const MAX_DOC: u64 = 16 << 20;

/// One layer as found in an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayerReport {
    /// Blob digest.
    pub digest: Digest,
    /// Uncompressed digest from the config.
    pub diff_id: Digest,
    /// Blob size in bytes.
    pub size: u64,
    /// Media type (Docker archives: the OCI type matching the bytes).
    pub media_type: String,
}

/// The SBOM attached to an image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SbomSummary {
    /// Digest of the SBOM artifact manifest.
    pub manifest_digest: Digest,
    /// Digest of the SPDX document.
    pub digest: Digest,
    /// `spdxVersion`.
    pub spdx_version: String,
    /// Number of packages listed (the image, one per group, one per
    /// package of the content's package databases).
    pub packages: usize,
    /// The content's packages by key (`deb:git`, `pypi:claude-agent-sdk`)
    /// and version, from the package URLs the SBOM lists.
    pub inputs: std::collections::BTreeMap<String, String>,
}

/// What `inspect` found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InspectReport {
    /// The inspected path.
    pub path: PathBuf,
    /// `oci`, `archive` (hybrid), `oci-archive` or `docker-archive`.
    pub format: String,
    /// Image name (from the ref annotations or RepoTags).
    pub name: Option<String>,
    /// Image tag.
    pub tag: Option<String>,
    /// Image manifest digest (absent in a docker-archive).
    pub manifest_digest: Option<Digest>,
    /// Image config digest (the Docker image ID with the classic store).
    pub config_digest: Digest,
    /// Layers, bottom first.
    pub layers: Vec<LayerReport>,
    /// Sum of layer blob sizes.
    pub total_layer_size: u64,
    /// `architecture` / `os` of the config.
    pub platform: String,
    /// The config's `config` object (Entrypoint, Env, ...).
    pub config: Value,
    /// The attached SBOM, if any.
    pub sbom: Option<SbomSummary>,
    /// Whether every blob was re-hashed and every layer checked.
    pub verified: bool,
    /// sha256 of the archive file (archives, when verified).
    pub archive_digest: Option<Digest>,
}

/// Where members come from: a directory or a tar file indexed by offset.
pub(crate) enum Store {
    Dir(PathBuf),
    Tar {
        path: PathBuf,
        members: BTreeMap<String, (u64, u64)>,
    },
}

impl Store {
    pub(crate) fn open_path(path: &Path) -> Result<Self, Error> {
        let m = std::fs::metadata(path).map_err(|e| Error::io("stat", path, e))?;
        if m.is_dir() {
            return Ok(Self::Dir(path.to_owned()));
        }
        let mut f = File::open(path).map_err(|e| Error::io("open", path, e))?;
        let mut magic = [0u8; 4];
        if f.read(&mut magic).map_err(|e| Error::io("read", path, e))? == 4 && &magic == b"hsqs" {
            return Err(Error::malformed(
                path,
                "a squashfs image: mount it or use unsquashfs; inspect reads OCI and Docker images",
            ));
        }
        f.seek(SeekFrom::Start(0))
            .map_err(|e| Error::io("read", path, e))?;
        let len = m.len();
        let mut members = BTreeMap::new();
        let mut ar = tar::Archive::new(f);
        let entries = ar
            .entries_with_seek()
            .map_err(|e| Error::malformed(path, format!("not a tar archive: {e}")))?;
        let mut end = 0u64;
        let mut links: Vec<(String, String)> = Vec::new();
        for e in entries {
            let e =
                e.map_err(|e| Error::malformed(path, format!("truncated or corrupt tar: {e}")))?;
            end = e
                .raw_file_position()
                .saturating_add(e.size().div_ceil(512).saturating_mul(512));
            let raw = String::from_utf8_lossy(&e.path_bytes()).into_owned();
            let name = raw
                .trim_start_matches("./")
                .trim_end_matches('/')
                .to_owned();
            if name.is_empty() || name == "." {
                continue;
            }
            if name.starts_with('/') || name.split('/').any(|c| c == ".." || c.is_empty()) {
                return Err(Error::UnsafeEntry {
                    layer: path.display().to_string(),
                    entry: raw,
                    reason: "escapes the archive root".to_owned(),
                });
            }
            let ty = e.header().entry_type();
            if ty.is_dir() {
                continue;
            }
            if ty.is_symlink() || ty.is_hard_link() {
                // skopeo's docker-archive links `<id>/layer.tar` to the blob.
                let target = e
                    .link_name_bytes()
                    .map(|l| String::from_utf8_lossy(&l).into_owned())
                    .unwrap_or_default();
                let base = if ty.is_symlink() {
                    name.rsplit_once('/').map_or("", |(d, _)| d)
                } else {
                    ""
                };
                let resolved = resolve_member(base, &target).ok_or_else(|| Error::UnsafeEntry {
                    layer: path.display().to_string(),
                    entry: format!("{raw} -> {target}"),
                    reason: "link escapes the archive root".to_owned(),
                })?;
                links.push((name, resolved));
                continue;
            }
            if !(ty.is_file() || ty == tar::EntryType::Continuous) {
                return Err(Error::UnsafeEntry {
                    layer: path.display().to_string(),
                    entry: raw,
                    reason: "not a regular file".to_owned(),
                });
            }
            let (pos, size) = (e.raw_file_position(), e.size());
            if pos.saturating_add(size) > len {
                return Err(Error::malformed(
                    path,
                    format!(
                        "truncated: member {name} needs {size} bytes at offset {pos}, file has {len}"
                    ),
                ));
            }
            if members.insert(name.clone(), (pos, size)).is_some() {
                return Err(Error::malformed(
                    path,
                    format!("member {name} appears twice"),
                ));
            }
        }
        for (name, target) in links {
            let m = *members.get(&target).ok_or_else(|| {
                Error::malformed(
                    path,
                    format!("member {name} links to {target}, which is not a file in the archive"),
                )
            })?;
            if members.insert(name.clone(), m).is_some() {
                return Err(Error::malformed(
                    path,
                    format!("member {name} appears twice"),
                ));
            }
        }
        // A whole archive ends with two zero blocks right after its last
        // member; anything short of that was cut off.
        let mut f = File::open(path).map_err(|e| Error::io("open", path, e))?;
        let mut trailer = [0u8; 1024];
        let complete = f.seek(SeekFrom::Start(end)).is_ok()
            && f.read_exact(&mut trailer).is_ok()
            && trailer.iter().all(|&b| b == 0);
        if !complete {
            return Err(Error::malformed(
                path,
                format!("truncated: no end-of-archive marker after offset {end}"),
            ));
        }
        Ok(Self::Tar {
            path: path.to_owned(),
            members,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            Self::Dir(p) | Self::Tar { path: p, .. } => p,
        }
    }

    pub(crate) fn size(&self, name: &str) -> Option<u64> {
        match self {
            Self::Dir(d) => std::fs::symlink_metadata(d.join(name))
                .ok()
                .filter(|m| m.is_file())
                .map(|m| m.len()),
            Self::Tar { members, .. } => members.get(name).map(|(_, s)| *s),
        }
    }

    fn names(&self) -> Result<Vec<String>, Error> {
        match self {
            Self::Tar { members, .. } => Ok(members.keys().cloned().collect()),
            Self::Dir(d) => {
                let dir = d.join("blobs").join("sha256");
                let mut out = Vec::new();
                if let Ok(rd) = std::fs::read_dir(&dir) {
                    for e in rd {
                        let e = e.map_err(|e| Error::io("read directory", &dir, e))?;
                        out.push(format!("blobs/sha256/{}", e.file_name().to_string_lossy()));
                    }
                }
                out.sort();
                Ok(out)
            }
        }
    }

    /// Opens member `name` for reading; the reader owns its file, so it
    /// may outlive the store's borrow (a push streams it to the registry).
    pub(crate) fn open(&self, name: &str) -> Result<Box<dyn Read + Send + 'static>, Error> {
        match self {
            Self::Dir(d) => {
                let p = d.join(name);
                Ok(Box::new(
                    File::open(&p).map_err(|e| Error::io("open", &p, e))?,
                ))
            }
            Self::Tar { path, members } => {
                let (pos, size) = members
                    .get(name)
                    .ok_or_else(|| Error::malformed(path, format!("no member {name}")))?;
                let mut f = File::open(path).map_err(|e| Error::io("open", path, e))?;
                f.seek(SeekFrom::Start(*pos))
                    .map_err(|e| Error::io("read", path, e))?;
                Ok(Box::new(f.take(*size)))
            }
        }
    }

    fn read_doc(&self, name: &str, referenced_by: &str) -> Result<Vec<u8>, Error> {
        let size = self.size(name).ok_or_else(|| Error::MissingBlob {
            digest: name.to_owned(),
            referenced_by: referenced_by.to_owned(),
        })?;
        if size > MAX_DOC {
            return Err(Error::malformed(
                self.path(),
                format!("{name} is larger than 16 MiB"),
            ));
        }
        let mut buf = Vec::with_capacity(size as usize);
        self.open(name)?
            .read_to_end(&mut buf)
            .map_err(|e| Error::io("read", self.path().join(name), e))?;
        Ok(buf)
    }

    /// Reads a small blob by descriptor and checks its digest and size.
    pub(crate) fn read_blob(&self, d: &Descriptor, referenced_by: &str) -> Result<Vec<u8>, Error> {
        let digest = oci::digest(d)?;
        let name = digest.blob_path();
        if self.size(&name).is_none() {
            return Err(Error::MissingBlob {
                digest: digest.to_string(),
                referenced_by: referenced_by.to_owned(),
            });
        }
        let bytes = self.read_doc(&name, referenced_by)?;
        check_blob(&digest, d.size(), &Digest::of(&bytes), bytes.len() as u64)?;
        Ok(bytes)
    }
}

/// `target` resolved from directory `base` inside an archive; `None` when
/// it leaves the archive root.
fn resolve_member(base: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = if target.starts_with('/') {
        Vec::new()
    } else {
        base.split('/').filter(|c| !c.is_empty()).collect()
    };
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

pub(crate) fn check_blob(
    expected: &Digest,
    expected_size: u64,
    found: &Digest,
    found_size: u64,
) -> Result<(), Error> {
    if found != expected {
        return Err(Error::DigestMismatch {
            blob: expected.to_string(),
            expected: expected.to_string(),
            found: found.to_string(),
        });
    }
    if found_size != expected_size {
        return Err(Error::SizeMismatch {
            blob: expected.to_string(),
            expected: expected_size,
            found: found_size,
        });
    }
    Ok(())
}

pub(crate) fn parse<T: for<'de> Deserialize<'de>>(what: &str, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|source| Error::Json {
        what: what.to_owned(),
        source,
    })
}

/// The annotation `key` of a descriptor, if any.
fn annotation<'a>(d: &'a Descriptor, key: &str) -> Option<&'a String> {
    d.annotations().as_ref().and_then(|a| a.get(key))
}

fn split_ref(r: &str) -> (String, String) {
    match r.rsplit_once(':') {
        Some((n, t)) if !t.contains('/') => (n.to_owned(), t.to_owned()),
        _ => (r.to_owned(), "latest".to_owned()),
    }
}

/// What an image's documents name: the OCI index and manifest, or a
/// docker-archive's manifest.json.
struct Named {
    name: Option<String>,
    tag: Option<String>,
    manifest_digest: Option<Digest>,
    sbom: Option<SbomSummary>,
    config_desc: Descriptor,
    layers_desc: Vec<Descriptor>,
    /// A docker-archive's config bytes, read while naming its digest.
    docker_config: Option<Vec<u8>>,
}

/// Reads the image at `path`; with `verify`, re-hashes every blob and
/// checks every layer's entries.
pub fn inspect(path: &Path, verify: bool) -> Result<InspectReport, Error> {
    let store = Store::open_path(path)?;
    let is_dir = matches!(store, Store::Dir(_));
    let has_index = store.size("index.json").is_some();
    let has_docker = store.size("manifest.json").is_some();
    let format = image_format(path, is_dir, has_index, has_docker)?;
    let mut named = if has_index {
        read_oci_documents(&store, path)?
    } else {
        read_docker_documents(&store, path)?
    };
    let config_digest = oci::digest(&named.config_desc)?;
    let layer_digests: Vec<Digest> = named
        .layers_desc
        .iter()
        .map(oci::digest)
        .collect::<Result<_, _>>()?;
    if has_docker
        && let Some((n, t)) =
            check_docker_manifest(&store, path, has_index, &config_digest, &layer_digests)?
    {
        named.name = Some(n);
        named.tag = Some(t);
    }
    let config_bytes = match named.docker_config.take() {
        Some(b) => b,
        None => store.read_blob(&named.config_desc, "the image manifest")?,
    };
    let config: ImageConfiguration = parse(&format!("config {config_digest}"), &config_bytes)?;
    let diff_ids = diff_ids_of(&config, path, named.layers_desc.len())?;
    if has_index {
        check_layer_blobs_present(&store, &layer_digests)?;
    }

    let mut archive_digest = None;
    if verify {
        if !has_index {
            check_docker_member_names(&store, &config_digest, &layer_digests)?;
        }
        verify_layers(
            &store,
            has_index,
            &named.layers_desc,
            &layer_digests,
            &diff_ids,
        )?;
        verify_blobs_by_name(&store, path)?;
        if !is_dir {
            archive_digest = Some(file_digest(path)?);
        }
    }

    // The config's `config` object as written (Docker's extra keys kept),
    // so the report shows what a runtime would read.
    let raw: Value = parse(&format!("config {config_digest}"), &config_bytes)?;
    Ok(InspectReport {
        path: path.to_owned(),
        format: format.to_owned(),
        name: named.name,
        tag: named.tag,
        manifest_digest: named.manifest_digest,
        config_digest,
        total_layer_size: named.layers_desc.iter().map(Descriptor::size).sum(),
        layers: layer_reports(&named.layers_desc, layer_digests, diff_ids),
        platform: format!("{}/{}", config.os(), config.architecture()),
        config: raw.get("config").cloned().unwrap_or(Value::Null),
        sbom: named.sbom,
        verified: verify,
        archive_digest,
    })
}

/// An OCI image (archive or layout) opened to be sent elsewhere: its image
/// manifest and SBOM artifact manifest as written, and where its blobs are.
pub(crate) struct OciImage {
    /// Where the blobs are.
    pub store: Store,
    /// The image manifest's descriptor (as index.json lists it).
    pub manifest_desc: Descriptor,
    /// The image manifest's bytes (digest checked).
    pub manifest_bytes: Vec<u8>,
    /// The image manifest.
    pub manifest: ImageManifest,
    /// The SBOM artifact manifest index.json names: its digest, bytes and
    /// document.
    pub sbom: Option<(Digest, Vec<u8>, ImageManifest)>,
}

/// Opens the OCI image at `path` (an archive with index.json or an OCI
/// layout): a docker-archive has no image manifest to send.
pub(crate) fn open_oci(path: &Path) -> Result<OciImage, Error> {
    let store = Store::open_path(path)?;
    if store.size("index.json").is_none() {
        return Err(Error::malformed(
            path,
            "no index.json: a docker-archive has no OCI manifest to push; build the default archive, an oci-archive or an OCI layout",
        ));
    }
    let named = read_oci_documents(&store, path)?;
    let index: ImageIndex = parse(
        "index.json",
        &store.read_doc("index.json", "the OCI layout")?,
    )?;
    let manifest_desc = single_image_manifest(&index, path)?.clone();
    let manifest_bytes = store.read_blob(&manifest_desc, "index.json")?;
    let manifest: ImageManifest = parse("image manifest", &manifest_bytes)?;
    let sbom = match named.sbom {
        Some(s) => {
            let size =
                store
                    .size(&s.manifest_digest.blob_path())
                    .ok_or_else(|| Error::MissingBlob {
                        digest: s.manifest_digest.to_string(),
                        referenced_by: "index.json annotation".to_owned(),
                    })?;
            let bytes = store.read_blob(
                &oci::descriptor(MediaType::ImageManifest, &s.manifest_digest, size)?,
                "index.json",
            )?;
            let doc: ImageManifest = parse("sbom manifest", &bytes)?;
            Some((s.manifest_digest, bytes, doc))
        }
        None => None,
    };
    Ok(OciImage {
        store,
        manifest_desc,
        manifest_bytes,
        manifest,
        sbom,
    })
}

/// The report's layers, bottom first: each descriptor with its digest and
/// the config's diff_id.
fn layer_reports(
    layers_desc: &[Descriptor],
    layer_digests: Vec<Digest>,
    diff_ids: Vec<Digest>,
) -> Vec<LayerReport> {
    layers_desc
        .iter()
        .zip(layer_digests)
        .zip(diff_ids)
        .map(|((l, digest), diff_id)| LayerReport {
            digest,
            diff_id,
            size: l.size(),
            media_type: l.media_type().to_string(),
        })
        .collect()
}

/// The image's format from what `path` holds: `oci`, `archive`,
/// `oci-archive` or `docker-archive`.
fn image_format(
    path: &Path,
    is_dir: bool,
    has_index: bool,
    has_docker: bool,
) -> Result<&'static str, Error> {
    Ok(match (is_dir, has_index, has_docker) {
        (true, true, _) => "oci",
        (false, true, true) => "archive",
        (false, true, false) => "oci-archive",
        (false, false, true) => "docker-archive",
        _ => {
            return Err(Error::malformed(
                path,
                "neither index.json nor manifest.json: not an OCI layout or Docker archive",
            ));
        }
    })
}

/// Reads oci-layout, index.json, the one image manifest it lists and the
/// SBOM it points to, checking each blob's digest and size.
fn read_oci_documents(store: &Store, path: &Path) -> Result<Named, Error> {
    let layout: OciLayout = parse(
        "oci-layout",
        &store.read_doc("oci-layout", "the OCI layout")?,
    )?;
    if layout.image_layout_version() != "1.0.0" {
        return Err(Error::malformed(
            path,
            "oci-layout is not imageLayoutVersion 1.0.0",
        ));
    }
    let index: ImageIndex = parse(
        "index.json",
        &store.read_doc("index.json", "the OCI layout")?,
    )?;
    let m = single_image_manifest(&index, path)?;
    let mut name = None;
    let mut tag = None;
    if let Some(r) = annotation(m, oci::CONTAINERD_NAME) {
        let (n, t) = split_ref(r);
        name = Some(n);
        tag = Some(t);
    } else if let Some(t) = annotation(m, oci::REF_NAME) {
        tag = Some(t.clone());
    }
    let m_digest = oci::digest(m)?;
    let mbytes = store.read_blob(m, "index.json")?;
    let manifest: ImageManifest = parse(&format!("manifest {m_digest}"), &mbytes)?;
    let sbom_ref = index
        .annotations()
        .as_ref()
        .and_then(|a| a.get(oci::SBOM_ANNOTATION));
    let sbom = match sbom_ref {
        Some(s) => Some(read_sbom(store, path, s, m, &m_digest)?),
        None => None,
    };
    Ok(Named {
        name,
        tag,
        manifest_digest: Some(m_digest),
        sbom,
        config_desc: manifest.config().clone(),
        layers_desc: manifest.layers().clone(),
        docker_config: None,
    })
}

/// The one image manifest (not an artifact) that index.json lists.
fn single_image_manifest<'a>(index: &'a ImageIndex, path: &Path) -> Result<&'a Descriptor, Error> {
    let images: Vec<&Descriptor> = index
        .manifests()
        .iter()
        .filter(|d| {
            *d.media_type() == MediaType::ImageManifest
                || d.media_type().as_ref() == media::DOCKER_MANIFEST
        })
        .filter(|d| d.artifact_type().is_none())
        .collect();
    let [m] = images.as_slice() else {
        return Err(Error::malformed(
            path,
            format!(
                "index.json lists {} image manifests, expected 1",
                images.len()
            ),
        ));
    };
    Ok(m)
}

/// Reads the SBOM manifest `s` (from index.json's annotation) and its SPDX
/// document, checking that it refers to image manifest `m`.
fn read_sbom(
    store: &Store,
    path: &Path,
    s: &str,
    m: &Descriptor,
    m_digest: &Digest,
) -> Result<SbomSummary, Error> {
    let sd: Digest = s.parse()?;
    let size = store
        .size(&sd.blob_path())
        .ok_or_else(|| Error::MissingBlob {
            digest: sd.to_string(),
            referenced_by: "index.json annotation".to_owned(),
        })?;
    let sm_bytes = store.read_blob(
        &oci::descriptor(MediaType::ImageManifest, &sd, size)?,
        "index.json",
    )?;
    let sm: ImageManifest = parse(&format!("sbom manifest {sd}"), &sm_bytes)?;
    if sm.subject().as_ref().map(Descriptor::digest) != Some(m.digest()) {
        return Err(Error::malformed(
            path,
            format!("sbom manifest {sd} does not refer to image manifest {m_digest}"),
        ));
    }
    let doc = sm
        .layers()
        .first()
        .ok_or_else(|| Error::malformed(path, "sbom manifest has no layer"))?;
    let sb = store.read_blob(doc, &format!("sbom manifest {sd}"))?;
    let v: SpdxDocument = parse("sbom", &sb)?;
    Ok(SbomSummary {
        manifest_digest: sd,
        digest: oci::digest(doc)?,
        inputs: v
            .packages
            .iter()
            .flat_map(|p| &p.external_refs)
            .filter(|r| r.reference_type == "purl")
            .filter_map(|r| crate::packages::key_of_purl(&r.reference_locator))
            .collect(),
        spdx_version: v.spdx_version,
        packages: v.packages.len(),
    })
}

/// Reads a docker-archive's manifest.json and config, and hashes each
/// layer member to name its descriptor.
fn read_docker_documents(store: &Store, path: &Path) -> Result<Named, Error> {
    let (cfg, l) = docker_entry(store)?;
    let bytes = store.read_doc(&cfg, "manifest.json")?;
    let config_desc = oci::descriptor(
        MediaType::ImageConfig,
        &Digest::of(&bytes),
        bytes.len() as u64,
    )?;
    let mut layers_desc = Vec::new();
    for member in &l {
        let size = store.size(member).ok_or_else(|| Error::MissingBlob {
            digest: member.clone(),
            referenced_by: "manifest.json".to_owned(),
        })?;
        let (d, _) = HashReader::new(store.open(member)?)
            .finish()
            .map_err(|e| Error::io("read", path.join(member), e))?;
        layers_desc.push(oci::descriptor(MediaType::ImageLayer, &d, size)?);
    }
    Ok(Named {
        name: None,
        tag: None,
        manifest_digest: None,
        sbom: None,
        config_desc,
        layers_desc,
        docker_config: Some(bytes),
    })
}

/// Reads manifest.json's name and tag and, next to an OCI manifest,
/// checks that both name the same config and layers.
fn check_docker_manifest(
    store: &Store,
    path: &Path,
    has_index: bool,
    config_digest: &Digest,
    layer_digests: &[Digest],
) -> Result<Option<(String, String)>, Error> {
    let (cfg, l) = docker_entry(store)?;
    let name_tag = docker_repo_tag(store)?.map(|rt| split_ref(&rt));
    if has_index {
        let want: Vec<String> = layer_digests.iter().map(Digest::blob_path).collect();
        if cfg != config_digest.blob_path() || l != want {
            return Err(Error::malformed(
                path,
                "manifest.json and the OCI manifest name different blobs",
            ));
        }
    }
    Ok(name_tag)
}

/// The config's diff_ids, one per layer.
fn diff_ids_of(
    config: &ImageConfiguration,
    path: &Path,
    layers: usize,
) -> Result<Vec<Digest>, Error> {
    let diff_ids: Vec<Digest> = config
        .rootfs()
        .diff_ids()
        .iter()
        .map(|d| d.parse())
        .collect::<Result<_, _>>()?;
    if diff_ids.len() != layers {
        return Err(Error::malformed(
            path,
            format!(
                "config lists {} diff_ids for {} layers",
                diff_ids.len(),
                layers
            ),
        ));
    }
    Ok(diff_ids)
}

/// Checks that every layer the OCI manifest names has its blob.
fn check_layer_blobs_present(store: &Store, layer_digests: &[Digest]) -> Result<(), Error> {
    for l in layer_digests {
        if store.size(&l.blob_path()).is_none() {
            return Err(Error::MissingBlob {
                digest: l.to_string(),
                referenced_by: "the image manifest".to_owned(),
            });
        }
    }
    Ok(())
}

/// docker-archive members named `<hex>.json` / `<hex>.tar` carry their
/// digest in the name (as `docker save` and vibesys write): checks it.
fn check_docker_member_names(
    store: &Store,
    config_digest: &Digest,
    layer_digests: &[Digest],
) -> Result<(), Error> {
    let (cfg, l) = docker_entry(store)?;
    let named = std::iter::once((cfg, config_digest.clone()))
        .chain(l.into_iter().zip(layer_digests.iter().cloned()));
    for (member, found) in named {
        let stem = member
            .strip_suffix(".json")
            .or_else(|| member.strip_suffix(".tar"));
        if let Some(expected) = stem.and_then(|h| format!("sha256:{h}").parse::<Digest>().ok())
            && expected != found
        {
            return Err(Error::DigestMismatch {
                blob: member,
                expected: expected.to_string(),
                found: found.to_string(),
            });
        }
    }
    Ok(())
}

/// Re-hashes every layer blob and its uncompressed tar, checking each
/// entry, against the manifest's digest and size and the config's diff_id.
fn verify_layers(
    store: &Store,
    has_index: bool,
    layers_desc: &[Descriptor],
    layer_digests: &[Digest],
    diff_ids: &[Digest],
) -> Result<(), Error> {
    let docker_layers = if has_index {
        None
    } else {
        Some(docker_entry(store)?.1)
    };
    for (i, ((l, ld), diff)) in layers_desc
        .iter()
        .zip(layer_digests)
        .zip(diff_ids)
        .enumerate()
    {
        let member = docker_layers
            .as_ref()
            .map_or_else(|| ld.blob_path(), |d| d[i].clone());
        let (digest, size, found_diff) = verify_layer(store, &member, ld)?;
        check_blob(ld, l.size(), &digest, size)?;
        if &found_diff != diff {
            return Err(Error::DigestMismatch {
                blob: format!("{ld} (uncompressed)"),
                expected: diff.to_string(),
                found: found_diff.to_string(),
            });
        }
    }
    Ok(())
}

/// Re-hashes every `blobs/sha256/<hex>` member against the digest its
/// name gives; a name that is no digest is a stray member.
fn verify_blobs_by_name(store: &Store, path: &Path) -> Result<(), Error> {
    for n in store.names()? {
        if let Some(hex) = n.strip_prefix("blobs/sha256/") {
            let expected: Digest = format!("sha256:{hex}")
                .parse()
                .map_err(|_| Error::malformed(path, format!("stray member {n}")))?;
            let (d, _) = HashReader::new(store.open(&n)?)
                .finish()
                .map_err(|e| Error::io("read", path.join(&n), e))?;
            if d != expected {
                return Err(Error::DigestMismatch {
                    blob: n,
                    expected: expected.to_string(),
                    found: d.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// sha256 of the archive file at `path`.
fn file_digest(path: &Path) -> Result<Digest, Error> {
    let f = File::open(path).map_err(|e| Error::io("open", path, e))?;
    Ok(HashReader::new(f)
        .finish()
        .map_err(|e| Error::io("read", path, e))?
        .0)
}

fn docker_entries(store: &Store) -> Result<Vec<DockerManifestEntry>, Error> {
    parse(
        "manifest.json",
        &store.read_doc("manifest.json", "the archive")?,
    )
}

fn docker_entry(store: &Store) -> Result<(String, Vec<String>), Error> {
    let entries = docker_entries(store)?;
    let [e] = entries.as_slice() else {
        return Err(Error::malformed(
            store.path(),
            format!("manifest.json lists {} images, expected 1", entries.len()),
        ));
    };
    // Names come from the archive: never let them leave it (a layout
    // directory is read from the file system).
    let clean = |s: &str| {
        let n = s.trim_start_matches("./");
        if n.is_empty() || n.starts_with('/') || n.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(Error::UnsafeEntry {
                layer: "manifest.json".to_owned(),
                entry: s.to_owned(),
                reason: "escapes the archive root".to_owned(),
            });
        }
        Ok(n.to_owned())
    };
    Ok((
        clean(&e.config)?,
        e.layers
            .iter()
            .map(|l| clean(l))
            .collect::<Result<_, _>>()?,
    ))
}

fn docker_repo_tag(store: &Store) -> Result<Option<String>, Error> {
    Ok(docker_entries(store)?
        .first()
        .and_then(|e| e.repo_tags.as_ref())
        .and_then(|t| t.first())
        .cloned())
}

/// Hashes a layer blob, decompresses it, hashes the tar and checks every
/// entry. Returns (blob digest, blob size, uncompressed digest).
fn verify_layer(
    store: &Store,
    member: &str,
    digest: &Digest,
) -> Result<(Digest, u64, Digest), Error> {
    let layer = digest.to_string();
    let io_err = |e: io::Error| Error::UnsafeEntry {
        layer: layer.clone(),
        entry: member.to_owned(),
        reason: format!("unreadable: {e}"),
    };
    let mut raw = HashReader::new(store.open(member)?);
    let diff = {
        let mut br = BufReader::with_capacity(1 << 20, &mut raw);
        let head = br.fill_buf().map_err(io_err)?;
        let dec: Box<dyn Read + '_> = if head.starts_with(&[0x1f, 0x8b]) {
            Box::new(flate2::bufread::MultiGzDecoder::new(br))
        } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            Box::new(zstd::stream::read::Decoder::with_buffer(br).map_err(io_err)?)
        } else {
            Box::new(br)
        };
        let mut un = HashReader::new(dec);
        check_entries(&mut un, &layer)?;
        un.finish()
            .map_err(|e| Error::UnsafeEntry {
                layer: layer.clone(),
                entry: member.to_owned(),
                reason: format!("corrupt data: {e}"),
            })?
            .0
    };
    let (d, size) = raw.finish().map_err(io_err)?;
    Ok((d, size, diff))
}

fn check_entries(r: &mut impl Read, layer: &str) -> Result<(), Error> {
    let unsafe_entry = |entry: &str, reason: String| Error::UnsafeEntry {
        layer: layer.to_owned(),
        entry: entry.to_owned(),
        reason,
    };
    let mut ar = tar::Archive::new(r);
    let entries = ar
        .entries()
        .map_err(|e| unsafe_entry("-", format!("not a tar stream: {e}")))?;
    for e in entries {
        let e = e.map_err(|e| unsafe_entry("-", format!("corrupt tar: {e}")))?;
        let raw = String::from_utf8_lossy(&e.path_bytes()).into_owned();
        let name = raw.trim_start_matches("./").trim_end_matches('/');
        if raw.starts_with('/') {
            return Err(unsafe_entry(&raw, "absolute path".to_owned()));
        }
        if name.split('/').any(|c| c == "..") {
            return Err(unsafe_entry(&raw, "path contains '..'".to_owned()));
        }
        let ty = e.header().entry_type();
        let link = e
            .link_name_bytes()
            .map(|l| String::from_utf8_lossy(&l).into_owned());
        match ty {
            tar::EntryType::Symlink => {
                let t = link.unwrap_or_default();
                crate::input::check_symlink(name, &t).map_err(|_| {
                    unsafe_entry(&raw, format!("symlink target {t} escapes the root"))
                })?;
            }
            tar::EntryType::Link => {
                let t = link.unwrap_or_default();
                let tn = t.trim_start_matches("./");
                if t.starts_with('/') || tn.split('/').any(|c| c == "..") || tn.is_empty() {
                    return Err(unsafe_entry(
                        &raw,
                        format!("hardlink target {t} escapes the root"),
                    ));
                }
            }
            tar::EntryType::Block | tar::EntryType::Char | tar::EntryType::Fifo => {
                return Err(unsafe_entry(&raw, "device or fifo".to_owned()));
            }
            _ => {}
        }
    }
    Ok(())
}
