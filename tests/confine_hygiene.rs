//! End-to-end process hygiene of both host backends, with the real
//! kernel, as root and as an unprivileged user: no capabilities, no
//! terminal injection, no reachable Unix sockets outside the project,
//! `--no-network` that holds for TCP, MPTCP and UDP, nothing left behind,
//! and a bounded number of processes.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;

const BACKENDS: [&str; 2] = ["landlock", "bwrap"];

/// The C probes, compiled once (gcc is what CI installs for them).
fn probes() -> &'static (PathBuf, PathBuf) {
    static BIN: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    BIN.get_or_init(|| {
        require_tool("gcc", "apt-get install gcc libc6-dev");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("hygiene-probes");
        std::fs::create_dir_all(&dir).unwrap();
        let src = common::tests_dir().join("hygiene");
        let build = |name: &str, extra: &[&str]| {
            let out = dir.join(format!("{name}-{}", std::process::id()));
            let status = Command::new("gcc")
                .arg("-O1")
                .arg("-o")
                .arg(&out)
                .arg(src.join(format!("{name}.c")))
                .args(extra)
                .status()
                .unwrap();
            assert!(status.success(), "gcc {name}.c failed");
            out
        };
        (build("probe", &[]), build("ptydrive", &["-lutil"]))
    })
}

/// A project whose probe copy lies inside it (Landlock grants reads
/// there; bwrap binds it), with `extra` appended to `[sandbox]`.
fn hygiene_project(who: As, extra: &str) -> (Project, PathBuf) {
    let p = project(who);
    let probe = p.root.join("probe");
    std::fs::copy(&probes().0, &probe).unwrap();
    let toml = std::fs::read_to_string(p.root.join("vibesys.toml")).unwrap();
    std::fs::write(p.root.join("vibesys.toml"), format!("{toml}{extra}")).unwrap();
    if who == As::User {
        let (uid, gid) = test_user();
        let status = Command::new("chown")
            .args([&format!("{uid}:{gid}"), probe.to_str().unwrap()])
            .arg(p.root.join("vibesys.toml"))
            .status()
            .unwrap();
        assert!(status.success());
    }
    (p, probe)
}

fn exec(who: As, p: &Project, backend: &str, flags: &[&str], script: &str) -> std::process::Output {
    let mut args = vec!["exec", "--confine", backend];
    args.extend(flags);
    args.extend(["--", "sh", "-c", script]);
    vibesys_as(who, &p.root, &args)
}

/// Asserts that the probe's fork loop in `out` stopped below a limit of
/// 24 processes, refused with EAGAIN.
fn assert_stopped_at_24(backend: &str, who: As, out: &std::process::Output) {
    let text = stdout(out);
    let forked: usize = text
        .split_once("forked=")
        .and_then(|(_, r)| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{backend} {who:?}: {text}\n{}", stderr(out)));
    assert!(
        forked > 0 && forked < 24,
        "{backend} {who:?}: {forked} processes started under a limit of 24: {text}"
    );
    assert!(text.contains("errno=11"), "{backend} {who:?}: {text}");
}

/// Asserts that the `Cap*:` lines of /proc/self/status in `out` are all
/// empty for each of `caps`.
fn assert_no_caps(backend: &str, who: As, out: &std::process::Output, caps: &[&str]) {
    let text = stdout(out);
    for cap in caps {
        assert!(
            text.contains(&format!("{cap}:\t0000000000000000")),
            "{backend} {who:?}: {cap} not empty:\n{text}\n{}",
            stderr(out)
        );
    }
}

#[test]
fn no_capabilities_and_privileged_operations_fail() {
    for backend in BACKENDS {
        for who in users() {
            let (p, _) = hygiene_project(who, "");
            let out = exec(
                who,
                &p,
                backend,
                &[],
                "grep -E '^Cap(Eff|Prm|Bnd|Inh|Amb):' /proc/self/status; \
                 hostname vibesys-pwned 2>/dev/null && echo HOSTNAME-CHANGED; \
                 ip addr add 10.254.254.254/32 dev lo 2>/dev/null && echo IP-ADDED; \
                 mknod ./blk b 7 0 2>/dev/null && echo MKNOD; \
                 exit 0",
            );
            assert_code(&out, 0);
            assert_no_caps(
                backend,
                who,
                &out,
                &["CapEff", "CapPrm", "CapBnd", "CapInh", "CapAmb"],
            );
            let text = stdout(&out);
            for bad in ["HOSTNAME-CHANGED", "IP-ADDED", "MKNOD"] {
                assert!(!text.contains(bad), "{backend} {who:?}: {text}");
            }
            assert!(!p.root.join("blk").exists());
        }
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_ne!(host.trim(), "vibesys-pwned");
}

#[test]
fn unix_sockets_outside_the_project_do_not_answer() {
    let docker = Path::new("/var/run/docker.sock");
    assert!(
        docker.exists(),
        "this test needs the Docker Engine's socket at {} (start the Docker Engine)",
        docker.display()
    );
    for backend in BACKENDS {
        for who in users() {
            let (p, probe) = hygiene_project(who, "");
            // A socket of our own outside the project, open to everyone
            // (the D-Bus system bus is mode 0666 too).
            let path = p.outside.join("bus.sock");
            let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).unwrap();
            listener.set_nonblocking(true).unwrap();
            let script = format!(
                "{probe} unix {docker}; {probe} unix {bus}",
                probe = probe.display(),
                docker = docker.display(),
                bus = path.display()
            );
            let out = exec(who, &p, backend, &[], &script);
            assert_code(&out, 0);
            let text = stdout(&out);
            assert!(
                !text.contains("unix=ok"),
                "{backend} {who:?}: a socket outside answered:\n{text}"
            );
            assert_eq!(text.lines().count(), 2, "{text}\n{}", stderr(&out));
            assert!(listener.accept().is_err(), "{backend} {who:?}: connected");
        }
    }
    // The check is meaningful: unconfined root reaches the Engine.
    if is_root() {
        let (p, probe) = hygiene_project(As::Root, "");
        let out = Command::new(&probe)
            .args(["unix", docker.to_str().unwrap()])
            .current_dir(&p.root)
            .output()
            .unwrap();
        assert!(stdout(&out).contains("answered=HTTP/"), "{}", stdout(&out));
    }
}

#[test]
fn terminal_injection_fails_on_an_inherited_pty() {
    let ptydrive = &probes().1;
    for backend in BACKENDS {
        for who in users() {
            let (p, probe) = hygiene_project(who, "");
            let vibesys = vibesys();
            let out = command_as(
                who,
                &p.root,
                ptydrive,
                &[
                    vibesys.to_str().unwrap(),
                    "exec",
                    "--confine",
                    backend,
                    "--",
                    "sh",
                    "-c",
                    &format!("{} tiocsti; sleep 0.2", probe.display()),
                ],
            )
            .output()
            .unwrap();
            let text = stdout(&out);
            assert!(
                text.contains("status=0 pending=0 read=[]"),
                "{backend} {who:?}: something was injected:\n{text}\n{}",
                stderr(&out)
            );
            assert!(
                text.contains("tiocsti=") && !text.contains("tiocsti=ok"),
                "{text}"
            );
        }
    }
    // The check is meaningful: unconfined root injects.
    if is_root() {
        let (p, probe) = hygiene_project(As::Root, "");
        let out = Command::new(ptydrive)
            .args([probe.to_str().unwrap(), "tiocsti"])
            .current_dir(&p.root)
            .output()
            .unwrap();
        assert!(stdout(&out).contains("INJECTED"), "{}", stdout(&out));
    }
}

#[test]
fn no_network_refuses_tcp_mptcp_and_udp_to_the_host() {
    for backend in BACKENDS {
        for who in users() {
            let (p, probe) = hygiene_project(who, "");
            let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            tcp.set_nonblocking(true).unwrap();
            udp.set_nonblocking(true).unwrap();
            let script = format!(
                "{} net {} {}",
                probe.display(),
                tcp.local_addr().unwrap().port(),
                udp.local_addr().unwrap().port()
            );
            let out = exec(who, &p, backend, &["--no-network"], &script);
            assert_code(&out, 0);
            let text = stdout(&out);
            // bwrap's private network namespace has a loopback of its own
            // (UDP "connects" there, reaching nothing); under Landlock every
            // socket but TCP is refused outright.
            let refused: &[&str] = if backend == "landlock" {
                &[
                    "tcp",
                    "mptcp",
                    "udp",
                    "udp_connect",
                    "raw",
                    "ipv6_udp",
                    "netlink",
                    "listen",
                ]
            } else {
                &["tcp", "mptcp"]
            };
            for attempt in refused {
                assert!(
                    text.contains(&format!("{attempt}="))
                        && !text.contains(&format!("{attempt}=ok")),
                    "{backend} {who:?}: {attempt} was allowed:\n{text}\n{}",
                    stderr(&out)
                );
            }
            assert!(
                tcp.accept().is_err(),
                "{backend} {who:?}: TCP reached the host"
            );
            let mut buf = [0u8; 16];
            assert!(
                udp.recv_from(&mut buf).is_err(),
                "{backend} {who:?}: UDP reached the host"
            );
        }
    }
}

/// Cgroups a vibesys process created for its runs, where they would be.
fn run_cgroups(pid: u32) -> Vec<PathBuf> {
    let prefix = format!("vibesys-{pid}-");
    [
        "/sys/fs/cgroup",
        "/sys/fs/cgroup/pids",
        "/sys/fs/cgroup/unified",
    ]
    .iter()
    .filter_map(|d| std::fs::read_dir(d).ok())
    .flat_map(|r| r.filter_map(|e| e.ok()))
    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
    .map(|e| e.path())
    .collect()
}

/// Live `sleep TAG` processes (not the shells or launchers whose command
/// lines merely mention the tag).
fn tagged_processes(tag: &str) -> usize {
    let want = format!("sleep\0{tag}\0");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).ends_with(&want))
                .unwrap_or(false)
        })
        .count()
}

#[test]
fn background_processes_die_with_the_run() {
    for backend in BACKENDS {
        for who in users() {
            let (p, _) = hygiene_project(who, "");
            let tag = format!("41.{}{}{}", std::process::id(), who as u8, backend.len());
            let out = exec(
                who,
                &p,
                backend,
                &[],
                &format!(
                    "setsid sleep {tag} & (sleep {tag} &) ; nohup sleep {tag} >/dev/null 2>&1 & exit 0"
                ),
            );
            assert_code(&out, 0);
            assert_eq!(
                tagged_processes(&tag),
                0,
                "{backend} {who:?}: processes outlived vibesys"
            );
        }
    }
}

#[test]
fn a_fork_loop_stops_at_the_limit() {
    for backend in BACKENDS {
        for who in users() {
            let (p, probe) = hygiene_project(who, "max_processes = 24\n");
            let out = exec(
                who,
                &p,
                backend,
                &[],
                &format!("{} fork 200", probe.display()),
            );
            assert_code(&out, 0);
            assert_stopped_at_24(backend, who, &out);
            // The host keeps working, and nothing of the loop is left.
            assert!(Command::new("true").status().unwrap().success());
            let doctor = vibesys_as(who, &p.root, &["doctor", "--json"]);
            let s = stdout(&doctor);
            assert!(s.contains("\"processes\""), "{s}");
        }
    }
}

#[test]
fn terminating_or_killing_vibesys_ends_the_whole_tree() {
    for signal in ["TERM", "KILL"] {
        for backend in BACKENDS {
            for who in users() {
                let (p, _) = hygiene_project(who, "");
                let tag = format!(
                    "42.{}{}{}{}",
                    std::process::id(),
                    who as u8,
                    backend.len(),
                    signal.len()
                );
                let mut child = exec_sh_command(
                    who,
                    &p.root,
                    backend,
                    &format!("setsid sleep {tag} & sleep {tag}; wait"),
                )
                .spawn()
                .unwrap();
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                while tagged_processes(&tag) < 2 {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "sleepers never started"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                // setpriv execs vibesys, so the pid is vibesys's.
                let status = Command::new("kill")
                    .args([&format!("-{signal}"), &child.id().to_string()])
                    .status()
                    .unwrap();
                assert!(status.success());
                let status = child.wait().unwrap();
                if signal == "TERM" {
                    assert_eq!(status.code(), Some(128 + 15), "{backend} {who:?}");
                }
                let pid = child.id();
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
                while tagged_processes(&tag) > 0 || !run_cgroups(pid).is_empty() {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{backend} {who:?}: processes or cgroups {:?} outlived vibesys (SIG{signal})",
                        run_cgroups(pid)
                    );
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        }
    }
}

/// The binary vibesys ships is the static (musl) build, whose allocator is
/// not the one of the glibc build the tests above run (dlmalloc: see
/// `ALLOCATOR` in main.rs); the launch forks and clones from it. The same
/// guarantees, with that binary, in one run per backend and user: no
/// capabilities, nothing left behind, and a fork loop stopped at the
/// limit.
#[test]
fn the_static_binary_holds_the_same_guarantees() {
    let bin = static_vibesys();
    for backend in BACKENDS {
        for who in users() {
            let (p, probe) = hygiene_project(who, "max_processes = 24\n");
            let tag = format!("43.{}{}{}", std::process::id(), who as u8, backend.len());
            let script = format!(
                "grep -E '^Cap(Eff|Prm|Bnd):' /proc/self/status; \
                 setsid sleep {tag} & nohup sleep {tag} >/dev/null 2>&1 & \
                 {} fork 200; exit 0",
                probe.display()
            );
            let out = command_as(
                who,
                &p.root,
                &bin,
                &["exec", "--confine", backend, "--", "sh", "-c", &script],
            )
            .output()
            .unwrap();
            assert_code(&out, 0);
            assert_no_caps(backend, who, &out, &["CapEff", "CapPrm", "CapBnd"]);
            assert_stopped_at_24(backend, who, &out);
            assert_eq!(
                tagged_processes(&tag),
                0,
                "{backend} {who:?}: processes outlived the static vibesys"
            );
        }
    }
}
