//! The trusted candidate build (DESIGN.md section 1, "candidate build").
//!
//! The task's `[build]` argv (from the project's `vibesys.toml`, never from
//! the candidate's commit) runs under agent confinement in a fresh
//! checkout of the measured commit ([`BuildCheckout`]). Each declared
//! output is then verified by path (inside the checkout, no symlink on any
//! component: every component is opened with `O_NOFOLLOW` relative to its
//! already-opened parent), by type (a regular file, never a symlink, fifo
//! or directory) and by sha256, and its verified bytes are copied outside
//! every workspace into the hidden run record
//! (`runs/<run>/artifacts/<sha256>`, mode 0444 or 0555). The record
//! `runs/<run>/builds/<commit>.json` is written atomically.
//! [`TrustedBuild::load_output`] re-checks the sha256 before handing out an
//! artifact, so evaluation loads exactly the verified bytes.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Seek};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use vs_sandbox::Confinement;

use crate::BuildError;
use crate::error::{Result, RuntimeError};
use crate::fsutil::{
    CopyError, copy_hashed, ensure_dir_chain, existing_dir_chain, kind_name, random_bytes,
    read_bounded, write_atomic,
};
use crate::gate::{self, CONFIG_FILE, ProtectedSet};
use crate::id::{CandidateId, RunId};
use crate::state::{STATE_DIR, StateLayout};
use crate::worktree::CandidateWorktree;
use crate::{git, time};

/// Version of the build record schema written by this vibesys.
pub const BUILD_SCHEMA_VERSION: u32 = 1;

/// Largest declared output copied into the run record.
pub const MAX_OUTPUT_BYTES: u64 = 8 * 1024 * 1024 * 1024;

/// Most outputs one build may declare.
const MAX_OUTPUTS: usize = 256;
/// Longest declared output path.
const MAX_OUTPUT_PATH: usize = 1024;
/// Most argv elements and longest element.
const MAX_ARGV: usize = 1024;
const MAX_ARG_LEN: usize = 64 * 1024;
/// Longest timeout accepted (one week).
const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;
/// Largest configuration or record read.
const SMALL_FILE_LIMIT: u64 = 4 * 1024 * 1024;

/// `[build]` of `vibesys.toml` as written; unknown keys are an error.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBuild {
    argv: Vec<String>,
    outputs: Vec<String>,
    #[serde(default)]
    timeout_secs: Option<u64>,
}

/// The task's build: the argv, the declared outputs and an optional limit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BuildSpec {
    argv: Vec<String>,
    outputs: Vec<String>,
    timeout_secs: Option<u64>,
}

impl BuildSpec {
    /// Reads `[build]` from the project's own `vibesys.toml` (the trusted
    /// task definition, not the candidate's copy).
    pub fn load(layout: &StateLayout) -> Result<Self> {
        let path = layout.project().join(CONFIG_FILE);
        let Some(bytes) = read_bounded(&path, SMALL_FILE_LIMIT)? else {
            return Err(BuildError::BuildNotConfigured { path }.into());
        };
        let text = String::from_utf8(bytes).map_err(|_| RuntimeError::InvalidConfig {
            path: path.clone(),
            reason: "not UTF-8".to_owned(),
        })?;
        Self::parse(&text, &path)
    }

    /// Parses the text of a `vibesys.toml`; `path` is used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self> {
        let invalid = |reason: String| RuntimeError::InvalidConfig {
            path: path.to_path_buf(),
            reason,
        };
        let table: toml::Table = toml::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let Some(build) = table.get("build") else {
            return Err(BuildError::BuildNotConfigured {
                path: path.to_path_buf(),
            }
            .into());
        };
        if !build.is_table() {
            return Err(invalid("[build] must be a table".to_owned()));
        }
        let raw: RawBuild = build
            .clone()
            .try_into()
            .map_err(|e: toml::de::Error| invalid(format!("[build]: {}", e.message())))?;
        Self::validate(raw).map_err(invalid)
    }

    fn validate(raw: RawBuild) -> std::result::Result<Self, String> {
        if raw.argv.is_empty() {
            return Err("build.argv must not be empty".to_owned());
        }
        if raw.argv.len() > MAX_ARGV {
            return Err(format!("build.argv has more than {MAX_ARGV} elements"));
        }
        if raw.argv[0].is_empty() {
            return Err("build.argv[0] must not be empty".to_owned());
        }
        if let Some(a) = raw
            .argv
            .iter()
            .find(|a| a.contains('\0') || a.len() > MAX_ARG_LEN)
        {
            return Err(format!(
                "build.argv element {:?} contains NUL or is longer than {MAX_ARG_LEN} bytes",
                a.chars().take(64).collect::<String>()
            ));
        }
        if raw.outputs.is_empty() {
            return Err("build.outputs must name at least one output".to_owned());
        }
        if raw.outputs.len() > MAX_OUTPUTS {
            return Err(format!("build.outputs has more than {MAX_OUTPUTS} entries"));
        }
        let mut seen = std::collections::BTreeSet::new();
        for out in &raw.outputs {
            check_output_path(out).map_err(|reason| format!("build.outputs {out:?}: {reason}"))?;
            if !seen.insert(out.as_str()) {
                return Err(format!("build.outputs lists {out:?} twice"));
            }
        }
        match raw.timeout_secs {
            Some(0) => return Err("build.timeout_secs must be at least 1".to_owned()),
            Some(s) if s > MAX_TIMEOUT_SECS => {
                return Err(format!(
                    "build.timeout_secs must be at most {MAX_TIMEOUT_SECS}"
                ));
            }
            _ => {}
        }
        Ok(Self {
            argv: raw.argv,
            outputs: raw.outputs,
            timeout_secs: raw.timeout_secs,
        })
    }

    /// The build command.
    pub fn argv(&self) -> &[String] {
        &self.argv
    }

    /// The declared outputs, relative to the checkout.
    pub fn outputs(&self) -> &[String] {
        &self.outputs
    }

    /// Whether `path` (`/`-separated, relative to the checkout) is a
    /// declared output or a directory on the way to one.
    pub fn makes(&self, path: &str) -> bool {
        self.outputs.iter().any(|o| {
            o == path
                || o.strip_prefix(path)
                    .is_some_and(|rest| rest.starts_with('/'))
        })
    }

    /// The time limit in seconds, if any.
    pub fn timeout_secs(&self) -> Option<u64> {
        self.timeout_secs
    }
}

/// A declared output path: relative, `/`-separated plain components (no
/// `.`, `..`, empty component, leading or trailing `/`), no NUL.
fn check_output_path(path: &str) -> std::result::Result<(), &'static str> {
    if path.is_empty() {
        return Err("it is empty");
    }
    if path.len() > MAX_OUTPUT_PATH {
        return Err("it is longer than 1024 bytes");
    }
    if path.starts_with('/') {
        return Err("it must be relative to the checkout");
    }
    if path.contains('\0') {
        return Err("it contains NUL");
    }
    for comp in path.split('/') {
        match comp {
            "" => return Err("it has an empty component (a doubled or trailing '/')"),
            "." | ".." => return Err("it must not contain '.' or '..' components"),
            _ => {}
        }
    }
    Ok(())
}

/// A fresh checkout of one commit for a trusted build: a candidate
/// worktree with its hidden state directories prepared. Removed when the
/// build finishes or when dropped.
#[derive(Debug)]
pub struct BuildCheckout {
    layout: StateLayout,
    run: RunId,
    worktree: CandidateWorktree,
}

impl BuildCheckout {
    /// Checks out `rev` into a fresh candidate worktree of `run`. The run
    /// state must be initialized; the run's record directory is created.
    pub fn create(layout: &StateLayout, run: &RunId, rev: &str) -> Result<Self> {
        Self::create_as(layout, run, &Self::fresh_id()?, rev)
    }

    /// A fresh, unguessable checkout name (`build-` and 16 hex digits),
    /// for a caller that must name the checkout before it exists (the
    /// slurm build's broker socket is bound to it).
    pub fn fresh_id() -> Result<CandidateId> {
        let mut nonce = [0u8; 8];
        random_bytes(&mut nonce)?;
        CandidateId::new(&format!("build-{}", hex::encode(nonce)))
    }

    /// [`BuildCheckout::create`] under the name `id` (from
    /// [`BuildCheckout::fresh_id`]); fails when a worktree of that name
    /// exists.
    pub fn create_as(
        layout: &StateLayout,
        run: &RunId,
        id: &CandidateId,
        rev: &str,
    ) -> Result<Self> {
        layout.require_initialized()?;
        layout.ensure_run_dir(run)?;
        let worktree = CandidateWorktree::create(layout, run, id, rev)?;
        Ok(Self {
            layout: layout.clone(),
            run: run.clone(),
            worktree,
        })
    }

    /// The checkout directory: the workspace of the build's confinement.
    pub fn path(&self) -> &Path {
        self.worktree.path()
    }

    /// The full commit id checked out.
    pub fn commit(&self) -> &str {
        self.worktree.commit()
    }

    /// Runs `spec`'s argv through `confinement` (whose workspace must be
    /// this checkout) with exactly `env`, then verifies and records every
    /// declared output. Any earlier record of this commit in this run is
    /// removed first, so a failed build never leaves a stale one behind.
    /// The checkout is removed afterwards.
    pub fn build(
        self,
        spec: &BuildSpec,
        confinement: &dyn Confinement,
        env: &[(OsString, OsString)],
    ) -> Result<TrustedBuild> {
        let workspace = confinement.report().workspace.clone();
        let root = fs::canonicalize(self.path())
            .map_err(|e| RuntimeError::io("resolve", self.path(), e))?;
        if workspace != root {
            return Err(BuildError::Confinement {
                source: vs_sandbox::SandboxError::InvalidCommand(format!(
                    "the confinement's workspace {} is not the build checkout {}",
                    workspace.display(),
                    root.display()
                )),
            }
            .into());
        }
        let record_path = TrustedBuild::record_path(&self.layout, &self.run, self.commit());
        match fs::remove_file(&record_path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(RuntimeError::io("remove stale record", &record_path, e)),
        }
        let started_at = time::now_rfc3339();
        let argv: Vec<OsString> = spec.argv.iter().map(OsString::from).collect();
        let wrapped = confinement
            .wrap(&argv)
            .map_err(|source| BuildError::Confinement { source })?;
        // Evaluator-owned paths, as the checkout has them before the build.
        let protect = ProtectedSet::for_build(&self.layout, &self.run)?;
        let before = match &protect {
            Some(set) => Some(set.snapshot(&root, &self.run)?),
            None => None,
        };
        let output = run_with_limit(&wrapped, &root, env, spec.timeout_secs)?;
        if let (Some(set), Some(before)) = (&protect, &before) {
            let mut differences = gate::diff(before, &set.snapshot(&root, &self.run)?);
            // A declared output (and the directories holding it) is what a
            // build adds; changing or removing a protected path never is.
            differences.retain(|d| !(d.change == gate::Change::Added && spec.makes(&d.path)));
            if !differences.is_empty() {
                return Err(BuildError::ProtectedPathsChanged { differences }.into());
            }
        }
        let exit_code = 0;
        let artifacts_rel = Path::new(STATE_DIR)
            .join("runs")
            .join(self.run.as_str())
            .join("artifacts");
        let artifacts = ensure_dir_chain(self.layout.project(), &artifacts_rel)?;
        let mut outputs = Vec::with_capacity(spec.outputs.len());
        for name in &spec.outputs {
            outputs.push(verify_and_copy(&root, name, &artifacts, &self.run)?);
        }
        let record = BuildRecord {
            schema_version: BUILD_SCHEMA_VERSION,
            run_id: self.run.clone(),
            commit: self.commit().to_owned(),
            argv: spec.argv.clone(),
            confinement: confinement.backend().to_owned(),
            started_at,
            finished_at: time::now_rfc3339(),
            exit_code,
            outputs,
        };
        let mut json = serde_json::to_vec_pretty(&record)
            .map_err(|e| RuntimeError::io("encode", &record_path, io::Error::other(e)))?;
        json.push(b'\n');
        let builds = ensure_dir_chain(
            self.layout.project(),
            &Path::new(STATE_DIR)
                .join("runs")
                .join(self.run.as_str())
                .join("builds"),
        )?;
        debug_assert_eq!(Some(builds.as_path()), record_path.parent());
        write_atomic(&record_path, &json)?;
        let layout = self.layout.clone();
        self.worktree.remove()?;
        Ok(TrustedBuild {
            layout,
            record,
            output,
        })
    }
}

/// How much of the build's output a report keeps (the tail).
const FAILURE_LOG_BYTES: usize = 8 * 1024;

/// Runs `argv` in `cwd` with exactly `env` through the command runner: its
/// whole process tree (setsid'd and double-forked descendants included) is
/// killed at `timeout_secs` and when vibesys dies, and its output is kept
/// bounded. Returns the tail of what it printed (stdout, then stderr); a
/// failure carries the same tail.
fn run_with_limit(
    argv: &[OsString],
    cwd: &Path,
    env: &[(OsString, OsString)],
    timeout_secs: Option<u64>,
) -> Result<String> {
    use vs_sandbox::{CommandRunner, CommandSpec, LocalShellRunner};

    let mut spec = CommandSpec::new(argv.iter().cloned(), cwd);
    spec.env = env.iter().cloned().collect();
    if let Some(secs) = timeout_secs {
        spec = spec.timeout(Duration::from_secs(secs));
    }
    let result = LocalShellRunner::default()
        .run(&spec)
        .map_err(|e| BuildError::Confinement { source: e.into() })?;
    if let (true, Some(secs)) = (result.timed_out, timeout_secs) {
        return Err(BuildError::BuildTimedOut { secs }.into());
    }
    let mut log = result.stdout.text_lossy();
    log.push_str(&result.stderr.text_lossy());
    if log.len() > FAILURE_LOG_BYTES {
        let mut cut = log.len() - FAILURE_LOG_BYTES;
        while !log.is_char_boundary(cut) {
            cut += 1;
        }
        log.replace_range(..cut, "[...]");
    }
    if result.success() {
        return Ok(log);
    }
    Err(BuildError::BuildFailed {
        exit_code: result.exit_code,
        log,
    }
    .into())
}

/// One verified output in a build record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildOutput {
    /// The declared path, relative to the checkout.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// sha256 of the content, lowercase hex.
    pub sha256: String,
    /// Whether the checkout's file had an execute bit.
    pub executable: bool,
    /// The verified copy, relative to `.vibesys/state`
    /// (`runs/<run>/artifacts/<sha256>`).
    pub artifact: String,
}

/// The record of one trusted build, `runs/<run>/builds/<commit>.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuildRecord {
    /// Schema version of this record.
    pub schema_version: u32,
    /// The run.
    pub run_id: RunId,
    /// The full commit id built.
    pub commit: String,
    /// The build command.
    pub argv: Vec<String>,
    /// The confinement backend it ran under (`bwrap`, `landlock`).
    pub confinement: String,
    /// When the build started, RFC 3339 UTC.
    pub started_at: String,
    /// When verification finished, RFC 3339 UTC.
    pub finished_at: String,
    /// The build command's exit status (always 0 in a record).
    pub exit_code: i32,
    /// Every declared output, verified.
    pub outputs: Vec<BuildOutput>,
}

fn artifact_rel(run: &RunId, sha256: &str) -> String {
    format!("runs/{}/artifacts/{sha256}", run.as_str())
}

fn is_commit_id(s: &str) -> bool {
    (s.len() == 40 || s.len() == 64)
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

/// Opens `rel` below the already trusted directory `root`, one component
/// at a time, each relative to its opened parent (through
/// `/proc/self/fd/N`) with `O_NOFOLLOW`: no component may be a symlink, and
/// a path swapped after a check cannot redirect the open. The final
/// component must be a regular file. Returns a reason on refusal.
fn open_beneath(root: &Path, rel: &str) -> std::result::Result<File, String> {
    let dir_flags = libc::O_NOFOLLOW | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let mut dir = OpenOptions::new()
        .read(true)
        .custom_flags(dir_flags)
        .open(root)
        .map_err(|e| format!("cannot open the checkout {}: {e}", root.display()))?;
    let comps: Vec<&str> = rel.split('/').collect();
    let mut prefix = String::new();
    for (i, comp) in comps.iter().enumerate() {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(comp);
        let last = i + 1 == comps.len();
        let through = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(comp);
        // Describe what is there without following it.
        let meta = match fs::symlink_metadata(&through) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(if prefix == rel {
                    "it does not exist".to_owned()
                } else {
                    format!("{prefix} does not exist")
                });
            }
            Err(e) => return Err(format!("cannot inspect {prefix}: {e}")),
        };
        let ft = meta.file_type();
        let wanted_ok = if last { ft.is_file() } else { ft.is_dir() };
        if !wanted_ok {
            return Err(if last {
                format!("it is a {}, not a regular file", kind_name(&ft))
            } else {
                format!("{prefix} is a {}, not a directory", kind_name(&ft))
            });
        }
        let flags = if last {
            libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC
        } else {
            dir_flags
        };
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(&through)
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) {
                    format!("{prefix} is a symlink")
                } else {
                    format!("cannot open {prefix}: {e}")
                }
            })?;
        // The object opened, not the name checked, decides.
        let ft = file
            .metadata()
            .map_err(|e| format!("cannot inspect {prefix}: {e}"))?
            .file_type();
        if last && !ft.is_file() {
            return Err(format!("it is a {}, not a regular file", kind_name(&ft)));
        }
        if !last && !ft.is_dir() {
            return Err(format!("{prefix} is a {}, not a directory", kind_name(&ft)));
        }
        if last {
            return Ok(file);
        }
        dir = file;
    }
    Err("it is empty".to_owned())
}

/// Verifies one declared output and copies its bytes, hashed as they are
/// copied, to `artifacts/<sha256>` (mode 0444, or 0555 when the output
/// had an execute bit; atomic).
fn verify_and_copy(root: &Path, name: &str, artifacts: &Path, run: &RunId) -> Result<BuildOutput> {
    let reject = |reason: String| {
        RuntimeError::from(BuildError::OutputRejected {
            path: name.to_owned(),
            reason,
        })
    };
    let mut src = open_beneath(root, name).map_err(reject)?;
    let executable = src
        .metadata()
        .map(|m| m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    let mut nonce = [0u8; 8];
    random_bytes(&mut nonce)?;
    let tmp = artifacts.join(format!(".incoming.{}.tmp", hex::encode(nonce)));
    let copied = (|| -> std::result::Result<(u64, String), RuntimeError> {
        let mut dst = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| RuntimeError::io("create", &tmp, e))?;
        let (size, sha256) =
            copy_hashed(&mut src, &mut dst, MAX_OUTPUT_BYTES).map_err(|e| match e {
                CopyError::Read(e) => reject(format!("cannot read it: {e}")),
                CopyError::Write(e) => RuntimeError::io("write", &tmp, e),
                CopyError::TooLarge => reject(format!(
                    "it is larger than the limit of {MAX_OUTPUT_BYTES} bytes"
                )),
            })?;
        // Read-only for everyone; executable when the output was, so an
        // evaluator can run exactly these bytes.
        let mode = if executable { 0o555 } else { 0o444 };
        dst.set_permissions(fs::Permissions::from_mode(mode))
            .map_err(|e| RuntimeError::io("set permissions of", &tmp, e))?;
        dst.sync_all()
            .map_err(|e| RuntimeError::io("sync", &tmp, e))?;
        Ok((size, sha256))
    })();
    let (size, sha256) = match copied {
        Ok(v) => v,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    };
    let dest = artifacts.join(&sha256);
    if let Err(e) = fs::rename(&tmp, &dest) {
        let _ = fs::remove_file(&tmp);
        return Err(RuntimeError::io("rename into", &dest, e));
    }
    if let Ok(d) = File::open(artifacts) {
        let _ = d.sync_all();
    }
    Ok(BuildOutput {
        path: name.to_owned(),
        size,
        artifact: artifact_rel(run, &sha256),
        sha256,
        executable,
    })
}

/// A verified build of one commit in one run, loaded from its record.
#[derive(Clone, Debug)]
pub struct TrustedBuild {
    layout: StateLayout,
    record: BuildRecord,
    /// What the build printed (the tail), when it was just run.
    output: String,
}

impl TrustedBuild {
    /// Where the record of `commit` in `run` lives (hidden, outside every
    /// workspace the build or the agent ran in).
    pub fn record_path(layout: &StateLayout, run: &RunId, commit: &str) -> PathBuf {
        layout
            .run_dir(run)
            .join("builds")
            .join(format!("{commit}.json"))
    }

    /// Loads the record of `commit` (a full commit id) in `run`.
    pub fn load(layout: &StateLayout, run: &RunId, commit: &str) -> Result<Self> {
        if !is_commit_id(commit) {
            return Err(RuntimeError::InvalidRevision {
                rev: commit.chars().take(80).collect(),
                reason: "a build record is named by a full lowercase commit id",
            });
        }
        let path = Self::record_path(layout, run, commit);
        // Only from the real run record: no symlink on the way there.
        let bytes = match layout.existing_run_dir(run)? {
            Some(dir) => match existing_dir_chain(&dir, Path::new("builds"))? {
                Some(_) => read_bounded(&path, SMALL_FILE_LIMIT)?,
                None => None,
            },
            None => None,
        };
        let Some(bytes) = bytes else {
            return Err(BuildError::BuildRecordMissing {
                run: run.to_string(),
                commit: commit.to_owned(),
                path,
            }
            .into());
        };
        layout.require_untracked(&path)?;
        let invalid = |reason: String| {
            RuntimeError::from(BuildError::InvalidBuildRecord {
                path: path.clone(),
                reason,
            })
        };
        let record: BuildRecord =
            serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        if record.schema_version != BUILD_SCHEMA_VERSION {
            return Err(invalid(format!(
                "schema_version {} is not supported (expected {BUILD_SCHEMA_VERSION})",
                record.schema_version
            )));
        }
        if record.run_id != *run || record.commit != commit {
            return Err(invalid(
                "it names another run or commit than its location".to_owned(),
            ));
        }
        for out in &record.outputs {
            if check_output_path(&out.path).is_err()
                || !is_sha256(&out.sha256)
                || out.artifact != artifact_rel(run, &out.sha256)
            {
                return Err(invalid(format!(
                    "output {:?} has an invalid path, sha256 or artifact",
                    out.path
                )));
            }
        }
        Ok(Self {
            layout: layout.clone(),
            record,
            output: String::new(),
        })
    }

    /// What the build command printed (stdout, then stderr; the last 8
    /// KiB, cut at a character boundary) when this build was just run;
    /// empty for a record loaded from disk. Candidate output: print it
    /// only where control characters are safe or filtered.
    pub fn output(&self) -> &str {
        &self.output
    }

    /// Resolves `rev` in the project's repository to a full commit id.
    pub fn resolve_commit(layout: &StateLayout, rev: &str) -> Result<String> {
        if rev.is_empty() || rev.starts_with('-') || rev.len() > 256 {
            return Err(RuntimeError::InvalidRevision {
                rev: rev.chars().take(256).collect(),
                reason: "it must be 1-256 bytes and not start with '-'",
            });
        }
        let spec = format!("{rev}^{{commit}}");
        let out = git::run(
            layout.project(),
            &[
                OsStr::new("rev-parse"),
                OsStr::new("--verify"),
                OsStr::new("--end-of-options"),
                OsStr::new(&spec),
            ],
        )?;
        Ok(String::from_utf8_lossy(&out).trim().to_owned())
    }

    /// The record.
    pub fn record(&self) -> &BuildRecord {
        &self.record
    }

    /// The record's location.
    pub fn path(&self) -> PathBuf {
        Self::record_path(&self.layout, &self.record.run_id, &self.record.commit)
    }

    /// Opens the verified artifact of output `name`, after re-hashing it
    /// on the same descriptor: the returned file (positioned at 0) has the
    /// recorded sha256, or this fails naming both digests.
    pub fn open_output(&self, name: &str) -> Result<(PathBuf, File)> {
        let out = self
            .record
            .outputs
            .iter()
            .find(|o| o.path == name)
            .ok_or_else(|| BuildError::UnknownOutput {
                name: name.chars().take(MAX_OUTPUT_PATH).collect(),
                commit: self.record.commit.clone(),
            })?;
        let path = self.layout.state_dir().join(&out.artifact);
        let dir = self
            .layout
            .existing_run_dir(&self.record.run_id)?
            .and_then(|d| existing_dir_chain(&d, Path::new("artifacts")).transpose())
            .transpose()?;
        let changed = |found: String| {
            RuntimeError::from(BuildError::ArtifactChanged {
                name: out.path.clone(),
                path: path.clone(),
                expected: out.sha256.clone(),
                found,
            })
        };
        if dir.is_none() {
            return Err(changed(
                "nothing (the artifacts directory is missing)".to_owned(),
            ));
        }
        self.layout.require_untracked(&path)?;
        let meta = match fs::symlink_metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(changed("nothing (the artifact is missing)".to_owned()));
            }
            Err(e) => return Err(RuntimeError::io("inspect", &path, e)),
        };
        if !meta.file_type().is_file() {
            return Err(changed(format!("a {}", kind_name(&meta.file_type()))));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| RuntimeError::io("open", &path, e))?;
        let ft = file
            .metadata()
            .map_err(|e| RuntimeError::io("inspect", &path, e))?
            .file_type();
        if !ft.is_file() {
            return Err(changed(format!("a {}", kind_name(&ft))));
        }
        // No more than the recorded size is read: a longer file changed.
        let found = match copy_hashed(&mut file, &mut io::sink(), out.size) {
            Ok((_, found)) => found,
            Err(CopyError::TooLarge) => return Err(changed("a larger file".to_owned())),
            Err(CopyError::Read(e) | CopyError::Write(e)) => {
                return Err(RuntimeError::io("read", &path, e));
            }
        };
        if found != out.sha256 {
            return Err(changed(found));
        }
        file.rewind()
            .map_err(|e| RuntimeError::io("rewind", &path, e))?;
        Ok((path, file))
    }

    /// The path of output `name`'s verified artifact, after re-checking
    /// its sha256. Fails when it changed after verification. (A path can
    /// be swapped after it is returned; [`TrustedBuild::open_output`] hands
    /// out the checked descriptor itself.)
    pub fn load_output(&self, name: &str) -> Result<PathBuf> {
        self.open_output(name).map(|(path, _)| path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<BuildSpec> {
        BuildSpec::parse(text, Path::new("vibesys.toml"))
    }

    #[test]
    fn parses_a_build_table() {
        let spec = parse(
            "[build]\nargv = [\"sh\", \"-c\", \"make\"]\noutputs = [\"target/bin/app\"]\ntimeout_secs = 60\n[gate]\nprotect = [\"eval\"]\n",
        )
        .unwrap();
        assert_eq!(spec.argv(), ["sh", "-c", "make"]);
        assert_eq!(spec.outputs(), ["target/bin/app"]);
        assert_eq!(spec.timeout_secs(), Some(60));
    }

    #[test]
    fn rejects_bad_tables() {
        let missing = parse("[sandbox]\nhidden = []\n").unwrap_err();
        assert!(matches!(
            missing,
            RuntimeError::Build(BuildError::BuildNotConfigured { .. })
        ));
        for (text, needle) in [
            (
                "[build]\nargv=[\"x\"]\noutputs=[\"a\"]\nargs=[]\n",
                "unknown field",
            ),
            (
                "[build]\nargv=[]\noutputs=[\"a\"]\n",
                "argv must not be empty",
            ),
            ("[build]\nargv=[\"x\"]\noutputs=[]\n", "at least one"),
            ("[build]\nargv=[\"x\"]\noutputs=[\"../a\"]\n", "'..'"),
            ("[build]\nargv=[\"x\"]\noutputs=[\"/a\"]\n", "relative"),
            (
                "[build]\nargv=[\"x\"]\noutputs=[\"a//b\"]\n",
                "empty component",
            ),
            ("[build]\nargv=[\"x\"]\noutputs=[\"a\",\"a\"]\n", "twice"),
            (
                "[build]\nargv=[\"x\"]\noutputs=[\"a\"]\ntimeout_secs=0\n",
                "at least 1",
            ),
            ("build = 3\n", "must be a table"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn outputs_and_their_directories_are_made_by_the_build() {
        let spec = parse("[build]\nargv=[\"x\"]\noutputs=[\"target/bin/app\"]\n").unwrap();
        for p in ["target", "target/bin", "target/bin/app"] {
            assert!(spec.makes(p), "{p}");
        }
        for p in ["targe", "target/bin/app2", "target/b", "other", "."] {
            assert!(!spec.makes(p), "{p}");
        }
    }

    #[test]
    fn open_beneath_refuses_symlinks_and_special_files() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("out")).unwrap();
        fs::write(root.join("out/ok"), b"x").unwrap();
        fs::write(root.join("secret"), b"s").unwrap();
        std::os::unix::fs::symlink("../secret", root.join("out/link")).unwrap();
        std::os::unix::fs::symlink("out", root.join("dirlink")).unwrap();
        assert!(open_beneath(root, "out/ok").is_ok());
        let e = open_beneath(root, "out/link").unwrap_err();
        assert!(e.contains("symlink"), "{e}");
        let e = open_beneath(root, "dirlink/ok").unwrap_err();
        assert!(e.contains("dirlink is a symlink"), "{e}");
        let e = open_beneath(root, "out").unwrap_err();
        assert!(e.contains("directory"), "{e}");
        let e = open_beneath(root, "out/none").unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
    }
}
