//! Test harness for end-to-end confinement tests: real bwrap, real
//! Landlock, run as root and as an unprivileged user the harness creates.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[path = "../common/mod.rs"]
mod common;
// Each test binary uses a different subset.
#[allow(unused_imports)]
pub use common::{
    TEST_USER, git, is_root, repo_root, require_tool, test_user, tests_dir, unique, vibesys_bin,
};

/// The vibesys binary under test.
pub fn vibesys() -> PathBuf {
    PathBuf::from(common::vibesys_bin())
}

/// Who runs the confined command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum As {
    /// The test process itself (root in CI).
    Root,
    /// The unprivileged user created by the harness.
    User,
}

/// The users to run each scenario as: root and the test user when the
/// tests run as root (as in CI), else just the current user.
pub fn users() -> Vec<As> {
    if is_root() {
        vec![As::Root, As::User]
    } else {
        vec![As::Root]
    }
}

/// A sample project: `docs/` read-only, `secret/` and `token.txt`
/// hidden (from vibesys.toml), a `.git` directory, and links.
pub struct Project {
    pub root: PathBuf,
    pub outside: PathBuf,
    _base: tempfile::TempDir,
}

/// A directory for test projects that Landlock accepts: the target's tmp
/// dir, unless the checkout lies below a tree Landlock must grant
/// read-write (`/tmp`, `/var/tmp`, `/dev/shm`); then a directory of this
/// checkout's own below `/var/lib/vibesys-tests` (root) or `~/.cache`.
pub fn landlock_safe_dir() -> PathBuf {
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let real = std::fs::canonicalize(&target).unwrap_or_else(|_| target.clone());
    let shared = ["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .any(|t| real.starts_with(t) || target.starts_with(t));
    if !shared {
        return target;
    }
    let key: u64 = real
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf29ce484222325, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
        });
    let base = if is_root() {
        PathBuf::from("/var/lib/vibesys-tests")
    } else {
        PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/vibesys-tests")
    };
    let dir = base.join(format!("{key:016x}"));
    std::fs::create_dir_all(&dir).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for p in [base.as_path(), dir.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// Creates a project in a fresh directory outside /tmp (Landlock refuses
/// projects below the trees it must grant), owned by `who`.
pub fn project(who: As) -> Project {
    let base_dir = landlock_safe_dir().join("confine");
    std::fs::create_dir_all(&base_dir).unwrap();
    let base = tempfile::Builder::new()
        .prefix("proj")
        .tempdir_in(&base_dir)
        .unwrap();
    let root = base.path().join("project");
    let outside = base.path().join("outside");
    std::fs::create_dir_all(root.join("secret")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("secret/key"), "SECRET-KEY\n").unwrap();
    std::fs::write(root.join("token.txt"), "TOKEN-VALUE\n").unwrap();
    std::fs::write(root.join("docs/readme"), "docs\n").unwrap();
    std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(outside.join("private"), "OUTSIDE-PRIVATE\n").unwrap();
    std::os::unix::fs::symlink(root.join("secret/key"), root.join("link-to-secret")).unwrap();
    std::os::unix::fs::symlink(outside.join("private"), root.join("link-outside")).unwrap();
    std::fs::write(
        root.join("vibesys.toml"),
        "[sandbox]\nread_only = [\"docs\"]\nhidden = [\"secret\", \"token.txt\"]\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    for p in [base_dir.as_path(), base.path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        outside.join("private"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    if who == As::User {
        let (uid, gid) = test_user();
        let status = Command::new("chown")
            .args(["-R", "-h", &format!("{uid}:{gid}")])
            .arg(&root)
            .arg(&outside)
            .status()
            .unwrap();
        assert!(status.success());
    }
    Project {
        root,
        outside,
        _base: base,
    }
}

/// A command that runs `program args` as `who`, in `dir`, with a small
/// explicit environment (nothing inherited but what is named).
pub fn command_as(who: As, dir: &Path, program: &Path, args: &[&str]) -> Command {
    let mut cmd = match who {
        As::Root => Command::new(program),
        As::User => {
            let (uid, gid) = test_user();
            let mut c = Command::new("setpriv");
            c.args([
                format!("--reuid={uid}"),
                format!("--regid={gid}"),
                "--clear-groups".into(),
                "--".into(),
            ]);
            c.arg(program);
            c
        }
    };
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", "/nonexistent")
        .env("LANG", "C")
        .stdin(Stdio::null());
    cmd
}

/// Runs `vibesys exec --confine BACKEND -- sh -c SCRIPT` as `who`.
pub fn exec_sh(who: As, project: &Project, backend: &str, script: &str) -> Output {
    command_as(
        who,
        &project.root,
        &vibesys(),
        &["exec", "--confine", backend, "--", "sh", "-c", script],
    )
    .output()
    .expect("run vibesys")
}

/// stdout as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts the exit code, showing both streams on failure.
pub fn assert_code(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "exit status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        stdout(out),
        stderr(out)
    );
}
