//! Helpers of the `docker_*` tests: each test builds its own small image
//! with vs-image (busybox from Debian's busybox-static, a unique label so
//! its digests are its own), pins it in a private lock, loads it with
//! `vibesys image load`, and removes it (and any container of it) when
//! done. Nothing is pulled: the Engine has no registry here.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../common/mod.rs"]
pub mod common;
// Each test binary uses a different subset.
#[allow(unused_imports)]
pub use common::{
    assert_file_is, fails, git, ok, repo_root, require_tool, static_vibesys, test_user, tests_dir,
    unique, vibesys_bin, vibesys_in as vibesys,
};

/// Fails the test unless the Engine answers and the busybox the test
/// images are built from is there.
pub fn require_docker() {
    common::require_docker();
    assert!(
        Path::new("/bin/busybox").is_file(),
        "/bin/busybox missing: install busybox-static"
    );
}

/// A test image built, pinned and loaded; removed on drop.
pub struct TestImage {
    pub dir: tempfile::TempDir,
    pub name: String,
    pub archive: PathBuf,
    pub lock: PathBuf,
    pub config_digest: String,
}

impl TestImage {
    /// Builds `images/editor.toml` under a unique name and label, pins it
    /// in a private lock and loads it into the Engine.
    pub fn new() -> Self {
        Self::build(true)
    }

    /// Like [`TestImage::new`], without loading it.
    pub fn build(load: bool) -> Self {
        Self::build_with(load, |spec| spec)
    }

    /// Like [`TestImage::build`], with `images/editor.toml` rewritten by
    /// `edit` first (a broken image, say).
    pub fn build_with(load: bool, edit: impl FnOnce(String) -> String) -> Self {
        require_docker();
        let dir = tempfile::tempdir().unwrap();
        // The lock is read by whoever runs vibesys (the Docker operator
        // of `common::As::DockerUser` too); nothing in it is secret.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let name = unique("vibesys-test");
        let spec_src = repo_root().join("images/editor.toml");
        let spec = std::fs::read_to_string(spec_src).unwrap();
        let spec = spec
            .replace("name = \"vibesys-editor\"", &format!("name = \"{name}\""))
            .replace(
                "[config.labels]\n",
                &format!("[config.labels]\n\"dev.vibesys.test\" = \"{name}\"\n"),
            );
        assert!(spec.contains(&name), "images/editor.toml changed shape");
        let spec = edit(spec);
        let spec_path = dir.path().join("spec.toml");
        std::fs::write(&spec_path, spec).unwrap();
        let archive = dir.path().join("image.tar");
        let cache = std::env::temp_dir().join("vibesys-docker-test-cache");
        ok(vibesys(dir.path())
            .args(["image", "build"])
            .arg(&spec_path)
            .arg("--out")
            .arg(&archive)
            .arg("--cache")
            .arg(&cache)
            .output()
            .unwrap());
        let lock = dir.path().join("images.lock");
        common::pin_image(dir.path(), &archive, &lock);
        let lock_text = std::fs::read_to_string(&lock).unwrap();
        let config_digest = lock_text
            .lines()
            .find_map(|l| l.strip_prefix("config_digest = \""))
            .unwrap()
            .trim_end_matches('"')
            .to_owned();
        let img = Self {
            dir,
            name,
            archive,
            lock,
            config_digest,
        };
        if load {
            ok(img.load_cmd().output().unwrap());
        }
        img
    }

    /// `vibesys image load ARCHIVE --lock LOCK --json`.
    pub fn load_cmd(&self) -> Command {
        let mut c = vibesys(self.dir.path());
        c.args(["image", "load"])
            .arg(&self.archive)
            .arg("--lock")
            .arg(&self.lock)
            .arg("--json");
        c
    }

    /// The pin for the library API.
    pub fn pin(&self) -> vs_docker::ImagePin {
        let lock = vs_image::Lock::load(&self.lock).unwrap();
        let img = lock.images.get(&self.name).unwrap();
        vs_docker::ImagePin::from_locked(&self.name, img)
    }

    /// Removes the image from the Engine (and containers started from it).
    pub fn remove(&self) {
        remove_containers_of(&self.name);
        let _ = Command::new("docker")
            .args(["rmi", "-f", &self.config_digest])
            .output();
    }
}

impl Drop for TestImage {
    fn drop(&mut self) {
        self.remove();
    }
}

/// Force-removes every container labelled with this image name.
pub fn remove_containers_of(image_name: &str) {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.vibesys.image={image_name}"),
        ])
        .output()
        .unwrap();
    for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
        let _ = Command::new("docker").args(["rm", "-f", id]).output();
    }
}

/// Container IDs labelled with this run id.
pub fn containers_of_run(run_id: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "ps",
            "-aq",
            "--filter",
            &format!("label=dev.vibesys.run-id={run_id}"),
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// A workspace with `ro/` (read-only) holding `ro/secret/` (hidden), a
/// hidden file `key.txt` and a hidden directory `hid/`.
pub fn workspace() -> tempfile::TempDir {
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    std::fs::create_dir_all(p.join("ro/secret")).unwrap();
    std::fs::create_dir_all(p.join("hid")).unwrap();
    std::fs::write(p.join("ro/a.txt"), "readable\n").unwrap();
    std::fs::write(p.join("ro/secret/s.txt"), "SECRET-IN-DIR\n").unwrap();
    std::fs::write(p.join("hid/h.txt"), "SECRET-HIDDEN\n").unwrap();
    std::fs::write(p.join("key.txt"), "SECRET-KEY\n").unwrap();
    ws
}

/// Real images of scripts/images.sh (Debian roots, the agent image's real
/// Claude Code CLI), built into a directory of their own, pinned in a
/// private lock and loaded; on drop the Engine gets back the images it
/// held before ([`common::engine_images::EngineImages`]). The roots and
/// the wheel are cached between runs (VIBESYS_SOURCES_CACHE).
pub struct BuiltImages {
    /// The private lock (readable by every test user).
    pub lock: PathBuf,
    _loaded: common::engine_images::EngineImages,
    _dir: tempfile::TempDir,
}

impl BuiltImages {
    /// Builds `names` (`editor`, `agent`, `evaluator-tool`) with
    /// scripts/images.sh, pins and loads them.
    pub fn load(names: &[&str]) -> Self {
        require_docker();
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let out_dir = dir.path().join("images");
        ok(Command::new(repo_root().join("scripts/images.sh"))
            .args(names)
            .env("VIBESYS_BIN", vibesys_bin())
            .env("IMAGES_OUT", &out_dir)
            .output()
            .unwrap());
        let archives: Vec<PathBuf> = names
            .iter()
            .map(|n| out_dir.join(format!("{n}.tar")))
            .collect();
        let lock = dir.path().join("images.lock");
        ok(vibesys(dir.path())
            .args(["image", "pin"])
            .args(&archives)
            .arg("--lock")
            .arg(&lock)
            .output()
            .unwrap());
        let pinned = vs_image::Lock::load(&lock).unwrap();
        let loaded = common::engine_images::EngineImages::before_loading(
            pinned.images.iter().flat_map(|(name, img)| {
                [
                    Some(format!("{name}:{}", img.tag)),
                    Some(img.config_digest.to_string()),
                    img.manifest_digest.as_ref().map(ToString::to_string),
                ]
                .into_iter()
                .flatten()
            }),
        );
        for a in &archives {
            ok(vibesys(dir.path())
                .args(["image", "load"])
                .arg(a)
                .arg("--lock")
                .arg(&lock)
                .output()
                .unwrap());
        }
        Self {
            lock,
            _loaded: loaded,
            _dir: dir,
        }
    }
}
