//! What an image holds beyond its content, and what a root file system
//! from the usual tools may hold: the runtime mount points (added where the
//! content lacks them, deterministic, `mount_points = false` opts out);
//! device nodes, fifos and sockets under the root's `/dev` (skipped with one
//! log line) and anywhere else (refused, naming the path).

mod image_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use image_support::*;

/// `vibesys image build SPEC --format oci --no-cache --json ARGS`.
fn build(d: &Path, spec: &Path, out: &str, args: &[&str]) -> serde_json::Value {
    json(&ok(vibesys(d)
        .args(["image", "build", spec.to_str().unwrap(), "--out", out])
        .args(["--format", "oci", "--no-cache", "--json"])
        .args(args)
        .output()
        .unwrap()))
}

/// Every entry of every layer of the OCI layout `out`: path -> `ls -l`
/// style type and mode plus size, from GNU tar's listing.
fn entries(d: &Path, r: &serde_json::Value) -> BTreeMap<String, String> {
    let out = d.join(r["out"].as_str().unwrap());
    let mut all = BTreeMap::new();
    for l in r["layers"].as_array().unwrap() {
        let hex = &l["digest"].as_str().unwrap()["sha256:".len()..];
        let list = ok(Command::new("tar")
            .args(["--numeric-owner", "-tvf"])
            .arg(out.join("blobs/sha256").join(hex))
            .output()
            .unwrap());
        for line in list.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let path = f[5].trim_end_matches('/').to_owned();
            all.insert(path, format!("{} {}", f[0], f[2]));
        }
    }
    all
}

fn groups_of_top_layer(r: &serde_json::Value) -> Vec<String> {
    let layers = r["layers"].as_array().unwrap();
    layers[layers.len() - 1]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap().to_owned())
        .collect()
}

const MOUNT_POINTS: [(&str, &str); 11] = [
    ("dev", "drwxr-xr-x 0"),
    ("etc/group", "-rw-r--r-- 0"),
    ("etc/hosts", "-rw-r--r-- 0"),
    ("etc/passwd", "-rw-r--r-- 0"),
    ("etc/resolv.conf", "-rw-r--r-- 0"),
    ("home", "drwxr-xr-x 0"),
    ("mnt", "drwxr-xr-x 0"),
    ("proc", "drwxr-xr-x 0"),
    ("run", "drwxr-xr-x 0"),
    ("sys", "drwxr-xr-x 0"),
    ("tmp", "drwxrwxrwt 0"),
];

#[test]
fn every_image_carries_the_mount_points_unless_its_spec_opts_out() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    sh(d, "mkdir -p root/bin && printf x > root/bin/tool");
    let spec = write(d, "s.toml", "name = \"bare\"\n");
    let r = build(d, &spec, "a", &["--root", "root"]);
    assert_eq!(groups_of_top_layer(&r), ["runtime mount points"]);
    let all = entries(d, &r);
    for (p, what) in MOUNT_POINTS {
        assert_eq!(all.get(p).map(String::as_str), Some(what), "/{p}: {all:?}");
    }
    ok(vibesys(d)
        .args(["image", "inspect", "--verify", "a"])
        .output()
        .unwrap());
    // Deterministic: another build (another directory, a cache) gives the
    // same digests.
    let again = json(&ok(vibesys(d)
        .args(["image", "build", spec.to_str().unwrap(), "--out", "b"])
        .args(["--format", "oci", "--json", "--root", "root"])
        .arg("--cache")
        .arg(d.join("cache"))
        .output()
        .unwrap()));
    assert_eq!(again["manifest_digest"], r["manifest_digest"]);

    // What the content or the spec's files provide is left as it is; nothing
    // is added below a parent that is not a directory.
    sh(
        d,
        "mkdir -p full/etc full/var/tmp full/proc && printf '127.0.0.1 h\\n' > full/etc/hosts \
         && ln -s var/tmp full/tmp",
    );
    let spec = write(
        d,
        "files.toml",
        "name = \"full\"\n[[files]]\npath = \"/run\"\ntype = \"dir\"\nmode = \"0700\"\n",
    );
    let r = build(d, &spec, "c", &["--root", "full"]);
    assert_eq!(
        groups_of_top_layer(&r),
        ["extra files", "runtime mount points"]
    );
    let all = entries(d, &r);
    assert_eq!(all["tmp"].split(' ').next().unwrap(), "lrwxrwxrwx");
    assert_eq!(all["etc/hosts"], "-rw-r--r-- 12");
    assert_eq!(all["run"], "drwx------ 0");
    assert_eq!(all["etc/resolv.conf"], "-rw-r--r-- 0");
    sh(d, "rm -rf full/etc && ln -s /nix/store/x-etc full/etc");
    let r = build(d, &spec, "e", &["--root", "full"]);
    let all = entries(d, &r);
    assert!(!all.keys().any(|p| p.starts_with("etc/")), "{all:?}");

    // Opting out: the image is exactly its content.
    let spec = write(d, "min.toml", "name = \"min\"\nmount_points = false\n");
    let r = build(d, &spec, "m", &["--root", "root"]);
    let all = entries(d, &r);
    assert_eq!(all.keys().collect::<Vec<_>>(), ["bin", "bin/tool"]);
}

/// Fails unless the tests run as root (mknod).
fn require_root() {
    let uid = ok(Command::new("id").arg("-u").output().unwrap());
    assert_eq!(
        uid.trim(),
        "0",
        "this test makes device nodes with mknod: run it as root (CI does)"
    );
}

/// A root file system as debootstrap leaves it: device nodes, a fifo and a
/// socket in /dev, with symlinks and directories beside them.
fn rootfs(d: &Path, name: &str) -> std::os::unix::net::UnixListener {
    sh(
        d,
        &format!(
            "mkdir -p {name}/dev/pts {name}/dev/shm {name}/bin {name}/etc \
             && cp /bin/busybox {name}/bin/ && ln -s busybox {name}/bin/sh \
             && mknod {name}/dev/null c 1 3 && mknod {name}/dev/console c 5 1 \
             && mknod {name}/dev/loop0 b 7 0 && mknod {name}/dev/pts/ptmx c 5 2 \
             && mkfifo {name}/dev/initctl && ln -s /proc/self/fd {name}/dev/fd \
             && ln -s pts/ptmx {name}/dev/ptmx"
        ),
    );
    std::os::unix::net::UnixListener::bind(d.join(name).join("dev/log")).unwrap()
}

#[test]
fn a_debootstrap_like_root_builds_and_special_files_outside_dev_are_refused() {
    require_root();
    busybox();
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let _sock = rootfs(d, "rootfs");
    let spec = write(d, "s.toml", "name = \"deb\"\n");
    let out = vibesys(d)
        .args(["image", "build", spec.to_str().unwrap(), "--out", "img.tar"])
        .args(["--no-cache", "--json", "--root", "rootfs"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let r = json(&ok(out));
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("skipped")).collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(
        lines[0].contains("skipped 6 device nodes, fifos and sockets under")
            && lines[0].contains("rootfs/dev"),
        "{stderr}"
    );
    ok(vibesys(d)
        .args(["image", "inspect", "--verify", "img.tar"])
        .output()
        .unwrap());
    let hex = &r["layers"][0]["digest"].as_str().unwrap()["sha256:".len()..];
    let list = sh(
        d,
        &format!("tar -xOf img.tar blobs/sha256/{hex} | tar --numeric-owner -tvf -"),
    );
    for kept in [
        "dev/pts/",
        "dev/shm/",
        "dev/fd -> /proc/self/fd",
        "dev/ptmx -> pts/ptmx",
    ] {
        assert!(list.contains(kept), "{kept}: {list}");
    }
    for gone in [
        "dev/null",
        "dev/console",
        "dev/loop0",
        "pts/ptmx ",
        "initctl",
        "dev/log",
    ] {
        assert!(!list.contains(gone), "{gone}: {list}");
    }
    // The squashfs rootfs too.
    ok(vibesys(d)
        .args([
            "image",
            "build",
            spec.to_str().unwrap(),
            "--out",
            "img.sqsh",
        ])
        .args(["--no-cache", "--format", "squashfs", "--root", "rootfs"])
        .output()
        .unwrap());

    // Anywhere else they are refused, naming the path and the kind.
    // `image build` of the root `r`, which must fail; its stderr.
    let build_root_r = || {
        fails(
            vibesys(d)
                .args(["image", "build", spec.to_str().unwrap(), "--out", "x.tar"])
                .args(["--no-cache", "--root", "r"])
                .output()
                .unwrap(),
        )
    };
    for (setup, path, kind) in [
        ("mknod r/etc/null c 1 3", "r/etc/null", "device"),
        ("mknod r/devices/sda b 8 0", "r/devices/sda", "device"),
        ("mkfifo r/run/pipe", "r/run/pipe", "fifo"),
        ("mkfifo r/pipe", "r/pipe", "fifo"),
    ] {
        sh(
            d,
            &format!("rm -rf r && mkdir -p r/etc r/devices r/run r/dev && {setup}"),
        );
        let err = build_root_r();
        assert!(err.contains(path) && err.contains(kind), "{setup}: {err}");
        assert!(!d.join("x.tar").exists(), "no partial output");
    }
    sh(d, "rm -rf r && mkdir -p r/run");
    let _s = std::os::unix::net::UnixListener::bind(d.join("r/run/sock")).unwrap();
    let err = build_root_r();
    assert!(
        err.contains("r/run/sock") && err.contains("socket"),
        "{err}"
    );
    // Host paths are not a root: a device node given by --path is refused.
    let err = fails(
        vibesys(d)
            .args(["image", "build", spec.to_str().unwrap(), "--out", "x.tar"])
            .args(["--no-cache", "--path"])
            .arg(d.join("rootfs/dev"))
            .output()
            .unwrap(),
    );
    assert!(err.contains("dev/") && err.contains("device"), "{err}");
}
