//! The `modal` run environment: a candidate's evaluation as a Modal
//! function. vibesys writes an entrypoint module whose only values come
//! from one embedded JSON document (a JSON string is a valid Python string
//! literal, so no value is ever spliced into code): the app, the image
//! (`[modal] image` from a registry, else `debian_slim`), the GPU and the
//! timeout. `modal run MODULE::main --result-path FILE` calls the function
//! `evaluate` remotely and writes its result to FILE on the host.

use std::ffi::OsString;
use std::path::Path;

use serde::Serialize;

use super::config::{MAX_TIMEOUT_SECS, ModalConfig, RemoteBuild, TrustedEvaluation};
use super::error::RemoteError;
use super::{EvalResult, MAX_BUILD_LOG_BYTES, MAX_MEASURE_BYTES};

/// The function the module defines.
pub const FUNCTION: &str = "evaluate";
/// The local entrypoint `modal run` calls.
pub const ENTRYPOINT: &str = "main";
/// Where the candidate's checkout is in the function's container.
pub const REMOTE_WORKDIR: &str = "/root/candidate";
/// Python of the default image.
pub const DEFAULT_PYTHON: &str = "3.11";
/// Time the function gets on top of check and measure.
pub const SLACK_SECS: u64 = 300;

/// The image of the function.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum ModalImage {
    /// `modal.Image.from_registry(reference)`.
    Registry {
        /// The reference.
        reference: String,
    },
    /// `modal.Image.debian_slim(python_version=python)`.
    DebianSlim {
        /// The Python version.
        python: String,
    },
}

/// Everything the generated module reads (its only data).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModalSpec {
    /// The app name (`vs-<run>-c<n>`).
    pub app: String,
    /// The run, candidate and measured commit (labels).
    pub run: String,
    /// The candidate number.
    pub candidate: u32,
    /// The measured commit.
    pub commit: String,
    /// The image.
    pub image: ModalImage,
    /// The host directory added to the image at [`REMOTE_WORKDIR`].
    pub workdir: String,
    /// `gpu=` (None: no GPU).
    pub gpu: Option<String>,
    /// `timeout=` in seconds.
    pub timeout_secs: u64,
    /// The trusted commands.
    pub check: Vec<String>,
    /// `[check] timeout_secs`.
    pub check_timeout_secs: u64,
    /// The trusted measure argv.
    pub measure: Vec<String>,
    /// `[measure] timeout_secs`.
    pub measure_timeout_secs: u64,
    /// Most bytes of output returned per stream.
    pub output_limit: usize,
    /// The task's `[build]`, run first when the operator asks for it
    /// (`[modal] build = true`); `None`: no build in the function.
    pub build: Option<RemoteBuild>,
    /// Most bytes of the build's output returned (its end).
    pub build_log_limit: usize,
}

impl ModalSpec {
    /// The spec of one candidate's evaluation.
    pub fn new(
        config: &ModalConfig,
        app: String,
        run: &str,
        candidate: u32,
        commit: &str,
        workdir: &Path,
        eval: &TrustedEvaluation,
    ) -> Self {
        let image = match &config.image {
            Some(r) => ModalImage::Registry {
                reference: r.clone(),
            },
            None => ModalImage::DebianSlim {
                python: config
                    .python_version
                    .clone()
                    .unwrap_or_else(|| DEFAULT_PYTHON.to_owned()),
            },
        };
        let timeout_secs = config.timeout_secs.unwrap_or(
            (eval.check.timeout_secs
                + eval.measure.timeout_secs
                + eval.build.as_ref().map_or(0, |b| b.timeout_secs)
                + SLACK_SECS)
                .min(MAX_TIMEOUT_SECS),
        );
        Self {
            app,
            run: run.to_owned(),
            candidate,
            commit: commit.to_owned(),
            image,
            workdir: workdir.to_string_lossy().into_owned(),
            gpu: config.gpu.clone(),
            timeout_secs,
            check: eval.check.argv.clone(),
            check_timeout_secs: eval.check.timeout_secs,
            measure: eval.measure.argv.clone(),
            measure_timeout_secs: eval.measure.timeout_secs,
            output_limit: MAX_MEASURE_BYTES,
            build: eval.build.clone(),
            build_log_limit: MAX_BUILD_LOG_BYTES,
        }
    }
}

/// The module's code; the spec is its only data.
const MODULE_BODY: &str = r#"
import hashlib
import json
import os
import stat
import subprocess

import modal

app = modal.App(SPEC["app"])
if SPEC["image"]["kind"] == "registry":
    image = modal.Image.from_registry(SPEC["image"]["reference"])
else:
    image = modal.Image.debian_slim(python_version=SPEC["image"]["python"])
# A build writes into the checkout: then it is a layer of the image
# (copy=True), not a mount.
image = image.add_local_dir(SPEC["workdir"], remote_path=REMOTE_WORKDIR, ignore=[".git"],
                            copy=SPEC["build"] is not None)


def _run(argv, timeout):
    limit = SPEC["output_limit"]
    try:
        p = subprocess.run(argv, cwd=REMOTE_WORKDIR, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "timed_out": True, "stdout": ""}
    except OSError as e:
        return {"exit_code": 127, "timed_out": False, "stdout": "", "error": str(e)[:1000]}
    print(p.stderr[-limit:].decode("utf-8", "replace"), flush=True)
    return {"exit_code": p.returncode, "timed_out": False,
            "stdout": p.stdout[:limit].decode("utf-8", "replace")}


def _output(path):
    # A declared output is a regular file reached without a symlink.
    root = os.path.realpath(REMOTE_WORKDIR)
    full = os.path.join(root, path)
    try:
        if os.path.realpath(full) != full:
            return {"path": path, "error": "reached through a symlink"}
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as e:
        return {"path": path, "error": str(e)[:1000]}
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            return {"path": path, "error": "not a regular file"}
        h = hashlib.sha256()
        size = 0
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            size += len(chunk)
    return {"path": path, "size": size, "sha256": h.hexdigest()}


def _build(build):
    limit = SPEC["build_log_limit"]
    try:
        p = subprocess.run(build["argv"], cwd=REMOTE_WORKDIR, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=build["timeout_secs"])
    except subprocess.TimeoutExpired:
        return {"exit_code": None, "timed_out": True, "log": "", "outputs": []}
    except OSError as e:
        return {"exit_code": 127, "timed_out": False, "log": "", "outputs": [],
                "error": str(e)[:1000]}
    log = p.stdout[-limit:].decode("utf-8", "replace")
    print(log, flush=True)
    outputs = []
    if p.returncode == 0:
        outputs = [_output(path) for path in build["outputs"]]
    return {"exit_code": p.returncode, "timed_out": False, "log": log, "outputs": outputs}


@app.function(image=image, gpu=SPEC["gpu"], timeout=SPEC["timeout_secs"])
def evaluate() -> dict:
    build = None
    if SPEC["build"] is not None:
        build = _build(SPEC["build"])
        if build["exit_code"] != 0 or any("error" in o for o in build["outputs"]):
            return {"build": build, "check": None, "measure": None}
    check = _run(SPEC["check"], SPEC["check_timeout_secs"])
    measure = None
    if check["exit_code"] == 0:
        measure = _run(SPEC["measure"], SPEC["measure_timeout_secs"])
    result = {"check": check, "measure": measure}
    if build is not None:
        result["build"] = build
    return result


@app.local_entrypoint()
def main(result_path: str):
    result = evaluate.remote()
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)
"#;

/// The generated module's text.
pub fn module_source(spec: &ModalSpec) -> Result<String, RemoteError> {
    let bad = |e: serde_json::Error| RemoteError::InvalidResult {
        service: "Modal",
        reason: format!("cannot encode the module's spec: {e}"),
    };
    let doc = serde_json::to_string(spec).map_err(bad)?;
    // A JSON string literal is a valid Python string literal.
    let literal = serde_json::to_string(&doc).map_err(bad)?;
    let workdir = serde_json::to_string(REMOTE_WORKDIR).map_err(bad)?;
    Ok(format!(
        "# Generated by vibesys for run {run}, candidate {cand} (commit {commit}); do not edit.\n\
         # The spec below is this module's only data.\n\
         import json as _json\n\
         SPEC = _json.loads({literal})\n\
         REMOTE_WORKDIR = {workdir}\n{MODULE_BODY}",
        run = spec.run,
        cand = spec.candidate,
        commit = spec.commit,
    ))
}

/// The `modal` arguments that run `module` and write the result to
/// `result`.
pub fn run_args(module: &Path, result: &Path) -> Vec<OsString> {
    let mut target = module.as_os_str().to_owned();
    target.push(format!("::{ENTRYPOINT}"));
    vec![
        "run".into(),
        target,
        "--result-path".into(),
        result.as_os_str().to_owned(),
    ]
}

/// A refusal of `modal` that names a missing token or the network.
pub fn classify_refusal(text: &str, modal: &Path) -> Option<RemoteError> {
    for needle in [
        "Token missing",
        "Could not authenticate client",
        "modal token new",
        "Token ID is malformed",
        "invalid token",
    ] {
        if let Some(line) = super::client::line_with(text, needle) {
            return Some(RemoteError::NotLoggedIn {
                service: "Modal",
                missing: "a Modal API token (MODAL_TOKEN_ID/MODAL_TOKEN_SECRET or ~/.modal.toml)",
                fix: format!("{} token new", modal.display()),
                said: line,
            });
        }
    }
    for needle in [
        "Could not connect to the Modal server",
        "ConnectionError",
        "Name or service not known",
        "Temporary failure in name resolution",
    ] {
        if let Some(line) = super::client::line_with(text, needle) {
            return Some(RemoteError::Unreachable {
                service: "Modal",
                said: line,
            });
        }
    }
    None
}

/// Parses the result file the entrypoint wrote.
pub fn parse_result(bytes: &[u8]) -> Result<EvalResult, RemoteError> {
    serde_json::from_slice(bytes).map_err(|e| RemoteError::InvalidResult {
        service: "Modal",
        reason: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A result written before remote builds existed still parses.
    #[test]
    fn results_without_a_build_still_parse() {
        let r = parse_result(
            br#"{"check": {"exit_code": 0, "timed_out": false, "stdout": ""}, "measure": null}"#,
        )
        .unwrap();
        assert!(r.build.is_none());
        assert_eq!(r.build_failure(None, "Modal").unwrap(), None);
        assert_eq!(r.check.unwrap().exit_code, Some(0));
    }
}
