//! The layer cache on rebuilds: after one changed path only that path's
//! layer is rebuilt, every other layer comes from the cache, and the output
//! is byte for byte what a build without the cache gives. Store paths of a
//! references graph are keyed by name (without reading them) only when they
//! lie in the Nix store directory and look as Nix leaves them; everything
//! else is keyed by the metadata of all its files. The last test adds real
//! store paths with Nix (`nix-store --add`, needs nix-bin and root).

mod image_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use image_support::*;

/// Layer groups (first group of each layer) -> whether it was cached. Every
/// image here has a top layer more than its inputs: the runtime mount
/// points (`runtime mount points`, cached like any layer).
fn cached(report: &serde_json::Value) -> BTreeMap<String, bool> {
    report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["groups"][0].as_str().unwrap().to_owned(),
                l["cached"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The groups that were rebuilt (not cached).
fn rebuilt(report: &serde_json::Value) -> Vec<String> {
    cached(report)
        .into_iter()
        .filter(|(_, c)| !c)
        .map(|(g, _)| g)
        .collect()
}

/// Every file of a layout directory (or the archive file) with its bytes.
fn contents(out: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    if out.is_file() {
        m.insert(String::new(), std::fs::read(out).unwrap());
        return m;
    }
    let mut stack = vec![out.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(out).unwrap().to_string_lossy().into_owned();
                m.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    m
}

/// A build of `spec` with `input` args into `out`; `cache` or `--no-cache`.
struct Builder<'a> {
    dir: &'a Path,
    spec: PathBuf,
    format: &'a str,
    input: Vec<String>,
    env: Vec<(&'a str, String)>,
}

impl Builder<'_> {
    fn run(&self, out: &str, cache: Option<&str>) -> serde_json::Value {
        let mut c = vibesys(self.dir);
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c.args(["image", "build"])
            .arg(&self.spec)
            .args(["--out", out, "--format", self.format, "--json"])
            .args(&self.input);
        match cache {
            Some(dir) => c.args(["--cache", dir]),
            None => c.arg("--no-cache"),
        };
        json(&ok(c.output().unwrap()))
    }

    /// Builds with the cache into `out`, then without into `out.cold`, and
    /// checks both outputs are identical; returns the cached build's report.
    fn rebuild_and_compare(&self, out: &str, cache: &str) -> serde_json::Value {
        let r = self.run(out, Some(cache));
        let cold = format!("{out}.cold");
        let rc = self.run(&cold, None);
        assert_eq!(r["manifest_digest"], rc["manifest_digest"]);
        assert!(
            contents(&self.dir.join(out)) == contents(&self.dir.join(&cold)),
            "{out}: a build with cached layers differs from a cold build"
        );
        r
    }
}

/// A `--root` tree big enough to be cut into several groups (directories
/// over 8 MiB are groups of their own): only the changed group's layer is
/// rebuilt, for a changed file, a changed mode and a new file; the output
/// equals a cold build each time, as an OCI directory and as an archive.
#[test]
fn a_root_rebuild_rebuilds_only_the_changed_group() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    sh(
        d,
        "mkdir -p root/etc && echo small > root/etc/conf
         for g in big1 big2 big3; do for s in a b c; do mkdir -p root/$g/$s
           head -c 3200000 /dev/urandom > root/$g/$s/f; done; done",
    );
    let spec = write(d, "spec.toml", "name = \"rootcache\"\n");
    for format in ["oci", "archive"] {
        let b = Builder {
            dir: d,
            spec: spec.clone(),
            format,
            input: vec!["--root".to_owned(), "root".to_owned()],
            env: Vec::new(),
        };
        let cache = format!("cache-{format}");
        let out = format!("out-{format}");
        let r = b.rebuild_and_compare(&out, &cache);
        assert_eq!(
            rebuilt(&r),
            ["/", "/big1", "/big2", "/big3", "runtime mount points"],
            "cold: every group is built"
        );
        let r = b.rebuild_and_compare(&out, &cache);
        assert!(rebuilt(&r).is_empty(), "nothing changed: {r}");

        // Same size, new bytes.
        sh(d, "head -c 3200000 /dev/urandom > root/big2/b/f");
        let r = b.rebuild_and_compare(&out, &cache);
        assert_eq!(rebuilt(&r), ["/big2"]);

        sh(d, "chmod +x root/big1/a/f");
        let r = b.rebuild_and_compare(&out, &cache);
        assert_eq!(rebuilt(&r), ["/big1"]);

        sh(d, "echo new > root/big3/new");
        let r = b.rebuild_and_compare(&out, &cache);
        assert_eq!(rebuilt(&r), ["/big3"]);
        sh(d, "rm root/big3/new && chmod -x root/big1/a/f");
    }
}

/// `<store>/<32 base-32 digits>-<name>`.
fn store_name(n: char, name: &str) -> String {
    format!("{}-{name}", n.to_string().repeat(32))
}

/// Makes `path` look as Nix leaves a store path: no write bits, mtime 1.
fn seal(dir: &Path, path: &str) {
    sh(
        dir,
        &format!("chmod -R a-w '{path}' && find '{path}' -exec touch -h -d @1 {{}} +"),
    );
}

fn unseal(dir: &Path, path: &str) {
    sh(dir, &format!("chmod -R u+w '{path}'"));
}

/// With `NIX_STORE_DIR` pointing at a directory of the test, store paths
/// that look as Nix leaves them are keyed by name: a rebuild does not read
/// them (an edit below their top-level entry is not seen — the documented
/// trust), a new store path rebuilds only its layer, and a path outside the
/// store directory or one that is writable is keyed by its files.
#[test]
fn store_paths_are_keyed_by_name_only_when_they_look_as_nix_leaves_them() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let store = d.join("store");
    let (a, b, a2) = (
        store_name('a', "a"),
        store_name('b', "b"),
        store_name('c', "a"),
    );
    sh(
        d,
        &format!(
            "mkdir -p store/{a}/lib store/{b}/bin other/c
             echo liba > store/{a}/lib/liba.so; echo changed > store/{a}/lib/libb.so
             echo tool > store/{b}/bin/tool; chmod +x store/{b}/bin/tool
             echo mutable > other/c/file"
        ),
    );
    seal(d, &format!("store/{a}"));
    seal(d, &format!("store/{b}"));
    let p = |rel: &str| d.join(rel).to_str().unwrap().to_owned();
    let graph = |paths: &[String]| {
        let text: String = paths.iter().map(|p| format!("{p}\n\n0\n")).collect();
        write(d, "graph", &text);
    };
    let (pa, pb, pc) = (
        p(&format!("store/{a}")),
        p(&format!("store/{b}")),
        p("other/c"),
    );
    graph(&[pa.clone(), pb.clone(), pc.clone()]);
    let spec = write(d, "spec.toml", "name = \"storecache\"\n");
    let b_ = Builder {
        dir: d,
        spec,
        format: "oci",
        input: vec!["--references-graph".to_owned(), p("graph")],
        env: vec![("NIX_STORE_DIR", store.to_str().unwrap().to_owned())],
    };
    let r = b_.rebuild_and_compare("out", "cache");
    assert_eq!(rebuilt(&r).len(), 3 + 1);
    let r = b_.rebuild_and_compare("out", "cache");
    assert!(rebuilt(&r).is_empty(), "{r}");

    // An edit inside a store path, below its top-level entry (which Nix
    // never does): not seen, the store path is not read again.
    let f = format!("store/{a}/lib/libb.so");
    sh(
        d,
        &format!("chmod u+w {f} && echo CHANGED > {f} && chmod a-w {f} && touch -h -d @1 {f}"),
    );
    let r = b_.run("out", Some("cache"));
    assert!(rebuilt(&r).is_empty(), "{r}");
    let cold = b_.run("out.cold", None);
    assert_ne!(r["manifest_digest"], cold["manifest_digest"]);
    // The top-level entry made writable: no longer trusted, read again.
    sh(d, &format!("chmod u+w store/{a}"));
    let r = b_.rebuild_and_compare("out", "cache");
    assert_eq!(rebuilt(&r), std::slice::from_ref(&pa));
    // Sealed again: its ctime changed, so it is built once more.
    seal(d, &format!("store/{a}"));
    let r = b_.rebuild_and_compare("out", "cache");
    assert_eq!(rebuilt(&r), std::slice::from_ref(&pa));

    // A path outside the store directory is keyed by its files.
    sh(d, "echo edited > other/c/file");
    let r = b_.rebuild_and_compare("out", "cache");
    assert_eq!(rebuilt(&r), std::slice::from_ref(&pc));

    // What Nix does on a change: a new store path replaces the old one.
    sh(
        d,
        &format!(
            "cp -a store/{a} store/{a2} && chmod -R u+w store/{a2} && echo v2 > store/{a2}/lib/liba.so"
        ),
    );
    seal(d, &format!("store/{a2}"));
    let pa2 = p(&format!("store/{a2}"));
    graph(&[pa2.clone(), pb.clone(), pc.clone()]);
    let r = b_.rebuild_and_compare("out", "cache");
    assert_eq!(rebuilt(&r), [pa2]);
    assert_eq!(cached(&r).len(), 3 + 1);
    sh(d, "chmod -R u+w store");
}

/// A store path is written as its NAR defines it: files hardlinked to each
/// other (as `nix-store --optimise` leaves them) give the same layer as
/// separate copies. Host paths keep hardlinks.
#[test]
fn hardlinks_inside_a_store_path_do_not_change_its_layer() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let store = d.join("store");
    let s = store_name('x', "pkg");
    sh(
        d,
        &format!("mkdir -p store/{s} && echo same > store/{s}/one && echo same > store/{s}/two"),
    );
    seal(d, &format!("store/{s}"));
    let path = d.join(format!("store/{s}")).to_str().unwrap().to_owned();
    write(d, "graph", &format!("{path}\n\n0\n"));
    let spec = write(d, "spec.toml", "name = \"links\"\n");
    let build = |input: &[&str], out: &str| {
        let r = json(&ok(vibesys(d)
            .env("NIX_STORE_DIR", &store)
            .args(["image", "build"])
            .arg(&spec)
            .args(["--out", out, "--no-cache", "--json"])
            .args(input)
            .output()
            .unwrap()));
        r["layers"][0]["digest"].as_str().unwrap().to_owned()
    };
    let graph = d.join("graph");
    let graph = graph.to_str().unwrap();
    let copies = build(&["--references-graph", graph], "1.tar");
    let host_copies = build(&["--path", &path], "2.tar");
    unseal(d, &format!("store/{s}"));
    sh(d, &format!("ln -f store/{s}/one store/{s}/two"));
    seal(d, &format!("store/{s}"));
    assert_eq!(build(&["--references-graph", graph], "3.tar"), copies);
    assert_ne!(
        build(&["--path", &path], "4.tar"),
        host_copies,
        "a host path keeps its hardlinks"
    );
    sh(d, "chmod -R u+w store");
}

/// Deletes the store paths it holds when dropped (test cleanup).
struct StorePaths(Vec<String>);

impl Drop for StorePaths {
    fn drop(&mut self) {
        for p in self.0.iter().rev() {
            let _ = Command::new("nix-store").args(["--delete", p]).output();
        }
    }
}

fn nix_store_add(paths: &mut StorePaths, dir: &Path) -> String {
    let out = ok(Command::new("nix-store")
        .arg("--add")
        .arg(dir)
        .output()
        .unwrap());
    let p = out.trim().to_owned();
    paths.0.push(p.clone());
    p
}

/// Real store paths (`nix-store --add`, as root): a rebuild reads none of
/// them; a changed file is a new store path, and only its layer is built;
/// the output equals a cold build.
#[test]
fn a_new_nix_store_path_rebuilds_only_its_layer() {
    require("nix-store", "install nix-bin (see scripts/ci-setup-nix.sh)");
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let nonce = unique("vs-image-cache-test");
    sh(
        d,
        &format!(
            "for p in alpha beta gamma; do mkdir -p src/$p/share
               echo {nonce} > src/$p/share/nonce; head -c 200000 /dev/urandom > src/$p/share/data; done
             ln -s share/data src/beta/link"
        ),
    );
    let mut added = StorePaths(Vec::new());
    let paths: Vec<String> = ["alpha", "beta", "gamma"]
        .iter()
        .map(|p| nix_store_add(&mut added, &d.join("src").join(p)))
        .collect();
    let graph = |paths: &[String]| {
        let text: String = paths.iter().map(|p| format!("{p}\n\n0\n")).collect();
        write(d, "graph", &text);
    };
    graph(&paths);
    let spec = write(d, "spec.toml", "name = \"nixcache\"\n");
    for format in ["oci", "archive"] {
        let b = Builder {
            dir: d,
            spec: spec.clone(),
            format,
            input: vec![
                "--references-graph".to_owned(),
                d.join("graph").to_str().unwrap().to_owned(),
            ],
            env: Vec::new(),
        };
        let cache = format!("cache-{format}");
        let out = format!("out-{format}");
        graph(&paths);
        let r = b.rebuild_and_compare(&out, &cache);
        assert_eq!(rebuilt(&r).len(), 3 + 1);
        let r = b.rebuild_and_compare(&out, &cache);
        assert!(rebuilt(&r).is_empty(), "{r}");

        sh(
            d,
            &format!(
                "rm -rf src/beta2 && cp -a src/beta src/beta2 && echo {format} >> src/beta2/share/data"
            ),
        );
        let beta2 = nix_store_add(&mut added, &d.join("src/beta2"));
        graph(&[paths[0].clone(), beta2.clone(), paths[2].clone()]);
        let r = b.rebuild_and_compare(&out, &cache);
        assert_eq!(rebuilt(&r), [beta2]);
        assert_eq!(cached(&r).len(), 3 + 1);
    }
}
