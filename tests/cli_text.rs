//! Snapshots of what users read: `--help` texts and error messages.

mod common;

use common::*;

fn help(args: &[&str]) -> String {
    let out = std::process::Command::new(vibesys())
        .args(args)
        .output()
        .unwrap();
    assert_code(&out, 0);
    stdout(&out)
}

#[test]
fn help_texts() {
    insta::assert_snapshot!("help_exec", help(&["exec", "--help"]));
    insta::assert_snapshot!("help_policy_show", help(&["policy", "show", "--help"]));
    insta::assert_snapshot!("help_doctor", help(&["doctor", "--help"]));
    insta::assert_snapshot!("help_session", help(&["session", "--help"]));
    insta::assert_snapshot!("help_build", help(&["build", "--help"]));
    insta::assert_snapshot!("help_run", help(&["run", "--help"]));
    insta::assert_snapshot!("help_run_start", help(&["run", "start", "--help"]));
}

#[test]
fn usage_errors_exit_125() {
    let out = std::process::Command::new(vibesys())
        .args(["exec", "--confine", "chroot", "--", "true"])
        .output()
        .unwrap();
    assert_code_stderr(&out, 125, "invalid value 'chroot'");
    let out = std::process::Command::new(vibesys())
        .args(["exec"])
        .output()
        .unwrap();
    assert_code(&out, 125);
}

#[test]
fn policy_error_text() {
    let p = project(As::Root);
    let out = vibesys_as(
        As::Root,
        &p.root,
        &["policy", "show", "--read-only", "secret/key"],
    );
    assert_code(&out, 125);
    insta::assert_snapshot!("policy_error_nested", stderr(&out));
}
