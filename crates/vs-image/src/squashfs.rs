//! The squashfs output: layers flattened into a rootfs (upper layers win),
//! packed by `mksquashfs` with fixed times and root ownership.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::digest::HashReader;
use crate::error::Error;
use crate::files::{file_name, parent_of};
use crate::input::Kind;
use crate::layer::LayerPlan;
use crate::options::{BuildOptions, Compression, Progress};
use crate::report::BuildReport;

pub(crate) fn build(
    opts: &BuildOptions,
    plans: &[LayerPlan],
    progress: &dyn Progress,
) -> Result<BuildReport, Error> {
    let out_dir = parent_of(&opts.out);
    let stage = tempfile::Builder::new()
        .prefix(&format!(".{}.tmp-", file_name(&opts.out)))
        .tempdir_in(&out_dir)
        .map_err(|e| Error::io("create temporary directory in", &out_dir, e))?;
    let root = stage.path().join("rootfs");
    std::fs::create_dir(&root).map_err(|e| Error::io("create", &root, e))?;
    progress.begin(plans.len(), plans.iter().map(LayerPlan::size).sum());
    let mut symlinks: BTreeSet<String> = BTreeSet::new();
    for p in plans {
        flatten(p, &root, &mut symlinks)?;
        progress.layer_done(p.size(), false);
    }
    let img = stage.path().join("image.sqfs");
    let digest = pack(&root, &img, opts.source_date_epoch, opts.compression, None)?;
    std::fs::rename(&img, &opts.out).map_err(|e| Error::io("rename into place", &opts.out, e))?;
    Ok(BuildReport {
        name: opts.spec.name.clone(),
        tag: opts.spec.tag.clone(),
        format: opts.format,
        out: opts.out.clone(),
        manifest_digest: None,
        config_digest: None,
        sbom_digest: None,
        layers: Vec::new(),
        archive_digest: Some(digest),
    })
}

/// Packs the rootfs `root` into the squashfs `img` with fixed times, root
/// ownership and no xattrs (a build and a pull both pack through here);
/// `pseudo` is a mksquashfs pseudo file (`-pf`) that sets modes the rootfs
/// could not hold. Returns the file's digest.
pub(crate) fn pack(
    root: &Path,
    img: &Path,
    epoch: u64,
    compression: Compression,
    pseudo: Option<&Path>,
) -> Result<crate::digest::Digest, Error> {
    let epoch = epoch.to_string();
    let mut cmd = Command::new("mksquashfs");
    cmd.arg(root).arg(img).args([
        "-noappend",
        "-all-root",
        "-no-xattrs",
        "-no-progress",
        "-quiet",
    ]);
    cmd.args(["-mkfs-time", &epoch, "-all-time", &epoch]);
    if let Some(pf) = pseudo {
        cmd.arg("-pf").arg(pf);
    }
    match compression {
        Compression::None => cmd.args(["-noI", "-noD", "-noF", "-noX"]),
        Compression::Gzip => cmd.args(["-comp", "gzip"]),
        Compression::Zstd => cmd.args(["-comp", "zstd"]),
    };
    let out = cmd.output().map_err(|e| Error::Tool {
        tool: "mksquashfs",
        reason: format!("cannot run it ({e}); install squashfs-tools"),
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Tool {
            tool: "mksquashfs",
            reason: format!("{}: {}", out.status, err.trim()),
        });
    }
    let f = std::fs::File::open(img).map_err(|e| Error::io("read", img, e))?;
    let (digest, _) = HashReader::new(f)
        .finish()
        .map_err(|e| Error::io("read", img, e))?;
    Ok(digest)
}

fn flatten(p: &LayerPlan, root: &Path, symlinks: &mut BTreeSet<String>) -> Result<(), Error> {
    let mut links: HashMap<(u64, u64), String> = HashMap::new();
    for (gi, e) in &p.entries {
        // Never write through a symlink an earlier entry created.
        let mut prefix = String::new();
        for c in e.path.split('/') {
            if !prefix.is_empty() && symlinks.contains(&prefix) {
                return Err(Error::UnsafeEntry {
                    layer: "squashfs rootfs".to_owned(),
                    entry: format!("/{}", e.path),
                    reason: format!("/{prefix} is a symlink"),
                });
            }
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(c);
        }
        let dest = root.join(&e.path);
        let io = |op, err| Error::io(op, dest.clone(), err);
        if let Ok(m) = std::fs::symlink_metadata(&dest)
            && !(m.is_dir() && matches!(e.kind, Kind::Dir))
        {
            if m.is_dir() {
                std::fs::remove_dir_all(&dest).map_err(|err| io("remove", err))?;
            } else {
                std::fs::remove_file(&dest).map_err(|err| io("remove", err))?;
            }
            symlinks.remove(&e.path);
        }
        match &e.kind {
            Kind::Dir => {
                std::fs::create_dir_all(&dest).map_err(|err| io("create", err))?;
            }
            Kind::Inline(b) => std::fs::write(&dest, b).map_err(|err| io("write", err))?,
            Kind::File {
                dev, ino, nlink, ..
            } => {
                if *nlink > 1 {
                    if let Some(first) = links.get(&(*dev, *ino)) {
                        std::fs::hard_link(root.join(first), &dest)
                            .map_err(|err| io("link", err))?;
                        continue;
                    }
                    links.insert((*dev, *ino), e.path.clone());
                }
                std::fs::copy(p.source(*gi, e), &dest).map_err(|err| io("write", err))?;
            }
            Kind::Symlink(t) => {
                std::os::unix::fs::symlink(t, &dest).map_err(|err| io("create symlink", err))?;
                symlinks.insert(e.path.clone());
                continue;
            }
        }
        std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(e.mode))
            .map_err(|err| io("chmod", err))?;
    }
    Ok(())
}
