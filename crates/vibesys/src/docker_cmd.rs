//! The Docker run environment in the CLI: this executable as the helper
//! of the container options vs-runtime assembles
//! (`vs_runtime::container_options`).

use std::path::Path;

use vs_docker::DockerOptions;
use vs_runtime::container_options::project_options;

use crate::project::{ProjectPolicy, cwd, helper_exe};

pub use vs_runtime::container_options::exec_run_id as run_id;

/// The Docker options for a project (without starting anything).
pub fn options_for(
    project: &ProjectPolicy,
    image: Option<&str>,
    project_dir: Option<&Path>,
) -> anyhow::Result<DockerOptions> {
    let helper = helper_exe()?;
    let cwd = cwd();
    Ok(project_options(
        project,
        image,
        project_dir,
        cwd.as_deref(),
        &helper,
    )?)
}
