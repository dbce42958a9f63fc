//! The helpers every end-to-end test shares: the binary under test,
//! tools it requires (a missing tool fails the test, naming how to
//! install it: nothing is skipped), running commands, and the harness of
//! the confinement tests (real bwrap, real Landlock, run as root and as an
//! unprivileged user the harness creates). The `docker_support`,
//! `image_support`, `run_support` and `slurm_support` helpers build on it.
#![allow(dead_code)]

pub mod engine_images;
pub mod loopback_http;
pub mod model_endpoint;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
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

/// Runs `vibesys ARGS --project DIR` (the test's environment without
/// `VIBESYS_LOG`).
pub fn vibesys_project(dir: &Path, args: &[&str]) -> Output {
    Command::new(vibesys_bin())
        .args(args)
        .arg("--project")
        .arg(dir)
        .env_remove("VIBESYS_LOG")
        .output()
        .unwrap()
}

/// `vibesys image pin ARCHIVE --lock LOCK` in `dir`, which must succeed.
pub fn pin_image(dir: &Path, archive: &Path, lock: &Path) {
    ok(vibesys_in(dir)
        .args(["image", "pin"])
        .arg(archive)
        .arg("--lock")
        .arg(lock)
        .output()
        .unwrap());
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
    // The `test-static` profile (root Cargo.toml) builds in a fraction of
    // the release profile's time; what the tests ask of the binary
    // (static, runs alone in an image, serves commands) does not depend on
    // its optimisation.
    let out = Command::new("bash")
        .arg(repo_root().join("scripts/build-static.sh"))
        .args(["--profile", "test-static"])
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

/// The real clients, where vibesys itself looks (`$VIBESYS_TOOLS`, else
/// `${XDG_DATA_HOME:-$HOME/.local/share}/vibesys/tools`; scripts/test.sh
/// installs them there through scripts/install-deps.sh).
pub fn remote_client_tools() -> PathBuf {
    let tools = vs_runtime::remote::client::tools_dir();
    for bin in ["sky", "modal", "python"] {
        let p = tools.join("remote-clients/bin").join(bin);
        assert!(
            p.is_file(),
            "{} is missing: run VIBESYS_TOOLS={} scripts/remote-clients.sh (installs skypilot and modal from PyPI)",
            p.display(),
            tools.display()
        );
    }
    tools
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

/// `vibesys build` of `HEAD` for run `r1` in the host environment: the
/// start of the argv of the build tests (options may follow).
pub const HOST_BUILD_ARGS: [&str; 7] = [
    "build",
    "--run",
    "r1",
    "--commit",
    "HEAD",
    "--run-environment",
    "host",
];

/// The unprivileged user the harness creates.
pub const TEST_USER: &str = "vibesys-test";

/// The unprivileged operator of the Docker Engine the harness creates: a
/// user like [`TEST_USER`] whose one supplementary group is `docker` (the
/// way a person who is not root uses the Engine). A user of its own, so
/// that [`TEST_USER`] stays a user without any root-equivalent group (the
/// `docker` group is one: the Engine runs what it is asked to as root).
pub const DOCKER_USER: &str = "vibesys-docker";

/// The group whose members reach the Docker Engine's socket.
pub const DOCKER_GROUP: &str = "docker";

/// (uid, gid) of the unprivileged test user, created on first use.
pub fn test_user() -> (u32, u32) {
    static USER: OnceLock<(u32, u32)> = OnceLock::new();
    *USER.get_or_init(|| system_user(TEST_USER, None))
}

/// (uid, gid) of [`DOCKER_USER`], created on first use in the `docker`
/// group (which must exist: installing the Engine creates it).
pub fn docker_user() -> (u32, u32) {
    static USER: OnceLock<(u32, u32)> = OnceLock::new();
    *USER.get_or_init(|| system_user(DOCKER_USER, Some(DOCKER_GROUP)))
}

/// The `(uid, gid)` of the system user `name`, created (no home, `/bin/sh`,
/// in the supplementary `group` when given) unless it exists.
fn system_user(name: &str, group: Option<&str>) -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, name]).output().ok()?;
        if !out.status.success() {
            return None;
        }
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    if id("-u").is_none() {
        assert!(
            is_root(),
            "creating the unprivileged user {name} needs root"
        );
        let mut cmd = Command::new("useradd");
        cmd.args(["--system", "--no-create-home", "--shell", "/bin/sh"]);
        if let Some(g) = group {
            assert!(
                Command::new("getent")
                    .args(["group", g])
                    .output()
                    .is_ok_and(|o| o.status.success()),
                "the group {g} does not exist: install the Docker Engine (it creates it)"
            );
            cmd.args(["--groups", g]);
        }
        let status = cmd.arg(name).status().expect("run useradd");
        // Another test binary may have created it concurrently.
        assert!(
            status.success() || id("-u").is_some(),
            "useradd {name} failed"
        );
    }
    (id("-u").unwrap(), id("-g").unwrap())
}

impl As {
    /// The `(uid, gid)` this runs as; `None` for root (the test process).
    pub fn ids(self) -> Option<(u32, u32)> {
        match self {
            As::Root => None,
            As::User => Some(test_user()),
            As::DockerUser => Some(docker_user()),
        }
    }

    /// The user's name.
    pub fn name(self) -> &'static str {
        match self {
            As::Root => "root",
            As::User => TEST_USER,
            As::DockerUser => DOCKER_USER,
        }
    }
}

/// Gives `paths` (recursively, links themselves, never their targets) to
/// `who` when it is not root; root's stay as they are.
pub fn chown_to(who: As, paths: &[&Path]) {
    if let Some((uid, gid)) = who.ids() {
        let status = Command::new("chown")
            .args(["-R", "-h", &format!("{uid}:{gid}")])
            .args(paths)
            .status()
            .unwrap();
        assert!(status.success(), "chown {paths:?}");
    }
}

/// True when the tests run as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The vibesys binary under test, as a path.
pub fn vibesys() -> PathBuf {
    PathBuf::from(vibesys_bin())
}

/// Who runs the confined command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum As {
    /// The test process itself (root in CI).
    Root,
    /// The unprivileged user created by the harness.
    User,
    /// The unprivileged operator of the Docker Engine ([`DOCKER_USER`],
    /// in the `docker` group).
    DockerUser,
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

/// The users to run each Docker scenario as: root and [`DOCKER_USER`]
/// when the tests run as root (as in CI), else just the current user (who
/// then must reach the Engine).
pub fn docker_users() -> Vec<As> {
    if is_root() {
        vec![As::Root, As::DockerUser]
    } else {
        vec![As::Root]
    }
}

/// Each of [`users`] with each host backend that confines a command on
/// Linux (bwrap, Landlock): the scenarios most confinement tests repeat.
pub fn users_and_backends() -> Vec<(As, &'static str)> {
    users()
        .into_iter()
        .flat_map(|w| [(w, "bwrap"), (w, "landlock")])
        .collect()
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
    chown_to(who, &[&root, &outside]);
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
        As::User | As::DockerUser => {
            let (uid, gid) = who.ids().unwrap();
            let mut c = Command::new("setpriv");
            c.args([format!("--reuid={uid}"), format!("--regid={gid}")]);
            // The Docker operator keeps its groups (`docker`); the test
            // user has none.
            c.arg(if who == As::DockerUser {
                "--init-groups"
            } else {
                "--clear-groups"
            });
            c.arg("--").arg(program);
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

/// Runs `vibesys ARGS` as `who` in `dir` (see [`command_as`]).
pub fn vibesys_as(who: As, dir: &Path, args: &[&str]) -> Output {
    command_as(who, dir, &vibesys(), args)
        .output()
        .expect("run vibesys")
}

/// `vibesys exec --confine BACKEND -- sh -c SCRIPT` as `who` in `dir`
/// (see [`command_as`]), to be run or spawned.
pub fn exec_sh_command(who: As, dir: &Path, backend: &str, script: &str) -> Command {
    command_as(
        who,
        dir,
        &vibesys(),
        &["exec", "--confine", backend, "--", "sh", "-c", script],
    )
}

/// Runs `vibesys exec --confine BACKEND -- sh -c SCRIPT` as `who`.
pub fn exec_sh(who: As, project: &Project, backend: &str, script: &str) -> Output {
    exec_sh_opts(who, project, backend, &[], script)
}

/// Runs `vibesys exec --confine BACKEND EXTRA -- sh -c SCRIPT` as `who`.
pub fn exec_sh_opts(
    who: As,
    project: &Project,
    backend: &str,
    extra: &[&str],
    script: &str,
) -> Output {
    let mut args = vec!["exec", "--confine", backend];
    args.extend_from_slice(extra);
    args.extend(["--", "sh", "-c", script]);
    vibesys_as(who, &project.root, &args)
}

/// For each of [`users`]: a fresh [`project`] of its own, where `script`
/// (made for it) runs with [`exec_sh`] under `backend` and must exit 0;
/// then `check` sees the user, the project and the output.
pub fn exec_sh_as_each_user(
    backend: &str,
    script: impl Fn(&Project) -> String,
    mut check: impl FnMut(As, &Project, &Output),
) {
    for who in users() {
        let p = project(who);
        let out = exec_sh(who, &p, backend, &script(&p));
        assert_code(&out, 0);
        check(who, &p, &out);
    }
}

/// Shell commands that try the ways out of the project (the file outside
/// it, directly and through `link-outside`, a file planted there,
/// `/etc/shadow`), each printing a marker when it gets through.
pub fn outside_probe(p: &Project) -> String {
    format!(
        "cat {outside}/private 2>/dev/null && echo READ-OUTSIDE; \
         echo x > {outside}/planted 2>/dev/null && echo WROTE-OUTSIDE; \
         cat link-outside 2>/dev/null && echo LINK-READ; \
         cat /etc/shadow 2>/dev/null && echo SHADOW; ",
        outside = p.outside.display()
    )
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

/// Asserts that the file at `path` holds exactly `expected`.
pub fn assert_file_is(path: impl AsRef<Path>, expected: impl AsRef<str>) {
    let (path, expected) = (path.as_ref(), expected.as_ref());
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert_eq!(text, expected, "{}", path.display());
}

/// Asserts that stderr contains `needle`, showing stderr on failure.
pub fn assert_stderr_has(out: &Output, needle: &str) {
    let err = stderr(out);
    assert!(err.contains(needle), "{err}");
}

/// Asserts the exit code (as [`assert_code`]) and that stderr contains
/// `needle`.
pub fn assert_code_stderr(out: &Output, code: i32, needle: &str) {
    assert_code(out, code);
    assert_stderr_has(out, needle);
}

/// The 32-bit system-call entry (`int $0x80`) from a 64-bit process:
/// the same calls under i386 numbers (keyctl 288, ptrace 26), which a
/// filter checking x86_64 numbers only would let through. Prints `start`,
/// then `I386 ...` for each call that came back.
pub const I386_PROBE: &str = r#"#include <stdio.h>
static long sys32(long nr, long a, long b, long c) {
    long r;
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
    return r;
}
int main(void) {
    printf("start\n"); fflush(stdout);
    printf("I386 getpid %ld\n", sys32(20, 0, 0, 0)); fflush(stdout);
    printf("I386 keyctl %ld\n", sys32(288, 0, -3, 1)); fflush(stdout);
    printf("I386 ptrace %ld\n", sys32(26, 0, 0, 0)); fflush(stdout);
    return 0;
}
"#;

/// The exit status vibesys reports for a command killed by `SIGSYS`
/// (128 + 31): what the seccomp filter does to a call from another ABI.
pub const KILLED_BY_SIGSYS: i32 = 159;

/// Fails the test unless `probe` (built from [`I386_PROBE`]) gets its
/// 32-bit calls through unconfined: on a kernel without the 32-bit entry
/// (`ia32_emulation=0`) a confined run would prove nothing.
pub fn require_i386_entry(probe: &Path) {
    let out = Command::new(probe).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains("I386 getpid ") && !text.contains("I386 getpid -"),
        "this kernel has no 32-bit system-call entry (ia32_emulation=0?): {text}"
    );
}

/// Compiles the C program `src` into `dir/name` (mode 0755) with gcc and
/// `flags` (`-static` for an image without a C library).
pub fn compile_c(dir: &Path, name: &str, src: &str, flags: &[&str]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    require_tool("gcc", "apt-get install gcc libc6-dev");
    let c = dir.join(format!("{name}.c"));
    std::fs::write(&c, src).unwrap();
    let bin = dir.join(name);
    let status = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&bin)
        .arg(&c)
        .status()
        .unwrap();
    assert!(status.success(), "gcc {name}.c failed");
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}
