//! Running the real `git` with a controlled environment.
//!
//! Variables that would redirect git to another repository are removed, and
//! hooks and fsmonitor are disabled: vibesys runs git on a project the agent
//! may have written to, outside any confinement.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::{Result, RuntimeError};

/// Environment variables that point git at other repositories or configs.
const GIT_ENV_REMOVE: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_EXTERNAL_DIFF",
    "GIT_PAGER",
];

/// Most of git's stderr quoted in an error.
const STDERR_LIMIT: usize = 4096;

fn command(dir: &Path, args: &[&OsStr]) -> Command {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args([
            "--no-pager",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "log.showSignature=false",
            "-c",
            "core.quotePath=false",
        ])
        .args(args)
        .stdin(Stdio::null());
    for var in GIT_ENV_REMOVE {
        cmd.env_remove(var);
    }
    cmd.env("GIT_TERMINAL_PROMPT", "0");
    cmd
}

fn describe(args: &[&OsStr]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

fn spawn_error(e: std::io::Error) -> RuntimeError {
    RuntimeError::GitUnavailable { source: e }
}

/// Runs git in `dir`; returns stdout when it exits 0, otherwise a
/// [`RuntimeError::Git`] with its stderr.
pub(crate) fn run(dir: &Path, args: &[&OsStr]) -> Result<Vec<u8>> {
    let out = command(dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(spawn_error)?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(failure(dir, args, &out.status, &out.stderr))
    }
}

fn failure(
    dir: &Path,
    args: &[&OsStr],
    status: &std::process::ExitStatus,
    stderr: &[u8],
) -> RuntimeError {
    let mut s = String::from_utf8_lossy(&stderr[..stderr.len().min(STDERR_LIMIT)])
        .trim()
        .to_owned();
    if stderr.len() > STDERR_LIMIT {
        s.push_str(" ...");
    }
    RuntimeError::Git {
        dir: dir.to_path_buf(),
        args: describe(args),
        status: status.to_string(),
        stderr: s,
    }
}

/// Runs git in `dir` and feeds each NUL-terminated record of its stdout to
/// `each` without holding the whole output. Records longer than 64 KiB are
/// cut (git paths are far shorter).
pub(crate) fn for_each_nul_record(
    dir: &Path,
    args: &[&OsStr],
    mut each: impl FnMut(&[u8]),
) -> Result<()> {
    const RECORD_LIMIT: u64 = 64 * 1024;
    let mut child = command(dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(spawn_error)?;
    let stderr_pipe = child.stderr.take();
    // Drain stderr on its own thread so git never blocks on a full pipe.
    let stderr_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = stderr_pipe {
            let _ = (&mut p).take(STDERR_LIMIT as u64 + 1).read_to_end(&mut buf);
            let _ = std::io::copy(&mut p, &mut std::io::sink());
        }
        buf
    });
    let mut read_err = None;
    if let Some(stdout) = child.stdout.take() {
        let mut reader = BufReader::new(stdout);
        let mut record = Vec::new();
        loop {
            record.clear();
            match (&mut reader).take(RECORD_LIMIT).read_until(0, &mut record) {
                Ok(0) => break,
                Ok(_) => {
                    if record.last() == Some(&0) {
                        record.pop();
                    } else if record.len() as u64 == RECORD_LIMIT {
                        // Skip the rest of an overlong record.
                        let mut rest = Vec::new();
                        let _ = reader.read_until(0, &mut rest);
                    }
                    each(&record);
                }
                Err(e) => {
                    read_err = Some(e);
                    break;
                }
            }
        }
    }
    let status = child.wait().map_err(spawn_error)?;
    let stderr = stderr_thread.join().unwrap_or_default();
    if !status.success() {
        return Err(failure(dir, args, &status, &stderr));
    }
    if let Some(e) = read_err {
        return Err(RuntimeError::io("read git output in", dir, e));
    }
    Ok(())
}

/// Whether `dir` or one of its ancestors holds a `.git` entry.
pub(crate) fn inside_repository(dir: &Path) -> bool {
    dir.ancestors()
        .any(|d| d.join(".git").symlink_metadata().is_ok())
}
