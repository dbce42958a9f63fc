//! The Docker run environment in the CLI: which pinned image to use, and
//! the container options of `exec --confine docker`, sessions and builds.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use vs_docker::{DockerOptions, EnvAllowList, ImagePin};
use vs_image::Lock;

use crate::project::ProjectPolicy;

/// The image `exec --confine docker` uses without `--image` (and without
/// `VIBESYS_DOCKER_IMAGE`).
pub const DEFAULT_IMAGE: &str = "vibesys-editor";

/// Names the lock file: `VIBESYS_IMAGES_LOCK`, else `images/images.lock`
/// in the current directory, else in the project.
pub fn find_lock(project: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("VIBESYS_IMAGES_LOCK").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let here = PathBuf::from("images/images.lock");
    if here.is_file() {
        return Ok(here);
    }
    if let Some(p) = project {
        let there = p.join("images/images.lock");
        if there.is_file() {
            return Ok(there);
        }
    }
    bail!(
        "no images.lock found (looked at VIBESYS_IMAGES_LOCK, ./images/images.lock{}); pin the image with `vibesys image pin` or set VIBESYS_IMAGES_LOCK",
        project
            .map(|p| format!(", {}/images/images.lock", p.display()))
            .unwrap_or_default()
    )
}

/// The pin of `reference`: a lock name (`vibesys-editor`), `name:tag`, or
/// a digest that must be an image ID pinned in the lock. An unpinned
/// digest is refused, naming it and what the lock pins.
pub fn pin_for(reference: &str, lock_path: &Path) -> anyhow::Result<ImagePin> {
    let lock = Lock::load(lock_path)?;
    if reference.starts_with("sha256:") {
        for (name, img) in &lock.images {
            let matches = img.config_digest.to_string() == reference
                || img
                    .manifest_digest
                    .as_ref()
                    .is_some_and(|m| m.to_string() == reference);
            if matches {
                return Ok(to_pin(name, img));
            }
        }
        let pinned: Vec<String> = lock
            .images
            .iter()
            .map(|(n, i)| format!("{n} at {}", i.config_digest))
            .collect();
        bail!(
            "image {reference} is not pinned in {}: the lock pins {}; refusing an unpinned image",
            lock_path.display(),
            if pinned.is_empty() {
                "nothing".to_owned()
            } else {
                pinned.join(", ")
            }
        );
    }
    let (name, tag) = match reference.rsplit_once(':') {
        Some((n, t)) if !n.contains('/') || !t.contains('/') => (n, Some(t)),
        _ => (reference, None),
    };
    let img = lock.image(name, lock_path)?;
    if let Some(t) = tag
        && t != img.tag
    {
        bail!(
            "image {reference} is not pinned: {} pins {name}:{} at {}",
            lock_path.display(),
            img.tag,
            img.config_digest
        );
    }
    Ok(to_pin(name, img))
}

/// The pin of image `name` in an already loaded lock.
pub fn pin_from_lock(lock: &Lock, name: &str, lock_path: &Path) -> anyhow::Result<ImagePin> {
    Ok(to_pin(name, lock.image(name, lock_path)?))
}

fn to_pin(name: &str, img: &vs_image::LockedImage) -> ImagePin {
    ImagePin::from_locked(name, img)
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
    let lock_path = find_lock(project_dir)?;
    let env_image = std::env::var("VIBESYS_DOCKER_IMAGE")
        .ok()
        .filter(|v| !v.is_empty());
    let reference = image.or(env_image.as_deref()).unwrap_or(DEFAULT_IMAGE);
    let pin = pin_for(reference, &lock_path)?;
    let exe = crate::project::helper_exe()?;
    let mut options = DockerOptions::new(pin, run_id, &exe);
    options.command_server = command_server(&exe)?;
    Ok(options)
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

/// The name of the static vibesys found beside a dynamically linked one
/// (`scripts/build-static.sh --beside DIR` puts it there).
pub const STATIC_BESIDE: &str = "vibesys-static";

/// The static vibesys a run's container runs as its command server:
/// `VIBESYS_COMMAND_SERVER` when set (it must be a static executable),
/// else this executable when it is static, else [`STATIC_BESIDE`] in this
/// executable's directory when it is there (it must then be static),
/// else none: `execute` then goes through the Engine's exec API, which is
/// slower, and the slurm run environment refuses to start.
fn command_server(exe: &Path) -> anyhow::Result<Option<PathBuf>> {
    if let Some(p) = std::env::var_os("VIBESYS_COMMAND_SERVER").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        vs_docker::check_static_executable(&p)
            .context("VIBESYS_COMMAND_SERVER names no usable command server")?;
        return Ok(Some(p));
    }
    let own = match vs_docker::check_static_executable(exe) {
        Ok(()) => return Ok(Some(exe.to_path_buf())),
        Err(e) => e,
    };
    let beside = exe.with_file_name(STATIC_BESIDE);
    if beside.symlink_metadata().is_ok() {
        vs_docker::check_static_executable(&beside).with_context(|| {
            format!(
                "{} (beside this vibesys) is no usable command server; rebuild it with scripts/build-static.sh --beside {}, or remove it",
                beside.display(),
                exe.parent().unwrap_or(Path::new(".")).display()
            )
        })?;
        return Ok(Some(beside));
    }
    tracing::info!(
        "no command server: {own}, and no {STATIC_BESIDE} beside it; framework commands in Docker go through the Engine's exec API (slower)"
    );
    Ok(None)
}

/// How framework commands would reach a run's container, as one phrase
/// for `vibesys doctor`.
pub fn execute_summary() -> String {
    let exe = match crate::project::helper_exe() {
        Ok(e) => e,
        Err(e) => return format!("{e:#}"),
    };
    match command_server(&exe) {
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
