//! The `skypilot` run environment: a candidate's evaluation as a SkyPilot
//! task. The task is built from typed values and written as JSON (a YAML
//! subset `sky.Task.from_yaml` reads); its `run` is a bash script that
//! runs the trusted `check` then `measure` argv in the synced workdir and
//! reports their exit statuses and measure's stdout on marked lines.

use std::ffi::OsString;
use std::path::Path;

use serde_json::{Value, json};

use super::config::{
    EvalCommand, RemoteBuild, SkypilotConfig, SkypilotLauncher, TrustedEvaluation,
};
use super::error::RemoteError;
use super::{
    BuildResult, CommandResult, EvalResult, MAX_BUILD_LOG_BYTES, MAX_MEASURE_BYTES, OutputReport,
};

/// The task name and cluster name of one candidate's evaluation:
/// `vs-<run>-c<n>`, lowercase letters, digits and `-` only, at most 40
/// characters, starting with a letter and ending with a letter or digit.
pub fn cluster_name(run: &str, candidate: u32) -> String {
    let suffix = format!("-c{candidate}");
    let mut base: String = format!("vs-{run}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    base.truncate(40usize.saturating_sub(suffix.len()));
    let base = base.trim_end_matches('-');
    format!("{base}{suffix}")
}

/// Quotes `s` for bash: single quotes, `'` as `'\''`.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn quoted_argv(cmd: &EvalCommand) -> String {
    cmd.argv
        .iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The build step of the run script (empty without a build): the build
/// argv with its time limit, its exit status and the end of its output
/// (hex) on marked lines, then each declared output checked on the
/// service (a regular file reached without a symlink) with its size and
/// sha256, or `missing`. `ok` is 0 when check and measure must not run.
fn build_step(build: Option<&RemoteBuild>) -> String {
    let Some(b) = build else {
        return "ok=1\n".to_owned();
    };
    let mut s = format!(
        "ok=1\n\
         echo \"$n build-begin\"\n\
         blog=$(mktemp)\n\
         timeout -k 10 {bt} {argv} > \"$blog\" 2>&1 < /dev/null\n\
         brc=$?\n\
         echo \"$n build-exit $brc\"\n\
         echo \"$n build-log $(tail -c {limit} \"$blog\" | od -An -v -tx1 | tr -d ' \\n')\"\n\
         rm -f \"$blog\"\n\
         if [ \"$brc\" -ne 0 ]; then ok=0; fi\n\
         root=$(pwd -P)\n",
        bt = b.timeout_secs,
        argv = b
            .argv
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" "),
        limit = MAX_BUILD_LOG_BYTES,
    );
    for out in &b.outputs {
        let q = shell_quote(out);
        let h = hex::encode(out.as_bytes());
        s.push_str(&format!(
            "if [ \"$ok\" -eq 1 ]; then\n\
             \x20 if [ -f {q} ] && [ ! -L {q} ] && [ \"$(readlink -f -- {q})\" = \"$root\"/{q} ]; then\n\
             \x20   echo \"$n build-output {h} $(stat -c %s -- {q}) $(sha256sum -- {q} | cut -d ' ' -f 1)\"\n\
             \x20 else\n\
             \x20   echo \"$n build-output {h} missing\"; ok=0\n\
             \x20 fi\n\
             fi\n"
        ));
    }
    s
}

/// The task's `run` script. `nonce` marks the lines vibesys reads back.
/// With a build, check and measure run only after it succeeded with
/// every declared output present.
pub fn run_script(eval: &TrustedEvaluation, nonce: &str) -> String {
    format!(
        "set -u\n\
         n={nonce}\n\
         {build}\
         if [ \"$ok\" -eq 1 ]; then\n\
         echo \"$n check-begin\"\n\
         timeout -k 10 {ct} {check}\n\
         rc=$?\n\
         echo\n\
         echo \"$n check-exit $rc\"\n\
         if [ \"$rc\" -eq 0 ]; then\n\
         \x20 out=$(mktemp)\n\
         \x20 timeout -k 10 {mt} {measure} > \"$out\"\n\
         \x20 mrc=$?\n\
         \x20 echo \"$n measure-exit $mrc\"\n\
         \x20 echo \"$n measure-stdout $(head -c {limit} \"$out\" | od -An -v -tx1 | tr -d ' \\n')\"\n\
         \x20 rm -f \"$out\"\n\
         fi\n\
         fi\n\
         echo \"$n done\"\n",
        build = build_step(eval.build.as_ref()),
        ct = eval.check.timeout_secs,
        mt = eval.measure.timeout_secs,
        check = quoted_argv(&eval.check),
        measure = quoted_argv(&eval.measure),
        limit = MAX_MEASURE_BYTES,
    )
}

/// The task as a JSON value: name, workdir (the candidate's checkout of
/// the measured commit), resources from `[skypilot]`, the run id,
/// candidate and commit as `envs`, and the run script.
pub fn task(
    config: &SkypilotConfig,
    name: &str,
    workdir: &Path,
    run: &str,
    candidate: u32,
    commit: &str,
    script: &str,
) -> Value {
    let mut resources = serde_json::Map::new();
    if let Some(c) = &config.cloud {
        resources.insert("cloud".into(), json!(c));
    }
    if let Some(r) = &config.region {
        resources.insert("region".into(), json!(r));
    }
    if let Some(a) = &config.accelerators {
        resources.insert("accelerators".into(), json!(a));
    }
    if let Some(i) = &config.image {
        resources.insert("image_id".into(), json!(i));
    }
    if let Some(s) = config.use_spot {
        resources.insert("use_spot".into(), json!(s));
    }
    json!({
        "name": name,
        "workdir": workdir.to_string_lossy(),
        "resources": Value::Object(resources),
        "envs": {
            "VIBESYS_RUN": run,
            "VIBESYS_CANDIDATE": candidate.to_string(),
            "VIBESYS_COMMIT": commit,
        },
        "run": script,
    })
}

/// The `sky` arguments that launch `task_file`.
pub fn launch_args(config: &SkypilotConfig, name: &str, task_file: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = match config.launcher.unwrap_or_default() {
        SkypilotLauncher::Launch => vec![
            "launch".into(),
            "--yes".into(),
            "--down".into(),
            "--cluster".into(),
            name.into(),
        ],
        SkypilotLauncher::Jobs => vec![
            "jobs".into(),
            "launch".into(),
            "--yes".into(),
            "--name".into(),
            name.into(),
        ],
    };
    args.push(task_file.as_os_str().to_owned());
    args
}

/// The `sky` arguments that tear down what [`launch_args`] started.
pub fn teardown_args(config: &SkypilotConfig, name: &str) -> Vec<OsString> {
    match config.launcher.unwrap_or_default() {
        SkypilotLauncher::Launch => vec!["down".into(), "--yes".into(), name.into()],
        SkypilotLauncher::Jobs => vec![
            "jobs".into(),
            "cancel".into(),
            "--yes".into(),
            "--name".into(),
            name.into(),
        ],
    }
}

/// A refusal of `sky` that names a missing credential or the network.
pub fn classify_refusal(text: &str, sky: &Path) -> Option<RemoteError> {
    for needle in [
        "NoCloudAccessError",
        "Cloud access is not set up",
        "is not enabled",
    ] {
        if let Some(line) = super::client::line_with(text, needle) {
            return Some(RemoteError::NotLoggedIn {
                service: "SkyPilot",
                missing: "credentials of a cloud SkyPilot can use (no cloud is enabled)",
                fix: format!("{} check", sky.display()),
                said: line,
            });
        }
    }
    for needle in [
        "NameResolutionError",
        "Failed to resolve",
        "Max retries exceeded",
        "Temporary failure in name resolution",
    ] {
        if let Some(line) = super::client::line_with(text, needle) {
            return Some(RemoteError::Unreachable {
                service: "SkyPilot",
                said: line,
            });
        }
    }
    None
}

/// Reads the marked lines of the task's output back into a result.
pub fn parse_output(text: &str, nonce: &str) -> Result<EvalResult, RemoteError> {
    let bad = |reason: String| RemoteError::InvalidResult {
        service: "SkyPilot",
        reason,
    };
    let marker = |key: &str| -> Option<&str> {
        let needle = format!("{nonce} {key}");
        text.lines().rev().find_map(|l| {
            let at = l.find(&needle)?;
            Some(l[at + needle.len()..].trim())
        })
    };
    let code = |v: &str| -> Result<i32, RemoteError> {
        v.parse()
            .map_err(|_| bad(format!("exit status {v:?} is not a number")))
    };
    if marker("done").is_none() {
        return Err(bad("the task did not report completion".into()));
    }
    let build = match marker("build-exit") {
        None => None,
        Some(v) => {
            let exit = code(v)?;
            let hex_log = marker("build-log").unwrap_or("");
            if hex_log.len() > 2 * MAX_BUILD_LOG_BYTES {
                return Err(bad("the build's output is longer than the limit".into()));
            }
            let log = hex::decode(hex_log).map_err(|e| bad(format!("build output: {e}")))?;
            let needle = format!("{nonce} build-output ");
            let mut outputs = Vec::new();
            for line in text.lines() {
                let Some(at) = line.find(&needle) else {
                    continue;
                };
                let mut fields = line[at + needle.len()..].split_whitespace();
                let path = fields
                    .next()
                    .and_then(|h| hex::decode(h).ok())
                    .and_then(|p| String::from_utf8(p).ok())
                    .ok_or_else(|| bad("a build output line names no path".into()))?;
                let report = match (fields.next(), fields.next()) {
                    (Some("missing"), None) => OutputReport {
                        path,
                        size: None,
                        sha256: None,
                        error: Some(
                            "missing, not a regular file, or reached through a symlink".into(),
                        ),
                    },
                    (Some(size), Some(sha)) => OutputReport {
                        path,
                        size: Some(size.parse().map_err(|_| {
                            bad(format!("build output size {size:?} is not a number"))
                        })?),
                        sha256: Some(sha.to_owned()),
                        error: None,
                    },
                    _ => return Err(bad("a build output line is malformed".into())),
                };
                // A log streamed twice reports an output twice: the last
                // report of a path stands, in the order first seen.
                match outputs
                    .iter_mut()
                    .find(|o: &&mut OutputReport| o.path == report.path)
                {
                    Some(seen) => *seen = report,
                    None => outputs.push(report),
                }
            }
            let timed_out = exit == 124 || exit == 137;
            Some(BuildResult {
                exit_code: Some(exit),
                timed_out,
                log: String::from_utf8_lossy(&log).into_owned(),
                error: None,
                outputs,
            })
        }
    };
    let check = match marker("check-exit") {
        Some(v) => Some(CommandResult::from_exit(code(v)?, String::new())),
        None if build.is_some() => None,
        None => return Err(bad("no check status".into())),
    };
    let measure = match marker("measure-exit") {
        None => None,
        Some(v) => {
            let exit = code(v)?;
            let hex_out = marker("measure-stdout").unwrap_or("");
            if hex_out.len() > 2 * MAX_MEASURE_BYTES {
                return Err(bad("measure printed more than the limit".into()));
            }
            let bytes = hex::decode(hex_out).map_err(|e| bad(format!("measure output: {e}")))?;
            Some(CommandResult::from_exit(
                exit,
                String::from_utf8_lossy(&bytes).into_owned(),
            ))
        }
    };
    Ok(EvalResult {
        build,
        check,
        measure,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_names_are_valid() {
        assert_eq!(cluster_name("r1", 3), "vs-r1-c3");
        let long = cluster_name(&"a.b_".repeat(40), 12);
        assert!(long.len() <= 40 && long.ends_with("-c12"), "{long}");
        assert!(!long.contains("--c"), "{long}");
    }

    #[test]
    fn quotes_survive_the_shell() {
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    /// The run script under the real bash and coreutils, in a directory
    /// standing for the synced workdir, read back by the parser.
    #[test]
    fn the_run_script_reports_through_its_markers() {
        use crate::remote::config::TrustedEvaluation;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("main.txt"), "x").unwrap();
        let task = r#"
[check]
argv = ["sh", "-c", "test -f main.txt && echo \"it's fine\""]
[measure]
argv = ["sh", "-c", "echo '{\"s\": 1.5}'; echo noise >&2"]
"#;
        let eval = TrustedEvaluation::parse(task, Path::new("vibesys.toml")).unwrap();
        let run = |nonce: &str| {
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(run_script(&eval, nonce))
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(out.status.success());
            parse_output(&String::from_utf8_lossy(&out.stdout), nonce).unwrap()
        };
        let r = run("N1");
        assert_eq!(r.check.unwrap().exit_code, Some(0));
        let m = r.measure.unwrap();
        assert_eq!((m.exit_code, m.stdout.trim()), (Some(0), "{\"s\": 1.5}"));
        std::fs::remove_file(dir.path().join("main.txt")).unwrap();
        let r = run("N2");
        assert_eq!(r.check.unwrap().exit_code, Some(1));
        assert!(r.measure.is_none());
    }

    /// The build step under the real bash and coreutils: the build argv
    /// runs first, its declared outputs are hashed where it ran, and a
    /// failed build or a missing output keeps check and measure from
    /// running; the markers are read back and judged.
    #[test]
    fn the_run_script_builds_first_and_verifies_its_outputs() {
        use crate::remote::config::{RemoteBuild, TrustedEvaluation};
        use sha2::Digest;
        let task = r#"
[check]
argv = ["sh", "-c", "test -x out/app && ./out/app"]
[measure]
argv = ["sh", "-c", "echo '{\"s\": 2}'"]
"#;
        let mut eval = TrustedEvaluation::parse(task, Path::new("vibesys.toml")).unwrap();
        let run = |eval: &TrustedEvaluation, nonce: &str| {
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("secret"), "s").unwrap();
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(run_script(eval, nonce))
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(out.status.success());
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let app = std::fs::read(dir.path().join("out/app")).ok();
            (parse_output(&text, nonce).unwrap(), app)
        };
        let build = |argv: &str, outputs: &[&str]| RemoteBuild {
            argv: vec!["sh".into(), "-c".into(), argv.into()],
            timeout_secs: 30,
            outputs: outputs.iter().map(|o| (*o).to_owned()).collect(),
        };
        // A good build: outputs hashed, then check and measure.
        eval.build = Some(build(
            "mkdir -p out && printf '#!/bin/sh\\necho built\\n' > out/app && chmod +x out/app && echo compiling; echo warn >&2",
            &["out/app"],
        ));
        let (r, app) = run(&eval, "B1");
        assert_eq!(
            r.build_failure(eval.build.as_ref(), "SkyPilot").unwrap(),
            None
        );
        let b = r.build.as_ref().unwrap();
        assert_eq!(b.exit_code, Some(0));
        assert!(
            b.log.contains("compiling") && b.log.contains("warn"),
            "{b:?}"
        );
        let app = app.unwrap();
        assert_eq!(b.outputs[0].path, "out/app");
        assert_eq!(b.outputs[0].size, Some(app.len() as u64));
        assert_eq!(
            b.outputs[0].sha256.as_deref(),
            Some(hex::encode(sha2::Sha256::digest(&app)).as_str())
        );
        assert_eq!(r.check.as_ref().unwrap().exit_code, Some(0));
        assert_eq!(r.measure.unwrap().stdout.trim(), "{\"s\": 2}");
        // A failing build: check and measure do not run.
        eval.build = Some(build("echo broken; exit 3", &["out/app"]));
        let (r, _) = run(&eval, "B2");
        let why = r.build_failure(eval.build.as_ref(), "SkyPilot").unwrap();
        assert!(why.unwrap().contains("status 3"));
        assert!(r.build.unwrap().log.contains("broken"));
        assert!(r.check.is_none() && r.measure.is_none());
        // A declared output missing, or a symlink out of the checkout.
        for (argv, outputs) in [
            ("mkdir -p out && touch out/app", &["out/app", "out/lib"][..]),
            ("mkdir -p out && ln -s ../secret out/app", &["out/app"][..]),
        ] {
            eval.build = Some(build(argv, outputs));
            let (r, _) = run(&eval, "B3");
            let why = r.build_failure(eval.build.as_ref(), "SkyPilot").unwrap();
            assert!(why.unwrap().contains("not a regular file"), "{argv}");
            assert!(r.check.is_none() && r.measure.is_none(), "{argv}");
        }
        // A result that does not fit what was asked is refused.
        eval.build = Some(build("true", &["x"]));
        let (r, _) = run(&eval, "B4");
        assert!(r.build_failure(None, "SkyPilot").is_err());
    }

    #[test]
    fn markers_are_read_back() {
        let out = "(t, pid=1) N check-begin\n(t, pid=1) hi\n(t, pid=1) N check-exit 0\n\
                   (t, pid=1) N measure-exit 0\n(t, pid=1) N measure-stdout 7b7d\n(t, pid=1) N done\n";
        let r = parse_output(out, "N").unwrap();
        assert_eq!(r.check.unwrap().exit_code, Some(0));
        assert_eq!(r.measure.unwrap().stdout, "{}");
        assert!(parse_output("N check-exit 0\n", "N").is_err());
        // A build's markers, streamed twice: each output once.
        let sha = "a".repeat(64);
        let line = format!("N build-output {} 3 {sha}\n", hex::encode("out/a b"));
        let out = format!("N build-exit 0\nN build-log 6f6b\n{line}{line}N check-exit 0\nN done\n");
        let r = parse_output(&out, "N").unwrap();
        let b = r.build.unwrap();
        assert_eq!((b.log.as_str(), b.outputs.len()), ("ok", 1));
        assert_eq!(b.outputs[0].path, "out/a b");
        // A failed build: no check status is expected.
        let r = parse_output("N build-exit 2\nN done\n", "N").unwrap();
        assert!(r.check.is_none() && r.build.unwrap().exit_code == Some(2));
    }
}
