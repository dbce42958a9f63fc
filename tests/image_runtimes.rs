//! The editor image, built by vibesys, in the real HPC container runtimes
//! from Debian's packages (`scripts/install-deps.sh` installs them):
//!
//! - Podman, with a private store (nothing shared is touched): `podman
//!   load` of the hybrid archive and of the oci-archive reports the pinned
//!   config digest as the image ID, the pinned manifest digest as its digest
//!   and the pinned diff_ids as its layers, and the rootfs Podman unpacks
//!   holds the runtime mount points. `podman run` is not run: on this kind
//!   of machine runc cannot set the container's rlimits (`error setting
//!   rlimit type 7: operation not permitted`), see docs/install.md.
//! - Charliecloud: `ch-convert` turns the squashfs (`-i squash`) and the
//!   archive (loaded by Podman, `-i podman`) into image directories and
//!   `ch-run` runs a command in each, as root and as an unprivileged user;
//!   as root `ch-run` also mounts the squashfs itself (SquashFUSE). Before
//!   images carried their mount points, every one of these failed with
//!   `can't bind: destination not found`.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{As, command_as, ok, require_tool, test_user, users};

const INSTALL: &str = "install Debian's podman and charliecloud (scripts/install-deps.sh)";

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// A work directory every test user can read, with the editor image built.
struct Work {
    dir: PathBuf,
    _t: tempfile::TempDir,
}

impl Work {
    fn new() -> Self {
        let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("runtimes");
        std::fs::create_dir_all(&base).unwrap();
        let t = tempfile::Builder::new()
            .prefix("rt")
            .tempdir_in(&base)
            .unwrap();
        for p in [base.as_path(), t.path()] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self {
            dir: t.path().to_owned(),
            _t: t,
        }
    }

    /// `vibesys image build images/editor.toml --format FORMAT`; the report.
    fn build(&self, out: &str, format: &str) -> serde_json::Value {
        let spec = common::repo_root().join("images/editor.toml");
        let r = json(&ok(Command::new(common::vibesys())
            .current_dir(&self.dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .arg("image")
            .arg("build")
            .arg(&spec)
            .args(["--out", out, "--format", format, "--no-cache", "--json"])
            .output()
            .unwrap()));
        let p = self.dir.join(out);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        r
    }

    /// Podman with its own store below the work directory.
    fn podman(&self, store: &str) -> Command {
        let root = self.dir.join(store);
        std::fs::create_dir_all(&root).unwrap();
        let conf = root.join("storage.conf");
        if !conf.exists() {
            std::fs::write(
                &conf,
                format!(
                    "[storage]\ndriver = \"vfs\"\ngraphroot = \"{0}/graph\"\nrunroot = \"{0}/run\"\n",
                    root.display()
                ),
            )
            .unwrap();
        }
        let mut c = Command::new("podman");
        c.current_dir(&self.dir)
            .env("CONTAINERS_STORAGE_CONF", &conf);
        c
    }
}

/// The pinned entry of `name` in the lock at `lock`.
fn pinned(lock: &Path, name: &str) -> toml::Value {
    let locked: toml::Value = toml::from_str(&std::fs::read_to_string(lock).unwrap()).unwrap();
    locked["images"][name].clone()
}

/// Checks the mount points of an unpacked rootfs.
fn assert_mount_points(root: &Path) {
    for d in ["dev", "proc", "sys", "tmp", "mnt", "home", "run"] {
        let m = std::fs::symlink_metadata(root.join(d))
            .unwrap_or_else(|e| panic!("{}: /{d}: {e}", root.display()));
        assert!(m.is_dir(), "/{d} is not a directory");
    }
    let tmp = std::fs::metadata(root.join("tmp")).unwrap();
    assert_eq!(tmp.mode() & 0o7777, 0o1777);
    for f in ["etc/hosts", "etc/resolv.conf"] {
        let m = std::fs::symlink_metadata(root.join(f)).unwrap();
        assert!(m.is_file() && m.len() == 0, "/{f} is not an empty file");
    }
}

#[test]
fn podman_loads_the_archive_and_the_oci_archive_with_the_pinned_ids() {
    require_tool("podman", INSTALL);
    let w = Work::new();
    let mut diff_ids = Vec::new();
    for (out, format) in [("editor.tar", "archive"), ("editor-oci.tar", "oci-archive")] {
        let r = w.build(out, format);
        diff_ids = r["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["diff_id"].as_str().unwrap().to_owned())
            .collect();
    }
    let lock = w.dir.join("images.lock");
    ok(Command::new(common::vibesys())
        .current_dir(&w.dir)
        .args(["image", "pin", "editor.tar", "editor-oci.tar", "--lock"])
        .arg(&lock)
        .output()
        .unwrap());
    let pin = pinned(&lock, "vibesys-editor");
    let pinned_diff_ids: Vec<&str> = pin["diff_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(pinned_diff_ids, diff_ids);
    for (i, out) in ["editor.tar", "editor-oci.tar"].into_iter().enumerate() {
        let store = format!("podman-{i}");
        let load = ok(w.podman(&store).args(["load", "-i", out]).output().unwrap());
        assert!(
            load.contains("Loaded image: localhost/vibesys-editor:latest"),
            "{out}: {load}"
        );
        let inspect = json(&ok(w
            .podman(&store)
            .args(["image", "inspect", "localhost/vibesys-editor:latest"])
            .output()
            .unwrap()));
        let img = &inspect[0];
        assert_eq!(
            format!("sha256:{}", img["Id"].as_str().unwrap()),
            pin["config_digest"].as_str().unwrap(),
            "{out}: podman's image ID is the pinned config digest"
        );
        assert_eq!(
            img["Digest"].as_str().unwrap(),
            pin["manifest_digest"].as_str().unwrap(),
            "{out}: podman's digest is the pinned manifest digest"
        );
        let layers: Vec<&str> = img["RootFS"]["Layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(
            layers, pinned_diff_ids,
            "{out}: layers are the pinned diff_ids"
        );
        let mount = ok(w
            .podman(&store)
            .args(["image", "mount", "localhost/vibesys-editor:latest"])
            .output()
            .unwrap());
        assert_mount_points(Path::new(mount.trim()));
        ok(w.podman(&store)
            .args(["image", "unmount", "localhost/vibesys-editor:latest"])
            .output()
            .unwrap());
    }
}

/// `ch-run [OPTS] IMAGE -- sh -c ...` as `who`: the uid inside, the kernel
/// file systems mounted, the host's /etc/hosts bound onto the image's empty
/// one.
fn ch_run(who: As, dir: &Path, opts: &[&str], image: &Path) {
    let script = "id -u; test -r /proc/self/status && test -d /sys/kernel && test -c /dev/null \
                  && test -s /etc/hosts && echo mounted";
    let user = who.name();
    let mut args = opts.to_vec();
    args.extend([image.to_str().unwrap(), "--", "/bin/sh", "-c", script]);
    let out = command_as(who, dir, Path::new("/usr/bin/ch-run"), &args)
        .env("USER", user)
        .output()
        .unwrap();
    let uid = who.ids().map_or(0, |(uid, _)| uid);
    assert_eq!(
        ok(out),
        format!("{uid}\nmounted\n"),
        "ch-run {} as {who:?}",
        image.display()
    );
}

/// `ch-convert -i FROM IN OUT` as `who`.
fn ch_convert(who: As, dir: &Path, from: &str, input: &str, out: &Path, env: &[(&str, &Path)]) {
    let mut c = command_as(
        who,
        dir,
        Path::new("/usr/bin/ch-convert"),
        &["-i", from, input, out.to_str().unwrap()],
    );
    for (k, v) in env {
        c.env(k, v);
    }
    ok(c.output().unwrap());
}

#[test]
fn charliecloud_converts_and_runs_the_squashfs_and_the_archive() {
    require_tool("ch-run", INSTALL);
    require_tool("ch-convert", INSTALL);
    require_tool("podman", INSTALL);
    require_tool("unsquashfs", "install squashfs-tools");
    let w = Work::new();
    w.build("editor.sqsh", "squashfs");
    w.build("editor.tar", "archive");
    // The archive goes in through Podman (ch-convert reads no OCI archive
    // itself): loaded into a private store, exported by ch-convert.
    ok(w.podman("podman")
        .args(["load", "-i", "editor.tar"])
        .output()
        .unwrap());
    let conf = w.dir.join("podman/storage.conf");
    let from_archive = w.dir.join("from-archive");
    ch_convert(
        As::Root,
        &w.dir,
        "podman",
        "localhost/vibesys-editor:latest",
        &from_archive,
        &[("CONTAINERS_STORAGE_CONF", &conf)],
    );
    assert_mount_points(&from_archive);
    // As root, ch-run mounts the squashfs itself (SquashFUSE), at a mount
    // point in the work directory (its default is below /var/tmp).
    let mnt = w.dir.join("sqmnt");
    std::fs::create_dir(&mnt).unwrap();
    ch_run(
        As::Root,
        &w.dir,
        &["--mount", mnt.to_str().unwrap()],
        &w.dir.join("editor.sqsh"),
    );
    for who in users() {
        // Each user converts the squashfs into a directory it owns.
        let own = w.dir.join(format!("{who:?}"));
        std::fs::create_dir_all(&own).unwrap();
        if who == As::User {
            let (uid, gid) = test_user();
            std::os::unix::fs::chown(&own, Some(uid), Some(gid)).unwrap();
        }
        let from_squash = own.join("from-squash");
        ch_convert(who, &w.dir, "squash", "editor.sqsh", &from_squash, &[]);
        assert_mount_points(&from_squash);
        ch_run(who, &w.dir, &[], &from_squash);
        ch_run(who, &w.dir, &[], &from_archive);
    }
}
