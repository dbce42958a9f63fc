//! The Docker run environment through the binary: `image load` (stream,
//! pin check, no-op), `exec --confine docker` (status, policy, refusals),
//! `kill -9` of vibesys during `exec`, `policy show` and `doctor`.

mod docker_support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use docker_support::{
    TestImage, containers_of_run, fails, ok, static_vibesys, unique, vibesys, vibesys_bin,
    workspace,
};

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

#[test]
fn image_load_checks_the_lock_and_is_a_no_op_when_present() {
    let img = TestImage::build(false);
    let first = json(&ok(img.load_cmd().output().unwrap()));
    assert_eq!(first["loaded"], true, "{first}");
    assert_eq!(first["id"], img.config_digest.as_str());
    assert_eq!(first["id_kind"], "config");
    assert!(first["bytes"].as_u64().unwrap() > 100_000);
    let inspect = ok(Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}"])
        .arg(format!("{}:latest", img.name))
        .output()
        .unwrap());
    assert_eq!(inspect.trim(), img.config_digest);
    let start = Instant::now();
    let again = json(&ok(img.load_cmd().output().unwrap()));
    assert_eq!(again["loaded"], false, "{again}");
    assert_eq!(again["bytes"], 0);
    assert!(start.elapsed() < Duration::from_secs(2));

    // An archive that differs from its pin is refused before upload,
    // naming both digests.
    let other = TestImage::build(false);
    let spec_lock = std::fs::read_to_string(&other.lock)
        .unwrap()
        .replace(&other.config_digest, &img.config_digest);
    let wrong_lock = other.dir.path().join("wrong.lock");
    std::fs::write(&wrong_lock, spec_lock).unwrap();
    let err = fails(
        vibesys(other.dir.path())
            .args(["image", "load"])
            .arg(&other.archive)
            .arg("--lock")
            .arg(&wrong_lock)
            .output()
            .unwrap(),
    );
    assert!(err.contains(&img.config_digest), "{err}");
    assert!(err.contains(&other.config_digest), "{err}");
    let present = Command::new("docker")
        .args(["image", "inspect", &other.config_digest])
        .output()
        .unwrap();
    assert!(!present.status.success(), "a refused archive was loaded");

    // An image the lock does not pin is refused.
    let empty_lock = other.dir.path().join("empty.lock");
    std::fs::write(&empty_lock, "version = 1\n").unwrap();
    let err = fails(
        vibesys(other.dir.path())
            .args(["image", "load"])
            .arg(&other.archive)
            .arg("--lock")
            .arg(&empty_lock)
            .output()
            .unwrap(),
    );
    assert!(err.contains(&other.name), "{err}");
}

/// The Engine's ID of `reference`, `None` when it holds no such image.
fn engine_id(reference: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", reference])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A load the Engine's answer refuses (an archive that is not the pinned
/// image: the library call, past the lock check `image load` makes)
/// removes only an image it added, and puts back a tag it moved: the
/// operator's images stay as they were.
#[test]
fn a_refused_load_leaves_the_images_the_engine_held() {
    let pinned = TestImage::build(false);
    let archive = TestImage::build(false);
    let other = TestImage::new();
    let tag = archive.pin().tag;
    let reference = format!("{}:{tag}", archive.name);

    // The operator had loaded the archive's image already.
    ok(Command::new("docker")
        .args(["load", "-i"])
        .arg(&archive.archive)
        .output()
        .unwrap());
    let err = vs_docker::load(&archive.archive, &pinned.pin(), &tag)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&pinned.config_digest) && err.contains(&archive.config_digest),
        "{err}"
    );
    assert_eq!(
        engine_id(&archive.config_digest).as_deref(),
        Some(archive.config_digest.as_str()),
        "a refused load removed an image the Engine held before it"
    );

    // The operator's tag named another image: the refused load's own image
    // goes, the tag points at the operator's image again.
    ok(Command::new("docker")
        .args(["rmi", "-f", &archive.config_digest])
        .output()
        .unwrap());
    ok(Command::new("docker")
        .args(["tag", &other.config_digest, &reference])
        .output()
        .unwrap());
    let err = vs_docker::load(&archive.archive, &pinned.pin(), &tag)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&archive.config_digest), "{err}");
    assert_eq!(
        engine_id(&archive.config_digest),
        None,
        "refused image kept"
    );
    assert_eq!(
        engine_id(&reference).as_deref(),
        Some(other.config_digest.as_str()),
        "the operator's tag {reference} was not put back"
    );
    assert_eq!(engine_id(&pinned.config_digest), None);
}

/// The guard of the tests that load images they did not name
/// (`tests/common/engine_images.rs`): an image the Engine held before stays
/// with its tags; one the test added goes.
#[test]
fn the_test_guard_keeps_what_the_engine_held() {
    use docker_support::common::engine_images::EngineImages;
    let held = TestImage::new();
    let added = TestImage::build(false);
    let held_ref = format!("{}:{}", held.name, held.pin().tag);
    let added_ref = format!("{}:{}", added.name, added.pin().tag);
    let guard = EngineImages::before_loading([
        held_ref.clone(),
        held.config_digest.clone(),
        added_ref.clone(),
    ]);
    assert!(guard.held_before(&held.config_digest));
    assert!(!guard.held_before(&added.config_digest));
    // The test loads both again and moves the held image's tag.
    ok(held.load_cmd().output().unwrap());
    ok(added.load_cmd().output().unwrap());
    ok(Command::new("docker")
        .args(["tag", &added.config_digest, &held_ref])
        .output()
        .unwrap());
    drop(guard);
    assert_eq!(
        engine_id(&held.config_digest).as_deref(),
        Some(held.config_digest.as_str())
    );
    assert_eq!(
        engine_id(&held_ref).as_deref(),
        Some(held.config_digest.as_str()),
        "the moved tag was not put back"
    );
    assert_eq!(
        engine_id(&added.config_digest),
        None,
        "the added image stayed"
    );
}

/// A broken image: its /bin/sh prints a message and exits 3, at once or
/// while the first command runs, so the run's container ends right after
/// it starts. The error names that, the exit code and the output (not a
/// later "no such container" or "cannot exec in a stopped state"), and
/// nothing is left behind.
#[test]
fn a_container_that_exits_at_start_is_named_with_its_code_and_output() {
    const SH: &str =
        "[[host.files]]\npath = \"/bin/sh\"\ntype = \"symlink\"\ntarget = \"busybox\"\n";
    let ws = workspace();
    for (delay, command) in [
        ("", "true"),
        ("/bin/busybox sleep 1\\n", "/bin/busybox sleep 10"),
    ] {
        let img = TestImage::build_with(true, |spec| {
            assert!(spec.contains(SH), "images/editor.toml changed shape");
            spec.replace(
                SH,
                &format!(
                    "[[host.files]]\npath = \"/bin/sh\"\nmode = \"0755\"\ncontent = \"#!/bin/busybox ash\\necho no shell in this image >&2\\n{delay}exit 3\\n\"\n"
                ),
            )
        });
        let run_id = unique("broken");
        let err = fails(
            exec(&img, ws.path(), &run_id)
                .args(command.split(' '))
                .output()
                .unwrap(),
        );
        assert!(
            err.contains("exited at start (exit code 3)") && err.contains("no shell in this image"),
            "{command}: {err}"
        );
        assert!(containers_of_run(&run_id).is_empty(), "nothing is left");
    }
}

fn exec(img: &TestImage, ws: &std::path::Path, run_id: &str) -> Command {
    let mut c = vibesys(ws);
    c.env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_RUN_ID", run_id)
        .args(["exec", "--confine", "docker", "--image", &img.name])
        .args([
            "--read-only",
            "ro",
            "--hidden",
            "ro/secret",
            "--hidden",
            "key.txt",
        ])
        .args(["--hidden", "hid", "--"]);
    c
}

#[test]
fn exec_confine_docker_runs_the_command_in_the_pinned_image() {
    let img = TestImage::new();
    let ws = workspace();
    let run_id = unique("cli");
    let out = exec(&img, ws.path(), &run_id)
        .args([
            "/bin/sh",
            "-c",
            "cat ro/a.txt; ls -A hid; wc -c < key.txt; echo x > ro/a.txt; exit 9",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(9), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout, "readable\n0\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Read-only file system"));
    assert!(
        containers_of_run(&run_id).is_empty(),
        "exec leaves no container"
    );
    // A program that cannot be run: 127 when missing, 126 when not
    // executable, as on the host (the Engine says 126 for both); an empty
    // one is vibesys's own error.
    std::fs::write(ws.path().join("plain"), "data\n").unwrap();
    for (program, code) in [
        ("/no/such/program", 127),
        ("no-such-program", 127),
        ("./plain", 126),
        ("", 125),
    ] {
        let out = exec(&img, ws.path(), &run_id)
            .arg(program)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(code), "{program:?}: {out:?}");
    }

    // An unpinned image ID is refused, naming it and the pinned one.
    let bogus = format!("sha256:{}", "e".repeat(64));
    let err = fails(
        vibesys(ws.path())
            .env("VIBESYS_IMAGES_LOCK", &img.lock)
            .args([
                "exec",
                "--confine",
                "docker",
                "--image",
                &bogus,
                "--",
                "true",
            ])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains(&bogus) && err.contains(&img.config_digest),
        "{err}"
    );
    // A pinned image that is not loaded: refused, naming expected and found.
    img.remove();
    let err = fails(exec(&img, ws.path(), &run_id).arg("true").output().unwrap());
    assert!(err.contains(&img.config_digest), "{err}");
    assert!(
        err.contains("not loaded") && err.contains("found no image"),
        "{err}"
    );
}

/// A host file given as stdout reaches the container's command only
/// through the Engine's attach stream, which vibesys copies: re-opened,
/// `/proc/self/fd/1` is no host file, so the log is neither read back nor
/// truncated (as for bwrap and Landlock in escapes.rs). And a hidden
/// directory's file hard-linked into the project is refused by name.
#[test]
fn stdout_as_a_host_file_and_hard_links_into_hidden_paths_in_docker() {
    let img = TestImage::new();
    let ws = workspace();
    let run_id = unique("stdio");
    let log_dir = tempfile::tempdir().unwrap();
    let log = log_dir.path().join("run.log");
    std::fs::write(&log, "BEFORE-START secret line\n").unwrap();
    let out_file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    let out = exec(&img, ws.path(), &run_id)
        .args([
            "/bin/sh",
            "-c",
            "exec 3>&1; echo READ:$(timeout 1 cat /proc/self/fd/3 2>&1 | head -c 200); \
             : > /proc/self/fd/1 2>/dev/null; echo AFTER",
        ])
        .stdout(out_file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.starts_with("BEFORE-START secret line\n"),
        "{logged:?}"
    );
    let read = logged
        .lines()
        .find(|l| l.starts_with("READ:"))
        .unwrap_or("");
    assert!(
        read == "READ:" && !read.contains("BEFORE-START"),
        "the pipe re-opened should hold nothing: {logged:?}"
    );

    // A file of a hidden directory with a second name in the project is
    // refused before any container starts, naming both.
    std::fs::hard_link(ws.path().join("hid/h.txt"), ws.path().join("copy.txt")).unwrap();
    let err = fails(
        exec(&img, ws.path(), &run_id)
            .args(["cat", "copy.txt"])
            .output()
            .unwrap(),
    );
    assert!(
        err.contains("hidden directory \"hid\"") && err.contains("\"copy.txt\", in the project"),
        "{err}"
    );
    assert!(containers_of_run(&run_id).is_empty());
    assert!(logged.ends_with("AFTER\n"), "{logged:?}");
}

#[test]
fn kill_9_of_vibesys_leaves_no_container_behind() {
    kill_9_leaves_no_container(None);
}

#[test]
fn kill_9_of_vibesys_leaves_no_container_behind_with_the_command_server() {
    kill_9_leaves_no_container(Some(static_vibesys()));
}

fn kill_9_leaves_no_container(server: Option<std::path::PathBuf>) {
    let img = TestImage::new();
    let ws = workspace();
    let run_id = unique("kill");
    let mut cmd = exec(&img, ws.path(), &run_id);
    if let Some(server) = &server {
        cmd.env("VIBESYS_COMMAND_SERVER", server);
    }
    let mut child = cmd
        .args(["/bin/sh", "-c", "sleep 1000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while containers_of_run(&run_id).is_empty() {
        assert!(Instant::now() < deadline, "the container never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Let the command start in it.
    std::thread::sleep(Duration::from_millis(500));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let killed = Instant::now();
    while !containers_of_run(&run_id).is_empty() {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the container outlived vibesys by 5 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("container gone {:?} after kill -9", killed.elapsed());
}

#[test]
fn policy_show_and_doctor_describe_the_docker_backend() {
    let img = TestImage::new();
    let ws = workspace();
    let out = ok(vibesys(ws.path())
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        .args(["policy", "show", "--backend", "docker", "--json"])
        .args([
            "--read-only",
            "ro",
            "--hidden",
            "ro/secret",
            "--hidden",
            "key.txt",
        ])
        .output()
        .unwrap());
    let v = json(&out);
    let plan = &v["backends"]["docker"]["plan"];
    assert_eq!(plan["cap_drop"], serde_json::json!(["ALL"]), "{v}");
    let security = plan["security_opt"].as_array().unwrap();
    assert_eq!(security[0], "no-new-privileges");
    let profile = security[1]
        .as_str()
        .unwrap()
        .strip_prefix("seccomp=")
        .unwrap();
    assert_eq!(profile, vs_sandbox::syscall_rules::docker_seccomp_profile());
    assert_eq!(
        plan["network_mode"], "bridge",
        "vibesys.toml default keeps network"
    );
    let roles: Vec<&str> = plan["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["workspace", "mask-file", "read-only", "mask-dir"],
        "{v}"
    );
    assert_eq!(plan["execute_via"], "engine-exec", "a dynamic vibesys: {v}");
    let out = ok(vibesys(ws.path())
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .args(["policy", "show", "--backend", "docker", "--json"])
        .output()
        .unwrap());
    let v = json(&out);
    let plan = &v["backends"]["docker"]["plan"];
    assert_eq!(plan["execute_via"], "command-server", "{v}");
    assert_eq!(plan["lifeline"][1], "internal-command-server", "{v}");
    // A dynamic executable cannot serve inside the image: named, refused.
    let out = ok(vibesys(ws.path())
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        .env("VIBESYS_COMMAND_SERVER", vibesys_bin())
        .args(["policy", "show", "--backend", "docker", "--json"])
        .output()
        .unwrap());
    let err = json(&out)["backends"]["docker"]["error"].to_string();
    assert!(
        err.contains("VIBESYS_COMMAND_SERVER") && err.contains("dynamically linked"),
        "{err}"
    );
    let err = fails(
        exec(&img, ws.path(), &unique("dyn"))
            .env("VIBESYS_COMMAND_SERVER", vibesys_bin())
            .args(["/bin/sh", "-c", "echo RAN"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("dynamically linked"), "{err}");
    assert!(
        v["backends"]["docker"]["report"]["paths"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["enforced"] == true)
    );
    let out = ok(vibesys(ws.path())
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_DOCKER_IMAGE", &img.name)
        .args([
            "policy",
            "show",
            "--backend",
            "docker",
            "--json",
            "--no-network",
        ])
        .output()
        .unwrap());
    assert_eq!(
        json(&out)["backends"]["docker"]["plan"]["network_mode"],
        "none"
    );
    let doctor = ok(vibesys(ws.path())
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .args(["doctor", "--json"])
        .output()
        .unwrap_or_else(|e| panic!("{e}")))
    .to_owned();
    let v = json(&doctor);
    let docker = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "docker")
        .unwrap();
    let detail = docker["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("{} loaded ({})", img.name, img.config_digest)),
        "{detail}"
    );
    assert!(detail.contains("the Engine's exec API"), "{detail}");
    let doctor = ok(vibesys(ws.path())
        .env("VIBESYS_IMAGES_LOCK", &img.lock)
        .env("VIBESYS_COMMAND_SERVER", static_vibesys())
        .args(["doctor", "--json"])
        .output()
        .unwrap());
    assert!(
        doctor.contains("framework commands go through the command server"),
        "{doctor}"
    );
}
