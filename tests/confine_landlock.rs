//! End-to-end: `vibesys exec --confine landlock` with the real kernel
//! Landlock, as root and as an unprivileged user, including its
//! documented gaps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;

fn landlock_needed() {
    let abi = std::process::Command::new(vibesys())
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let text = stdout(&abi);
    assert!(
        text.contains("\"name\": \"landlock\",\n      \"ok\": true"),
        "this test needs a kernel with Landlock (Linux 5.13+, lsm=landlock): {text}"
    );
}

#[test]
fn outside_reads_and_writes_are_denied() {
    landlock_needed();
    for who in users() {
        let p = project(who);
        let script = format!(
            "cat {outside}/private 2>/dev/null && echo READ-OUTSIDE; \
             echo x > {outside}/planted 2>/dev/null && echo WROTE-OUTSIDE; \
             cat link-outside 2>/dev/null && echo LINK-READ; \
             cat /etc/shadow 2>/dev/null && echo SHADOW; \
             ls /root >/dev/null 2>&1 && echo ROOT-HOME; \
             echo ok > inside.txt && echo WROTE-INSIDE",
            outside = p.outside.display()
        );
        let out = exec_sh(who, &p, "landlock", &script);
        assert_code(&out, 0);
        assert_eq!(stdout(&out), "WROTE-INSIDE\n", "{who:?}: {}", stderr(&out));
        assert!(!p.outside.join("planted").exists());
    }
}

#[test]
fn documented_gaps_are_exactly_as_reported() {
    landlock_needed();
    for who in users() {
        let p = project(who);
        let out = exec_sh(
            who,
            &p,
            "landlock",
            "cat token.txt; cat secret/key; echo changed > docs/readme && echo RO-WRITABLE",
        );
        assert_code(&out, 0);
        let text = stdout(&out);
        // Landlock cannot carve read-only or hidden paths out of the project.
        assert!(
            text.contains("TOKEN-VALUE")
                && text.contains("SECRET-KEY")
                && text.contains("RO-WRITABLE"),
            "{text}"
        );
        let err = stderr(&out);
        for path in ["docs", "secret", "token.txt"] {
            assert!(err.contains("NOT ENFORCED") && err.contains(path), "{err}");
        }
    }
}

#[test]
fn signals_to_outside_processes_are_denied() {
    landlock_needed();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    for who in users() {
        let p = project(who);
        let out = exec_sh(
            who,
            &p,
            "landlock",
            &format!(
                "kill -TERM {} 2>/dev/null && echo SENT; exit 0",
                sleeper.id()
            ),
        );
        assert_code(&out, 0);
        assert_eq!(stdout(&out), "");
    }
    assert!(sleeper.try_wait().unwrap().is_none());
    sleeper.kill().unwrap();
    let _ = sleeper.wait();
}

#[test]
fn a_project_below_tmp_is_refused() {
    landlock_needed();
    let dir = tempfile::Builder::new()
        .prefix("vibesys-ll")
        .tempdir_in("/tmp")
        .unwrap();
    let out = command_as(
        As::Root,
        dir.path(),
        &vibesys(),
        &["exec", "--confine", "landlock", "--", "touch", "ran"],
    )
    .output()
    .unwrap();
    assert_code(&out, 125);
    assert!(stderr(&out).contains("/tmp"), "{}", stderr(&out));
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn command_not_found_is_127() {
    landlock_needed();
    let p = project(As::Root);
    let out = command_as(
        As::Root,
        &p.root,
        &vibesys(),
        &["exec", "--confine", "landlock", "--", "/no/such/cmd"],
    )
    .output()
    .unwrap();
    assert_code(&out, 127);
}
