//! Structure-aware policy fuzzing: a workspace tree (directories, files,
//! symlinks pointing anywhere, `..` and absolute targets included) and a
//! `vibesys.toml` rendered from fuzzed keys and values, so that most inputs
//! get past TOML syntax into the policy rules and the file-system
//! resolution (`PolicyConfig::parse`, then `ProjectPathPolicy::resolve`
//! and the default protections, as `exec` calls them).
//!
//! Properties: an accepted policy resolves only to places inside the
//! workspace (symlinks followed), each resolved entry is what the file
//! system holds there, and no two resolved entries overlap except a hidden
//! path below a read-only one.
#![no_main]

#[path = "common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vs_sandbox::config::PolicyConfig;
use vs_sandbox::policy::PathKind;
use vs_sandbox::{Access, Workspace};

#[derive(Arbitrary, Debug)]
enum Seg {
    A,
    B,
    Src,
    Dot,
    DotDot,
    Git,
    Env,
    Vibesys,
    Raw(String),
}

#[derive(Arbitrary, Debug)]
struct Rel(Vec<Seg>);

impl Rel {
    fn render(&self) -> String {
        let parts: Vec<String> = self
            .0
            .iter()
            .take(4)
            .map(|s| match s {
                Seg::A => "a".into(),
                Seg::B => "b".into(),
                Seg::Src => "src".into(),
                Seg::Dot => ".".into(),
                Seg::DotDot => "..".into(),
                Seg::Git => ".git".into(),
                Seg::Env => ".env".into(),
                Seg::Vibesys => "vibesys.toml".into(),
                Seg::Raw(r) => r.chars().take(12).collect(),
            })
            .collect();
        parts.join("/")
    }
}

#[derive(Arbitrary, Debug)]
enum Target {
    Inside(Rel),
    Up(u8, Rel),
    Absolute(String),
    Root,
}

#[derive(Arbitrary, Debug)]
enum Node {
    Dir(Rel),
    File(Rel),
    Link(Rel, Target),
}

#[derive(Arbitrary, Debug)]
struct Input {
    tree: Vec<Node>,
    read_only: Vec<Rel>,
    hidden: Vec<Rel>,
    widen: Vec<Rel>,
    allow: Vec<String>,
    git: Option<bool>,
    network: Option<bool>,
    max_processes: Option<u64>,
    unknown_key: Option<String>,
    leading_slash: bool,
}

fn render(input: &Input) -> String {
    use toml::Value;
    let list = |v: &[Rel]| {
        Value::Array(
            v.iter()
                .take(6)
                .map(|r| {
                    let mut s = r.render();
                    if input.leading_slash {
                        s.insert(0, '/');
                    }
                    Value::String(s)
                })
                .collect(),
        )
    };
    let mut sandbox = toml::Table::new();
    sandbox.insert("read_only".into(), list(&input.read_only));
    sandbox.insert("hidden".into(), list(&input.hidden));
    sandbox.insert("widen".into(), list(&input.widen));
    sandbox.insert(
        "allow".into(),
        Value::Array(input.allow.iter().take(4).map(|s| Value::String(s.clone())).collect()),
    );
    if let Some(git) = input.git {
        let v = if git { "commit" } else { "read-only" };
        sandbox.insert("git".into(), Value::String(v.into()));
    }
    if let Some(n) = input.network {
        sandbox.insert("network".into(), Value::Boolean(n));
    }
    if let Some(n) = input.max_processes {
        sandbox.insert("max_processes".into(), Value::Integer(n as i64));
    }
    if let Some(k) = &input.unknown_key {
        sandbox.insert(k.clone(), Value::Boolean(true));
    }
    let mut doc = toml::Table::new();
    doc.insert("sandbox".into(), Value::Table(sandbox));
    toml::to_string(&doc).unwrap_or_default()
}

fn plant(root: &Path, tree: &[Node]) {
    for node in tree.iter().take(12) {
        let (rel, make): (&Rel, &dyn Fn(&Path)) = match node {
            Node::Dir(r) => (r, &|p| {
                let _ = std::fs::create_dir_all(p);
            }),
            Node::File(r) => (r, &|p| {
                let _ = std::fs::write(p, b"x");
            }),
            Node::Link(r, target) => (r, &move |p| {
                let t: PathBuf = match target {
                    Target::Inside(t) => t.render().into(),
                    Target::Up(n, t) => {
                        let mut s = "../".repeat(usize::from(*n % 4));
                        s.push_str(&t.render());
                        s.into()
                    }
                    Target::Absolute(a) => a.chars().take(32).collect::<String>().into(),
                    Target::Root => "/".into(),
                };
                let _ = std::os::unix::fs::symlink(t, p);
            }),
        };
        let path = root.join(rel.render());
        // Never create anything outside the scratch tree.
        let Ok(parent) = path.parent().unwrap_or(root).canonicalize() else {
            continue;
        };
        if parent.starts_with(root) {
            if let Some(name) = path.file_name() {
                make(&parent.join(name));
            }
        }
    }
}

fuzz_target!(|input: Input| {
    let text = render(&input);
    let Ok(config) = PolicyConfig::parse(&text, Path::new("vibesys.toml")) else {
        return;
    };
    if input.unknown_key.is_some() {
        let k = input.unknown_key.as_deref().unwrap_or_default();
        let known = [
            "read_only",
            "hidden",
            "widen",
            "allow",
            "git",
            "network",
            "max_processes",
        ];
        assert!(known.contains(&k), "an unknown key {k:?} was accepted");
    }
    let policy = config.policy().expect("parse validated the policy");
    common::check_policy(&policy);

    let dir = common::fresh_dir("ws");
    plant(&dir, &input.tree);
    let workspace = Workspace::open(&dir).expect("the scratch workspace opens");
    let root = workspace.root().to_path_buf();
    let _ = config.defaults(&workspace);
    let Ok(resolved) = policy.resolve(&workspace) else {
        return;
    };
    let entries = resolved.entries();
    for e in entries {
        assert!(e.host.starts_with(&root), "{:?} resolved outside: {:?}", e.rel, e.host);
        assert_ne!(e.host, root, "the workspace root itself was accepted");
        assert_eq!(e.host.strip_prefix(&root).ok(), Some(e.resolved_rel.as_path()));
        let meta = std::fs::symlink_metadata(&e.host).expect("a resolved path exists");
        match e.kind {
            PathKind::File => assert!(meta.is_file()),
            PathKind::Directory => assert!(meta.is_dir()),
        }
    }
    for (i, a) in entries.iter().enumerate() {
        for b in &entries[i + 1..] {
            assert_ne!(a.resolved_rel, b.resolved_rel, "two entries resolve to one place");
            let nested = a.resolved_rel.starts_with(&b.resolved_rel)
                || b.resolved_rel.starts_with(&a.resolved_rel);
            if nested {
                let (outer, inner) = if a.resolved_rel.starts_with(&b.resolved_rel) {
                    (b, a)
                } else {
                    (a, b)
                };
                assert!(
                    outer.access == Access::ReadOnly && inner.access == Access::Hidden,
                    "resolved overlap {:?} / {:?}",
                    outer.resolved_rel,
                    inner.resolved_rel
                );
            }
        }
    }
});
