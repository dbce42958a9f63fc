//! What the builder publishes is readable by others under the usual umask
//! (images are installed on shared file systems at HPC sites): archives,
//! OCI layouts, their blobs and the lock get `0666/0777 & !umask`, never the
//! 0600/0700 of the temporary files they were written as.

mod image_support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use image_support::{TINY_SPEC, busybox, ok, write};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// `vibesys ARGS` in `dir` under `umask`.
fn vibesys_umask(dir: &Path, umask: &str, args: &[&str]) -> String {
    ok(Command::new("sh")
        .arg("-c")
        .arg(format!("umask {umask} && exec \"$0\" \"$@\""))
        .arg(image_support::vibesys_bin())
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap())
}

#[test]
fn published_outputs_follow_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "s.toml", TINY_SPEC);
    let bb = busybox();
    for (umask, file_mode, dir_mode) in [("022", 0o644, 0o755), ("027", 0o640, 0o750)] {
        let archive = format!("a-{umask}.tar");
        let layout = format!("l-{umask}");
        let lock = format!("{umask}.lock");
        vibesys_umask(
            d,
            umask,
            &["image", "build", "s.toml", "--path", bb, "--out", &archive],
        );
        vibesys_umask(
            d,
            umask,
            &[
                "image", "build", "s.toml", "--path", bb, "--out", &layout, "--format", "oci",
            ],
        );
        vibesys_umask(d, umask, &["image", "pin", &archive, "--lock", &lock]);
        assert_eq!(mode(&d.join(&archive)), file_mode, "archive, umask {umask}");
        assert_eq!(
            mode(&d.join(&layout)),
            dir_mode,
            "layout dir, umask {umask}"
        );
        for blob in std::fs::read_dir(d.join(&layout).join("blobs/sha256")).unwrap() {
            assert_eq!(
                mode(&blob.unwrap().path()),
                file_mode,
                "blob, umask {umask}"
            );
        }
        assert_eq!(mode(&d.join(&lock)), file_mode, "lock, umask {umask}");
    }
}
