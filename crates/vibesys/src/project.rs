//! Resolving a project's policy: `vibesys.toml`, command-line flags and
//! the run-state paths, validated once.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use vs_sandbox::config::PolicyConfig;
use vs_sandbox::resources::ResourceOrigin;
use vs_sandbox::{HostResources, ProjectPathPolicy, ResolvedPolicy, Workspace};

/// Policy flags shared by `exec` and `policy show`.
#[derive(Debug, Args)]
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
}

/// A project's policy, validated against its workspace.
pub struct ProjectPolicy {
    pub workspace: Workspace,
    pub defaults: vs_sandbox::defaults::Defaults,
    pub policy: ProjectPathPolicy,
    pub resolved: ResolvedPolicy,
    pub config: PolicyConfig,
    pub network: bool,
}

impl PolicyArgs {
    /// The arguments of a bare command in the current directory.
    pub fn for_current_dir() -> Self {
        Self {
            project: None,
            read_only: Vec::new(),
            hidden: Vec::new(),
            allow: Vec::new(),
            no_network: false,
        }
    }

    /// Reads `vibesys.toml`, adds the flags and the run-state paths,
    /// validates lexically and against the file system.
    pub fn resolve(&self) -> anyhow::Result<ProjectPolicy> {
        self.resolve_with_config(None)
    }

    /// As [`PolicyArgs::resolve`], with `vibesys.toml` read from
    /// `config_root` instead of the workspace (a candidate worktree takes
    /// its policy from the run's project, never from its own copy).
    pub fn resolve_with_config(
        &self,
        config_root: Option<&std::path::Path>,
    ) -> anyhow::Result<ProjectPolicy> {
        let dir = match &self.project {
            Some(p) => p.clone(),
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let workspace = Workspace::open(&dir)?;
        let config = PolicyConfig::load(config_root.unwrap_or(workspace.root()))?;
        self.resolve_in(workspace, config)
    }

    /// As [`PolicyArgs::resolve`], with the configuration given.
    pub fn resolve_in(
        &self,
        workspace: Workspace,
        config: PolicyConfig,
    ) -> anyhow::Result<ProjectPolicy> {
        let flags = ProjectPathPolicy::new(&self.read_only, &self.hidden)?;
        let mut policy = config.policy()?.merge(&flags)?;
        if workspace.root().join(vs_runtime::state::STATE_DIR).is_dir() {
            // Every hidden path must exist where it is applied.
            vs_runtime::StateLayout::prepare(workspace.root())?;
            // Read-only entries protect what is there; a linked candidate
            // worktree holds only the prepared hidden directories.
            // An operator's read-only ancestor (`--read-only .vibesys`)
            // already covers them.
            let covered = |p: &std::path::Path| policy.read_only().iter().any(|r| p.starts_with(r));
            let read_only: Vec<_> = vs_runtime::StateLayout::read_only_paths()
                .into_iter()
                .filter(|p| std::fs::symlink_metadata(workspace.root().join(p)).is_ok())
                .filter(|p| !covered(p))
                .collect();
            let state = ProjectPathPolicy::new(read_only, vs_runtime::StateLayout::hidden_paths())?;
            policy = policy.merge(&state)?;
        }
        // The default protections (credentials hidden; .git, vibesys.toml,
        // .vibesys read-only) unless the operator widened them by name.
        let defaults = config.defaults(&workspace)?;
        let policy = defaults.apply(&policy)?;
        let resolved = policy.resolve(&workspace)?;
        let network = !self.no_network && config.network.unwrap_or(true);
        Ok(ProjectPolicy {
            workspace,
            defaults,
            policy,
            resolved,
            config,
            network,
        })
    }
}

impl ProjectPolicy {
    /// The host resources for running `program`, from the process
    /// environment, the configuration and `--allow`, minus anything that
    /// would unconfine the workspace.
    pub fn resources(&self, program: &OsStr, allow: &[PathBuf]) -> HostResources {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        let mut resources = HostResources::for_command(
            program,
            env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())),
        );
        for p in self.config.allow.iter().chain(allow) {
            resources.add(p, ResourceOrigin::Operator);
        }
        resources.add_linked_git(&self.workspace);
        resources.retain_safe_for(&self.workspace);
        resources
    }
}

/// The vibesys executable, used as the confinement helper.
pub fn helper_exe() -> anyhow::Result<PathBuf> {
    std::env::current_exe()
        .context("cannot locate the vibesys executable (needed as the sandbox helper)")
}

/// The current directory when it lies in the workspace.
pub fn chdir_in(workspace: &Workspace) -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    let cwd = std::fs::canonicalize(cwd).ok()?;
    cwd.starts_with(workspace.root()).then_some(cwd)
}
