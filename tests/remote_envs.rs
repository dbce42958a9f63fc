//! The modal and skypilot run environments against the real clients from
//! PyPI (`scripts/remote-clients.sh` installs them; a missing client fails
//! the test naming the script). No cloud is reachable here, so the tests
//! go up to the network boundary: the generated SkyPilot task is loaded
//! by `sky.Task.from_yaml`, the generated Modal module is imported by
//! `modal`, the real `sky` and `modal` CLIs are run (through a wrapper
//! that records their argv and then executes the real client) and their
//! refusals without credentials become clear errors; the editor container
//! of these environments has no devices (Engine API).

mod docker_support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use docker_support::common::remote_client_tools as real_tools;
use docker_support::{TestImage, fails, unique};

/// vibesys's own failure after a client streamed its output: exit 125,
/// the last line `vibesys: error: ...`; returns that line.
fn fails_after_client(out: Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(125), "stderr: {err}");
    let last = err.lines().last().unwrap_or_default().to_owned();
    assert!(last.starts_with("vibesys: error: "), "{err}");
    last
}
use serde_json::{Value, json};
use vs_runtime::remote::config::SKYPILOT_CLOUDS;
use vs_runtime::remote::{RemoteBuild, RemoteConfig, TrustedEvaluation, modal, skypilot};

fn venv_python() -> PathBuf {
    real_tools().join("remote-clients/bin/python")
}

/// Writes `json` to `dir/SCRIPT.json`, runs `tests/remote/SCRIPT` on it with
/// the clients' Python (HOME=`dir`) and returns its stdout; fails the
/// test, `refusal` first, unless it succeeds.
fn python_on_json(script: &str, dir: &Path, json: Vec<u8>, refusal: &str) -> String {
    let path = dir.join(script).with_extension("json");
    std::fs::write(&path, json).unwrap();
    let out = Command::new(venv_python())
        .arg(docker_support::tests_dir().join("remote").join(script))
        .arg(&path)
        .env("HOME", dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{refusal}{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// A tool directory whose `sky` and `modal` record their argv (one file
/// per invocation, NUL-separated) and then execute the real client.
struct RecordingTools {
    dir: tempfile::TempDir,
}

impl RecordingTools {
    fn new() -> Self {
        let real = real_tools().join("remote-clients");
        let dir = tempfile::tempdir().unwrap();
        let venv = dir.path().join("remote-clients");
        let bin = venv.join("bin");
        let record = dir.path().join("record");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&record).unwrap();
        std::os::unix::fs::symlink(real.join("lib"), venv.join("lib")).unwrap();
        for name in ["sky", "modal", "python"] {
            let script = format!(
                "#!/bin/sh\nf=$(mktemp '{rec}/{name}.XXXXXX')\nprintf '%s\\0' \"$@\" > \"$f\"\nexec '{real}' \"$@\"\n",
                rec = record.display(),
                real = real.join("bin").join(name).display(),
            );
            let p = bin.join(name);
            std::fs::write(&p, script).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Every recorded invocation of `name`, oldest first.
    fn invocations(&self, name: &str) -> Vec<Vec<String>> {
        let mut files: Vec<(std::time::SystemTime, PathBuf)> =
            std::fs::read_dir(self.dir.path().join("record"))
                .unwrap()
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("{name}."))
                })
                .map(|e| (e.metadata().unwrap().modified().unwrap(), e.path()))
                .collect();
        files.sort();
        files
            .into_iter()
            .map(|(_, p)| {
                std::fs::read(p)
                    .unwrap()
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .collect()
    }
}

const TASK: &str = r#"[check]
argv = ["sh", "-c", "test -f main.txt && echo \"it's correct\""]
timeout_secs = 60
[measure]
argv = ["sh", "-c", "echo '{\"seconds\": 1.5}'"]
timeout_secs = 30
"#;

/// A project with run state, one commit, and `extra` appended to TASK.
struct Project {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Project {
    fn new(extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("vibesys.toml"), format!("{TASK}{extra}")).unwrap();
        std::fs::write(p.join("main.txt"), "hello\n").unwrap();
        docker_support::git(p, &["init", "-q"]);
        docker_support::git(p, &["add", "-A"]);
        docker_support::git(p, &["commit", "-qm", "init"]);
        let project = Self { dir, home };
        docker_support::ok(
            project
                .vibesys(None)
                .args(["state", "init"])
                .output()
                .unwrap(),
        );
        project
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// vibesys with only PATH, HOME (empty: no credentials) and the tools.
    fn vibesys(&self, tools: Option<&Path>) -> Command {
        let mut c = docker_support::vibesys(self.path());
        c.env("HOME", self.home.path());
        if let Some(t) = tools {
            c.env("VIBESYS_TOOLS", t);
        }
        c
    }

    fn eval(&self, tools: &Path, env: &str) -> Output {
        self.eval_candidate(tools, env, 1)
    }

    fn eval_candidate(&self, tools: &Path, env: &str, candidate: u32) -> Output {
        self.vibesys(Some(tools))
            .args(["run-env", "eval", "--run-environment", env])
            .args(["--run", "r1", "--candidate", &candidate.to_string()])
            .args(["--commit", "HEAD"])
            .output()
            .unwrap()
    }

    /// Every file of the run state except the dispatch's own records,
    /// with its content.
    fn record(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        let root = self.path().join(".vibesys/state");
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                let rel = p.strip_prefix(&root).unwrap().to_path_buf();
                if rel.starts_with("runs/r1/remote") || rel.starts_with("local") {
                    continue;
                }
                if e.file_type().unwrap().is_dir() {
                    stack.push(p);
                } else {
                    out.insert(rel, std::fs::read(&p).unwrap());
                }
            }
        }
        out
    }

    fn record_dir(&self) -> PathBuf {
        self.path().join(".vibesys/state/runs/r1/remote/1")
    }
}

/// Every `[skypilot]` resource combination the config accepts becomes a
/// task that the real `sky.Task.from_yaml` loads with exactly the meant
/// cloud, region, accelerators, image, spot choice, workdir, run and envs.
#[test]
fn skypilot_tasks_load_in_the_real_client_for_every_combination() {
    let dir = tempfile::tempdir().unwrap();
    let mut eval = TrustedEvaluation::parse(TASK, Path::new("vibesys.toml")).unwrap();
    let plain = skypilot::run_script(&eval, "vibesys-0123");
    // Every other task also builds on the service (`[skypilot] build`).
    eval.build = Some(RemoteBuild {
        argv: vec!["make".into(), "it's".into()],
        timeout_secs: 99,
        outputs: vec!["out/app".into(), "lib/a b.so".into()],
    });
    let with_build = skypilot::run_script(&eval, "vibesys-0123");
    assert!(with_build.contains("build-begin") && !plain.contains("build-begin"));
    let mut clouds: Vec<Option<&str>> = vec![None];
    clouds.extend(SKYPILOT_CLOUDS.iter().map(|c| Some(*c)));
    let mut manifest = Vec::new();
    let mut refused = 0;
    for cloud in &clouds {
        for region in [None, Some("region-1")] {
            for acc in [None, Some("A100:2"), Some("T4")] {
                for image in [None, Some("docker:ubuntu:22.04")] {
                    for spot in [None, Some(true)] {
                        let mut toml = String::from("[skypilot]\n");
                        for (k, v) in [
                            ("cloud", cloud),
                            ("region", &region),
                            ("accelerators", &acc),
                            ("image", &image),
                        ] {
                            if let Some(v) = v {
                                toml.push_str(&format!("{k} = \"{v}\"\n"));
                            }
                        }
                        if let Some(s) = spot {
                            toml.push_str(&format!("use_spot = {s}\n"));
                        }
                        let config = match RemoteConfig::parse(&toml, Path::new("vibesys.toml")) {
                            Ok(c) => c,
                            Err(e) => {
                                // Only a region without a cloud is refused.
                                assert!(region.is_some() && cloud.is_none(), "{toml}: {e}");
                                refused += 1;
                                continue;
                            }
                        };
                        let n = manifest.len();
                        let script = if n % 2 == 0 { &plain } else { &with_build };
                        let name = skypilot::cluster_name("r1", n as u32);
                        let workdir = dir.path().join("work");
                        let task = skypilot::task(
                            &config.skypilot,
                            &name,
                            &workdir,
                            "r1",
                            n as u32,
                            "ab",
                            script,
                        );
                        let file = dir.path().join(format!("task-{n}.yaml"));
                        std::fs::write(&file, serde_json::to_string_pretty(&task).unwrap())
                            .unwrap();
                        manifest.push(json!({
                            "file": file,
                            "expect": {
                                "name": name, "workdir": workdir, "run": script,
                                "envs": {"VIBESYS_RUN": "r1", "VIBESYS_CANDIDATE": n.to_string(), "VIBESYS_COMMIT": "ab"},
                                "cloud": cloud, "region": region, "accelerators": acc,
                                "image": image, "use_spot": spot,
                            }
                        }));
                    }
                }
            }
        }
    }
    assert!(
        refused > 0 && manifest.len() > 500,
        "{} cases",
        manifest.len()
    );
    let stdout = python_on_json(
        "sky_load.py",
        dir.path(),
        serde_json::to_vec(&manifest).unwrap(),
        "sky.Task.from_yaml refused generated tasks: ",
    );
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["loaded"], manifest.len());
}

/// Invalid operator configuration is refused by vibesys, naming the key,
/// before any client is called (the recording wrapper saw nothing).
#[test]
fn invalid_operator_config_is_refused_before_the_client_runs() {
    let tools = RecordingTools::new();
    let cases = [
        (
            "skypilot",
            "[skypilot]\ncloud = \"mars\"\n",
            "skypilot.cloud",
        ),
        (
            "skypilot",
            "[skypilot]\nregion = \"us-east-1\"\n",
            "skypilot.region",
        ),
        (
            "skypilot",
            "[skypilot]\naccelerators = \"A100:x\"\n",
            "skypilot.accelerators",
        ),
        (
            "skypilot",
            "[skypilot]\nimage = \"a b\"\n",
            "skypilot.image",
        ),
        ("skypilot", "[skypilot]\nzone = \"a\"\n", "skypilot.zone"),
        ("modal", "[modal]\ngpu = \"V100\"\n", "modal.gpu"),
        (
            "modal",
            "[modal]\ntimeout_secs = 100000\n",
            "modal.timeout_secs",
        ),
        (
            "modal",
            "[modal]\nimage = \"r/e\"\npython_version = \"3.11\"\n",
            "modal.python_version",
        ),
        ("modal", "[modal]\nsecret = \"x\"\n", "modal.secret"),
        ("modal", "[check]\n", "check"),
        ("modal", "[modal]\nbuild = \"yes\"\n", "modal.build"),
        ("skypilot", "[skypilot]\nbuild = true\n", "skypilot.build"),
        (
            "modal",
            "[modal]\nbuild = true\n[build]\nargv = [\"make\"]\noutputs = [\"a\"]\ntimeout_secs = 90000\n",
            "build.timeout_secs",
        ),
    ];
    for (env, extra, key) in cases {
        let project = Project::new(extra);
        let before = project.record();
        let err = fails(project.eval(tools.path(), env));
        assert!(err.contains(key), "{extra}: {err}");
        assert_eq!(project.record(), before);
        assert!(
            !project.record_dir().exists(),
            "{extra}: something was dispatched"
        );
    }
    assert!(tools.invocations("sky").is_empty() && tools.invocations("modal").is_empty());
}

/// The Modal path end to end up to the network: the module is generated,
/// `modal run` is called with the recorded arguments, its refusal without
/// a token becomes an error naming the token and `modal token new` (exit
/// 125, the run record intact, no result), and the module imported by the
/// real `modal` defines exactly `evaluate` with the image, GPU and timeout.
#[test]
fn modal_dispatch_up_to_the_network_boundary() {
    let tools = RecordingTools::new();
    for (extra, gpu, image, timeout) in [
        (
            "[modal]\ngpu = \"A100-80GB:2\"\n",
            Some("A100-80GB:2"),
            None,
            60 + 30 + 300,
        ),
        (
            "[modal]\nimage = \"registry.example/evaluator-tool@sha256:0123\"\ntimeout_secs = 777\n",
            None,
            Some("registry.example/evaluator-tool@sha256:0123"),
            777,
        ),
        (BUILD_ON_MODAL, None, None, 60 + 30 + 40 + 300),
    ] {
        let project = Project::new(extra);
        let before = project.record();
        let err = fails_after_client(project.eval(tools.path(), "modal"));
        assert!(
            err.contains("Modal refused: missing a Modal API token")
                && err.contains("MODAL_TOKEN_ID")
                && err.contains("modal token new"),
            "{err}"
        );
        assert_eq!(project.record(), before, "the run record changed");
        let rec = project.record_dir();
        assert!(!rec.join("result.json").exists());
        let calls = tools.invocations("modal");
        let argv = calls.last().unwrap();
        let module = rec.join("evaluate.py");
        assert_eq!(
            argv,
            &[
                "run".to_owned(),
                format!("{}::main", module.display()),
                "--result-path".to_owned(),
                rec.join(".modal-result.json").display().to_string(),
            ]
        );
        let out = Command::new(venv_python())
            .arg(docker_support::tests_dir().join("remote/modal_spy.py"))
            .arg(&module)
            .arg(project.path())
            .env("HOME", project.home.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(seen["app"], "vs-r1-c1");
        assert_eq!(seen["functions"], json!(["evaluate"]));
        assert_eq!(seen["entrypoints"], json!(["main"]));
        assert_eq!(seen["is_modal_function"]["evaluate"], true);
        assert_eq!(seen["function"], json!([{"gpu": gpu, "timeout": timeout}]));
        assert_eq!(seen["gpus"]["evaluate"], json!(gpu));
        match image {
            Some(r) => {
                assert_eq!(seen["from_registry"], json!([r]));
                assert_eq!(seen["debian_slim"], json!([]));
            }
            None => {
                assert_eq!(seen["from_registry"], json!([]));
                assert_eq!(seen["debian_slim"], json!(["3.11"]));
            }
        }
        // The function's body, run here by modal's own `.local()` on the
        // project's checkout, runs check then measure, and its result is
        // what vibesys reads back.
        let local = &seen["local_result"];
        assert_eq!(local["check"]["exit_code"], 0, "{local}");
        assert_eq!(local["measure"]["exit_code"], 0, "{local}");
        let result =
            vs_runtime::remote::modal::parse_result(&serde_json::to_vec(local).unwrap()).unwrap();
        if extra == BUILD_ON_MODAL {
            // The build ran first, in the checkout, and its output was
            // hashed there.
            let asked = RemoteBuild {
                argv: vec![
                    "sh".into(),
                    "-c".into(),
                    "mkdir -p out && echo built > out/app".into(),
                ],
                timeout_secs: 40,
                outputs: vec!["out/app".into()],
            };
            assert_eq!(result.build_failure(Some(&asked), "Modal").unwrap(), None);
            let out = &result.build.as_ref().unwrap().outputs[0];
            assert_eq!(out.size, Some(6));
            assert_eq!(
                out.sha256.as_deref(),
                Some(sha256sum(&project.path().join("out/app")).as_str())
            );
        } else {
            assert!(result.build.is_none(), "{local}");
        }
        assert_eq!(result.measure.unwrap().stdout.trim(), "{\"seconds\": 1.5}");
        // The trusted commands are data of the module, never its code.
        let source = std::fs::read_to_string(&module).unwrap();
        assert!(!source.contains("\ntest -f"), "{source}");
    }
}

/// A `[modal] build = true` task: the build runs in the function first.
const BUILD_ON_MODAL: &str = "[modal]\nbuild = true\n[build]\nargv = [\"sh\", \"-c\", \"mkdir -p out && echo built > out/app\"]\noutputs = [\"out/app\"]\ntimeout_secs = 40\n";

/// The sha256 of `path` by coreutils' `sha256sum`.
fn sha256sum(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .split(' ')
        .next()
        .unwrap()
        .to_owned()
}

/// The Modal function's body with a build, run by modal's own `.local()`:
/// a failing build or a missing output stops it before check and measure
/// and is judged a build failure; a good build's output is hashed where
/// it was built.
#[test]
fn modal_function_builds_before_check_and_measure() {
    let mut eval = TrustedEvaluation::parse(TASK, Path::new("vibesys.toml")).unwrap();
    for (argv, outputs, failure) in [
        ("printf abc > app.bin", vec!["app.bin"], None),
        ("echo broken; exit 4", vec!["app.bin"], Some("status 4")),
        ("touch app.bin", vec!["app.bin", "lib.so"], Some("lib.so")),
        ("ln -s main.txt app.bin", vec!["app.bin"], Some("symlink")),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("main.txt"), "hello\n").unwrap();
        eval.build = Some(RemoteBuild {
            argv: vec!["sh".into(), "-c".into(), argv.into()],
            timeout_secs: 30,
            outputs: outputs.iter().map(|o| (*o).to_owned()).collect(),
        });
        let spec = modal::ModalSpec::new(
            &Default::default(),
            "vs-r1-c1".into(),
            "r1",
            1,
            "ab",
            dir.path(),
            &eval,
        );
        let module = dir.path().join("evaluate.py");
        std::fs::write(&module, modal::module_source(&spec).unwrap()).unwrap();
        let home = tempfile::tempdir().unwrap();
        let out = Command::new(venv_python())
            .arg(docker_support::tests_dir().join("remote/modal_spy.py"))
            .arg(&module)
            .arg(dir.path())
            .env("HOME", home.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The function's prints (the build's output) come first; the
        // spy's report is the last line.
        let stdout = String::from_utf8_lossy(&out.stdout);
        let seen: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        let local = &seen["local_result"];
        let result = modal::parse_result(&serde_json::to_vec(local).unwrap()).unwrap();
        let why = result.build_failure(eval.build.as_ref(), "Modal").unwrap();
        match failure {
            None => {
                assert_eq!(why, None, "{local}");
                let o = &result.build.as_ref().unwrap().outputs[0];
                assert_eq!(o.size, Some(3));
                assert_eq!(
                    o.sha256.as_deref(),
                    Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
                );
                assert_eq!(result.check.unwrap().exit_code, Some(0));
                assert!(result.measure.is_some());
            }
            Some(needle) => {
                let why = why.unwrap_or_default();
                assert!(why.contains(needle), "{argv}: {why} {local}");
                assert!(
                    result.check.is_none() && result.measure.is_none(),
                    "{local}"
                );
            }
        }
    }
}

/// The SkyPilot path end to end up to the network: the real `sky launch`
/// is called with the recorded arguments on the generated task; its
/// refusal without cloud credentials becomes an error naming them and
/// `sky check`, and with a cloud and region set (SkyPilot then needs its
/// catalog from the network) an error naming the network; exit 125 both
/// times, the run record intact, no result. The local API server that
/// `sky` starts is stopped afterwards.
#[test]
fn skypilot_dispatch_up_to_the_network_boundary() {
    let tools = RecordingTools::new();
    let project = Project::new("");
    let before = project.record();
    let no_login = project.eval_candidate(tools.path(), "skypilot", 1);
    std::fs::write(
        project.path().join("vibesys.toml"),
        format!("{TASK}[skypilot]\ncloud = \"aws\"\nregion = \"us-east-1\"\n"),
    )
    .unwrap();
    let no_network = project.eval_candidate(tools.path(), "skypilot", 2);
    // Ctrl-C while `sky launch` runs: vibesys stops it and tears down.
    let child = project
        .vibesys(Some(tools.path()))
        .args(["run-env", "eval", "--run-environment", "skypilot"])
        .args(["--run", "r1", "--candidate", "3", "--commit", "HEAD"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while !tools
        .invocations("sky")
        .iter()
        .any(|a| a.contains(&"vs-r1-c3".to_owned()))
    {
        assert!(
            started.elapsed().as_secs() < 120,
            "sky launch was never called"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::INT,
    )
    .unwrap();
    let interrupted = child.wait_with_output().unwrap();
    let stop = Command::new(tools.path().join("remote-clients/bin/sky"))
        .args(["api", "stop"])
        .env("HOME", project.home.path())
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );

    let err = fails_after_client(no_login);
    assert!(
        err.contains("SkyPilot refused: missing credentials of a cloud SkyPilot can use")
            && err.contains("sky check"),
        "{err}"
    );
    let err = fails_after_client(no_network);
    assert!(
        err.contains("SkyPilot could not reach the network"),
        "{err}"
    );
    let err = fails_after_client(interrupted);
    assert!(
        err.contains("interrupted") && err.contains("vs-r1-c3"),
        "{err}"
    );
    let downs: Vec<Vec<String>> = tools
        .invocations("sky")
        .into_iter()
        .filter(|a| a.first().map(String::as_str) == Some("down"))
        .collect();
    assert_eq!(
        downs,
        [["down", "--yes", "vs-r1-c3"].map(str::to_owned).to_vec()]
    );
    assert_eq!(project.record(), before, "the run record changed");
    let remote = project.path().join(".vibesys/state/runs/r1/remote");
    for (n, resources) in [
        (1, json!({})),
        (2, json!({"cloud": "aws", "region": "us-east-1"})),
    ] {
        let rec = remote.join(n.to_string());
        assert!(!rec.join("result.json").exists());
        let task_file = rec.join("task.yaml").display().to_string();
        let name = format!("vs-r1-c{n}");
        let launches: Vec<Vec<String>> = tools
            .invocations("sky")
            .into_iter()
            .filter(|a| a.last() == Some(&task_file))
            .collect();
        assert_eq!(
            launches,
            [[
                "launch",
                "--yes",
                "--down",
                "--cluster",
                name.as_str(),
                task_file.as_str()
            ]
            .map(str::to_owned)
            .to_vec()]
        );
        // The task names the run, the candidate and its commit, and runs
        // the trusted argv in the synced checkout.
        let task: Value =
            serde_json::from_slice(&std::fs::read(rec.join("task.yaml")).unwrap()).unwrap();
        assert_eq!(task["name"], name);
        assert_eq!(task["resources"], resources);
        assert_eq!(task["envs"]["VIBESYS_RUN"], "r1");
        assert_eq!(task["envs"]["VIBESYS_CANDIDATE"], n.to_string());
        assert_eq!(task["envs"]["VIBESYS_COMMIT"].as_str().unwrap().len(), 40);
        assert!(
            task["run"]
                .as_str()
                .unwrap()
                .contains("'sh' '-c' 'test -f main.txt && echo \"it'\\''s correct\"'"),
            "{task}"
        );
        assert!(
            task["workdir"]
                .as_str()
                .unwrap()
                .contains("/.vibesys/state/local/candidates/r1/")
        );
    }
}

/// `run-env show` and `doctor` say available only with the client
/// installed and configured, and exactly what is missing otherwise.
#[test]
fn availability_names_what_is_missing() {
    let tools = real_tools();
    let project = Project::new("");
    let empty = tempfile::tempdir().unwrap();
    let show = |tools: &Path, env: &[(&str, &str)]| -> Value {
        let mut c = project.vibesys(Some(tools));
        c.args(["run-env", "show", "--json"]);
        for (k, v) in env {
            c.env(k, v);
        }
        let v: Value = serde_json::from_str(&docker_support::ok(c.output().unwrap())).unwrap();
        v["environments"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == "modal" || e["name"] == "skypilot")
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["availability"].clone(),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    // No client at all.
    let v = show(empty.path(), &[]);
    for env in ["modal", "skypilot"] {
        let reason = v[env]["reason"].as_str().unwrap();
        assert_eq!(v[env]["status"], "not-available");
        assert!(
            reason.contains("is not installed") && reason.contains("scripts/remote-clients.sh"),
            "{reason}"
        );
    }
    // Installed, no credentials.
    let v = show(&tools, &[]);
    let modal = v["modal"]["reason"].as_str().unwrap();
    assert!(
        modal.contains("modal 1.6.4")
            && modal.contains("MISSING: a Modal token")
            && modal.contains("modal token new"),
        "{modal}"
    );
    let sky = v["skypilot"]["reason"].as_str().unwrap();
    assert!(
        sky.contains("skypilot 0.14.1")
            && sky.contains("MISSING: credentials of a cloud")
            && sky.contains("sky check"),
        "{sky}"
    );
    // Installed and configured (the values are never checked offline).
    std::fs::create_dir_all(project.home.path().join(".aws")).unwrap();
    std::fs::write(project.home.path().join(".aws/credentials"), "[default]\n").unwrap();
    let v = show(
        &tools,
        &[
            ("MODAL_TOKEN_ID", "ak-test"),
            ("MODAL_TOKEN_SECRET", "as-test"),
        ],
    );
    assert_eq!(v["modal"]["status"], "available", "{v}");
    assert_eq!(v["skypilot"]["status"], "available", "{v}");
    // doctor reports the same.
    let out = project
        .vibesys(Some(empty.path()))
        .args(["doctor", "--json"])
        .output()
        .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    for env in ["modal", "skypilot"] {
        let c = doc["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == env)
            .unwrap();
        assert_eq!(c["ok"], false);
        assert!(
            c["fix"]
                .as_str()
                .unwrap()
                .contains("scripts/remote-clients.sh"),
            "{c}"
        );
    }
}

/// A tool directory inside the project (agent-writable) is refused.
#[test]
fn tools_inside_the_project_are_refused() {
    let project = Project::new("");
    let tools = project.path().join(".vibesys-tools");
    std::fs::create_dir_all(&tools).unwrap();
    let err = fails(project.eval(&tools, "modal"));
    assert!(err.contains("inside the project"), "{err}");
    // Only the two services dispatch.
    let err = fails(project.eval(&tools, "docker"));
    assert!(
        err.contains("--run-environment modal or skypilot, not docker"),
        "{err}"
    );
}

/// The pins of scripts/remote-clients.sh are the versions vibesys checks.
#[test]
fn install_script_pins_the_tested_versions() {
    let script =
        std::fs::read_to_string(docker_support::repo_root().join("scripts/remote-clients.sh"))
            .unwrap();
    assert!(script.contains(&format!(
        "SKYPILOT_VERSION={}\n",
        vs_runtime::remote::client::SKYPILOT_VERSION
    )));
    assert!(script.contains(&format!(
        "MODAL_VERSION={}\n",
        vs_runtime::remote::client::MODAL_VERSION
    )));
}

/// The editor container of modal and skypilot is a control plane without
/// devices: started as these environments start it, its HostConfig (read
/// through the Engine API) has no device, no device request and no bind
/// of the host's service credentials.
#[test]
fn editor_container_has_no_devices() {
    use vs_docker::DockerSandbox;
    use vs_runtime::RunEnvironment;
    use vs_sandbox::{ProjectPathPolicy, Workspace};
    let img = TestImage::new();
    let ws = tempfile::tempdir().unwrap();
    for env in [RunEnvironment::Modal, RunEnvironment::Skypilot] {
        assert!(!env.attaches_accelerator(true), "{env}");
        assert!(RunEnvironment::Docker.attaches_accelerator(true));
        let mut options = vs_docker::DockerOptions::new(
            img.pin(),
            unique("remote"),
            docker_support::vibesys_bin(),
        );
        options.mask_root = img.dir.path().join("masks").join(&options.run_id);
        let policy = ProjectPathPolicy::new(Vec::<PathBuf>::new(), Vec::<PathBuf>::new())
            .unwrap()
            .resolve(&Workspace::open(ws.path()).unwrap())
            .unwrap();
        let sandbox = DockerSandbox::start(&policy, &options).unwrap();
        let engine = sandbox.engine();
        let inspect = engine
            .block_on(
                engine
                    .docker()
                    .inspect_container(sandbox.container_id(), None),
            )
            .unwrap();
        let host = inspect.host_config.unwrap();
        assert!(
            host.devices.unwrap_or_default().is_empty(),
            "{env}: devices"
        );
        assert!(
            host.device_requests.unwrap_or_default().is_empty(),
            "{env}: device requests"
        );
        assert!(
            host.device_cgroup_rules.unwrap_or_default().is_empty(),
            "{env}: device rules"
        );
        assert_ne!(host.privileged, Some(true));
        let binds = format!("{:?} {:?}", host.binds, host.mounts);
        for cred in [".modal.toml", ".sky", ".aws", ".kube", "remote-clients"] {
            assert!(!binds.contains(cred), "{env}: {cred} is mounted: {binds}");
        }
        let env_vars = format!("{:?}", inspect.config.and_then(|c| c.env));
        assert!(
            !env_vars.contains("MODAL_") && !env_vars.contains("SKYPILOT_"),
            "{env_vars}"
        );
        drop(sandbox);
    }
}

/// The launch and teardown argv of both launchers parse in the real `sky`
/// command line (its click commands, not run) with the meant values.
#[test]
fn sky_cli_accepts_every_launch_and_teardown_argv() {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("task.yaml");
    let mut argvs = Vec::new();
    for launcher in ["launch", "jobs"] {
        let config = RemoteConfig::parse(
            &format!("[skypilot]\nlauncher = \"{launcher}\"\n"),
            Path::new("vibesys.toml"),
        )
        .unwrap();
        argvs.push(skypilot::launch_args(&config.skypilot, "vs-r1-c1", &task));
        argvs.push(skypilot::teardown_args(&config.skypilot, "vs-r1-c1"));
    }
    let argvs: Vec<Vec<String>> = argvs
        .iter()
        .map(|a| a.iter().map(|s| s.to_string_lossy().into_owned()).collect())
        .collect();
    let stdout = python_on_json(
        "sky_args.py",
        dir.path(),
        serde_json::to_vec(&argvs).unwrap(),
        "",
    );
    let parsed: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let t = task.display().to_string();
    assert_eq!(
        parsed,
        [
            json!({"path": ["sky", "launch"], "params": {"yes": true, "down": true, "cluster": "vs-r1-c1", "entrypoint": [t]}}),
            json!({"path": ["sky", "down"], "params": {"yes": true, "clusters": ["vs-r1-c1"]}}),
            json!({"path": ["sky", "jobs", "launch"], "params": {"yes": true, "name": "vs-r1-c1", "entrypoint": [t]}}),
            json!({"path": ["sky", "jobs", "cancel"], "params": {"yes": true, "name": "vs-r1-c1"}}),
        ]
    );
}
