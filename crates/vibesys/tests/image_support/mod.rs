//! Helpers shared by the `image_*` end-to-end tests: run the real binary,
//! require real tools (a missing tool fails the test, naming the package).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const BIN: &str = env!("CARGO_BIN_EXE_vibesys");

/// Fails the test when `tool` is not on PATH, saying what to install.
pub fn require(tool: &str, install: &str) {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    assert!(found, "`{tool}` not found on PATH: install {install}");
}

pub fn require_docker() {
    require("docker", "Docker (Debian: docker.io) and start the Engine");
    let out = Command::new("docker")
        .args(["version", "--format", "{{.Server.Version}}"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the Docker Engine does not answer: start dockerd\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The static busybox from Debian's busybox-static.
pub fn busybox() -> &'static str {
    let p = "/bin/busybox";
    let out = Command::new("file").arg("-L").arg(p).output();
    assert!(
        Path::new(p).is_file(),
        "{p} missing: install busybox-static"
    );
    if let Ok(o) = out {
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(
            !s.contains("dynamically linked"),
            "{p} is not static: install busybox-static"
        );
    }
    p
}

/// A vibesys command with a clean, explicit environment.
pub fn vibesys(cwd: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    c
}

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

/// Runs and expects vibesys's own failure (exit 125); returns stderr.
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

pub fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

pub const TINY_SPEC: &str = r#"
name = "vibesys-tiny"
tag = "t1"
[config]
entrypoint = ["/bin/busybox"]
cmd = ["echo", "hello from a vibesys image"]
env = ["PATH=/bin"]
user = "0"
[[files]]
path = "/etc/passwd"
content = "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\n"
[[files]]
path = "/etc/group"
content = "root:x:0:\nagent:x:1000:\n"
[[files]]
path = "/tmp"
type = "dir"
mode = "1777"
[[files]]
path = "/bin/sh"
type = "symlink"
target = "busybox"
"#;

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p
}

/// `sh -c script` in `cwd`; panics on failure.
pub fn sh(cwd: &Path, script: &str) -> String {
    ok(Command::new("sh")
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .output()
        .unwrap())
}

/// A unique tag for Docker objects created by a test.
pub fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{prefix}-{}-{nanos}", std::process::id())
}
