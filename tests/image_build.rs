//! `vibesys image build` end to end: reproducibility across working
//! directory, file mtimes, umask and TMPDIR; golden digests; the layer
//! cache; references-graph input with a sandbox-like environment; refusal
//! of special files and escaping links.

mod image_support;

use std::path::Path;
use std::process::Command;

use image_support::*;

/// Creates the same tree under `dir` with the given umask and mtime.
fn fixture(dir: &Path, umask: &str, date: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let long = "l".repeat(120);
    sh(
        dir,
        &format!(
            "umask {umask}
             mkdir -p root/usr/bin root/usr/share/doc root/empty root/{long}
             printf '#!/bin/sh\\necho hi\\n' > root/usr/bin/tool && chmod u+x root/usr/bin/tool
             printf 'data\\n' > root/usr/share/doc/readme
             printf 'x' > root/{long}/f
             ln root/usr/share/doc/readme root/usr/share/doc/readme-hardlink
             ln -s ../share/doc/readme root/usr/bin/readme-link
             find root -exec touch -h -d '{date}' {{}} +"
        ),
    );
}

/// `vibesys image build` under a given umask, cwd and TMPDIR.
fn build_with(cwd: &Path, umask: &str, tmpdir: &Path, args: &[&str]) -> String {
    std::fs::create_dir_all(tmpdir).unwrap();
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("umask {umask}; exec \"$0\" \"$@\""))
        .arg(vibesys_bin())
        .args(args);
    c.current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("TMPDIR", tmpdir);
    ok(c.output().unwrap())
}

#[test]
fn same_inputs_give_identical_bytes() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b/deeper"));
    fixture(&a, "022", "2001-02-03 04:05:06");
    fixture(&b, "077", "2024-12-31 23:59:59");
    let spec = write(t.path(), "spec.toml", TINY_SPEC);
    let spec = spec.to_str().unwrap();
    for format in ["archive", "oci-archive", "docker-archive"] {
        let out_a = a.join(format!("out-{format}.tar"));
        let out_b = b.join(format!("out-{format}.tar"));
        build_with(
            &a,
            "022",
            &a.join("tmp"),
            &[
                "image",
                "build",
                spec,
                "--out",
                out_a.to_str().unwrap(),
                "--format",
                format,
                "--root",
                "root",
                "--no-cache",
            ],
        );
        let cache = t.path().join("cache");
        build_with(
            &b,
            "077",
            &t.path().join("other-tmp"),
            &[
                "image",
                "build",
                spec,
                "--out",
                out_b.to_str().unwrap(),
                "--format",
                format,
                "--root",
                "root",
                "--cache",
                cache.to_str().unwrap(),
            ],
        );
        let (ba, bb) = (
            std::fs::read(&out_a).unwrap(),
            std::fs::read(&out_b).unwrap(),
        );
        assert!(ba == bb, "{format}: archives differ between the two builds");
    }
    // OCI layouts: same manifest and config bytes.
    for (dir, umask) in [(&a, "022"), (&b, "077")] {
        build_with(
            dir,
            umask,
            &dir.join("tmp2"),
            &[
                "image",
                "build",
                spec,
                "--out",
                "layout",
                "--format",
                "oci",
                "--root",
                "root",
                "--no-cache",
            ],
        );
    }
    let ia = json(&ok(vibesys(&a)
        .args(["image", "inspect", "layout", "--json"])
        .output()
        .unwrap()));
    let ib = json(&ok(vibesys(&b)
        .args(["image", "inspect", "layout", "--json"])
        .output()
        .unwrap()));
    assert_eq!(ia["manifest_digest"], ib["manifest_digest"]);
    assert_eq!(ia["config_digest"], ib["config_digest"]);
    // No temporary files left next to the outputs.
    for e in std::fs::read_dir(&a).unwrap() {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(!n.starts_with('.'), "leftover {n}");
    }
}

/// Digests of an image made only of spec files: the same on every machine.
#[test]
fn golden_digests() {
    let t = tempfile::tempdir().unwrap();
    let spec = write(
        t.path(),
        "golden.toml",
        r#"
name = "golden"
tag = "1"
layer_cap = 2
annotations = { "org.opencontainers.image.title" = "golden" }
[config]
cmd = ["/bin/true"]
env = ["A=1"]
[[files]]
path = "/etc/os-release"
content = "ID=vibesys\n"
[[files]]
path = "/tmp"
type = "dir"
mode = "1777"
[[files]]
path = "/bin/true"
type = "symlink"
target = "/usr/bin/true"
"#,
    );
    let mut got = Vec::new();
    for compression in ["none", "gzip", "zstd"] {
        let out = t.path().join(format!("g-{compression}.tar"));
        let r = json(&ok(vibesys(t.path())
            .args([
                "image",
                "build",
                spec.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
                "--compression",
                compression,
                "--no-cache",
                "--json",
            ])
            .output()
            .unwrap()));
        got.push(format!(
            "{compression} {} {}",
            r["manifest_digest"].as_str().unwrap(),
            r["layers"][0]["digest"].as_str().unwrap()
        ));
        ok(vibesys(t.path())
            .args(["image", "inspect", "--verify", out.to_str().unwrap()])
            .output()
            .unwrap());
    }
    // Changed last when every image got the runtime mount points (/dev,
    // /proc, /sys, empty /etc/hosts, ...): the one layer holds them beside
    // the spec's files, and the SBOM lists their group.
    let want = [
        "none sha256:d6b37349a575638814ae0fea07821500d5b63d4b62cdded4b4ad464e5563d02d sha256:77cd2624a4ab801dc4cefe99f78c9147dc03877370a704eae410020fb87812c1",
        "gzip sha256:a607a5c28e05caa3f3d297690c7ee6afa4c96055e03f7ecc69b0792f11d406b4 sha256:06e006174de6970f26869162bb0ec02767de5faa9822536584fb35159e161e00",
        "zstd sha256:365fb7f1ad9dc486303aa4d6cd978625fb9279308b5ed6a9f25712307c9e1596 sha256:f83c997e0e78863619e505293e31152748aa7c81fe58079f47b72117814a4639",
    ];
    assert_eq!(
        got, want,
        "golden digests changed: the tar writer, JSON or a compressor's bytes changed"
    );
}

#[test]
fn cache_rebuilds_only_the_changed_layer() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    sh(
        d,
        "mkdir -p in/p1 in/p2 in/p3 && for i in 1 2 3; do head -c 100000 /dev/urandom > in/p$i/blob; echo $i > in/p$i/n; done",
    );
    let spec = write(d, "spec.toml", "name = \"cachetest\"\n");
    let build = |out: &str, cache: bool| {
        let mut c = vibesys(d);
        c.args([
            "image",
            "build",
            spec.to_str().unwrap(),
            "--out",
            out,
            "--json",
            "--path",
        ]);
        for p in ["in/p1", "in/p2", "in/p3"] {
            c.arg(d.join(p));
        }
        if cache {
            c.arg("--cache").arg(d.join("cache"));
        } else {
            c.arg("--no-cache");
        }
        let r = json(&ok(c.output().unwrap()));
        r["layers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["cached"].as_bool().unwrap())
            .collect::<Vec<_>>()
    };
    // Three input layers and the runtime mount points on top.
    assert_eq!(build("1.tar", true), [false, false, false, false]);
    assert_eq!(build("2.tar", true), [true, true, true, true]);
    assert_eq!(
        std::fs::read(d.join("1.tar")).unwrap(),
        std::fs::read(d.join("2.tar")).unwrap()
    );
    std::fs::write(d.join("in/p2/n"), "changed\n").unwrap();
    assert_eq!(build("3.tar", true), [true, false, true, true]);
    build("4.tar", false);
    // --no-cache wins over VIBESYS_IMAGE_CACHE.
    let env_cache = d.join("env-cache");
    ok(vibesys(d)
        .env("VIBESYS_IMAGE_CACHE", &env_cache)
        .args([
            "image",
            "build",
            spec.to_str().unwrap(),
            "--out",
            "5.tar",
            "--no-cache",
            "--path",
        ])
        .arg(d.join("in/p1"))
        .output()
        .unwrap());
    assert!(
        !env_cache.exists(),
        "--no-cache must not touch VIBESYS_IMAGE_CACHE"
    );
    assert_eq!(
        std::fs::read(d.join("3.tar")).unwrap(),
        std::fs::read(d.join("4.tar")).unwrap(),
        "a cached build must equal an uncached one"
    );
}

/// As inside the Nix sandbox: HOME=/homeless-shelter, no cache, TMPDIR set,
/// input from a references graph; store paths keep their absolute path and
/// are layered by popularity.
#[test]
fn references_graph_in_a_sandbox_like_environment() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    sh(d, "mkdir -p store/aaa-libc/lib store/bbb-lib/lib store/ccc-app/bin tmp
           echo libc > store/aaa-libc/lib/libc.so; echo lib > store/bbb-lib/lib/lib.so
           printf '#!/bin/sh\\n' > store/ccc-app/bin/app; chmod 555 store/ccc-app/bin/app; chmod -R a-w store");
    let s = |n: &str| d.join("store").join(n).to_str().unwrap().to_owned();
    let graph = format!(
        "{app}\n/nix/store/x-app.drv\n3\n{lib}\n{libc}\n{app}\n{lib}\n\n1\n{libc}\n{libc}\n\n1\n{libc}\n",
        app = s("ccc-app"),
        lib = s("bbb-lib"),
        libc = s("aaa-libc")
    );
    let g = write(d, "graph", &graph);
    let spec = write(d, "spec.toml", TINY_SPEC);
    let out = d.join("img.tar");
    let mut c = vibesys(d);
    c.env("HOME", "/homeless-shelter")
        .env("TMPDIR", d.join("tmp"))
        .env("SOURCE_DATE_EPOCH", "1700000000");
    c.args([
        "image",
        "build",
        spec.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--references-graph",
        g.to_str().unwrap(),
        "--json",
    ]);
    let r = json(&ok(c.output().unwrap()));
    let groups: Vec<String> = r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["groups"][0].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        groups,
        [
            s("aaa-libc"),
            s("bbb-lib"),
            s("ccc-app"),
            "extra files".to_owned()
        ]
    );
    assert!(!Path::new("/homeless-shelter").exists());
    let i = json(&ok(vibesys(d)
        .args([
            "image",
            "inspect",
            "--verify",
            "--json",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap()));
    // The image, three store paths, the extra files, the mount points.
    assert_eq!(i["sbom"]["packages"], 6, "{i}");
    assert_eq!(i["sbom"]["spdx_version"], "SPDX-2.3");
    // The layer of a store path does not depend on the rest of the image.
    let spec2 = write(d, "other.toml", "name = \"other\"\n");
    let g2 = write(d, "graph2", &format!("{libc}\n\n0\n", libc = s("aaa-libc")));
    let r2 = json(&ok(vibesys(d)
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .args([
            "image",
            "build",
            spec2.to_str().unwrap(),
            "--out",
            "o.tar",
            "--no-cache",
            "--json",
            "--references-graph",
            g2.to_str().unwrap(),
        ])
        .output()
        .unwrap()));
    assert_eq!(r2["layers"][0]["digest"], r["layers"][0]["digest"]);
    // A graph naming a path that is not there fails and names it.
    let g3 = write(d, "graph3", "/nix/store/does-not-exist\n\n0\n");
    let err = fails(
        vibesys(d)
            .args([
                "image",
                "build",
                spec2.to_str().unwrap(),
                "--out",
                "x.tar",
                "--references-graph",
                g3.to_str().unwrap(),
            ])
            .output()
            .unwrap(),
    );
    assert!(err.contains("/nix/store/does-not-exist"), "{err}");
    sh(d, "chmod -R u+w store");
}

#[test]
fn special_files_and_escaping_links_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let spec = write(d, "spec.toml", "name = \"bad\"\n");
    for (root, setup, leaf, needle) in [
        ("r1", "mkfifo r1/a/pipe", "pipe", "fifo"),
        ("r2", "mknod r2/a/null c 1 3", "null", "device"),
        (
            "r3",
            "ln -s ../../../../etc/passwd r3/a/evil",
            "evil",
            "escapes the root",
        ),
        ("r4", "ln -s /../etc r4/a/evil", "evil", "escapes the root"),
    ] {
        sh(d, &format!("mkdir -p {root}/a && {setup}"));
        let err = fails(
            vibesys(d)
                .args([
                    "image",
                    "build",
                    spec.to_str().unwrap(),
                    "--out",
                    "x.tar",
                    "--root",
                    root,
                ])
                .output()
                .unwrap(),
        );
        assert!(err.contains(needle), "{setup}: {err}");
        assert!(
            err.contains(leaf),
            "{setup}: error does not name the path: {err}"
        );
        assert!(!d.join("x.tar").exists(), "a refused build left an output");
    }
    let leftovers: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn spec_errors_name_the_field() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    for (text, needle) in [
        ("name = \"x\"\nsurprise = true\n", "surprise"),
        (
            "name = \"x\"\n[config]\nentrypoint = \"/bin/sh\"\n",
            "entrypoint",
        ),
        ("name = \"x\"\nlayer_cap = 500\n", "layer_cap"),
        (
            "name = \"x\"\n[[files]]\npath = \"/a/../../b\"\n",
            "files[/a/../../b]",
        ),
    ] {
        let spec = write(d, "s.toml", text);
        let err = fails(
            vibesys(d)
                .args([
                    "image",
                    "build",
                    spec.to_str().unwrap(),
                    "--out",
                    "x.tar",
                    "--path",
                    "/bin/busybox",
                ])
                .output()
                .unwrap(),
        );
        assert!(err.contains(needle), "{err}");
    }
    write(d, "s.toml", "name = \"x\"\n");
    let err = fails(
        vibesys(d)
            .env("SOURCE_DATE_EPOCH", "yesterday")
            .args(["image", "build", "s.toml", "--out", "x.tar"])
            .output()
            .unwrap(),
    );
    assert!(err.contains("SOURCE_DATE_EPOCH"), "{err}");
}

/// More groups than `layer_cap - 1`: the rest merge into the last layer,
/// the extra files stay on top.
#[test]
fn layer_cap_merges_the_rest_into_the_last_layer() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    sh(
        d,
        "mkdir -p a b c e && for x in a b c e; do echo $x > $x/f; done",
    );
    let spec = write(
        d,
        "s.toml",
        "name = \"capped\"\nlayer_cap = 3\n[[files]]\npath = \"/etc/motd\"\ncontent = \"hi\\n\"\n",
    );
    let mut c = vibesys(d);
    c.args([
        "image",
        "build",
        spec.to_str().unwrap(),
        "--out",
        "x.tar",
        "--no-cache",
        "--json",
        "--path",
    ]);
    for p in ["a", "b", "c", "e"] {
        c.arg(d.join(p));
    }
    let r = json(&ok(c.output().unwrap()));
    let groups: Vec<Vec<String>> = r["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            l["groups"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g.as_str().unwrap().rsplit('/').next().unwrap().to_owned())
                .collect()
        })
        .collect();
    assert_eq!(
        groups,
        [
            vec!["a"],
            vec!["b", "c", "e"],
            vec!["extra files", "runtime mount points"]
        ]
    );
    ok(vibesys(d)
        .args(["image", "inspect", "--verify", "x.tar"])
        .output()
        .unwrap());
}

/// `--format oci` replaces an existing layout, never another directory.
#[test]
fn an_oci_output_replaces_only_a_layout() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let spec = write(d, "s.toml", TINY_SPEC);
    let build = |out: &str| {
        vibesys(d)
            .args([
                "image",
                "build",
                spec.to_str().unwrap(),
                "--out",
                out,
                "--format",
                "oci",
                "--no-cache",
                "--path",
                busybox(),
            ])
            .output()
            .unwrap()
    };
    ok(build("layout"));
    ok(build("layout"));
    write(d, "precious/notes.txt", "keep me");
    let err = fails(build("precious"));
    assert!(
        err.contains("precious") && err.contains("refusing"),
        "{err}"
    );
    assert_file_is(d.join("precious/notes.txt"), "keep me");
    let leftovers: Vec<_> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}
