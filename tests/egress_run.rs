//! Egress refusals in a run's record: a host run with `run start
//! --allow-host 127.0.0.1:PORT` whose agent reaches the allowed server and
//! is refused another; the candidate's record lists the refusal (`run
//! status --json`) and the table counts it. Real bwrap and git.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod docker_support;
mod run_support;

use docker_support::common::loopback_http::Server;
use run_support::*;

#[test]
fn refused_hosts_are_in_the_candidates_record() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("curl", "apt-get install curl");
    let (allowed_server, refused_server) = (Server::start("OK"), Server::start("OK"));
    let (allowed, refused) = (allowed_server.port, refused_server.port);
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
    // The allowed host was reached, the refused one never was.
    assert!(allowed_server.hits() > 0, "{status}");
    assert_eq!(refused_server.hits(), 0, "{status}");
    let text = ok(vibesys_in(&p).args(["run", "status"]).output().unwrap());
    assert!(text.contains("[egress refused 1]"), "{text}\n{table}");
}
