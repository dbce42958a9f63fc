//! The Docker run environment in the CLI: which pinned image to use, and
//! the container options of `exec --confine docker`, sessions and builds.

use std::path::Path;

use vs_docker::{DockerOptions, EnvAllowList};
use vs_runtime::container::{self, ImageLock};

use crate::project::ProjectPolicy;

/// A run id for `vibesys exec`: `VIBESYS_RUN_ID`, else `exec-<pid>-<ns>`.
pub fn run_id() -> String {
    match std::env::var("VIBESYS_RUN_ID") {
        Ok(v) if !v.is_empty() => v,
        _ => fresh_run_id("exec"),
    }
}

/// A run id no other process uses: `<prefix>-<pid>-<ns>`.
pub fn fresh_run_id(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// What every Docker start shares: the pinned image (`image`, else
/// `VIBESYS_DOCKER_IMAGE`, else the editor image) from the project's lock,
/// this executable as the attach helper, and the command server.
pub fn base_options(
    image: Option<&str>,
    project_dir: Option<&Path>,
    run_id: String,
) -> anyhow::Result<DockerOptions> {
    let pin = ImageLock::find(project_dir)?.pin_chosen(image)?;
    Ok(container::base_options(
        pin,
        run_id,
        &crate::project::helper_exe()?,
    )?)
}

/// The Docker options for a project (without starting anything).
pub fn options_for(
    project: &ProjectPolicy,
    image: Option<&str>,
    project_dir: Option<&Path>,
) -> anyhow::Result<DockerOptions> {
    let mut options = base_options(image, project_dir, run_id())?;
    options.network = project.network;
    options.chdir = project.chdir_in(crate::project::cwd().as_deref());
    if let Some(extra) = std::env::var_os("VIBESYS_DOCKER_ENV") {
        let extra = extra.to_string_lossy().into_owned();
        options.env = EnvAllowList::default().with(extra.split(',').map(str::trim));
    }
    Ok(options)
}
