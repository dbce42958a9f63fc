//! Images against a lock file: [`pin_images`] verifies images and records
//! them, [`verify_images`] checks images (or every archive the lock
//! records) against it, [`check_archive`] checks one archive before it is
//! loaded. Each returns what it did as records (`image pin --json` and
//! `image verify --json` print them) with a human rendering.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::digest::Digest;
use crate::error::Error;
use crate::lock::{Lock, relative_to};
use crate::read::{InspectReport, inspect};
use vs_pin::LockedImage;

/// Why pinning or checking against a lock failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PinningError {
    /// Reading, verifying or pinning an image, or the lock, failed.
    #[error(transparent)]
    Image(#[from] Error),
    /// An image given to [`verify_images`] (or recorded in the lock) does
    /// not verify.
    #[error("verifying {path}")]
    Verifying {
        /// The image.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: Box<Error>,
    },
    /// An archive to load cannot be read.
    #[error("cannot read image archive {path:?}")]
    ReadArchive {
        /// The archive.
        path: PathBuf,
        /// Why it cannot.
        #[source]
        source: Box<Error>,
    },
    /// An archive to load names no image to find its pin by.
    #[error("cannot read image archive {path:?}: it names no image")]
    Unnamed {
        /// The archive.
        path: PathBuf,
    },
}

/// One image pinned or verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PinRecord {
    /// The image path as given (or as the lock records it, joined to the
    /// lock's directory).
    pub path: PathBuf,
    /// The image name.
    pub name: String,
    /// `oci`, `archive`, `oci-archive` or `docker-archive`.
    pub format: String,
    /// Image manifest digest (absent in a docker-archive).
    pub manifest_digest: Option<Digest>,
    /// Image config digest.
    pub config_digest: Digest,
    /// sha256 of the archive file (archives).
    pub archive_digest: Option<Digest>,
}

impl From<&InspectReport> for PinRecord {
    fn from(r: &InspectReport) -> Self {
        Self {
            path: r.path.clone(),
            name: r.name.clone().unwrap_or_default(),
            format: r.format.clone(),
            manifest_digest: r.manifest_digest.clone(),
            config_digest: r.config_digest.clone(),
            archive_digest: r.archive_digest.clone(),
        }
    }
}

/// What [`pin_images`] recorded in which lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinReport {
    /// The lock file written.
    pub lock: PathBuf,
    /// The images pinned, in the order given.
    pub records: Vec<PinRecord>,
}

/// What [`verify_images`] checked against which lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// The lock file.
    pub lock: PathBuf,
    /// How many images the lock pins.
    pub images_pinned: usize,
    /// The images that matched their pins (all that were checked).
    pub records: Vec<PinRecord>,
}

/// The directory lock paths are relative to.
fn lock_dir(lock: &Path) -> PathBuf {
    match lock.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Verifies each image in `paths` (archive or OCI layout) and records its
/// digests (and, for archives, its file digest and path relative to the
/// lock) in the lock at `lock_path`, created if missing and written
/// atomically once all are pinned.
pub fn pin_images(lock_path: &Path, paths: &[PathBuf]) -> Result<PinReport, PinningError> {
    let mut lock = Lock::load_or_default(lock_path)?;
    let dir = lock_dir(lock_path);
    let mut records = Vec::new();
    for p in paths {
        let r = inspect(p, true)?;
        let rel = if p.is_dir() {
            None
        } else {
            Some(relative_to(p, &dir)?)
        };
        lock.pin(&r, rel)?;
        records.push(PinRecord::from(&r));
    }
    lock.save(lock_path)?;
    Ok(PinReport {
        lock: lock_path.to_owned(),
        records,
    })
}

/// Verifies each image in `paths` (every blob re-hashed) and compares it
/// with its pin in the lock at `lock_path`; without paths, every archive
/// the lock records (relative to the lock's directory). Stops at the
/// first image that fails.
pub fn verify_images(lock_path: &Path, paths: &[PathBuf]) -> Result<VerifyReport, PinningError> {
    let lock = Lock::load(lock_path)?;
    let dir = lock_dir(lock_path);
    let recorded: Vec<PathBuf>;
    let paths = if paths.is_empty() {
        recorded = lock
            .images
            .values()
            .flat_map(|i| i.archives.values().map(|x| dir.join(&x.path)))
            .collect();
        &recorded
    } else {
        paths
    };
    let mut records = Vec::new();
    for p in paths {
        let r = inspect(p, true).map_err(|e| PinningError::Verifying {
            path: p.clone(),
            source: Box::new(e),
        })?;
        lock.check_report(&r, lock_path)?;
        records.push(PinRecord::from(&r));
    }
    Ok(VerifyReport {
        lock: lock_path.to_owned(),
        images_pinned: lock.images.len(),
        records,
    })
}

/// An archive whose own metadata matches its pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedArchive {
    /// The image name.
    pub name: String,
    /// The image tag (`latest` when the archive names none).
    pub tag: String,
    /// The image's lock entry.
    pub pinned: LockedImage,
}

/// Reads the archive at `path` (without re-hashing it) and checks its
/// digests against the lock at `lock_path`: the check before the archive
/// is loaded anywhere.
pub fn check_archive(path: &Path, lock_path: &Path) -> Result<CheckedArchive, PinningError> {
    let archive = inspect(path, false).map_err(|e| PinningError::ReadArchive {
        path: path.to_owned(),
        source: Box::new(e),
    })?;
    let lock = Lock::load(lock_path)?;
    lock.check_report(&archive, lock_path)?;
    // `check_report` refuses an image without a name.
    let name = archive.name.ok_or_else(|| PinningError::Unnamed {
        path: path.to_owned(),
    })?;
    Ok(CheckedArchive {
        pinned: lock.image(&name, lock_path)?.clone(),
        tag: archive.tag.unwrap_or_else(|| "latest".to_owned()),
        name,
    })
}

impl fmt::Display for PinReport {
    /// One line per image pinned.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.records {
            writeln!(
                f,
                "pinned {} ({}) {} in {}",
                r.name,
                r.format,
                r.config_digest,
                self.lock.display()
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for VerifyReport {
    /// One line per image that matched; a line saying so when the lock
    /// records no archive to check.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for r in &self.records {
            writeln!(
                f,
                "ok {} ({}) {} matches {}",
                r.name,
                r.format,
                r.path.display(),
                self.lock.display()
            )?;
        }
        if self.records.is_empty() {
            writeln!(
                f,
                "{}: {} images pinned, no archives recorded to check",
                self.lock.display(),
                self.images_pinned
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_paths_are_relative_to_the_lock_directory() {
        assert_eq!(lock_dir(Path::new("images.lock")), PathBuf::from("."));
        assert_eq!(lock_dir(Path::new("a/images.lock")), PathBuf::from("a"));
    }

    #[test]
    fn an_empty_lock_verifies_nothing_and_says_so() {
        let d = tempfile::tempdir().unwrap();
        let lock = d.path().join("images.lock");
        Lock::default().save(&lock).unwrap();
        let r = verify_images(&lock, &[]).unwrap();
        assert!(r.records.is_empty());
        assert_eq!(
            r.to_string(),
            format!(
                "{}: 0 images pinned, no archives recorded to check\n",
                lock.display()
            )
        );
    }
}
