//! A project's confinement settings, built and validated once: the policy
//! from `vibesys.toml`, the operator's flags, the run-state paths and the
//! default protections, resolved against the workspace (or a build
//! checkout), plus what the backends need besides the policy (network,
//! process limit, devices, the `allow` list).
//!
//! Every entry point turns its arguments into [`PolicyFlags`], calls
//! [`ProjectSettings::load`] (or [`ProjectSettings::for_checkout`]) and
//! hands [`ProjectSettings::sandbox_request`] to `vs_sandbox::select`; so
//! `policy show` and `exec` lower the very same value.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use vs_sandbox::config::PolicyConfig;
use vs_sandbox::defaults::Defaults;
use vs_sandbox::resources::ResourceOrigin;
use vs_sandbox::{ConfineRequest, HostResources, ProjectPathPolicy, ResolvedPolicy, Workspace};

use crate::error::Result;
use crate::state::{STATE_DIR, StateLayout};

/// The operator's policy flags (`--read-only`, `--hidden`, `--allow`,
/// `--no-network`), added to the project's configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PolicyFlags {
    /// Workspace-relative read-only paths.
    pub read_only: Vec<PathBuf>,
    /// Workspace-relative hidden paths.
    pub hidden: Vec<PathBuf>,
    /// Extra absolute host paths the command may read.
    pub allow: Vec<PathBuf>,
    /// Unshare the network.
    pub no_network: bool,
    /// `--allow-host` patterns, added to `[sandbox] allow_hosts`.
    pub allow_hosts: Vec<String>,
}

/// Whether loading may create the run state's hidden directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatePaths {
    /// Create them (every hidden path must exist where it is applied): a
    /// launch.
    Prepare,
    /// Write nothing: a missing one is planned as the directory a launch
    /// would create (`policy show`).
    Plan,
}

/// A project's settings, validated against its workspace.
#[derive(Debug, Clone)]
pub struct ProjectSettings {
    /// The workspace (canonical root).
    pub workspace: Workspace,
    /// The default protections in force (and what was widened).
    pub defaults: Defaults,
    /// The policy as written: configuration, flags, state paths, defaults.
    pub policy: ProjectPathPolicy,
    /// The policy resolved against the workspace.
    pub resolved: ResolvedPolicy,
    /// `vibesys.toml`'s `[sandbox]`.
    pub config: PolicyConfig,
    /// Keep the host network.
    pub network: bool,
    /// Host paths the operator allows (`[sandbox] allow` and `--allow`).
    pub allow: Vec<PathBuf>,
    /// The egress allow-list (`[sandbox] allow_hosts` and
    /// `--allow-host`, plus a provider's API host added by
    /// [`ProjectSettings::add_provider_host`]): non-empty, with
    /// `network`, the network is only these hosts.
    pub allow_hosts: vs_sandbox::egress::AllowList,
    /// Hosts added for a provider (named by `policy show`).
    pub provider_hosts: Vec<String>,
    /// Whether a linked worktree's git directories are host resources
    /// (read-only, so git works in a candidate worktree).
    linked_git: bool,
}

impl ProjectSettings {
    /// Reads `vibesys.toml` (from `config_root` when given: a candidate
    /// worktree takes its policy from the run's project, never its own
    /// copy), adds `flags`, the run-state paths when `.vibesys/state`
    /// exists and the default protections, and resolves the whole against
    /// the workspace at `dir`.
    pub fn load(
        dir: &Path,
        flags: &PolicyFlags,
        config_root: Option<&Path>,
        state: StatePaths,
    ) -> Result<Self> {
        let workspace = Workspace::open(dir)?;
        let root = config_root.unwrap_or(workspace.root()).to_path_buf();
        let mut config = PolicyConfig::load(&root)?;
        let mut flags = flags.clone();
        let protected = crate::gate::configured_paths(&root, "task", "protected")?;
        add_protected(workspace.root(), &mut config, &mut flags, &protected);
        Self::with_config(workspace, config, &flags, state)
    }

    /// As [`ProjectSettings::load`], with the configuration given.
    pub fn with_config(
        workspace: Workspace,
        config: PolicyConfig,
        flags: &PolicyFlags,
        state: StatePaths,
    ) -> Result<Self> {
        let flag_policy = ProjectPathPolicy::new(&flags.read_only, &flags.hidden)?;
        let mut policy = config.policy()?.merge(&flag_policy)?;
        let mut planned = Vec::new();
        if workspace.root().join(STATE_DIR).is_dir() {
            match state {
                StatePaths::Prepare => StateLayout::prepare(workspace.root())?,
                StatePaths::Plan => planned = StateLayout::hidden_paths(),
            }
            // Read-only entries protect what is there; a linked candidate
            // worktree holds only the prepared hidden directories. An
            // operator's read-only ancestor (`--read-only .vibesys`)
            // already covers them.
            let covered = |p: &Path| policy.read_only().iter().any(|r| p.starts_with(r));
            let read_only: Vec<PathBuf> = StateLayout::read_only_paths()
                .into_iter()
                .filter(|p| std::fs::symlink_metadata(workspace.root().join(p)).is_ok())
                .filter(|p| !covered(p))
                .collect();
            let state = ProjectPathPolicy::new(read_only, StateLayout::hidden_paths())?;
            policy = policy.merge(&state)?;
        }
        let network = !flags.no_network && config.network.unwrap_or(true);
        let allow = config.allow.iter().chain(&flags.allow).cloned().collect();
        let allow_hosts = vs_sandbox::egress::AllowList::parse(
            config.allow_hosts.iter().chain(&flags.allow_hosts),
        )
        .map_err(|errors| vs_sandbox::config::ConfigError::AllowHosts {
            path: workspace.root().join(vs_sandbox::config::CONFIG_FILE),
            errors,
        })?;
        let mut settings =
            Self::finish(workspace, config, &policy, &planned, network, allow, true)?;
        settings.allow_hosts = allow_hosts;
        Ok(settings)
    }

    /// The settings of a build or evaluation checkout (a throwaway copy of
    /// one commit): the run-state paths (hidden ones always exist there;
    /// read-only ones when the commit has them), the project's own
    /// `[sandbox]` paths that exist in the checkout, `protected` (the
    /// task's `[task] protected` and `[gate] protect`) read-only, and the
    /// default protections of what the commit holds. A path the commit
    /// lacks has nothing to protect.
    pub fn for_checkout(
        workspace: Workspace,
        mut config: PolicyConfig,
        protected: &[PathBuf],
    ) -> Result<Self> {
        let exists = |p: &PathBuf| workspace.root().join(p).symlink_metadata().is_ok();
        keep_present(workspace.root(), &mut config);
        let hidden: BTreeSet<PathBuf> = StateLayout::hidden_paths()
            .into_iter()
            .chain(config.hidden.iter().cloned())
            .collect();
        let mut read_only: BTreeSet<PathBuf> = StateLayout::read_only_paths()
            .into_iter()
            .chain(config.read_only.iter().cloned())
            .filter(|p| exists(p) && !hidden.contains(p))
            .collect();
        let plain = |p: &&PathBuf| {
            !p.as_os_str().is_empty()
                && p.components()
                    .all(|c| matches!(c, std::path::Component::Normal(_)))
        };
        for p in protected.iter().filter(plain).filter(|p| exists(p)) {
            // Already hidden or already read-only: covered.
            if hidden.iter().any(|h| p.starts_with(h)) || read_only.iter().any(|r| p.starts_with(r))
            {
                continue;
            }
            // A read-only path below it is covered by it.
            read_only.retain(|r| !r.starts_with(p));
            read_only.insert(p.clone());
        }
        let policy = ProjectPathPolicy::new(read_only, hidden)?;
        let network = config.network.unwrap_or(true);
        let allow = config.allow.clone();
        let allow_hosts =
            config
                .allow_list()
                .map_err(|errors| vs_sandbox::config::ConfigError::AllowHosts {
                    path: workspace.root().join(vs_sandbox::config::CONFIG_FILE),
                    errors,
                })?;
        let mut settings = Self::finish(workspace, config, &policy, &[], network, allow, false)?;
        settings.allow_hosts = allow_hosts;
        Ok(settings)
    }

    /// The settings of a run candidate's agent in its `worktree`: the
    /// project's `config` (from the operator's project, never the
    /// candidate's copy) without the `[sandbox]` paths the worktree lacks,
    /// `protected` read-only ([`add_protected`]), the run-state paths,
    /// the defaults, and `allow_hosts` added to the configuration's.
    pub fn for_candidate(
        worktree: Workspace,
        mut config: PolicyConfig,
        protected: &[PathBuf],
        allow_hosts: &[String],
    ) -> Result<Self> {
        keep_present(worktree.root(), &mut config);
        let mut flags = PolicyFlags {
            allow_hosts: allow_hosts.to_vec(),
            ..PolicyFlags::default()
        };
        add_protected(worktree.root(), &mut config, &mut flags, protected);
        Self::with_config(worktree, config, &flags, StatePaths::Prepare)
    }

    /// Adds the default protections (credentials hidden; .git,
    /// vibesys.toml, .vibesys read-only) unless the operator widened them
    /// by name, and resolves the whole against the workspace: the one
    /// validation against the file system.
    fn finish(
        workspace: Workspace,
        config: PolicyConfig,
        policy: &ProjectPathPolicy,
        planned: &[PathBuf],
        network: bool,
        allow: Vec<PathBuf>,
        linked_git: bool,
    ) -> Result<Self> {
        let defaults = config.defaults(&workspace)?;
        let policy = defaults.apply(policy)?;
        let resolved = policy.resolve_planned(&workspace, planned)?;
        Ok(Self {
            workspace,
            defaults,
            policy,
            resolved,
            config,
            network,
            allow,
            allow_hosts: vs_sandbox::egress::AllowList::default(),
            provider_hosts: Vec::new(),
            linked_git,
        })
    }

    /// Whether the network is restricted to the allow-list (present,
    /// non-empty, and the network not turned off).
    pub fn egress_restricted(&self) -> bool {
        self.network && !self.allow_hosts.is_empty()
    }

    /// Adds a provider's API host (`host:port`) to a non-empty allow-list
    /// (an open or a closed network stays as it is).
    pub fn add_provider_host(&mut self, host_port: &str) -> Result<()> {
        if self.allow_hosts.is_empty() {
            return Ok(());
        }
        let pattern = vs_sandbox::egress::HostPattern::parse(host_port).map_err(|e| {
            vs_sandbox::config::ConfigError::AllowHosts {
                path: self.workspace.root().join(vs_sandbox::config::CONFIG_FILE),
                errors: vec![e],
            }
        })?;
        self.allow_hosts.push(pattern);
        self.provider_hosts.push(host_port.to_owned());
        Ok(())
    }

    /// Starts the egress proxy when the network is restricted to the
    /// allow-list, in the mode the backend of `mode` reaches (a listener
    /// handed over its socket, or its own port on the host loopback for
    /// Seatbelt: `vs_sandbox::Backend::egress_entrance` decides); `None`
    /// when the network is open or closed.
    pub fn start_egress(
        &self,
        mode: vs_sandbox::ConfineMode,
    ) -> std::result::Result<Option<vs_sandbox::egress::EgressProxy>, vs_sandbox::egress::ProxyError>
    {
        use vs_sandbox::egress::{EgressProxy, EntranceKind};
        if !self.egress_restricted() {
            return Ok(None);
        }
        // A mode with no backend (off) gets the handover proxy: nothing
        // confines with it, and the callers refuse an unconfined command
        // with a running proxy.
        let entrance = vs_sandbox::Backend::for_mode(mode)
            .map(vs_sandbox::Backend::egress_entrance)
            .unwrap_or(EntranceKind::Handover);
        match entrance {
            EntranceKind::Loopback => {
                EgressProxy::start_loopback(self.allow_hosts.clone()).map(Some)
            }
            EntranceKind::Handover => {
                let runtime = std::env::var_os("XDG_RUNTIME_DIR")
                    .map(PathBuf::from)
                    .filter(|p| p.is_dir())
                    .unwrap_or_else(std::env::temp_dir);
                EgressProxy::start(self.allow_hosts.clone(), &runtime).map(Some)
            }
        }
    }

    /// The door a request gets for `proxy` (`None` without one; when
    /// `proxy` is `None` and the list restricts, a planned handover door,
    /// which `select` refuses as not running: see
    /// [`ProjectSettings::planned_egress_door`]).
    pub fn egress_door(
        &self,
        proxy: Option<&vs_sandbox::egress::EgressProxy>,
    ) -> Option<vs_sandbox::egress::EgressDoor> {
        if !self.egress_restricted() {
            return None;
        }
        Some(match proxy {
            Some(p) => vs_sandbox::egress::EgressDoor::of(p, &self.allow_hosts),
            None => self.planned_door(vs_sandbox::egress::EntranceKind::Handover),
        })
    }

    /// The door `backend` would get, before any proxy runs (`policy
    /// show`): a placeholder socket path, or port 0 for the loopback.
    pub fn planned_egress_door(
        &self,
        backend: vs_sandbox::Backend,
    ) -> Option<vs_sandbox::egress::EgressDoor> {
        self.egress_restricted()
            .then(|| self.planned_door(backend.egress_entrance()))
    }

    fn planned_door(
        &self,
        kind: vs_sandbox::egress::EntranceKind,
    ) -> vs_sandbox::egress::EgressDoor {
        use vs_sandbox::egress::{EgressDoor, Entrance, EntranceKind};
        EgressDoor {
            allow: self.allow_hosts.clone(),
            entrance: match kind {
                EntranceKind::Handover => {
                    Entrance::Handover(PathBuf::from("<egress proxy socket>"))
                }
                EntranceKind::Loopback => Entrance::Loopback(0),
            },
        }
    }

    /// The host resources for running `program`, found through `env` (the
    /// caller's environment, passed explicitly), plus the allowed paths,
    /// minus anything that would unconfine the workspace.
    pub fn resources<'a>(
        &self,
        program: &OsStr,
        env: impl IntoIterator<Item = (&'a OsStr, &'a OsStr)>,
    ) -> HostResources {
        let mut resources = HostResources::for_command(program, env);
        for p in &self.allow {
            resources.add(p, ResourceOrigin::Operator);
        }
        if self.linked_git {
            resources.add_linked_git(&self.workspace);
        }
        resources.retain_safe_for(&self.workspace);
        resources
    }

    /// `cwd` when it lies in the workspace (canonicalised): where a
    /// confined command starts.
    pub fn chdir_in(&self, cwd: Option<&Path>) -> Option<PathBuf> {
        let cwd = vs_sandbox::realpath::canonicalize(cwd?).ok()?;
        cwd.starts_with(self.workspace.root()).then_some(cwd)
    }

    /// What `vs_sandbox::select` needs to confine `program` (found through
    /// `env`) started from `cwd`, with `helper` as the launch helper.
    pub fn sandbox_request(
        &self,
        program: &OsStr,
        env: &[(OsString, OsString)],
        cwd: Option<&Path>,
        helper: PathBuf,
    ) -> ConfineRequest<'_> {
        let resources = self.resources(
            program,
            env.iter().map(|(k, v)| (k.as_os_str(), v.as_os_str())),
        );
        let path_var = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        let mut request = ConfineRequest::new(&self.resolved, resources, helper);
        request.network = self.network;
        request.egress = self.egress_door(None);
        request.chdir = self.chdir_in(cwd);
        request.max_processes = self.config.max_processes();
        request.devices = self.config.devices.clone();
        request.path_var = path_var;
        request
    }
}

/// Drops the `[sandbox]` paths a checkout at `root` does not hold (an
/// untracked secret of the project): there they have nothing to protect.
pub fn keep_present(root: &Path, config: &mut PolicyConfig) {
    let exists = |p: &PathBuf| root.join(p).symlink_metadata().is_ok();
    config.read_only.retain(exists);
    config.hidden.retain(exists);
}

/// What the task of the project at `root` protects: `[task] protected`
/// and `[gate] protect` of its own `vibesys.toml`.
pub fn task_protected_paths(root: &Path) -> Result<Vec<PathBuf>> {
    let mut paths = crate::gate::configured_paths(root, "task", "protected")?;
    for p in crate::gate::configured_paths(root, "gate", "protect")? {
        if !paths.contains(&p) {
            paths.push(p);
        }
    }
    Ok(paths)
}

/// Adds `protected` (`[task] protected`: read-only to the agent in every
/// entry point, not only in a run) to the read-only paths: each one the
/// workspace holds, unless a hidden or read-only path already covers it;
/// a read-only path below it gives way to it. The run state keeps its own
/// rules.
pub fn add_protected(
    root: &Path,
    config: &mut PolicyConfig,
    flags: &mut PolicyFlags,
    protected: &[PathBuf],
) {
    for p in protected {
        if p.as_os_str().is_empty()
            || p.is_absolute()
            || p.components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
            || p.starts_with(STATE_DIR)
            || Path::new(STATE_DIR).starts_with(p)
            || std::fs::symlink_metadata(root.join(p)).is_err()
        {
            continue;
        }
        let covered = config
            .hidden
            .iter()
            .chain(&flags.hidden)
            .chain(&config.read_only)
            .chain(&flags.read_only)
            .any(|c| p.starts_with(c));
        if covered {
            continue;
        }
        config.read_only.retain(|r| !r.starts_with(p));
        flags.read_only.retain(|r| !r.starts_with(p));
        flags.read_only.push(p.clone());
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn paths(list: &[vs_sandbox::WorkspaceRelPath]) -> Vec<PathBuf> {
        list.iter().map(|p| p.as_path().to_path_buf()).collect()
    }

    /// A candidate's settings drop the `[sandbox]` paths its worktree
    /// lacks, and its protected path is read-only even where the
    /// configuration names a path below it.
    #[test]
    fn for_candidate_skips_absent_paths_and_protects() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("evaluator/data")).unwrap();
        std::fs::write(root.join("notes.txt"), "x").unwrap();
        let config = PolicyConfig {
            read_only: vec!["evaluator/data".into(), "absent".into()],
            hidden: vec!["notes.txt".into(), "untracked-secret".into()],
            ..PolicyConfig::default()
        };
        let settings = ProjectSettings::for_candidate(
            Workspace::open(root).unwrap(),
            config,
            &[PathBuf::from("evaluator"), PathBuf::from("missing")],
            &["example.com".to_owned()],
        )
        .unwrap();
        let read_only = paths(settings.policy.read_only());
        let hidden = paths(settings.policy.hidden());
        assert!(
            read_only.contains(&PathBuf::from("evaluator")),
            "{read_only:?}"
        );
        for gone in ["evaluator/data", "absent", "missing"] {
            assert!(!read_only.contains(&PathBuf::from(gone)), "{read_only:?}");
        }
        assert!(hidden.contains(&PathBuf::from("notes.txt")), "{hidden:?}");
        assert!(
            !hidden.contains(&PathBuf::from("untracked-secret")),
            "{hidden:?}"
        );
        assert!(settings.egress_restricted());
    }
}
