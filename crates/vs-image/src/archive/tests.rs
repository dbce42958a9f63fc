//! The archive layout (aligned blob data, readable by a tar reader) and
//! the in-place edit: for every edit pattern and format, an edited archive
//! has the bytes of a new one.

use std::io::Read;
use std::os::unix::fs::MetadataExt;

use super::*;

/// Blobs from their files only.
const NO_SOURCES: Sources<'static> = Sources {
    new: None,
    own: None,
    others: &[],
};

/// Deterministic bytes: `len` of them, varied by `seed`.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// The blob of `content` in `dir`.
fn blob(dir: &Path, content: &[u8]) -> (Digest, BlobSrc) {
    let d = Digest::of(content);
    let p = dir.join(d.hex());
    if !p.exists() {
        std::fs::write(&p, content).unwrap();
    }
    (d, BlobSrc::File(p))
}

/// Puts an image of `layers` at `out` as `format`, through [`put`]; the
/// config, two more documents (one bigger than a page) and the small
/// members are made from the layers, as a build makes them.
fn put_image(
    dir: &Path,
    out: &Path,
    format: OutputFormat,
    layers: &[Vec<u8>],
    cache: Option<&Cache>,
) -> Put {
    put_image_from(dir, out, format, layers, cache, false)
}

/// [`put_image`]; `own`: the layers the archive at `out` holds (per its
/// record in `cache`) are read from it, as a rebuild reads layers that
/// have no blob file.
fn put_image_from(
    dir: &Path,
    out: &Path,
    format: OutputFormat,
    layers: &[Vec<u8>],
    cache: Option<&Cache>,
    own: bool,
) -> Put {
    let store = dir.join("blobs");
    std::fs::create_dir_all(&store).unwrap();
    let old = cache
        .filter(|_| own)
        .and_then(|c| edit::Place::of(out, c))
        .and_then(|p| p.old());
    let mut blobs: Vec<(Digest, BlobSrc)> = layers
        .iter()
        .map(|l| {
            let d = Digest::of(l);
            let size = l.len() as u64;
            match old.as_ref().and_then(|o| o.find(&d, size)) {
                Some(at) => (
                    d,
                    BlobSrc::InArchive {
                        archive: ArchiveId::Own,
                        at,
                        size,
                    },
                ),
                None => blob(&store, l),
            }
        })
        .collect();
    let layer_digests: Vec<Digest> = blobs.iter().map(|(d, _)| d.clone()).collect();
    let listing: String = layer_digests.iter().map(|d| format!("{d}\n")).collect();
    let config = blob(&store, format!("config of\n{listing}").as_bytes());
    let sbom = blob(&store, listing.repeat(80).as_bytes());
    let empty = blob(&store, b"{}");
    let config_digest = config.0.clone();
    blobs.extend([config, sbom, empty]);
    blobs.sort_by(|a, b| a.0.cmp(&b.0));
    blobs.dedup_by(|a, b| a.0 == b.0);
    let index = format!("index naming {config_digest}");
    let manifest = format!("manifest.json naming {listing}");
    let repositories = format!("repositories naming {}", layers.len());
    let docs = Docs {
        index: index.as_bytes(),
        docker_manifest: manifest.as_bytes(),
        docker_only_manifest: manifest.as_bytes(),
        repositories: repositories.as_bytes(),
        config: &config_digest,
        layers: &layer_digests,
    };
    let sources = Sources {
        new: None,
        own: old.as_ref(),
        others: &[],
    };
    let members = members(format, &blobs, &sources, &docs, out).unwrap();
    let layout = lay_out(&members, 1).unwrap();
    put(out, &layout, cache, &sources).unwrap()
}

/// Fails the test where an edit in place cannot happen.
fn editable_dir() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let fs = rustix::fs::statfs(t.path()).unwrap().f_type as u64;
    assert!(
        fs == 0xEF53 || fs == 0x5846_5342,
        "{} is not on ext4 or XFS, where archives are edited in place: set TMPDIR",
        t.path().display()
    );
    t
}

/// Every member of the tar `bytes`: (name, data offset, data).
fn read_members(bytes: &[u8]) -> Vec<(String, u64, Vec<u8>)> {
    let mut ar = tar::Archive::new(bytes);
    ar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = e.path().unwrap().to_string_lossy().into_owned();
            let at = e.raw_file_position();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (name, at, data)
        })
        .collect()
}

const FORMATS: [OutputFormat; 3] = [
    OutputFormat::Archive,
    OutputFormat::OciArchive,
    OutputFormat::DockerArchive,
];

#[test]
fn blob_data_starts_at_page_boundaries_and_reads_back() {
    let t = tempfile::tempdir().unwrap();
    let layers: Vec<Vec<u8>> = [10_000, 3000, 8192, 300_000]
        .iter()
        .enumerate()
        .map(|(i, &n)| bytes(i as u64, n))
        .collect();
    for format in FORMATS {
        let out = t.path().join(format!("{}.tar", format.as_str()));
        put_image(t.path(), &out, format, &layers, None);
        let archive = std::fs::read(&out).unwrap();
        let members = read_members(&archive);
        let mut blobs = 0;
        for (name, at, data) in &members {
            let digest = name
                .strip_prefix("blobs/sha256/")
                .or_else(|| name.strip_suffix(".tar"))
                .or_else(|| name.strip_suffix(".json"));
            if let Some(hex) = digest.filter(|h| h.len() == 64) {
                assert_eq!(at % ALIGN, 0, "{format:?} {name} at {at}");
                assert_eq!(Digest::of(data).hex(), hex, "{format:?} {name}");
                blobs += 1;
            }
        }
        let expected = match format {
            OutputFormat::DockerArchive => layers.len() + 1,
            _ => layers.len() + 3,
        };
        assert_eq!(blobs, expected, "{format:?}: {members:?}");
        // The layers come bottom first, before the other blobs.
        let names: Vec<&str> = members.iter().map(|m| m.0.as_str()).collect();
        let first_layer = names
            .iter()
            .position(|n| n.contains(Digest::of(&layers[0]).hex()))
            .unwrap();
        let last_layer = names
            .iter()
            .position(|n| n.contains(Digest::of(&layers[3]).hex()))
            .unwrap();
        assert!(first_layer < last_layer, "{names:?}");
        // Same inputs, same bytes.
        let again = t.path().join("again.tar");
        put_image(t.path(), &again, format, &layers, None);
        assert!(std::fs::read(&again).unwrap() == archive, "{format:?}");
    }
}

/// Layer sets, each an edit of the one before (the first is the start).
fn edits() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let l = |seed: u64, len: usize| bytes(seed, len);
    let base = vec![
        l(1, 10_000),
        l(2, 300_000),
        l(3, 50_000),
        l(4, 1_000_000),
        l(5, 3000),
        l(6, 70_000),
    ];
    let mut one_byte = base.clone();
    one_byte[3][500_000] ^= 1;
    let mut grown = one_byte.clone();
    grown[1].extend(l(7, 20_000));
    let mut shrunk = grown.clone();
    shrunk[3].truncate(900_000);
    let mut added = shrunk.clone();
    added.insert(2, l(8, 123_456));
    let mut removed = added.clone();
    removed.remove(3);
    let mut reordered = removed.clone();
    reordered.swap(1, 3);
    let mut top_added = reordered.clone();
    top_added.push(l(9, 40_960));
    let mut top_removed = top_added.clone();
    top_removed.pop();
    let mut bottom_changed = top_removed.clone();
    bottom_changed[0] = l(10, 90_000);
    let mut whole_pages = bottom_changed.clone();
    whole_pages[2] = l(11, 65_536);
    let all_new: Vec<Vec<u8>> = (0..4)
        .map(|i| l(20 + i, 200_000 + 777 * i as usize))
        .collect();
    vec![
        ("start", base),
        ("nothing changed", vec![]),
        ("one byte of a layer changed", one_byte),
        ("a layer grown by pages", grown),
        ("a layer shrunk by pages", shrunk),
        ("a layer added in the middle", added),
        ("a layer removed", removed),
        ("two layers swapped", reordered),
        ("a top layer added", top_added),
        ("the top layer removed", top_removed),
        ("the bottom layer changed", bottom_changed),
        ("a layer of whole pages", whole_pages),
        ("every layer changed", all_new),
    ]
}

/// Runs every edit of [`edits`] in place: each edited archive is the same
/// file, with the bytes of a new one.
fn edits_give_new_bytes(own: bool) {
    let t = editable_dir();
    let d = t.path();
    let cache = Cache::open(&d.join("cache")).unwrap();
    for format in FORMATS {
        let out = d.join(format!("{}.tar", format.as_str()));
        let new = d.join("new.tar");
        let mut anew = 0;
        let mut current = Vec::new();
        for (what, layers) in edits() {
            if !layers.is_empty() {
                current = layers;
            }
            let before = std::fs::metadata(&out).ok().map(|m| m.ino());
            let put = put_image_from(d, &out, format, &current, Some(&cache), own);
            put_image(d, &new, format, &current, None);
            assert!(
                std::fs::read(&out).unwrap() == std::fs::read(&new).unwrap(),
                "{format:?}, {what}: the edited archive differs from a new one"
            );
            match (before, put) {
                (None, Put::New) => {}
                // Layers read from the archive itself that change order:
                // written anew from it.
                (Some(_), Put::New) if own && what.contains("swapped") => {
                    anew += 1;
                }
                (Some(ino), Put::Edited(e)) => {
                    assert_eq!(std::fs::metadata(&out).unwrap().ino(), ino, "{what}");
                    if what == "nothing changed" || what == "one byte of a layer changed" {
                        assert!(e.kept + 2 >= e.bodies, "{format:?}, {what}: {e:?}");
                    }
                }
                (before, put) => panic!("{format:?}, {what}: {before:?} {put:?}"),
            }
        }
        if own {
            assert!(anew <= 1, "{format:?}: {anew} edits written anew");
        }
        assert!(
            std::fs::read_dir(d).unwrap().all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".edit-")),
            "an edit left its renamed file"
        );
    }
}

#[test]
fn edits_with_layers_from_the_archive_itself_give_the_bytes_of_a_new_archive() {
    // The layers move within the file, in place.
    edits_give_new_bytes(true);
}

#[test]
fn edits_writing_over_the_data_give_the_bytes_of_a_new_archive() {
    edits_give_new_bytes(false);
}

#[test]
fn a_changed_file_or_a_link_is_written_anew() {
    let t = editable_dir();
    let d = t.path();
    let cache = Cache::open(&d.join("cache")).unwrap();
    let out = d.join("a.tar");
    let layers = vec![bytes(1, 100_000), bytes(2, 200_000)];
    let mut changed = layers.clone();
    changed[1][7] ^= 1;
    let put = |l: &[Vec<u8>]| put_image(d, &out, OutputFormat::Archive, l, Some(&cache));
    assert!(matches!(put(&layers), Put::New));
    assert!(matches!(put(&changed), Put::Edited(_)));
    let tampers: [(&str, &dyn Fn()); 6] = [
        ("a byte written", &|| {
            let f = std::fs::OpenOptions::new().write(true).open(&out).unwrap();
            f.write_all_at(b"x", 5000).unwrap();
        }),
        ("truncated", &|| {
            let f = std::fs::OpenOptions::new().write(true).open(&out).unwrap();
            f.set_len(4096).unwrap();
        }),
        ("hard-linked elsewhere", &|| {
            std::fs::hard_link(&out, d.join("link.tar")).unwrap();
        }),
        ("replaced by a symlink to itself", &|| {
            std::fs::rename(&out, d.join("real.tar")).unwrap();
            std::os::unix::fs::symlink(d.join("real.tar"), &out).unwrap();
        }),
        ("replaced by a copy", &|| {
            std::fs::copy(&out, d.join("copy.tar")).unwrap();
            std::fs::rename(d.join("copy.tar"), &out).unwrap();
        }),
        ("chmod'ed", &|| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o600)).unwrap();
        }),
    ];
    let new = d.join("new.tar");
    for (i, (what, tamper)) in tampers.iter().enumerate() {
        let l = if i % 2 == 0 { &layers } else { &changed };
        let other = if i % 2 == 0 { &changed } else { &layers };
        assert!(matches!(put(l), Put::Edited(_)), "before {what}");
        tamper();
        let ino = std::fs::symlink_metadata(&out).unwrap().ino();
        assert!(matches!(put(other), Put::New), "{what}");
        assert!(
            std::fs::symlink_metadata(&out)
                .unwrap()
                .file_type()
                .is_file(),
            "{what}"
        );
        assert_ne!(
            std::fs::symlink_metadata(&out).unwrap().ino(),
            ino,
            "{what}"
        );
        put_image(d, &new, OutputFormat::Archive, other, None);
        assert!(
            std::fs::read(&out).unwrap() == std::fs::read(&new).unwrap(),
            "{what}: differs from a new archive"
        );
    }
    // The hard link and the symlink's target kept what they held.
    assert_eq!(std::fs::metadata(d.join("link.tar")).unwrap().nlink(), 1);
    assert!(d.join("real.tar").is_file());
}

#[test]
fn an_edit_that_fails_leaves_no_half_edited_output() {
    let t = editable_dir();
    let d = t.path();
    let cache = Cache::open(&d.join("cache")).unwrap();
    let out = d.join("a.tar");
    let layers = vec![bytes(1, 100_000), bytes(2, 200_000), bytes(3, 50_000)];
    put_image(d, &out, OutputFormat::Archive, &layers, Some(&cache));
    // A new layer whose blob vanishes once laid out: the edit fails while
    // copying it, after the other bytes were written.
    let store = d.join("blobs");
    let mut changed = layers.clone();
    changed[1] = bytes(4, 300_000);
    let BlobSrc::File(vanishing) = blob(&store, &changed[1]).1 else {
        unreachable!()
    };
    let blobs = vec![
        blob(&store, &changed[0]),
        (Digest::of(&changed[1]), BlobSrc::File(vanishing.clone())),
        blob(&store, &changed[2]),
    ];
    let digests: Vec<Digest> = blobs.iter().map(|b| b.0.clone()).collect();
    let docs = Docs {
        index: b"i",
        docker_manifest: b"m",
        docker_only_manifest: b"m",
        repositories: b"r",
        config: &digests[0],
        layers: &digests,
    };
    let sources = NO_SOURCES;
    let members = members(OutputFormat::Archive, &blobs, &sources, &docs, &out).unwrap();
    let layout = lay_out(&members, 1).unwrap();
    std::fs::remove_file(&vanishing).unwrap();
    let fail = put(&out, &layout, Some(&cache), &sources);
    let err = fail.unwrap_err().to_string();
    assert!(err.contains(vanishing.to_str().unwrap()), "{err}");
    // The edit failed, and so did writing the archive anew: no output, no
    // renamed file, no temporary file.
    let left: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tar") || n.contains(".a.tar."))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_stale_renamed_file_is_removed_unless_locked() {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let out = d.join("a.tar");
    let stale = d.join(".a.tar.edit-abc123");
    let live = d.join(".a.tar.edit-def456");
    let other = d.join(".b.tar.edit-abc123");
    for p in [&stale, &live, &other] {
        std::fs::write(p, b"x").unwrap();
    }
    let held = File::open(&live).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    edit::sweep(&out);
    assert!(!stale.exists());
    assert!(live.exists());
    assert!(other.exists());
}

#[test]
fn blobs_read_from_an_archive_that_changes_meanwhile_are_refused() {
    let t = editable_dir();
    let d = t.path();
    let cache = Cache::open(&d.join("cache")).unwrap();
    let layers = vec![bytes(1, 300_000), bytes(2, 70_000)];
    let first = d.join("first.tar");
    put_image(d, &first, OutputFormat::Archive, &layers, Some(&cache));
    let second = d.join("second.tar");
    let others = edit::recorded_archives(&cache, &second);
    assert_eq!(others.len(), 1, "the first archive is recorded");
    // The second archive's layers come from the first.
    let mut blobs: Vec<(Digest, BlobSrc)> = layers
        .iter()
        .map(|l| {
            let d = Digest::of(l);
            let at = others[0].find(&d, l.len() as u64).unwrap();
            let src = BlobSrc::InArchive {
                archive: ArchiveId::Other(0),
                at,
                size: l.len() as u64,
            };
            (d, src)
        })
        .collect();
    let config = blob(&d.join("blobs"), b"config");
    blobs.push(config.clone());
    blobs.sort_by(|a, b| a.0.cmp(&b.0));
    let layer_digests: Vec<Digest> = layers.iter().map(|l| Digest::of(l)).collect();
    let docs = Docs {
        index: b"i",
        docker_manifest: b"m",
        docker_only_manifest: b"m",
        repositories: b"r",
        config: &config.0,
        layers: &layer_digests,
    };
    let sources = Sources {
        new: None,
        own: None,
        others: &others,
    };
    let members = members(OutputFormat::Archive, &blobs, &sources, &docs, &second).unwrap();
    let layout = lay_out(&members, 1).unwrap();
    // Unchanged: the layers are copied out of the first archive.
    write_new(&second, &layout, &sources).unwrap();
    let archive = std::fs::read(&second).unwrap();
    for (name, _, data) in read_members(&archive) {
        if let Some(hex) = name.strip_prefix("blobs/sha256/").filter(|h| h.len() == 64) {
            assert_eq!(Digest::of(&data).hex(), hex, "{name}");
        }
    }
    // Written meanwhile (its ctime moves): refused, nothing put in place.
    std::fs::remove_file(&second).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&first)
        .unwrap()
        .set_len(std::fs::metadata(&first).unwrap().len())
        .unwrap();
    let err = write_new(&second, &layout, &sources).unwrap_err();
    assert!(matches!(err, Error::OldArchiveChanged { .. }), "{err}");
    assert!(!second.exists());
    // And the first archive is no longer a source at all.
    assert!(edit::recorded_archives(&cache, &second).is_empty());
}
