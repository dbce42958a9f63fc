//! The Docker options of the containers the commands start (`exec
//! --confine docker`, sessions, builds): the pinned image, the project's
//! network and working directory, the caller's variables, and the run id
//! a container is named by.

use std::path::Path;

use vs_docker::{DockerOptions, EnvAllowList};

use crate::container::{self, ContainerError, ImageLock, STATIC_BESIDE};
use crate::settings::ProjectSettings;

/// A run id for `vibesys exec`: `VIBESYS_RUN_ID`, else `exec-<pid>-<ns>`.
pub fn exec_run_id() -> String {
    match std::env::var("VIBESYS_RUN_ID") {
        Ok(v) if !v.is_empty() => v,
        _ => container::fresh_container_name("exec"),
    }
}

/// What every Docker start shares: the pinned image (`image`, else
/// `VIBESYS_DOCKER_IMAGE`, else the editor image) from the lock found for
/// `project_dir`, `helper` (this executable) as the attach helper, and the
/// command server.
pub fn pinned_base_options(
    image: Option<&str>,
    project_dir: Option<&Path>,
    run_id: String,
    helper: &Path,
) -> Result<DockerOptions, ContainerError> {
    let pin = ImageLock::find(project_dir)?.pin_chosen(image)?;
    container::base_options(pin, run_id, helper)
}

/// The Docker options for a project (without starting anything): its
/// network, `cwd` when inside its workspace, and the variables
/// `VIBESYS_DOCKER_ENV` names (comma-separated) when set.
pub fn project_options(
    project: &ProjectSettings,
    image: Option<&str>,
    project_dir: Option<&Path>,
    cwd: Option<&Path>,
    helper: &Path,
) -> Result<DockerOptions, ContainerError> {
    let mut options = pinned_base_options(image, project_dir, exec_run_id(), helper)?;
    options.network = project.network;
    options.chdir = project.chdir_in(cwd);
    if let Some(extra) = std::env::var_os("VIBESYS_DOCKER_ENV") {
        let extra = extra.to_string_lossy().into_owned();
        options.env = EnvAllowList::default().with(extra.split(',').map(str::trim));
    }
    Ok(options)
}

/// How framework commands would reach a run's container started with
/// `exe` as its helper, as one phrase for `vibesys doctor`.
pub fn command_path_summary(exe: &Path) -> String {
    match container::command_server(exe) {
        Ok(Some(p)) => format!(
            "framework commands go through the command server ({})",
            p.display()
        ),
        Ok(None) => format!(
            "framework commands go through the Engine's exec API (this vibesys is dynamically linked; a static one, {STATIC_BESIDE} beside it from scripts/build-static.sh --beside DIR, or VIBESYS_COMMAND_SERVER, serves them over 10x faster)"
        ),
        Err(e) => crate::error_chain::one_line(&e),
    }
}
