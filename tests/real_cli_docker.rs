//! The real Claude Code CLI of the agent image (scripts/images.sh) doing
//! whole turns in the docker run environment, as root and as an
//! unprivileged operator in the `docker` group: `session --confine docker`
//! and `run start` with two candidates (the demo's scripts), against
//! scripts/model-endpoint.py on the host's loopback. The container has no
//! network; the CLI reaches the endpoint only through the allow-list's
//! door (its proxy variables name the forwarder on the container's own
//! loopback, the proxy outside connects to the host's 127.0.0.1:PORT):
//! never Docker's bridge or any private-range address. What the CLI
//! writes in the project and in its state belongs to the operator, and
//! nothing of a hidden path reaches the endpoint.

mod docker_support;
mod run_support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use docker_support::common::model_endpoint::Endpoint;
use docker_support::common::*;
use docker_support::{BuiltImages, containers_of_run};

const SECRET: &str = "sk-real-cli-docker-hidden-4242";

/// A committed project (run_support's sample, no run state) with a hidden
/// key and `extra` appended to its vibesys.toml, and the CLI's home beside
/// it; both owned by `who`.
struct Project {
    root: PathBuf,
    home: PathBuf,
    _project: tempfile::TempDir,
    _base: tempfile::TempDir,
}

fn project(who: As, extra: &str) -> Project {
    let base = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let task = format!("{}{extra}", run_support::TASK);
    let (project, root) = run_support::unprepared_project_in(base.path(), &task);
    std::fs::write(root.join("secrets/api.env"), format!("API_KEY={SECRET}\n")).unwrap();
    let home = base.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    chown_to(who, &[project.path(), &root, &home]);
    Project {
        root,
        home,
        _project: project,
        _base: base,
    }
}

/// vibesys as `who` in the project: the pinned images of `images`, the
/// static vibesys (the allow-list's forwarder), the endpoint as provider.
fn vibesys_docker(who: As, p: &Project, images: &BuiltImages, endpoint: &Endpoint) -> Command {
    let mut c = command_as(who, &p.root, &vibesys(), &[]);
    c.env("HOME", &p.home)
        .env("VIBESYS_IMAGES_LOCK", &images.lock)
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .env("ANTHROPIC_BASE_URL", endpoint.url())
        .env("ANTHROPIC_API_KEY", "test-not-a-key");
    c
}

fn ok_out(out: &Output, who: As) -> String {
    assert!(
        out.status.success(),
        "{who:?}: vibesys failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The uid `who` runs as.
fn uid_of(who: As) -> u32 {
    who.ids().map_or(0, |(uid, _)| uid)
}

/// Every entry below `dir` (not following links) whose owner is not `uid`.
fn not_owned_by(dir: &Path, uid: u32, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.uid() != uid {
            out.push(path.clone());
        }
        if meta.is_dir() {
            not_owned_by(&path, uid, out);
        }
    }
}

/// The session's script: the provider table's flags seen from inside, the
/// proxy variables, a file written through Bash, the hidden key tried
/// through Read and Bash.
const SESSION_SCRIPT: &str = r#"[
  {"tool": "Bash", "input": {"command": "tr '\\0' ' ' </proc/$PPID/cmdline; echo; echo IS_SANDBOX=$IS_SANDBOX; echo PROXY=$HTTPS_PROXY; id -u; echo made-in-docker > made.txt"}},
  {"tool": "Read", "input": {"file_path": "{cwd}/secrets/api.env"}},
  {"tool": "Bash", "input": {"command": "cat secrets/api.env; ls -A secrets; echo listed"}},
  {"text": "session done"}
]"#;

fn session_turn(who: As, images: &BuiltImages) {
    let p = project(who, "");
    let endpoint = Endpoint::start(&[("", SESSION_SCRIPT)]);
    // The list names a host that is not the endpoint: the session adds
    // its provider's (ANTHROPIC_BASE_URL's) itself.
    let other = format!("127.0.0.1:{}", endpoint.port + 1);
    let run_id = unique("real-cli-docker");
    let out = vibesys_docker(who, &p, images, &endpoint)
        .env("VIBESYS_RUN_ID", &run_id)
        .args(["session", "--provider", "claude", "--confine", "docker"])
        .args(["--image", "vibesys-agent", "--allow-host", &other])
        .args(["--prompt", "write made.txt"])
        .output()
        .unwrap();
    let text = ok_out(&out, who);
    assert!(text.contains("session done"), "{who:?}: {text}");
    let made = p.root.join("made.txt");
    assert_eq!(
        std::fs::read_to_string(&made).unwrap(),
        "made-in-docker\n",
        "{who:?}: the Bash tool ran without a prompt"
    );
    assert_eq!(
        std::fs::metadata(&made).unwrap().uid(),
        uid_of(who),
        "{who:?}: the CLI's file belongs to the operator"
    );
    let log = endpoint.log_text();
    assert!(log.contains("--dangerously-skip-permissions"), "{who:?}");
    assert!(log.contains("IS_SANDBOX=1"), "{who:?}");
    assert!(
        log.contains(&format!(
            "PROXY=http://127.0.0.1:{}",
            vs_sandbox::egress::INSIDE_PORT
        )),
        "{who:?}: the CLI reached the endpoint through the door"
    );
    assert!(log.contains("listed"), "{who:?}");
    assert!(
        !log.contains(SECRET),
        "{who:?}: the hidden key reached the model endpoint"
    );
    // The CLI's state went to the operator's home, the operator's own.
    let state = p.home.join(".claude");
    assert!(
        state.join("projects").is_dir(),
        "{who:?}: the CLI wrote nothing into its state"
    );
    let mut foreign = Vec::new();
    not_owned_by(&p.home, uid_of(who), &mut foreign);
    assert!(
        foreign.is_empty(),
        "{who:?}: not the operator's: {foreign:?}"
    );
    assert!(
        containers_of_run(&run_id).is_empty(),
        "{who:?}: container left behind"
    );
}

/// `run start` in the docker environment with the real CLI as both
/// candidates' agent (the demo's scripts): the honest edit passes; the
/// cheater's evaluator edit is refused (read-only), the hidden key is out
/// of reach and its golden rewrite fails the gate. The endpoint is the
/// one entry of the project's `allow_hosts`.
fn run_two_candidates(who: As, images: &BuiltImages) {
    let demo = repo_root().join("scripts/demo");
    let honest = std::fs::read_to_string(demo.join("honest.json")).unwrap();
    let cheat = std::fs::read_to_string(demo.join("cheat.json")).unwrap();
    let endpoint = Endpoint::start(&[("cwd:/1", &honest), ("cwd:/2", &cheat)]);
    let allow = format!("allow_hosts = [\"127.0.0.1:{}\"]\n", endpoint.port);
    let p = project(who, &allow);
    let out = vibesys_docker(who, &p, images, &endpoint)
        .args(["run", "start", "--run-environment", "docker"])
        .args(["--image", "vibesys-agent"])
        .args(["--provider", "claude", "--candidates", "2", "--jobs", "2"])
        .args(["--prompt", "make bench/run.sh faster"])
        .output()
        .unwrap();
    let table = ok_out(&out, who);
    let run = run_support::only_run(&p.root);
    let status = vibesys_docker(who, &p, images, &endpoint)
        .args(["run", "status", &run, "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_str(&ok_out(&status, who)).unwrap();
    let cand = |n| run_support::candidate(&status, n);
    let (honest, cheat) = (cand(1), cand(2));
    assert_eq!(status["run"]["environment"], "docker", "{status:#}");
    assert_eq!(honest["state"], "passed", "{who:?}: {table}\n{honest:#}");
    assert_eq!(honest["metrics"]["time_ms"], 7, "{honest:#}");
    assert_eq!(cheat["state"], "failed", "{who:?}: {table}");
    assert_eq!(cheat["phases"]["gate"]["status"], "failed", "{cheat:#}");
    assert!(
        cheat["error"]
            .as_str()
            .unwrap()
            .contains("changed tests/golden/expected.txt"),
        "{cheat:#}"
    );
    let log = endpoint.log_text();
    assert!(log.contains("has been updated successfully"), "{who:?}");
    assert!(log.contains("read-only file system"), "{who:?}: {log}");
    assert!(
        !log.contains(SECRET),
        "{who:?}: the hidden key reached the model endpoint"
    );
    // What the agents and the run wrote belongs to the operator.
    let mut foreign = Vec::new();
    not_owned_by(&p.root, uid_of(who), &mut foreign);
    not_owned_by(&p.home, uid_of(who), &mut foreign);
    assert!(
        foreign.is_empty(),
        "{who:?}: not the operator's: {foreign:?}"
    );
    // The project itself is untouched, and no container is left.
    assert_file_is(p.root.join("tests/golden/expected.txt"), "42\n");
    for suffix in ["1", "2", "1-eval", "2-eval"] {
        assert!(
            containers_of_run(&format!("{run}-{suffix}")).is_empty(),
            "{who:?}: container left behind"
        );
    }
}

#[test]
fn session_and_run_start_of_the_real_cli_in_docker_as_root_and_as_a_docker_user() {
    require_tool("python3", "apt-get install python3");
    let images = BuiltImages::load(&["agent"]);
    for who in docker_users() {
        session_turn(who, &images);
        run_two_candidates(who, &images);
    }
}
