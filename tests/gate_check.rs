//! `vibesys gate baseline` / `gate check` against real files.

mod common;

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Command, Output};

use common::{assert_code_stderr, assert_stderr_has, stderr, stdout, vibesys_project as vibesys};

fn ok(out: Output) -> Output {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout {} stderr {}",
        stdout(&out),
        stderr(&out)
    );
    out
}

/// A project with an evaluator, task inputs and initialized run state.
fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::create_dir_all(p.join("eval/lib")).unwrap();
    fs::write(p.join("eval/score.py"), "print('score')\n").unwrap();
    fs::write(p.join("eval/lib/util.py"), "X = 1\n").unwrap();
    fs::write(p.join("eval/remove-me.txt"), "bye\n").unwrap();
    fs::write(p.join("eval/becomes-link.txt"), "plain\n").unwrap();
    fs::create_dir_all(p.join("inputs")).unwrap();
    fs::write(p.join("inputs/data.csv"), "a,b\n1,2\n").unwrap();
    fs::write(p.join("agent-edits-this.rs"), "fn main() {}\n").unwrap();
    ok(vibesys(p, &["state", "init"]));
    dir
}

/// `gate check --run r1` in `p`.
fn check(p: &Path) -> Output {
    vibesys(p, &["gate", "check", "--run", "r1"])
}

/// Asserts that `gate check --run r1` fails (exit 1) reporting `report`.
fn assert_check_finds(p: &Path, report: &str) {
    let out = check(p);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), report);
}

/// `gate baseline --run r1 --protect PROTECT --json` in `p`: its report.
fn baseline_json(p: &Path, protect: &str) -> serde_json::Value {
    let out = ok(vibesys(
        p,
        &[
            "gate",
            "baseline",
            "--run",
            "r1",
            "--protect",
            protect,
            "--json",
        ],
    ));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A [`project`] with the baseline of run `r1` protecting `protect`.
fn baselined(protect: &[&str]) -> tempfile::TempDir {
    let dir = project();
    baseline(dir.path(), "r1", protect);
    dir
}

fn baseline(p: &Path, run: &str, protect: &[&str]) {
    let mut args = vec!["gate", "baseline", "--run", run];
    for x in protect {
        args.extend(["--protect", x]);
    }
    ok(vibesys(p, &args));
}

#[test]
fn unchanged_tree_passes_and_agent_writes_elsewhere_do_not_matter() {
    let dir = baselined(&["eval", "inputs", ".vibesys/state/runs"]);
    let p = dir.path();
    fs::write(p.join("agent-edits-this.rs"), "fn main() { evil() }\n").unwrap();
    let out = ok(check(p));
    assert!(stdout(&out).contains("ok"), "{}", stdout(&out));
    // The baseline lives in the hidden run record and is not itself checked.
    assert!(
        p.join(".vibesys/state/runs/r1/gate-baseline.json")
            .is_file()
    );
}

#[test]
fn changed_added_removed_and_type_changed_paths_are_named_sorted() {
    let dir = baselined(&["eval", "inputs"]);
    let p = dir.path();

    fs::write(p.join("eval/score.py"), "print('always 100')\n").unwrap();
    fs::write(p.join("eval/lib/injected.py"), "").unwrap();
    fs::remove_file(p.join("eval/remove-me.txt")).unwrap();
    fs::remove_file(p.join("eval/becomes-link.txt")).unwrap();
    symlink("score.py", p.join("eval/becomes-link.txt")).unwrap();

    let out = check(p);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "changed: eval/becomes-link.txt\n\
         added: eval/lib/injected.py\n\
         removed: eval/remove-me.txt\n\
         changed: eval/score.py\n"
    );
    assert_stderr_has(&out, "4 protected paths differ");

    let out = vibesys(p, &["gate", "check", "--run", "r1", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["run_id"], "r1");
    assert_eq!(v["differences"][0]["change"], "changed");
    assert_eq!(v["differences"][0]["path"], "eval/becomes-link.txt");
    assert_eq!(v["differences"].as_array().unwrap().len(), 4);
}

#[test]
fn directory_replaced_by_file_and_mode_change() {
    let dir = baselined(&["eval"]);
    let p = dir.path();
    fs::remove_dir_all(p.join("eval/lib")).unwrap();
    fs::write(p.join("eval/lib"), "now a file").unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(p.join("eval/score.py"), fs::Permissions::from_mode(0o755)).unwrap();
    assert_check_finds(
        p,
        "changed: eval/lib\nremoved: eval/lib/util.py\nchanged: eval/score.py\n",
    );
}

#[test]
fn symlinks_are_recorded_not_followed() {
    let dir = project();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("target.txt"), "v1").unwrap();
    let p = dir.path();
    symlink(outside.path().join("target.txt"), p.join("eval/ext-link")).unwrap();
    symlink(outside.path(), p.join("eval/ext-dir")).unwrap();
    baseline(p, "r1", &["eval"]);
    let b = fs::read_to_string(p.join(".vibesys/state/runs/r1/gate-baseline.json")).unwrap();
    assert!(
        !b.contains("\"eval/ext-dir/target.txt\""),
        "followed a symlink: {b}"
    );
    // Content behind the link is not ours to protect; the link itself is.
    fs::write(outside.path().join("target.txt"), "v2").unwrap();
    ok(check(p));
    fs::remove_file(p.join("eval/ext-link")).unwrap();
    symlink("/etc/hostname", p.join("eval/ext-link")).unwrap();
    assert_check_finds(p, "changed: eval/ext-link\n");
}

#[test]
fn empty_and_large_files_are_hashed_exactly() {
    let dir = project();
    let p = dir.path();
    fs::write(p.join("inputs/empty"), b"").unwrap();
    // The official BLAKE3 test vector input (byte i is i % 251) at its
    // largest length, and a 3 MiB file hashed in several reads.
    let vector: Vec<u8> = (0..102_400u32).map(|i| (i % 251) as u8).collect();
    fs::write(p.join("inputs/vector.bin"), &vector).unwrap();
    let big: Vec<u8> = (0..(3 * 1024 * 1024 + 17) as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    fs::write(p.join("inputs/big.bin"), &big).unwrap();
    let v = baseline_json(p, "inputs");
    assert_eq!(v["files"], 4);
    assert_eq!(v["bytes"], (big.len() + vector.len()) as u64 + 8);

    // The recorded digests are BLAKE3's published test vectors.
    let b: serde_json::Value = serde_json::from_slice(
        &fs::read(p.join(".vibesys/state/runs/r1/gate-baseline.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(b["schema_version"], 2);
    for (name, want) in [
        (
            "empty",
            "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
        ),
        (
            "vector.bin",
            "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085",
        ),
    ] {
        let entry = &b["entries"][format!("inputs/{name}")];
        assert_eq!(entry["type"], "file");
        assert_eq!(entry["blake3"], want, "{name}");
    }
    assert_eq!(b["entries"]["inputs/empty"]["size"], 0);
    assert_eq!(b["entries"]["inputs/big.bin"]["size"], big.len() as u64);

    // Flip the last byte of the big file; grow the empty one.
    let mut changed = big.clone();
    *changed.last_mut().unwrap() ^= 1;
    fs::write(p.join("inputs/big.bin"), &changed).unwrap();
    fs::write(p.join("inputs/empty"), b"\0").unwrap();
    assert_check_finds(p, "changed: inputs/big.bin\nchanged: inputs/empty\n");
}

#[test]
fn a_baseline_of_the_sha256_schema_is_refused_naming_its_version() {
    let dir = baselined(&["inputs"]);
    let p = dir.path();
    // What vibesys wrote before BLAKE3: schema_version 1, sha256 digests.
    let path = p.join(".vibesys/state/runs/r1/gate-baseline.json");
    let old = serde_json::json!({
        "schema_version": 1,
        "run_id": "r1",
        "created_at": "2026-11-30T00:00:00Z",
        "protect": ["inputs"],
        "entries": {
            "inputs": {"type": "directory"},
            "inputs/data.csv": {
                "type": "file",
                "size": 8,
                "sha256": "5b0cbcb3e8e2d1d4fc2b7c1b5bd2a3a4c4d48a6d1f5fb8fd0e8a0c5bb8b3e6a1",
                "executable": false
            }
        }
    });
    fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
    let out = check(p);
    assert_eq!(out.status.code(), Some(125), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains("schema_version 1"), "{err}");
    assert!(err.contains("reads schema_version 2"), "{err}");
    assert!(err.contains("SHA-256"), "{err}");
    assert!(!err.contains("unknown field"), "{err}");
    // A future version is refused the same way; no version at all too.
    let future = serde_json::json!({"schema_version": 3, "whatever": true});
    fs::write(&path, serde_json::to_vec(&future).unwrap()).unwrap();
    let out = check(p);
    assert_code_stderr(&out, 125, "schema_version 3");
    fs::write(&path, b"{\"run_id\": \"r1\"}").unwrap();
    let out = check(p);
    assert_code_stderr(&out, 125, "no schema_version");
}

#[test]
fn paths_outside_the_project_are_refused() {
    let dir = project();
    let p = dir.path();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("f"), "x").unwrap();
    symlink(outside.path(), p.join("escape")).unwrap();
    let abs = outside.path().to_str().unwrap().to_owned();
    for bad in [
        abs.as_str(),
        "../",
        "eval/../../x",
        "escape/f",
        "/etc/passwd",
    ] {
        let out = vibesys(p, &["gate", "baseline", "--run", "r1", "--protect", bad]);
        assert_eq!(out.status.code(), Some(125), "{bad}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(
            err.starts_with("vibesys: error: ") && err.contains("outside the project"),
            "{bad}: {err}"
        );
    }
    assert!(!p.join(".vibesys/state/runs/r1/gate-baseline.json").exists());
    // An absolute path inside the project is fine.
    let inside = p.join("eval");
    baseline(p, "r1", &[inside.to_str().unwrap()]);
}

#[test]
fn gate_errors_exit_125() {
    let dir = project();
    let p = dir.path();
    for bad in ["../x", "R1", "", "-x", "a/b", &"a".repeat(129)] {
        let out = vibesys(p, &["gate", "check", "--run", bad]);
        assert_eq!(out.status.code(), Some(125), "{bad:?}");
        assert!(
            stderr(&out).contains("invalid run id"),
            "{bad:?}: {}",
            stderr(&out)
        );
    }
    let out = vibesys(p, &["gate", "check", "--run", "never-recorded"]);
    assert_code_stderr(&out, 125, "no gate baseline");
    let out = vibesys(p, &["gate", "baseline", "--run", "r1", "--protect", "nope"]);
    assert_code_stderr(&out, 125, "does not exist");
    let out = vibesys(p, &["gate", "baseline", "--run", "r1"]);
    assert_code_stderr(&out, 125, "nothing to protect");
    fs::write(p.join("vibesys.toml"), "[gate]\nprotect = [\"\"]\n").unwrap();
    let out = vibesys(p, &["gate", "baseline", "--run", "r1"]);
    assert_code_stderr(&out, 125, "empty");
    fs::remove_file(p.join("vibesys.toml")).unwrap();
    // A tampered baseline is an error, not a pass.
    baseline(p, "r2", &["eval"]);
    let path = p.join(".vibesys/state/runs/r2/gate-baseline.json");
    let text = fs::read_to_string(&path)
        .unwrap()
        .replace("\"eval\"", "\"../eval\"");
    fs::write(&path, text).unwrap();
    let out = vibesys(p, &["gate", "check", "--run", "r2"]);
    assert_eq!(out.status.code(), Some(125), "{}", stdout(&out));
}

#[test]
fn protect_list_from_vibesys_toml() {
    let dir = project();
    let p = dir.path();
    fs::write(
        p.join("vibesys.toml"),
        "[sandbox]\nhidden = [\"secret\"]\n\n[gate]\nprotect = [\"inputs\"]\n",
    )
    .unwrap();
    let v = baseline_json(p, "eval/score.py");
    assert_eq!(v["protect"], serde_json::json!(["eval/score.py", "inputs"]));
    fs::write(p.join("inputs/data.csv"), "a,b\n1,3\n").unwrap();
    assert_check_finds(p, "changed: inputs/data.csv\n");

    fs::write(p.join("vibesys.toml"), "[gate]\nprotect = \"inputs\"\n").unwrap();
    let out = vibesys(p, &["gate", "baseline", "--run", "r1"]);
    assert_code_stderr(&out, 125, "vibesys.toml");
}

#[test]
fn hostile_names_cannot_forge_report_lines() {
    let dir = baselined(&["eval"]);
    let p = dir.path();
    fs::write(p.join("eval/x\nchanged: fake"), "").unwrap();
    assert_check_finds(p, "added: \"eval/x\\nchanged: fake\"\n");
}

#[test]
fn non_utf8_name_added_after_the_baseline_fails_the_check() {
    use std::os::unix::ffi::OsStrExt;
    let dir = baselined(&["eval"]);
    let p = dir.path();
    let name = std::ffi::OsStr::from_bytes(b"bad-\xff");
    fs::write(p.join("eval").join(name), "").unwrap();
    let out = check(p);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("added: eval/bad-"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_file_replaced_by_a_fifo_is_changed_and_never_opened() {
    let dir = baselined(&["eval"]);
    let p = dir.path();
    fs::remove_file(p.join("eval/score.py")).unwrap();
    let st = Command::new("mkfifo")
        .arg(p.join("eval/score.py"))
        .status()
        .unwrap_or_else(|e| panic!("this test needs mkfifo (apt-get install coreutils): {e}"));
    assert!(st.success());
    // A reader blocking on the fifo would hang here; the gate must not.
    let out = check(p);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_eq!(stdout(&out), "changed: eval/score.py\n");
}
