//! An archive rebuilt with the layer cache is edited in place — the same
//! file, only what changed written — and holds the bytes of a cold build:
//! after a changed, added or removed file, a layer appearing or
//! disappearing, a renamed directory, or no change, in every archive
//! format. An archive that is no longer what the builder left (written,
//! truncated, touched, chmod'ed, replaced by a symlink, hard-linked
//! elsewhere) is written anew, with the same bytes. A build killed in the
//! middle of an edit leaves no output, never a half-edited one, and the
//! next build removes what it left; an edit that fails writes the archive
//! anew. The kill and the failure are injected with strace.
//!
//! A new archive gets its layers written straight into it (no blob file,
//! no copy): the cache records them without a blob of their own, and a
//! rebuild keeps them from the archive — or, when the archive is gone or
//! no longer what the builder left, writes them again.

mod image_support;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use image_support::*;

const FORMATS: [&str; 3] = ["archive", "oci-archive", "docker-archive"];

/// A work directory on the file system of the build's target directory
/// (ext4 or XFS: where archives are edited in place), with a root of
/// three groups big enough to be layers of their own.
fn work() -> tempfile::TempDir {
    let base = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let t = tempfile::Builder::new()
        .prefix("inplace")
        .tempdir_in(&base)
        .unwrap();
    let fs = rustix::fs::statfs(t.path()).unwrap().f_type as u64;
    assert!(
        fs == 0xEF53 || fs == 0x5846_5342,
        "{} is not on ext4 or XFS, where archives are edited in place",
        t.path().display()
    );
    sh(
        t.path(),
        "printf 'name = \"inplace\"\\ntag = \"t\"\\n' > spec.toml",
    );
    new_root(t.path());
    t
}

/// (Re)makes the root.
fn new_root(d: &Path) {
    sh(
        d,
        "rm -rf root && mkdir -p root/etc && echo small > root/etc/conf
         for g in big1 big2 big3; do for s in a b c; do mkdir -p root/$g/$s
           head -c 3200000 /dev/urandom > root/$g/$s/f; done; done",
    );
}

/// `vibesys image build` of the root to `out`, with the cache `cache` or
/// none; returns the debug log.
fn build(d: &Path, out: &str, format: &str, cache: Option<&str>) -> String {
    let mut c = build_command(d, out, format, cache);
    let o = c.output().unwrap();
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    ok(o);
    log
}

fn build_command(d: &Path, out: &str, format: &str, cache: Option<&str>) -> Command {
    let mut c = vibesys(d);
    c.env("VIBESYS_LOG", "vs_image=debug")
        .args(["image", "build", "spec.toml", "--root", "root"])
        .args(["--out", out, "--format", format]);
    match cache {
        Some(dir) => c.args(["--cache", dir]),
        None => c.arg("--no-cache"),
    };
    c
}

fn ino(p: &Path) -> u64 {
    std::fs::symlink_metadata(p).unwrap().ino()
}

/// Asserts that `out` holds the bytes a cold build gives now, and that
/// `inspect --verify` accepts it.
fn assert_cold_bytes(d: &Path, out: &str, format: &str, what: &str) {
    build(d, "cold.tar", format, None);
    assert!(
        std::fs::read(d.join(out)).unwrap() == std::fs::read(d.join("cold.tar")).unwrap(),
        "{format}, {what}: the rebuilt archive differs from a cold build"
    );
    ok(vibesys(d)
        .args(["image", "inspect", "--verify", out])
        .output()
        .unwrap());
}

/// The `.OUT.edit-*` files next to `out`.
fn renamed(d: &Path, out: &str) -> Vec<String> {
    std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!(".{out}.edit-")))
        .collect()
}

#[test]
fn every_edit_gives_the_bytes_of_a_cold_build() {
    let t = work();
    let d = t.path();
    let edits = [
        ("nothing changed", ""),
        ("a file changed", "echo more >> root/big2/b/f"),
        (
            "a file added",
            "head -c 5000 /dev/urandom > root/big1/a/new",
        ),
        (
            "a file grown by pages",
            "head -c 300000 /dev/urandom >> root/big1/c/f",
        ),
        ("a file removed", "rm root/big3/c/f"),
        (
            "a layer appeared",
            "mkdir -p root/big4/a && head -c 9000000 /dev/urandom > root/big4/a/f",
        ),
        ("a layer disappeared", "rm -r root/big4"),
        ("a directory renamed", "mv root/big1 root/big5"),
    ];
    for format in FORMATS {
        new_root(d);
        let out = format!("{format}.tar");
        let log = build(d, &out, format, Some("cache"));
        assert!(log.contains("written anew"), "{log}");
        for (what, script) in edits {
            sh(d, script);
            let before = ino(&d.join(&out));
            let log = build(d, &out, format, Some("cache"));
            // An edit writes over the data after a change of size; where
            // that would move layers read from this very archive out of
            // their order, it is written anew from it instead.
            if !log.contains("a layer it holds would move") {
                assert!(log.contains("edited in place"), "{format}, {what}: {log}");
                assert_eq!(ino(&d.join(&out)), before, "{format}, {what}");
            }
            assert_cold_bytes(d, &out, format, what);
        }
        assert!(renamed(d, &out).is_empty());
    }
}

#[test]
fn an_archive_changed_by_someone_else_is_written_anew() {
    let t = work();
    let d = t.path();
    let tampers = [
        (
            "a byte written",
            "printf x | dd of=a.tar bs=1 seek=5000 conv=notrunc status=none",
        ),
        ("truncated", "truncate -s 8192 a.tar"),
        ("touched", "touch -d @1 a.tar"),
        ("chmod'ed", "chmod 600 a.tar"),
        ("hard-linked elsewhere", "ln a.tar link.tar"),
        (
            "replaced by a symlink",
            "mv a.tar real.tar && ln -s real.tar a.tar",
        ),
        (
            "replaced by a copy",
            "cp -p a.tar copy.tar && mv copy.tar a.tar",
        ),
    ];
    build(d, "a.tar", "archive", Some("cache"));
    for (i, (what, tamper)) in tampers.iter().enumerate() {
        sh(d, &format!("echo {i} >> root/big2/a/f"));
        let log = build(d, "a.tar", "archive", Some("cache"));
        assert!(log.contains("edited in place"), "before {what}: {log}");
        sh(d, tamper);
        let before = ino(&d.join("a.tar"));
        sh(d, &format!("echo {i} >> root/big3/a/f"));
        let log = build(d, "a.tar", "archive", Some("cache"));
        assert!(log.contains("written anew"), "{what}: {log}");
        let m = std::fs::symlink_metadata(d.join("a.tar")).unwrap();
        assert!(m.is_file(), "{what}");
        assert_ne!(m.ino(), before, "{what}");
        assert_cold_bytes(d, "a.tar", "archive", what);
    }
    // What the link and the symlink named was left alone.
    assert_eq!(std::fs::metadata(d.join("link.tar")).unwrap().nlink(), 1);
    assert!(d.join("real.tar").is_file());
}

#[test]
fn a_build_killed_mid_edit_leaves_no_output_and_a_failed_edit_writes_anew() {
    require("strace", "strace");
    let t = work();
    let d = t.path();
    for format in FORMATS {
        let out = format!("{format}.tar");
        build(d, &out, format, Some("cache"));
        // Killed at the edit's first write (the first pwrite64 of a
        // rebuild: layers and documents are written with write(2)).
        sh(d, "echo more >> root/big2/b/f");
        let o = strace_build(d, &out, format, "inject=pwrite64:signal=KILL:when=1")
            .output()
            .unwrap();
        assert!(!o.status.success(), "{format}: not killed");
        assert!(!d.join(&out).exists(), "{format}: a half-edited output");
        assert_eq!(renamed(d, &out).len(), 1, "{format}");
        // The next build, with a cache or without, removes what was left.
        let log = build(d, &out, format, None);
        assert!(
            log.contains("left by an interrupted edit"),
            "{format}: {log}"
        );
        assert!(renamed(d, &out).is_empty(), "{format}");
        assert_cold_bytes(d, &out, format, "after a killed edit");
        build(d, &out, format, Some("cache"));

        // The edit fails (its truncation to the new size: the first
        // ftruncate of the build's main thread; strace counts per thread):
        // the layers it kept in the archive are gone with the half-edited
        // file, so the build is made again and the archive written anew
        // (the inode number says nothing here: the failed edit's file is
        // gone before the new one is made, which may get its number).
        sh(d, "echo more >> root/big3/b/f");
        let o = strace_build(d, &out, format, "inject=ftruncate:error=EIO:when=1")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("VIBESYS_LOG", "vs_image=debug")
            .output()
            .unwrap();
        let log = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{format}: {log}");
        assert!(log.contains("writing it anew"), "{format}: {log}");
        assert!(log.contains("building them again"), "{format}: {log}");
        assert!(log.contains("written anew"), "{format}: {log}");
        assert!(renamed(d, &out).is_empty(), "{format}");
        assert_cold_bytes(d, &out, format, "after a failed edit");
    }
}

/// The cached build of the root to `out` in `d` under `strace -f -e
/// INJECT` (the fault it injects).
fn strace_build(d: &Path, out: &str, format: &str, inject: &str) -> Command {
    let mut c = Command::new("strace");
    c.args(["-f", "-o", "/dev/null", "-e", inject])
        .arg(vibesys_bin())
        .args(build_command(d, out, format, Some("cache")).get_args())
        .current_dir(d);
    c
}

/// Builds the root to `out` with `cache` and asserts that every layer
/// came from the cache.
fn build_all_cached(d: &Path, out: &str, format: &str, cache: &str) {
    let o = build_command(d, out, format, Some(cache))
        .arg("--json")
        .output()
        .unwrap();
    let r = json(&ok(o));
    let layers = r["layers"].as_array().unwrap();
    assert!(layers.iter().all(|l| l["cached"] == true), "{out}: {r}");
}

/// The layer blob files in the cache of 64 KiB or more (smaller layers
/// are written to files and copied, as before).
fn cached_blobs(d: &Path, cache: &str) -> usize {
    let dir = d.join(cache).join("vs-image-v1/blobs/sha256");
    std::fs::read_dir(dir).map_or(0, |r| {
        r.filter(|e| e.as_ref().unwrap().metadata().unwrap().len() >= 1 << 16)
            .count()
    })
}

#[test]
fn a_new_archive_holds_its_layers_and_a_rebuild_keeps_them_from_it() {
    let t = work();
    let d = t.path();
    for format in FORMATS {
        let out = format!("{format}.tar");
        let cache = format!("cache-{format}");
        let log = build(d, &out, format, Some(&cache));
        assert!(
            log.contains("written anew, its layers in place"),
            "{format}: {log}"
        );
        // The layers were written once, into the archive.
        assert_eq!(cached_blobs(d, &cache), 0, "{format}");
        assert_cold_bytes(d, &out, format, "a cold build");
    }
    // Every blob is the one the OCI layout holds (written to files, as
    // before), and the archive's documents name the same image.
    build(d, "layout", "oci", None);
    sh(
        d,
        "rm -rf x && mkdir x && tar -xf archive.tar -C x && diff -r x/blobs layout/blobs && cmp x/index.json layout/index.json",
    );

    // A rebuild keeps the unchanged layers from the archive: edited in
    // place, only the changed layer gets a blob file (in the cache).
    sh(d, "echo more >> root/big2/b/f");
    let log = build(d, "archive.tar", "archive", Some("cache-archive"));
    assert!(log.contains("edited in place"), "{log}");
    assert_eq!(cached_blobs(d, "cache-archive"), 1);
    // Another output path with the same cache reads the layers from the
    // archive the cache recorded: only the mount points' layer, small,
    // was never in an archive.
    build_all_cached(d, "other.tar", "archive", "cache-archive");
    assert_cold_bytes(d, "other.tar", "archive", "another path");
    // So does an OCI layout: its blob files are copied out of the archive.
    build_all_cached(d, "layout2", "oci", "cache-archive");
    build(d, "layout3", "oci", None);
    sh(d, "diff -r layout2 layout3");
    assert_cold_bytes(d, "archive.tar", "archive", "a rebuild");

    // The archive gone: the layers it held are written again.
    std::fs::remove_file(d.join("archive.tar")).unwrap();
    sh(d, "echo more >> root/big3/b/f");
    let log = build(d, "archive.tar", "archive", Some("cache-archive"));
    assert!(log.contains("written anew, its layers in place"), "{log}");
    assert_cold_bytes(d, "archive.tar", "archive", "the archive removed");

    // A layer grown by pages: what follows it is written over, the layers
    // read from the archive moved within it in order, or the archive
    // written anew from it; either way the bytes of a cold build.
    sh(d, "head -c 300000 /dev/urandom >> root/big1/a/f");
    let log = build(d, "archive.tar", "archive", Some("cache-archive"));
    assert!(
        log.contains("edited in place") || log.contains("a layer it holds would move"),
        "{log}"
    );
    assert_cold_bytes(d, "archive.tar", "archive", "a layer grown");
}
