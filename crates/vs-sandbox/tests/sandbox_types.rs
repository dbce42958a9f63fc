//! Every type whose name contains `Sandbox` must implement the
//! confinement trait (DESIGN.md section 1). This scans the workspace's
//! sources, so a new `FooSandbox` without `impl Confinement for
//! FooSandbox` fails here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Type names declared with `struct` or `enum` whose name contains `Sandbox`.
fn sandbox_types(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for line in source.lines() {
        let line = line.trim_start();
        let rest = [
            "pub struct ",
            "struct ",
            "pub enum ",
            "enum ",
            "pub(crate) struct ",
        ]
        .iter()
        .find_map(|kw| line.strip_prefix(kw));
        if let Some(rest) = rest {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if name.contains("Sandbox") && !name.ends_with("Error") && !name.ends_with("Options") {
                names.push(name);
            }
        }
    }
    names
}

#[test]
fn every_sandbox_type_implements_confinement() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut files = Vec::new();
    for krate in std::fs::read_dir(crates).unwrap() {
        let src = krate.unwrap().path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files);
        }
    }
    let all: String = files
        .iter()
        .map(|f| std::fs::read_to_string(f).unwrap())
        .collect::<Vec<_>>()
        .join("\n");
    let names = sandbox_types(&all);
    assert!(
        names.contains(&"HostSandbox".to_owned()),
        "scanner found {names:?}"
    );
    for name in names {
        assert!(
            all.contains(&format!("impl Confinement for {name} "))
                || all.contains(&format!("impl Confinement for {name}{{")),
            "{name} is named like a sandbox but does not implement vs_sandbox::Confinement"
        );
    }
}

#[test]
fn the_scanner_catches_a_missing_impl() {
    let names = sandbox_types(
        "pub struct FakeSandbox;\nstruct Other;\npub enum SandboxUnavailableError {}\n",
    );
    assert_eq!(names, vec!["FakeSandbox".to_owned()]);
}
