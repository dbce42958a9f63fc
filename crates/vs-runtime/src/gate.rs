//! The accuracy gate: a trusted BLAKE3 baseline of every protected path,
//! recorded before the agent runs and compared afterwards.
//!
//! The baseline lives in the hidden run record
//! (`.vibesys/state/runs/<run-id>/gate-baseline.json`), written atomically.
//! Directories are walked without following symlinks; a symlink is recorded
//! as a symlink with its target. Files are hashed in parallel (rayon), the
//! biggest first, with a fixed buffer per worker, so files of any size are
//! streamed; a big file's buffers are also hashed on every core.
//!
//! The digests are internal to vibesys (no format outside it reads them),
//! so the hash is chosen for speed: BLAKE3 (SIMD, multi-threaded) hashes
//! several times faster than SHA-256 on a CPU without SHA extensions. The
//! baseline is versioned: schema 1 held SHA-256 digests, schema 2 holds
//! BLAKE3; a baseline of another schema is refused naming both versions,
//! never read as if it were current.

pub use crate::gate_difference::{Change, GateDifference, describe_differences};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::GateError;
use crate::error::{Result, RuntimeError};
use crate::fsutil::{kind_name, open_nofollow, read_bounded, write_atomic};
use crate::id::RunId;
use crate::state::{STATE_DIR, StateLayout};
use crate::time;

/// File name of the baseline inside the run record directory.
pub const BASELINE_FILE: &str = "gate-baseline.json";

/// Version of the baseline schema: 2 since the digests are BLAKE3 (1 held
/// SHA-256 digests and is refused).
pub const BASELINE_SCHEMA_VERSION: u32 = 2;

/// Read buffer of each hashing worker.
pub const HASH_BUFFER_BYTES: usize = 1024 * 1024;

thread_local! {
    /// Each hashing worker's read buffer (allocated once per thread, not per
    /// file).
    static HASH_BUFFER: std::cell::RefCell<Vec<u8>> =
        std::cell::RefCell::new(vec![0u8; HASH_BUFFER_BYTES]);
}

/// Reads at least this big are hashed on every core (below it, splitting
/// costs more than it gains).
const RAYON_MIN_BYTES: usize = 128 * 1024;

/// Largest baseline vibesys loads.
const BASELINE_LIMIT: u64 = 512 * 1024 * 1024;

/// Largest `vibesys.toml` vibesys reads.
const CONFIG_LIMIT: u64 = 1024 * 1024;

/// The project configuration file.
pub const CONFIG_FILE: &str = "vibesys.toml";

/// What a protected path was when it was scanned.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum GateEntry {
    /// A regular file.
    File {
        /// Size in bytes (as hashed).
        size: u64,
        /// Lowercase hex BLAKE3 (256-bit) of the content.
        blake3: String,
        /// Whether any execute bit is set.
        executable: bool,
    },
    /// A symlink, not followed.
    Symlink {
        /// The link target as stored in the link.
        target: String,
    },
    /// A directory (its children are entries of their own).
    Directory,
    /// A fifo, socket, device, or a root reached through a non-directory.
    Special {
        /// What it is.
        kind: String,
    },
    /// A name or link target that is not UTF-8 (only ever seen by a check;
    /// a baseline refuses it), so it always counts as a difference.
    Unrepresentable,
}

/// The result of comparing the protected paths against a baseline.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GateReport {
    /// The run checked.
    pub run_id: RunId,
    /// Number of paths in the baseline.
    pub baseline_entries: usize,
    /// Number of paths found now.
    pub current_entries: usize,
    /// Every difference, sorted by path.
    pub differences: Vec<GateDifference>,
}

impl GateReport {
    /// True when nothing differs.
    pub fn is_clean(&self) -> bool {
        self.differences.is_empty()
    }
}

/// The protected paths of a project: project-relative, `/`-separated, with
/// nested duplicates dropped. `.` is the whole project.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProtectedSet {
    roots: Vec<String>,
}

impl ProtectedSet {
    /// Resolves requested paths (relative to the project, or absolute) for
    /// a new baseline. Each must exist and lie inside the project once
    /// symlinks in its parent are resolved; the last component is kept as
    /// is, so a protected symlink is recorded as a symlink.
    pub fn resolve(layout: &StateLayout, requested: &[PathBuf]) -> Result<Self> {
        if requested.is_empty() {
            return Err(GateError::NothingProtected.into());
        }
        let project = layout.project();
        let mut roots = Vec::with_capacity(requested.len());
        for p in requested {
            if p.as_os_str().is_empty() {
                return Err(GateError::EmptyProtectedPath.into());
            }
            let abs = if p.is_absolute() {
                p.clone()
            } else {
                project.join(p)
            };
            let missing =
                || RuntimeError::from(GateError::ProtectedPathMissing { path: p.clone() });
            let full = match (abs.file_name(), abs.parent()) {
                (Some(name), Some(parent)) if !abs.ends_with("..") => {
                    let parent = fs::canonicalize(parent).map_err(|_| missing())?;
                    parent.join(name)
                }
                _ => fs::canonicalize(&abs).map_err(|_| missing())?,
            };
            let rel = full
                .strip_prefix(project)
                .map_err(|_| GateError::OutsideProject {
                    path: p.clone(),
                    project: project.to_path_buf(),
                })?;
            if full.symlink_metadata().is_err() {
                return Err(missing());
            }
            roots.push(rel_to_key(rel)?);
        }
        Ok(Self::normalized(roots))
    }

    /// The paths listed in `vibesys.toml` under `[gate] protect`, relative
    /// to the project. Empty when the file or the key is absent.
    pub fn configured(layout: &StateLayout) -> Result<Vec<PathBuf>> {
        configured_list(layout, "gate", "protect")
    }

    /// The paths listed in `vibesys.toml` under `[task] protected`
    /// (read-only to the agent and gated), relative to the project. Empty
    /// when the file or the key is absent.
    pub fn task_protected(layout: &StateLayout) -> Result<Vec<PathBuf>> {
        configured_list(layout, "task", "protected")
    }

    /// The protected set a candidate build is checked against: the paths of
    /// `[gate] protect` and `[task] protected` in the project's own
    /// `vibesys.toml`, plus the roots
    /// of the run's baseline when one was recorded (from the real run
    /// record). Paths are project-relative keys and need not exist; `None`
    /// when nothing is protected.
    pub fn for_build(layout: &StateLayout, run: &RunId) -> Result<Option<Self>> {
        let project = layout.project();
        let mut roots = Vec::new();
        let mut listed = Self::configured(layout)?;
        listed.extend(Self::task_protected(layout)?);
        for p in listed {
            if p.as_os_str().is_empty() {
                return Err(GateError::EmptyProtectedPath.into());
            }
            let rel = if p.is_absolute() {
                p.strip_prefix(project)
                    .map_err(|_| GateError::OutsideProject {
                        path: p.clone(),
                        project: project.to_path_buf(),
                    })?
                    .to_path_buf()
            } else {
                p.clone()
            };
            if rel
                .components()
                .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
            {
                return Err(GateError::OutsideProject {
                    path: p.clone(),
                    project: project.to_path_buf(),
                }
                .into());
            }
            roots.push(rel_to_key(&rel)?);
        }
        if layout.existing_run_dir(run)?.is_some()
            && GateBaseline::path(layout, run).symlink_metadata().is_ok()
        {
            roots.extend(GateBaseline::load(layout, run)?.protect);
        }
        if roots.is_empty() {
            return Ok(None);
        }
        Ok(Some(Self::normalized(roots)))
    }

    /// Scans the protected paths below `root` (the project, or a checkout
    /// of one of its commits).
    pub fn snapshot(&self, root: &Path, run: &RunId) -> Result<BTreeMap<String, GateEntry>> {
        scan(root, &self.roots, run, false)
    }

    fn normalized(mut roots: Vec<String>) -> Self {
        roots.sort();
        roots.dedup();
        if roots.iter().any(|r| r == ".") {
            return Self {
                roots: vec![".".to_owned()],
            };
        }
        let mut kept: Vec<String> = Vec::with_capacity(roots.len());
        for r in roots {
            let nested = kept.iter().any(|k| {
                r.strip_prefix(k.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
            });
            if !nested {
                kept.push(r);
            }
        }
        Self { roots: kept }
    }

    /// The protected roots.
    pub fn roots(&self) -> &[String] {
        &self.roots
    }
}

/// A project-relative path as a `/`-separated key; `.` for the root.
fn rel_to_key(rel: &Path) -> Result<String> {
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(s) => {
                parts.push(s.to_str().ok_or_else(|| GateError::NonUtf8Path {
                    path: rel.to_path_buf(),
                })?)
            }
            Component::CurDir => {}
            _ => {
                return Err(GateError::NonUtf8Path {
                    path: rel.to_path_buf(),
                }
                .into());
            }
        }
    }
    if parts.is_empty() {
        Ok(".".to_owned())
    } else {
        Ok(parts.join("/"))
    }
}

/// Whether a stored key is a plain relative path (no `..`, no empty or `.`
/// components, not absolute), or `.`.
fn valid_key(key: &str) -> bool {
    key == "."
        || (!key.is_empty()
            && key
                .split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".." && !c.contains('\0')))
}

fn join_key(parent: &str, name: &str) -> String {
    if parent == "." {
        name.to_owned()
    } else {
        format!("{parent}/{name}")
    }
}

/// The trusted record of the protected paths of one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GateBaseline {
    schema_version: u32,
    run_id: RunId,
    created_at: String,
    protect: Vec<String>,
    entries: BTreeMap<String, GateEntry>,
}

impl GateBaseline {
    /// Where the baseline of `run` lives.
    pub fn path(layout: &StateLayout, run: &RunId) -> PathBuf {
        layout.run_dir(run).join(BASELINE_FILE)
    }

    /// Hashes every protected path and writes the baseline of `run`
    /// atomically into the hidden run record, replacing an earlier one.
    pub fn record(layout: &StateLayout, run: &RunId, protect: &ProtectedSet) -> Result<Self> {
        let dir = layout.ensure_run_dir(run)?;
        let entries = scan(layout.project(), protect.roots(), run, true)?;
        let baseline = Self {
            schema_version: BASELINE_SCHEMA_VERSION,
            run_id: run.clone(),
            created_at: time::now_rfc3339(),
            protect: protect.roots().to_vec(),
            entries,
        };
        let path = dir.join(BASELINE_FILE);
        let mut json = serde_json::to_vec(&baseline)
            .map_err(|e| RuntimeError::io("encode", &path, io::Error::other(e)))?;
        json.push(b'\n');
        write_atomic(&path, &json)?;
        Ok(baseline)
    }

    /// Loads and validates the baseline of `run`, only from the real run
    /// record (no symlink on `.vibesys/state/runs/RUN`).
    pub fn load(layout: &StateLayout, run: &RunId) -> Result<Self> {
        let path = Self::path(layout, run);
        let bytes = match layout.existing_run_dir(run)? {
            Some(_) => read_bounded(&path, BASELINE_LIMIT)?,
            None => None,
        };
        let Some(bytes) = bytes else {
            return Err(GateError::BaselineMissing {
                run: run.to_string(),
                path,
            }
            .into());
        };
        layout.require_untracked(&path)?;
        let invalid = |reason: String| {
            RuntimeError::from(GateError::InvalidBaseline {
                path: path.clone(),
                reason,
            })
        };
        // The version first, read alone: an older schema is refused by
        // its number, not misread (or reported as a stray field).
        let version: SchemaProbe =
            serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        match version.schema_version {
            None => return Err(invalid("it has no schema_version".to_owned())),
            Some(BASELINE_SCHEMA_VERSION) => {}
            Some(found) => {
                return Err(GateError::BaselineVersion {
                    path,
                    found,
                    expected: BASELINE_SCHEMA_VERSION,
                }
                .into());
            }
        }
        let b: Self = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        if &b.run_id != run {
            return Err(invalid(format!("it belongs to run {}", b.run_id)));
        }
        if b.protect.is_empty() {
            return Err(invalid("it protects nothing".to_owned()));
        }
        if let Some(bad) = b
            .protect
            .iter()
            .chain(b.entries.keys())
            .find(|k| !valid_key(k))
        {
            return Err(invalid(format!(
                "path {bad:?} is not a plain relative path"
            )));
        }
        Ok(b)
    }

    /// Scans the protected paths again and reports every difference.
    pub fn check(&self, layout: &StateLayout) -> Result<GateReport> {
        let current = scan(layout.project(), &self.protect, &self.run_id, false)?;
        Ok(GateReport {
            run_id: self.run_id.clone(),
            baseline_entries: self.entries.len(),
            current_entries: current.len(),
            differences: diff(&self.entries, &current),
        })
    }

    /// The run this baseline belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// When it was recorded (RFC 3339 UTC).
    pub fn created_at(&self) -> &str {
        &self.created_at
    }

    /// The protected roots.
    pub fn protect(&self) -> &[String] {
        &self.protect
    }

    /// Every recorded path.
    pub fn entries(&self) -> &BTreeMap<String, GateEntry> {
        &self.entries
    }
}

/// Only the version of a baseline, whatever its other fields.
#[derive(Deserialize)]
struct SchemaProbe {
    schema_version: Option<u32>,
}

/// Every difference between two scans, sorted by path.
pub fn diff(
    before: &BTreeMap<String, GateEntry>,
    after: &BTreeMap<String, GateEntry>,
) -> Vec<GateDifference> {
    let mut out = Vec::new();
    for (path, old) in before {
        match after.get(path) {
            None => out.push(GateDifference {
                change: Change::Removed,
                path: path.clone(),
            }),
            Some(new) if new != old || *new == GateEntry::Unrepresentable => {
                out.push(GateDifference {
                    change: Change::Changed,
                    path: path.clone(),
                })
            }
            Some(_) => {}
        }
    }
    for path in after.keys() {
        if !before.contains_key(path) {
            out.push(GateDifference {
                change: Change::Added,
                path: path.clone(),
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path).then(a.change.cmp(&b.change)));
    out
}

/// Walks the roots without following symlinks and hashes every regular
/// file in parallel. `strict` (recording) refuses non-UTF-8 names; a check
/// records them as [`GateEntry::Unrepresentable`].
fn scan(
    project: &Path,
    roots: &[String],
    run: &RunId,
    strict: bool,
) -> Result<BTreeMap<String, GateEntry>> {
    let own_dir = format!("{STATE_DIR}/runs/{run}/");
    let is_own_record = |key: &str| {
        key.strip_prefix(own_dir.as_str()).is_some_and(|name| {
            name == BASELINE_FILE || name.starts_with(&format!(".{BASELINE_FILE}."))
        })
    };
    let mut entries = BTreeMap::new();
    // (key, path, size when walked)
    let mut files: Vec<(String, PathBuf, u64)> = Vec::new();
    for root in roots {
        if is_own_record(root) {
            continue;
        }
        let abs = if root == "." {
            project.to_path_buf()
        } else {
            project.join(root)
        };
        if !ancestors_are_dirs(project, root) {
            entries.insert(
                root.clone(),
                GateEntry::Special {
                    kind: "path through a symlink or non-directory".to_owned(),
                },
            );
            continue;
        }
        let meta = match fs::symlink_metadata(&abs) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(RuntimeError::io("inspect", &abs, e)),
        };
        let mut stack = vec![(root.clone(), abs, meta)];
        while let Some((key, path, meta)) = stack.pop() {
            let ft = meta.file_type();
            if ft.is_symlink() {
                let target =
                    fs::read_link(&path).map_err(|e| RuntimeError::io("read link", &path, e))?;
                let entry = match target.to_str() {
                    Some(t) => GateEntry::Symlink {
                        target: t.to_owned(),
                    },
                    None if strict => return Err(GateError::NonUtf8Path { path: target }.into()),
                    None => GateEntry::Unrepresentable,
                };
                entries.insert(key, entry);
            } else if ft.is_dir() {
                let rd = fs::read_dir(&path)
                    .map_err(|e| RuntimeError::io("read directory", &path, e))?;
                for child in rd {
                    let child = child.map_err(|e| RuntimeError::io("read directory", &path, e))?;
                    let name = child.file_name();
                    let Some(name) = name.to_str() else {
                        if strict {
                            return Err(GateError::NonUtf8Path { path: child.path() }.into());
                        }
                        let lossy = join_key(&key, &child.file_name().to_string_lossy());
                        entries.insert(lossy, GateEntry::Unrepresentable);
                        continue;
                    };
                    let child_key = join_key(&key, name);
                    if is_own_record(&child_key) {
                        continue;
                    }
                    // DirEntry::metadata does not follow symlinks.
                    let child_meta = child
                        .metadata()
                        .map_err(|e| RuntimeError::io("inspect", child.path(), e))?;
                    stack.push((child_key, child.path(), child_meta));
                }
                entries.insert(key, GateEntry::Directory);
            } else if ft.is_file() {
                files.push((key, path, meta.len()));
            } else {
                entries.insert(
                    key,
                    GateEntry::Special {
                        kind: kind_name(&ft).to_owned(),
                    },
                );
            }
        }
    }
    // Biggest first, so no big file is left for the end on one core; one
    // file per task, each worker reusing its own buffer.
    files.sort_by_key(|f| std::cmp::Reverse(f.2));
    let hashed: Vec<(String, Result<GateEntry>)> = files
        .into_par_iter()
        .with_max_len(1)
        .map(|(key, path, _)| {
            // A worker waiting inside a big file's `update_rayon` may run
            // another file meanwhile: that one gets a buffer of its own.
            let entry = HASH_BUFFER.with(|buf| match buf.try_borrow_mut() {
                Ok(mut buf) => hash_file(&path, &mut buf),
                Err(_) => hash_file(&path, &mut vec![0u8; HASH_BUFFER_BYTES]),
            });
            (key, entry)
        })
        .collect();
    for (key, entry) in hashed {
        entries.insert(key, entry?);
    }
    Ok(entries)
}

/// Whether every component of `root` above its last one is a real
/// directory below `project`.
fn ancestors_are_dirs(project: &Path, root: &str) -> bool {
    if root == "." {
        return true;
    }
    let mut cur = project.to_path_buf();
    let parts: Vec<&str> = root.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        cur.push(part);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_dir() => {}
            _ => return false,
        }
    }
    true
}

/// Streams one file through BLAKE3 with the worker's buffer. Opens without
/// following symlinks or blocking on fifos; whatever is opened is described
/// by its own `fstat`, so a file swapped after the walk is still reported
/// truthfully.
fn hash_file(path: &Path, buf: &mut [u8]) -> Result<GateEntry> {
    let mut file = match open_nofollow(path) {
        Ok(f) => f,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Ok(GateEntry::Special {
                kind: "symlink (replaced during scan)".to_owned(),
            });
        }
        Err(e) => return Err(RuntimeError::io("open", path, e)),
    };
    let meta = file
        .metadata()
        .map_err(|e| RuntimeError::io("inspect", path, e))?;
    if !meta.file_type().is_file() {
        return Ok(GateEntry::Special {
            kind: kind_name(&meta.file_type()).to_owned(),
        });
    }
    let mut hasher = blake3::Hasher::new();
    let mut size: u64 = 0;
    loop {
        match file.read(buf) {
            Ok(0) => break,
            Ok(n) if n >= RAYON_MIN_BYTES => {
                hasher.update_rayon(&buf[..n]);
                size += n as u64;
            }
            Ok(n) => {
                hasher.update(&buf[..n]);
                size += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(RuntimeError::io("read", path, e)),
        }
    }
    Ok(GateEntry::File {
        size,
        blake3: hasher.finalize().to_hex().to_string(),
        executable: meta.permissions().mode() & 0o111 != 0,
    })
}

/// `[section] key` of the project's own `vibesys.toml` as paths: an array
/// of strings; empty when the file, the table or the key is absent.
fn configured_list(layout: &StateLayout, section: &str, key: &str) -> Result<Vec<PathBuf>> {
    configured_paths(layout.project(), section, key)
}

/// `[section] key` of `root/vibesys.toml` as paths (see
/// [`ProtectedSet::task_protected`]).
pub(crate) fn configured_paths(root: &Path, section: &str, key: &str) -> Result<Vec<PathBuf>> {
    let path = root.join(CONFIG_FILE);
    let Some(bytes) = read_bounded(&path, CONFIG_LIMIT)? else {
        return Ok(Vec::new());
    };
    let invalid = |reason: String| RuntimeError::InvalidConfig {
        path: path.clone(),
        reason,
    };
    let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8".to_owned()))?;
    let value: toml::Table = toml::from_str(&text).map_err(|e| invalid(e.to_string()))?;
    let Some(table) = value.get(section) else {
        return Ok(Vec::new());
    };
    let table = table
        .as_table()
        .ok_or_else(|| invalid(format!("[{section}] must be a table")))?;
    let Some(list) = table.get(key) else {
        return Ok(Vec::new());
    };
    let not_strings = || invalid(format!("{section}.{key} must be an array of strings"));
    list.as_array()
        .ok_or_else(not_strings)?
        .iter()
        .map(|v| v.as_str().map(PathBuf::from).ok_or_else(not_strings))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_roots_collapse() {
        let s = ProtectedSet::normalized(vec![
            "a/b".into(),
            "a".into(),
            "ab".into(),
            "a".into(),
            "c/d".into(),
        ]);
        assert_eq!(s.roots(), ["a", "ab", "c/d"]);
        let s = ProtectedSet::normalized(vec!["x".into(), ".".into()]);
        assert_eq!(s.roots(), ["."]);
    }

    #[test]
    fn keys() {
        assert!(valid_key("a/b.c"));
        assert!(valid_key("."));
        for bad in ["", "/a", "a//b", "a/../b", "./a", "a/"] {
            assert!(!valid_key(bad), "{bad}");
        }
    }

    /// The official BLAKE3 test vectors (input byte i is i % 251): the
    /// empty input, one chunk and one byte more, a size split across many
    /// reads of a small buffer, and one hashed on every core.
    #[test]
    fn blake3_of_the_official_test_vectors() {
        let dir = tempfile::tempdir().unwrap();
        for (len, want, buf_len) in [
            (
                0,
                "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
                4,
            ),
            (
                1025,
                "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444",
                4,
            ),
            (
                102400,
                "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085",
                1000,
            ),
            (
                102400,
                "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085",
                HASH_BUFFER_BYTES,
            ),
        ] {
            let p = dir.path().join(format!("f{len}"));
            let content: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            fs::write(&p, &content).unwrap();
            let mut buf = vec![0u8; buf_len];
            let e = hash_file(&p, &mut buf).unwrap();
            assert_eq!(
                e,
                GateEntry::File {
                    size: len as u64,
                    blake3: want.to_owned(),
                    executable: false
                },
                "{len} bytes, {buf_len} byte buffer"
            );
        }
    }
}
