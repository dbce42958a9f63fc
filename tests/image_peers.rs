//! Real peers read what `vibesys image build` writes: skopeo (oci:,
//! oci-archive:, docker-archive:), umoci (unpacked rootfs: files, modes,
//! symlinks, hardlinks), Docker 20.10 (`docker load`, image ID and layers
//! equal to the lock, `docker run`) and unsquashfs.

mod image_support;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use image_support::*;

fn build(d: &Path, spec: &Path, out: &str, extra: &[&str]) -> serde_json::Value {
    let mut c = vibesys(d);
    c.args([
        "image",
        "build",
        spec.to_str().unwrap(),
        "--out",
        out,
        "--json",
        "--no-cache",
    ])
    .args(extra);
    json(&ok(c.output().unwrap()))
}

fn skopeo(reference: &str) -> serde_json::Value {
    json(&ok(Command::new("skopeo")
        .args(["inspect", "--raw", reference])
        .output()
        .unwrap()))
}

#[test]
fn skopeo_reads_every_format() {
    require("skopeo", "skopeo");
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let spec = write(d, "tiny.toml", TINY_SPEC);
    let bb = busybox();
    for compression in ["none", "gzip", "zstd"] {
        let r = build(
            d,
            &spec,
            "layout",
            &[
                "--format",
                "oci",
                "--path",
                bb,
                "--compression",
                compression,
            ],
        );
        let layers: Vec<_> = r["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["digest"].clone())
            .collect();
        for reference in ["oci:layout", "oci:layout:t1"] {
            let m = skopeo(&reference.replace("layout", d.join("layout").to_str().unwrap()));
            let got: Vec<_> = m["layers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["digest"].clone())
                .collect();
            assert_eq!(got, layers, "{reference} {compression}");
            assert_eq!(m["config"]["digest"], r["config_digest"]);
        }
        ok(Command::new("skopeo")
            .args(["inspect", "oci:layout"])
            .current_dir(d)
            .output()
            .unwrap());
        // And we read what skopeo writes (its docker-archive links
        // `<id>/layer.tar` to the layer blob; docker archives have no zstd).
        if compression == "zstd" {
            continue;
        }
        let copy = d.join(format!("skopeo-{compression}.tar"));
        let _ = std::fs::remove_file(&copy);
        ok(Command::new("skopeo")
            .args(["copy", &format!("oci:{}:t1", d.join("layout").display())])
            .arg(format!("docker-archive:{}:vibesys-tiny:t1", copy.display()))
            .output()
            .unwrap());
        let i = json(&ok(vibesys(d)
            .args(["image", "inspect", "--verify", "--json"])
            .arg(&copy)
            .output()
            .unwrap()));
        assert_eq!(i["config_digest"], r["config_digest"], "{compression}");
    }
    for format in ["archive", "oci-archive", "docker-archive"] {
        let out = format!("{format}.tar");
        let r = build(d, &spec, &out, &["--format", format, "--path", bb]);
        let mut refs = vec![];
        if format != "docker-archive" {
            refs.push(format!("oci-archive:{}", d.join(&out).display()));
        }
        if format != "oci-archive" {
            refs.push(format!("docker-archive:{}", d.join(&out).display()));
        }
        for reference in refs {
            let i = json(&ok(Command::new("skopeo")
                .args(["inspect", &reference])
                .output()
                .unwrap()));
            let diff: Vec<_> = r["layers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["diff_id"].clone())
                .collect();
            let got: Vec<_> = i["Layers"].as_array().unwrap().clone();
            assert_eq!(got, diff, "{reference}");
            let cfg = json(&ok(Command::new("skopeo")
                .args(["inspect", "--config", "--raw", &reference])
                .output()
                .unwrap()));
            assert_eq!(
                cfg["config"]["Entrypoint"][0], "/bin/busybox",
                "{reference}"
            );
        }
    }
}

#[test]
fn umoci_unpacks_the_expected_rootfs() {
    require("umoci", "umoci");
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    sh(
        d,
        "mkdir -p root/usr/bin root/data/sticky root/opt
           printf '#!/bin/sh\\n' > root/usr/bin/run && chmod 700 root/usr/bin/run
           printf 'secret' > root/data/file && chmod 600 root/data/file
           cp /bin/busybox root/usr/bin/suid && chmod 4755 root/usr/bin/suid
           ln root/data/file root/data/hard
           ln -s ../data/file root/opt/rel
           ln -s /data/file root/opt/abs
           chmod 1777 root/data/sticky",
    );
    let spec = write(
        d,
        "s.toml",
        "name = \"umoci-test\"\ntag = \"u1\"\n[[files]]\npath = \"/etc/hostname\"\ncontent = \"vibesys\\n\"\n",
    );
    build(d, &spec, "layout", &["--format", "oci", "--root", "root"]);
    ok(Command::new("umoci")
        .args(["unpack", "--image", "layout:u1", "bundle"])
        .current_dir(d)
        .output()
        .unwrap());
    let r = d.join("bundle/rootfs");
    let mode = |p: &str| {
        std::fs::symlink_metadata(r.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("usr/bin/run"), 0o755);
    assert_eq!(mode("data/file"), 0o644);
    assert_eq!(
        mode("usr/bin/suid"),
        0o755,
        "setuid must be dropped by default"
    );
    assert_eq!(mode("data/sticky"), 0o1777);
    assert_file_is(r.join("data/file"), "secret");
    assert_file_is(r.join("etc/hostname"), "vibesys\n");
    assert_eq!(
        std::fs::read_link(r.join("opt/rel"))
            .unwrap()
            .to_str()
            .unwrap(),
        "../data/file"
    );
    assert_eq!(
        std::fs::read_link(r.join("opt/abs"))
            .unwrap()
            .to_str()
            .unwrap(),
        "/data/file"
    );
    let (a, b) = (
        std::fs::metadata(r.join("data/file")).unwrap(),
        std::fs::metadata(r.join("data/hard")).unwrap(),
    );
    assert_eq!(a.ino(), b.ino(), "hardlink not preserved");
    assert_eq!(a.uid(), 0);
    assert_eq!(a.mtime(), 1);
    // allow_setuid keeps the bit.
    let spec = write(
        d,
        "s2.toml",
        "name = \"umoci-test\"\ntag = \"u2\"\nallow_setuid = true\n",
    );
    build(d, &spec, "layout2", &["--format", "oci", "--root", "root"]);
    ok(Command::new("umoci")
        .args(["unpack", "--image", "layout2:u2", "bundle2"])
        .current_dir(d)
        .output()
        .unwrap());
    let m = std::fs::metadata(d.join("bundle2/rootfs/usr/bin/suid"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(m & 0o7777, 0o4755);
}

struct Cleanup(Vec<String>);
impl Drop for Cleanup {
    fn drop(&mut self) {
        for t in &self.0 {
            let _ = Command::new("docker").args(["rmi", "-f", t]).output();
        }
    }
}

#[test]
fn docker_loads_pins_and_runs() {
    require_docker();
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let name = unique("vibesys-test");
    let spec_text = TINY_SPEC.replace("name = \"vibesys-tiny\"", &format!("name = \"{name}\""));
    let spec = write(d, "tiny.toml", &spec_text);
    let bb = busybox();
    let mut cleanup = Cleanup(vec![]);
    let lock = d.join("images.lock");
    for (i, (format, compression)) in [
        ("archive", "none"),
        ("docker-archive", "gzip"),
        ("archive", "zstd"),
    ]
    .iter()
    .enumerate()
    {
        let out = format!("img-{i}.tar");
        let tag = format!("{name}:t1");
        cleanup.0.push(tag.clone());
        build(
            d,
            &spec,
            &out,
            &[
                "--format",
                format,
                "--compression",
                compression,
                "--path",
                bb,
            ],
        );
        if *compression == "zstd" {
            // Docker 20.10 may not read zstd layers; skopeo must, and our verify must.
            ok(vibesys(d)
                .args(["image", "inspect", "--verify", &out])
                .output()
                .unwrap());
            continue;
        }
        ok(vibesys(d)
            .args(["image", "pin", &out, "--lock", lock.to_str().unwrap()])
            .output()
            .unwrap());
        let load = ok(Command::new("docker")
            .args(["load", "-i"])
            .arg(d.join(&out))
            .output()
            .unwrap());
        assert!(load.contains(&tag), "{load}");
        let inspect = json(&ok(Command::new("docker")
            .args(["image", "inspect", &tag])
            .output()
            .unwrap()));
        let id = inspect[0]["Id"].as_str().unwrap().to_owned();
        let layers: Vec<String> = inspect[0]["RootFS"]["Layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l.as_str().unwrap().to_owned())
            .collect();
        let locked: toml::Value = toml::from_str(&std::fs::read_to_string(&lock).unwrap()).unwrap();
        let entry = &locked["images"][&name];
        assert_eq!(
            entry["config_digest"].as_str().unwrap(),
            id,
            "docker image ID is the pinned config digest"
        );
        let pinned: Vec<&str> = entry["diff_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(layers, pinned);
        let run = ok(Command::new("docker")
            .args(["run", "--rm", "--network", "none", &id])
            .output()
            .unwrap());
        assert_eq!(run, "hello from a vibesys image\n");
        let run = ok(Command::new("docker")
            .args([
                "run",
                "--rm",
                "--network",
                "none",
                "--user",
                "1000",
                "--entrypoint",
                "/bin/sh",
                &id,
                "-c",
                "id -un; stat -c %a /tmp; touch /tmp/x",
            ])
            .output()
            .unwrap());
        assert_eq!(run, "agent\n1777\n");
        // `docker save` output reads back with the same image ID.
        let saved = d.join(format!("saved-{i}.tar"));
        ok(Command::new("docker")
            .args(["save", "-o"])
            .arg(&saved)
            .arg(&tag)
            .output()
            .unwrap());
        let s = json(&ok(vibesys(d)
            .args(["image", "inspect", "--verify", "--json"])
            .arg(&saved)
            .output()
            .unwrap()));
        assert_eq!(s["config_digest"].as_str().unwrap(), id);
        ok(Command::new("docker")
            .args(["rmi", "-f", &tag])
            .output()
            .unwrap());
    }
    // Everything pinned verifies; both formats are recorded.
    let v = ok(vibesys(d)
        .args(["image", "verify", "--lock", lock.to_str().unwrap()])
        .output()
        .unwrap());
    assert!(v.contains("archive") && v.contains("docker-archive"), "{v}");
}

#[test]
fn squashfs_holds_the_flattened_rootfs() {
    require("mksquashfs", "squashfs-tools");
    require("unsquashfs", "squashfs-tools");
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let spec = write(d, "tiny.toml", TINY_SPEC);
    let r = build(
        d,
        &spec,
        "a.sqfs",
        &["--format", "squashfs", "--path", busybox()],
    );
    build(
        d,
        &spec,
        "b.sqfs",
        &["--format", "squashfs", "--path", busybox()],
    );
    assert_eq!(
        std::fs::read(d.join("a.sqfs")).unwrap(),
        std::fs::read(d.join("b.sqfs")).unwrap()
    );
    assert!(r["archive_digest"].as_str().unwrap().starts_with("sha256:"));
    let list = ok(Command::new("unsquashfs")
        .args(["-lln", "-d", "/"])
        .arg(d.join("a.sqfs"))
        .output()
        .unwrap());
    assert!(
        list.contains("-rwxr-xr-x 0/0") && list.contains("/bin/busybox"),
        "{list}"
    );
    assert!(list.contains("/bin/sh -> busybox"), "{list}");
    assert!(
        list.contains("drwxrwxrwt 0/0") && list.contains("/tmp"),
        "{list}"
    );
}
