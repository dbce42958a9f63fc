//! Egress by allow-list under Docker, end to end with the real Engine: the
//! container has `--network none`, the proxy's socket mounted in and the
//! static vibesys as a forwarder in front of the command server. Busybox's
//! wget reaches the listed loopback server through the proxy, is refused
//! the other, and cannot connect directly; the refusal is named on
//! stderr with the process in the container that asked. No bridge, no
//! private-range address: the servers are on the host's loopback, reached
//! by the proxy outside the container. As root and as an unprivileged
//! operator in the `docker` group (the proxy, its socket and the container
//! then all belong to that user).

mod docker_support;

use docker_support::common::loopback_http::Server;
use docker_support::common::{As, chown_to, command_as, docker_users};
use docker_support::{TestImage, require_docker, static_vibesys, unique, vibesys, workspace};

#[test]
fn only_the_listed_host_is_reachable_from_the_container() {
    require_docker();
    let img = TestImage::new();
    for who in docker_users() {
        only_the_listed_host_is_reachable(&img, who);
    }
}

fn only_the_listed_host_is_reachable(img: &TestImage, who: As) {
    let ws = workspace();
    chown_to(who, &[ws.path()]);
    let (allowed, refused) = (Server::start("ALLOWED"), Server::start("FORBIDDEN-BODY"));
    let (a, r) = (allowed.port, refused.port);
    let script = format!(
        "wget -q -O - http://127.0.0.1:{a}/; \
         wget -q -O - http://127.0.0.1:{r}/; echo REFUSED-RC $?; \
         wget -q -Y off -T 3 -O - http://127.0.0.1:{a}/; echo DIRECT-RC $?; \
         echo PROXY=$HTTP_PROXY; echo UID=$(id -u)"
    );
    let out = command_as(who, ws.path(), &docker_support::common::vibesys(), &[])
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_RUN_ID", unique("egress"))
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .env("HTTP_PROXY", "http://192.0.2.1:1")
        .args(["exec", "--confine", "docker", "--image", &img.name])
        .arg("--allow-host")
        .arg(format!("127.0.0.1:{a}"))
        .args(["--", "/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let ctx = format!("as {who:?}\n--- stdout\n{text}\n--- stderr\n{err}");
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    assert!(text.contains(&format!("ALLOWED-{a}\n")), "{ctx}");
    assert!(!text.contains("FORBIDDEN-BODY"), "{ctx}");
    assert_eq!(refused.hits(), 0, "the refused server was reached: {ctx}");
    assert!(!text.contains("REFUSED-RC 0"), "{ctx}");
    assert!(!text.contains("DIRECT-RC 0"), "{ctx}");
    // The container runs as the operator.
    let uid = who.ids().map_or(0, |(uid, _)| uid);
    assert!(text.contains(&format!("UID={uid}\n")), "{ctx}");
    // The caller's own proxy variable does not override the door.
    assert!(text.contains("PROXY=http://127.0.0.1:3128"), "{ctx}");
    // Named with the process in the container that asked.
    let line = format!("vibesys: egress refused: 127.0.0.1:{r} (not in the allow-list) by pid ");
    let named = err
        .lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .unwrap_or_else(|| panic!("no refusal line naming the process: {ctx}"));
    assert!(
        named.ends_with(&format!(": wget -q -O - http://127.0.0.1:{r}/")),
        "{ctx}"
    );
}

/// A session in a container logs its refusals in the run state, with the
/// process that asked; the agent does not see the log's directory.
#[test]
fn a_container_sessions_refusals_go_to_its_log() {
    require_docker();
    let img = TestImage::new();
    let ws = workspace();
    let script = "wget -q -O - http://127.0.0.1:9/; \
        ls -A .vibesys/state/local | sed s/^/SEEN-/; exit 0";
    let out = vibesys(ws.path())
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_RUN_ID", unique("egress-session"))
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .args(["session", "--provider", "custom", "--confine", "docker"])
        .args(["--image", &img.name, "--allow-host", "127.0.0.1:1"])
        .args(["--", "/bin/sh", "-c", script])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let ctx = format!("--- stdout\n{text}\n--- stderr\n{err}");
    assert_eq!(out.status.code(), Some(0), "{ctx}");
    assert!(!text.contains("SEEN-"), "{ctx}");
    let log = err
        .lines()
        .find_map(|l| l.strip_prefix("vibesys: egress refusals of this session are logged to "))
        .unwrap_or_else(|| panic!("no log named: {ctx}"));
    let log = std::fs::read_to_string(log).unwrap();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{log}\n{ctx}");
    assert_eq!(lines[0]["port"], 9, "{log}");
    assert_eq!(
        lines[0]["command"], "wget -q -O - http://127.0.0.1:9/",
        "{log}"
    );
}
