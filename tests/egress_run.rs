//! Egress refusals in a run's record: a host run with `run start
//! --allow-host 127.0.0.1:PORT` whose agent reaches the allowed server and
//! is refused another; the candidate's record lists the refusal with the
//! command that asked (`run status --json`) and the table counts it. Real
//! bwrap, Landlock and git, as root and as an unprivileged user.

mod docker_support;
mod run_support;

use docker_support::common::loopback_http::Server;
use docker_support::common::{landlock_safe_dir, vibesys};
use run_support::*;

#[test]
fn refused_hosts_are_in_the_candidates_record() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("curl", "apt-get install curl");
    let (allowed_server, refused_server) = (Server::start("OK"), Server::start("OK"));
    let (allowed, refused) = (allowed_server.port, refused_server.port);
    let base = landlock_safe_dir().join("egress-run");
    std::fs::create_dir_all(&base).unwrap();
    for who in users() {
        for backend in ["bwrap", "landlock"] {
            let (d, p) = project_in(&base, TASK);
            give_to(who, &d, &p);
            let run_as = |args: &[&str]| {
                command_as(who, &p, &vibesys(), args)
                    .env("VIBESYS_AGENT_SANDBOX", backend)
                    .output()
                    .unwrap()
            };
            // The refused request made by a distinctive command line.
            let agent = format!(
                "curl -sS http://127.0.0.1:{allowed}/ > reached.txt; curl -s -H X-Marker:run-denial http://127.0.0.1:{refused}/ >/dev/null; exit 0"
            );
            let allow = format!("127.0.0.1:{allowed}");
            let out = run_as(&host_run_args(&["--allow-host", &allow], &agent));
            let table = String::from_utf8_lossy(&out.stdout).into_owned();
            let run = only_run(&p);
            // Root's git refuses a repository another user owns: read as
            // its owner.
            let status: serde_json::Value =
                serde_json::from_str(&ok(run_as(&["run", "status", &run, "--json"]))).unwrap();
            let ctx = format!("{who:?} {backend}: {status}\n{table}\n{}", stderr(&out));
            // The backend asked for is the one that ran.
            if backend == "landlock" {
                assert!(stderr(&out).contains("landlock: NOT ENFORCED"), "{ctx}");
            }
            let c = candidate(&status, 1);
            assert_eq!(c["agent_exit"], 0, "{ctx}");
            let denials = c["egress_denials"].as_array().cloned().unwrap_or_default();
            assert_eq!(denials.len(), 1, "{ctx}");
            assert_eq!(denials[0]["host"], "127.0.0.1");
            assert_eq!(denials[0]["port"], refused);
            assert_eq!(denials[0]["reason"], "not in the allow-list");
            assert!(denials[0]["time"].as_str().unwrap().ends_with('Z'));
            assert!(denials[0]["pid"].as_u64().is_some(), "{ctx}");
            assert_eq!(
                denials[0]["command"],
                format!("curl -s -H X-Marker:run-denial http://127.0.0.1:{refused}/"),
                "{ctx}"
            );
            assert_eq!(
                status["run"]["allow_hosts"],
                serde_json::json!([format!("127.0.0.1:{allowed}")])
            );
            // The allowed host was reached, the refused one never was.
            assert!(allowed_server.hits() > 0, "{ctx}");
            assert_eq!(refused_server.hits(), 0, "{ctx}");
            let text = ok(run_as(&["run", "status"]));
            assert!(text.contains("[egress refused 1]"), "{text}\n{ctx}");
        }
    }
}
