//! Shared by the fuzz targets: a private scratch directory per fuzzing
//! process, and the invariants every accepted policy must hold.
#![allow(dead_code)]

use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;

use vs_sandbox::{Access, ProjectPathPolicy};

/// A directory of this process's own in `/dev/shm` (memory-backed, so a
/// file-reading target stays fast), emptied at first use.
pub fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        // Directories of earlier fuzzing processes that have ended.
        if let Ok(list) = std::fs::read_dir(&base) {
            for entry in list.flatten() {
                let name = entry.file_name();
                let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("vibesys-fuzz-")) else {
                    continue;
                };
                if !Path::new("/proc").join(pid).exists() {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        let dir = base.join(format!("vibesys-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

/// A fresh, empty directory named `name` inside the scratch directory.
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = scratch().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("fresh directory");
    dir
}

/// What the policy rules promise for every policy the parser accepts:
/// relative paths of plain components only (nothing can name a place
/// outside the workspace), no duplicate, and no overlap except a hidden
/// path below a read-only one.
pub fn check_policy(policy: &ProjectPathPolicy) {
    let entries: Vec<(&Path, Access)> = policy.entries().map(|(p, a)| (p.as_path(), a)).collect();
    for (path, _) in &entries {
        assert!(!path.as_os_str().is_empty(), "an empty policy path");
        assert!(
            path.components().all(|c| matches!(c, Component::Normal(_))),
            "a policy path that is not plain relative components: {path:?}"
        );
        let text = path.to_str().expect("policy paths are UTF-8");
        assert!(!text.contains(['\0', '\n', '\r']), "control character in {text:?}");
    }
    for (i, (a, access_a)) in entries.iter().enumerate() {
        for (b, access_b) in &entries[i + 1..] {
            assert_ne!(a, b, "a duplicate policy path");
            if a.starts_with(b) {
                assert!(
                    *access_a == Access::Hidden && *access_b == Access::ReadOnly,
                    "{a:?} overlaps {b:?}"
                );
            }
            if b.starts_with(a) {
                assert!(
                    *access_b == Access::Hidden && *access_a == Access::ReadOnly,
                    "{b:?} overlaps {a:?}"
                );
            }
        }
    }
}
