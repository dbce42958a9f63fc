//! The real Claude Code CLI of the pinned wheel and the scripted model
//! endpoint (scripts/model-endpoint.py) on loopback, for the tests that
//! drive the real CLI (real_cli, provider_state, egress).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{repo_root, require_tool};

/// The real Claude Code CLI, fetched once (scripts/install-deps.sh fetches
/// it in CI).
pub fn claude_cli() -> &'static Path {
    static CLI: OnceLock<PathBuf> = OnceLock::new();
    CLI.get_or_init(|| {
        fetched_cli(
            "claude-cli.sh",
            "the real Claude Code CLI",
            "claude-agent-sdk wheel",
        )
    })
}

/// The real Codex CLI (the pinned openai-codex-cli-bin wheel's
/// executable), fetched once.
pub fn codex_cli() -> &'static Path {
    static CLI: OnceLock<PathBuf> = OnceLock::new();
    CLI.get_or_init(|| {
        fetched_cli(
            "codex-cli.sh",
            "the real Codex CLI",
            "openai-codex-cli-bin wheel",
        )
    })
}

/// The executable `scripts/SCRIPT` prints, after downloading the pinned
/// `wheel` from PyPI once.
fn fetched_cli(script: &str, what: &str, wheel: &str) -> PathBuf {
    require_tool("python3", "apt-get install python3 python3-pip");
    let out = Command::new(repo_root().join("scripts").join(script))
        .output()
        .unwrap_or_else(|e| panic!("cannot run scripts/{script}: {e}"));
    assert!(
        out.status.success(),
        "this test needs {what}: scripts/{script} (run by scripts/install-deps.sh) downloads the pinned {wheel} from PyPI once; it failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// scripts/model-endpoint.py on a free loopback port, killed on drop.
pub struct Endpoint {
    child: Child,
    /// The loopback port it listens on.
    pub port: u16,
    /// Its JSONL log of every request.
    pub log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Endpoint {
    /// Plays `scripts` (`(MATCH, steps as JSON)`; MATCH empty: the fallback).
    pub fn start(scripts: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let log = dir.path().join("requests.jsonl");
        let mut cmd = Command::new("python3");
        cmd.arg(repo_root().join("scripts/model-endpoint.py"))
            .arg("--port-file")
            .arg(&port_file)
            .arg("--log")
            .arg(&log);
        for (i, (matcher, steps)) in scripts.iter().enumerate() {
            let file = dir.path().join(format!("script-{i}.json"));
            std::fs::write(&file, steps).unwrap();
            let spec = if matcher.is_empty() {
                file.display().to_string()
            } else {
                format!("{matcher}={}", file.display())
            };
            cmd.arg("--script").arg(spec);
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        let port = loop {
            if let Ok(text) = std::fs::read_to_string(&port_file)
                && let Ok(p) = text.trim().parse()
            {
                break p;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the model endpoint exited: {status}");
            }
            assert!(Instant::now() < end, "the model endpoint did not start");
            std::thread::sleep(Duration::from_millis(50));
        };
        Endpoint {
            child,
            port,
            log,
            _dir: dir,
        }
    }

    /// Its base URL (`ANTHROPIC_BASE_URL`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `cmd` set up as a real-CLI command talking to this endpoint: the
    /// `home` and `path` of [`cli_home`], this endpoint as its provider
    /// (`ANTHROPIC_BASE_URL`) and a test key.
    pub fn cli_env<'c>(&self, cmd: &'c mut Command, home: &Path, path: &str) -> &'c mut Command {
        cmd.env("PATH", path)
            .env("HOME", home)
            .env("ANTHROPIC_BASE_URL", self.url())
            .env("ANTHROPIC_API_KEY", "test-key")
    }

    /// Every request logged, whole.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `vibesys session --provider claude --confine BACKEND EXTRA... -- -p
/// PROMPT` as `who` in `dir` (give it the CLI's environment with
/// [`Endpoint::cli_env`]).
pub fn claude_session(
    who: super::As,
    dir: &Path,
    backend: &str,
    extra: &[&str],
    prompt: &str,
) -> Command {
    let mut args = vec!["session", "--provider", "claude", "--confine", backend];
    args.extend_from_slice(extra);
    args.extend(["--", "-p", prompt]);
    super::command_as(who, dir, &super::vibesys(), &args)
}

/// A home and a `bin` below `outside` for a real-CLI session as `who`:
/// `fill` prepares the home, the CLI is linked as `bin/claude`, and both
/// belong to the test user when `who` is the user. The home and the
/// `PATH` to give the session.
pub fn cli_home(who: super::As, outside: &Path, fill: impl FnOnce(&Path)) -> (PathBuf, String) {
    let home = outside.join("home");
    let bin = outside.join("bin");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(claude_cli(), bin.join("claude")).unwrap();
    fill(&home);
    super::chown_to(who, &[&home, &bin]);
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", bin.display());
    (home, path)
}
