//! End-to-end: `vibesys exec --confine bwrap` with the real bubblewrap, as
//! root and as an unprivileged user.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn bwrap_needed() {
    require_tool("bwrap", "apt-get install bubblewrap");
}

#[test]
fn hidden_paths_are_empty_and_refuse_writes() {
    bwrap_needed();
    exec_sh_as_each_user(
        "bwrap",
        |_p| {
            "echo \"dir:[$(ls -A secret)]\"; echo \"file:[$(cat token.txt)]\"; \
             test -f token.txt && echo file-is-regular; \
             echo x > secret/new && echo WROTE-DIR; echo x > token.txt && echo WROTE-FILE; \
             echo \"link:[$(cat link-to-secret 2>&1)]\"; exit 0"
                .to_owned()
        },
        |who, p, out| {
            let text = stdout(out);
            assert!(text.contains("dir:[]"), "{who:?}: {text}");
            assert!(text.contains("file:[]"), "{who:?}: {text}");
            assert!(text.contains("file-is-regular"), "{who:?}: {text}");
            assert!(!text.contains("WROTE"), "{who:?}: {text}");
            assert!(!text.contains("SECRET-KEY"), "{who:?}: {text}");
            let err = stderr(out);
            assert!(
                err.contains("Read-only file system") || err.contains("Permission denied"),
                "{err}"
            );
            // Nothing written vanished: the host copies are untouched.
            assert_file_is(p.root.join("token.txt"), "TOKEN-VALUE\n");
            assert!(!p.root.join("secret/new").exists());
        },
    );
}

#[test]
fn read_only_refuses_and_project_is_writable() {
    bwrap_needed();
    exec_sh_as_each_user(
        "bwrap",
        |_p| {
            "cat docs/readme; echo x > docs/readme || echo RO-REFUSED; \
             echo persisted > out.txt && echo WROTE; mkdir -p build/sub && echo ok > build/sub/f"
                .to_owned()
        },
        |_who, p, out| {
            let text = stdout(out);
            assert!(
                text.contains("docs") && text.contains("RO-REFUSED") && text.contains("WROTE"),
                "{text}"
            );
            assert_file_is(p.root.join("out.txt"), "persisted\n");
            assert_file_is(p.root.join("docs/readme"), "docs\n");
            assert!(p.root.join("build/sub/f").exists());
        },
    );
}

#[test]
fn outside_the_project_is_invisible() {
    bwrap_needed();
    exec_sh_as_each_user(
        "bwrap",
        |p| {
            format!(
                "{}test -e /var/run/docker.sock && echo DOCKER-SOCK; test -e /run/docker.sock && echo DOCKER-SOCK2; \
             test -e /run/containerd/containerd.sock && echo CONTAINERD; \
             ls /root 2>/dev/null | grep -q . && echo ROOT-HOME; exit 0",
                outside_probe(p)
            )
        },
        |who, p, out| {
            assert_eq!(stdout(out), "", "{who:?} saw outside: {}", stderr(out));
            assert!(!p.outside.join("planted").exists());
        },
    );
}

#[test]
fn masks_cannot_be_removed_even_by_root_inside() {
    bwrap_needed();
    exec_sh_as_each_user(
        "bwrap",
        |_p| {
            "umount secret 2>/dev/null && echo UNMOUNTED; umount -l token.txt 2>/dev/null && echo UNMOUNTED2; \
             mount -o remount,rw secret 2>/dev/null && echo REMOUNTED; \
             mv .git .git-away 2>/dev/null && echo GIT-MOVED; mv secret s2 2>/dev/null && echo MASK-MOVED; \
             unshare -U true 2>/dev/null && echo NESTED-USERNS; unshare -Ur true 2>/dev/null && echo NESTED-USERNS2; \
             echo \"[$(ls -A secret)]\"".to_owned()
        },
        |who, p, out| {
            assert_eq!(stdout(out).trim(), "[]", "{who:?}: {}", stderr(out));
            assert!(p.root.join(".git/HEAD").exists());
        },
    );
}

#[test]
fn tmp_is_private_and_outside_processes_are_unreachable() {
    bwrap_needed();
    let marker = format!("/tmp/vibesys-host-marker-{}", std::process::id());
    std::fs::write(&marker, "host").unwrap();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .unwrap();
    exec_sh_as_each_user(
        "bwrap",
        |_p| {
            format!(
                "test -e {marker} && echo HOST-TMP-VISIBLE; echo inside > /tmp/inside-{pid}; \
             kill -0 {sleeper} 2>/dev/null && echo SIGNAL-REACHED; \
             kill -TERM {sleeper} 2>/dev/null && echo SIGNAL-SENT; \
             test -d /proc/{sleeper} && echo PROC-VISIBLE; exit 0",
                pid = std::process::id(),
                sleeper = sleeper.id()
            )
        },
        |who, _p, out| {
            assert_eq!(stdout(out), "", "{who:?}: {}", stderr(out));
            assert!(!std::path::Path::new(&format!("/tmp/inside-{}", std::process::id())).exists());
        },
    );
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "the host process was killed"
    );
    sleeper.kill().unwrap();
    let _ = sleeper.wait();
    let _ = std::fs::remove_file(&marker);
}

#[test]
fn inherited_descriptors_are_not_readable() {
    bwrap_needed();
    for who in users() {
        let p = project(who);
        let secret = p.outside.join("private");
        // The caller holds fd 7 open on a file outside; the confined
        // command must not be able to read it.
        let script = format!(
            "exec 7< '{}'; exec '{}' exec --confine bwrap -- sh -c 'cat <&7 && echo FD-READ; ls /proc/self/fd | tr \"\\n\" \" \"'",
            secret.display(),
            vibesys().display()
        );
        let out = command_as(
            who,
            &p.root,
            std::path::Path::new("/bin/sh"),
            &["-c", &script],
        )
        .output()
        .unwrap();
        assert_code(&out, 0);
        let text = stdout(&out);
        assert!(
            !text.contains("FD-READ") && !text.contains("OUTSIDE-PRIVATE"),
            "{text}"
        );
        assert_eq!(
            text.trim(),
            "0 1 2 3",
            "only stdio (and ls's own dir fd) are open: {text}"
        );
    }
}

#[test]
fn killing_vibesys_kills_the_confined_tree() {
    bwrap_needed();
    for who in users() {
        let p = project(who);
        // sleep accepts a fractional interval: a unique one tags our sleepers.
        let tag = format!("300.{}{}", std::process::id(), who as u8);
        let mut child = exec_sh_command(
            who,
            &p.root,
            "bwrap",
            &format!("sleep {tag} & sleep {tag}; wait"),
        )
        .spawn()
        .unwrap();
        // Wait until the confined sleepers run.
        let deadline = Instant::now() + Duration::from_secs(10);
        while count_processes(&tag) < 2 {
            assert!(Instant::now() < deadline, "confined sleepers never started");
            std::thread::sleep(Duration::from_millis(50));
        }
        // SIGKILL the vibesys process (setpriv execs it, so the pid is vibesys).
        let status = std::process::Command::new("kill")
            .args(["-KILL", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let _ = child.wait();
        let deadline = Instant::now() + Duration::from_secs(5);
        while count_processes(&tag) > 0 {
            assert!(
                Instant::now() < deadline,
                "confined processes survived vibesys"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn count_processes(tag: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| {
                    let c = String::from_utf8_lossy(&c);
                    c.starts_with("sleep") && c.contains(tag)
                })
                .unwrap_or(false)
        })
        .count()
}

#[test]
fn exit_status_passes_through() {
    bwrap_needed();
    let p = project(As::Root);
    assert_code(&exec_sh(As::Root, &p, "bwrap", "exit 7"), 7);
    assert_code(&exec_sh(As::Root, &p, "bwrap", "kill -TERM $$"), 143);
}

#[test]
fn seccomp_denies_ptrace_and_terminal_injection() {
    bwrap_needed();
    require_tool("gcc", "apt-get install gcc");
    let p = project(As::Root);
    let src = p.root.join("probe.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
#include <errno.h>
#include <sys/ptrace.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    errno = 0; long r = ptrace(PTRACE_TRACEME, 0, 0, 0);
    printf("ptrace=%ld errno=%d\n", r, errno);
    char c = 'x'; errno = 0; r = ioctl(0, TIOCSTI, &c);
    printf("tiocsti=%ld errno=%d\n", r, errno);
    errno = 0; r = syscall(SYS_io_uring_setup, 1, 0);
    printf("io_uring=%ld errno=%d\n", r, errno);
    return 0;
}
"#,
    )
    .unwrap();
    let status = std::process::Command::new("gcc")
        .arg("-o")
        .arg(p.root.join("probe"))
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success());
    for who in users() {
        if who == As::User {
            let (uid, gid) = test_user();
            std::process::Command::new("chown")
                .args(["-R", &format!("{uid}:{gid}")])
                .arg(&p.root)
                .status()
                .unwrap();
        }
        let out = exec_sh(who, &p, "bwrap", "./probe");
        assert_code(&out, 0);
        let text = stdout(&out);
        assert!(text.contains("ptrace=-1 errno=1\n"), "{text}");
        assert!(text.contains("tiocsti=-1 errno=1\n"), "{text}");
        assert!(text.contains("io_uring=-1 errno=1\n"), "{text}");
    }
}

#[test]
fn no_network_leaves_only_loopback() {
    bwrap_needed();
    let p = project(As::Root);
    let with = vibesys_as(As::Root, &p.root, &["exec", "--", "cat", "/proc/net/dev"]);
    assert_code(&with, 0);
    let without = vibesys_as(
        As::Root,
        &p.root,
        &["exec", "--no-network", "--", "cat", "/proc/net/dev"],
    );
    assert_code(&without, 0);
    let ifaces = |o: &std::process::Output| -> Vec<String> {
        stdout(o)
            .lines()
            .skip(2)
            .filter_map(|l| l.split(':').next())
            .map(|s| s.trim().to_owned())
            .collect()
    };
    assert_eq!(ifaces(&without), ["lo"], "{}", stdout(&without));
    assert!(
        ifaces(&with).len() > 1,
        "the host network has more than lo: {}",
        stdout(&with)
    );
}
