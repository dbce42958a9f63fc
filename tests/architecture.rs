//! Architecture tests: rules of the workspace's shape that no compiler
//! checks. Each reads the workspace as it is (its sources, and the
//! dependency graph as `cargo metadata` reports it), so a change that breaks
//! a rule fails here, naming what broke it:
//! - every type named like a sandbox implements the confinement trait
//!   (DESIGN.md section 1);
//! - no library crate depends on a binary-only crate (`clap`, `anyhow`);
//! - every dependency arrow between our crates is one of the allowed ones,
//!   all pointing down the layers of `crates/README.md`;
//! - every test file of this package is a test target (cargo's discovery is
//!   off here, so an unlisted file would silently never run);
//! - no crate has a file-level cycle (two modules naming each other's
//!   items, directly or through others, a parent's names of its own child
//!   files' items included);
//! - every crate with macOS code is type-checked for macOS by
//!   `scripts/check-macos.sh` (CI has no macOS).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// The repository's root (this package is its `tests/`).
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `cargo metadata --no-deps` of the workspace: its members, each with its
/// manifest path and declared dependencies.
fn metadata() -> Value {
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .arg("--manifest-path")
        .arg(repo_root().join("Cargo.toml"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

/// One declared dependency of a workspace member.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Dep {
    from: String,
    to: String,
    /// `normal` ([dependencies]), `dev` or `build`.
    kind: String,
}

/// The workspace members' names and every dependency they declare.
fn members_and_deps(meta: &Value) -> (BTreeSet<String>, Vec<Dep>) {
    let packages = meta["packages"].as_array().expect("packages");
    let members: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_owned())
        .collect();
    let mut deps = Vec::new();
    for p in packages {
        for d in p["dependencies"].as_array().unwrap() {
            deps.push(Dep {
                from: p["name"].as_str().unwrap().to_owned(),
                to: d["name"].as_str().unwrap().to_owned(),
                kind: d["kind"].as_str().unwrap_or("normal").to_owned(),
            });
        }
    }
    (members, deps)
}

// ---------------------------------------------------------------------
// Naming: `*Sandbox` types implement the confinement trait.

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
    // The `src/` of every workspace member.
    let meta = metadata();
    let mut files = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let manifest = Path::new(p["manifest_path"].as_str().unwrap());
        let src = manifest.parent().unwrap().join("src");
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

// ---------------------------------------------------------------------
// Binary-only crates stay in the binary.

/// The members that are not libraries: the CLI binary and this package.
const NOT_LIBRARIES: &[&str] = &["vibesys", "vibesys-tests"];

/// Crates only the binary may use (libraries return typed errors and take
/// no command line).
const BINARY_ONLY: &[&str] = &["clap", "anyhow"];

/// Every [dependencies] entry of a library crate on a binary-only crate.
fn binary_only_deps(members: &BTreeSet<String>, deps: &[Dep]) -> Vec<String> {
    deps.iter()
        .filter(|d| members.contains(&d.from) && !NOT_LIBRARIES.contains(&d.from.as_str()))
        .filter(|d| d.kind == "normal" && BINARY_ONLY.contains(&d.to.as_str()))
        .map(|d| format!("{} depends on {} in [dependencies]", d.from, d.to))
        .collect()
}

#[test]
fn no_library_crate_depends_on_a_binary_only_crate() {
    let (members, deps) = members_and_deps(&metadata());
    for lib in [
        "vs-sandbox",
        "vs-docker",
        "vs-image",
        "vs-runtime",
        "vs-agent",
        "agentshim",
    ] {
        assert!(
            members.contains(lib),
            "{lib} is no workspace member: {members:?}"
        );
    }
    let bad = binary_only_deps(&members, &deps);
    assert!(
        bad.is_empty(),
        "only the binary (crates/vibesys) may use {BINARY_ONLY:?}; libraries return \
         typed errors (thiserror):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_binary_only_check_names_the_offender() {
    let members: BTreeSet<String> = ["vs-image", "vibesys"].map(String::from).into();
    let dep = |from: &str, to: &str, kind: &str| Dep {
        from: from.into(),
        to: to.into(),
        kind: kind.into(),
    };
    let deps = [
        dep("vs-image", "anyhow", "normal"),
        dep("vs-image", "clap", "dev"),
        dep("vibesys", "clap", "normal"),
    ];
    assert_eq!(
        binary_only_deps(&members, &deps),
        ["vs-image depends on anyhow in [dependencies]"]
    );
}

// ---------------------------------------------------------------------
// Layers: dependency arrows between our crates point down.

/// The layers of `crates/README.md`, from the bottom. A crate may depend
/// only on crates of lower layers.
const LAYERS: &[&[&str]] = &[
    &["agentshim", "vs-pin"],
    &["vs-image", "vs-sandbox"],
    &["vs-docker"],
    &["vs-agent"],
    // `vibesys run` launches agents: the runtime uses the agent layer.
    &["vs-runtime"],
    &["vibesys"],
    &["vibesys-tests"],
];

/// Every arrow allowed between workspace members (of any kind: normal,
/// dev, build). Adding an arrow is a design decision: add it here, and to
/// `crates/README.md`.
const ALLOWED: &[(&str, &str)] = &[
    ("vs-image", "vs-pin"),
    ("vs-sandbox", "vs-pin"),
    // The Docker backend implements vs-sandbox's container traits; it
    // checks the images it starts against their pins.
    ("vs-docker", "vs-sandbox"),
    ("vs-docker", "vs-pin"),
    ("vs-agent", "vs-sandbox"),
    ("vs-agent", "vs-image"),
    ("vs-agent", "agentshim"),
    ("vs-runtime", "vs-sandbox"),
    ("vs-runtime", "vs-docker"),
    ("vs-runtime", "vs-image"),
    ("vs-runtime", "vs-agent"),
    ("vs-runtime", "agentshim"),
    ("vibesys", "vs-sandbox"),
    ("vibesys", "vs-docker"),
    ("vibesys", "vs-image"),
    ("vibesys", "vs-runtime"),
    ("vibesys", "vs-agent"),
    ("vibesys", "agentshim"),
    ("vibesys-tests", "vs-sandbox"),
    ("vibesys-tests", "vs-docker"),
    ("vibesys-tests", "vs-image"),
    ("vibesys-tests", "vs-runtime"),
    ("vibesys-tests", "vs-agent"),
    ("vibesys-tests", "agentshim"),
];

fn layer_of(krate: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&krate))
}

/// Every arrow between workspace members that is not in [`ALLOWED`].
fn disallowed_arrows(members: &BTreeSet<String>, deps: &[Dep]) -> Vec<String> {
    deps.iter()
        .filter(|d| members.contains(&d.from) && members.contains(&d.to))
        .filter(|d| !ALLOWED.contains(&(d.from.as_str(), d.to.as_str())))
        .map(|d| {
            let how = match (layer_of(&d.from), layer_of(&d.to)) {
                (Some(f), Some(t)) if t >= f => "points up or across the layers",
                (None, _) | (_, None) => "involves a crate in no layer",
                _ => "is not in the allow-list",
            };
            format!("{} -> {} ({}) {how}", d.from, d.to, d.kind)
        })
        .collect()
}

#[test]
fn dependency_arrows_point_down_the_layers() {
    let (members, deps) = members_and_deps(&metadata());
    let unlayered: Vec<&String> = members.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(
        unlayered.is_empty(),
        "workspace members in no layer (add them to LAYERS and crates/README.md): {unlayered:?}"
    );
    let bad = disallowed_arrows(&members, &deps);
    assert!(
        bad.is_empty(),
        "dependency arrows outside the allow-list (layers from the bottom: {LAYERS:?}; \
         crates/README.md):\n{}",
        bad.join("\n")
    );
}

#[test]
fn every_allowed_arrow_points_down() {
    for (from, to) in ALLOWED {
        let (f, t) = (layer_of(from), layer_of(to));
        assert!(
            matches!((f, t), (Some(f), Some(t)) if t < f),
            "allowed arrow {from} -> {to} does not point down the layers {LAYERS:?}"
        );
    }
}

#[test]
fn the_layer_check_names_an_upward_arrow() {
    let members: BTreeSet<String> = ["vs-pin", "vs-sandbox", "vs-runtime", "vs-agent"]
        .map(String::from)
        .into();
    let dep = |from: &str, to: &str, kind: &str| Dep {
        from: from.into(),
        to: to.into(),
        kind: kind.into(),
    };
    let deps = [
        dep("vs-sandbox", "vs-pin", "normal"),
        dep("vs-pin", "vs-sandbox", "dev"),
        dep("vs-agent", "vs-runtime", "normal"),
        dep("vs-runtime", "serde", "normal"),
    ];
    assert_eq!(
        disallowed_arrows(&members, &deps),
        [
            "vs-pin -> vs-sandbox (dev) points up or across the layers",
            "vs-agent -> vs-runtime (normal) points up or across the layers",
        ]
    );
}

// ---------------------------------------------------------------------
// macOS code is compiled for macOS.

/// The crates `scripts/check-macos.sh` type-checks for macOS (its
/// `MACOS_CRATES=(...)` line).
fn macos_checked_crates() -> BTreeSet<String> {
    let script = std::fs::read_to_string(repo_root().join("scripts/check-macos.sh")).unwrap();
    let line = script
        .lines()
        .find_map(|l| l.strip_prefix("MACOS_CRATES=("))
        .expect("scripts/check-macos.sh has a MACOS_CRATES=(...) line");
    line.trim_end_matches(')')
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_crate_with_macos_code_is_checked_for_macos() {
    let meta = metadata();
    let checked = macos_checked_crates();
    let mut unchecked = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        let name = p["name"].as_str().unwrap().to_owned();
        let manifest = Path::new(p["manifest_path"].as_str().unwrap());
        let src = manifest.parent().unwrap().join("src");
        if !src.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let macos = files.iter().any(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .contains("target_os = \"macos\"")
        });
        if macos && !checked.contains(&name) {
            unchecked.push(name);
        }
    }
    assert!(
        checked.contains("vs-sandbox"),
        "the Seatbelt crate is not checked: {checked:?}"
    );
    assert!(
        unchecked.is_empty(),
        "crates with macOS code that scripts/check-macos.sh does not type-check for macOS \
         (add them to MACOS_CRATES, and keep C code out of their dependencies): {unchecked:?}"
    );
}

// ---------------------------------------------------------------------
// This package's own test targets.

#[test]
fn every_test_file_is_a_test_target() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifest: toml::Table =
        toml::from_str(&std::fs::read_to_string(dir.join("Cargo.toml")).unwrap()).unwrap();
    let listed: BTreeSet<String> = manifest["test"]
        .as_array()
        .expect("[[test]] entries")
        .iter()
        .map(|t| {
            t["path"]
                .as_str()
                .expect("each [[test]] has a path")
                .to_owned()
        })
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".rs"))
        .collect();
    let unlisted: Vec<&String> = files.difference(&listed).collect();
    let missing: Vec<&String> = listed.difference(&files).collect();
    assert!(
        unlisted.is_empty() && missing.is_empty(),
        "tests/Cargo.toml's [[test]] entries and tests/*.rs differ: not listed (never run) \
         {unlisted:?}, listed but missing {missing:?}"
    );
}

/// A crate's modules by path (`a::b`), from the files below its `src/`.
fn modules(src: &Path) -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            (parts.join("::"), f)
        })
        .collect()
}

/// The code of a module's file that counts: comment lines dropped, and
/// the inline test module that ends a file (`#[cfg(test)]`, maybe more
/// attributes, then `mod NAME {`) cut off with everything after it.
fn counted_code(source: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed == "#[cfg(test)]" {
            let mut ahead = lines.clone();
            let mut next = ahead.next().map(str::trim_start);
            while next.is_some_and(|l| l.starts_with("#[")) {
                next = ahead.next().map(str::trim_start);
            }
            if next.is_some_and(|l| l.starts_with("mod ") && l.ends_with('{')) {
                break;
            }
        }
        if !trimmed.starts_with("//") {
            kept.push(line);
        }
    }
    kept.join("\n")
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The paths of the use tree or path expression at `at`, each as its
/// segments after `prefix`: `a::{b, c::{d, e}}` gives `a::b`, `a::c::d`
/// and `a::c::e`; a path ends where its identifiers end (`a::B<T>` gives
/// `a::B`, `a::*` gives `a`). Returns where the tree ends.
fn tree_paths<'a>(
    code: &'a str,
    at: usize,
    prefix: Vec<&'a str>,
    out: &mut Vec<Vec<&'a str>>,
) -> usize {
    let bytes = code.as_bytes();
    let mut i = at;
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    if bytes.get(i) == Some(&b'{') {
        i += 1;
        loop {
            while bytes
                .get(i)
                .is_some_and(|b| b.is_ascii_whitespace() || *b == b',')
            {
                i += 1;
            }
            match bytes.get(i) {
                None => return i,
                Some(b'}') => return i + 1,
                Some(_) => {}
            }
            let next = tree_paths(code, i, prefix.clone(), out);
            // A token that begins no path (`*`, a stray symbol): step over it.
            i = if next > i { next } else { i + 1 };
        }
    }
    let end = i + bytes[i..].iter().take_while(|b| is_ident(**b)).count();
    let mut path = prefix;
    if end > i {
        path.push(&code[i..end]);
        if code[end..].starts_with("::") {
            return tree_paths(code, end + 2, path, out);
        }
    }
    out.push(path);
    // A rename (`Item as Other`) names nothing more.
    let rest = &code[end..];
    let trimmed = rest.trim_start();
    match trimmed.strip_prefix("as") {
        Some(after) if after.starts_with(|c: char| c.is_ascii_whitespace()) => {
            let after = after.trim_start();
            let name = after.bytes().take_while(|b| is_ident(*b)).count();
            code.len() - after.len() + name
        }
        _ => end,
    }
}

/// The module paths `module`'s code names, made absolute: paths from
/// `crate::`, `self::` and `super::` (any number of them), and paths that
/// begin with the name of one of its own child modules (`child::Item`,
/// `use child::{a, b}`, `pub use child::Item`), which are `module`'s
/// edges to its child files. `names` holds the crate's modules; comments
/// and the trailing test module are not counted ([`counted_code`]).
fn referenced_paths(module: &str, names: &BTreeSet<&str>, source: &str) -> Vec<String> {
    let code = counted_code(source);
    let bytes = code.as_bytes();
    let here: Vec<&str> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").collect()
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        // A path starts at an identifier that follows no identifier, `::`
        // or `.` (`x.collect::<T>()` is no path) and is followed by `::`.
        let starts = is_ident(bytes[i])
            && !bytes[i].is_ascii_digit()
            && (i == 0 || !(is_ident(bytes[i - 1]) || matches!(bytes[i - 1], b':' | b'.')));
        if !starts {
            i += 1;
            continue;
        }
        let end = i + bytes[i..].iter().take_while(|b| is_ident(**b)).count();
        if !code[end..].starts_with("::") {
            i = end;
            continue;
        }
        let mut paths = Vec::new();
        let tree_end = tree_paths(&code, i, Vec::new(), &mut paths);
        for path in paths {
            let mut segs = path.as_slice();
            let mut base: Vec<&str> = match segs.first().copied() {
                Some("crate") => {
                    segs = &segs[1..];
                    Vec::new()
                }
                Some("self") => {
                    segs = &segs[1..];
                    here.clone()
                }
                Some("super") => {
                    let mut base = here.clone();
                    while segs.first() == Some(&"super") {
                        base.pop();
                        segs = &segs[1..];
                    }
                    base
                }
                Some(first) => {
                    let mut child = here.clone();
                    child.push(first);
                    if !names.contains(child.join("::").as_str()) {
                        continue;
                    }
                    here.clone()
                }
                None => continue,
            };
            base.extend(segs.iter().filter(|s| **s != "self"));
            out.push(base.join("::"));
        }
        i = tree_end.max(end);
    }
    out
}

/// The edges between a crate's modules: `a` to `b` when `a`'s code names
/// something of `b` (the longest module path that prefixes the named
/// path). A module naming its own ancestors (`super::Item`, `crate::Item`
/// of the root) is the module tree's shape, not an edge; a parent naming
/// its children's items (`pub use child::Item`, `child::f()`) is one.
fn module_edges(modules: &[(String, String)]) -> BTreeMap<&str, BTreeSet<&str>> {
    let names: BTreeSet<&str> = modules.iter().map(|(m, _)| m.as_str()).collect();
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (module, source) in modules {
        let set = edges.entry(module.as_str()).or_default();
        for path in referenced_paths(module, &names, source) {
            let segs: Vec<&str> = path.split("::").collect();
            let target = (1..=segs.len())
                .rev()
                .map(|k| segs[..k].join("::"))
                .find_map(|c| names.get(c.as_str()).copied());
            if let Some(t) = target
                && !t.is_empty()
                && t != module.as_str()
                && !module.starts_with(&format!("{t}::"))
            {
                set.insert(t);
            }
        }
    }
    edges
}

/// The first cycle among a crate's modules (module `a` names something of
/// module `b`, which names something of `a`, directly or through others),
/// and every module on a cycle with its first module (the whole circle).
fn module_cycle(modules: &[(String, String)]) -> Option<(Vec<String>, BTreeSet<String>)> {
    let edges = module_edges(modules);
    // Depth-first search with the path on a stack: a back edge is a cycle.
    fn visit<'a>(
        node: &'a str,
        edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        stack: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| *n == node) {
            let mut cycle: Vec<String> = stack[at..].iter().map(|s| (*s).to_owned()).collect();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if !done.insert(node) {
            return None;
        }
        stack.push(node);
        for next in edges.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, edges, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        None
    }
    // The modules reachable from `from` along `edges`.
    fn reach<'a>(from: &'a str, edges: &BTreeMap<&'a str, BTreeSet<&'a str>>) -> BTreeSet<&'a str> {
        let mut seen = BTreeSet::from([from]);
        let mut todo = vec![from];
        while let Some(n) = todo.pop() {
            for next in edges.get(n).into_iter().flatten() {
                if seen.insert(next) {
                    todo.push(next);
                }
            }
        }
        seen
    }
    let mut done = BTreeSet::new();
    for node in edges.keys() {
        if let Some(cycle) = visit(node, &edges, &mut Vec::new(), &mut done) {
            let mut reverse: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
            for (from, tos) in &edges {
                for to in tos {
                    reverse.entry(to).or_default().insert(from);
                }
            }
            let first = cycle[0].as_str();
            let circle = reach(first, &edges)
                .intersection(&reach(first, &reverse))
                .map(|m| (*m).to_owned())
                .collect();
            return Some((cycle, circle));
        }
    }
    None
}

/// No crate has a file-level cycle: a module never names something of a
/// module that (directly or through others) names something of it, a
/// parent's use of its own child files included. Shared types live in
/// modules of their own, below both users.
#[test]
fn no_module_cycle_in_any_crate() {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(repo_root().join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let mods: Vec<(String, String)> = modules(&src)
            .into_iter()
            .map(|(m, f)| (m, std::fs::read_to_string(f).unwrap()))
            .collect();
        if let Some((cycle, circle)) = module_cycle(&mods) {
            found.push(format!(
                "{}: {} (the circle's {} modules: {})",
                src.display(),
                cycle.join(" -> "),
                circle.len(),
                circle.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    }
    assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
}

/// A synthetic crate tree as `(module, source)` pairs.
fn tree(files: &[(&str, &str)]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(m, s)| ((*m).to_owned(), (*s).to_owned()))
        .collect()
}

#[test]
fn the_cycle_check_names_a_cycle() {
    let mods = tree(&[
        ("a", "use crate::b::Thing;"),
        ("b", "use crate::{a, c};"),
        ("c", "// crate::a is only named in a comment"),
        ("d::e", "use super::f::G;"),
        ("d::f", "fn g() { crate::c::h() }"),
    ]);
    let (cycle, circle) = module_cycle(&mods).unwrap();
    assert_eq!(cycle, ["a", "b", "a"]);
    assert_eq!(circle, BTreeSet::from(["a".to_owned(), "b".to_owned()]));
    assert_eq!(module_cycle(&mods[2..]), None);
}

/// The circle `vs-runtime` had: a parent module re-exports its child
/// file's item, the child names a module that names the parent. Only the
/// parent's edge to its child closes it.
#[test]
fn the_cycle_check_counts_a_parent_naming_its_child_files() {
    let parent = "//! The remote side.\nmod config;\nmod client;\n\
                  pub use config::{RemoteConfig, self};\n\
                  pub fn f() { client::call(); }\n";
    let with = tree(&[
        ("", "mod remote;\nmod run;\npub use remote::RemoteConfig;"),
        ("remote", parent),
        ("remote::config", "use crate::run::TaskSpec;"),
        ("remote::client", "use super::super::state::Layout;"),
        ("run", "pub fn go() { crate::remote::f() }"),
        ("state", "pub struct Layout;"),
    ]);
    let (cycle, circle) = module_cycle(&with).unwrap();
    assert_eq!(cycle, ["remote", "remote::config", "run", "remote"]);
    assert_eq!(circle.len(), 3, "{circle:?}");
    // The same tree with the task types below both sides has no circle.
    let mut without = with.clone();
    without[2].1 = "use crate::task::TaskSpec;".to_owned();
    without.push(("task".to_owned(), "pub struct TaskSpec;".to_owned()));
    assert_eq!(module_cycle(&without), None);
    // Without the parent's edges to its children, the old rule, the
    // circle was not seen: `remote` names no module by `crate::`.
    let names: BTreeSet<&str> = with.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(
        referenced_paths("remote", &names, parent),
        [
            "remote::config::RemoteConfig",
            "remote::config",
            "remote::client::call"
        ]
    );
}

#[test]
fn the_path_reader_reads_use_trees_and_skips_what_is_no_path() {
    let names: BTreeSet<&str> = ["", "a", "a::b", "a::b::c", "x"].into();
    let source = "use self::b::{c::{D, E as F}, G};\n\
                  use super::super::x::Y;\n\
                  fn f() { let v = it.b::<T>(); b::c::h(); vs_other::b::Q; }\n\
                  /// [`crate::x::Z`] in a doc comment\n\
                  #[cfg(test)]\n#[allow(clippy::unwrap_used)]\nmod tests {\n    use crate::x::T;\n}\n";
    assert_eq!(
        referenced_paths("a", &names, source),
        ["a::b::c::D", "a::b::c::E", "a::b::G", "x::Y", "a::b::c::h"]
    );
}
