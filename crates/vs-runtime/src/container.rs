//! The containers vibesys starts: which pinned image (`images.lock`,
//! located once and loaded once per caller), what every Docker start
//! shares (this executable as the attach helper, the command server),
//! and the one list of the agent's variables a container receives.

use std::path::{Path, PathBuf};

use vs_docker::{DockerOptions, EnvAllowList, ImagePin, StaticElfError};
use vs_image::Lock;

/// The image a container uses without `--image` (and without
/// `VIBESYS_DOCKER_IMAGE`).
pub const DEFAULT_IMAGE: &str = "vibesys-editor";

/// The name of the static vibesys found beside a dynamically linked one
/// (`scripts/build-static.sh --beside DIR` puts it there).
pub const STATIC_BESIDE: &str = "vibesys-static";

/// Variables of the host that never reach a container (its own are
/// its image's).
const HOST_ONLY: &[&str] = &["PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR"];

/// Why a container's image or options cannot be chosen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContainerError {
    /// No lock file where one is looked for.
    #[error(
        "no images.lock found (looked at VIBESYS_IMAGES_LOCK, ./images/images.lock{also}); pin the image with `vibesys image pin` or set VIBESYS_IMAGES_LOCK"
    )]
    NoLock {
        /// `, PROJECT/images/images.lock` when a project was searched.
        also: String,
    },
    /// The lock cannot be read, or does not pin the name.
    #[error(transparent)]
    Lock(#[from] vs_image::Error),
    /// A digest the lock does not pin.
    #[error(
        "image {reference} is not pinned in {}: the lock pins {pinned}; refusing an unpinned image",
        lock.display()
    )]
    UnpinnedDigest {
        /// The digest asked for.
        reference: String,
        /// The lock file.
        lock: PathBuf,
        /// What the lock pins, named.
        pinned: String,
    },
    /// A tag other than the pinned one.
    #[error("image {reference} is not pinned: {} pins {name}:{tag} at {digest}", lock.display())]
    UnpinnedTag {
        /// The reference asked for.
        reference: String,
        /// The lock file.
        lock: PathBuf,
        /// The image's name.
        name: String,
        /// The pinned tag.
        tag: String,
        /// The pinned config digest.
        digest: String,
    },
    /// `VIBESYS_COMMAND_SERVER` names no static executable.
    #[error("VIBESYS_COMMAND_SERVER names no usable command server")]
    CommandServerEnv(#[source] StaticElfError),
    /// The static vibesys beside this one is unusable.
    #[error(
        "{} (beside this vibesys) is no usable command server; rebuild it with scripts/build-static.sh --beside {}, or remove it",
        path.display(),
        dir.display()
    )]
    CommandServerBeside {
        /// The file beside this executable.
        path: PathBuf,
        /// This executable's directory.
        dir: PathBuf,
        /// Why it is unusable.
        #[source]
        source: StaticElfError,
    },
}

/// Names the lock file: `VIBESYS_IMAGES_LOCK`, else `images/images.lock`
/// in the current directory, else in the project.
pub fn find_lock(project: Option<&Path>) -> Result<PathBuf, ContainerError> {
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
    Err(ContainerError::NoLock {
        also: project
            .map(|p| format!(", {}/images/images.lock", p.display()))
            .unwrap_or_default(),
    })
}

/// `images.lock`, located and loaded once.
#[derive(Debug)]
pub struct ImageLock {
    path: PathBuf,
    lock: Lock,
}

impl ImageLock {
    /// Locates ([`find_lock`]) and loads the lock.
    pub fn find(project: Option<&Path>) -> Result<Self, ContainerError> {
        Self::load(find_lock(project)?)
    }

    /// Loads the lock at `path`.
    pub fn load(path: PathBuf) -> Result<Self, ContainerError> {
        let lock = Lock::load(&path)?;
        Ok(Self { path, lock })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pin of `reference`: a lock name (`vibesys-editor`),
    /// `name:tag`, or a digest that must be an image ID pinned in the
    /// lock. An unpinned digest is refused, naming it and what the lock
    /// pins.
    pub fn pin(&self, reference: &str) -> Result<ImagePin, ContainerError> {
        let lock = &self.lock;
        if reference.starts_with("sha256:") {
            for (name, img) in &lock.images {
                let matches = img.config_digest.to_string() == reference
                    || img
                        .manifest_digest
                        .as_ref()
                        .is_some_and(|m| m.to_string() == reference);
                if matches {
                    return Ok(ImagePin::from_locked(name, img));
                }
            }
            let pinned: Vec<String> = lock
                .images
                .iter()
                .map(|(n, i)| format!("{n} at {}", i.config_digest))
                .collect();
            return Err(ContainerError::UnpinnedDigest {
                reference: reference.to_owned(),
                lock: self.path.clone(),
                pinned: if pinned.is_empty() {
                    "nothing".to_owned()
                } else {
                    pinned.join(", ")
                },
            });
        }
        let (name, tag) = match reference.rsplit_once(':') {
            Some((n, t)) if !n.contains('/') || !t.contains('/') => (n, Some(t)),
            _ => (reference, None),
        };
        let img = lock.image(name, &self.path)?;
        if let Some(t) = tag
            && t != img.tag
        {
            return Err(ContainerError::UnpinnedTag {
                reference: reference.to_owned(),
                lock: self.path.clone(),
                name: name.to_owned(),
                tag: img.tag.clone(),
                digest: img.config_digest.to_string(),
            });
        }
        Ok(ImagePin::from_locked(name, img))
    }

    /// The pin of the image a container uses: `image`, else
    /// `VIBESYS_DOCKER_IMAGE`, else [`DEFAULT_IMAGE`].
    pub fn pin_chosen(&self, image: Option<&str>) -> Result<ImagePin, ContainerError> {
        let env_image = std::env::var("VIBESYS_DOCKER_IMAGE")
            .ok()
            .filter(|v| !v.is_empty());
        self.pin(image.or(env_image.as_deref()).unwrap_or(DEFAULT_IMAGE))
    }
}

/// A container name no other process uses: `<prefix>-<pid>-<ns>`.
pub fn fresh_container_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{nanos}", std::process::id())
}

/// What every Docker start shares: the image `pin`, `helper` (this
/// executable) as the attach helper, and the command server
/// ([`command_server`]).
pub fn base_options(
    pin: ImagePin,
    run_id: String,
    helper: &Path,
) -> Result<DockerOptions, ContainerError> {
    let mut options = DockerOptions::new(pin, run_id, helper);
    options.command_server = command_server(helper)?;
    Ok(options)
}

/// The static vibesys a container runs as its command server:
/// `VIBESYS_COMMAND_SERVER` when set (it must be a static executable),
/// else `exe` when it is static, else [`STATIC_BESIDE`] in `exe`'s
/// directory when it is there (it must then be static), else none:
/// `execute` then goes through the Engine's exec API, which is slower,
/// and the slurm run environment refuses to start.
pub fn command_server(exe: &Path) -> Result<Option<PathBuf>, ContainerError> {
    use vs_docker::check_static_executable;
    if let Some(p) = std::env::var_os("VIBESYS_COMMAND_SERVER").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        check_static_executable(&p).map_err(ContainerError::CommandServerEnv)?;
        return Ok(Some(p));
    }
    let own = match check_static_executable(exe) {
        Ok(()) => return Ok(Some(exe.to_path_buf())),
        Err(e) => e,
    };
    let beside = exe.with_file_name(STATIC_BESIDE);
    if beside.symlink_metadata().is_ok() {
        check_static_executable(&beside).map_err(|source| ContainerError::CommandServerBeside {
            path: beside.clone(),
            dir: exe.parent().unwrap_or(Path::new(".")).to_path_buf(),
            source,
        })?;
        return Ok(Some(beside));
    }
    tracing::info!(
        "no command server: {own}, and no {STATIC_BESIDE} beside it; framework commands in Docker go through the Engine's exec API (slower)"
    );
    Ok(None)
}

/// The variables a container receives of `names` (the agent's
/// environment): every one but the host's own ([`HOST_ONLY`]).
pub fn agent_env_list<'a>(names: impl IntoIterator<Item = &'a str>) -> EnvAllowList {
    EnvAllowList::default().with(
        names
            .into_iter()
            .filter(|k| !HOST_ONLY.contains(k))
            .map(str::to_owned)
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {

    use super::*;

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn lock() -> (tempfile::TempDir, ImageLock) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("images.lock");
        let text = format!(
            "version = 1\n\n[images.vibesys-editor]\ntag = \"latest\"\nmanifest_digest = \"{}\"\nconfig_digest = \"{}\"\ndiff_ids = []\n",
            digest('a'),
            digest('b')
        );
        std::fs::write(&path, text).unwrap();
        let lock = ImageLock::load(path).unwrap();
        (dir, lock)
    }

    #[test]
    fn pins_by_name_tag_and_pinned_digest() {
        let (_dir, lock) = lock();
        for reference in [
            "vibesys-editor".to_owned(),
            "vibesys-editor:latest".to_owned(),
            digest('a'),
            digest('b'),
        ] {
            let pin = lock.pin(&reference).unwrap();
            assert_eq!(pin.name, "vibesys-editor");
            assert_eq!(pin.config_digest.to_string(), digest('b'));
        }
    }

    #[test]
    fn refuses_what_the_lock_does_not_pin() {
        let (_dir, lock) = lock();
        let e = lock.pin("vibesys-editor:other").unwrap_err().to_string();
        assert!(e.contains("pins vibesys-editor:latest at"), "{e}");
        let e = lock.pin(&digest('c')).unwrap_err().to_string();
        assert!(e.contains("refusing an unpinned image"), "{e}");
        assert!(
            e.contains(&format!("vibesys-editor at {}", digest('b'))),
            "{e}"
        );
        assert!(lock.pin("unknown").is_err());
    }
}
