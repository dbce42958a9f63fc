//! Egress refusals in a run's record: a host run with `run start
//! --allow-host 127.0.0.1:PORT` whose agent reaches the allowed server and
//! is refused another; the candidate's record lists the refusal (`run
//! status --json`) and the table counts it. Real bwrap and git.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker_support;
mod run_support;

use std::io::{Read, Write};
use std::net::TcpListener;

use run_support::*;

/// A loopback HTTP server answering `OK-<port>`.
fn server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in listener.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let body = format!("OK-{port}\n");
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

#[test]
fn refused_hosts_are_in_the_candidates_record() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("curl", "apt-get install curl");
    let (allowed, refused) = (server(), server());
    let (_d, p) = project(TASK);
    let agent = format!(
        "curl -sS http://127.0.0.1:{allowed}/ > reached.txt; curl -s http://127.0.0.1:{refused}/ >/dev/null; exit 0"
    );
    let out = vibesys_in(&p)
        .args(["run", "start", "--run-environment", "host"])
        .args(["--provider", "custom", "--allow-host"])
        .arg(format!("127.0.0.1:{allowed}"))
        .args(["--", "sh", "-c", &agent])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let run = only_run(&p);
    let status = status_json(&p, &run, &[]);
    let c = candidate(&status, 1);
    assert_eq!(c["agent_exit"], 0, "{status}");
    let denials = c["egress_denials"].as_array().cloned().unwrap_or_default();
    assert_eq!(denials.len(), 1, "{status}");
    assert_eq!(denials[0]["host"], "127.0.0.1");
    assert_eq!(denials[0]["port"], refused);
    assert_eq!(denials[0]["reason"], "not in the allow-list");
    assert!(denials[0]["time"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        status["run"]["allow_hosts"],
        serde_json::json!([format!("127.0.0.1:{allowed}")])
    );
    let text = ok(vibesys_in(&p).args(["run", "status"]).output().unwrap());
    assert!(text.contains("[egress refused 1]"), "{text}\n{table}");
}
