//! The helpers every end-to-end test shares: the binary under test,
//! tools it requires (a missing tool fails the test, naming how to
//! install it: nothing is skipped), and running commands.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

/// The vibesys binary under test, found in one place for every test:
/// `VIBESYS_BIN` when set, else `vibesys` in the cargo profile directory
/// this test executable was built into (`target/<profile>/deps/<test>` →
/// `target/<profile>/vibesys`, also below `target/<triple>/`). This
/// package cannot name another package's binary (`CARGO_BIN_EXE_*` is
/// only for the binary's own tests) and cargo does not build it for a
/// test of this package: `cargo build -p vibesys` first (scripts/test.sh
/// does), or the tests run whatever binary was built last.
pub fn vibesys_bin() -> &'static str {
    static BIN: OnceLock<String> = OnceLock::new();
    BIN.get_or_init(locate_vibesys_bin)
}

fn locate_vibesys_bin() -> String {
    let path = match std::env::var_os("VIBESYS_BIN") {
        Some(p) => {
            let p = PathBuf::from(p);
            assert!(
                p.is_file(),
                "VIBESYS_BIN={} is not a file: point it at a vibesys binary, \
                 or unset it to use target/<profile>/vibesys",
                p.display()
            );
            p
        }
        None => {
            let exe = std::env::current_exe().expect("the test executable's path");
            // target/<profile>/deps/<test> → target/<profile>/vibesys
            let profile_dir = exe.parent().and_then(Path::parent).unwrap_or_else(|| {
                panic!("{} has no target/<profile>/deps/ parent", exe.display())
            });
            let p = profile_dir.join("vibesys");
            assert!(
                p.is_file(),
                "the vibesys binary under test is not at {} (beside this test's \
                 {}): build it first: cargo build -p vibesys (with the same \
                 --release/--profile/--target as the tests), or set VIBESYS_BIN",
                p.display(),
                exe.parent().unwrap_or(&exe).display()
            );
            p
        }
    };
    path.into_os_string()
        .into_string()
        .unwrap_or_else(|p| panic!("the vibesys binary's path is not UTF-8: {p:?}"))
}

/// Fails the test when `tool` is not on PATH; `install` says how to get it.
pub fn require_tool(tool: &str, install: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "this test needs `{tool}`, not found on PATH: {install}"
    );
}

/// Fails the test unless the Docker Engine answers.
pub fn require_docker() {
    require_tool(
        "docker",
        "install Docker (Debian: apt-get install docker.io) and start the Engine",
    );
    let out = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Docker Engine does not answer `docker version`: start dockerd\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// vibesys in `cwd` with a clean environment (only PATH).
pub fn vibesys_in(cwd: &Path) -> Command {
    let mut c = Command::new(vibesys_bin());
    c.current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    c
}

/// Expects success; returns stdout.
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "command failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Expects vibesys's own failure (exit 125, `vibesys: error: `); returns stderr.
pub fn fails(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(125),
        "expected exit 125, got {}; stderr: {err}; stdout: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(err.starts_with("vibesys: error: "), "{err}");
    err
}

/// A name unique to this process and call (safe as a run id or tag).
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "{prefix}-{}-{}-{nanos}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// The repository's root directory (this package is its `tests/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

/// This package's directory, the repository's `tests/` (it holds the
/// helper sources and scripts, e.g. `remote/sky_args.py`, `hygiene/`).
pub fn tests_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The cargo target directory of this test run: the nearest ancestor of
/// this test executable that holds cargo's `CACHEDIR.TAG`.
pub fn target_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().unwrap();
    exe.ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| {
            exe.parent()
                .unwrap()
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .to_path_buf()
        })
}

/// The static vibesys (the Nix image builder, the in-container command
/// server): `VIBESYS_STATIC_BIN`, or built by `scripts/build-static.sh`
/// into this run's target directory, once per test process (tests that
/// need it wait for one build; cargo's lock serialises test binaries).
pub fn static_vibesys() -> PathBuf {
    static STATIC: OnceLock<PathBuf> = OnceLock::new();
    STATIC.get_or_init(build_static_vibesys).clone()
}

fn build_static_vibesys() -> PathBuf {
    if let Some(p) = std::env::var_os("VIBESYS_STATIC_BIN") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "VIBESYS_STATIC_BIN={} is not a file",
            p.display()
        );
        return p;
    }
    require_tool("cargo", "install Rust (rustup)");
    let start = Instant::now();
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/build-static.sh"))
        .env("CARGO_TARGET_DIR", target_dir())
        .output()
        .expect("cannot run scripts/build-static.sh");
    assert!(
        out.status.success(),
        "scripts/build-static.sh failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    eprintln!(
        "static vibesys: {} ({} bytes), built in {:.1?}",
        bin.display(),
        bin.metadata().unwrap().len(),
        start.elapsed()
    );
    bin
}

/// Runs the real git in `dir` with a fixed identity and no system or user
/// configuration; fails the test (naming how to install git, or git's
/// message) unless it succeeds.
pub fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args([
            "-c",
            "commit.gpgsign=false",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap_or_else(|e| panic!("this test needs git (apt-get install git): {e}"));
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The unprivileged user the harness creates.
pub const TEST_USER: &str = "vibesys-test";

/// (uid, gid) of the unprivileged test user, created on first use.
pub fn test_user() -> (u32, u32) {
    static USER: OnceLock<(u32, u32)> = OnceLock::new();
    *USER.get_or_init(|| {
        let id = |flag: &str| -> Option<u32> {
            let out = Command::new("id").args([flag, TEST_USER]).output().ok()?;
            if !out.status.success() {
                return None;
            }
            String::from_utf8_lossy(&out.stdout).trim().parse().ok()
        };
        if id("-u").is_none() {
            assert!(is_root(), "creating the unprivileged test user needs root");
            let status = Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/bin/sh",
                    TEST_USER,
                ])
                .status()
                .expect("run useradd");
            // Another test binary may have created it concurrently.
            assert!(
                status.success() || id("-u").is_some(),
                "useradd {TEST_USER} failed"
            );
        }
        (id("-u").unwrap(), id("-g").unwrap())
    })
}

/// True when the tests run as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}
