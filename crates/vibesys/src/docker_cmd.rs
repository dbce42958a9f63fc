//! The Docker run environment in the CLI: which pinned image to use, and
//! the container options of `exec --confine docker`, sessions and builds.

use std::path::Path;

use vs_docker::{DockerOptions, EnvAllowList, ImagePin};
use vs_image::Lock;
use vs_runtime::container::{self, ImageLock};

use crate::project::ProjectPolicy;

pub use vs_runtime::container::{STATIC_BESIDE, find_lock};

/// The pin of image `name` in an already loaded lock.
pub fn pin_from_lock(lock: &Lock, name: &str, lock_path: &Path) -> anyhow::Result<ImagePin> {
    Ok(ImagePin::from_locked(name, lock.image(name, lock_path)?))
}

/// A run id for `vibesys exec`: `VIBESYS_RUN_ID`, else `exec-<pid>-<ns>`.
pub fn run_id() -> String {
    match std::env::var("VIBESYS_RUN_ID") {
        Ok(v) if !v.is_empty() => v,
        _ => fresh_run_id("exec"),
    }
}

/// A run id no other process uses: `<prefix>-<pid>-<ns>`.
pub fn fresh_run_id(prefix: &str) -> String {
    container::fresh_container_name(prefix)
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

/// How framework commands would reach a run's container, as one phrase
/// for `vibesys doctor`.
pub fn execute_summary() -> String {
    let exe = match crate::project::helper_exe() {
        Ok(e) => e,
        Err(e) => return format!("{e:#}"),
    };
    match container::command_server(&exe) {
        Ok(Some(p)) => format!(
            "framework commands go through the command server ({})",
            p.display()
        ),
        Ok(None) => format!(
            "framework commands go through the Engine's exec API (this vibesys is dynamically linked; a static one, {STATIC_BESIDE} beside it from scripts/build-static.sh --beside DIR, or VIBESYS_COMMAND_SERVER, serves them over 10x faster)"
        ),
        Err(e) => format!("{e:#}"),
    }
}
