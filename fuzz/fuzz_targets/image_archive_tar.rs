//! Structure-aware image-reader fuzzing: an OCI archive assembled from
//! fuzzed layer entries and fuzzed corruptions of a well-formed image
//! (wrong sizes, wrong diff ids, swapped blob contents, duplicate or extra
//! members, hostile entry names and links), so that inputs reach the
//! layer checks of `vs_image::inspect(path, verify = true)` instead of
//! stopping at the first JSON document.
//!
//! Property: whenever the reader reports a verified image, every digest it
//! reports (manifest, config, each layer) is the SHA-256 of the bytes
//! stored under that name, and each layer's diff id is in the config.
#![no_main]

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use sha2::{Digest as _, Sha256};

#[derive(Arbitrary, Debug)]
enum Kind {
    File(Vec<u8>),
    Dir,
    Symlink(String),
    Hardlink(String),
    Fifo,
}

#[derive(Arbitrary, Debug)]
struct Entry {
    name: String,
    mode: u16,
    kind: Kind,
}

#[derive(Arbitrary, Debug)]
enum Corrupt {
    LayerSize(u8),
    ConfigSize(u8),
    DiffId,
    SwapLayerBytes(Vec<u8>),
    SwapConfigBytes(Vec<u8>),
    DropOciLayout,
    DuplicateIndex,
    Extra(String, Vec<u8>),
    GzipMediaType,
    TwoManifests,
    DuplicateBlob(Vec<u8>),
}

#[derive(Arbitrary, Debug)]
struct Input {
    layers: Vec<Vec<Entry>>,
    corrupt: Vec<Corrupt>,
}

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

fn layer_tar(entries: &[Entry]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries.iter().take(8) {
        let mut h = tar::Header::new_ustar();
        let name: String = e.name.chars().take(60).collect();
        // set_path refuses some names; write the raw bytes instead so that
        // hostile names (`..`, absolute) reach the reader.
        let bytes = name.as_bytes();
        let field = &mut h.as_old_mut().name;
        let n = bytes.len().min(field.len());
        field[..n].copy_from_slice(&bytes[..n]);
        h.set_mode(u32::from(e.mode) & 0o7777);
        h.set_mtime(0);
        let data: &[u8] = match &e.kind {
            Kind::File(d) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(d.len().min(512) as u64);
                &d[..d.len().min(512)]
            }
            Kind::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_size(0);
                &[]
            }
            Kind::Symlink(t) | Kind::Hardlink(t) => {
                h.set_entry_type(if matches!(e.kind, Kind::Symlink(_)) {
                    tar::EntryType::Symlink
                } else {
                    tar::EntryType::Link
                });
                let t = t.as_bytes();
                let field = &mut h.as_old_mut().linkname;
                let n = t.len().min(field.len());
                field[..n].copy_from_slice(&t[..n]);
                h.set_size(0);
                &[]
            }
            Kind::Fifo => {
                h.set_entry_type(tar::EntryType::Fifo);
                h.set_size(0);
                &[]
            }
        };
        h.set_cksum();
        let _ = b.append(&h, data);
    }
    b.into_inner().unwrap_or_default()
}

fn append(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
    let mut h = tar::Header::new_ustar();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o644);
    h.set_mtime(0);
    h.set_size(data.len() as u64);
    if h.set_path(name).is_err() {
        return;
    }
    h.set_cksum();
    let _ = b.append(&h, data);
}

fuzz_target!(|input: Input| {
    let mut blobs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    let mut layer_descs = Vec::new();
    let mut diff_ids = Vec::new();
    let mut media = "application/vnd.oci.image.layer.v1.tar";
    for c in &input.corrupt {
        if matches!(c, Corrupt::GzipMediaType) {
            media = "application/vnd.oci.image.layer.v1.tar+gzip";
        }
    }
    for layer in input.layers.iter().take(3) {
        let bytes = layer_tar(layer);
        let d = sha(&bytes);
        diff_ids.push(d.clone());
        layer_descs.push(json!({"mediaType": media, "digest": d, "size": bytes.len()}));
        blobs.insert(d, bytes);
    }
    for c in &input.corrupt {
        match c {
            Corrupt::DiffId => {
                if let Some(first) = diff_ids.first_mut() {
                    *first = sha(b"not the layer");
                }
            }
            Corrupt::LayerSize(n) => {
                if let Some(l) = layer_descs.first_mut() {
                    l["size"] = json!(u64::from(*n));
                }
            }
            _ => {}
        }
    }
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap_or_default();
    let config_digest = sha(&config);
    let mut config_size = config.len() as u64;
    for c in &input.corrupt {
        if let Corrupt::ConfigSize(n) = c {
            config_size = u64::from(*n);
        }
    }
    blobs.insert(config_digest.clone(), config);
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config_size},
        "layers": layer_descs,
    }))
    .unwrap_or_default();
    let manifest_digest = sha(&manifest);
    let mut manifests = vec![json!({
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": manifest_digest, "size": manifest.len(),
        "annotations": {"org.opencontainers.image.ref.name": "fuzz"},
    })];
    if input.corrupt.iter().any(|c| matches!(c, Corrupt::TwoManifests)) {
        manifests.push(manifests[0].clone());
    }
    blobs.insert(manifest_digest.clone(), manifest);
    for c in &input.corrupt {
        match c {
            Corrupt::SwapLayerBytes(bytes) => {
                if let Some(d) = layer_descs.first().and_then(|l| l["digest"].as_str()) {
                    blobs.insert(d.to_owned(), bytes.clone());
                }
            }
            Corrupt::SwapConfigBytes(bytes) => {
                blobs.insert(config_digest.clone(), bytes.clone());
            }
            _ => {}
        }
    }
    let index = serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": manifests}))
        .unwrap_or_default();

    let mut b = tar::Builder::new(Vec::new());
    if !input.corrupt.iter().any(|c| matches!(c, Corrupt::DropOciLayout)) {
        append(&mut b, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
    }
    append(&mut b, "index.json", &index);
    if input.corrupt.iter().any(|c| matches!(c, Corrupt::DuplicateIndex)) {
        append(&mut b, "index.json", b"{}");
    }
    for (digest, bytes) in &blobs {
        let hex = digest.trim_start_matches("sha256:");
        append(&mut b, &format!("blobs/sha256/{hex}"), bytes);
    }
    for c in &input.corrupt {
        match c {
            Corrupt::Extra(name, bytes) => append(&mut b, name, bytes),
            Corrupt::DuplicateBlob(bytes) => {
                // A second member under a layer's (or else the config's)
                // name: a loader that takes the other copy must not get
                // bytes the reader never verified.
                let d = layer_descs
                    .first()
                    .and_then(|l| l["digest"].as_str())
                    .unwrap_or(&config_digest);
                let hex = d.trim_start_matches("sha256:");
                append(&mut b, &format!("blobs/sha256/{hex}"), bytes);
            }
            _ => {}
        }
    }
    let archive = b.into_inner().unwrap_or_default();

    let path = common::scratch().join("structured.tar");
    std::fs::write(&path, &archive).expect("write the archive");
    let Ok(report) = vs_image::inspect(&path, true) else {
        return;
    };
    if !report.verified {
        return;
    }
    // Read back what the archive really holds under each blob name (the
    // last member of a name wins in most readers; check every member).
    let mut held: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    let mut ar = tar::Archive::new(archive.as_slice());
    if let Ok(entries) = ar.entries() {
        for mut e in entries.flatten() {
            let name = e.path().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
            let mut data = Vec::new();
            let _ = std::io::Read::read_to_end(&mut e, &mut data);
            held.entry(name).or_default().push(data);
        }
    }
    let check = |digest: &str| {
        let name = format!("blobs/sha256/{}", digest.trim_start_matches("sha256:"));
        let copies = held.get(&name).expect("a reported blob is in the archive");
        assert!(
            copies.iter().all(|c| sha(c) == digest),
            "verified, but {name} holds other bytes"
        );
    };
    if let Some(m) = &report.manifest_digest {
        check(&m.to_string());
    }
    check(&report.config_digest.to_string());
    for l in &report.layers {
        check(&l.digest.to_string());
    }
});
