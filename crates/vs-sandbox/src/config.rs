//! The `[sandbox]` table of a project's `vibesys.toml`.
//!
//! Other tables belong to other crates and are ignored here; inside
//! `[sandbox]` unknown keys are an error, so a typo never silently drops
//! a protection.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::PolicyError;
use crate::limits::{DEFAULT_MAX_PROCESSES, MAX_MAX_PROCESSES};
use crate::policy::ProjectPathPolicy;

/// The project configuration file name.
pub const CONFIG_FILE: &str = "vibesys.toml";

/// Largest configuration file read (a policy is a few lines).
const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// `[sandbox]` of `vibesys.toml`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Workspace-relative read-only paths.
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
    /// Workspace-relative hidden paths.
    #[serde(default)]
    pub hidden: Vec<PathBuf>,
    /// Extra read-only host paths (absolute).
    #[serde(default)]
    pub allow: Vec<PathBuf>,
    /// Keep the host network (default true).
    #[serde(default)]
    pub network: Option<bool>,
    /// Egress by allow-list: `HOST[:PORT]`, `*.DOMAIN[:PORT]` or an
    /// address (see [`crate::egress::allow`]). Non-empty: the network is
    /// only these hosts, through vibesys's proxy.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Default protections the operator drops, each logged at start-up
    /// (`agent.toml`, `.env`, `.env.*`, `.git`, `vibesys.toml`, `.vibesys`).
    #[serde(default)]
    pub widen: Vec<PathBuf>,
    /// What the agent may do with `.git`: `read-only` (default) or
    /// `commit` (objects, refs, index, logs writable; configuration and
    /// hooks never).
    #[serde(default)]
    pub git: crate::defaults::GitAccess,
    /// The most processes a confined tree may hold (default
    /// [`DEFAULT_MAX_PROCESSES`]).
    #[serde(default)]
    pub max_processes: Option<u64>,
    /// Host device nodes bound into the confinement (absolute paths below
    /// `/dev/`, each a character device reached with no symlink): an
    /// accelerator that is not an NVIDIA GPU selected by
    /// `CUDA_VISIBLE_DEVICES` (`/dev/kfd`, `/dev/dri/renderD128`, ...).
    #[serde(default)]
    pub devices: Vec<PathBuf>,
}

#[derive(Deserialize)]
struct File {
    #[serde(default)]
    sandbox: Option<PolicyConfig>,
}

/// Why `vibesys.toml` could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read: missing permission, not a regular
    /// file (a fifo, a symlink, a device), or larger than a policy can be.
    #[error("cannot use {path:?} as the configuration: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: crate::fsread::BoundedReadError,
    },
    /// The TOML is malformed or holds unknown keys.
    #[error("invalid {path:?}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A listed path breaks a policy rule.
    #[error("invalid [sandbox] in {path:?}: {source}")]
    Policy {
        /// The file.
        path: PathBuf,
        /// The rule broken.
        source: PolicyError,
    },
    /// `max_processes` is out of range.
    #[error("invalid [sandbox] in {path:?}: max_processes = {value} is not between 1 and {max}")]
    MaxProcesses {
        /// The file.
        path: PathBuf,
        /// The value given.
        value: u64,
        /// The largest accepted value.
        max: u64,
    },
    /// A `devices` entry is not a character device below `/dev/`.
    #[error("invalid [sandbox] in {path:?}: devices entry {entry:?} {reason}")]
    Device {
        /// The file.
        path: PathBuf,
        /// The entry.
        entry: PathBuf,
        /// Why it cannot be bound.
        reason: String,
    },
    /// `allow_hosts` holds patterns that cannot be used.
    #[error(
        "invalid egress allow-list ([sandbox] allow_hosts of {path:?}, or --allow-host): {}",
        list_errors(errors)
    )]
    AllowHosts {
        /// The file.
        path: PathBuf,
        /// Each bad pattern and why.
        errors: Vec<crate::egress::HostPatternError>,
    },
    /// An `allow` entry is not absolute.
    #[error("invalid [sandbox] in {path:?}: allow entry {entry:?} is not an absolute path")]
    RelativeAllow {
        /// The file.
        path: PathBuf,
        /// The entry.
        entry: PathBuf,
    },
}

/// The bad patterns, each named with its reason.
pub fn list_errors(errors: &[crate::egress::HostPatternError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The 1-based number and the text (at most 120 characters) of the line
/// holding byte `offset`.
fn line_of(text: &str, offset: usize) -> Option<(usize, String)> {
    let before = text.get(..offset)?;
    let n = before.matches('\n').count() + 1;
    let line = text.lines().nth(n - 1)?;
    Some((n, line.trim().chars().take(120).collect()))
}

impl PolicyConfig {
    /// Reads `vibesys.toml` from the workspace root; a missing file gives
    /// the empty configuration.
    pub fn load(workspace_root: &Path) -> Result<Self, ConfigError> {
        let path = workspace_root.join(CONFIG_FILE);
        let bytes = match crate::fsread::read_bounded(&path, MAX_CONFIG_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(Self::default()),
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        let text = String::from_utf8(bytes).map_err(|_| ConfigError::Parse {
            path: path.clone(),
            message: "the file is not UTF-8".into(),
        })?;
        Self::parse(&text, &path)
    }

    /// Parses the text of a `vibesys.toml`; `path` is used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let file: File = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: match e.span().and_then(|span| line_of(text, span.start)) {
                Some((n, line)) => format!("{} (line {n}: `{line}`)", e.message()),
                None => e.message().to_owned(),
            },
        })?;
        let config = file.sandbox.unwrap_or_default();
        if let Some(entry) = config.allow.iter().find(|p| !p.is_absolute()) {
            return Err(ConfigError::RelativeAllow {
                path: path.to_path_buf(),
                entry: entry.clone(),
            });
        }
        config
            .allow_list()
            .map_err(|errors| ConfigError::AllowHosts {
                path: path.to_path_buf(),
                errors,
            })?;
        for entry in &config.devices {
            check_device_node(entry).map_err(|reason| ConfigError::Device {
                path: path.to_path_buf(),
                entry: entry.clone(),
                reason,
            })?;
        }
        if let Some(value) = config
            .max_processes
            .filter(|v| !(1..=MAX_MAX_PROCESSES).contains(v))
        {
            return Err(ConfigError::MaxProcesses {
                path: path.to_path_buf(),
                value,
                max: MAX_MAX_PROCESSES,
            });
        }
        config.policy().map_err(|source| ConfigError::Policy {
            path: path.to_path_buf(),
            source,
        })?;
        if let Some(Err(source)) = config
            .widen
            .iter()
            .map(crate::policy::WorkspaceRelPath::new)
            .find(Result::is_err)
        {
            return Err(ConfigError::Policy {
                path: path.to_path_buf(),
                source,
            });
        }
        Ok(config)
    }

    /// `max_processes`, or its default.
    pub fn max_processes(&self) -> u64 {
        self.max_processes.unwrap_or(DEFAULT_MAX_PROCESSES)
    }

    /// `allow_hosts`, parsed.
    pub fn allow_list(
        &self,
    ) -> Result<crate::egress::AllowList, Vec<crate::egress::HostPatternError>> {
        crate::egress::AllowList::parse(&self.allow_hosts)
    }

    /// The policy the configuration lists.
    pub fn policy(&self) -> Result<ProjectPathPolicy, PolicyError> {
        ProjectPathPolicy::new(&self.read_only, &self.hidden)
    }

    /// The default protections of `workspace` under this configuration's
    /// `widen` and `git` settings.
    pub fn defaults(
        &self,
        workspace: &crate::policy::Workspace,
    ) -> Result<crate::defaults::Defaults, PolicyError> {
        let widen = self
            .widen
            .iter()
            .map(crate::policy::WorkspaceRelPath::new)
            .collect::<Result<Vec<_>, _>>()?;
        crate::defaults::Defaults::for_workspace(workspace, self.git, &widen)
    }
}

/// Checks that `path` names a host character device that may be bound
/// into a confinement: absolute, below `/dev/`, no `..`, no symlink on the
/// way (its canonical path is itself) and a character device itself.
/// The reason is returned for the caller's message.
pub fn check_device_node(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    if !path.is_absolute()
        || !path.starts_with("/dev/")
        || path.components().any(|c| {
            !matches!(
                c,
                std::path::Component::RootDir | std::path::Component::Normal(_)
            )
        })
    {
        return Err("must be an absolute path below /dev/ (no `.` or `..`)".to_owned());
    }
    let meta = std::fs::symlink_metadata(path).map_err(|e| format!("cannot be read: {e}"))?;
    if meta.file_type().is_symlink() {
        return Err("is a symlink (name the device node itself)".to_owned());
    }
    if !meta.file_type().is_char_device() {
        return Err("is not a character device".to_owned());
    }
    match crate::realpath::canonicalize(path) {
        Ok(real) if real == path => Ok(()),
        Ok(real) => Err(format!(
            "leads through a symlink to {} (name the device node itself)",
            real.display()
        )),
        Err(e) => Err(format!("cannot be resolved: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_character_devices_below_dev() {
        let path = Path::new("vibesys.toml");
        let c = PolicyConfig::parse("[sandbox]\ndevices = [\"/dev/full\"]\n", path).unwrap();
        assert_eq!(c.devices, [PathBuf::from("/dev/full")]);
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("full");
        std::os::unix::fs::symlink("/dev/full", &link).unwrap();
        for (bad, why) in [
            ("dev/full", "absolute path below /dev/"),
            ("/etc/passwd", "absolute path below /dev/"),
            ("/dev/../etc/passwd", "absolute path below /dev/"),
            ("/dev/no-such-device", "cannot be read"),
            ("/dev/shm", "not a character device"),
            ("/dev/stdin", "symlink"),
        ] {
            let err = PolicyConfig::parse(&format!("[sandbox]\ndevices = [{bad:?}]\n"), path)
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("devices entry") && err.contains(why),
                "{bad}: {err}"
            );
        }
        let err = check_device_node(&link).unwrap_err();
        assert!(err.contains("below /dev/"), "{err}");
    }

    #[test]
    fn max_processes_defaults_and_is_bounded() {
        let path = Path::new("vibesys.toml");
        assert_eq!(
            PolicyConfig::parse("", path).unwrap().max_processes(),
            DEFAULT_MAX_PROCESSES
        );
        let c = PolicyConfig::parse("[sandbox]\nmax_processes = 64\n", path).unwrap();
        assert_eq!(c.max_processes(), 64);
        for bad in ["0", "4194305"] {
            let err = PolicyConfig::parse(&format!("[sandbox]\nmax_processes = {bad}\n"), path)
                .unwrap_err()
                .to_string();
            assert!(err.contains("max_processes"), "{err}");
        }
        assert!(PolicyConfig::parse("[sandbox]\nmax_processes = -1\n", path).is_err());
    }
}
