//! The Docker Engine's images around a test that loads images it did not
//! name itself (the real `vibesys-editor`, `vibesys-agent`, ... or a fixed
//! test name): whatever the test loads, every image that was there before
//! stays, by ID and by tag. A developer's workstation keeps the images it
//! uses when the suite runs.
//!
//! Take the snapshot before loading; on drop (also when the test panics)
//! an image the test loaded is removed only when the Engine did not hold
//! it before, and a tag that pointed at another image before points at it
//! again.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

/// The Engine's images: every ID, and each `repository:tag` with its ID.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// Every image ID (`sha256:...`), tagged or not.
    pub ids: BTreeSet<String>,
    /// Each tag (`repository:tag`) and the ID it names.
    pub tags: BTreeMap<String, String>,
}

impl Listing {
    /// `docker image ls --all --no-trunc` now.
    pub fn now() -> Self {
        let out = Command::new("docker")
            .args([
                "image",
                "ls",
                "--all",
                "--no-trunc",
                "--format",
                "{{.ID}}\t{{.Repository}}:{{.Tag}}",
            ])
            .output()
            .expect("run docker image ls");
        assert!(
            out.status.success(),
            "docker image ls failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut listing = Self::default();
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Some((id, tag)) = line.split_once('\t') else {
                continue;
            };
            listing.ids.insert(id.to_owned());
            if !tag.contains("<none>") {
                listing.tags.insert(tag.to_owned(), id.to_owned());
            }
        }
        listing
    }
}

/// The snapshot taken before a test loads images; restores on drop.
#[derive(Debug)]
pub struct EngineImages {
    before: Listing,
    /// What the test loads: `repository:tag` references and image IDs.
    loaded: Vec<String>,
}

impl EngineImages {
    /// Takes the snapshot before the test loads `references` (tags such as
    /// `vibesys-editor:latest`, or image IDs).
    pub fn before_loading(references: impl IntoIterator<Item = String>) -> Self {
        Self {
            before: Listing::now(),
            loaded: references.into_iter().collect(),
        }
    }

    /// Whether the Engine held the image `id` before the test loaded.
    pub fn held_before(&self, id: &str) -> bool {
        self.before.ids.contains(id)
    }

    /// Removes what the test added and points the tags it moved back.
    pub fn restore(&self) {
        let now = Listing::now();
        for r in &self.loaded {
            let id = if r.starts_with("sha256:") {
                Some(r.clone())
            } else {
                now.tags.get(r).cloned()
            };
            if let Some(id) = id
                && now.ids.contains(&id)
                && !self.before.ids.contains(&id)
            {
                let _ = Command::new("docker").args(["rmi", "-f", &id]).output();
            }
        }
        for r in &self.loaded {
            if let Some(old) = self.before.tags.get(r)
                && now.tags.get(r) != Some(old)
            {
                let _ = Command::new("docker").args(["tag", old, r]).output();
            }
        }
    }
}

impl Drop for EngineImages {
    fn drop(&mut self) {
        self.restore();
    }
}
