//! The operator's configuration of remote evaluation, read from the
//! project's own `vibesys.toml` (the trusted task, never a candidate's
//! copy): `[check]` and `[measure]` (the trusted commands), `[skypilot]`
//! and `[modal]` (where they run). Unknown keys and invalid values are
//! refused naming the key, before any client is called.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::RemoteError;
use crate::BuildError;

/// Most argv elements and longest element of a trusted command.
const MAX_ARGV: usize = 1024;
const MAX_ARG_LEN: usize = 64 * 1024;
/// Longest time limit of one trusted command (one day, Modal's own cap).
pub const MAX_TIMEOUT_SECS: u64 = 24 * 3600;
/// Time limit of a trusted command that declares none.
pub const DEFAULT_TIMEOUT_SECS: u64 = 600;

/// The clouds SkyPilot 0.14 accepts as `resources.cloud` (its schema's
/// list, checked by `sky.Task.from_yaml` in the tests).
pub const SKYPILOT_CLOUDS: &[&str] = &[
    "aws",
    "azure",
    "gcp",
    "ibm",
    "lambda",
    "scp",
    "oci",
    "kubernetes",
    "runpod",
    "vast",
    "vsphere",
    "cudo",
    "fluidstack",
    "paperspace",
    "primeintellect",
    "do",
    "nebius",
    "ssh",
    "slurm",
    "hyperbolic",
    "seeweb",
    "shadeform",
    "yotta",
    "mithril",
    "verda",
];

/// The GPU types Modal documents for `@app.function(gpu=...)`.
pub const MODAL_GPUS: &[&str] = &[
    "T4",
    "L4",
    "A10",
    "A10G",
    "A100",
    "A100-40GB",
    "A100-80GB",
    "L40S",
    "H100",
    "H100!",
    "H200",
    "B200",
];

/// One trusted command: `[check]` or `[measure]` of `vibesys.toml`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EvalCommand {
    /// The argv, run in the candidate's checkout on the service.
    pub argv: Vec<String>,
    /// Its time limit in seconds.
    pub timeout_secs: u64,
}

/// The trusted evaluation of a candidate: `check` (exit 0 = correct) and
/// `measure` (prints one JSON object of metrics on stdout).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TrustedEvaluation {
    /// `[check]`.
    pub check: EvalCommand,
    /// `[measure]`.
    pub measure: EvalCommand,
    /// The task's `[build]`, when the operator's `[skypilot] build` or
    /// `[modal] build` asks for it to run on the service
    /// ([`load_build`]); `None`: the build (if any) stays local.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<RemoteBuild>,
}

/// Time limit of a `[build]` run on a service that declares none.
pub const DEFAULT_BUILD_TIMEOUT_SECS: u64 = 3600;

/// The task's trusted build as a service runs it: `[build] argv` in the
/// candidate's checkout, then each of `[build] outputs` verified there
/// (a regular file, no symlink on its way; its size and sha256 reported).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RemoteBuild {
    /// `[build] argv`.
    pub argv: Vec<String>,
    /// `[build] timeout_secs` (at most [`MAX_TIMEOUT_SECS`]; default
    /// [`DEFAULT_BUILD_TIMEOUT_SECS`]).
    pub timeout_secs: u64,
    /// `[build] outputs`, relative to the checkout.
    pub outputs: Vec<String>,
}

impl RemoteBuild {
    /// The build of `spec` for a service: its time limit must be one a
    /// service accepts (`build.timeout_secs`, at most a day).
    pub fn from_spec(spec: &crate::build::BuildSpec, path: &Path) -> Result<Self, RemoteError> {
        let timeout_secs = match spec.timeout_secs() {
            None => DEFAULT_BUILD_TIMEOUT_SECS,
            Some(s) if (1..=MAX_TIMEOUT_SECS).contains(&s) => s,
            Some(_) => {
                return Err(invalid(
                    path,
                    "build.timeout_secs",
                    format!("a build on a service must finish within {MAX_TIMEOUT_SECS} s"),
                ));
            }
        };
        Ok(Self {
            argv: spec.argv().to_vec(),
            timeout_secs,
            outputs: spec.outputs().to_vec(),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommand {
    argv: Vec<String>,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// `[skypilot]`: the resources of the evaluation's SkyPilot task.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkypilotConfig {
    /// `resources.cloud`: one of [`SKYPILOT_CLOUDS`]; any enabled cloud
    /// when absent.
    #[serde(default)]
    pub cloud: Option<String>,
    /// `resources.region` (needs `cloud`).
    #[serde(default)]
    pub region: Option<String>,
    /// `resources.accelerators`: `NAME` or `NAME:COUNT` (e.g. `A100:1`).
    #[serde(default)]
    pub accelerators: Option<String>,
    /// `resources.image_id` (e.g. `docker:ubuntu:22.04`, an AMI id).
    #[serde(default)]
    pub image: Option<String>,
    /// `resources.use_spot`.
    #[serde(default)]
    pub use_spot: Option<bool>,
    /// `launch` (default: `sky launch --down` on a cluster of its own) or
    /// `jobs` (`sky jobs launch`, a managed job).
    #[serde(default)]
    pub launcher: Option<SkypilotLauncher>,
    /// `true`: the task's `[build]` runs on the service, in the same task
    /// before check and measure, and the local trusted build is skipped.
    #[serde(default)]
    pub build: Option<bool>,
}

/// How the SkyPilot task is launched.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SkypilotLauncher {
    /// `sky launch --down -c CLUSTER`: a cluster of its own, torn down
    /// after the job (and by vibesys on failure or interrupt).
    #[default]
    Launch,
    /// `sky jobs launch`: a managed job (the jobs controller cleans up).
    Jobs,
}

/// `[modal]`: the evaluation's Modal function.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModalConfig {
    /// `gpu=`: one of [`MODAL_GPUS`], optionally `:COUNT` (1 to 8).
    #[serde(default)]
    pub gpu: Option<String>,
    /// A registry reference for `modal.Image.from_registry` (the pinned
    /// evaluator-tool image pushed to a registry, named by digest); when
    /// absent, `modal.Image.debian_slim(python_version)`.
    #[serde(default)]
    pub image: Option<String>,
    /// The Python of the default image (`3.9` to `3.13`; default `3.11`).
    #[serde(default)]
    pub python_version: Option<String>,
    /// The function's `timeout=`; default: build + check + measure +
    /// 300 s (at most a day).
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// `true`: the task's `[build]` runs in the function before check and
    /// measure, and the local trusted build is skipped.
    #[serde(default)]
    pub build: Option<bool>,
}

/// The remote sections of one `vibesys.toml`, validated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RemoteConfig {
    /// `[skypilot]` (defaults when absent).
    pub skypilot: SkypilotConfig,
    /// `[modal]` (defaults when absent).
    pub modal: ModalConfig,
}

fn invalid(path: &Path, key: &str, reason: impl Into<String>) -> RemoteError {
    RemoteError::InvalidConfig {
        path: path.to_path_buf(),
        key: key.to_owned(),
        reason: reason.into(),
    }
}

fn table<'a>(
    root: &'a toml::Table,
    name: &str,
    path: &Path,
) -> Result<Option<&'a toml::Value>, RemoteError> {
    match root.get(name) {
        None => Ok(None),
        Some(v) if v.is_table() => Ok(Some(v)),
        Some(_) => Err(invalid(path, name, format!("[{name}] must be a table"))),
    }
}

/// Parses the text of a `vibesys.toml`; `path` is used in messages.
fn parse_root(text: &str, path: &Path) -> Result<toml::Table, RemoteError> {
    toml::from_str(text).map_err(|e: toml::de::Error| invalid(path, "vibesys.toml", e.message()))
}

/// Names the key of a serde error (`unknown field `x``) as `section.x`.
fn serde_error(path: &Path, section: &str, e: &toml::de::Error) -> RemoteError {
    let msg = e.message();
    let key = msg
        .split('`')
        .nth(1)
        .filter(|_| msg.starts_with("unknown field") || msg.starts_with("missing field"))
        .map(|k| format!("{section}.{k}"))
        .unwrap_or_else(|| section.to_owned());
    invalid(path, &key, msg)
}

impl TrustedEvaluation {
    /// Reads `[check]` and `[measure]` from the text of the operator's
    /// `vibesys.toml`.
    pub fn parse(text: &str, path: &Path) -> Result<Self, RemoteError> {
        let root = parse_root(text, path)?;
        let command = |name: &'static str| -> Result<EvalCommand, RemoteError> {
            let Some(value) = table(&root, name, path)? else {
                return Err(RemoteError::EvaluationNotConfigured {
                    path: path.to_path_buf(),
                    table: name,
                });
            };
            let raw: RawCommand = value
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| serde_error(path, name, &e))?;
            validate_command(raw, name, path)
        };
        Ok(Self {
            check: command("check")?,
            measure: command("measure")?,
            build: None,
        })
    }
}

impl TrustedEvaluation {
    /// The trusted commands of a run's task, as `vibesys run` parsed them
    /// from the operator's `vibesys.toml` (one parser of `[check]` and
    /// `[measure]`, [`crate::task::TaskSpec`]); validated again here for
    /// what a service accepts: a `[measure]` is required and each time
    /// limit is at most [`MAX_TIMEOUT_SECS`]. `path` names the file in
    /// messages.
    pub fn from_task(task: &crate::task::TaskSpec, path: &Path) -> Result<Self, RemoteError> {
        let Some(measure) = &task.measure else {
            return Err(RemoteError::EvaluationNotConfigured {
                path: path.to_path_buf(),
                table: "measure",
            });
        };
        let command = |c: &crate::task::EvalCommand, name: &str| {
            validate_command(
                RawCommand {
                    argv: c.argv.clone(),
                    timeout_secs: Some(c.timeout_secs),
                },
                name,
                path,
            )
        };
        Ok(Self {
            check: command(&task.check, "check")?,
            measure: command(&measure.command, "measure")?,
            build: None,
        })
    }
}

fn validate_command(raw: RawCommand, name: &str, path: &Path) -> Result<EvalCommand, RemoteError> {
    let key = format!("{name}.argv");
    if raw.argv.is_empty() || raw.argv[0].is_empty() {
        return Err(invalid(path, &key, "must name a program"));
    }
    if raw.argv.len() > MAX_ARGV {
        return Err(invalid(
            path,
            &key,
            format!("has more than {MAX_ARGV} elements"),
        ));
    }
    if raw
        .argv
        .iter()
        .any(|a| a.contains('\0') || a.len() > MAX_ARG_LEN)
    {
        return Err(invalid(
            path,
            &key,
            format!("an element contains NUL or is longer than {MAX_ARG_LEN} bytes"),
        ));
    }
    let timeout_secs = match raw.timeout_secs {
        None => DEFAULT_TIMEOUT_SECS,
        Some(s) if (1..=MAX_TIMEOUT_SECS).contains(&s) => s,
        Some(_) => {
            return Err(invalid(
                path,
                &format!("{name}.timeout_secs"),
                format!("must be between 1 and {MAX_TIMEOUT_SECS}"),
            ));
        }
    };
    Ok(EvalCommand {
        argv: raw.argv,
        timeout_secs,
    })
}

/// A name: `[A-Za-z0-9]` then up to 63 of `[A-Za-z0-9._-]`.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.len() <= 64
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// `NAME[:COUNT]` with `1 <= COUNT <= max`.
fn split_count(s: &str, max: u32) -> Option<(&str, u32)> {
    match s.split_once(':') {
        None => Some((s, 1)),
        Some((name, count)) => {
            let n: u32 = count.parse().ok()?;
            (count.bytes().all(|b| b.is_ascii_digit()) && (1..=max).contains(&n))
                .then_some((name, n))
        }
    }
}

impl SkypilotConfig {
    fn validate(&self, path: &Path) -> Result<(), RemoteError> {
        if let Some(cloud) = &self.cloud
            && !SKYPILOT_CLOUDS.contains(&cloud.as_str())
        {
            return Err(invalid(
                path,
                "skypilot.cloud",
                format!(
                    "{:?} is not a SkyPilot cloud; expected one of {}",
                    cloud.chars().take(64).collect::<String>(),
                    SKYPILOT_CLOUDS.join(", ")
                ),
            ));
        }
        if let Some(region) = &self.region {
            if !is_name(region) {
                return Err(invalid(
                    path,
                    "skypilot.region",
                    "must be a region name ([A-Za-z0-9][A-Za-z0-9._-]{0,63})",
                ));
            }
            if self.cloud.is_none() {
                return Err(invalid(
                    path,
                    "skypilot.region",
                    "a region belongs to a cloud: set skypilot.cloud too",
                ));
            }
        }
        if let Some(acc) = &self.accelerators {
            let ok = split_count(acc, 64).is_some_and(|(name, _)| is_name(name));
            if !ok {
                return Err(invalid(
                    path,
                    "skypilot.accelerators",
                    "must be NAME or NAME:COUNT with COUNT from 1 to 64 (e.g. A100:1)",
                ));
            }
        }
        if let Some(image) = &self.image
            && (image.is_empty()
                || image.len() > 512
                || image
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || c == '\'' || c == '"'))
        {
            return Err(invalid(
                path,
                "skypilot.image",
                "must be a non-empty image id without whitespace or quotes (e.g. docker:ubuntu:22.04)",
            ));
        }
        Ok(())
    }
}

impl ModalConfig {
    fn validate(&self, path: &Path) -> Result<(), RemoteError> {
        if let Some(gpu) = &self.gpu {
            let ok = split_count(gpu, 8).is_some_and(|(name, _)| MODAL_GPUS.contains(&name));
            if !ok {
                return Err(invalid(
                    path,
                    "modal.gpu",
                    format!(
                        "must be one of {} optionally followed by :COUNT (1 to 8)",
                        MODAL_GPUS.join(", ")
                    ),
                ));
            }
        }
        if let Some(image) = &self.image {
            let ok = !image.is_empty()
                && image.len() <= 512
                && image.bytes().all(|b| {
                    b.is_ascii_alphanumeric()
                        || matches!(b, b'.' | b'_' | b'-' | b'/' | b':' | b'@')
                });
            if !ok {
                return Err(invalid(
                    path,
                    "modal.image",
                    "must be a registry reference (e.g. registry.example/evaluator-tool@sha256:...)",
                ));
            }
            if self.python_version.is_some() {
                return Err(invalid(
                    path,
                    "modal.python_version",
                    "applies only to the default image; remove it or modal.image",
                ));
            }
        }
        if let Some(v) = &self.python_version
            && !["3.9", "3.10", "3.11", "3.12", "3.13"].contains(&v.as_str())
        {
            return Err(invalid(
                path,
                "modal.python_version",
                "must be one of 3.9, 3.10, 3.11, 3.12, 3.13",
            ));
        }
        if let Some(t) = self.timeout_secs
            && !(1..=MAX_TIMEOUT_SECS).contains(&t)
        {
            return Err(invalid(
                path,
                "modal.timeout_secs",
                format!("must be between 1 and {MAX_TIMEOUT_SECS}"),
            ));
        }
        Ok(())
    }
}

impl RemoteConfig {
    /// Reads and validates `[skypilot]` and `[modal]` from the text of the
    /// operator's `vibesys.toml`; absent tables take the defaults.
    pub fn parse(text: &str, path: &Path) -> Result<Self, RemoteError> {
        let root = parse_root(text, path)?;
        for section in ["skypilot", "modal"] {
            if let Some(v) = table(&root, section, path)?.and_then(|t| t.get("build"))
                && !v.is_bool()
            {
                return Err(invalid(
                    path,
                    &format!("{section}.build"),
                    format!(
                        "must be true (run the task's [build] on the service) or false, not {}",
                        v.to_string().chars().take(64).collect::<String>()
                    ),
                ));
            }
        }
        let skypilot: SkypilotConfig = match table(&root, "skypilot", path)? {
            Some(v) => v
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| serde_error(path, "skypilot", &e))?,
            None => SkypilotConfig::default(),
        };
        let modal: ModalConfig = match table(&root, "modal", path)? {
            Some(v) => v
                .clone()
                .try_into()
                .map_err(|e: toml::de::Error| serde_error(path, "modal", &e))?,
            None => ModalConfig::default(),
        };
        skypilot.validate(path)?;
        modal.validate(path)?;
        Ok(Self { skypilot, modal })
    }
}

impl RemoteConfig {
    /// Whether the operator asks for the task's `[build]` to run on
    /// `service` (`[skypilot] build = true` / `[modal] build = true`).
    pub fn builds_on(&self, service: super::Service) -> bool {
        match service {
            super::Service::Skypilot => self.skypilot.build,
            super::Service::Modal => self.modal.build,
        }
        .unwrap_or(false)
    }
}

/// The build `service` runs for the project, when `config` asks for one:
/// the task's `[build]` (read from the project's own `vibesys.toml`,
/// validated by [`crate::build::BuildSpec`]). Refused naming
/// `skypilot.build` / `modal.build` when the task has no `[build]`.
pub fn load_build(
    project: &Path,
    config: &RemoteConfig,
    service: super::Service,
) -> crate::Result<Option<RemoteBuild>> {
    if !config.builds_on(service) {
        return Ok(None);
    }
    let (text, path) = read_config(project)?;
    let spec = match crate::build::BuildSpec::parse(&text, &path) {
        Ok(s) => s,
        Err(crate::error::RuntimeError::Build(BuildError::BuildNotConfigured { .. })) => {
            let key = match service {
                super::Service::Skypilot => "skypilot.build",
                super::Service::Modal => "modal.build",
            };
            return Err(invalid(
                &path,
                key,
                "asks for the task's [build] on the service, but there is no [build] table",
            )
            .into());
        }
        Err(e) => return Err(e),
    };
    Ok(Some(RemoteBuild::from_spec(&spec, &path)?))
}

/// The project's own `vibesys.toml`.
pub fn config_path(project: &Path) -> PathBuf {
    project.join(crate::gate::CONFIG_FILE)
}

/// Largest `vibesys.toml` read.
const CONFIG_LIMIT: u64 = 4 * 1024 * 1024;

/// Reads and validates the trusted commands and the remote sections of
/// the project's own `vibesys.toml` (bounded, a regular file, never
/// through a final symlink). Nothing is called before this succeeds.
pub fn load(project: &Path) -> crate::Result<(TrustedEvaluation, RemoteConfig)> {
    let (text, path) = read_config(project)?;
    let remote = RemoteConfig::parse(&text, &path)?;
    let eval = TrustedEvaluation::parse(&text, &path)?;
    Ok((eval, remote))
}

/// Reads and validates only `[skypilot]` and `[modal]` of the project's
/// own `vibesys.toml` (`vibesys run` takes the trusted commands from its
/// task: [`TrustedEvaluation::from_task`]).
pub fn load_remote(project: &Path) -> crate::Result<RemoteConfig> {
    let (text, path) = read_config(project)?;
    Ok(RemoteConfig::parse(&text, &path)?)
}

fn read_config(project: &Path) -> crate::Result<(String, PathBuf)> {
    let path = config_path(project);
    let Some(bytes) = crate::fsutil::read_bounded(&path, CONFIG_LIMIT)? else {
        return Err(RemoteError::EvaluationNotConfigured {
            path,
            table: "check",
        }
        .into());
    };
    let text = String::from_utf8(bytes).map_err(|_| RemoteError::InvalidConfig {
        path: path.clone(),
        key: "vibesys.toml".to_owned(),
        reason: "not UTF-8".to_owned(),
    })?;
    Ok((text, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        RemoteConfig::parse(text, Path::new("vibesys.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn invalid_values_name_their_key() {
        assert!(err("[skypilot]\nclouds = \"aws\"\n").contains("skypilot.clouds"));
        assert!(err("[skypilot]\ncloud = \"mars\"\n").contains("skypilot.cloud"));
        assert!(err("[skypilot]\nregion = \"us-east-1\"\n").contains("skypilot.region"));
        assert!(err("[skypilot]\naccelerators = \"A100:0\"\n").contains("skypilot.accelerators"));
        assert!(err("[skypilot]\nimage = \"a b\"\n").contains("skypilot.image"));
        assert!(err("[skypilot]\nlauncher = \"serve\"\n").contains("skypilot"));
        assert!(err("[modal]\ngpu = \"Z9\"\n").contains("modal.gpu"));
        assert!(err("[modal]\ngpu = \"H100:9\"\n").contains("modal.gpu"));
        assert!(err("[modal]\ntimeout_secs = 0\n").contains("modal.timeout_secs"));
        assert!(err("[modal]\nimage = \"x y\"\n").contains("modal.image"));
        assert!(err("modal = 3\n").contains("[modal] must be a table"));
        assert!(err("[skypilot]\nbuild = \"service\"\n").contains("skypilot.build"));
        assert!(err("[modal]\nbuild = 1\n").contains("modal.build"));
    }

    #[test]
    fn a_build_on_the_service_needs_a_valid_build_table() {
        use super::super::Service;
        let dir = tempfile::tempdir().unwrap();
        let write = |text: &str| {
            std::fs::write(dir.path().join("vibesys.toml"), text).unwrap();
            RemoteConfig::parse(text, Path::new("vibesys.toml")).unwrap()
        };
        let config = write("[modal]\nbuild = true\n");
        assert!(config.builds_on(Service::Modal) && !config.builds_on(Service::Skypilot));
        assert_eq!(
            load_build(dir.path(), &config, Service::Skypilot).unwrap(),
            None
        );
        let e = load_build(dir.path(), &config, Service::Modal)
            .unwrap_err()
            .to_string();
        assert!(e.contains("modal.build") && e.contains("no [build]"), "{e}");
        let config = write(
            "[skypilot]\nbuild = true\n[build]\nargv = [\"make\"]\noutputs = [\"out/app\"]\n",
        );
        let b = load_build(dir.path(), &config, Service::Skypilot)
            .unwrap()
            .unwrap();
        assert_eq!(
            (b.argv, b.outputs, b.timeout_secs),
            (
                vec!["make".to_owned()],
                vec!["out/app".to_owned()],
                DEFAULT_BUILD_TIMEOUT_SECS
            )
        );
        // A week is a local build's limit, a day a service's.
        let config = write(
            "[skypilot]\nbuild = true\n[build]\nargv = [\"make\"]\noutputs = [\"a\"]\ntimeout_secs = 90000\n",
        );
        let e = load_build(dir.path(), &config, Service::Skypilot)
            .unwrap_err()
            .to_string();
        assert!(e.contains("build.timeout_secs"), "{e}");
    }

    #[test]
    fn commands_are_validated() {
        let p = Path::new("vibesys.toml");
        let e = TrustedEvaluation::parse("[check]\nargv = []\n[measure]\nargv=[\"m\"]\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("check.argv"), "{e}");
        let e = TrustedEvaluation::parse("[check]\nargv = [\"c\"]\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[measure]"), "{e}");
        let t = TrustedEvaluation::parse(
            "[check]\nargv = [\"c\"]\n[measure]\nargv=[\"m\"]\ntimeout_secs = 5\n",
            p,
        )
        .unwrap();
        assert_eq!(t.check.timeout_secs, DEFAULT_TIMEOUT_SECS);
        assert_eq!(t.measure.timeout_secs, 5);
    }

    #[test]
    fn a_runs_task_is_the_one_source_of_its_commands() {
        let p = Path::new("vibesys.toml");
        let task = |extra: &str| {
            crate::task::TaskSpec::parse(
                &format!(
                    "[task]\nobjective = \"o\"\n[check]\nargv = [\"c\"]\n{extra}[modal]\ngpu = \"T4\"\n"
                ),
                p,
            )
            .unwrap()
        };
        let t = TrustedEvaluation::from_task(
            &task("[measure]\nargv = [\"m\"]\ntimeout_secs = 5\nmetric = \"s\"\n"),
            p,
        )
        .unwrap();
        assert_eq!(t.check.argv, ["c"]);
        assert_eq!(t.check.timeout_secs, DEFAULT_TIMEOUT_SECS);
        assert_eq!(t.measure.argv, ["m"]);
        assert_eq!(t.measure.timeout_secs, 5);
        let e = TrustedEvaluation::from_task(&task(""), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("[measure]"), "{e}");
        // A week is a run's limit, a day a service's.
        let e = TrustedEvaluation::from_task(
            &task("[measure]\nargv = [\"m\"]\ntimeout_secs = 90000\n"),
            p,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("measure.timeout_secs"), "{e}");
    }
}
