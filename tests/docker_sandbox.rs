//! `DockerSandbox` on the real Engine, with images vs-image built from
//! local files: the confinement scenarios of the host backends, bounded
//! output, timeouts that kill a process tree inside the container, exit
//! codes, the environment allow-list, `wrap`, and the stale-container
//! cleanup by run id. `execute` is tested both ways: through the
//! in-container command server (a static vibesys, built once by
//! `scripts/build-static.sh`) and through the Engine's exec API.

mod docker_support;

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use docker_support::{
    TestImage, assert_file_is, containers_of_run, static_vibesys, unique, workspace,
};
use vs_docker::{DockerOptions, DockerSandbox, EnvAllowList, ExecuteVia};
use vs_sandbox::{
    CommandRunner, CommandSpec, Confinement, ProjectPathPolicy, ResolvedPolicy, Workspace,
};

fn policy(ws: &Path) -> ResolvedPolicy {
    let w = Workspace::open(ws).unwrap();
    ProjectPathPolicy::new(["ro"], ["ro/secret", "key.txt", "hid"])
        .unwrap()
        .resolve(&w)
        .unwrap()
}

/// Options with the command server (the default of a static vibesys).
fn options(img: &TestImage) -> DockerOptions {
    let mut o = options_engine_exec(img);
    o.command_server = Some(static_vibesys());
    o
}

/// Options without a command server: `execute` uses the Engine's exec API.
fn options_engine_exec(img: &TestImage) -> DockerOptions {
    let mut o = DockerOptions::new(img.pin(), unique("t"), docker_support::vibesys_bin());
    o.mask_root = img.dir.path().join("masks").join(&o.run_id);
    o
}

/// A command in the container (same uid as the server, no capabilities)
/// cannot open the command server's descriptors, read its memory or
/// environment, or ptrace it.
fn assert_server_unreachable(sandbox: &DockerSandbox, root: &Path) -> String {
    // docker-init is pid 1; its one child is the server.
    let pid = text(&sh(sandbox, root, "cat /proc/1/task/1/children"))
        .0
        .trim()
        .to_owned();
    let cmdline = text(&sh(
        sandbox,
        root,
        &format!("tr '\\0' ' ' < /proc/{pid}/cmdline"),
    ));
    assert!(cmdline.0.contains("internal-command-server"), "{cmdline:?}");
    assert!(
        !pid.is_empty() && !pid.contains('\n'),
        "one command server: {pid:?}"
    );
    let r = sh(
        sandbox,
        root,
        &format!(
            "p={pid}; \
             (echo forged > /proc/$p/fd/1) 2>/dev/null && echo WROTE-FD1 || echo DENIED-FD1; \
             (exec 3</proc/$p/fd/0) 2>/dev/null && echo OPENED-FD0 || echo DENIED-FD0; \
             readlink /proc/$p/fd/1 >/dev/null 2>&1 && echo READLINK || echo DENIED-READLINK; \
             (head -c 1 /proc/$p/environ >/dev/null) 2>/dev/null && echo READ-ENV || echo DENIED-ENV; \
             (exec 3</proc/$p/mem) 2>/dev/null && echo OPENED-MEM || echo DENIED-MEM"
        ),
    );
    let (out, _) = text(&r);
    for denied in ["FD1", "FD0", "READLINK", "ENV", "MEM"] {
        assert!(
            out.contains(&format!("DENIED-{denied}")),
            "the command server is reachable ({denied}): {out}"
        );
    }
    pid
}

fn sh(sandbox: &DockerSandbox, ws: &Path, script: &str) -> vs_sandbox::CommandResult {
    sandbox
        .run(&CommandSpec::new(["/bin/sh", "-c", script], ws).timeout(Duration::from_secs(60)))
        .unwrap()
}

fn text(r: &vs_sandbox::CommandResult) -> (String, String) {
    (r.stdout.text_lossy(), r.stderr.text_lossy())
}

#[test]
fn confinement_scenarios() {
    let img = TestImage::new();
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let sandbox = DockerSandbox::start(&policy(&root), &options(&img)).unwrap();
    assert_eq!(sandbox.backend(), "docker");
    assert!(sandbox.report().is_complete());

    // Hidden directories and files show empty; writes to them fail.
    let r = sh(
        &sandbox,
        &root,
        "ls -A hid; ls -A ro/secret; wc -c < key.txt; \
         for p in hid/new ro/secret/new key.txt; do (echo x > $p) 2>/dev/null && echo WROTE $p; done; \
         rm -f key.txt 2>/dev/null && echo REMOVED; true",
    );
    let (out, _) = text(&r);
    assert_eq!(out.trim(), "0", "hidden paths must look empty: {r:?}");
    assert!(!out.contains("SECRET"));
    // Read-only: readable, writes refused.
    let r = sh(
        &sandbox,
        &root,
        "cat ro/a.txt; (echo x > ro/a.txt) 2>&1; (echo x > ro/new) 2>&1; mv ro ro2 2>&1; true",
    );
    let (out, _) = text(&r);
    assert!(out.starts_with("readable\n"), "{out}");
    assert!(out.matches("Read-only file system").count() >= 2, "{out}");
    assert!(root.join("ro").is_dir() && !root.join("ro/new").exists());
    assert_file_is(root.join("ro/a.txt"), "readable\n");
    // Nothing the agent wrote vanished: the host files are intact.
    assert_file_is(root.join("key.txt"), "SECRET-KEY\n");
    assert!(!root.join("hid/new").exists());

    // The workspace is writable and files are owned by the host user.
    assert_server_unreachable(&sandbox, &root);
    let r = sh(&sandbox, &root, "echo made > made.txt && id -u && id -g");
    assert!(r.success(), "{r:?}");
    let meta = std::fs::metadata(root.join("made.txt")).unwrap();
    let me = std::fs::metadata("/proc/self").unwrap();
    assert_eq!((meta.uid(), meta.gid()), (me.uid(), me.gid()));
    assert_eq!(
        text(&r).0,
        format!("{}\n{}\n", me.uid(), me.gid()),
        "runs as the host uid:gid"
    );

    // Nothing outside the image and the workspace: the image's top level
    // plus the workspace's ancestors, no host directories.
    let r = sh(&sandbox, &root, "ls -A /; ls -A /tmp");
    let (out, _) = text(&r);
    let top: Vec<&str> = out.lines().collect();
    for host_only in ["work", "root", "var", "opt", "lib64", "boot", "srv"] {
        assert!(
            !top.contains(&host_only),
            "host /{host_only} visible: {out}"
        );
    }
    // The image has its own empty /mnt (a runtime mount point): the host's
    // (not empty on these machines) must not show there.
    let r = sh(&sandbox, &root, "ls -A /mnt");
    assert_eq!(text(&r).0, "", "host /mnt visible: {r:?}");
    let r = sh(
        &sandbox,
        &root,
        "test -e /usr/bin/docker || test -e /bin/bash; echo $?",
    );
    assert_eq!(text(&r).0.trim(), "1", "a host program is visible");
    // No capabilities, no devices, no network.
    let r = sh(
        &sandbox,
        &root,
        "grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status; grep NoNewPrivs /proc/self/status; ls /dev; ls /sys/class/net",
    );
    let (out, _) = text(&r);
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("CapBnd:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    assert!(!out.contains("sda") && !out.contains("kvm"), "{out}");
    assert!(!out.contains("eth0"), "network must be none: {out}");
    drop(sandbox);
}

#[test]
fn non_root_user_owns_what_it_writes() {
    let img = TestImage::new();
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    // The workspace belongs to an unprivileged user; the container runs as it.
    let status = std::process::Command::new("chown")
        .args(["-R", "4242:4242"])
        .arg(&root)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "chown needs root (the test machine is root)"
    );
    let mut o = options(&img);
    o.user = "4242:4242".into();
    let sandbox = DockerSandbox::start(&policy(&root), &o).unwrap();
    let r = sh(
        &sandbox,
        &root,
        "id -u; echo x > mine.txt; echo y > ro/no.txt",
    );
    assert_eq!(text(&r).0, "4242\n", "{r:?}");
    assert_server_unreachable(&sandbox, &root);
    let meta = std::fs::metadata(root.join("mine.txt")).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (4242, 4242));
    assert!(!root.join("ro/no.txt").exists());
}

#[test]
fn execute_results_match_the_host_runner_through_the_command_server() {
    let img = TestImage::new();
    execute_results_match_the_host_runner(&options(&img), ExecuteVia::CommandServer);
}

#[test]
fn execute_results_match_the_host_runner_through_engine_exec() {
    let img = TestImage::new();
    execute_results_match_the_host_runner(&options_engine_exec(&img), ExecuteVia::EngineExec);
}

fn execute_results_match_the_host_runner(o: &DockerOptions, via: ExecuteVia) {
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let sandbox = DockerSandbox::start(&policy(&root), o)
        .unwrap()
        .with_output_cap(64 * 1024);
    assert_eq!(sandbox.execute_via(), via);

    let r = sh(&sandbox, &root, "echo out; echo err >&2; exit 7");
    assert_eq!((r.exit_code, r.signal), (7, None));
    assert_eq!(text(&r), ("out\n".into(), "err\n".into()));
    // Signal deaths are 128+N, as in the host runner.
    let r = sh(&sandbox, &root, "kill -TERM $$");
    assert_eq!((r.exit_code, r.signal), (143, Some(15)), "{r:?}");
    let r = sh(&sandbox, &root, "kill -KILL $$");
    assert_eq!((r.exit_code, r.signal), (137, Some(9)), "{r:?}");
    // stdin is delivered and closed.
    let r = sandbox
        .run(&CommandSpec::new(["/bin/sh", "-c", "cat; echo done"], &root).stdin(b"in\n".to_vec()))
        .unwrap();
    assert_eq!(text(&r).0, "in\ndone\n");
    // The environment is exactly what the spec gives (plus the image's).
    let r = sandbox
        .run(&CommandSpec::new(["/bin/sh", "-c", "echo $A-$HOSTVAR"], &root).env("A", "1"))
        .unwrap();
    assert_eq!(text(&r).0, "1-\n");
    // A program that does not exist: the shell's 127, like the host.
    let r = sh(&sandbox, &root, "no-such-program");
    assert_eq!(r.exit_code, 127);

    // Concurrent commands share the container (one client, many threads).
    let start = Instant::now();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..3)
            .map(|i| {
                let sandbox = &sandbox;
                let root = &root;
                scope.spawn(move || sh(sandbox, root, &format!("sleep 1; echo {i}")))
            })
            .collect();
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(text(&h.join().unwrap()).0, format!("{i}\n"));
        }
    });
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );

    // Bounded output: 2 GiB printed, 64 KiB kept per stream, memory flat.
    let start = Instant::now();
    let r = sh(
        &sandbox,
        &root,
        "dd if=/dev/zero bs=1048576 count=2048 2>/dev/null; echo tail",
    );
    assert!(r.success(), "{r:?}");
    assert_eq!(r.stdout.total_bytes(), (2u64 << 30) + 5);
    assert!(r.stdout.bytes().len() <= 64 * 1024);
    assert!(r.stdout.bytes().ends_with(b"tail\n"));
    assert!(r.stdout.is_truncated());
    eprintln!("2 GiB through execute in {:?}", start.elapsed());
}

#[test]
fn timeout_kills_the_process_tree_through_the_command_server() {
    let img = TestImage::new();
    timeout_kills_the_process_tree_inside_the_container(&options(&img));
}

#[test]
fn timeout_kills_the_process_tree_through_engine_exec() {
    let img = TestImage::new();
    timeout_kills_the_process_tree_inside_the_container(&options_engine_exec(&img));
}

fn timeout_kills_the_process_tree_inside_the_container(o: &DockerOptions) {
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let sandbox = DockerSandbox::start(&policy(&root), o).unwrap();
    let start = Instant::now();
    // A child, a setsid'd double-forked orphan, and the shell itself.
    let r = sandbox
        .run(
            &CommandSpec::new(
                [
                    "/bin/sh",
                    "-c",
                    "sleep 1000 & (setsid sleep 1001 &) ; (sleep 1002 &) ; sleep 1003",
                ],
                &root,
            )
            .timeout(Duration::from_secs(2)),
        )
        .unwrap();
    assert!(r.timed_out, "{r:?}");
    assert_eq!((r.exit_code, r.signal), (137, Some(9)));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let r = sh(&sandbox, &root, "ps -o pid,args");
    let (out, _) = text(&r);
    assert!(
        !out.contains("sleep"),
        "processes survived the timeout:\n{out}"
    );
    // The container itself is still usable.
    assert!(sh(&sandbox, &root, "true").success());

    // Cancellation kills the tree the same way.
    let token = vs_sandbox::runner::CancellationToken::new();
    let t2 = token.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        t2.cancel();
    });
    let r = sandbox
        .run(
            &CommandSpec::new(["/bin/sh", "-c", "sleep 1000 & sleep 1000"], &root)
                .cancel_token(token),
        )
        .unwrap();
    assert!(r.cancelled, "{r:?}");
    let (out, _) = text(&sh(&sandbox, &root, "ps -o args"));
    assert!(!out.contains("sleep"), "{out}");
}

#[test]
fn wrap_launches_an_attached_turn_with_allowed_env_only() {
    let img = TestImage::new();
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let mut o = options(&img);
    o.env = EnvAllowList::new(["ALLOWED_VAR", "OPENAI_API_KEY"]);
    let sandbox = DockerSandbox::start(&policy(&root), &o).unwrap();
    let argv: Vec<OsString> = [
        "/bin/sh",
        "-c",
        "echo $ALLOWED_VAR/$OTHER_VAR/$OPENAI_API_KEY; read l; echo got $l; exit 5",
    ]
    .iter()
    .map(OsString::from)
    .collect();
    let wrapped = sandbox.wrap(&argv).unwrap();
    let shown = format!("{wrapped:?}");
    assert!(!shown.contains("sk-test-secret"), "{shown}");
    let mut cmd = std::process::Command::new(&wrapped[0]);
    cmd.args(&wrapped[1..])
        .env_clear()
        .env("ALLOWED_VAR", "yes")
        .env("OTHER_VAR", "leak")
        .env("OPENAI_API_KEY", "sk-test-secret")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use std::io::Write;
        child.stdin.take().unwrap().write_all(b"line\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "yes//sk-test-secret\ngot line\n"
    );
    assert_eq!(sandbox.agent_path(&root.join("x")), root.join("x"));
    // Debug output of the sandbox never shows a value.
    assert!(!format!("{sandbox:?}").contains("sk-test-secret"));
}

#[test]
fn a_start_with_the_same_run_id_removes_the_dead_runs_container() {
    let img = TestImage::new();
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let o = options(&img);
    let first = DockerSandbox::start(&policy(&root), &o).unwrap();
    let first_id = first.container_id().to_owned();
    // Leak it as a dead run would (its lifeline stays open in this process).
    std::mem::forget(first);
    assert_eq!(containers_of_run(&o.run_id).len(), 1);
    let second = DockerSandbox::start(&policy(&root), &o).unwrap();
    let ids = containers_of_run(&o.run_id);
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert!(
        !first_id.starts_with(&ids[0]),
        "the stale container is gone"
    );
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !containers_of_run(&o.run_id).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        containers_of_run(&o.run_id).is_empty(),
        "drop removes the container"
    );
    assert!(!o.mask_root.exists(), "drop removes the masks");
}

#[test]
fn a_mismatched_or_missing_image_refuses_naming_both_digests() {
    let img = TestImage::new();
    let other = TestImage::build(false);
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    // The lock pins `other` (not loaded) under img's name: the Engine has
    // img's digest under that name.
    let mut o = options(&img);
    let mut pin = other.pin();
    pin.name = img.name.clone();
    o.image = pin;
    let err = DockerSandbox::start(&policy(&root), &o)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&other.config_digest), "{err}");
    assert!(err.contains(&img.config_digest), "{err}");
    // Same ID, different layers: refused naming both layer digests.
    let mut o = options(&img);
    o.image.diff_ids[0] = format!("sha256:{}", "0".repeat(64)).parse().unwrap();
    let err = DockerSandbox::start(&policy(&root), &o)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("layer 1") && err.contains(&"0".repeat(64)),
        "{err}"
    );
    assert!(containers_of_run(&o.run_id).is_empty());
}

#[test]
fn an_agent_that_kills_the_command_server_ends_the_run_not_the_checks() {
    let img = TestImage::new();
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let o = options(&img);
    let sandbox = DockerSandbox::start(&policy(&root), &o).unwrap();
    let pid = assert_server_unreachable(&sandbox, &root);
    // Same uid: the agent can kill it. The container then ends, and every
    // later command fails naming the server; none reports a success.
    let kill = format!("kill -9 {pid}");
    let _ = sandbox.run(&CommandSpec::new(["/bin/sh", "-c", kill.as_str()], &root));
    let err = sandbox
        .run(&CommandSpec::new(["/bin/sh", "-c", "true"], &root))
        .unwrap_err()
        .to_string();
    eprintln!("after the kill: {err}");
    assert!(err.contains("command server is unreachable"), "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !containers_of_run(&o.run_id).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        containers_of_run(&o.run_id).is_empty(),
        "the container is gone"
    );
}

#[test]
fn a_dynamic_command_server_is_refused_before_anything_starts() {
    let img = TestImage::new();
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    let mut o = options_engine_exec(&img);
    o.command_server = Some(docker_support::vibesys_bin().into());
    let err = DockerSandbox::start(&policy(&root), &o)
        .unwrap_err()
        .to_string();
    assert!(err.contains("dynamically linked"), "{err}");
    assert!(containers_of_run(&o.run_id).is_empty());
}

/// The run's container ends (its main process killed, as the OOM killer
/// or an operator might) while a framework command runs through the
/// Engine's exec API. Whichever way the race goes (the exec refused, the
/// runtime unable to enter the dying container, the command killed with
/// it), the command fails naming the container's end and its exit code,
/// never with a status or runtime message passed off as its own.
#[test]
fn a_container_that_ends_under_a_command_is_named_not_its_status() {
    let img = TestImage::new();
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    for delay_ms in [0u64, 10, 40, 150] {
        let o = options_engine_exec(&img);
        let sandbox = DockerSandbox::start(&policy(&root), &o).unwrap();
        let id = sandbox.container_id().to_owned();
        let killer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(delay_ms));
            std::process::Command::new("docker")
                .args(["kill", &id])
                .output()
                .unwrap()
        });
        let result = sandbox.run(
            &CommandSpec::new(["/bin/sh", "-c", "sleep 30"], &root)
                .timeout(Duration::from_secs(60)),
        );
        let killed = killer.join().unwrap();
        assert!(killed.status.success(), "docker kill: {killed:?}");
        let err = match result {
            Ok(r) => panic!("{delay_ms} ms: the command got a result of its own: {r:?}"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("ended while the command ran (exit code 137)"),
            "{delay_ms} ms: {err}"
        );
        drop(sandbox);
        assert!(containers_of_run(&o.run_id).is_empty(), "nothing is left");
    }
}

/// The evaluator's container is resolved and started by `select`, as every
/// other confinement: the checkout's policy (protected paths read-only,
/// `[sandbox] hidden` masked), the fresh `HOME` writable at its own path,
/// no network unless asked for.
#[test]
fn an_evaluation_container_goes_through_the_resolver_and_select() {
    let img = TestImage::new();
    let ws = workspace();
    let root = std::fs::canonicalize(ws.path()).unwrap();
    // An evaluation checkout holds the run state's hidden directories.
    for dir in [".vibesys/state/runs", ".vibesys/state/local"] {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    let home_dir = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(home_dir.path()).unwrap();
    let config = vs_sandbox::config::PolicyConfig {
        hidden: vec!["key.txt".into()],
        ..Default::default()
    };
    let protected = [std::path::PathBuf::from("ro")];
    let env = [(OsString::from("PATH"), OsString::from("/usr/bin:/bin"))];
    let sandbox = vs_runtime::build_confine::evaluation_container(
        vs_runtime::build_confine::EvalConfineRequest {
            place: vs_runtime::run::EvalPlace {
                checkout: &root,
                home: &home,
            },
            config,
            protected: &protected,
            program: std::ffi::OsStr::new("/bin/sh"),
            mode: vs_sandbox::ConfineMode::Auto,
            env: &env,
            helper: docker_support::vibesys_bin().into(),
            network: false,
            devices: Vec::new(),
        },
        options_engine_exec(&img),
    )
    .unwrap();
    let r = sh(
        &sandbox,
        &root,
        &format!(
            "echo h > {home}/made && echo HOME-OK; echo c > made && echo CHECKOUT-OK; \
             (echo x > ro/new) 2>/dev/null && echo RO-WROTE || echo RO-DENIED; \
             wc -c < key.txt",
            home = home.display()
        ),
    );
    let (out, err) = text(&r);
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["HOME-OK", "CHECKOUT-OK", "RO-DENIED", "0"],
        "{err}"
    );
    assert_file_is(home.join("made"), "h\n");
    assert_eq!(sandbox.plan().network_mode, "none");
}
