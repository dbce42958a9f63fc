//! `vibesys policy show`: the exact plan each backend would apply to a
//! project's settings, lowered by `vs_sandbox::plan` (the function `exec`'s
//! sandboxes are built by) without starting or writing anything, and the
//! whole as text or JSON.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::json;
use vs_docker::DockerOptions;
use vs_sandbox::explain::{self, ExplainError, PlanDescription};
use vs_sandbox::{Access, Backend, HostResources};

use crate::settings::ProjectSettings;

/// How to get a hidden path out of history.
pub const HISTORY_FIX: &str = "rewrite history without it (git filter-repo --invert-paths --path P), rotate what it held, and expire the reflog";

/// Why `policy show` could not describe the plans.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyShowError {
    /// A plan could not be described.
    #[error(transparent)]
    Explain(#[from] ExplainError),
}

/// What to show: the settings `exec` resolves, and the command as
/// `exec -- CMD` would run it.
pub struct ShowRequest<'a> {
    /// The project's settings (resolved without preparing the run state).
    pub project: &'a ProjectSettings,
    /// The command (its host resources depend on it); empty: `sh`.
    pub command: Vec<OsString>,
    /// The caller's environment.
    pub host_env: &'a [(OsString, OsString)],
    /// The current directory, when it can be read.
    pub cwd: Option<&'a Path>,
    /// The confinement helper (this executable).
    pub helper: PathBuf,
    /// The environment `exec` gives the command (shown by name only).
    pub exec_env: &'a [(OsString, OsString)],
    /// The backends to show, in order.
    pub backends: Vec<Backend>,
}

/// One backend's plan, or why it is unusable here.
#[derive(Debug)]
pub struct BackendShow {
    /// The backend.
    pub backend: Backend,
    /// Its plan and what it enforces, or why it cannot be planned.
    pub plan: Result<PlanDescription, String>,
}

/// The policy and each backend's plan, for `policy show`: text through
/// [`fmt::Display`], JSON through [`PolicyShow::to_json`].
#[derive(Debug)]
pub struct PolicyShow<'a> {
    project: &'a ProjectSettings,
    command: Vec<OsString>,
    chdir: Option<PathBuf>,
    resources: HostResources,
    hidden_in_history: Vec<String>,
    /// Each backend asked for, in order.
    pub backends: Vec<BackendShow>,
}

/// Lowers the settings with each backend asked for; `docker_options`
/// gives the container's options (or why there are none) when Docker is.
pub fn show<'a>(
    request: ShowRequest<'a>,
    docker_options: &mut dyn FnMut() -> Result<DockerOptions, String>,
) -> Result<PolicyShow<'a>, PolicyShowError> {
    let ShowRequest {
        project,
        command,
        host_env,
        cwd,
        helper,
        exec_env,
        backends: wanted,
    } = request;
    let command = if command.is_empty() {
        vec![OsString::from("sh")]
    } else {
        command
    };
    let sandbox_request = || project.sandbox_request(&command[0], host_env, cwd, helper.clone());
    let mut backends = Vec::new();
    for backend in wanted {
        let mut req = sandbox_request();
        // The door this backend would get (a placeholder: no proxy runs).
        req.egress = project.planned_egress_door(backend);
        if backend == Backend::Docker {
            match docker_options() {
                Ok(options) => req.docker = Some(Box::new(options)),
                Err(e) => {
                    backends.push(BackendShow {
                        backend,
                        plan: Err(e),
                    });
                    continue;
                }
            }
        }
        let plan = match vs_sandbox::plan(req, backend) {
            Ok(plan) => Ok(explain::describe(&plan, exec_env)?),
            Err(e) => Err(e.to_string()),
        };
        backends.push(BackendShow { backend, plan });
    }
    Ok(PolicyShow {
        project,
        chdir: project.chdir_in(cwd),
        resources: sandbox_request().resources,
        hidden_in_history: hidden_in_history(project),
        command,
        backends,
    })
}

impl PolicyShow<'_> {
    /// The whole as JSON (stable; documented in docs/cli.md).
    pub fn to_json(&self) -> serde_json::Value {
        let project = self.project;
        let backends: serde_json::Map<String, serde_json::Value> = self
            .backends
            .iter()
            .map(|b| {
                let value = match &b.plan {
                    Ok(described) => described.json.clone(),
                    Err(e) => json!({ "error": e }),
                };
                (b.backend.name().to_owned(), value)
            })
            .collect();
        let mode = match (project.network, project.allow_hosts.is_empty()) {
            (false, _) => "none",
            (true, true) => "open",
            (true, false) => "allow-list",
        };
        json!({
            "hidden_in_history": self.hidden_in_history,
            "workspace": project.workspace.root(),
            "command": self.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            "chdir": self.chdir,
            "policy": {
                "read_only": project.policy.read_only(),
                "hidden": project.policy.hidden(),
            },
            "resolved": project.resolved.entries(),
            "defaults": project.defaults,
            "network": project.network,
            "egress": {
                "mode": mode,
                "allow_hosts": project.allow_hosts,
                "provider_hosts": project.provider_hosts,
            },
            "resources": self.resources.iter().collect::<Vec<_>>(),
            "backends": backends,
        })
    }
}

/// The workspace, the network, the defaults, each resolved path and the
/// history warnings, then each backend's plan under `== NAME ==`.
impl fmt::Display for PolicyShow<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let project = self.project;
        writeln!(f, "workspace: {}", project.workspace.root().display())?;
        write_network(f, project)?;
        for d in &project.defaults.entries {
            writeln!(
                f,
                "default   {:<9} {}{}",
                d.access.name(),
                d.path,
                if d.widened {
                    "  WIDENED by [sandbox] widen: not applied"
                } else {
                    ""
                }
            )?;
        }
        for e in project.resolved.entries() {
            writeln!(f, "{:<9} {} ({:?})", e.access.name(), e.rel, e.kind)?;
        }
        for p in &self.hidden_in_history {
            writeln!(
                f,
                "WARNING   hidden path {p} is in git history: its content stays readable through .git/objects ({HISTORY_FIX})"
            )?;
        }
        for b in &self.backends {
            writeln!(f, "== {} ==", b.backend.name())?;
            match &b.plan {
                Ok(described) => f.write_str(&described.text)?,
                Err(e) => writeln!(f, "  unusable: {e}")?,
            }
        }
        Ok(())
    }
}

/// `network ...`: open, none, or the allow-list (and the provider hosts
/// it gained).
fn write_network(f: &mut fmt::Formatter<'_>, project: &ProjectSettings) -> fmt::Result {
    if !project.network {
        return writeln!(f, "network   none");
    }
    if project.allow_hosts.is_empty() {
        return writeln!(f, "network   open");
    }
    writeln!(f, "network   allow-list: {}", project.allow_hosts)?;
    for h in &project.provider_hosts {
        writeln!(f, "network   {h} added: the provider's API host")?;
    }
    Ok(())
}

/// Hidden paths of the policy whose content git history holds (none when
/// the history cannot be read, which is logged).
pub fn hidden_in_history(project: &ProjectSettings) -> Vec<String> {
    let hidden: Vec<&Path> = project
        .resolved
        .with_access(Access::Hidden)
        .map(|e| e.resolved_rel.as_path())
        .collect();
    match crate::state::hidden_paths_in_history(project.workspace.root(), &hidden) {
        Ok(found) => found.into_iter().collect(),
        Err(e) => {
            tracing::warn!("cannot read git history to look for hidden paths: {e}");
            Vec::new()
        }
    }
}
