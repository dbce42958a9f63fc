//! The real Claude Code CLI (the pinned claude-agent-sdk wheel's, from
//! scripts/claude-cli.sh) doing whole turns under vibesys: `session
//! --prompt` and `run start --provider claude`, confined by bubblewrap and
//! by Landlock, as root and as an unprivileged user. The model is
//! scripts/model-endpoint.py on loopback, playing scripted tool calls
//! (Read, Edit, Write, Bash) that the CLI executes itself, confined. Every
//! request it received is checked: nothing of a hidden path reached it.
//! The provider's own permission prompts and sandbox are off as agentshim's
//! table says (`--dangerously-skip-permissions`, `IS_SANDBOX=1`): the
//! tools run without a prompt, as root too. The real Codex CLI
//! (scripts/codex-cli.sh) does the same through the endpoint's Responses API.
//!
//! The CLI in Docker is tested in tests/real_cli_docker.rs (through the
//! allow-list's door, as root and as a `docker` group operator) and
//! tests/debian_images.rs, where the agent image is built and loaded.

mod docker_support;
mod run_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use docker_support::common::model_endpoint::{Endpoint, claude_cli, codex_cli};
use docker_support::common::*;

impl Endpoint {
    /// The logged requests that played a script.
    fn turns(&self) -> Vec<serde_json::Value> {
        self.log_text()
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|e| e.get("script").is_some())
            .collect()
    }

    /// What the CLI sent back for each tool call, in the last request of
    /// the conversation whose working directory ends with `cwd_suffix`.
    fn tool_results(&self, cwd_suffix: &str) -> Vec<String> {
        let turns = self.turns();
        let last = turns
            .iter()
            .rfind(|e| cwd_of(e).is_some_and(|c| c.ends_with(cwd_suffix)))
            .unwrap_or_else(|| panic!("no turn in *{cwd_suffix}: {}", self.log_text()));
        let mut out = Vec::new();
        for m in last["body"]["messages"].as_array().unwrap() {
            let Some(blocks) = m["content"].as_array() else {
                continue;
            };
            for b in blocks {
                if b["type"] == "tool_result" {
                    out.push(match &b["content"] {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    });
                }
            }
        }
        out
    }
}

/// The working directory a logged request's prompt names.
fn cwd_of(entry: &serde_json::Value) -> Option<String> {
    fn strings<'a>(v: &'a serde_json::Value, out: &mut Vec<&'a str>) {
        match v {
            serde_json::Value::String(s) => out.push(s),
            serde_json::Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
            serde_json::Value::Object(o) => o.values().for_each(|v| strings(v, out)),
            _ => {}
        }
    }
    let mut all = Vec::new();
    strings(&entry["body"], &mut all);
    all.iter().find_map(|s| {
        s.lines().find_map(|l| {
            l.trim_start_matches([' ', '-'])
                .strip_prefix("Primary working directory: ")
                .map(|c| c.trim().to_owned())
        })
    })
}

const SECRET: &str = "sk-real-cli-hidden-4242";

/// A committed project outside /tmp (Landlock accepts it), owned by `who`:
/// run_support's sample (the demo's task, no run state), a hidden key that
/// is untracked (so absent from worktrees), and the CLI's home beside it.
struct Project {
    root: PathBuf,
    home: PathBuf,
    _project: tempfile::TempDir,
    _base: tempfile::TempDir,
}

fn project(who: As) -> Project {
    let base_dir = landlock_safe_dir().join("real-cli");
    std::fs::create_dir_all(&base_dir).unwrap();
    let base = tempfile::Builder::new()
        .prefix("proj")
        .tempdir_in(&base_dir)
        .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (project, root) = run_support::unprepared_project_in(base.path(), run_support::TASK);
    std::fs::write(root.join("secrets/api.env"), format!("API_KEY={SECRET}\n")).unwrap();
    let home = base.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    chown_to(who, &[&root, &home]);
    Project {
        root,
        home,
        _project: project,
        _base: base,
    }
}

/// vibesys as `who` in the project, the CLI on PATH and allowed in the
/// sandbox, pointed at the endpoint.
fn vibesys_with_cli(who: As, p: &Project, endpoint: &Endpoint, backend: &str) -> Command {
    let cli_dir = claude_cli().parent().unwrap();
    let mut c = command_as(who, &p.root, &vibesys(), &[]);
    c.env(
        "PATH",
        format!("{}:/usr/local/bin:/usr/bin:/bin", cli_dir.display()),
    )
    .env("HOME", &p.home)
    .env("VIBESYS_AGENT_SANDBOX", backend)
    .env("VIBESYS_AGENT_SANDBOX_ALLOW", cli_dir)
    .env("ANTHROPIC_BASE_URL", endpoint.url())
    .env("ANTHROPIC_API_KEY", "test-not-a-key");
    c
}

/// The session's script: the provider table's flags seen from inside (the
/// CLI's own argv and IS_SANDBOX), a file written through Bash, the hidden
/// key tried through Read and Bash.
const SESSION_SCRIPT: &str = r#"[
  {"tool": "Bash", "input": {"command": "tr '\\0' ' ' </proc/$PPID/cmdline; echo; echo IS_SANDBOX=$IS_SANDBOX; echo made-by-claude > made.txt"}},
  {"tool": "Read", "input": {"file_path": "{cwd}/secrets/api.env"}},
  {"tool": "Bash", "input": {"command": "cat secrets/api.env; ls -A secrets; echo listed"}},
  {"text": "session done"}
]"#;

fn session_turn(who: As, backend: &str) {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("setpriv", "apt-get install util-linux");
    let p = project(who);
    let endpoint = Endpoint::start(&[("", SESSION_SCRIPT)]);
    let out = vibesys_with_cli(who, &p, &endpoint, backend)
        .args(["session", "--provider", "claude", "--confine", backend])
        .args(["--prompt", "write made.txt"])
        .output()
        .unwrap();
    let text = ok_out(&out, who, backend);
    assert!(text.contains("session done"), "{who:?} {backend}: {text}");
    assert_eq!(
        std::fs::read_to_string(p.root.join("made.txt")).unwrap(),
        "made-by-claude\n",
        "{who:?} {backend}: the Bash tool ran without a prompt"
    );
    let results = endpoint.tool_results("");
    assert_eq!(results.len(), 3, "{who:?} {backend}: {results:#?}");
    // The provider table: its own approvals and sandbox off.
    assert!(
        results[0].contains("--dangerously-skip-permissions"),
        "{who:?} {backend}: {}",
        results[0]
    );
    assert!(
        results[0].contains("IS_SANDBOX=1"),
        "{who:?} {backend}: {}",
        results[0]
    );
    // The hidden directory is empty in the sandbox (bwrap); Landlock does
    // not enforce hidden paths (documented), so only bwrap is asserted.
    if backend == "bwrap" {
        assert!(
            results[2].contains("listed") && !results[2].contains("api.env\n"),
            "{who:?} {backend}: {}",
            results[2]
        );
        assert!(
            !endpoint.log_text().contains(SECRET),
            "{who:?} {backend}: the hidden key reached the model endpoint"
        );
    }
}

fn ok_out(out: &Output, who: As, backend: &str) -> String {
    assert!(
        out.status.success(),
        "{who:?} {backend}: vibesys failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_session_of_the_real_cli_under_bwrap_as_root_and_as_a_user() {
    for who in users() {
        session_turn(who, "bwrap");
    }
}

#[test]
fn a_session_of_the_real_cli_under_landlock_as_root_and_as_a_user() {
    for who in users() {
        session_turn(who, "landlock");
    }
}

/// Two candidates, each a real turn: the demo's scripts (honest edits the
/// benchmark through Read, Edit, Bash; the cheater tries the evaluator,
/// the hidden key in its worktree and in the project, and the golden
/// output). The run prepares its own state (the project has none).
fn run_two_candidates(who: As, backend: &str) {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("setpriv", "apt-get install util-linux");
    let p = project(who);
    let demo = repo_root().join("scripts/demo");
    let honest = std::fs::read_to_string(demo.join("honest.json")).unwrap();
    let cheat = std::fs::read_to_string(demo.join("cheat.json")).unwrap();
    let endpoint = Endpoint::start(&[("cwd:/1", &honest), ("cwd:/2", &cheat)]);
    let out = vibesys_with_cli(who, &p, &endpoint, backend)
        .args(["run", "start", "--run-environment", "host"])
        .args(["--provider", "claude", "--candidates", "2", "--jobs", "2"])
        .args(["--prompt", "make bench/run.sh faster"])
        .output()
        .unwrap();
    let table = ok_out(&out, who, backend);
    let run = run_support::only_run(&p.root);
    let status = vibesys_as(who, &p.root, &["run", "status", &run, "--json"]);
    let status: serde_json::Value = serde_json::from_str(&ok_out(&status, who, backend)).unwrap();
    let cand = |n| run_support::candidate(&status, n);
    let (honest, cheat) = (cand(1), cand(2));
    assert_eq!(honest["state"], "passed", "{who:?} {backend}: {table}");
    assert_eq!(honest["metrics"]["time_ms"], 7, "{honest:#}");
    assert_eq!(cheat["state"], "failed", "{who:?} {backend}: {table}");
    assert_eq!(cheat["phases"]["gate"]["status"], "failed", "{cheat:#}");
    assert!(
        cheat["error"]
            .as_str()
            .unwrap()
            .contains("changed tests/golden/expected.txt"),
        "{cheat:#}"
    );
    // The honest edit went through the CLI's Edit tool.
    let results = endpoint.tool_results("/1");
    assert!(
        results[1].contains("has been updated successfully"),
        "{results:#?}"
    );
    // The cheater's tool calls: the evaluator is read-only under bwrap
    // (Landlock leaves it writable, the gate catches it); no key anywhere.
    let results = endpoint.tool_results("/2");
    if backend == "bwrap" {
        assert!(results[1].contains("read-only file system"), "{results:#?}");
    }
    // The project's own key, six levels above the worktree
    // (.vibesys/state/local/candidates/RUN/2): absent under bwrap,
    // refused under Landlock.
    assert!(
        (results[4].contains("No such file or directory")
            || results[4].contains("Permission denied"))
            && !results[4].contains("API_KEY"),
        "the project's own secrets/ is not in reach: {results:#?}"
    );
    assert!(
        !endpoint.log_text().contains(SECRET),
        "{who:?} {backend}: the hidden key reached the model endpoint"
    );
    // The project itself is untouched.
    assert_file_is(p.root.join("tests/golden/expected.txt"), "42\n");
    assert_file_is(p.root.join("bench/run.sh"), "echo 42\n");
}

#[test]
fn run_start_with_the_real_cli_under_bwrap_as_root_and_as_a_user() {
    for who in users() {
        run_two_candidates(who, "bwrap");
    }
}

#[test]
fn run_start_with_the_real_cli_under_landlock_as_root_and_as_a_user() {
    for who in users() {
        run_two_candidates(who, "landlock");
    }
}

/// One raw HTTP/1.1 request to the endpoint; the status line and body.
fn http(port: u16, request: &[u8]) -> (String, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The endpoint may answer (and close) before the whole body is sent.
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
        let text = String::from_utf8_lossy(&out);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if body.len() >= len {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    )
}

/// The endpoint itself, attacked: it refuses any address but loopback,
/// refuses a body over its bound before reading it, answers probes and
/// auxiliary requests harmlessly, and fails loudly on a request no script
/// matches.
#[test]
fn the_model_endpoint_listens_on_loopback_only_and_bounds_requests() {
    require_tool("python3", "apt-get install python3");
    let script = repo_root().join("scripts/model-endpoint.py");
    for host in [
        "0.0.0.0",
        "10.0.0.1",
        "::",
        "localhost.example",
        "192.168.1.1",
    ] {
        let out = Command::new("python3")
            .arg(&script)
            .args(["--host", host, "--port", "0"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--host {host}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("not a loopback address"),
            "--host {host}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let endpoint = Endpoint::start(&[("only-this", r#"[{"text": "hello"}]"#)]);
    let port = endpoint.port;
    // Over the bound (16 MiB by default): refused from the header alone.
    let (status, body) = http(
        port,
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n{}",
    );
    assert!(status.contains(" 413 "), "{status} {body}");
    assert!(body.contains("request_too_large"), "{body}");
    let (status, _) = http(
        port,
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    );
    assert!(status.contains(" 413 "), "{status}");
    // Probes and auxiliary requests: harmless answers.
    let (status, body) = http(port, b"GET /api/hello HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(body, "{}");
    let count = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
    let mut req = format!(
        "POST /v1/messages/count_tokens HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        count.len()
    )
    .into_bytes();
    req.extend_from_slice(count);
    let (status, body) = http(port, &req);
    assert!(
        status.contains(" 200 ") && body.contains("input_tokens"),
        "{status} {body}"
    );
    let aux = br#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"title"}]}"#;
    let mut req = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        aux.len()
    )
    .into_bytes();
    req.extend_from_slice(aux);
    let (status, body) = http(port, &req);
    assert!(
        status.contains(" 200 ") && body.contains("\"ok\""),
        "{status} {body}"
    );
    // A turn (tools offered) that matches no script: a loud 400.
    let turn = br#"{"model":"m","max_tokens":5,"tools":[{"name":"Bash"}],"messages":[{"role":"user","content":"other"}]}"#;
    let mut req = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
        turn.len()
    )
    .into_bytes();
    req.extend_from_slice(turn);
    let (status, body) = http(port, &req);
    assert!(
        status.contains(" 400 ") && body.contains("no --script matches"),
        "{status} {body}"
    );
    // Garbage is an error, never a crash: the endpoint still answers.
    let (status, _) = http(
        port,
        b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n\xff\xfe{",
    );
    assert!(status.contains(" 400 "), "{status}");
    let (status, _) = http(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(status.contains(" 200 "), "{status}");
    // Every request is in the log, one JSON line each.
    let lines = endpoint.log_text().lines().count();
    assert!(lines >= 6, "{}", endpoint.log_text());
}

/// Codex's turn through the Responses API: its one tool is a JavaScript
/// `exec` cell that calls `tools.exec_command`; it shows the CLI's own argv
/// (the provider table's flag), writes a file, and tries the hidden key.
const CODEX_SCRIPT: &str = r#"[
  {"tool": "exec", "input": "const r = await tools.exec_command({cmd: \"tr '\\\\0' ' ' </proc/$PPID/cmdline; echo; echo made-by-codex > made.txt; cat secrets/api.env; ls -A secrets; echo listed\"}); text(JSON.stringify(r));"},
  {"text": "codex session done"}
]"#;

fn codex_session(who: As, backend: &str) {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("setpriv", "apt-get install util-linux");
    let p = project(who);
    let endpoint = Endpoint::start(&[("", CODEX_SCRIPT)]);
    let out = vibesys_with_codex(who, &p, &endpoint, backend)
        .args(["session", "--provider", "codex", "--confine", backend])
        .args(["--prompt", "write made.txt"])
        .output()
        .unwrap();
    let text = ok_out(&out, who, backend);
    assert!(
        text.contains("codex session done"),
        "{who:?} {backend}: {text}"
    );
    assert_eq!(
        std::fs::read_to_string(p.root.join("made.txt")).unwrap(),
        "made-by-codex\n",
        "{who:?} {backend}"
    );
    let log = endpoint.log_text();
    assert!(
        log.contains("--dangerously-bypass-approvals-and-sandbox"),
        "{who:?} {backend}: the provider table's flag: {log}"
    );
    if backend == "bwrap" {
        assert!(log.contains("listed"), "{who:?} {backend}");
        assert!(
            !log.contains(SECRET),
            "{who:?} {backend}: the hidden key reached the model endpoint"
        );
    }
}

/// vibesys as `who` with the Codex CLI on PATH and allowed in the sandbox,
/// pointed at the endpoint. Codex 0.163 ignores OPENAI_BASE_URL: a model
/// provider of its own configuration (~/.codex/config.toml) points it there.
fn vibesys_with_codex(who: As, p: &Project, endpoint: &Endpoint, backend: &str) -> Command {
    let codex_home = p.home.join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap();
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model_provider = \"scripted\"\n[model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}/v1\"\nenv_key = \"OPENAI_API_KEY\"\nwire_api = \"responses\"\n",
            endpoint.url()
        ),
    )
    .unwrap();
    chown_to(who, &[&codex_home]);
    let bin = codex_cli().parent().unwrap();
    let root = bin.parent().unwrap();
    let mut c = command_as(who, &p.root, &vibesys(), &[]);
    c.env(
        "PATH",
        format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display()),
    )
    .env("HOME", &p.home)
    .env("VIBESYS_AGENT_SANDBOX", backend)
    .env("VIBESYS_AGENT_SANDBOX_ALLOW", root)
    .env("OPENAI_API_KEY", "test-not-a-key");
    c
}

/// One JavaScript `exec` cell running `cmd`, then the end of the turn.
fn codex_steps(cmd: &str, done: &str) -> String {
    let js = format!(
        "const r = await tools.exec_command({{cmd: {}}}); text(JSON.stringify(r));",
        serde_json::to_string(cmd).unwrap()
    );
    serde_json::json!([{"tool": "exec", "input": js}, {"text": done}]).to_string()
}

/// `run start --provider codex`, two candidates under bwrap, as root and
/// as a user: the honest one passes; the cheater's evaluator edit is
/// refused, the project's key is out of reach, its golden rewrite fails
/// the gate.
#[test]
fn run_start_with_the_real_codex_cli_under_bwrap_as_root_and_as_a_user() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("setpriv", "apt-get install util-linux");
    for who in users() {
        let p = project(who);
        let honest = codex_steps("echo 7 > speed.txt", "honest done");
        let cheat = codex_steps(
            "echo 'exit 0' > evaluator/check.sh || echo EVALUATOR-READ-ONLY; cat ../../../../../../secrets/api.env; echo 41 > tests/golden/expected.txt; echo 'echo 41' > bench/run.sh; echo 1 > speed.txt",
            "cheat done",
        );
        let endpoint = Endpoint::start(&[("cwd:/1", &honest), ("cwd:/2", &cheat)]);
        let out = vibesys_with_codex(who, &p, &endpoint, "bwrap")
            .args(["run", "start", "--run-environment", "host"])
            .args(["--provider", "codex", "--candidates", "2", "--jobs", "2"])
            .args(["--prompt", "make bench/run.sh faster"])
            .output()
            .unwrap();
        let table = ok_out(&out, who, "bwrap");
        let row = |n: &str| {
            table
                .lines()
                .find(|l| l.starts_with(&format!("{n} ")))
                .unwrap_or_else(|| panic!("{who:?}: no row {n}: {table}"))
                .to_owned()
        };
        assert!(
            row("1").contains("passed") && row("1").contains("\"time_ms\":7"),
            "{who:?}: {table}"
        );
        assert!(
            row("2").contains("failed") && row("2").contains("changed tests/golden/expected.txt"),
            "{who:?}: {table}"
        );
        let log = endpoint.log_text();
        assert!(log.contains("EVALUATOR-READ-ONLY"), "{who:?}: {log}");
        assert!(
            !log.contains(SECRET),
            "{who:?}: the key reached the endpoint"
        );
        assert_file_is(p.root.join("tests/golden/expected.txt"), "42\n");
    }
}

#[test]
fn a_session_of_the_real_codex_cli_under_bwrap_and_landlock_as_root_and_as_a_user() {
    for who in users() {
        for backend in ["bwrap", "landlock"] {
            codex_session(who, backend);
        }
    }
}

/// What a confined Codex turn plants in its home: into the directory it
/// is pointed at (`CODEX_HOME`, the session's private copy) and into
/// `~/.codex` by name (read-only: refused).
const CODEX_PLANT: &str = r#"for d in "$CODEX_HOME" "$HOME/.codex"; do mkdir -p "$d/skills/.system/planted" "$d/shell_snapshots" "$d/tmp/arg0" && echo 'echo PLANTED-SKILL' > "$d/skills/.system/planted/SKILL.md" && echo 'echo PLANTED-SNAPSHOT' > "$d/shell_snapshots/planted.sh" && echo 'echo PLANTED-ALIAS' > "$d/tmp/arg0/git" && echo 'notify = ["sh", "-c", "echo PLANTED-NOTIFY"]' >> "$d/config.toml" && echo PLANTED-TOP > "$d/planted.txt" && echo "WROTE-$d"; done; echo plant-done"#;

/// Every file below `dir` but the transcripts, whose content holds
/// `needle`.
fn files_with(dir: &Path, needle: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let ft = entry.file_type().unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if ft.is_dir() && name != "sessions" && name != "archived_sessions" {
            files_with(&path, needle, out);
        } else if ft.is_file() && !name.ends_with(".jsonl") {
            let bytes = std::fs::read(&path).unwrap_or_default();
            if String::from_utf8_lossy(&bytes).contains(needle) {
                out.push(path);
            }
        }
    }
}

fn codex_plants(who: As, backend: &str) {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("setpriv", "apt-get install util-linux");
    let p = project(who);
    let endpoint = Endpoint::start(&[("", &codex_steps(CODEX_PLANT, "codex plant done"))]);
    let mut cmd = vibesys_with_codex(who, &p, &endpoint, backend);
    let user_home = p.home.join(".codex");
    let config_before = std::fs::read_to_string(user_home.join("config.toml")).unwrap();
    let out = cmd
        .args(["session", "--provider", "codex", "--confine", backend])
        .args(["--prompt", "plant in your home"])
        .output()
        .unwrap();
    let text = ok_out(&out, who, backend);
    assert!(
        text.contains("codex plant done"),
        "{who:?} {backend}: {text}"
    );
    let log = endpoint.log_text();
    // The copy is writable (the CLI works in it); ~/.codex is not.
    assert!(log.contains("plant-done"), "{who:?} {backend}: {log}");
    assert!(
        log.contains("WROTE-/"),
        "{who:?} {backend}: the copy: {log}"
    );
    assert!(
        !log.contains(&format!("WROTE-{}", user_home.display())),
        "{who:?} {backend}: ~/.codex was writable: {log}"
    );
    // Nothing planted reached the user's directory ...
    assert_eq!(
        std::fs::read_to_string(user_home.join("config.toml")).unwrap(),
        config_before,
        "{who:?} {backend}"
    );
    for planted in ["skills", "shell_snapshots", "tmp", "planted.txt"] {
        assert!(
            !user_home.join(planted).exists(),
            "{who:?} {backend}: {planted} reached ~/.codex"
        );
    }
    let mut found = Vec::new();
    files_with(&user_home, "PLANTED", &mut found);
    assert!(found.is_empty(), "{who:?} {backend}: {found:?}");
    // ... nor anything of the CLI's own beyond the kept entries (its
    // databases, locks, installation id stay in the copy) ...
    let kept = [
        "config.toml",
        "sessions",
        "archived_sessions",
        "history.jsonl",
        "session_index.jsonl",
        "auth.json",
    ];
    for entry in std::fs::read_dir(&user_home).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        assert!(
            kept.contains(&name.as_str()),
            "{who:?} {backend}: {name} reached ~/.codex"
        );
    }
    // ... while the session's transcript did, owned by whoever ran it.
    let mut rollouts = Vec::new();
    let mut stack = vec![user_home.join("sessions")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                rollouts.push(entry.path());
            }
        }
    }
    assert!(
        rollouts.iter().any(|r| std::fs::read_to_string(r)
            .unwrap_or_default()
            .contains("plant in your home")),
        "{who:?} {backend}: no transcript in ~/.codex/sessions: {rollouts:?}"
    );
}

#[test]
fn a_confined_codex_session_plants_nothing_in_the_users_codex_home_and_its_transcript_goes_back() {
    for who in users() {
        for backend in ["bwrap", "landlock"] {
            codex_plants(who, backend);
        }
    }
}
