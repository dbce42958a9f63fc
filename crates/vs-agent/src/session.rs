//! The provider's state binds and the launcher: every provider argv is
//! rewritten through the confinement's `wrap`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use agentshim::{Launch, Provider};
use vs_sandbox::Confinement;

use crate::env::SessionEnv;
use crate::error::AgentError;

/// The provider's state locations for `home`: its directories, read-only
/// as a whole; inside them only the entries the CLI must write
/// ([`agentshim::Provider::kept_entries`]: transcripts, history,
/// refreshed credentials, caches), read-write, each directory created
/// when missing; and its home-level files (`~/.claude.json`), for which
/// each session gets a private copy (see [`crate::private_copy`]). So
/// nothing a provider's configuration can name as a command (a statusline
/// script, hook scripts anywhere in the directory, Codex's `notify`
/// target) is writable, whatever its name.
///
/// A provider whose CLI cannot run with its directory read-only
/// ([`agentshim::Provider::private_state_var`]: Codex) works instead on a
/// private copy of the whole directory ([`crate::PrivateStateDir`]),
/// pointed at by that variable and writable in the session; the user's
/// directory stays read-only, and afterwards only the kept entries go
/// back ([`StateBinds::return_kept`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateBinds {
    /// The state directories (canonical), read-only.
    pub read_only: Vec<PathBuf>,
    /// The kept entries inside them, bound read-write; and, once seeded,
    /// each private copy of a whole state directory.
    pub writable: Vec<PathBuf>,
    /// The user's files a private copy stands in for (never written by
    /// the session; read-only under Landlock, which cannot remap a path).
    pub private: Vec<PathBuf>,
    /// The copies, once seeded (see [`StateBinds::seed_copies`]).
    pub copies: Vec<vs_sandbox::PrivateFile>,
    /// The provider, when its state directories are copied whole.
    pub provider: Option<agentshim::Provider>,
    /// The user's state directories (canonical) a private copy stands in
    /// for (read-only, in [`StateBinds::read_only`] too).
    pub private_dirs: Vec<PathBuf>,
    /// Their copies, once seeded (each also in [`StateBinds::writable`]).
    pub dir_copies: Vec<crate::PrivateStateDir>,
    /// Variables the CLI needs to find its copy (`CODEX_HOME`), once
    /// seeded.
    pub env: Vec<(OsString, OsString)>,
}

impl From<StateBinds> for vs_sandbox::ProviderState {
    fn from(state: StateBinds) -> Self {
        Self {
            read_only: state.read_only,
            writable: state.writable,
            user_files: state.private,
            private_files: state.copies,
        }
    }
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
            || self
                .writable
                .iter()
                .chain(&self.read_only)
                .any(|w| dir.path().starts_with(w));
        if inside {
            return Err(AgentError::PrivateCopy {
                path: dir.path().to_path_buf(),
                reason: "(the session directory) lies inside the workspace or a provider state directory; set XDG_RUNTIME_DIR or TMPDIR elsewhere".into(),
            });
        }
        for user_file in &self.private {
            self.copies.push(dir.seed(user_file)?);
        }
        if let Some(provider) = &self.provider {
            let var = provider.private_state_var();
            for (i, user_dir) in self.private_dirs.iter().enumerate() {
                let copy = dir.path().join(format!("state-{i}"));
                let seeded = crate::PrivateStateDir::seed(provider, user_dir, &copy)?;
                if let Some(var) = var {
                    self.env.push((var.into(), copy.clone().into_os_string()));
                }
                self.writable.push(copy);
                self.dir_copies.push(seeded);
            }
        }
        Ok(())
    }

    /// A confined session's private copies, when it needs any: a fresh
    /// session directory (which lives until dropped) seeded with them,
    /// and each variable naming a copy (`CODEX_HOME`) set in `env`,
    /// replacing the value passed through.
    pub fn private_copies(
        &mut self,
        env: &mut SessionEnv,
        workspace: &Path,
    ) -> Result<Option<crate::SessionDir>, AgentError> {
        if !self.needs_copies() {
            return Ok(None);
        }
        let dir = crate::SessionDir::create()?;
        self.seed_copies(&dir, workspace)?;
        for (k, v) in &self.env {
            env.vars.retain(|(name, _)| name != k);
            env.vars.push((k.clone(), v.clone()));
        }
        Ok(Some(dir))
    }

    /// Whether a session directory is needed ([`StateBinds::seed_copies`]).
    pub fn needs_copies(&self) -> bool {
        !self.private.is_empty() || !self.private_dirs.is_empty()
    }

    /// After the session: the kept entries of each private copy go back
    /// to the user's directory (see [`crate::PrivateStateDir`]).
    pub fn return_kept(&self) {
        if let Some(provider) = &self.provider {
            for copy in &self.dir_copies {
                copy.return_kept(provider);
            }
        }
    }
}

/// The provider `name` names (`custom`: the command `args`) and what it
/// runs: one `prompt` non-interactively, the session `resume` names
/// (`latest`: the most recent), or an interactive session with `args`
/// as extra provider arguments.
pub fn provider_launch(
    name: &str,
    args: &[OsString],
    prompt: Option<&str>,
    resume: Option<&str>,
) -> Result<(Provider, Launch), AgentError> {
    let provider: Provider = if name.trim().eq_ignore_ascii_case("custom") {
        Provider::custom(args.to_vec())?
    } else {
        name.parse()?
    };
    let launch = match (prompt, resume) {
        (Some(prompt), _) => provider.one_shot(prompt)?,
        (None, Some(id)) => {
            let which = if id == "latest" {
                agentshim::Resume::Latest
            } else {
                agentshim::Resume::Id(agentshim::SessionId::new(id)?)
            };
            provider.resume(&which, None)?
        }
        (None, None) if matches!(provider, Provider::Custom(_)) => provider.interactive(&[]),
        (None, None) => provider.interactive(args),
    };
    Ok((provider, launch))
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
    for sp in provider.resolve_state_paths(home, &var) {
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
        // Bound from descriptors opened beneath it with no symlink on
        // the way: its own path without symlinks.
        let dir = vs_sandbox::realpath::canonicalize(&sp.path).map_err(state_err(&sp.path))?;
        for kept in provider.kept_entries() {
            let path = dir.join(kept.name);
            // Made when missing; another session of the same provider
            // (candidates run in parallel) may make it first: then what
            // it made is checked like any entry found.
            let mut found = std::fs::symlink_metadata(&path);
            if matches!(&found, Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
                let made = if kept.is_dir {
                    std::fs::create_dir(&path)
                } else if kept.create_empty {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&path)
                        .map(drop)
                } else {
                    continue;
                };
                match made {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(state_err(&path)(e)),
                }
                found = std::fs::symlink_metadata(&path);
            }
            match found {
                Err(e) => return Err(state_err(&path)(e)),
                Ok(meta) if meta.is_dir() != kept.is_dir || meta.file_type().is_symlink() => {
                    // Never made writable: it stays read-only with the
                    // rest of the directory.
                    tracing::warn!(
                        path = %path.display(),
                        "the provider's state entry is not a plain {}: it stays read-only in the session",
                        if kept.is_dir { "directory" } else { "file" }
                    );
                    continue;
                }
                Ok(_) => {}
            }
            out.writable.push(path);
        }
        let kept: Vec<PathBuf> = out
            .writable
            .iter()
            .filter(|w| w.starts_with(&dir))
            .cloned()
            .collect();
        crate::named_commands::check(
            provider,
            &dir,
            std::slice::from_ref(&sp.path),
            (home, &var),
            &kept,
        )?;
        if provider.private_state_var().is_some() {
            // Nothing of the user's directory is writable: the session
            // works on a copy, and only the kept entries go back.
            out.writable.retain(|w| !w.starts_with(&dir));
            out.provider = Some(provider.clone());
            out.private_dirs.push(dir.clone());
        }
        out.read_only.push(dir);
    }
    Ok(out)
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
