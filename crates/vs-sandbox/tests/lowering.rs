//! Pure tests of the policy rules and of each backend's lowering (bwrap
//! argv, Landlock rules, Seatbelt profile), with snapshots of what users
//! and tools read. Paths of the temporary workspace are filtered to [WS].
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use vs_sandbox::resources::ResourceOrigin;
use vs_sandbox::{
    BwrapOptions, BwrapPlan, Confinement, HostResources, HostSandbox, LandlockPlan, PolicyError,
    ProjectPathPolicy, SeatbeltPlan, Workspace,
};

/// The target's tmp dir, or (when the checkout lies below `/tmp`, which
/// Landlock refuses a workspace under) a directory below `/var/lib` or
/// `~/.cache` of this checkout's own.
fn landlock_safe_dir() -> std::path::PathBuf {
    let target = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let real = std::fs::canonicalize(&target).unwrap_or_else(|_| target.clone());
    if !["/tmp", "/var/tmp", "/dev/shm"]
        .iter()
        .any(|t| real.starts_with(t) || target.starts_with(t))
    {
        return target;
    }
    let key: u64 = real
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf29ce484222325, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
        });
    let root = std::fs::metadata("/proc/self").map(|m| {
        use std::os::unix::fs::MetadataExt;
        m.uid() == 0
    });
    let base = if root.unwrap_or(false) {
        std::path::PathBuf::from("/var/lib/vibesys-tests")
    } else {
        std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/vibesys-tests")
    };
    let dir = base.join(format!("lowering-{key:016x}"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn workspace() -> (tempfile::TempDir, Workspace) {
    let dir = tempfile::Builder::new()
        .prefix("lowering")
        .tempdir_in(landlock_safe_dir())
        .unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("state/runs")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("token.txt"), "t").unwrap();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    let ws = Workspace::open(root).unwrap();
    (dir, ws)
}

fn filter(text: &str, ws: &Workspace) -> String {
    text.replace(&ws.root().display().to_string(), "[WS]")
}

fn sample_policy() -> ProjectPathPolicy {
    ProjectPathPolicy::new(["docs", "state"], ["state/runs", "token.txt"]).unwrap()
}

fn resources() -> HostResources {
    let mut r = HostResources::none();
    r.add(Path::new("/usr"), ResourceOrigin::System);
    r
}

#[test]
fn lexical_rules() {
    let bad: &[(&[&str], &[&str], &str)] = &[
        (&[""], &[], "empty"),
        (&["."], &[], "empty"),
        (&["/etc"], &[], "absolute"),
        (&["a/../b"], &[], "contains `..`"),
        (&["a", "a/"], &[], "listed twice"),
        (&["a"], &["./a"], "listed twice"),
        (
            &["a", "a/b"],
            &[],
            "read-only path \"a/b\" lies below read-only path \"a\"",
        ),
        (
            &["a/b"],
            &["a"],
            "read-only path \"a/b\" lies below hidden path \"a\"",
        ),
        (
            &[],
            &["a", "a/b"],
            "hidden path \"a/b\" lies below hidden path \"a\"",
        ),
    ];
    for (ro, hidden, needle) in bad {
        let err = ProjectPathPolicy::new(ro.iter(), hidden.iter()).unwrap_err();
        assert!(err.to_string().contains(needle), "{ro:?} {hidden:?}: {err}");
    }
    // A hidden path may sit below a read-only one; siblings are fine.
    ProjectPathPolicy::new(["state", "ab"], ["state/runs", "a"]).unwrap();
}

#[test]
fn an_empty_policy_never_touches_the_file_system() {
    let (_dir, ws) = workspace();
    std::fs::remove_dir_all(ws.root()).unwrap();
    let resolved = ProjectPathPolicy::empty().resolve(&ws).unwrap();
    assert!(resolved.entries().is_empty());
}

#[test]
fn symlinks_are_resolved_and_checked() {
    let (_dir, ws) = workspace();
    let root = ws.root();
    std::os::unix::fs::symlink("/etc/passwd", root.join("host-link")).unwrap();
    std::os::unix::fs::symlink("docs", root.join("docs-alias")).unwrap();
    std::os::unix::fs::symlink("nowhere", root.join("dangling")).unwrap();
    std::os::unix::fs::symlink(".", root.join("self")).unwrap();
    // The policy of these read-only and hidden paths fails to resolve.
    let refused = |ro: &[&str], hidden: &[&str]| {
        ProjectPathPolicy::new(ro.iter(), hidden.iter())
            .unwrap()
            .resolve(&ws)
            .unwrap_err()
    };
    let err = refused(&["host-link"], &[]);
    assert!(
        matches!(err, PolicyError::EscapesWorkspace { ref resolved, .. } if resolved == Path::new("/etc/passwd")),
        "{err}"
    );
    let err = refused(&["docs"], &["docs-alias"]);
    assert!(matches!(err, PolicyError::ResolvedOverlap { .. }), "{err}");
    let err = refused(&["dangling"], &[]);
    assert!(err.to_string().contains("nowhere"), "{err}");
    let err = refused(&["self"], &[]);
    assert!(matches!(err, PolicyError::IsWorkspaceRoot { .. }), "{err}");
    let err = refused(&["missing"], &[]);
    assert!(matches!(err, PolicyError::NotFound { .. }), "{err}");
    // A fifo is neither a file nor a directory.
    let status = std::process::Command::new("mkfifo")
        .arg(root.join("fifo"))
        .status()
        .unwrap();
    assert!(status.success());
    let err = refused(&[], &["fifo"]);
    assert!(err.to_string().contains("fifo"), "{err}");
}

/// The options of a bwrap launch with the network, no egress door, no
/// extra writable path, private file, device or read-only /proc entry.
fn plain_options() -> BwrapOptions {
    BwrapOptions {
        program: "/usr/bin/bwrap".into(),
        network: true,
        egress: None,
        chdir: None,
        helper: "/opt/vibesys/bin/vibesys".into(),
        writable: Vec::new(),
        private_files: Vec::new(),
        max_processes: 4096,
        proc_read_only: Vec::new(),
        devices: Vec::new(),
    }
}

#[test]
fn bwrap_argv_snapshot() {
    let (_dir, ws) = workspace();
    let resolved = sample_policy().resolve(&ws).unwrap();
    let options = BwrapOptions {
        proc_read_only: ["/proc/mtrr", "/proc/pressure", "/proc/sys"]
            .map(Into::into)
            .to_vec(),
        ..plain_options()
    };
    let plan = BwrapPlan::new(&resolved, &resources(), &options);
    let text = filter(&plan.args.join("\n"), &ws);
    insta::assert_snapshot!("bwrap_args", text);
    assert_eq!(
        plan.fds.iter().map(|s| s.describe()).collect::<Vec<_>>(),
        [
            "seccomp",
            "bind-dir:.",
            "bind-dir:.git",
            "bind-dir:docs",
            "bind-dir:state",
            "empty"
        ]
    );

    let sandbox = HostSandbox::new(&resolved, &resources(), &options).unwrap();
    let wrapped = sandbox
        .wrap(&["sh".into(), "-c".into(), "true".into()])
        .unwrap();
    assert_eq!(wrapped[0], "/opt/vibesys/bin/vibesys");
    assert_eq!(wrapped[1], "internal-launch");
    assert_eq!(wrapped[2], "--fd");
    assert_eq!(wrapped[3], "seccomp");
    assert_eq!(wrapped.last().unwrap(), "true");

    let offline = BwrapPlan::new(
        &resolved,
        &resources(),
        &BwrapOptions {
            network: false,
            ..options
        },
    );
    assert!(offline.args.contains(&"--unshare-net".to_owned()));
}

#[test]
fn bwrap_binds_a_private_copy_at_another_path() {
    let (_dir, ws) = workspace();
    let resolved = sample_policy().resolve(&ws).unwrap();
    let copy = vs_sandbox::PrivateFile {
        dir: "/run/user/1000/vibesys-session/s1".into(),
        name: ".claude.json".into(),
        target: "/home/u/.claude.json".into(),
    };
    let bad = vs_sandbox::PrivateFile {
        name: "../escape".into(),
        ..copy.clone()
    };
    let options = BwrapOptions {
        writable: vec!["/home/u/.claude/projects".into()],
        private_files: vec![copy, bad],
        proc_read_only: vec!["/proc/sys".into()],
        ..plain_options()
    };
    let plan = BwrapPlan::new(&resolved, &resources(), &options);
    let slot = plan
        .fds
        .iter()
        .position(|s| s.describe() == "bind-file:.claude.json")
        .expect("a descriptor slot for the copy");
    let fd = (vs_sandbox::bwrap::FIRST_SLOT_FD + slot as i32).to_string();
    let at = plan
        .args
        .windows(3)
        .position(|w| w == ["--bind-fd", fd.as_str(), "/home/u/.claude.json"])
        .expect("the copy bound read-write at the target");
    // After the writable state entries, so it covers a file inside one.
    let state = plan
        .args
        .iter()
        .position(|a| a == "/home/u/.claude/projects")
        .unwrap();
    assert!(state < at);
    // A malformed name is never bound.
    assert!(
        !plan.fds.iter().any(|s| s.describe().contains("escape")),
        "{:?}",
        plan.fds
    );
    assert!(matches!(
        &plan.fds[slot],
        vs_sandbox::bwrap::FdSlot::Bind { root, .. } if root == std::path::Path::new("/run/user/1000/vibesys-session/s1")
    ));
}

#[test]
fn landlock_rules_snapshot() {
    let dir = tempfile::Builder::new()
        .prefix("ll")
        .tempdir_in(landlock_safe_dir())
        .unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let resolved = ProjectPathPolicy::empty().resolve(&ws).unwrap();
    let plan = LandlockPlan::new(&resolved, &resources(), false).unwrap();
    let mut text = String::new();
    for p in &plan.read {
        text.push_str(&format!("read  {}\n", p.display()));
    }
    for p in &plan.write {
        text.push_str(&format!("write {}\n", p.display()));
    }
    text.push_str(&format!("network {}\n", plan.network));
    insta::assert_snapshot!("landlock_rules", filter(&text, &ws));
}

#[test]
fn landlock_refuses_projects_below_granted_trees() {
    let dir = tempfile::Builder::new()
        .prefix("ll")
        .tempdir_in("/tmp")
        .unwrap();
    let ws = Workspace::open(dir.path()).unwrap();
    let resolved = ProjectPathPolicy::empty().resolve(&ws).unwrap();
    let err = LandlockPlan::new(&resolved, &resources(), true).unwrap_err();
    assert!(err.to_string().contains("below /tmp"), "{err}");
}

#[test]
fn seatbelt_profile_snapshot_takes_paths_only_as_parameters() {
    let (_dir, ws) = workspace();
    let resolved = sample_policy().resolve(&ws).unwrap();
    let plan = SeatbeltPlan::new(
        &resolved,
        Path::new("/private/tmp"),
        vs_sandbox::seatbelt::SeatbeltNetwork::Open,
    );
    // No path is ever spliced into the profile text.
    assert!(!plan.profile.contains(&ws.root().display().to_string()));
    assert!(plan.profile.starts_with("; vibesys Seatbelt base profile"));
    assert!(plan.profile.contains("(deny default)"));
    let generated = plan
        .profile
        .split("; generated from the project path policy\n")
        .nth(1)
        .unwrap();
    let params: Vec<String> = plan
        .params
        .iter()
        .filter(|(k, _)| !k.starts_with("ANCESTOR_"))
        .map(|(k, v)| format!("-D{k}={}", v.display()))
        .collect();
    let generated: String = generated
        .lines()
        .filter(|l| !l.contains("ANCESTOR_"))
        .map(|l| format!("{l}\n"))
        .collect();
    insta::assert_snapshot!(
        "seatbelt_profile",
        filter(&format!("{generated}{}\n", params.join("\n")), &ws)
    );
    let argv = plan.argv(&["ls".into()]);
    assert_eq!(argv[0], "/usr/bin/sandbox-exec");
    assert_eq!(argv[1], "-p");
}

#[test]
fn the_landlock_report_names_the_process_that_kills_leftovers() {
    let (_dir, ws) = workspace();
    let resolved = ProjectPathPolicy::empty().resolve(&ws).unwrap();
    let cgroup = vs_sandbox::ProcessLimit::Cgroup {
        version: 1,
        parent: "/sys/fs/cgroup/pids".into(),
        max: 4096,
    };
    let rlimit = vs_sandbox::ProcessLimit::UserNamespaceRlimit { max: 4096 };
    let line = |limit| {
        vs_sandbox::landlock::landlock_report(&resolved, true, &limit)
            .hardening
            .into_iter()
            .find(|h| h.contains("kills everything the command leaves behind"))
            .unwrap()
    };
    // With a pids cgroup vibesys is the command's parent and a watchdog
    // kills the cgroup; without one a supervisor sits between them.
    let with_cgroup = line(cgroup);
    assert!(
        with_cgroup.starts_with("vibesys (a subreaper) is the command's parent"),
        "{with_cgroup}"
    );
    assert!(with_cgroup.contains("watchdog"), "{with_cgroup}");
    let without = line(rlimit);
    assert!(
        without.starts_with("a supervisor process (a subreaper) between vibesys and the command"),
        "{without}"
    );
}

/// An allow-list under bwrap: the network unshared, the proxy's socket and
/// the forwarder bound in, the proxy variables after the command's own
/// environment, the forwarder in front of the command.
#[test]
fn bwrap_lowers_an_egress_allow_list() {
    let (_dir, ws) = workspace();
    let resolved = sample_policy().resolve(&ws).unwrap();
    let door = vs_sandbox::egress::EgressDoor::handover(
        vs_sandbox::egress::AllowList::parse(["pypi.org", "127.0.0.1:8080"]).unwrap(),
        "/run/user/0/vibesys-egress-1/egress.sock",
    );
    let options = BwrapOptions {
        egress: Some(door),
        ..plain_options()
    };
    let sandbox = HostSandbox::new(&resolved, &resources(), &options).unwrap();
    let plan = sandbox.launch_plan(Some(&[("HTTPS_PROXY".into(), "http://evil:1".into())]));
    let args = plan.args.join(" ");
    assert!(args.contains("--unshare-net"), "{args}");
    assert!(
        args.contains(
            "--bind /run/user/0/vibesys-egress-1/egress.sock /.vibesys-egress/proxy.sock"
        ),
        "{args}"
    );
    assert!(
        args.contains("--ro-bind /opt/vibesys/bin/vibesys /.vibesys-egress/vibesys"),
        "{args}"
    );
    // The caller's value first, the door's after it: the last one wins.
    let evil = args.find("--setenv HTTPS_PROXY http://evil:1").unwrap();
    let door = args
        .rfind("--setenv HTTPS_PROXY http://127.0.0.1:3128")
        .unwrap();
    assert!(evil < door, "{args}");
    assert!(args.contains("--setenv NO_PROXY "), "{args}");
    let argv: Vec<String> = plan
        .argv(&["true".into()])
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cmd = argv.iter().position(|a| a == "--").unwrap();
    assert_eq!(
        argv[cmd + 1..],
        [
            "/.vibesys-egress/vibesys",
            "internal-egress-forward",
            "--socket",
            "/.vibesys-egress/proxy.sock",
            "--port",
            "3128",
            "--",
            "true"
        ]
    );
    let report = sandbox.report().hardening.join("\n");
    assert!(
        report.contains("admitting only pypi.org:{443,80}, 127.0.0.1:8080"),
        "{report}"
    );
}
