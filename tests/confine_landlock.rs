//! End-to-end: `vibesys exec --confine landlock` with the real kernel
//! Landlock, as root and as an unprivileged user, including its
//! documented gaps.

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
    exec_sh_as_each_user(
        "landlock",
        |p| {
            format!(
                "{}ls /root >/dev/null 2>&1 && echo ROOT-HOME; \
             echo ok > inside.txt && echo WROTE-INSIDE",
                outside_probe(p)
            )
        },
        |who, p, out| {
            assert_eq!(stdout(out), "WROTE-INSIDE\n", "{who:?}: {}", stderr(out));
            assert!(!p.outside.join("planted").exists());
        },
    );
}

#[test]
fn documented_gaps_are_exactly_as_reported() {
    landlock_needed();
    exec_sh_as_each_user(
        "landlock",
        |_p| {
            "cat token.txt; cat secret/key; echo changed > docs/readme && echo RO-WRITABLE"
                .to_owned()
        },
        |_who, _p, out| {
            let text = stdout(out);
            // Landlock cannot carve read-only or hidden paths out of the project.
            assert!(
                text.contains("TOKEN-VALUE")
                    && text.contains("SECRET-KEY")
                    && text.contains("RO-WRITABLE"),
                "{text}"
            );
            let err = stderr(out);
            for path in ["docs", "secret", "token.txt"] {
                assert!(err.contains("NOT ENFORCED") && err.contains(path), "{err}");
            }
        },
    );
}

#[test]
fn signals_to_outside_processes_are_denied() {
    landlock_needed();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    exec_sh_as_each_user(
        "landlock",
        |_p| {
            format!(
                "kill -TERM {} 2>/dev/null && echo SENT; exit 0",
                sleeper.id()
            )
        },
        |_who, _p, out| {
            assert_eq!(stdout(out), "");
        },
    );
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
    assert_code_stderr(&out, 125, "/tmp");
    assert!(!dir.path().join("ran").exists());
}

#[test]
fn command_not_found_is_127() {
    landlock_needed();
    let p = project(As::Root);
    let out = vibesys_as(
        As::Root,
        &p.root,
        &["exec", "--confine", "landlock", "--", "/no/such/cmd"],
    );
    assert_code(&out, 127);
}

/// Every way the probe tries to make or enter a namespace, then a fork
/// and a thread (glibc's `pthread_create` tries `clone3` first and must
/// fall back to `clone`); prints one line each.
const NAMESPACE_PROBE: &str = r#"#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
static void report(const char *what, long rc) {
    printf("%s %s %s\n", what, rc < 0 ? "refused" : "MADE", rc < 0 ? strerror(errno) : "");
    fflush(stdout);
}
static long reaped(long pid) {
    if (pid == 0) _exit(0);
    if (pid > 0) waitpid((pid_t)pid, 0, 0);
    return pid;
}
static void *thread(void *arg) { return arg; }
int main(void) {
    report("unshare-user-net", unshare(CLONE_NEWUSER | CLONE_NEWNET));
    report("unshare-user", unshare(CLONE_NEWUSER));
    report("unshare-net", unshare(CLONE_NEWNET));
    report("unshare-mount", unshare(CLONE_NEWNS));
    report("clone-user-net", reaped(syscall(SYS_clone, CLONE_NEWUSER | CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0)));
    report("clone-pid", reaped(syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0)));
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_NEWUSER | CLONE_NEWNET;
    args.exit_signal = SIGCHLD;
    report("clone3-user-net", reaped(syscall(SYS_clone3, &args, sizeof args)));
    int ns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    report("setns-net", setns(ns, CLONE_NEWNET));
    report("fork", reaped(fork()));
    pthread_t t;
    int e = pthread_create(&t, 0, thread, 0);
    if (e == 0) pthread_join(t, 0); else errno = e;
    report("thread", e == 0 ? 0 : -1);
    return 0;
}
"#;

/// The namespace attempts that must fail.
const NAMESPACE_ATTEMPTS: [&str; 8] = [
    "unshare-user-net",
    "unshare-user",
    "unshare-net",
    "unshare-mount",
    "clone-user-net",
    "clone-pid",
    "clone3-user-net",
    "setns-net",
];

/// No new namespace under Landlock (nor bwrap), as root and as a user:
/// `unshare(CLONE_NEWUSER | CLONE_NEWNET)` would hand the command every
/// capability in a new user namespace, with raw, packet and netfilter
/// sockets. Unconfined, the same probe gets its namespaces (checked
/// first, for each user: a host that refuses them proves nothing). A
/// fork and a thread still work (clone3's ENOSYS makes glibc fall back).
#[test]
fn new_namespaces_are_refused() {
    landlock_needed();
    for who in users() {
        let p = project(who);
        let probe = compile_c(&p.root, "nsprobe", NAMESPACE_PROBE, &["-pthread"]);
        chown_to(who, &[&p.root]);
        let unconfined = command_as(who, &p.root, &probe, &[]).output().unwrap();
        let text = stdout(&unconfined);
        assert!(
            text.contains("unshare-user-net MADE"),
            "{who:?}: this host refuses new user and network namespaces to \
             an unconfined process, so a confined refusal proves nothing: {text}"
        );
        for backend in ["landlock", "bwrap"] {
            let out = vibesys_as(
                who,
                &p.root,
                &["exec", "--confine", backend, "--", probe.to_str().unwrap()],
            );
            assert_code(&out, 0);
            let text = stdout(&out);
            for attempt in NAMESPACE_ATTEMPTS {
                assert!(
                    text.lines()
                        .any(|l| l.starts_with(&format!("{attempt} refused"))),
                    "{who:?} {backend}: {attempt}: {text}"
                );
            }
            assert!(text.contains("fork MADE"), "{who:?} {backend}: {text}");
            assert!(text.contains("thread MADE"), "{who:?} {backend}: {text}");
            if backend == "landlock" {
                assert!(
                    text.contains("clone3-user-net refused Function not implemented"),
                    "{who:?}: {text}"
                );
                assert!(
                    text.contains("unshare-user-net refused Operation not permitted"),
                    "{who:?}: {text}"
                );
            }
        }
    }
}
