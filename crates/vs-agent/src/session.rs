//! The execution policy and the launcher: every provider argv is
//! rewritten through the confinement's `wrap`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentshim::{Launch, Provider};
use vs_sandbox::controls::allow_unconfined;
use vs_sandbox::{
    BwrapOptions, ConfineMode, Confinement, Enforcement, HostResources, HostSandbox,
    LandlockOptions, LandlockSandbox, ResolvedPolicy,
};

use crate::env::SessionEnv;
use crate::error::AgentError;

/// What a session may do: the project policy, host resources, the
/// mechanism, and whether enforcement is required.
#[derive(Debug, Clone)]
pub struct ExecutionPolicy {
    /// The project policy, resolved against its workspace.
    pub policy: ResolvedPolicy,
    /// Read-only host paths.
    pub resources: HostResources,
    /// The mechanism asked for.
    pub mode: ConfineMode,
    /// Required for every run entry point.
    pub enforcement: Enforcement,
    /// Keep the host network (agents reach their model API).
    pub network: bool,
    /// The most processes the confined tree may hold (`[sandbox]
    /// max_processes`).
    pub max_processes: u64,
    /// Host device nodes bound into the confinement (an accelerator's:
    /// `/dev/nvidiaN` of `CUDA_VISIBLE_DEVICES`, `[sandbox] devices`).
    /// Only bwrap can bind them; Landlock refuses a non-empty list.
    pub devices: Vec<std::path::PathBuf>,
}

/// The provider's state locations for `home`: its directories, created
/// when missing (so they exist where they are bound read-write), the
/// configuration entries inside them, created when missing too (so the
/// agent cannot create one either) and bound read-only, and its
/// home-level files (`~/.claude.json`), for which each session gets a
/// private copy (see [`crate::private_copy`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateBinds {
    /// Bound read-write.
    pub writable: Vec<PathBuf>,
    /// Inside a writable location, bound read-only over it.
    pub read_only_within: Vec<PathBuf>,
    /// The user's files a private copy stands in for (never written by
    /// the session; read-only under Landlock, which cannot remap a path).
    pub private: Vec<PathBuf>,
    /// The copies, once seeded (see [`StateBinds::seed_copies`]).
    pub copies: Vec<vs_sandbox::PrivateFile>,
}

impl StateBinds {
    /// Seeds a private copy of each of [`StateBinds::private`] in `dir`,
    /// which must lie outside the workspace and every writable location
    /// (the agent must not reach the copy but through its bind).
    pub fn seed_copies(
        &mut self,
        dir: &crate::SessionDir,
        workspace: &Path,
    ) -> Result<(), AgentError> {
        let inside = dir.path().starts_with(workspace)
            || workspace.starts_with(dir.path())
            || self.writable.iter().any(|w| dir.path().starts_with(w));
        if inside {
            return Err(AgentError::PrivateCopy {
                path: dir.path().to_path_buf(),
                reason: "(the session directory) lies inside the workspace or a provider state directory; set XDG_RUNTIME_DIR or TMPDIR elsewhere".into(),
            });
        }
        for user_file in &self.private {
            self.copies.push(dir.seed(user_file)?);
        }
        Ok(())
    }
}

/// Prepares the provider's state locations (see [`StateBinds`]).
pub fn prepare_state_paths(
    provider: &Provider,
    home: &Path,
    var: impl Fn(&str) -> Option<OsString>,
) -> Result<StateBinds, AgentError> {
    let mut out = StateBinds::default();
    let state_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| AgentError::State { path, source }
    };
    for sp in provider.resolve_state_paths(home, var) {
        let made = if sp.is_dir {
            std::fs::create_dir_all(&sp.path)
        } else if std::fs::symlink_metadata(&sp.path).is_err() {
            // The copy's mount point must exist: bwrap cannot create one
            // below a read-only bind, and would leave an empty (invalid)
            // file in a state directory. An empty configuration instead,
            // the one time the user's file is written.
            match sp.path.parent() {
                Some(parent) => std::fs::create_dir_all(parent).and_then(|()| {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&sp.path)
                        .and_then(|mut f| std::io::Write::write_all(&mut f, b"{}\n"))
                }),
                None => Ok(()),
            }
        } else {
            Ok(())
        };
        made.map_err(state_err(&sp.path))?;
        if !sp.is_dir {
            out.private.push(sp.path);
            continue;
        }
        for entry in provider.config_entries() {
            let path = sp.path.join(entry.name);
            if std::fs::symlink_metadata(&path).is_err() {
                match entry.empty_file {
                    None => std::fs::create_dir(&path),
                    Some(content) => std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .and_then(|mut f| std::io::Write::write_all(&mut f, content.as_bytes())),
                }
                .map_err(state_err(&path))?;
            }
            out.read_only_within.push(path);
        }
        out.writable.push(sp.path);
    }
    Ok(out)
}

/// Builds the confinement for a policy; `None` only when confinement is
/// disabled and not required (logged loudly by `allow_unconfined`).
pub fn confine(
    exec: &ExecutionPolicy,
    helper: &Path,
    bwrap: &Path,
    state: StateBinds,
) -> Result<Option<Box<dyn Confinement>>, AgentError> {
    if allow_unconfined(exec.mode, exec.enforcement).map_err(vs_sandbox::SandboxError::from)? {
        return Ok(None);
    }
    match exec.mode {
        ConfineMode::Auto | ConfineMode::Bwrap => {
            let options = BwrapOptions {
                program: bwrap.to_path_buf(),
                network: exec.network,
                chdir: None,
                helper: helper.to_path_buf(),
                writable: state.writable,
                read_only_within: state.read_only_within,
                private_files: state.copies,
                max_processes: exec.max_processes,
                devices: exec.devices.clone(),
            };
            Ok(Some(Box::new(HostSandbox::new(
                &exec.policy,
                &exec.resources,
                &options,
            )?)))
        }
        ConfineMode::Landlock => {
            if !exec.devices.is_empty() {
                return Err(AgentError::UnsupportedMode {
                    mode: "landlock",
                    reason: format!(
                        "device nodes {:?} are to be bound and Landlock cannot grant a device without granting all of /dev; use --confine bwrap",
                        exec.devices
                    ),
                });
            }
            if !state.read_only_within.is_empty() {
                tracing::warn!(
                    paths = ?state.read_only_within,
                    "landlock: the provider's configuration files inside its state directory are NOT read-only (Landlock cannot take back a right below a writable directory)"
                );
            }
            // Landlock cannot bind a private copy at another path: the
            // user's file is readable and NOT writable (the CLI may then
            // fail to save its state; it cannot plant configuration).
            let mut resources = exec.resources.clone();
            for user_file in &state.private {
                if state.writable.iter().any(|w| user_file.starts_with(w)) {
                    return Err(AgentError::UnsupportedMode {
                        mode: "landlock",
                        reason: format!(
                            "{} lies inside the provider's writable state directory, where Landlock cannot make it read-only; use --confine bwrap",
                            user_file.display()
                        ),
                    });
                }
                tracing::warn!(
                    path = %user_file.display(),
                    "landlock: the provider's file is read-only in this session (no private copy: Landlock cannot remap a path)"
                );
                resources.add(user_file, vs_sandbox::resources::ResourceOrigin::ProviderState);
            }
            let options = LandlockOptions {
                network: exec.network,
                helper: helper.to_path_buf(),
                writable: state.writable,
                max_processes: exec.max_processes,
            };
            Ok(Some(Box::new(LandlockSandbox::new(
                &exec.policy,
                &resources,
                &options,
            )?)))
        }
        ConfineMode::Docker => Err(AgentError::UnsupportedMode {
            mode: "docker",
            reason: "a DockerSandbox needs the Engine and the image lock: start one (vs_sandbox::docker::DockerSandbox::start) and pass it to session_command".into(),
        }),
        ConfineMode::Off => Err(AgentError::UnsupportedMode {
            mode: "off",
            reason: "confinement is disabled".into(),
        }),
    }
}

/// The command that launches `launch` through `confinement` (or bare
/// when `None`), with exactly `env` (plus the provider's launch
/// variables) and nothing inherited, starting in `cwd`.
pub fn session_command(
    confinement: Option<&dyn Confinement>,
    launch: &Launch,
    env: &SessionEnv,
    cwd: &Path,
) -> Result<Command, AgentError> {
    let argv = match confinement {
        Some(c) => c.wrap(&launch.argv)?,
        None => launch.argv.clone(),
    };
    let Some((program, args)) = argv.split_first() else {
        return Err(vs_sandbox::SandboxError::InvalidCommand("the command is empty".into()).into());
    };
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(cwd).env_clear();
    for (k, v) in &env.vars {
        cmd.env(k, v);
    }
    for (k, v) in &launch.env {
        cmd.env(k, v);
    }
    Ok(cmd)
}
