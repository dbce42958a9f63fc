//! Every way confinement can be refused stops with exit 125, a message
//! naming the cause, and the command not run.

mod common;

use common::*;

fn run(p: &Project, env: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    let mut full = vec!["exec"];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--", "touch", "command-ran"]);
    let mut cmd = command_as(As::Root, &p.root, &vibesys(), &full);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn assert_refused(p: &Project, out: &std::process::Output, needle: &str) {
    assert_code(out, 125);
    let err = stderr(out);
    assert!(
        err.starts_with("vibesys: error: ") && err.contains(needle),
        "{err}"
    );
    assert!(!p.root.join("command-ran").exists(), "the command ran");
}

#[test]
fn missing_bwrap_fails_closed() {
    let p = project(As::Root);
    let empty = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/usr/bin/touch", empty.path().join("touch")).unwrap();
    let path = empty.path().display().to_string();
    let out = run(&p, &[("PATH", &path)], &[]);
    assert_refused(&p, &out, "bubblewrap was not found");
}

#[test]
fn disabled_or_unknown_operator_values_fail_closed() {
    let p = project(As::Root);
    for value in ["off", "0", " FALSE ", "no"] {
        let out = run(&p, &[("VIBESYS_AGENT_SANDBOX", value)], &[]);
        assert_refused(&p, &out, "requires enforcement");
    }
    let out = run(&p, &[("VIBESYS_AGENT_SANDBOX", "chroot")], &[]);
    assert_refused(&p, &out, "unknown sandbox mode \"chroot\"");
    // Unknown values are errors even when enforcement is not required.
    let out = run(
        &p,
        &[("VIBESYS_AGENT_SANDBOX", "chroot")],
        &["--no-require-enforcement"],
    );
    assert_refused(&p, &out, "unknown sandbox mode");
    let out = run(&p, &[], &["--confine", "none"]);
    assert_refused(&p, &out, "requires enforcement");
}

#[test]
fn disabled_without_enforcement_runs_with_a_loud_warning() {
    let p = project(As::Root);
    let out = run(
        &p,
        &[("VIBESYS_AGENT_SANDBOX", "off")],
        &["--no-require-enforcement"],
    );
    assert_code_stderr(&out, 0, "CONFINEMENT DISABLED");
    assert!(p.root.join("command-ran").exists());
}

#[test]
fn invalid_policies_fail_closed_naming_the_path() {
    let p = project(As::Root);
    std::os::unix::fs::symlink("/etc", p.root.join("etc-link")).unwrap();
    std::os::unix::fs::symlink("secret", p.root.join("secret-alias")).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["--hidden", "../outside"], "\"../outside\" contains `..`"),
        (&["--read-only", "/etc"], "\"/etc\" is absolute"),
        (&["--hidden", "missing"], "\"missing\" does not exist"),
        (
            &["--hidden", "etc-link"],
            "resolves to \"/etc\", outside workspace",
        ),
        (
            &["--read-only", "secret-alias"],
            "overlap after resolving symlinks",
        ),
        (
            &["--hidden", "docs/x", "--hidden", "docs"],
            "lies below hidden path",
        ),
        (&["--read-only", "docs", "--hidden", "docs"], "listed twice"),
    ];
    for (args, needle) in cases {
        let out = run(&p, &[], args);
        assert_refused(&p, &out, needle);
    }
    // A broken vibesys.toml fails the same way.
    std::fs::write(p.root.join("vibesys.toml"), "[sandbox]\nhiden = [\"x\"]\n").unwrap();
    let out = run(&p, &[], &[]);
    assert_refused(&p, &out, "unknown field `hiden`");
}

/// A project root that its user may enter but not list (`chmod 311`):
/// vibesys cannot find the `.env.*` files it hides, so it refuses to
/// start rather than leave `.env.production` readable by its well-known
/// name (under bwrap it was, before). Run as the unprivileged user when
/// the tests run as root; root lists any directory, so for root the
/// launch goes ahead with the file hidden.
#[test]
fn an_unlistable_project_root_fails_closed() {
    use std::os::unix::fs::PermissionsExt;
    let who = if is_root() { As::User } else { As::Root };
    let p = project(who);
    std::fs::write(p.root.join(".env.production"), "ENV-SECRET\n").unwrap();
    std::fs::set_permissions(
        p.root.join(".env.production"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    std::fs::set_permissions(&p.root, std::fs::Permissions::from_mode(0o311)).unwrap();
    for backend in ["bwrap", "landlock"] {
        let out = vibesys_as(
            who,
            &p.root,
            &["exec", "--confine", backend, "--", "cat", ".env.production"],
        );
        assert_code(&out, 125);
        assert!(!stdout(&out).contains("ENV-SECRET"), "{backend}: read");
        let err = stderr(&out);
        assert!(
            err.contains("cannot be listed") && err.contains(".env.*"),
            "{backend}: {err}"
        );
    }
    // Root lists the same directory (it overrides the mode bits): the
    // launch goes ahead and bwrap hides the file.
    if is_root() {
        let out = vibesys_as(
            As::Root,
            &p.root,
            &["exec", "--confine", "bwrap", "--", "cat", ".env.production"],
        );
        assert_ne!(out.status.code(), Some(125), "{}", stderr(&out));
        assert!(!stdout(&out).contains("ENV-SECRET"), "root: read");
    }
    std::fs::set_permissions(&p.root, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A `.env.*` file whose name is not UTF-8 cannot be hidden (policy paths
/// are UTF-8): the launch stops, naming it, rather than leave it
/// readable. Before, `cat .env.*` printed it under bwrap and exited 0.
/// As root and as a user, under both host backends.
#[test]
fn a_non_utf8_env_file_fails_closed() {
    use std::os::unix::ffi::OsStrExt;
    for who in users() {
        let p = project(who);
        let name = std::ffi::OsStr::from_bytes(b".env.\xff");
        std::fs::write(p.root.join(name), "ENV-SECRET\n").unwrap();
        for backend in ["bwrap", "landlock"] {
            let out = vibesys_as(
                who,
                &p.root,
                &["exec", "--confine", backend, "--", "sh", "-c", "cat .env.*"],
            );
            assert!(
                !stdout(&out).contains("ENV-SECRET"),
                "{who:?} {backend}: read"
            );
            assert_code(&out, 125);
            let err = stderr(&out);
            assert!(
                err.contains(r#"".env.\xFF""#) && err.contains("not UTF-8"),
                "{who:?} {backend}: {err}"
            );
        }
    }
}
