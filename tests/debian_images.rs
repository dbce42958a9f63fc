//! The three images built without Nix (scripts/images.sh): Debian minbase
//! roots and the real Claude Code CLI of the pinned claude-agent-sdk wheel,
//! checked against images/images.lock, loaded with `vibesys image load`
//! and used on the real Engine: git in the editor image on the mounted
//! workspace, `claude --version` in the agent image, a session of the real
//! CLI confined in the container that ends at its own login message, whole
//! turns of the real CLI (`session --prompt` and `run start --provider
//! claude`) against scripts/model-endpoint.py running in the container's
//! own network namespace (loopback only: never Docker's bridge or any
//! private-range address), and the hidden paths unreadable from a shell in
//! the same kind of container.
//!
//! The roots and the wheel are cached between runs (scripts/images.sh,
//! VIBESYS_SOURCES_CACHE): the first run on a machine debootstraps two
//! roots and downloads the wheel (a few minutes), later runs only build.

mod docker_support;
mod run_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use docker_support::common::engine_images::EngineImages;
use docker_support::{assert_file_is, containers_of_run, git, ok, require_docker, unique, vibesys};

fn repo() -> PathBuf {
    docker_support::repo_root()
}

/// A value of images/sources.conf.
fn source(name: &str) -> String {
    let text = std::fs::read_to_string(repo().join("images/sources.conf")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("images/sources.conf has no {name}"))
        .to_owned()
}

const IMAGES: [&str; 3] = ["editor", "agent", "evaluator-tool"];

/// Every pinned field of `fresh` (the rebuilt images, pinned into a lock
/// of their own) that differs from `committed`, one line each: tag,
/// manifest digest, config digest, diff_ids, each archive format's file
/// digest, and the recorded inputs; images one lock has and the other not.
/// Only an archive's path is not compared (the rebuilt archives live
/// elsewhere): its digest is.
fn lock_differences(committed: &vs_image::Lock, fresh: &vs_image::Lock) -> Vec<String> {
    fn field<T: PartialEq + std::fmt::Debug>(
        out: &mut Vec<String>,
        image: &str,
        name: &str,
        pinned: &T,
        rebuilt: &T,
    ) {
        if pinned != rebuilt {
            out.push(format!(
                "{image}: {name} pinned {pinned:?}, rebuilt {rebuilt:?}"
            ));
        }
    }
    let mut out = Vec::new();
    for name in committed.images.keys() {
        if !fresh.images.contains_key(name) {
            out.push(format!(
                "{name}: pinned, but scripts/images.sh did not build it"
            ));
        }
    }
    for (name, f) in &fresh.images {
        let Some(c) = committed.images.get(name) else {
            out.push(format!("{name}: built, but not pinned"));
            continue;
        };
        field(&mut out, name, "tag", &c.tag, &f.tag);
        field(
            &mut out,
            name,
            "manifest digest",
            &c.manifest_digest,
            &f.manifest_digest,
        );
        field(
            &mut out,
            name,
            "config digest",
            &c.config_digest,
            &f.config_digest,
        );
        field(&mut out, name, "diff_ids", &c.diff_ids, &f.diff_ids);
        let formats: std::collections::BTreeSet<&String> =
            c.archives.keys().chain(f.archives.keys()).collect();
        for format in formats {
            field(
                &mut out,
                name,
                &format!("{format} file digest"),
                &c.archives.get(format).map(|a| &a.digest),
                &f.archives.get(format).map(|a| &a.digest),
            );
        }
        let keys: std::collections::BTreeSet<&String> =
            c.inputs.keys().chain(f.inputs.keys()).collect();
        for key in keys {
            field(
                &mut out,
                name,
                &format!("input {key}"),
                &c.inputs.get(key),
                &f.inputs.get(key),
            );
        }
    }
    out
}

/// Checks the fresh archives (pinned in `fresh`) against the committed
/// lock: ANY pinned field that differs fails the test, naming the image,
/// the field and both values, followed by what `vibesys image verify`
/// says changed (a moved Debian mirror names its package versions). A
/// stale committed lock is then re-pinned on purpose, never tolerated.
fn check_against_the_committed_lock(dir: &Path, fresh: &vs_image::Lock, archives: &[PathBuf]) {
    let committed_path = repo().join("images/images.lock");
    let committed = vs_image::Lock::load(&committed_path).unwrap();
    let differences = lock_differences(&committed, fresh);
    if differences.is_empty() {
        return;
    }
    let out = vibesys(dir)
        .args(["image", "verify"])
        .args(archives)
        .arg("--lock")
        .arg(&committed_path)
        .output()
        .unwrap();
    panic!(
        "the rebuilt images differ from images/images.lock:\n  {}\n`vibesys image verify` says: {}\n(if the Debian mirror moved or the builder changed on purpose, re-pin: scripts/images.sh && vibesys image pin target/images/*.tar)",
        differences.join("\n  "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// The comparison names every kind of field that can go stale (the
/// committed lock against copies of itself, each with one field changed).
#[test]
fn the_lock_comparison_names_any_changed_pin() {
    let committed = vs_image::Lock::load(&repo().join("images/images.lock")).unwrap();
    assert!(lock_differences(&committed, &committed).is_empty());
    let other: vs_image::Digest = format!("sha256:{}", "e".repeat(64)).parse().unwrap();
    type Change = fn(&mut vs_image::LockedImage, &vs_image::Digest);
    let changes: [(&str, Change); 6] = [
        ("archive file digest", |i, d| {
            i.archives.get_mut("archive").unwrap().digest = d.clone()
        }),
        ("manifest digest", |i, d| {
            i.manifest_digest = Some(d.clone())
        }),
        ("config digest", |i, d| i.config_digest = d.clone()),
        ("diff_ids", |i, d| i.diff_ids[0] = d.clone()),
        ("input deb:git", |i, _| {
            i.inputs.insert("deb:git".into(), "1:0".into());
        }),
        ("tag", |i, _| i.tag = "other".into()),
    ];
    for (what, change) in changes {
        let mut fresh = committed.clone();
        change(fresh.images.get_mut("vibesys-editor").unwrap(), &other);
        let found = lock_differences(&committed, &fresh);
        assert_eq!(found.len(), 1, "{what}: {found:?}");
        assert!(
            found[0].starts_with(&format!("vibesys-editor: {what} pinned ")),
            "{what}: {found:?}"
        );
    }
    let mut fewer = committed.clone();
    fewer.images.remove("vibesys-agent");
    assert_eq!(
        lock_differences(&committed, &fewer),
        ["vibesys-agent: pinned, but scripts/images.sh did not build it"]
    );
}

/// scripts/model-endpoint.py inside the network namespace of the
/// container `container` finds (waited for), on that namespace's loopback
/// port 8787; killed on drop.
struct EndpointInNetns(std::process::Child);

/// The agent's container of a vibesys run id (not its `-eval` one).
fn agent_container(run_id: &str) -> Option<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--format", "{{.ID}} {{.Names}}", "--filter"])
        .arg(format!("label=dev.vibesys.run-id={run_id}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).lines().find_map(|l| {
        let (id, name) = l.split_once(' ')?;
        (!name.ends_with("-eval")).then(|| id.to_owned())
    })
}

impl EndpointInNetns {
    fn start(container: impl Fn() -> Option<String>, script: &Path, log: &Path) -> Self {
        let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let pid = loop {
            if let Some(id) = container() {
                let out = Command::new("docker")
                    .args(["inspect", "-f", "{{.State.Pid}}", &id])
                    .output()
                    .unwrap();
                let pid = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                if pid.parse::<u32>().is_ok_and(|p| p > 0) {
                    break pid;
                }
            }
            assert!(std::time::Instant::now() < end, "no container started");
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        docker_support::require_tool("nsenter", "apt-get install util-linux");
        let port_file = log.with_extension("port");
        let err_file = log.with_extension("err");
        let mut child = Command::new("nsenter")
            .args(["-t", &pid, "-n", "--"])
            .arg("python3")
            .arg(repo().join("scripts/model-endpoint.py"))
            .args(["--port", "8787", "--script"])
            .arg(script)
            .arg("--log")
            .arg(log)
            .arg("--port-file")
            .arg(&port_file)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&err_file).unwrap())
            .spawn()
            .unwrap();
        while !port_file.exists() {
            if child.try_wait().unwrap().is_some() || std::time::Instant::now() >= end {
                let _ = child.kill();
                panic!(
                    "the model endpoint did not start in the container's network namespace: {}",
                    std::fs::read_to_string(&err_file).unwrap_or_default()
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Self(child)
    }
}

impl Drop for EndpointInNetns {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_images_built_without_nix_run_git_and_the_real_claude_cli_confined() {
    require_docker();
    let t0 = std::time::Instant::now();
    let t = tempfile::tempdir().unwrap();
    let out_dir = t.path().join("images");
    let built = Command::new(repo().join("scripts/images.sh"))
        .args(IMAGES)
        .env("VIBESYS_BIN", docker_support::vibesys_bin())
        .env("IMAGES_OUT", &out_dir)
        .output()
        .unwrap();
    ok(built);
    eprintln!("built at {:?}", t0.elapsed());
    let archives: Vec<PathBuf> = IMAGES
        .iter()
        .map(|n| out_dir.join(format!("{n}.tar")))
        .collect();

    // The SBOM lists the Debian packages and the wheel, with versions.
    let sbom = ok(vibesys(t.path())
        .args(["image", "pin"])
        .args(&archives)
        .args(["--lock", "images.lock"])
        .output()
        .unwrap());
    assert!(sbom.contains("pinned vibesys-agent"), "{sbom}");
    let lock = vs_image::Lock::load(&t.path().join("images.lock")).unwrap();
    eprintln!("built and pinned at {:?}", t0.elapsed());
    check_against_the_committed_lock(t.path(), &lock, &archives);
    let agent = &lock.images["vibesys-agent"];
    assert_eq!(
        agent.inputs.get("pypi:claude-agent-sdk"),
        Some(&source("CLAUDE_SDK_VERSION"))
    );
    for img in lock.images.values() {
        assert!(img.inputs.contains_key("deb:git"), "{img:?}");
    }
    assert!(
        lock.images["vibesys-evaluator-tool"]
            .inputs
            .contains_key("deb:gcc")
    );
    let listed = std::fs::read_to_string(out_dir.join("editor.packages")).unwrap();
    let git_line = listed.lines().find(|l| l.starts_with("git ")).unwrap();
    assert_eq!(
        git_line.split(' ').nth(1),
        lock.images["vibesys-editor"]
            .inputs
            .get("deb:git")
            .map(String::as_str)
    );

    // When a digest moves, verify names the package versions that moved
    // (here: a lock edited as if git had been older when it was pinned).
    let real_git = lock.images["vibesys-editor"].inputs["deb:git"].clone();
    let mut old = lock.clone();
    let e = old.images.get_mut("vibesys-editor").unwrap();
    e.inputs.insert("deb:git".into(), "1:2.39.2-1.1".into());
    e.inputs.insert("deb:gone".into(), "1.0".into());
    e.config_digest = format!("sha256:{}", "0".repeat(64)).parse().unwrap();
    old.save(&t.path().join("old.lock")).unwrap();
    let out = vibesys(t.path())
        .args(["image", "verify"])
        .arg(&archives[0])
        .args(["--lock", "old.lock"])
        .output()
        .unwrap();
    let err = docker_support::fails(out);
    assert!(
        err.contains(&format!(
            "the inputs changed: deb:git 1:2.39.2-1.1 -> {real_git}, deb:gone 1.0 removed"
        )),
        "{err}"
    );

    // The images are the real ones (the digests of images/images.lock): the
    // Engine may hold them already, under the same IDs and tags. Only what
    // this test adds is removed at the end, and moved tags are put back.
    let loaded = EngineImages::before_loading(lock.images.iter().flat_map(|(name, img)| {
        [
            Some(format!("{name}:{}", img.tag)),
            Some(img.config_digest.to_string()),
            img.manifest_digest.as_ref().map(ToString::to_string),
        ]
        .into_iter()
        .flatten()
    }));
    for a in &archives {
        ok(vibesys(t.path())
            .args(["image", "load"])
            .arg(a)
            .args(["--lock", "images.lock"])
            .output()
            .unwrap());
    }
    eprintln!("loaded at {:?}", t0.elapsed());

    // The workspace: a git repository with a hidden key.
    let ws = tempfile::tempdir().unwrap();
    let p = ws.path();
    std::fs::write(p.join("a.txt"), "tracked\n").unwrap();
    std::fs::write(p.join("key.txt"), "SECRET-KEY\n").unwrap();
    git(p, &["init", "-q"]);
    git(p, &["add", "a.txt"]);
    git(p, &["commit", "-qm", "init"]);
    std::fs::write(p.join("new.txt"), "untracked\n").unwrap();
    let lock_path = t.path().join("images.lock");
    let run = |image: &str, script: &str| {
        let run_id = unique("debimg");
        let out = vibesys(p)
            .env("VIBESYS_IMAGES_LOCK", &lock_path)
            .env("VIBESYS_RUN_ID", &run_id)
            .args(["exec", "--confine", "docker", "--image", image])
            .args(["--hidden", "key.txt", "--", "/bin/sh", "-c", script])
            .output()
            .unwrap();
        assert!(
            containers_of_run(&run_id).is_empty(),
            "container left behind"
        );
        out
    };

    // Editor: git works on the mounted workspace (at its host path).
    let out = ok(run(
        "vibesys-editor",
        "git --version && git status --porcelain --untracked-files=all && pwd",
    ));
    assert!(out.contains("git version 2."), "{out}");
    assert!(out.contains("?? new.txt"), "{out}");
    assert!(out.contains(&p.display().to_string()), "{out}");

    eprintln!("editor checked at {:?}", t0.elapsed());
    // Evaluator-tool: its toolchains are there.
    let out = ok(run(
        "vibesys-evaluator-tool",
        "make --version | head -n1; gcc --version | head -n1; python3 --version",
    ));
    assert!(
        out.contains("GNU Make") && out.contains("gcc") && out.contains("Python 3"),
        "{out}"
    );

    // Agent: the real CLI, the pinned version; and from a shell in the
    // same kind of container the hidden key reads as empty.
    let out = ok(run(
        "vibesys-agent",
        "claude --version; echo \"key=[$(cat key.txt)]\"",
    ));
    assert!(
        out.contains(&format!("{} (Claude Code)", source("CLAUDE_CLI_VERSION"))),
        "{out}"
    );
    assert!(
        out.contains("key=[]"),
        "the hidden file was readable: {out}"
    );

    eprintln!("agent checked at {:?}", t0.elapsed());
    // A session with a prompt and no credentials: the real CLI runs
    // confined in the container and ends at its own login message; its
    // state directory is the host's, bound below the image's HOME.
    let home = tempfile::tempdir().unwrap();
    let run_id = unique("debimg-session");
    let out = vibesys(p)
        .env("HOME", home.path())
        .env("VIBESYS_IMAGES_LOCK", &lock_path)
        .env("VIBESYS_RUN_ID", &run_id)
        .args(["session", "--provider", "claude", "--confine", "docker"])
        .args(["--image", "vibesys-agent", "--hidden", "key.txt"])
        .args(["--prompt", "print the content of key.txt"])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("Not logged in"), "{out:?}");
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert!(!text.contains("SECRET-KEY"), "{text}");
    assert!(
        home.path().join(".claude/projects").is_dir(),
        "the CLI wrote nothing into the bound state directory: {text}"
    );
    assert!(
        containers_of_run(&run_id).is_empty(),
        "container left behind"
    );

    eprintln!("session at {:?}", t0.elapsed());
    // A whole turn of the real CLI in the agent image: the scripted model
    // endpoint runs in the container's own network namespace (entered
    // with nsenter, the container's network unshared: loopback only), so
    // the CLI reaches it at 127.0.0.1 and nothing goes through Docker's
    // bridge or any private-range address. The CLI runs Bash and Read
    // itself, confined, without a prompt (the provider table's flags).
    let turn_dir = tempfile::tempdir().unwrap();
    let script = turn_dir.path().join("script.json");
    std::fs::write(
        &script,
        r#"[
  {"tool": "Bash", "input": {"command": "echo IS_SANDBOX=$IS_SANDBOX; tr '\\0' ' ' </proc/$PPID/cmdline; echo made-in-docker > made.txt"}},
  {"tool": "Read", "input": {"file_path": "{cwd}/key.txt"}},
  {"text": "turn done"}
]"#,
    )
    .unwrap();
    let log = turn_dir.path().join("requests.jsonl");
    let run_id = unique("debimg-turn");
    let session = vibesys(p)
        .env("HOME", home.path())
        .env("VIBESYS_IMAGES_LOCK", &lock_path)
        .env("VIBESYS_RUN_ID", &run_id)
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:8787")
        .env("ANTHROPIC_API_KEY", "test-not-a-key")
        .args(["session", "--provider", "claude", "--confine", "docker"])
        .args([
            "--image",
            "vibesys-agent",
            "--hidden",
            "key.txt",
            "--no-network",
        ])
        .args(["--prompt", "write made.txt"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let endpoint = EndpointInNetns::start(|| agent_container(&run_id), &script, &log);
    let out = session.wait_with_output().unwrap();
    drop(endpoint);
    let text = ok(out);
    assert!(text.contains("turn done"), "{text}");
    assert_file_is(p.join("made.txt"), "made-in-docker\n");
    std::fs::remove_file(p.join("made.txt")).unwrap();
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("IS_SANDBOX=1"), "{logged}");
    assert!(
        logged.contains("--dangerously-skip-permissions"),
        "{logged}"
    );
    assert!(
        !logged.contains("SECRET-KEY"),
        "the hidden key reached the endpoint"
    );
    assert!(
        containers_of_run(&run_id).is_empty(),
        "container left behind"
    );
    eprintln!("real turn in docker at {:?}", t0.elapsed());
    // The docker run environment with the agent image: `vibesys run`
    // starts the real CLI as candidate 1's agent, confined in its
    // container, and it ends at its own login message; the candidate's
    // record keeps that output and no container of the run is left.
    let (_rd, rp) = run_support::project(run_support::TASK);
    let out = vibesys(&rp)
        .env("HOME", home.path())
        .env("VIBESYS_IMAGES_LOCK", &lock_path)
        .args(["run", "start", "--provider", "claude", "--candidates", "1"])
        .args([
            "--image",
            "vibesys-agent",
            "--prompt",
            "print secrets/key.txt",
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = run_support::only_run(&rp);
    let log =
        std::fs::read_to_string(rp.join(format!(".vibesys/state/runs/{run}/logs/1-agent.log")))
            .unwrap_or_default();
    assert!(log.contains("Not logged in"), "{text}\nagent log: {log}");
    assert!(!log.contains("SECRET-KEY"), "{log}");
    assert!(containers_of_run(&run).is_empty(), "container left behind");
    eprintln!("run at {:?}", t0.elapsed());
    // `vibesys run` with the real CLI doing a whole turn in the agent image
    // (network unshared; the endpoint in the candidate container's own
    // namespace): it writes the speed through Bash and tries the hidden key
    // through Read; the candidate passes, measured, and no request held
    // the key.
    let task = run_support::TASK.replace("[sandbox]\n", "[sandbox]\nnetwork = false\n");
    assert_ne!(task, run_support::TASK);
    let (_rd2, rp2) = run_support::project(&task);
    std::fs::write(
        &script,
        r#"[
  {"tool": "Bash", "input": {"command": "echo 7 > speed.txt"}},
  {"tool": "Read", "input": {"file_path": "{cwd}/secrets/key.txt"}},
  {"text": "candidate done"}
]"#,
    )
    .unwrap();
    let log = turn_dir.path().join("run-requests.jsonl");
    let started = vibesys(&rp2)
        .env("HOME", home.path())
        .env("VIBESYS_IMAGES_LOCK", &lock_path)
        .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:8787")
        .env("ANTHROPIC_API_KEY", "test-not-a-key")
        .args(["run", "start", "--provider", "claude", "--candidates", "1"])
        .args(["--image", "vibesys-agent", "--prompt", "make it faster"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let runs = rp2.join(".vibesys/state/runs");
    let endpoint = EndpointInNetns::start(
        || {
            let run = std::fs::read_dir(&runs).ok()?.next()?.ok()?;
            // A candidate's containers are labelled RUN-N (RUN-N-eval, ...).
            agent_container(&format!("{}-1", run.file_name().to_str()?))
        },
        &script,
        &log,
    );
    let out = started.wait_with_output().unwrap();
    drop(endpoint);
    let table = ok(out);
    let run = run_support::only_run(&rp2);
    let status = run_support::status_json(
        &rp2,
        &run,
        &[("VIBESYS_IMAGES_LOCK", lock_path.to_str().unwrap())],
    );
    let c = run_support::candidate(&status, 1);
    assert_eq!(c["state"], "passed", "{table}\n{c:#}");
    assert_eq!(c["metrics"]["time_ms"], 7, "{c:#}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("\"step\":2"),
        "the turn ran to its end: {logged}"
    );
    assert!(
        !logged.contains("SECRET-KEY"),
        "the hidden key reached the endpoint"
    );
    for suffix in ["1", "1-eval"] {
        assert!(
            containers_of_run(&format!("{run}-{suffix}")).is_empty(),
            "container left behind"
        );
    }
    eprintln!("real run in docker at {:?}", t0.elapsed());
    // A shell in the same kind of container (the agent image, the same
    // policy): the hidden key reads as empty.
    let out = vibesys(p)
        .env("HOME", home.path())
        .env("VIBESYS_IMAGES_LOCK", &lock_path)
        .env("VIBESYS_RUN_ID", unique("debimg-shell"))
        .args(["session", "--provider", "custom", "--confine", "docker"])
        .args(["--image", "vibesys-agent", "--hidden", "key.txt", "--"])
        .args([
            "/bin/sh",
            "-c",
            "echo \"key=[$(cat key.txt 2>/dev/null)]\"; cat key.txt >/dev/null 2>&1 || echo unreadable; command -v claude",
        ])
        .output()
        .unwrap();
    let text = ok(out);
    assert!(text.contains("key=[]"), "{text}");
    assert!(text.contains("/usr/local/bin/claude"), "{text}");

    // As an unprivileged uid, through the library: the state bound below
    // the image's HOME is writable, its configuration entry is not, the
    // hidden key reads as empty, and the real CLI runs.
    let user = "4242:4242";
    let state = tempfile::tempdir().unwrap();
    let claude_dir = state.path().join(".claude");
    std::fs::create_dir_all(&claude_dir).unwrap();
    std::fs::write(claude_dir.join("settings.json"), "{}\n").unwrap();
    let uws = tempfile::tempdir().unwrap();
    let uroot = std::fs::canonicalize(uws.path()).unwrap();
    std::fs::write(uroot.join("key.txt"), "SECRET-KEY\n").unwrap();
    for dir in [state.path(), uroot.as_path()] {
        assert!(
            Command::new("chown")
                .args(["-R", user])
                .arg(dir)
                .status()
                .unwrap()
                .success()
        );
    }
    let pinned = &lock.images["vibesys-agent"];
    let pin = vs_docker::ImagePin::from_locked("vibesys-agent", pinned);
    let mut o =
        vs_docker::DockerOptions::new(pin, unique("debimg-lib"), docker_support::vibesys_bin());
    o.mask_root = t.path().join("masks").join(&o.run_id);
    o.user = user.to_owned();
    o.extra_mounts = vec![
        vs_docker::ExtraMount {
            source: claude_dir.clone(),
            target: "/home/agent/.claude".into(),
            read_only: false,
        },
        vs_docker::ExtraMount {
            source: claude_dir.join("settings.json"),
            target: "/home/agent/.claude/settings.json".into(),
            read_only: true,
        },
    ];
    let policy = vs_sandbox::ProjectPathPolicy::new(Vec::<&str>::new(), ["key.txt"])
        .unwrap()
        .resolve(&vs_sandbox::Workspace::open(&uroot).unwrap())
        .unwrap();
    let sandbox = vs_docker::DockerSandbox::start(&policy, &o).unwrap();
    use vs_sandbox::CommandRunner;
    let r = sandbox
        .run(
            &vs_sandbox::CommandSpec::new(
                [
                    "/bin/sh",
                    "-c",
                    "id -u; claude --version; echo \"key=[$(cat key.txt 2>/dev/null)]\"; \
                     echo x > /home/agent/.claude/written && echo state-writable; \
                     (echo '{\"hooks\":1}' > /home/agent/.claude/settings.json) 2>/dev/null && echo SETTINGS-WRITTEN; true",
                ],
                &uroot,
            )
            .timeout(std::time::Duration::from_secs(60)),
        )
        .unwrap();
    let text = r.stdout.text_lossy();
    drop(sandbox);
    assert!(text.starts_with("4242\n"), "{text}");
    assert!(text.contains("(Claude Code)"), "{text}");
    assert!(text.contains("key=[]"), "{text}");
    assert!(text.contains("state-writable"), "{text}");
    assert!(!text.contains("SETTINGS-WRITTEN"), "{text}");
    assert!(claude_dir.join("written").is_file());
    assert_file_is(claude_dir.join("settings.json"), "{}\n");
    drop(loaded);
}
