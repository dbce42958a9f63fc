//! Helpers shared by the `image_*` end-to-end tests: run the real binary,
//! require real tools (a missing tool fails the test, naming the package).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../common/mod.rs"]
mod common;
// Each test binary uses a different subset.
#[allow(unused_imports)]
pub use common::{
    As, assert_file_is, command_as, fails, ok, pin_image, require_docker, require_tool as require,
    unique, users, vibesys_bin, vibesys_in as vibesys,
};

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
