//! OCI and Docker documents: config, manifest, index, SBOM and its artifact
//! manifest, Docker `manifest.json` and `repositories`. All are written as
//! canonical JSON so their digests reproduce.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::json::canonical;
use crate::{Digest, Error, ImageSpec};

/// Media types used here.
pub(crate) mod media {
    pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
    pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
    pub const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
    pub const LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
    pub const LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
    pub const EMPTY: &str = "application/vnd.oci.empty.v1+json";
    pub const SPDX: &str = "application/spdx+json";
    pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
}

/// Index annotation naming the SBOM artifact manifest.
pub(crate) const SBOM_ANNOTATION: &str = "dev.vibesys.sbom.manifest";
/// The OCI ref-name annotation (the tag skopeo's `oci:DIR:REF` selects).
pub(crate) const REF_NAME: &str = "org.opencontainers.image.ref.name";
/// containerd's full-name annotation.
pub(crate) const CONTAINERD_NAME: &str = "io.containerd.image.name";

/// An OCI content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Descriptor {
    #[serde(rename = "mediaType")]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    #[serde(
        rename = "artifactType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub artifact_type: Option<String>,
}

impl Descriptor {
    pub(crate) fn new(media_type: &str, digest: Digest, size: u64) -> Self {
        Self {
            media_type: media_type.to_owned(),
            digest,
            size,
            annotations: BTreeMap::new(),
            artifact_type: None,
        }
    }
}

/// RFC 3339 UTC time of a Unix timestamp (no clock involved).
pub(crate) fn rfc3339(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    // Civil-from-days (proleptic Gregorian), after Howard Hinnant.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The architecture name OCI uses for this build machine.
pub(crate) fn architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The image config (OCI image config, which Docker also reads).
pub(crate) fn config(
    spec: &ImageSpec,
    diff_ids: &[Digest],
    history: &[String],
    epoch: u64,
) -> Result<Vec<u8>, Error> {
    let created = rfc3339(epoch);
    let c = &spec.config;
    let mut cfg = serde_json::Map::new();
    if !c.entrypoint.is_empty() {
        cfg.insert("Entrypoint".into(), json!(c.entrypoint));
    }
    if !c.cmd.is_empty() {
        cfg.insert("Cmd".into(), json!(c.cmd));
    }
    if !c.env.is_empty() {
        cfg.insert("Env".into(), json!(c.env));
    }
    if let Some(w) = &c.working_dir {
        cfg.insert("WorkingDir".into(), json!(w));
    }
    if let Some(u) = &c.user {
        cfg.insert("User".into(), json!(u));
    }
    if !c.labels.is_empty() {
        cfg.insert("Labels".into(), json!(c.labels));
    }
    let history: Vec<Value> = history
        .iter()
        .map(|h| json!({"created": created, "created_by": h}))
        .collect();
    let doc = json!({
        "architecture": architecture(),
        "os": "linux",
        "created": created,
        "config": Value::Object(cfg),
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": history,
    });
    canonical("image config", &doc)
}

/// The image manifest.
pub(crate) fn manifest(
    config: &Descriptor,
    layers: &[Descriptor],
    annotations: &BTreeMap<String, String>,
) -> Result<Vec<u8>, Error> {
    let mut doc = json!({
        "schemaVersion": 2,
        "mediaType": media::MANIFEST,
        "config": config,
        "layers": layers,
    });
    if !annotations.is_empty() {
        doc["annotations"] = json!(annotations);
    }
    canonical("image manifest", &doc)
}

/// The empty JSON blob `{}` used as the config of artifact manifests.
pub(crate) const EMPTY_JSON: &[u8] = b"{}";

/// The SBOM artifact manifest, whose subject is the image manifest.
pub(crate) fn sbom_manifest(
    subject: &Descriptor,
    sbom: &Descriptor,
    epoch: u64,
) -> Result<Vec<u8>, Error> {
    let empty = Descriptor::new(
        media::EMPTY,
        Digest::of(EMPTY_JSON),
        EMPTY_JSON.len() as u64,
    );
    let mut subject = subject.clone();
    subject.annotations.clear();
    let doc = json!({
        "schemaVersion": 2,
        "mediaType": media::MANIFEST,
        "artifactType": media::SPDX,
        "config": empty,
        "layers": [sbom],
        "subject": subject,
        "annotations": {"org.opencontainers.image.created": rfc3339(epoch)},
    });
    canonical("sbom manifest", &doc)
}

/// `index.json`: the image manifest (named by tag) and, in the index
/// annotations, the SBOM artifact manifest.
pub(crate) fn index(
    manifest: &Descriptor,
    sbom_manifest: Option<&Descriptor>,
) -> Result<Vec<u8>, Error> {
    let mut doc = json!({
        "schemaVersion": 2,
        "mediaType": media::INDEX,
        "manifests": [manifest],
    });
    if let Some(s) = sbom_manifest {
        doc["annotations"] = json!({ SBOM_ANNOTATION: s.digest.to_string() });
    }
    canonical("index.json", &doc)
}

/// `oci-layout`.
pub(crate) const OCI_LAYOUT: &[u8] = br#"{"imageLayoutVersion":"1.0.0"}"#;

/// Docker's `manifest.json`.
pub(crate) fn docker_manifest(
    config_path: &str,
    repo_tag: &str,
    layer_paths: &[String],
) -> Result<Vec<u8>, Error> {
    canonical(
        "manifest.json",
        &json!([{ "Config": config_path, "RepoTags": [repo_tag], "Layers": layer_paths }]),
    )
}

/// Docker's legacy `repositories` (name -> tag -> top layer id).
pub(crate) fn repositories(name: &str, tag: &str, top_layer: &Digest) -> Result<Vec<u8>, Error> {
    canonical("repositories", &json!({ name: { tag: top_layer.hex() } }))
}

/// One group of the SBOM.
pub(crate) struct SbomGroup<'a> {
    pub name: &'a str,
    pub digest: &'a Digest,
    pub layer: &'a Digest,
}

/// The SPDX 2.3 JSON document: the image as the described package, each
/// group (store path or host file group) as a package it contains.
pub(crate) fn sbom(
    spec: &ImageSpec,
    config: &Digest,
    groups: &[SbomGroup<'_>],
    epoch: u64,
) -> Result<Vec<u8>, Error> {
    let mut packages = vec![json!({
        "SPDXID": "SPDXRef-Image",
        "name": spec.name,
        "versionInfo": spec.tag,
        "downloadLocation": "NOASSERTION",
        "filesAnalyzed": false,
        "primaryPackagePurpose": "CONTAINER",
        "checksums": [{"algorithm": "SHA256", "checksumValue": config.hex()}],
        "comment": "checksum is the image config digest (the Docker image ID)",
    })];
    let mut relationships = vec![
        json!({"spdxElementId": "SPDXRef-DOCUMENT", "relationshipType": "DESCRIBES", "relatedSpdxElement": "SPDXRef-Image"}),
    ];
    for (i, g) in groups.iter().enumerate() {
        let id = format!("SPDXRef-Group-{}", i + 1);
        packages.push(json!({
            "SPDXID": id,
            "name": g.name,
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": false,
            "checksums": [{"algorithm": "SHA256", "checksumValue": g.digest.hex()}],
            "comment": format!("in layer {}; checksum is the sha256 of the group's vibesys file listing", g.layer),
        }));
        relationships.push(json!({"spdxElementId": "SPDXRef-Image", "relationshipType": "CONTAINS", "relatedSpdxElement": id}));
    }
    let doc = json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": format!("{}:{}", spec.name, spec.tag),
        "documentNamespace": format!("https://vibesys.invalid/spdx/{}/{}", spec.name, config.hex()),
        "creationInfo": {"created": rfc3339(epoch), "creators": ["Tool: vibesys"]},
        "packages": packages,
        "relationships": relationships,
    });
    canonical("sbom", &doc)
}

/// Writes `bytes` as a blob into `blobs` (temp file + rename).
pub(crate) fn write_blob(
    blobs: &Path,
    media_type: &str,
    bytes: &[u8],
) -> Result<Descriptor, Error> {
    let d = Digest::of(bytes);
    let dest = blobs.join(d.hex());
    let mut tmp = tempfile::NamedTempFile::new_in(blobs)
        .map_err(|e| Error::io("create temporary file in", blobs, e))?;
    tmp.write_all(bytes)
        .map_err(|e| Error::io("write", tmp.path().to_owned(), e))?;
    crate::perm::publish_file(tmp.as_file()).map_err(|e| Error::io("chmod", &dest, e))?;
    tmp.persist(&dest)
        .map_err(|e| Error::io("rename into place", &dest, e.error))?;
    Ok(Descriptor::new(media_type, d, bytes.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_without_a_clock() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1), "1970-01-01T00:00:01Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
