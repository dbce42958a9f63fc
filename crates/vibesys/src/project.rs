//! The policy flags of the command line, turned into
//! [`vs_runtime::ProjectSettings`] (`vibesys.toml`, the flags, the
//! run-state paths and the defaults, validated once).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use vs_runtime::{PolicyFlags, ProjectSettings, StatePaths};

/// Policy flags shared by `exec` and `policy show`.
#[derive(Debug, Default, Args)]
pub struct PolicyArgs {
    /// The project directory (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub project: Option<PathBuf>,
    /// A workspace-relative path the command may read but not change (repeatable).
    #[arg(long = "read-only", value_name = "REL")]
    pub read_only: Vec<PathBuf>,
    /// A workspace-relative path the command must not see: it shows as an
    /// empty directory or file and refuses writes (repeatable).
    #[arg(long = "hidden", value_name = "REL")]
    pub hidden: Vec<PathBuf>,
    /// An extra absolute host path the command may read (repeatable; adds to
    /// VIBESYS_AGENT_SANDBOX_ALLOW).
    #[arg(long = "allow", value_name = "HOSTPATH")]
    pub allow: Vec<PathBuf>,
    /// Unshare the network (loopback only).
    #[arg(long = "no-network")]
    pub no_network: bool,
    /// Restrict the network to this host (repeatable): HOST, HOST:PORT,
    /// *.DOMAIN (subdomains only) or an address (IPv6 in brackets); port
    /// 443 and 80 when none is given. Adds to [sandbox] allow_hosts; the
    /// command reaches only these, through vibesys's proxy.
    #[arg(long = "allow-host", value_name = "HOST[:PORT]")]
    pub allow_host: Vec<String>,
}

/// A project's settings, validated against its workspace (built by
/// [`vs_runtime::ProjectSettings`], the one place that assembles them).
pub type ProjectPolicy = ProjectSettings;

impl PolicyArgs {
    /// The arguments of a bare command in the current directory.
    pub fn for_current_dir() -> Self {
        Self::default()
    }

    /// The flags as settings input.
    pub fn flags(&self) -> PolicyFlags {
        PolicyFlags {
            read_only: self.read_only.clone(),
            hidden: self.hidden.clone(),
            allow: self.allow.clone(),
            no_network: self.no_network,
            allow_hosts: self.allow_host.clone(),
        }
    }

    /// The project directory: `--project`, else the current directory.
    pub fn dir(&self) -> anyhow::Result<PathBuf> {
        dir_or_cwd(self.project.as_deref())
    }

    /// The settings a launch applies: `vibesys.toml`, the flags and the
    /// run-state paths (created when missing), validated once.
    pub fn resolve(&self) -> anyhow::Result<ProjectSettings> {
        self.load(StatePaths::Prepare)
    }

    /// The same settings without writing anything (`policy show`): a
    /// missing run-state directory is planned as the one a launch creates.
    pub fn plan(&self) -> anyhow::Result<ProjectSettings> {
        self.load(StatePaths::Plan)
    }

    fn load(&self, paths: StatePaths) -> anyhow::Result<ProjectSettings> {
        let flags = self.flags();
        Ok(ProjectSettings::load(&self.dir()?, &flags, None, paths)?)
    }
}

/// The caller's environment, passed explicitly to what needs it.
pub fn host_env() -> Vec<(OsString, OsString)> {
    std::env::vars_os().collect()
}

/// `dir` when given, else the current directory.
pub fn dir_or_cwd(dir: Option<&Path>) -> anyhow::Result<PathBuf> {
    match dir {
        Some(d) => Ok(d.to_path_buf()),
        None => std::env::current_dir().context("cannot read the current directory"),
    }
}

/// The current directory, when it can be read.
pub fn cwd() -> Option<PathBuf> {
    std::env::current_dir().ok()
}

/// The vibesys executable, used as the confinement helper.
pub fn helper_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe()
        .context("cannot locate the vibesys executable (needed as the sandbox helper)")
}
