//! `vibesys exec`'s operation: one command run under a project's policy,
//! confined by the mechanism resolved (or, when confinement is disabled
//! and not required, unconfined in the directory a confined one starts
//! in), behind the egress door when the policy has an allow-list.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use vs_docker::DockerOptions;
use vs_sandbox::egress::ProxyError;
use vs_sandbox::exit_codes::exit_code;
use vs_sandbox::{Resolved, SandboxError, select};

use crate::settings::ProjectSettings;

/// Why the command did not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The command line is empty.
    #[error("the command is empty")]
    EmptyCommand,
    /// An egress allow-list without confinement to hold the command to it.
    #[error(
        "an egress allow-list (allow_hosts, --allow-host) needs confinement, which is disabled: nothing would hold the command to it"
    )]
    AllowListUnconfined,
    /// The container's options could not be made (the caller's message).
    #[error("{0}")]
    ContainerOptions(String),
    /// The unconfined command could not be started.
    #[error("cannot run {program:?}")]
    Start {
        /// The program.
        program: OsString,
        /// The cause.
        source: std::io::Error,
    },
    /// The confinement could not be set up, or failed.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The egress door could not be opened.
    #[error(transparent)]
    Egress(#[from] ProxyError),
}

/// One command and where it runs.
pub struct ExecLaunch<'a> {
    /// The project's settings.
    pub project: &'a ProjectSettings,
    /// The command and its arguments.
    pub command: &'a [OsString],
    /// The command's environment (`None`: the caller's whole one).
    pub env: Option<&'a [(OsString, OsString)]>,
    /// The caller's environment (the host resources depend on it).
    pub host_env: &'a [(OsString, OsString)],
    /// The current directory, when it can be read.
    pub cwd: Option<&'a Path>,
    /// The confinement helper (this executable).
    pub helper: PathBuf,
}

impl ExecLaunch<'_> {
    /// Runs the command as `resolved` says (`docker_options` gives the
    /// container's options when it is a container) and returns its exit
    /// code (128+N when killed by signal N).
    pub fn run(
        &self,
        resolved: Resolved,
        docker_options: &mut dyn FnMut() -> Result<DockerOptions, String>,
    ) -> Result<i32, ExecError> {
        let program = self.command.first().ok_or(ExecError::EmptyCommand)?;
        let project = self.project;
        let mut request =
            project.sandbox_request(program, self.host_env, self.cwd, self.helper.clone());
        // The allow-list's one door: lives as long as the command.
        let proxy = project.start_egress(resolved.mode)?;
        request.egress = project.egress_door(proxy.as_ref());
        if resolved.needs_container() {
            let options = docker_options().map_err(ExecError::ContainerOptions)?;
            request.docker = Some(Box::new(options));
        }
        let Some(sandbox) = select(request, resolved.mode, resolved.enforcement)? else {
            if proxy.is_some() {
                return Err(ExecError::AllowListUnconfined);
            }
            return self.run_unconfined();
        };
        let code = sandbox.run(self.command, self.env)?;
        drop(proxy);
        Ok(code)
    }

    /// The command without confinement (disabled and not required; logged
    /// loudly by the selector), in the same directory a confined one
    /// starts.
    fn run_unconfined(&self) -> Result<i32, ExecError> {
        let (program, rest) = self.command.split_first().ok_or(ExecError::EmptyCommand)?;
        let status = std::process::Command::new(program)
            .args(rest)
            .current_dir(
                self.project
                    .chdir_in(self.cwd)
                    .unwrap_or_else(|| self.project.workspace.root().to_path_buf()),
            )
            .status()
            .map_err(|source| ExecError::Start {
                program: program.clone(),
                source,
            })?;
        Ok(exit_code(status))
    }
}
