//! `vibesys state init` / `state show` against real directories and real git.

mod common;

use std::fs;
use std::process::{Command, Output};

use common::{assert_file_is, git, vibesys_project as vibesys};

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "status {:?}, stderr {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn init_creates_the_layout_without_absolute_paths() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    git(p, &["init", "-q"]);
    let v = json(&vibesys(p, &["state", "init", "--json"]));
    assert_eq!(v["created"], true);
    assert_eq!(v["state_dir"], ".vibesys/state");
    assert_eq!(
        v["hidden"],
        serde_json::json!([".vibesys/state/runs", ".vibesys/state/local"])
    );
    let s = p.join(".vibesys/state");
    for d in ["runs", "local", "agent-visible"] {
        assert!(s.join(d).is_dir(), "{d}");
    }
    use std::os::unix::fs::PermissionsExt;
    for d in ["runs", "local"] {
        let mode = fs::metadata(s.join(d)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "{d}");
    }
    let text = fs::read_to_string(s.join("project.json")).unwrap();
    assert!(
        !text.contains(p.to_str().unwrap()),
        "absolute path in {text}"
    );
    let record: serde_json::Value = serde_json::from_str(&text).unwrap();
    let keys: Vec<&String> = record.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["schema_version", "project_id", "created_at"]);
    let id = record["project_id"].as_str().unwrap();
    assert_eq!(id.len(), 32);
    assert!(
        id.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    assert!(record["created_at"].as_str().unwrap().ends_with('Z'));
    let gi = fs::read_to_string(s.join(".gitignore")).unwrap();
    assert!(gi.lines().any(|l| l == "/local/"));
    // local/ never reaches git.
    fs::write(s.join("local/secret"), "x").unwrap();
    let st = Command::new("git")
        .args([
            "-C",
            p.to_str().unwrap(),
            "status",
            "--porcelain",
            "--untracked-files=all",
        ])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&st.stdout).contains("local/secret"));
}

#[test]
fn init_is_idempotent_and_keeps_the_project_id() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    let first = json(&vibesys(p, &["state", "init", "--json"]));
    let before = fs::read(p.join(".vibesys/state/project.json")).unwrap();
    let gi_before = fs::read(p.join(".vibesys/state/.gitignore")).unwrap();
    let second = json(&vibesys(p, &["state", "init", "--json"]));
    assert_eq!(first["project_id"], second["project_id"]);
    assert_eq!(second["created"], false);
    assert_eq!(second["gitignore_updated"], false);
    assert_eq!(
        fs::read(p.join(".vibesys/state/project.json")).unwrap(),
        before
    );
    assert_eq!(
        fs::read(p.join(".vibesys/state/.gitignore")).unwrap(),
        gi_before
    );
    let show = json(&vibesys(p, &["state", "show", "--json"]));
    assert_eq!(show["initialized"], true);
    assert_eq!(show["project_id"], first["project_id"]);
    assert!(
        show["entries"]
            .as_array()
            .unwrap()
            .iter()
            .all(|e| e["present"] == true)
    );
}

#[test]
fn init_merges_an_existing_gitignore() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::create_dir_all(p.join(".vibesys/state")).unwrap();
    fs::write(
        p.join(".vibesys/state/.gitignore"),
        "*.tmp\n# mine\nscratch/",
    )
    .unwrap();
    let v = json(&vibesys(p, &["state", "init", "--json"]));
    assert_eq!(v["gitignore_updated"], true);
    let gi = fs::read_to_string(p.join(".vibesys/state/.gitignore")).unwrap();
    assert_eq!(gi, "*.tmp\n# mine\nscratch/\n/local/\n");
    json(&vibesys(p, &["state", "init", "--json"]));
    assert_file_is(p.join(".vibesys/state/.gitignore"), gi);
}

#[test]
fn init_refuses_private_files_recoverable_from_history() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    git(p, &["init", "-q"]);
    fs::write(p.join("README"), "hi").unwrap();
    fs::write(p.join(".env"), "TOKEN=secret").unwrap();
    fs::create_dir(p.join("conf")).unwrap();
    fs::write(p.join("conf/agent.toml"), "key = 1").unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "oops"]);
    git(p, &["rm", "-q", ".env", "conf/agent.toml"]);
    git(p, &["commit", "-q", "-m", "remove"]);
    assert!(!p.join(".env").exists());

    let out = vibesys(p, &["state", "init"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("vibesys: error: "), "{err}");
    assert!(
        err.contains(".env") && err.contains("conf/agent.toml"),
        "{err}"
    );
    assert!(
        !p.join(".vibesys").exists(),
        "nothing may be created on refusal"
    );
}

#[test]
fn init_refuses_a_private_file_only_in_the_reflog() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    git(p, &["init", "-q"]);
    fs::write(p.join("a"), "a").unwrap();
    git(p, &["add", "a"]);
    git(p, &["commit", "-q", "-m", "a"]);
    fs::write(p.join(".env.local"), "X=1").unwrap();
    git(p, &["add", ".env.local"]);
    git(p, &["commit", "-q", "-m", "secret"]);
    git(p, &["reset", "-q", "--hard", "HEAD~1"]);
    let out = vibesys(p, &["state", "init"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains(".env.local"));
}

#[test]
fn init_accepts_clean_history_and_non_git_projects() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    git(p, &["init", "-q"]);
    fs::write(p.join(".environment"), "not private").unwrap();
    fs::write(p.join("agent.toml.example"), "").unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "ok"]);
    json(&vibesys(p, &["state", "init", "--json"]));

    let plain = tempfile::tempdir().unwrap();
    fs::write(plain.path().join(".env"), "untracked, not in any history").unwrap();
    json(&vibesys(plain.path(), &["state", "init", "--json"]));
}

#[test]
fn init_refuses_a_symlinked_state_directory() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join(".vibesys")).unwrap();
    let out = vibesys(dir.path(), &["state", "init"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("symlink"), "{err}");
    assert_eq!(fs::read_dir(outside.path()).unwrap().count(), 0);
}

#[test]
fn init_refuses_a_corrupt_project_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    json(&vibesys(p, &["state", "init", "--json"]));
    fs::write(
        p.join(".vibesys/state/project.json"),
        "{\"schema_version\": 1}",
    )
    .unwrap();
    let out = vibesys(p, &["state", "init"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("project.json"));
}

#[test]
fn show_before_init() {
    let dir = tempfile::tempdir().unwrap();
    let v = json(&vibesys(dir.path(), &["state", "show", "--json"]));
    assert_eq!(v["initialized"], false);
    assert_eq!(v["project_id"], serde_json::Value::Null);
    let kinds: Vec<(&str, &str)> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["path"].as_str().unwrap(), e["access"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            (".vibesys/state/runs", "hidden"),
            (".vibesys/state/local", "hidden"),
            (".vibesys/state/agent-visible", "read-only"),
            (".vibesys/state/project.json", "read-only"),
            (".vibesys/state/.gitignore", "read-only"),
        ]
    );
}
