//! Running the real `git` for the framework, hardened against whatever the
//! agent could have written.
//!
//! vibesys runs git outside every confinement, on a repository the agent
//! may have written to (`.git/config`, a linked worktree's
//! `config.worktree`, a committed `.gitattributes`). Every call:
//!
//! - starts from an empty environment: only `PATH`, `HOME` and
//!   `XDG_CONFIG_HOME` pointing below `/dev/null` (nothing there can
//!   exist), `LC_ALL=C`, and the variables below; nothing of the caller's
//!   (`GIT_DIR`, `GIT_SSH_COMMAND`, `GIT_EXTERNAL_DIFF`, `GIT_CONFIG_*`,
//!   ...) reaches git;
//! - ignores system and global configuration and system attributes
//!   (`GIT_CONFIG_NOSYSTEM=1`, `GIT_CONFIG_GLOBAL=/dev/null`,
//!   `GIT_ATTR_NOSYSTEM=1`), replace refs (`GIT_NO_REPLACE_OBJECTS=1`:
//!   a commit id means its own tree) and every transport
//!   (`GIT_ALLOW_PROTOCOL` empty), never prompts and never pages;
//! - overrides, at command-line scope (which wins over every file), a fixed
//!   set of command-valued keys ([`FIXED_OVERRIDES`]: hooks, fsmonitor,
//!   pager, editor, ssh, credential helpers, submodule recursion,
//!   automatic gc), and refuses to run when git did not apply them (a git
//!   before 2.31 ignores `GIT_CONFIG_COUNT`);
//! - first lists the repository's own configuration
//!   (`git config --list --show-scope --show-origin -z`, itself run this
//!   way) and neutralizes every command-valued key found there, whatever
//!   its subsection ([`neutralizer`]: filter drivers, textconv and diff
//!   drivers, merge drivers, credential helpers, aliases, tool commands,
//!   gpg programs, ...), and refuses to run, naming the key and the file,
//!   when that configuration includes another file (`include.path`,
//!   `includeIf.*.path`: the included file may be one the agent can write
//!   after the listing) or declares config-based hooks (`hook.*`);
//! - an external diff program (`diff.external`, `diff.<driver>.command`)
//!   cannot be disabled by a value: `diff`, `log`, `show` and `whatchanged`
//!   always get `--no-ext-diff`, and with such a key present any other
//!   subcommand not in [`NO_EXTERNAL_DIFF`] is refused.
//!
//! The overrides are passed as `GIT_CONFIG_COUNT` / `GIT_CONFIG_KEY_n` /
//! `GIT_CONFIG_VALUE_n`, so a key is never re-parsed from `key=value`, and
//! git hands them to every git process it starts itself.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};

use crate::error::{Result, RuntimeError};
use crate::{GitError, RunError};

/// Most of git's stderr quoted in an error.
const STDERR_LIMIT: usize = 4096;

/// Longest NUL-terminated record read from git (paths and config entries
/// are far shorter); longer ones are cut.
const RECORD_LIMIT: usize = 64 * 1024;

/// Most configuration entries vibesys accepts in a repository.
const CONFIG_ENTRY_LIMIT: usize = 100_000;

/// Where a home or configuration directory points: nothing below
/// `/dev/null` can exist (`ENOTDIR`), so git finds no per-user file there.
const NOWHERE: &str = "/dev/null";

/// Keys every framework git call overrides, whatever any file says.
pub const FIXED_OVERRIDES: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("sequence.editor", ":"),
    ("core.sshCommand", ""),
    ("core.askPass", ""),
    ("credential.helper", ""),
    ("log.showSignature", "false"),
    ("submodule.recurse", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("core.quotePath", "false"),
];

/// What to do with a key found in the repository's own configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigRule {
    /// Override it with this value at command-line scope.
    Neutralize(&'static str),
    /// Refuse to run git at all, naming it.
    Refuse(&'static str),
    /// An external diff program (`diff.external`, `diff.<driver>.command`):
    /// no value disables it, so `--no-ext-diff` is passed to the porcelain
    /// commands that would run it ([`WITH_NO_EXT_DIFF`]), and any
    /// subcommand not known to leave it alone ([`NO_EXTERNAL_DIFF`]) is
    /// refused, naming the key.
    ExternalDiff,
}

/// Subcommands that get `--no-ext-diff` right after their name, always.
pub const WITH_NO_EXT_DIFF: &[&str] = &["diff", "log", "show", "whatchanged"];

/// Subcommands that never run an external diff program.
pub const NO_EXTERNAL_DIFF: &[&str] = &[
    "rev-parse",
    "rev-list",
    "worktree",
    "config",
    "ls-files",
    "ls-tree",
    "cat-file",
    "for-each-ref",
    "show-ref",
    "symbolic-ref",
    "update-ref",
    "merge-base",
    "status",
    "diff-tree",
    "diff-index",
    "diff-files",
    "check-ignore",
    "check-attr",
    "init",
    "add",
    "commit",
    "reset",
];

/// The rule for a configuration key (`section[.subsection].name`, as
/// `git config --list` prints it: section and name lowercase); `None` for
/// keys that never make git run a command.
pub fn neutralizer(key: &str) -> Option<ConfigRule> {
    use ConfigRule::{ExternalDiff, Neutralize, Refuse};
    let (section, rest) = key.split_once('.')?;
    let (sub, name) = match rest.rsplit_once('.') {
        Some((sub, name)) => (Some(sub), name),
        None => (None, rest),
    };
    let section = section.to_ascii_lowercase();
    let name = name.to_ascii_lowercase();
    let rule = match (section.as_str(), sub.is_some(), name.as_str()) {
        ("include", false, "path") | ("includeif", true, "path") => Refuse(
            "it includes another file, which may be one the agent can write after vibesys reads the configuration",
        ),
        ("hook", _, _) => Refuse("it declares a config-based hook"),
        ("filter", true, "smudge" | "clean" | "process") => Neutralize(""),
        ("filter", true, "required") => Neutralize("false"),
        // `cat` converts nothing: the diff shows the real content.
        ("diff", true, "textconv") => Neutralize("cat"),
        ("diff", true, "command") | ("diff", false, "external") => ExternalDiff,
        ("merge", true, "driver") => Neutralize(""),
        ("credential", _, "helper") => Neutralize(""),
        ("core", false, "fsmonitor") => Neutralize("false"),
        ("core", false, "hookspath") => Neutralize("/dev/null"),
        ("core", false, "pager") => Neutralize("cat"),
        ("core", false, "editor") | ("sequence", false, "editor") => Neutralize(":"),
        ("core", false, "sshcommand" | "askpass" | "gitproxy" | "alternaterefscommand") => {
            Neutralize("")
        }
        ("pager", _, _) => Neutralize("false"),
        ("alias", _, _) => Neutralize(""),
        ("gpg", _, "program") => Neutralize(""),
        ("difftool" | "mergetool" | "browser" | "man" | "guitool", true, "cmd" | "path") => {
            Neutralize("")
        }
        ("remote", true, "uploadpack" | "receivepack" | "proxy" | "vcs") => Neutralize(""),
        ("submodule", true, "update") => Neutralize("none"),
        ("imap", false, "tunnel") => Neutralize(""),
        ("interactive", false, "difffilter") => Neutralize(""),
        ("sendemail", _, "smtpserver" | "tocmd" | "cccmd" | "headercmd" | "sendmailcmd") => {
            Neutralize("")
        }
        ("uploadpack", false, "packobjectshook") => Neutralize(""),
        _ => return None,
    };
    Some(rule)
}

/// One entry of `git config --list --show-scope --show-origin -z`.
#[derive(Debug, PartialEq, Eq)]
struct ConfigEntry {
    scope: String,
    origin: String,
    key: String,
}

/// Parses the `-z` listing: `scope NUL origin NUL key[LF value] NUL`.
fn parse_listing(records: &[Vec<u8>]) -> Vec<ConfigEntry> {
    records
        .chunks(3)
        .filter(|c| c.len() == 3)
        .map(|c| {
            let key_value = &c[2];
            let key = match key_value.iter().position(|&b| b == b'\n') {
                Some(i) => &key_value[..i],
                None => &key_value[..],
            };
            ConfigEntry {
                scope: String::from_utf8_lossy(&c[0]).into_owned(),
                origin: String::from_utf8_lossy(&c[1]).into_owned(),
                key: String::from_utf8_lossy(key).into_owned(),
            }
        })
        .collect()
}

/// git with the hardened environment and `overrides` (fixed ones first).
fn base_command(dir: &Path, overrides: &[(String, String)]) -> Command {
    let mut cmd = Command::new("git");
    cmd.env_clear();
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    } else {
        cmd.env("PATH", "/usr/local/bin:/usr/bin:/bin");
    }
    cmd.env("HOME", NOWHERE)
        .env("XDG_CONFIG_HOME", NOWHERE)
        .env("LC_ALL", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_ALLOW_PROTOCOL", "")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_PAGER", "cat");
    let all: Vec<(&str, &str)> = FIXED_OVERRIDES
        .iter()
        .copied()
        .chain(overrides.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .collect();
    cmd.env("GIT_CONFIG_COUNT", all.len().to_string());
    for (i, (k, v)) in all.iter().enumerate() {
        cmd.env(format!("GIT_CONFIG_KEY_{i}"), k)
            .env(format!("GIT_CONFIG_VALUE_{i}"), v);
    }
    cmd.arg("-C")
        .arg(dir)
        .arg("--no-pager")
        .stdin(Stdio::null());
    cmd
}

/// The repository's command-valued configuration in `dir`, as git lists
/// it: the overrides that neutralize it, and the first external diff key
/// (see [`ConfigRule::ExternalDiff`]). Fails naming the first key that
/// cannot be neutralized.
pub fn repository_overrides(dir: &Path) -> Result<RepositoryConfig> {
    let args = [
        OsStr::new("config"),
        OsStr::new("--list"),
        OsStr::new("--show-scope"),
        OsStr::new("--show-origin"),
        OsStr::new("-z"),
    ];
    let mut records = Vec::new();
    let mut too_many = false;
    stream_records(base_command(dir, &[]), &args, dir, &args, |r| {
        if records.len() < CONFIG_ENTRY_LIMIT * 3 {
            records.push(r.to_vec());
        } else {
            too_many = true;
        }
    })?;
    if too_many {
        return Err(GitError::ConfigTooLarge {
            dir: dir.to_path_buf(),
            limit: CONFIG_ENTRY_LIMIT,
        }
        .into());
    }
    let mut overrides: Vec<(String, String)> = Vec::new();
    let mut external = None;
    let entries = parse_listing(&records);
    // vibesys's own overrides must be in force: a git that ignores
    // GIT_CONFIG_COUNT (before 2.31) would silently run without them.
    let in_force = entries.iter().filter(|e| e.scope == "command").count();
    if in_force < FIXED_OVERRIDES.len() {
        return Err(GitError::OverridesIgnored {
            dir: dir.to_path_buf(),
        }
        .into());
    }
    for entry in entries {
        // Command-line scope is vibesys's own overrides.
        if entry.scope == "command" {
            continue;
        }
        match neutralizer(&entry.key) {
            None => {}
            Some(ConfigRule::Neutralize(value))
                if !overrides.iter().any(|(k, _)| *k == entry.key) =>
            {
                overrides.push((entry.key, value.to_owned()));
            }
            Some(ConfigRule::Neutralize(_)) => {}
            Some(ConfigRule::ExternalDiff) => {
                external.get_or_insert(ConfigEntryKey {
                    key: entry.key,
                    origin: entry.origin,
                });
            }
            Some(ConfigRule::Refuse(reason)) => {
                return Err(GitError::ConfigRefused {
                    dir: dir.to_path_buf(),
                    key: entry.key,
                    origin: entry.origin,
                    reason: reason.to_owned(),
                }
                .into());
            }
        }
    }
    Ok(RepositoryConfig {
        overrides,
        external_diff: external,
    })
}

/// What [`repository_overrides`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepositoryConfig {
    /// `(key, value)` overrides that neutralize command-valued keys.
    pub overrides: Vec<(String, String)>,
    /// The first external diff key, if any.
    pub external_diff: Option<ConfigEntryKey>,
}

/// A configuration key and where git read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigEntryKey {
    /// The key as git lists it.
    pub key: String,
    /// Where git read it (`file:.git/config`, ...).
    pub origin: String,
}

/// The hardened command for `args` in `dir`: the repository's
/// configuration is listed and neutralized first. `args[0]` is the
/// subcommand.
fn command(dir: &Path, args: &[&OsStr]) -> Result<Command> {
    let RepositoryConfig {
        overrides,
        external_diff,
    } = repository_overrides(dir)?;
    let sub = args.first().and_then(|a| a.to_str()).unwrap_or("");
    let mut cmd = base_command(dir, &overrides);
    if WITH_NO_EXT_DIFF.contains(&sub) {
        cmd.arg(sub).arg("--no-ext-diff").args(&args[1..]);
        return Ok(cmd);
    }
    if let Some(ext) = external_diff.filter(|_| !NO_EXTERNAL_DIFF.contains(&sub)) {
        return Err(GitError::ConfigRefused {
            dir: dir.to_path_buf(),
            key: ext.key,
            origin: ext.origin,
            reason: format!("it names an external diff program, which `git {sub}` may run"),
        }
        .into());
    }
    cmd.args(args);
    Ok(cmd)
}

fn describe(args: &[&OsStr]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

fn spawn_error(e: std::io::Error) -> GitError {
    GitError::Unavailable { source: e }
}

/// Runs the hardened git in `dir`; returns stdout when it exits 0,
/// otherwise a [`GitError::Failed`] with its stderr. For commands with
/// small output (stdout is held whole).
pub fn run(dir: &Path, args: &[&OsStr]) -> Result<Vec<u8>> {
    let out = command(dir, args)?
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(spawn_error)?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(failure(dir, args, &out.status, &out.stderr).into())
    }
}

/// Like [`run`], stopped at `deadline`: git runs in a process group of
/// its own, killed whole (`SIGKILL`) when the deadline passes, and the
/// call then fails with [`RunError::CommitTimedOut`](crate::RunError::CommitTimedOut) naming `secs`.
/// Its output is drained on threads; at most 1 MiB of stdout is kept.
pub fn run_until(
    dir: &Path,
    args: &[&OsStr],
    deadline: std::time::Instant,
    secs: u64,
) -> Result<Vec<u8>> {
    use std::os::unix::process::CommandExt;
    let mut child = command(dir, args)?
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(spawn_error)?;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = (&mut p).take(1024 * 1024).read_to_end(&mut buf);
                let _ = std::io::copy(&mut p, &mut std::io::sink());
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let status = loop {
        if let Some(status) = child.try_wait().map_err(spawn_error)? {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            if let Ok(pid) = i32::try_from(child.id())
                && let Some(pgid) = rustix::process::Pid::from_raw(pid)
            {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
            let _ = child.kill();
            let _ = child.wait();
            return Err(RunError::CommitTimedOut { secs }.into());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        Err(failure(dir, args, &status, &stderr).into())
    }
}

fn failure(
    dir: &Path,
    args: &[&OsStr],
    status: &std::process::ExitStatus,
    stderr: &[u8],
) -> GitError {
    let mut s = String::from_utf8_lossy(&stderr[..stderr.len().min(STDERR_LIMIT)])
        .trim()
        .to_owned();
    if stderr.len() > STDERR_LIMIT {
        s.push_str(" ...");
    }
    GitError::Failed {
        dir: dir.to_path_buf(),
        args: describe(args),
        status: status.to_string(),
        stderr: s,
    }
}

/// Runs the hardened git in `dir` and feeds each NUL-terminated record of
/// its stdout to `each` without holding the whole output. Records longer
/// than 64 KiB are cut (git paths are far shorter).
pub fn for_each_nul_record(dir: &Path, args: &[&OsStr], each: impl FnMut(&[u8])) -> Result<()> {
    stream_records(command(dir, args)?, &[], dir, args, each)
}

/// Spawns `cmd` with `extra` arguments appended (`args` names the call in
/// errors) and streams its NUL-terminated stdout records.
fn stream_records(
    mut cmd: Command,
    extra: &[&OsStr],
    dir: &Path,
    args: &[&OsStr],
    mut each: impl FnMut(&[u8]),
) -> Result<()> {
    let mut child = cmd
        .args(extra)
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
            match (&mut reader)
                .take(RECORD_LIMIT as u64)
                .read_until(0, &mut record)
            {
                Ok(0) => break,
                Ok(_) => {
                    if record.last() == Some(&0) {
                        record.pop();
                    } else if record.len() == RECORD_LIMIT {
                        // Skip the rest of an overlong record, holding at
                        // most one buffer of it.
                        if let Err(e) = skip_record(&mut reader) {
                            read_err = Some(e);
                            break;
                        }
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
        return Err(failure(dir, args, &status, &stderr).into());
    }
    if let Some(e) = read_err {
        return Err(RuntimeError::io("read git output in", dir, e));
    }
    Ok(())
}

/// Consumes input up to and including the next NUL (or the end).
fn skip_record(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(i) = buf.iter().position(|&b| b == 0) {
            reader.consume(i + 1);
            return Ok(());
        }
        let n = buf.len();
        reader.consume(n);
    }
}

/// Whether `dir` or one of its ancestors holds a `.git` entry.
pub(crate) fn inside_repository(dir: &Path) -> bool {
    dir.ancestors()
        .any(|d| d.join(".git").symlink_metadata().is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_valued_keys_are_neutralized_whatever_the_subsection() {
        use ConfigRule::*;
        for (key, rule) in [
            ("filter.lfs.smudge", Neutralize("")),
            ("filter.A.B.process", Neutralize("")),
            ("filter.x.required", Neutralize("false")),
            ("diff.pdf.textconv", Neutralize("cat")),
            ("diff.external", ExternalDiff),
            ("diff.x.command", ExternalDiff),
            ("merge.ours.driver", Neutralize("")),
            ("credential.https://x.example.helper", Neutralize("")),
            ("core.fsmonitor", Neutralize("false")),
            ("core.sshcommand", Neutralize("")),
            ("core.pager", Neutralize("cat")),
            ("pager.log", Neutralize("false")),
            ("alias.st", Neutralize("")),
            ("gpg.ssh.program", Neutralize("")),
            ("submodule.sub.update", Neutralize("none")),
        ] {
            assert_eq!(neutralizer(key), Some(rule), "{key}");
        }
        for key in [
            "include.path",
            "includeif.gitdir:/x/.path",
            "hook.a.command",
        ] {
            assert!(matches!(neutralizer(key), Some(Refuse(_))), "{key}");
        }
        for key in [
            "core.bare",
            "filter.x.other",
            "user.name",
            "remote.origin.url",
            "include",
        ] {
            assert_eq!(neutralizer(key), None, "{key}");
        }
    }

    #[test]
    fn listing_is_parsed_by_triples() {
        let recs: Vec<Vec<u8>> = [
            "local",
            "file:.git/config",
            "filter.evil.smudge\ntouch x; cat",
            "worktree",
            "file:.git/config.worktree",
            "core.bare",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        let e = parse_listing(&recs);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].key, "filter.evil.smudge");
        assert_eq!(e[1].scope, "worktree");
        assert_eq!(e[1].key, "core.bare");
    }
}
