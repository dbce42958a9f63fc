//! The archive layout: aligned blob data, readable by a tar reader.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;

use super::*;

/// Deterministic bytes: `len` of them, varied by `seed`.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The blob of `content` in `dir`.
fn blob(dir: &Path, content: &[u8]) -> (Digest, PathBuf) {
    let d = Digest::of(content);
    let p = dir.join(d.hex());
    if !p.exists() {
        std::fs::write(&p, content).unwrap();
    }
    (d, p)
}

/// Writes an image of `layers` at `out` as `format`; the
/// config, two more documents (one bigger than a page) and the small
/// members are made from the layers, as a build makes them.
fn put_image(dir: &Path, out: &Path, format: OutputFormat, layers: &[Vec<u8>]) {
    let store = dir.join("blobs");
    std::fs::create_dir_all(&store).unwrap();
    let mut blobs: Vec<(Digest, PathBuf)> = layers.iter().map(|l| blob(&store, l)).collect();
    let layer_digests: Vec<Digest> = blobs.iter().map(|(d, _)| d.clone()).collect();
    let listing: String = layer_digests.iter().map(|d| format!("{d}\n")).collect();
    let config = blob(&store, format!("config of\n{listing}").as_bytes());
    let sbom = blob(&store, listing.repeat(80).as_bytes());
    let empty = blob(&store, b"{}");
    let config_digest = config.0.clone();
    blobs.extend([config, sbom, empty]);
    blobs.sort();
    blobs.dedup();
    let index = format!("index naming {config_digest}");
    let manifest = format!("manifest.json naming {listing}");
    let repositories = format!("repositories naming {}", layers.len());
    let docs = Docs {
        index: index.as_bytes(),
        docker_manifest: manifest.as_bytes(),
        docker_only_manifest: manifest.as_bytes(),
        repositories: repositories.as_bytes(),
        config: &config_digest,
        layers: &layer_digests,
    };
    let members = members(format, &blobs, &docs, out).unwrap();
    let layout = lay_out(&members, 1).unwrap();
    write_new(out, &layout).unwrap();
}

/// Every member of the tar `bytes`: (name, data offset, data).
fn read_members(bytes: &[u8]) -> Vec<(String, u64, Vec<u8>)> {
    let mut ar = tar::Archive::new(bytes);
    ar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let at = e.raw_file_position();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (name, at, data)
        })
        .collect()
}

const FORMATS: [OutputFormat; 3] = [
    OutputFormat::Archive,
    OutputFormat::OciArchive,
    OutputFormat::DockerArchive,
];

#[test]
fn blob_data_starts_at_page_boundaries_and_reads_back() {
    let t = tempfile::tempdir().unwrap();
    let layers: Vec<Vec<u8>> = [10_000, 3000, 8192, 300_000]
        .iter()
        .enumerate()
        .map(|(i, &n)| bytes(i as u64, n))
        .collect();
    for format in FORMATS {
        let out = t.path().join(format!("{}.tar", format.as_str()));
        put_image(t.path(), &out, format, &layers);
        let archive = std::fs::read(&out).unwrap();
        let members = read_members(&archive);
        let mut blobs = 0;
        for (name, at, data) in &members {
            let digest = name
                .strip_prefix("blobs/sha256/")
                .or_else(|| name.strip_suffix(".tar"))
                .or_else(|| name.strip_suffix(".json"));
            if let Some(hex) = digest.filter(|h| h.len() == 64) {
                assert_eq!(at % ALIGN, 0, "{format:?} {name} at {at}");
                assert_eq!(Digest::of(data).hex(), hex, "{format:?} {name}");
                blobs += 1;
            }
        }
        let expected = match format {
            OutputFormat::DockerArchive => layers.len() + 1,
            _ => layers.len() + 3,
        };
        assert_eq!(blobs, expected, "{format:?}: {members:?}");
        // The layers come bottom first, before the other blobs.
        let names: Vec<&str> = members.iter().map(|m| m.0.as_str()).collect();
        let first_layer = names
            .iter()
            .position(|n| n.contains(Digest::of(&layers[0]).hex()))
            .unwrap();
        let last_layer = names
            .iter()
            .position(|n| n.contains(Digest::of(&layers[3]).hex()))
            .unwrap();
        assert!(first_layer < last_layer, "{names:?}");
        // Same inputs, same bytes.
        let again = t.path().join("again.tar");
        put_image(t.path(), &again, format, &layers);
        assert!(std::fs::read(&again).unwrap() == archive, "{format:?}");
    }
}
