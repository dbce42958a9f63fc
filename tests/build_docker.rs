//! `vibesys build` in the default docker run environment, on the real
//! Engine with an editor image built by vs-image (nothing pulled).

#[path = "docker_support/mod.rs"]
mod docker_support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

use docker_support::common::assert_stderr_has;
use docker_support::{TestImage, git};

/// sha256 of "hello\n".
const HELLO_SHA256: &str = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03";

fn vibesys(img: &TestImage, dir: &Path, args: &[&str]) -> Output {
    Command::new(docker_support::vibesys_bin())
        .args(args)
        .arg("--project")
        .arg(dir)
        .env_remove("VIBESYS_LOG")
        .env_remove("VIBESYS_AGENT_SANDBOX")
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        // As the shipped (static) binary does: the build runs through the
        // container's command server.
        .env("VIBESYS_COMMAND_SERVER", docker_support::static_vibesys())
        .output()
        .unwrap()
}

/// A committed project with one build script, run state initialized.
fn project(img: &TestImage, script: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    fs::create_dir_all(p.join(".vibesys/state/runs/leak")).unwrap();
    fs::write(p.join(".vibesys/state/runs/leak/secret.txt"), "SECRET\n").unwrap();
    fs::write(
        p.join("vibesys.toml"),
        format!(
            "[build]\nargv = [\"sh\", \"-c\", {}]\noutputs = [\"target/bin/app\"]\ntimeout_secs = 120\n",
            serde_json::to_string(script).unwrap()
        ),
    )
    .unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "-f", "."]);
    git(p, &["commit", "-q", "-m", "candidate"]);
    let out = vibesys(img, p, &["state", "init"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    dir
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_default_docker_environment_builds_verifies_and_rejects() {
    let img = TestImage::new();

    // A build that writes its output, and tries to read the hidden record
    // the commit carries, is verified; the record stays unseen.
    let dir = project(
        &img,
        "mkdir -p target/bin && { cat .vibesys/state/runs/leak/secret.txt 2>/dev/null; echo hello; } > target/bin/app",
    );
    let p = dir.path();
    let out = vibesys(
        &img,
        p,
        &["build", "--run", "r1", "--commit", "HEAD", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["run_environment"], "docker");
    assert_eq!(json["record"]["confinement"], "docker");
    assert_eq!(json["record"]["outputs"][0]["sha256"], HELLO_SHA256);
    let artifact = p
        .join(".vibesys/state/runs/r1/artifacts")
        .join(HELLO_SHA256);
    assert_eq!(fs::read(artifact).unwrap(), b"hello\n");
    let left = Command::new("docker")
        .args(["ps", "-aq", "--filter"])
        .arg(format!("label=dev.vibesys.image={}", img.name))
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "the build container was left behind: {}",
        String::from_utf8_lossy(&left.stdout)
    );

    // An output replaced by a symlink is rejected naming the path.
    let dir = project(
        &img,
        "mkdir -p target/bin && ln -s /etc/passwd target/bin/app",
    );
    let out = vibesys(
        &img,
        dir.path(),
        &["build", "--run", "r1", "--commit", "HEAD"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("declared output target/bin/app rejected") && err.contains("symlink"),
        "{err}"
    );

    // --confine belongs to the host environment.
    let out = vibesys(
        &img,
        dir.path(),
        &[
            "build",
            "--run",
            "r1",
            "--commit",
            "HEAD",
            "--confine",
            "bwrap",
        ],
    );
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert_stderr_has(&out, "--run-environment host");

    // Commands planted in the repository's git configuration and hooks
    // never run; a build that edits a protected path is rejected naming it.
    let markers = tempfile::tempdir().unwrap();
    let mark = |name: &str| format!("touch {}/{name}; :", markers.path().display());
    let dir = project(
        &img,
        "mkdir -p target/bin && cat solution.rs > target/bin/app && echo x >> eval/score.sh",
    );
    let p = dir.path();
    let toml = fs::read_to_string(p.join("vibesys.toml")).unwrap();
    fs::write(
        p.join("vibesys.toml"),
        format!("{toml}[gate]\nprotect = [\"eval\"]\n"),
    )
    .unwrap();
    fs::create_dir_all(p.join("eval")).unwrap();
    fs::write(p.join("eval/score.sh"), "echo 1\n").unwrap();
    fs::write(p.join("solution.rs"), "v1\n").unwrap();
    fs::write(p.join(".gitattributes"), "* filter=evil\n").unwrap();
    git(p, &["add", "-A"]);
    git(p, &["commit", "-q", "-m", "task"]);
    git(
        p,
        &[
            "config",
            "filter.evil.smudge",
            &format!("{} ; cat", mark("smudge")),
        ],
    );
    git(p, &["config", "filter.evil.required", "true"]);
    git(p, &["config", "core.fsmonitor", &mark("fsmonitor")]);
    let hook = p.join(".git/hooks/post-checkout");
    fs::create_dir_all(hook.parent().unwrap()).unwrap();
    fs::write(&hook, format!("#!/bin/sh\n{}\n", mark("post-checkout"))).unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    let out = vibesys(
        &img,
        p,
        &["build", "--run", "r1", "--commit", "HEAD", "--json"],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // The protected path is read-only in the build's container.
    assert!(
        err.contains("eval/score.sh: Read-only file system"),
        "{err}"
    );
    // Without the edit the same planted repository builds the committed bytes.
    let toml = fs::read_to_string(p.join("vibesys.toml"))
        .unwrap()
        .replace(" && echo x >> eval/score.sh", "");
    fs::write(p.join("vibesys.toml"), toml).unwrap();
    let out = vibesys(
        &img,
        p,
        &["build", "--run", "r1", "--commit", "HEAD", "--json"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sha = json["record"]["outputs"][0]["sha256"].as_str().unwrap();
    assert_eq!(
        fs::read(p.join(".vibesys/state/runs/r1/artifacts").join(sha)).unwrap(),
        b"v1\n"
    );
    let planted: Vec<_> = fs::read_dir(markers.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(planted.is_empty(), "a planted git command ran: {planted:?}");
}
