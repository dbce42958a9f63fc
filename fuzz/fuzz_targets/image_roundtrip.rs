//! The image writer's outputs read back: a root tree of fuzzed files,
//! directories and symlinks (names, contents, modes), built with
//! `vs_image::build` (what `vibesys image build --root` calls) into each
//! archive format, then read with `vs_image::inspect(path, true)`.
//!
//! Properties: the reader verifies every image the writer produced, and
//! reports exactly the digests the writer reported (write then read is
//! the identity on the image's identity); building the same tree twice
//! gives the same bytes.
#![no_main]

#[path = "common/mod.rs"]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vs_image::{BuildOptions, Compression, ImageSpec, OutputFormat, Source};

#[derive(Arbitrary, Debug)]
enum Node {
    File(String, Vec<u8>, u16),
    Dir(String),
    Link(String, String),
}

#[derive(Arbitrary, Debug)]
struct Input {
    nodes: Vec<Node>,
    format: u8,
    gzip: bool,
}

fn name(raw: &str) -> Option<String> {
    let n: String = raw
        .chars()
        .filter(|c| *c != '/' && *c != '\0')
        .take(24)
        .collect();
    (!n.is_empty() && n != "." && n != ".." && n != "dev").then_some(n)
}

fn plant(root: &Path, nodes: &[Node]) {
    for node in nodes.iter().take(16) {
        match node {
            Node::File(n, data, mode) => {
                if let Some(n) = name(n) {
                    let p = root.join(n);
                    if std::fs::write(&p, &data[..data.len().min(4096)]).is_ok() {
                        let mode = u32::from(*mode) & 0o777 | 0o400;
                        let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode));
                    }
                }
            }
            Node::Dir(n) => {
                if let Some(n) = name(n) {
                    let _ = std::fs::create_dir(root.join(n));
                }
            }
            Node::Link(n, target) => {
                if let Some(n) = name(n) {
                    let t: String = target.chars().filter(|c| *c != '\0').take(40).collect();
                    if !t.is_empty() {
                        let _ = std::os::unix::fs::symlink(t, root.join(n));
                    }
                }
            }
        }
    }
}

fn build(
    root: &Path,
    out: &Path,
    format: OutputFormat,
    gzip: bool,
) -> Result<vs_image::BuildReport, vs_image::Error> {
    let spec = ImageSpec::parse("name = \"fuzz\"\ntag = \"1\"\n").expect("a valid spec");
    let opts = BuildOptions {
        spec,
        out: out.to_path_buf(),
        format,
        source: Source::Root(root.to_path_buf()),
        compression: if gzip { Compression::Gzip } else { Compression::None },
        source_date_epoch: 1,
        cache: None,
    };
    vs_image::build(&opts, &())
}

fuzz_target!(|input: Input| {
    let root = common::fresh_dir("root");
    plant(&root, &input.nodes);
    let format = match input.format % 3 {
        0 => OutputFormat::Archive,
        1 => OutputFormat::OciArchive,
        _ => OutputFormat::DockerArchive,
    };
    let out = common::scratch().join("out.tar");
    let _ = std::fs::remove_file(&out);
    // The writer may refuse a tree (a name it cannot encode, say): that is
    // its documented error; what it writes must read back.
    let Ok(written) = build(&root, &out, format, input.gzip) else {
        return;
    };
    let report = vs_image::inspect(&out, true).expect("the reader accepts what the writer wrote");
    assert!(report.verified);
    assert_eq!(Some(report.config_digest.clone()), written.config_digest);
    if format != OutputFormat::DockerArchive {
        assert_eq!(report.manifest_digest, written.manifest_digest);
    }
    let read: Vec<_> = report.layers.iter().map(|l| l.diff_id.clone()).collect();
    let built: Vec<_> = written.layers.iter().map(|l| l.diff_id.clone()).collect();
    assert_eq!(read, built, "the layers read back differ from those written");
    // Reproducible: the same tree again gives the same bytes.
    let again = common::scratch().join("again.tar");
    let _ = std::fs::remove_file(&again);
    build(&root, &again, format, input.gzip).expect("the same tree builds twice");
    assert!(
        std::fs::read(&out).ok() == std::fs::read(&again).ok(),
        "two builds of one tree differ"
    );
});
