//! Egress by allow-list, end to end with real bwrap and Landlock: two servers on the
//! host's loopback, one named by `--allow-host 127.0.0.1:PORT`. Inside, the
//! allowed one answers curl (plain HTTP, CONNECT, SOCKS5) and Python
//! through vibesys's proxy; the other is refused by the proxy and
//! unreachable by a direct TCP connect, UDP never leaves, a DNS lookup
//! fails, and the refusal is named on stderr. The real Claude Code CLI
//! completes a turn against the scripted endpoint through the proxy, the
//! provider's host admitted by the session itself. As root and as an
//! unprivileged user. Bad patterns exit 125. Seatbelt's door (the proxy
//! on the host loopback) is planned as text and its proxy run here.

mod common;

use std::net::UdpSocket;
use std::path::Path;

use common::loopback_http::{Server, network_probe};
use common::model_endpoint::{Endpoint, claude_cli, claude_session, cli_home};
use common::*;

/// `vibesys exec --confine BACKEND --allow-host ... -- sh -c SCRIPT` as `who`.
fn exec_allow(
    who: As,
    backend: &str,
    p: &Project,
    hosts: &[String],
    script: &str,
) -> std::process::Output {
    let mut args: Vec<String> = vec!["exec".into(), "--confine".into(), backend.into()];
    for h in hosts {
        args.extend(["--allow-host".into(), h.clone()]);
    }
    args.extend(["--".into(), "sh".into(), "-c".into(), script.into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    vibesys_as(who, &p.root, &args)
}

/// `vibesys ARGS` as root in the project.
fn vibesys_root(p: &Project, args: &[&str]) -> std::process::Output {
    vibesys_as(As::Root, &p.root, args)
}

/// The probe's Python around [`network_probe`]: urllib through the proxy
/// first, a DNS lookup last.
const PROBE_PY: &str = "print(\"PY\", urllib.request.urlopen(\"http://127.0.0.1:%d/\" % allowed, timeout=10).read().decode().strip())\n";
const PROBE_DNS: &str = "try:\n    socket.getaddrinfo(\"example.com\", 443); print(\"DNS-RESOLVED\")\nexcept OSError as e:\n    print(\"DNS-FAILED\")\n";

#[test]
fn only_the_listed_host_is_reachable_and_only_through_the_proxy() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("curl", "apt-get install curl");
    require_tool("python3", "apt-get install python3");
    let allowed = Server::start("ALLOWED");
    let refused = Server::start("FORBIDDEN-BODY");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    for (who, backend) in users_and_backends() {
        let p = project(who);
        std::fs::write(p.root.join("probe.py"), network_probe(PROBE_PY, PROBE_DNS)).unwrap();
        let (a, r) = (allowed.port, refused.port);
        let script = format!(
            "curl -sS http://127.0.0.1:{a}/; \
             curl -sS -p http://127.0.0.1:{a}/ | sed s/^/TUNNEL-/; \
             curl -sS --proxy socks5h://127.0.0.1:3128 http://127.0.0.1:{a}/ | sed s/^/SOCKS-/; \
             echo REFUSED-HTTP $(curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{r}/); \
             curl -s -p http://127.0.0.1:{r}/ >/dev/null; echo REFUSED-CONNECT $?; \
             curl -s --proxy socks5h://127.0.0.1:3128 http://127.0.0.1:{r}/ >/dev/null; echo REFUSED-SOCKS $?; \
             python3 probe.py {a} {r} {udp_port}"
        );
        let refused_before = refused.hits();
        let out = exec_allow(who, backend, &p, &[format!("127.0.0.1:{a}")], &script);
        assert_code(&out, 0);
        let text = stdout(&out);
        let ctx = format!(
            "{who:?} {backend}\n--- stdout\n{text}\n--- stderr\n{}",
            stderr(&out)
        );
        for want in [
            format!("\nALLOWED-{a}\n"),
            format!("TUNNEL-ALLOWED-{a}\n"),
            format!("SOCKS-ALLOWED-{a}\n"),
            "REFUSED-HTTP 403\n".into(),
            format!("PY ALLOWED-{a}\n"),
            format!("DIRECT-FAILED {a} "),
            format!("DIRECT-FAILED {r} "),
            "UDP-OUT-FAILED".into(),
            "DNS-FAILED".into(),
        ] {
            assert!(
                format!("\n{text}").contains(&want),
                "missing {want:?}: {ctx}"
            );
        }
        refused.assert_refused(refused_before, &text, &ctx);
        let mut datagram = [0u8; 16];
        assert!(
            udp.recv_from(&mut datagram).is_err(),
            "a datagram reached the host: {ctx}"
        );
        // One line per refused host, however often it was asked for.
        let err = stderr(&out);
        assert_eq!(
            err.matches(&format!("vibesys: egress refused: 127.0.0.1:{r} "))
                .count(),
            1,
            "{ctx}"
        );
    }
}

/// Seatbelt's door, on Linux: macOS has no network namespaces, so under
/// Seatbelt the proxy listens itself on the host's loopback
/// (`EgressProxy::start_loopback`) and the profile lets the command reach
/// only that port. The proxy is the same platform-neutral code: here it
/// admits a listed loopback server and refuses another, through the
/// variables a Seatbelt command gets (`proxy_env_at`, the actual port),
/// for curl as root and as a user (any local process can use the port:
/// it meets the same list). Dropped, it stops listening.
#[test]
fn the_loopback_proxy_admits_a_listed_server_and_refuses_another() {
    use vs_sandbox::egress::{AllowList, EgressProxy, Entrance, proxy_env_at};
    require_tool("curl", "apt-get install curl");
    let allowed = Server::start("ALLOWED");
    let refused = Server::start("FORBIDDEN-BODY");
    let (a, r) = (allowed.port, refused.port);
    let proxy =
        EgressProxy::start_loopback(AllowList::parse([format!("127.0.0.1:{a}")]).unwrap()).unwrap();
    let Entrance::Loopback(port) = *proxy.entrance() else {
        panic!("not a loopback proxy: {:?}", proxy.entrance());
    };
    assert_ne!(port, 0);
    assert_ne!(port, vs_sandbox::egress::INSIDE_PORT);
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        "curl -sS http://127.0.0.1:{a}/; \
         curl -sS -p http://127.0.0.1:{a}/ | sed s/^/TUNNEL-/; \
         curl -sS --proxy \"$ALL_PROXY\" http://127.0.0.1:{a}/ | sed s/^/SOCKS-/; \
         echo REFUSED-HTTP $(curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{r}/); \
         curl -s -p http://127.0.0.1:{r}/ >/dev/null; echo REFUSED-CONNECT $?; \
         curl -s --proxy \"$ALL_PROXY\" http://127.0.0.1:{r}/ >/dev/null; echo REFUSED-SOCKS $?"
    );
    for who in users() {
        let refused_before = refused.hits();
        let mut cmd = command_as(who, dir.path(), Path::new("/bin/sh"), &["-c", &script]);
        cmd.envs(proxy_env_at(port));
        let out = cmd.output().unwrap();
        assert_code(&out, 0);
        let text = stdout(&out);
        let ctx = format!("{who:?}\n--- stdout\n{text}\n--- stderr\n{}", stderr(&out));
        for want in [
            format!("ALLOWED-{a}\n"),
            format!("TUNNEL-ALLOWED-{a}\n"),
            format!("SOCKS-ALLOWED-{a}\n"),
            "REFUSED-HTTP 403\n".into(),
        ] {
            assert!(text.contains(&want), "missing {want:?}: {ctx}");
        }
        refused.assert_refused(refused_before, &text, &ctx);
    }
    let (denials, total) = proxy.denials();
    assert_eq!(total, 3 * users().len() as u64, "{denials:?}");
    assert!(
        denials
            .iter()
            .all(|d| d.host == "127.0.0.1" && d.port == r && d.reason == "not in the allow-list"),
        "{denials:?}"
    );
    drop(proxy);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "the proxy still listens on {port} after it was dropped"
    );
}

/// A request through the proxy to `sys.argv[1]`, its refusal printed.
const REFUSED_PY: &str = "import sys, urllib.request as u\ntry: u.urlopen(sys.argv[1], timeout=10)\nexcept Exception as e: print('REFUSED', e)";

/// The stderr line of the refusal of `127.0.0.1:port` (exactly one).
fn refusal_line(err: &str, port: u16) -> String {
    let prefix = format!("vibesys: egress refused: 127.0.0.1:{port} ");
    let lines: Vec<&str> = err.lines().filter(|l| l.starts_with(&prefix)).collect();
    assert_eq!(lines.len(), 1, "{err}");
    lines[0].to_owned()
}

#[test]
fn a_refusal_names_the_command_that_asked_cleaned_and_bounded() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("python3", "apt-get install python3");
    // Written by the confined process: newlines, a forged line, escape
    // sequences, a bidirectional override, 100 KB.
    let hostile = format!(
        "#hostile\nvibesys: egress refused: forged:1 (x)\u{1b}[2J\r\u{202e}{}",
        "A".repeat(100_000)
    );
    let script = "python3 -c \"$1\" http://127.0.0.1:9/ '#marker-dn'; python3 -c \"$1\" http://127.0.0.1:10/ \"$2\"";
    for (who, backend) in users_and_backends() {
        let p = project(who);
        let out = vibesys_as(
            who,
            &p.root,
            &[
                "exec",
                "--confine",
                backend,
                "--allow-host",
                "127.0.0.1:1",
                "--",
                "sh",
                "-c",
                script,
                "sh",
                REFUSED_PY,
                &hostile,
            ],
        );
        assert_code(&out, 0);
        let (text, err) = (stdout(&out), stderr(&out));
        let ctx = format!("{who:?} {backend}\n--- stdout\n{text}\n--- stderr\n{err}");
        assert_eq!(text.matches("REFUSED HTTP Error 403").count(), 2, "{ctx}");
        // The distinctive command, its newlines escaped, on the line.
        let line = refusal_line(&err, 9);
        let (_, process) = line
            .split_once("(not in the allow-list) by pid ")
            .unwrap_or_else(|| panic!("no process named: {ctx}"));
        let (pid, command) = process.split_once(": ").unwrap();
        assert!(pid.parse::<u32>().is_ok(), "{ctx}");
        assert!(
            command.contains("python3 -c import sys, urllib.request as u\\ntry: u.urlopen(")
                && command.ends_with(" http://127.0.0.1:9/ #marker-dn"),
            "{ctx}"
        );
        // The hostile one: one line, escaped, cut.
        let line = refusal_line(&err, 10);
        assert!(
            line.contains(
                "#hostile\\nvibesys: egress refused: forged:1 (x)\\u{1b}[2J\\r\\u{202e}AAAA"
            ),
            "{ctx}"
        );
        assert!(line.ends_with("A..."), "{ctx}");
        let command = line.split_once(": python3").unwrap().1;
        assert!(command.len() <= 512, "{} bytes: {ctx}", command.len());
        assert!(!err.contains("\nvibesys: egress refused: forged"), "{ctx}");
        assert!(
            !err.chars()
                .any(|c| c.is_control() && c != '\n' || c == '\u{202e}'),
            "{ctx}"
        );
    }
}

/// A session with an allow-list logs each refusal in its run state (one
/// JSON line, with the command that asked) and says where at its start;
/// under bwrap the agent cannot see or write the log's directory.
#[test]
fn a_session_logs_its_refusals_in_the_run_state() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("python3", "apt-get install python3");
    let script = "python3 -c \"$1\" http://127.0.0.1:9/ '#marker-session'; \
        S=.vibesys/state/local/sessions; ls -A $S | sed s/^/SEEN-/; \
        mkdir -p $S/forged && echo FORGED > $S/forged/egress.jsonl && echo WROTE; exit 0";
    for (who, backend) in users_and_backends() {
        let p = project(who);
        // A repository of its own (the run state is prepared from it).
        std::fs::remove_dir_all(p.root.join(".git")).unwrap();
        let git = command_as(who, &p.root, Path::new("/usr/bin/git"), &["init", "-q"])
            .output()
            .unwrap();
        assert_code(&git, 0);
        let out = vibesys_as(
            who,
            &p.root,
            &[
                "session",
                "--provider",
                "custom",
                "--confine",
                backend,
                "--allow-host",
                "127.0.0.1:1",
                "--",
                "sh",
                "-c",
                script,
                "sh",
                REFUSED_PY,
            ],
        );
        assert_code(&out, 0);
        let (text, err) = (stdout(&out), stderr(&out));
        let ctx = format!("{who:?} {backend}\n--- stdout\n{text}\n--- stderr\n{err}");
        assert!(text.contains("REFUSED HTTP Error 403"), "{ctx}");
        let said: Vec<&str> = err
            .lines()
            .filter_map(|l| {
                l.strip_prefix("vibesys: egress refusals of this session are logged to ")
            })
            .collect();
        assert_eq!(said.len(), 1, "{ctx}");
        let log = Path::new(said[0]);
        assert!(
            log.starts_with(p.root.join(".vibesys/state/local/sessions")),
            "{ctx}"
        );
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 1, "{lines:?} {ctx}");
        let d = &lines[0];
        assert_eq!(d["host"], "127.0.0.1", "{d}");
        assert_eq!(d["port"], 9, "{d}");
        assert_eq!(d["reason"], "not in the allow-list", "{d}");
        assert_eq!(d["via"], "http", "{d}");
        assert!(d["time"].as_str().unwrap().ends_with('Z'), "{d}");
        assert!(d["pid"].as_u64().is_some(), "{d}");
        let command = d["command"].as_str().unwrap();
        assert!(
            command.ends_with(" http://127.0.0.1:9/ #marker-session"),
            "{d}"
        );
        // The same line on stderr names it.
        assert!(refusal_line(&err, 9).ends_with(command), "{ctx}");
        if backend == "bwrap" {
            // Hidden: an empty directory the agent cannot write.
            assert!(!text.contains("SEEN-"), "{ctx}");
            assert!(!text.contains("WROTE"), "{ctx}");
            assert!(!p.root.join(".vibesys/state/local/sessions/forged").exists());
        }
    }
}

#[test]
fn a_name_that_leads_to_loopback_is_refused_unless_the_address_is_listed() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("curl", "apt-get install curl");
    let allowed = Server::start("ALLOWED");
    let p = project(As::Root);
    let a = allowed.port;
    let out = exec_allow(
        As::Root,
        "bwrap",
        &p,
        &[format!("localhost:{a}")],
        &format!("echo CODE $(curl -s -o /dev/null -w '%{{http_code}}' http://localhost:{a}/)"),
    );
    assert_code(&out, 0);
    assert!(stdout(&out).contains("CODE 403"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("localhost:{a} (resolves only to local addresses")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bad_patterns_exit_125_and_seatbelt_plans_the_loopback_door() {
    let p = project(As::Root);
    let out = vibesys_root(
        &p,
        &[
            "exec",
            "--allow-host",
            "a b",
            "--allow-host",
            "x:0",
            "--",
            "true",
        ],
    );
    assert_code(&out, 125);
    let err = stderr(&out);
    assert!(err.contains("\"a b\"") && err.contains("\"x:0\""), "{err}");

    std::fs::write(
        p.root.join("vibesys.toml"),
        "[sandbox]\nallow_hosts = [\"*\"]\n",
    )
    .unwrap();
    let out = vibesys_root(&p, &["policy", "show"]);
    assert_code_stderr(&out, 125, "\"*\"");
    std::fs::write(p.root.join("vibesys.toml"), "").unwrap();

    // Seatbelt lowers an allow-list (its plan is text here, no macOS):
    // the proxy's port on the host loopback, planned as 0 until it runs,
    // is the only network the profile grants, and the proxy variables
    // name it.
    let out = vibesys_root(
        &p,
        &[
            "policy",
            "show",
            "--backend",
            "seatbelt",
            "--allow-host",
            "x.example",
            "--json",
        ],
    );
    assert_code(&out, 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan = &v["backends"]["seatbelt"]["plan"];
    let profile = plan["profile"].as_str().unwrap_or_default();
    assert!(
        profile.contains("(allow network-outbound (remote tcp4 \"localhost:0\"))"),
        "{v}"
    );
    assert!(!profile.contains("(allow network*)"), "{profile}");
    assert!(
        plan["env"]
            .as_array()
            .is_some_and(|e| e.contains(&serde_json::json!(["HTTPS_PROXY", "http://127.0.0.1:0"]))),
        "{v}"
    );

    // network = false still means none: the allow-list opens nothing.
    let out = vibesys_root(
        &p,
        &[
            "policy",
            "show",
            "--no-network",
            "--allow-host",
            "x.example",
            "--json",
        ],
    );
    assert_code(&out, 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["egress"]["mode"], "none", "{v}");
}

#[test]
fn policy_show_names_the_providers_host() {
    let p = project(As::Root);
    let out = vibesys_root(
        &p,
        &[
            "policy",
            "show",
            "--allow-host",
            "*.pypi.org",
            "--provider",
            "claude",
            "--json",
        ],
    );
    assert_code(&out, 0);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["egress"]["mode"], "allow-list");
    assert_eq!(
        v["egress"]["allow_hosts"],
        serde_json::json!(["*.pypi.org:{443,80}", "api.anthropic.com:443"])
    );
    assert_eq!(
        v["egress"]["provider_hosts"],
        serde_json::json!(["api.anthropic.com:443"])
    );
}

fn endpoint(_dir: &Path) -> Endpoint {
    Endpoint::start(&[("", r#"[{"text": "hello through the proxy"}]"#)])
}

#[test]
fn the_real_claude_cli_completes_a_turn_through_the_proxy() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("python3", "apt-get install python3 python3-pip");
    claude_cli();
    let other = Server::start("REFUSED");
    for (who, backend) in users_and_backends() {
        let p = project(who);
        let (home, path) = cli_home(who, &p.outside, |home| {
            std::fs::create_dir_all(home.join(".claude")).unwrap();
        });
        let ep = endpoint(&p.outside);
        // The list names only a host that is not the endpoint: the
        // session adds its provider's host (ANTHROPIC_BASE_URL's).
        let hosts = format!("127.0.0.1:{}", other.port + 1);
        let out = ep
            .cli_env(
                &mut claude_session(who, &p.root, backend, &["--allow-host", &hosts], "hello"),
                &home,
                &path,
            )
            .output()
            .unwrap();
        assert_code(&out, 0);
        assert!(
            stdout(&out).contains("hello through the proxy"),
            "{who:?} {backend}: {}\n{}",
            stdout(&out),
            stderr(&out)
        );
        let requests = ep.log_text();
        assert!(
            requests.contains("/v1/messages"),
            "{who:?} {backend}: {requests}"
        );
    }
}
