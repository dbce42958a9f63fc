//! OCI and Docker documents: config, manifest, index, SBOM and its artifact
//! manifest, Docker `manifest.json` and `repositories`. All are written as
//! canonical JSON so their digests reproduce.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use oci_spec::image::{
    ANNOTATION_CREATED, ANNOTATION_REF_NAME, Arch, Config, Descriptor, History, ImageConfiguration,
    ImageIndex, ImageManifest, ImageManifestBuilder, MediaType, Os, RootFs,
};
use serde::{Deserialize, Serialize};

use crate::digest::{Digest, DigestExt as _};
use crate::error::Error;
use crate::json::canonical;
use crate::spec::ImageSpec;

/// Media types oci-spec has no variant for.
pub(crate) mod media {
    use oci_spec::image::MediaType;

    /// The SPDX JSON document (the SBOM layer and artifact type).
    pub(crate) fn spdx() -> MediaType {
        MediaType::Other("application/spdx+json".to_owned())
    }

    /// Docker's schema 2 manifest, which an index written by Docker lists.
    pub(crate) const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
}

/// Index annotation naming the SBOM artifact manifest.
pub(crate) const SBOM_ANNOTATION: &str = "dev.vibesys.sbom.manifest";
/// The OCI ref-name annotation (the tag skopeo's `oci:DIR:REF` selects).
pub(crate) const REF_NAME: &str = ANNOTATION_REF_NAME;
/// containerd's full-name annotation.
pub(crate) const CONTAINERD_NAME: &str = "io.containerd.image.name";

/// The schema version of every manifest and index written.
const SCHEMA_VERSION: u32 = 2;

/// A descriptor of `media_type` for the sha256 blob `digest`.
pub(crate) fn descriptor(
    media_type: MediaType,
    digest: &Digest,
    size: u64,
) -> Result<Descriptor, Error> {
    Ok(Descriptor::new(media_type, size, digest.to_oci()?))
}

/// The sha256 digest a descriptor names (any other algorithm is refused).
pub(crate) fn digest(d: &Descriptor) -> Result<Digest, Error> {
    Digest::from_oci(d.digest())
}

/// `Some(map)` for a non-empty map, `None` (the field left out) otherwise.
fn annotations(m: &BTreeMap<String, String>) -> Option<HashMap<String, String>> {
    (!m.is_empty()).then(|| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

fn oci_err(what: &str) -> impl FnOnce(oci_spec::OciSpecError) -> Error + '_ {
    move |source| Error::OciSpec {
        what: what.to_owned(),
        source,
    }
}

/// RFC 3339 UTC time of a Unix timestamp (no clock involved), whole
/// seconds: `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn rfc3339(epoch: u64) -> Result<String, Error> {
    i64::try_from(epoch)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map(|t| t.to_string())
        .ok_or_else(|| Error::SpecInvalid {
            field: "SOURCE_DATE_EPOCH".to_owned(),
            reason: format!("{epoch} is after {}", jiff::Timestamp::MAX),
        })
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
    let created = rfc3339(epoch)?;
    let c = &spec.config;
    let nonempty = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
    let mut cfg = Config::default();
    cfg.set_entrypoint(nonempty(&c.entrypoint));
    cfg.set_cmd(nonempty(&c.cmd));
    cfg.set_env(nonempty(&c.env));
    cfg.set_working_dir(c.working_dir.clone());
    cfg.set_user(c.user.clone());
    cfg.set_labels(annotations(&c.labels));
    let mut rootfs = RootFs::default();
    rootfs.set_diff_ids(diff_ids.iter().map(Digest::to_string).collect());
    let history = history
        .iter()
        .map(|h| {
            let mut e = History::default();
            e.set_created(Some(created.clone()));
            e.set_created_by(Some(h.clone()));
            e
        })
        .collect();
    let mut doc = ImageConfiguration::default();
    doc.set_architecture(Arch::from(architecture()));
    doc.set_os(Os::Linux);
    doc.set_created(Some(created));
    doc.set_config(Some(cfg));
    doc.set_rootfs(rootfs);
    doc.set_history(Some(history));
    canonical("image config", &doc)
}

/// The image manifest.
pub(crate) fn manifest(
    config: &Descriptor,
    layers: &[Descriptor],
    extra: &BTreeMap<String, String>,
) -> Result<Vec<u8>, Error> {
    let mut doc = ImageManifestBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageManifest)
        .config(config.clone())
        .layers(layers.to_vec())
        .build()
        .map_err(oci_err("image manifest"))?;
    doc.set_annotations(annotations(extra));
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
    let empty = descriptor(
        MediaType::EmptyJSON,
        &Digest::of(EMPTY_JSON),
        EMPTY_JSON.len() as u64,
    )?;
    let mut subject = subject.clone();
    subject.set_annotations(None);
    let doc: ImageManifest = ImageManifestBuilder::default()
        .schema_version(SCHEMA_VERSION)
        .media_type(MediaType::ImageManifest)
        .artifact_type(media::spdx())
        .config(empty)
        .layers(vec![sbom.clone()])
        .subject(subject)
        .annotations(HashMap::from([(
            ANNOTATION_CREATED.to_owned(),
            rfc3339(epoch)?,
        )]))
        .build()
        .map_err(oci_err("sbom manifest"))?;
    canonical("sbom manifest", &doc)
}

/// `index.json`: the image manifest (named by tag) and, in the index
/// annotations, the SBOM artifact manifest.
pub(crate) fn index(
    manifest: &Descriptor,
    sbom_manifest: Option<&Descriptor>,
) -> Result<Vec<u8>, Error> {
    let mut doc = ImageIndex::default();
    doc.set_schema_version(SCHEMA_VERSION);
    doc.set_media_type(Some(MediaType::ImageIndex));
    doc.set_manifests(vec![manifest.clone()]);
    doc.set_annotations(
        sbom_manifest
            .map(|s| HashMap::from([(SBOM_ANNOTATION.to_owned(), s.digest().to_string())])),
    );
    canonical("index.json", &doc)
}

/// `index.json` of a layout holding image `name:tag`: its image manifest
/// (given the ref-name and containerd-name annotations here) and the SBOM
/// artifact manifest.
pub(crate) fn layout_index(
    manifest: &mut Descriptor,
    sbom_manifest: Option<&Descriptor>,
    name: &str,
    tag: &str,
) -> Result<Vec<u8>, Error> {
    manifest.set_annotations(Some(
        [
            (REF_NAME.to_owned(), tag.to_owned()),
            (CONTAINERD_NAME.to_owned(), format!("{name}:{tag}")),
        ]
        .into(),
    ));
    index(manifest, sbom_manifest)
}

/// `oci-layout`.
pub(crate) const OCI_LAYOUT: &[u8] = br#"{"imageLayoutVersion":"1.0.0"}"#;

/// One image of Docker's `manifest.json` (oci-spec has no type for Docker's
/// archive documents).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub(crate) struct DockerManifestEntry {
    /// The config member.
    pub config: String,
    /// `name:tag` of the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo_tags: Option<Vec<String>>,
    /// The layer members, bottom first.
    pub layers: Vec<String>,
}

/// Docker's `manifest.json`.
pub(crate) fn docker_manifest(
    config_path: &str,
    repo_tag: &str,
    layer_paths: &[String],
) -> Result<Vec<u8>, Error> {
    canonical(
        "manifest.json",
        &[DockerManifestEntry {
            config: config_path.to_owned(),
            repo_tags: Some(vec![repo_tag.to_owned()]),
            layers: layer_paths.to_vec(),
        }],
    )
}

/// Docker's legacy `repositories`: name -> tag -> top layer id.
pub(crate) type DockerRepositories = BTreeMap<String, BTreeMap<String, String>>;

/// Docker's legacy `repositories` (name -> tag -> top layer id).
pub(crate) fn repositories(name: &str, tag: &str, top_layer: &Digest) -> Result<Vec<u8>, Error> {
    let doc: DockerRepositories = BTreeMap::from([(
        name.to_owned(),
        BTreeMap::from([(tag.to_owned(), top_layer.hex().to_owned())]),
    )]);
    canonical("repositories", &doc)
}

/// One group of the SBOM.
pub(crate) struct SbomGroup<'a> {
    pub name: &'a str,
    pub digest: &'a Digest,
    pub layer: &'a Digest,
}

/// The SPDX 2.3 JSON document (the subset vibesys writes and reads; SPDX is
/// not an OCI document, so oci-spec has no type for it).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SpdxDocument {
    pub spdx_version: String,
    #[serde(default)]
    pub data_license: String,
    #[serde(rename = "SPDXID", default)]
    pub spdxid: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub document_namespace: String,
    #[serde(default)]
    pub creation_info: SpdxCreationInfo,
    #[serde(default)]
    pub packages: Vec<SpdxPackage>,
    #[serde(default)]
    pub relationships: Vec<SpdxRelationship>,
}

/// SPDX `creationInfo`.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(crate) struct SpdxCreationInfo {
    #[serde(default)]
    pub created: String,
    #[serde(default)]
    pub creators: Vec<String>,
}

/// One SPDX package: the image, or a group it contains.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SpdxPackage {
    #[serde(rename = "SPDXID")]
    pub spdxid: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_info: Option<String>,
    pub download_location: String,
    pub files_analyzed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary_package_purpose: Option<String>,
    #[serde(default)]
    pub checksums: Vec<SpdxChecksum>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_refs: Vec<SpdxExternalRef>,
}

/// An SPDX external reference (here: a package URL).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SpdxExternalRef {
    pub reference_category: String,
    pub reference_type: String,
    pub reference_locator: String,
}

/// An SPDX checksum.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SpdxChecksum {
    pub algorithm: String,
    pub checksum_value: String,
}

/// An SPDX relationship.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SpdxRelationship {
    pub spdx_element_id: String,
    pub relationship_type: String,
    pub related_spdx_element: String,
}

fn sha256(d: &Digest) -> Vec<SpdxChecksum> {
    vec![SpdxChecksum {
        algorithm: "SHA256".to_owned(),
        checksum_value: d.hex().to_owned(),
    }]
}

fn relationship(from: &str, kind: &str, to: &str) -> SpdxRelationship {
    SpdxRelationship {
        spdx_element_id: from.to_owned(),
        relationship_type: kind.to_owned(),
        related_spdx_element: to.to_owned(),
    }
}

/// The SPDX 2.3 JSON document: the image as the described package, each
/// group (store path or host file group) as a package it contains, and
/// each package the content's package databases list (Debian's dpkg
/// status, Python dist-info) with its version and package URL.
pub(crate) fn sbom(
    spec: &ImageSpec,
    config: &Digest,
    groups: &[SbomGroup<'_>],
    packages: &[crate::packages::Package],
    epoch: u64,
) -> Result<Vec<u8>, Error> {
    let mut packages_out = vec![SpdxPackage {
        spdxid: "SPDXRef-Image".to_owned(),
        name: spec.name.clone(),
        version_info: Some(spec.tag.clone()),
        download_location: "NOASSERTION".to_owned(),
        files_analyzed: false,
        primary_package_purpose: Some("CONTAINER".to_owned()),
        checksums: sha256(config),
        comment: Some("checksum is the image config digest (the Docker image ID)".to_owned()),
        external_refs: Vec::new(),
    }];
    let mut relationships = vec![relationship(
        "SPDXRef-DOCUMENT",
        "DESCRIBES",
        "SPDXRef-Image",
    )];
    for (i, g) in groups.iter().enumerate() {
        let id = format!("SPDXRef-Group-{}", i + 1);
        relationships.push(relationship("SPDXRef-Image", "CONTAINS", &id));
        packages_out.push(SpdxPackage {
            spdxid: id,
            name: g.name.to_owned(),
            version_info: None,
            download_location: "NOASSERTION".to_owned(),
            files_analyzed: false,
            primary_package_purpose: None,
            checksums: sha256(g.digest),
            comment: Some(format!(
                "in layer {}; checksum is the sha256 of the group's vibesys file listing (v2: BLAKE3 file digests)",
                g.layer
            )),
            external_refs: Vec::new(),
        });
    }
    for (i, p) in packages.iter().enumerate() {
        let id = format!("SPDXRef-Package-{}", i + 1);
        relationships.push(relationship("SPDXRef-Image", "CONTAINS", &id));
        packages_out.push(SpdxPackage {
            spdxid: id,
            name: p.name.clone(),
            version_info: Some(p.version.clone()),
            download_location: "NOASSERTION".to_owned(),
            files_analyzed: false,
            primary_package_purpose: None,
            checksums: Vec::new(),
            comment: None,
            external_refs: vec![SpdxExternalRef {
                reference_category: "PACKAGE-MANAGER".to_owned(),
                reference_type: "purl".to_owned(),
                reference_locator: p.purl(),
            }],
        });
    }
    let packages = packages_out;
    let doc = SpdxDocument {
        spdx_version: "SPDX-2.3".to_owned(),
        data_license: "CC0-1.0".to_owned(),
        spdxid: "SPDXRef-DOCUMENT".to_owned(),
        name: format!("{}:{}", spec.name, spec.tag),
        document_namespace: format!(
            "https://vibesys.invalid/spdx/{}/{}",
            spec.name,
            config.hex()
        ),
        creation_info: SpdxCreationInfo {
            created: rfc3339(epoch)?,
            creators: vec!["Tool: vibesys".to_owned()],
        },
        packages,
        relationships,
    };
    canonical("sbom", &doc)
}

/// Writes `bytes` as a blob into `blobs` (temp file + rename).
pub(crate) fn write_blob(
    blobs: &Path,
    media_type: MediaType,
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
    descriptor(media_type, &d, bytes.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_without_a_clock() {
        assert_eq!(rfc3339(0).unwrap(), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1).unwrap(), "1970-01-01T00:00:01Z");
        assert_eq!(rfc3339(951_782_400).unwrap(), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_700_000_000).unwrap(), "2023-11-14T22:13:20Z");
        let max = u64::try_from(jiff::Timestamp::MAX.as_second()).unwrap();
        assert!(rfc3339(max).unwrap().starts_with("9999-12-"));
        assert!(rfc3339(max + 1).is_err());
        assert!(rfc3339(u64::MAX).is_err());
    }

    #[test]
    fn oci_layout_is_the_canonical_oci_spec_document() {
        let layout = oci_spec::image::OciLayoutBuilder::default()
            .image_layout_version("1.0.0")
            .build()
            .unwrap();
        assert_eq!(canonical("oci-layout", &layout).unwrap(), OCI_LAYOUT);
    }
}
