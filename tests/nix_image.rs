//! The Nix path, end to end, with real tools: every `.nix` file parses,
//! `flake.lock` carries the nixpkgs pin, and an image built by the
//! builtins-only function in `nix/` (static vibesys as the builder, the
//! exported references graph of a static busybox as the input, Nix sandbox
//! on, offline) loads into Docker, runs, and has the digests that `vibesys
//! image build` gives for the same closure outside Nix.
//!
//! Needs `nix-bin` (Nix >= 2.8: nix-build, nix-store, nix-instantiate), a
//! reachable Docker Engine, `busybox-static` (/bin/busybox), the Rust target
//! x86_64-unknown-linux-musl and musl-tools; `scripts/ci-setup-nix.sh` sets
//! them up. A missing tool fails the test, naming what to install.
//!
//! `VIBESYS_STATIC_BIN` names a prebuilt static vibesys to use instead of
//! building one with `scripts/build-static.sh`.
#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod common;
use common::engine_images::EngineImages;
use common::{require_docker, require_tool as require, static_vibesys};

/// Fixed timestamp for both builds (any value works; both must agree).
const EPOCH: &str = "1700000000";
const IMAGE_NAME: &str = "vibesys-nix-test";

use common::repo_root;

fn require_nix() {
    for tool in ["nix-build", "nix-store", "nix-instantiate"] {
        require(
            tool,
            "install Nix, e.g. Debian's nix-bin (`apt-get install nix-bin`; scripts/ci-setup-nix.sh does it with the nixbld users)",
        );
    }
}

/// Runs `cmd`, failing the test with its output unless it succeeds.
fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {shown}: {e}"));
    assert!(
        out.status.success(),
        "{shown} failed ({})\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone())
        .unwrap()
        .trim()
        .to_owned()
}

/// Every `.nix` file of the repository, outside `target*` and `.git`.
fn nix_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            if !(name.starts_with("target") || name == ".git" || name == "node_modules") {
                nix_files(&e.path(), out);
            }
        } else if ft.is_file() && name.ends_with(".nix") {
            out.push(e.path());
        }
    }
}

#[test]
fn every_nix_file_parses() {
    require_nix();
    let root = repo_root();
    let mut files = Vec::new();
    nix_files(&root, &mut files);
    for must in ["flake.nix", "nix/image.nix", "nix/default.nix"] {
        assert!(files.contains(&root.join(must)), "{must} is missing");
    }
    for f in &files {
        run(Command::new("nix-instantiate").arg("--parse").arg(f));
    }
}

/// The lock pins nixpkgs exactly as `shared/NIX.md` says, in a lock file
/// Nix itself reads (`nix flake metadata` offline checks the format).
#[test]
fn flake_lock_pins_nixpkgs() {
    let root = repo_root();
    let lock: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("flake.lock")).unwrap()).unwrap();
    assert_eq!(lock["version"], 7);
    assert_eq!(lock["root"], "root");
    assert_eq!(
        lock["nodes"]["root"]["inputs"],
        serde_json::json!({ "nixpkgs": "nixpkgs" })
    );
    let locked = &lock["nodes"]["nixpkgs"]["locked"];
    assert_eq!(locked["type"], "github");
    assert_eq!(locked["owner"], "NixOS");
    assert_eq!(locked["repo"], "nixpkgs");
    assert_eq!(locked["rev"], "8fd9daa3db09ced9700431c5b7ad0e8ba199b575");
    assert_eq!(locked["lastModified"], 1778430510u64);
    assert_eq!(
        locked["narHash"],
        "sha256-Ti+ZBvW6yrWWAg2szExVTwCd4qOJ3KlVr1tFHfyfi8Q="
    );
    let original = &lock["nodes"]["nixpkgs"]["original"];
    assert_eq!(original["ref"], "nixos-25.11");

    // Nix reads the lock offline and reports the same rev (a git checkout:
    // Nix copies the tracked files only).
    require_nix();
    require(
        "nix",
        "install Nix, e.g. Debian's nix-bin (`apt-get install nix-bin`; scripts/ci-setup-nix.sh does it with the nixbld users)",
    );
    let out = run(Command::new("nix")
        .args([
            "--extra-experimental-features",
            "nix-command flakes",
            "flake",
            "metadata",
            "--offline",
            "--json",
        ])
        .arg(&root));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        meta["locks"]["nodes"]["nixpkgs"]["locked"]["rev"],
        "8fd9daa3db09ced9700431c5b7ad0e8ba199b575"
    );
    assert_eq!(
        meta["description"],
        "vibesys: confinement and hermetic images for AI coding agents"
    );
}

/// One image through `nix/default.nix`: an `archive` from one host path.
struct NixImage<'a> {
    root: &'a Path,
    vibesys: &'a Path,
    spec: &'a Path,
    content: &'a Path,
    /// Nix expression of the `links` argument.
    links: &'a str,
}

impl NixImage<'_> {
    fn args(&self) -> Vec<std::ffi::OsString> {
        let mut a: Vec<std::ffi::OsString> = vec![self.root.join("nix").into()];
        for (k, v) in [
            ("vibesys", nix_string(self.vibesys)),
            ("spec", nix_string(self.spec)),
            ("contents", format!("[ {} ]", nix_string(self.content))),
            ("links", self.links.to_owned()),
        ] {
            a.extend(["--arg".into(), k.into(), v.into()]);
        }
        for (k, v) in [("format", "archive"), ("sourceDateEpoch", EPOCH)] {
            a.extend(["--argstr".into(), k.into(), v.into()]);
        }
        a
    }

    /// Builds it offline (no substituters) with the sandbox on; returns the
    /// output and the time taken.
    fn build(&self, link: &Path, extra: &[&str]) -> (PathBuf, Duration) {
        let start = Instant::now();
        let out = run(Command::new("nix-build")
            .args(self.args())
            .args([
                "--option",
                "sandbox",
                "true",
                "--option",
                "substituters",
                "",
            ])
            .arg("--out-link")
            .arg(link)
            .args(extra));
        (PathBuf::from(stdout(&out)), start.elapsed())
    }

    /// The spec the builder reads (the given one plus the links).
    fn derived_spec(&self) -> PathBuf {
        let out = run(Command::new("nix-instantiate")
            .args(["--eval", "--read-write-mode", "--json"])
            .args(self.args())
            .args(["-A", "spec"]));
        PathBuf::from(serde_json::from_slice::<String>(&out.stdout).unwrap())
    }
}

/// The store path `builtins.path` gives `dir` (named after its base name),
/// added to the store now.
fn add_to_store(dir: &Path) -> String {
    let name = dir.file_name().unwrap().to_str().unwrap();
    let expr = format!(
        "toString (builtins.path {{ path = {}; name = \"{name}\"; }})",
        nix_string(dir)
    );
    let out = run(Command::new("nix-instantiate").args([
        "--eval",
        "--read-write-mode",
        "--json",
        "-E",
        &expr,
    ]));
    serde_json::from_slice::<String>(&out.stdout).unwrap()
}

/// A Nix string literal of a path.
fn nix_string(p: &Path) -> String {
    let s = p.to_str().unwrap();
    format!(
        "\"{}\"",
        s.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace("${", "\\${")
    )
}

/// The references graph of `root`'s closure in the format Nix's
/// `exportReferencesGraph` writes (empty deriver lines), from nix-store
/// queries: an independent way to the same closure.
fn references_graph(root: &str) -> String {
    let out = run(Command::new("nix-store").args(["--query", "--requisites", root]));
    let mut paths: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    paths.sort();
    let mut graph = String::new();
    for p in &paths {
        let out = run(Command::new("nix-store").args(["--query", "--references", p]));
        let refs = stdout(&out);
        let refs: Vec<&str> = refs.lines().filter(|l| !l.is_empty()).collect();
        graph.push_str(&format!("{p}\n\n{}\n", refs.len()));
        for r in refs {
            graph.push_str(r);
            graph.push('\n');
        }
    }
    graph
}

/// The manifest digest (from `index.json`) and the config digest of an
/// image archive, read with `tar`.
fn digests(archive: &Path, scratch: &Path) -> (String, String) {
    std::fs::create_dir_all(scratch).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(scratch)
        .arg("index.json"));
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(scratch.join("index.json")).unwrap()).unwrap();
    let manifest = index["manifests"][0]["digest"].as_str().unwrap().to_owned();
    let blob = format!("blobs/sha256/{}", manifest.strip_prefix("sha256:").unwrap());
    run(Command::new("tar")
        .arg("-xf")
        .arg(archive)
        .arg("-C")
        .arg(scratch)
        .arg(&blob));
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(scratch.join(&blob)).unwrap()).unwrap();
    let config = m["config"]["digest"].as_str().unwrap().to_owned();
    (manifest, config)
}

fn sha256_file(p: &Path) -> String {
    let out = run(Command::new("sha256sum").arg(p));
    stdout(&out).split_whitespace().next().unwrap().to_owned()
}

#[test]
fn nix_built_image_runs_in_docker_and_matches_the_build_outside_nix() {
    require_nix();
    require_docker();
    assert!(
        Path::new("/bin/busybox").is_file(),
        "/bin/busybox not found: install busybox-static (`apt-get install busybox-static`)"
    );
    let root = repo_root();
    let vibesys_static = static_vibesys();
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();

    // The closure: a static busybox, in a directory added with builtins.path.
    let bb = t.join("busybox");
    std::fs::create_dir_all(bb.join("bin")).unwrap();
    std::fs::copy("/bin/busybox", bb.join("bin/busybox")).unwrap();
    let bb_store = add_to_store(&bb);
    // The entrypoint goes through the /bin link that nix/ adds to the spec.
    let spec = t.join("nix-test.toml");
    std::fs::write(
        &spec,
        format!(
            "name = \"{IMAGE_NAME}\"\ntag = \"nix\"\n\n[config]\nentrypoint = [\"/bin/busybox\"]\ncmd = [\"echo\", \"hello from nix\"]\n"
        ),
    )
    .unwrap();

    // Through nix/: offline (no substituters), sandbox on.
    let image = NixImage {
        root: &root,
        vibesys: &vibesys_static,
        spec: &spec,
        content: &bb,
        links: r#"{ "/bin" = "bin"; }"#,
    };
    let (nix_out, took) = image.build(&t.join("result"), &[]);
    println!("nix-build: {} in {took:.1?}", nix_out.display());
    // Nix rebuilds it and compares bit for bit (fails when they differ).
    let (_, took) = image.build(&t.join("result"), &["--check"]);
    println!("nix-build --check (rebuilt, identical): {took:.1?}");
    let derived = image.derived_spec();
    let text = std::fs::read_to_string(&derived).unwrap();
    assert!(
        text.contains(&format!("target = \"{bb_store}/bin\"")),
        "{text}"
    );

    // The same closure outside Nix, by the test's own (dynamic) vibesys.
    let graph = t.join("graph");
    std::fs::write(&graph, references_graph(&bb_store)).unwrap();
    let outside = t.join("outside.tar");
    run(Command::new(common::vibesys_bin())
        .args(["image", "build"])
        .arg(&derived)
        .arg("--out")
        .arg(&outside)
        .args(["--format", "archive", "--no-cache", "--references-graph"])
        .arg(&graph)
        .env("SOURCE_DATE_EPOCH", EPOCH));

    let (nix_manifest, nix_config) = digests(&nix_out, &t.join("x-nix"));
    let (out_manifest, out_config) = digests(&outside, &t.join("x-outside"));
    println!("manifest {nix_manifest}\nconfig   {nix_config}");
    assert_eq!(
        nix_manifest, out_manifest,
        "manifest digest: Nix vs outside Nix"
    );
    assert_eq!(nix_config, out_config, "config digest: Nix vs outside Nix");
    assert_eq!(
        sha256_file(&nix_out),
        sha256_file(&outside),
        "the archives differ byte-wise"
    );

    // `vibesys image pin` records the Nix-built digests; the archive built
    // outside Nix then verifies against that lock (a CI with pinned images
    // checks its own build this way).
    let lock = t.join("images.lock");
    run(Command::new(common::vibesys_bin())
        .args(["image", "pin"])
        .arg(&nix_out)
        .arg("--lock")
        .arg(&lock));
    let pinned = std::fs::read_to_string(&lock).unwrap();
    assert!(
        pinned.contains(&nix_manifest) && pinned.contains(&nix_config),
        "{pinned}"
    );
    run(Command::new(common::vibesys_bin())
        .args(["image", "verify", "--lock"])
        .arg(&lock)
        .arg(&outside));

    // Into this machine's Docker Engine, and run.
    let reference = format!("{IMAGE_NAME}:nix");
    // Removed at the end only when this test added it (a tag it moved is
    // put back).
    let images = EngineImages::before_loading([reference.clone()]);
    let out = run(Command::new("docker").arg("load").arg("-i").arg(&nix_out));
    println!("{}", stdout(&out));
    let id = stdout(&run(
        Command::new("docker").args(["image", "inspect", "--format", "{{.Id}}", &reference])
    ));
    let ran = Command::new("docker")
        .args(["run", "--rm", "--network", "none", &reference])
        .output()
        .unwrap();
    let ran_custom = Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            &reference,
            "echo",
            "custom",
        ])
        .output()
        .unwrap();
    drop(images);
    assert!(
        ran.status.success(),
        "docker run failed: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&ran.stdout).trim(),
        "hello from nix"
    );
    assert_eq!(String::from_utf8_lossy(&ran_custom.stdout).trim(), "custom");
    // Docker's classic store reports the config digest as the image ID,
    // the containerd store the manifest digest.
    assert!(
        id == nix_config || id == nix_manifest,
        "docker image ID {id} is neither {nix_config} nor {nix_manifest}"
    );
}

/// The static host binary needs nothing else: `file` calls it static, and
/// it runs in an image (built through nix/) that holds only itself.
#[test]
fn static_vibesys_runs_alone_in_an_image() {
    require_nix();
    require_docker();
    require(
        "file",
        "install file (`apt-get install file`; scripts/ci-setup-nix.sh does it)",
    );
    let root = repo_root();
    let vibesys_static = static_vibesys();
    let desc = stdout(&run(Command::new("file").arg("-b").arg(&vibesys_static)));
    assert!(
        desc.contains("statically linked") || desc.contains("static-pie linked"),
        "not static: {desc}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // The same name nix/default.nix gives the builder, so one store path.
    let dir = t.join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("vibesys");
    std::fs::copy(&vibesys_static, &bin).unwrap();
    let store = add_to_store(&bin);
    let name = "vibesys-static-only";
    let spec = t.join("only.toml");
    // `mount_points = false`: the image holds the binary and nothing else
    // (Docker creates /dev, /proc, ... itself).
    std::fs::write(
        &spec,
        format!(
            "name = \"{name}\"\ntag = \"nix\"\nmount_points = false\n\n[config]\nentrypoint = [\"{store}\"]\n"
        ),
    )
    .unwrap();
    let (image, _) = NixImage {
        root: &root,
        vibesys: &vibesys_static,
        spec: &spec,
        content: &bin,
        links: "{ }",
    }
    .build(&t.join("result"), &[]);

    let reference = format!("{name}:nix");
    let images = EngineImages::before_loading([reference.clone()]);
    run(Command::new("docker").arg("load").arg("-i").arg(&image));
    let ran = Command::new("docker")
        .args(["run", "--rm", "--network", "none", &reference, "--version"])
        .output()
        .unwrap();
    let listed = Command::new("docker")
        .args([
            "image",
            "inspect",
            "--format",
            "{{len .RootFS.Layers}}",
            &reference,
        ])
        .output()
        .unwrap();
    drop(images);
    assert!(
        ran.status.success(),
        "docker run --version failed: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let version = String::from_utf8_lossy(&ran.stdout);
    assert_eq!(
        version.trim(),
        format!("vibesys {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).trim(),
        "1",
        "one layer: the binary alone"
    );
}

/// Bad arguments to the image function fail at evaluation, naming the cause.
#[test]
fn image_function_rejects_bad_arguments() {
    require_nix();
    let root = repo_root();
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("x.toml");
    std::fs::write(&spec, "name = \"x\"\n").unwrap();
    let content = tmp.path().join("c");
    std::fs::create_dir(&content).unwrap();
    let base = |contents: &str| {
        let mut cmd = Command::new("nix-instantiate");
        cmd.arg(root.join("nix"))
            .args(["--arg", "vibesys", "/bin/sh", "--arg", "spec"])
            .arg(nix_string(&spec))
            .args(["--arg", "contents", contents]);
        cmd
    };
    let with_content = format!("[ {} ]", nix_string(&content));
    for (extra, needle) in [
        (
            vec!["--argstr", "format", "tarball"],
            "unknown format tarball",
        ),
        (
            vec!["--argstr", "compression", "xz"],
            "unknown compression xz",
        ),
        (
            vec!["--argstr", "sourceDateEpoch", "yesterday"],
            "sourceDateEpoch must be a number",
        ),
        (vec!["--argstr", "format", "squashfs"], "needs mksquashfs"),
    ] {
        let out = base(&with_content).args(&extra).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{extra:?}: {err}"
        );
    }
    let out = base("[ ]").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("contents must be a non-empty list"),
        "{err}"
    );
    // A good call instantiates (nothing is built).
    run(&mut base(&with_content));
}
