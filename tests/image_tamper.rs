//! Tampering is caught: a flipped byte in any blob, a truncated archive, a
//! manifest pointing at a missing blob, layer entries that escape the root,
//! and an image that no longer matches its pin. Each error names the blob,
//! entry or digests involved.

mod image_support;

use std::path::Path;

use image_support::*;
use vs_image::Digest;

fn build(d: &Path, out: &str, format: &str) {
    let spec = write(d, "tiny.toml", TINY_SPEC);
    ok(vibesys(d)
        .args([
            "image",
            "build",
            spec.to_str().unwrap(),
            "--out",
            out,
            "--format",
            format,
            "--no-cache",
            "--path",
            busybox(),
        ])
        .output()
        .unwrap());
}

fn verify_fails(d: &Path, path: &str) -> String {
    fails(
        vibesys(d)
            .args(["image", "inspect", "--verify", path])
            .output()
            .unwrap(),
    )
}

fn flip(path: &Path, offset: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[offset as usize] ^= 0x01;
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_flipped_byte_in_any_blob_of_a_layout_is_named() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    build(d, "layout", "oci");
    ok(vibesys(d)
        .args(["image", "inspect", "--verify", "layout"])
        .output()
        .unwrap());
    let blobs: Vec<String> = std::fs::read_dir(d.join("layout/blobs/sha256"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(blobs.len(), 7, "{blobs:?}");
    for hex in blobs {
        sh(d, "rm -rf copy && cp -a layout copy");
        let p = d.join("copy/blobs/sha256").join(&hex);
        let len = std::fs::metadata(&p).unwrap().len();
        flip(&p, len / 2);
        let err = verify_fails(d, "copy");
        assert!(err.contains(&hex), "blob {hex}: {err}");
    }
}

/// (member name, data offset, size) of each member of a tar file.
fn members(bytes: &[u8]) -> Vec<(String, usize, usize)> {
    let mut out = Vec::new();
    let mut off = 0;
    while off + 512 <= bytes.len() && bytes[off] != 0 {
        let h = &bytes[off..off + 512];
        let name = String::from_utf8_lossy(&h[..100])
            .trim_end_matches('\0')
            .to_owned();
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&h[124..135]).trim_matches(|c| c == '\0' || c == ' '),
            8,
        )
        .unwrap();
        out.push((name, off + 512, size));
        off += 512 + size.div_ceil(512) * 512;
    }
    out
}

#[test]
fn a_flipped_byte_in_an_archive_member_and_truncation_are_caught() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    for format in ["archive", "docker-archive", "oci-archive"] {
        let out = format!("{format}.tar");
        build(d, &out, format);
        let bytes = std::fs::read(d.join(&out)).unwrap();
        for (name, off, size) in members(&bytes) {
            if size == 0
                || !(name.starts_with("blobs/sha256/")
                    || name.ends_with(".tar")
                    || name.ends_with(".json") && name != "manifest.json" && name != "index.json")
            {
                continue;
            }
            let copy = d.join("copy.tar");
            let mut b = bytes.clone();
            b[off + size / 2] ^= 0x01;
            std::fs::write(&copy, &b).unwrap();
            let err = verify_fails(d, "copy.tar");
            let hex = name
                .trim_start_matches("blobs/sha256/")
                .trim_end_matches(".tar")
                .trim_end_matches(".json");
            assert!(err.contains(hex), "{format} {name}: {err}");
        }
        for cut in [bytes.len() / 2, bytes.len() - 3000, 700] {
            std::fs::write(d.join("cut.tar"), &bytes[..cut]).unwrap();
            let err = verify_fails(d, "cut.tar");
            assert!(
                err.contains("truncated")
                    || err.contains("missing")
                    || err.contains("no member")
                    || err.contains("neither"),
                "{format} cut at {cut}: {err}"
            );
        }
    }
}

#[test]
fn a_manifest_pointing_at_a_missing_blob_is_named() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    build(d, "layout", "oci");
    let i = json(&ok(vibesys(d)
        .args(["image", "inspect", "--json", "layout"])
        .output()
        .unwrap()));
    let layer = i["layers"][0]["digest"].as_str().unwrap().to_owned();
    std::fs::remove_file(
        d.join("layout/blobs/sha256")
            .join(layer.trim_start_matches("sha256:")),
    )
    .unwrap();
    let err = fails(
        vibesys(d)
            .args(["image", "inspect", "layout"])
            .output()
            .unwrap(),
    );
    assert!(err.contains(&layer) && err.contains("missing"), "{err}");
}

/// A ustar member.
fn member(out: &mut Vec<u8>, name: &str, typeflag: u8, link: &str, data: &[u8]) {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    h[124..136].copy_from_slice(format!("{:011o}\0", data.len()).as_bytes());
    h[136..148].copy_from_slice(b"00000000001\0");
    h[148..156].copy_from_slice(b"        ");
    h[156] = typeflag;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

fn blob(dir: &Path, bytes: &[u8]) -> Digest {
    let d = Digest::of(bytes);
    std::fs::write(dir.join("blobs/sha256").join(d.hex()), bytes).unwrap();
    d
}

/// An OCI layout whose one layer is `layer`, with correct digests.
fn hostile_layout(dir: &Path, layer: &[u8]) {
    std::fs::create_dir_all(dir.join("blobs/sha256")).unwrap();
    let l = blob(dir, layer);
    let config = format!(
        r#"{{"architecture":"amd64","os":"linux","config":{{}},"rootfs":{{"type":"layers","diff_ids":["{l}"]}}}}"#
    );
    let c = blob(dir, config.as_bytes());
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{c}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{l}","size":{}}}]}}"#,
        config.len(),
        layer.len()
    );
    let m = blob(dir, manifest.as_bytes());
    std::fs::write(
        dir.join("index.json"),
        format!(r#"{{"schemaVersion":2,"manifests":[{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{m}","size":{}}}]}}"#, manifest.len()),
    )
    .unwrap();
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}

#[test]
fn layer_entries_that_escape_are_named() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let cases: [(&str, u8, &str, &str); 6] = [
        ("../evil", b'0', "", "../evil"),
        ("ok/../../evil", b'0', "", "ok/../../evil"),
        ("/etc/evil", b'0', "", "/etc/evil"),
        ("a/link", b'2', "../../etc/shadow", "a/link"),
        ("hard", b'1', "/etc/passwd", "hard"),
        ("hard2", b'1', "../etc/passwd", "hard2"),
    ];
    for (i, (name, ty, link, needle)) in cases.iter().enumerate() {
        let mut layer = Vec::new();
        member(&mut layer, "ok/", b'5', "", b"");
        member(
            &mut layer,
            name,
            *ty,
            link,
            if *ty == b'0' { b"x" } else { b"" },
        );
        layer.extend_from_slice(&[0u8; 1024]);
        let dir = d.join(format!("l{i}"));
        hostile_layout(&dir, &layer);
        let err = verify_fails(d, dir.to_str().unwrap());
        assert!(
            err.contains(needle) && err.contains("unsafe entry"),
            "{name}: {err}"
        );
    }
    // A harmless layer made the same way passes, so the checks above are
    // about the entries, not the hand-made layout.
    let mut layer = Vec::new();
    member(&mut layer, "ok/", b'5', "", b"");
    member(&mut layer, "ok/l", b'2', "/etc/passwd", b"");
    member(&mut layer, "ok/f", b'0', "", b"x");
    member(&mut layer, "ok/h", b'1', "ok/f", b"");
    layer.extend_from_slice(&[0u8; 1024]);
    hostile_layout(&d.join("fine"), &layer);
    ok(vibesys(d)
        .args(["image", "inspect", "--verify", "fine"])
        .output()
        .unwrap());
}

#[test]
fn an_image_that_differs_from_its_pin_is_refused_naming_both_digests() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    build(d, "img.tar", "archive");
    ok(vibesys(d)
        .args(["image", "pin", "img.tar", "--lock", "images.lock"])
        .output()
        .unwrap());
    let pinned = json(&ok(vibesys(d)
        .args(["image", "inspect", "--json", "img.tar"])
        .output()
        .unwrap()));
    ok(vibesys(d)
        .args(["image", "verify", "--lock", "images.lock"])
        .output()
        .unwrap());
    // Same name, different content.
    let spec = write(
        d,
        "tiny.toml",
        &TINY_SPEC.replace("hello from a vibesys image", "something else"),
    );
    ok(vibesys(d)
        .args([
            "image",
            "build",
            spec.to_str().unwrap(),
            "--out",
            "img.tar",
            "--no-cache",
            "--path",
            busybox(),
        ])
        .output()
        .unwrap());
    let found = json(&ok(vibesys(d)
        .args(["image", "inspect", "--json", "img.tar"])
        .output()
        .unwrap()));
    let err = fails(
        vibesys(d)
            .args(["image", "verify", "--lock", "images.lock"])
            .output()
            .unwrap(),
    );
    let (p, f) = (
        pinned["config_digest"].as_str().unwrap(),
        found["config_digest"].as_str().unwrap(),
    );
    assert_ne!(p, f);
    assert!(err.contains(p) && err.contains(f), "{err}");
    // A corrupt lock is an error, not a pass.
    write(
        d,
        "bad.lock",
        "version = 1\n[images.x]\nconfig_digest = \"sha256:nothex\"\n",
    );
    let err = fails(
        vibesys(d)
            .args(["image", "verify", "--lock", "bad.lock", "img.tar"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("bad.lock"), "{err}");
}

/// A layout directory with a Docker manifest.json naming a file outside it.
#[test]
fn manifest_json_paths_cannot_leave_the_image() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    build(d, "layout", "oci");
    write(
        &d.join("layout"),
        "manifest.json",
        r#"[{"Config":"../../../etc/passwd","RepoTags":["x:1"],"Layers":[]}]"#,
    );
    let err = fails(
        vibesys(d)
            .args(["image", "inspect", "layout"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("../../../etc/passwd") && err.contains("escapes"),
        "{err}"
    );
}
