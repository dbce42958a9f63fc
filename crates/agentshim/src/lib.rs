//! agentshim: what vibesys knows about each agent CLI, and nothing else.
//!
//! For Codex, Claude Code and Gemini CLI it knows the argv of an interactive
//! session, of a one-shot prompt and of a resumed session, always with the
//! provider's own approvals and sandbox **off** (vibesys's confinement is the
//! only boundary, DESIGN.md section 3); the variables that must be set for
//! those flags to take effect; the state directories below `HOME`; and the
//! variables that carry credentials and state locations. [`Provider::Custom`]
//! runs any command.
//!
//! This crate spawns nothing and reads no environment: callers pass `HOME`
//! and a variable lookup, and get plain data back.
//!
//! Flags were checked against the providers' sources and docs (codex-rs
//! `cli/src/main.rs` and `exec/src/cli.rs`; gemini-cli
//! `packages/cli/src/config/config.ts` and `sandboxConfig.ts`; Claude Code's
//! CLI reference and its root guard).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentShimError {
    /// The provider name is not one vibesys knows.
    #[error("unknown provider {name:?}; known providers: {known}")]
    UnknownProvider {
        /// The name given.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// A custom command with no program.
    #[error("the custom agent command is empty")]
    EmptyCustomCommand,
    /// A base-URL variable that is not an http(s) URL with a host.
    #[error("{var}={value:?} is not an http:// or https:// URL with a host")]
    BadBaseUrl {
        /// The variable.
        var: &'static str,
        /// Its value (at most 200 characters).
        value: String,
    },
    /// A session id that could be mistaken for a flag, or is not printable.
    #[error("invalid session id {id:?}: {reason}")]
    InvalidSessionId {
        /// The id given.
        id: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A prompt that cannot be passed as an argument.
    #[error("the prompt contains a nul byte")]
    PromptContainsNul,
    /// The provider has no resume argument (custom commands).
    #[error("provider {provider} cannot resume a session")]
    ResumeUnsupported {
        /// The provider's name.
        provider: String,
    },
}

/// The providers vibesys knows by name, in the order they are listed.
pub const KNOWN_PROVIDERS: [&str; 3] = ["codex", "claude", "gemini"];

/// An agent CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Provider {
    /// OpenAI Codex CLI (`codex`).
    Codex,
    /// Anthropic Claude Code (`claude`).
    Claude,
    /// Google Gemini CLI (`gemini`).
    Gemini,
    /// Any command: its argv is used as given. agentshim knows nothing of
    /// its flags, state or credentials.
    Custom(CustomCommand),
}

/// A custom agent command: a program and its leading arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomCommand {
    argv: Vec<OsString>,
}

impl CustomCommand {
    /// The program and its leading arguments.
    pub fn argv(&self) -> &[OsString] {
        &self.argv
    }
}

/// Which session to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resume {
    /// The most recent session (of this working directory, where the
    /// provider scopes sessions that way).
    Latest,
    /// A session by the id the provider printed.
    Id(SessionId),
}

/// A provider session id: non-empty, printable, not starting with `-` (so it
/// can never be read as a flag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionId(String);

impl SessionId {
    /// Validates `id`.
    pub fn new(id: &str) -> Result<Self, AgentShimError> {
        let invalid = |reason| AgentShimError::InvalidSessionId {
            id: id.to_owned(),
            reason,
        };
        if id.is_empty() {
            return Err(invalid("it is empty"));
        }
        if id.starts_with('-') {
            return Err(invalid("it starts with '-'"));
        }
        if id.len() > 256 {
            return Err(invalid("it is longer than 256 bytes"));
        }
        if id.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(invalid("it contains whitespace or control characters"));
        }
        Ok(Self(id.to_owned()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// How to start a provider: the argv, and variables that must be set in its
/// environment for the argv to mean what it says (on top of whatever
/// environment policy the caller applies).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// Program first. The program is a bare name, looked up in `PATH`.
    pub argv: Vec<OsString>,
    /// `(name, value)` pairs to set.
    pub env: Vec<(&'static str, &'static str)>,
}

/// A state location below `HOME` (or moved by a variable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatePath {
    /// Path relative to `HOME`.
    pub home_relative: &'static str,
    /// Whether it is a directory (else a file).
    pub is_dir: bool,
    /// A variable that, when set, replaces the whole location (for a file,
    /// the file then lives inside the directory the variable names).
    pub override_var: Option<&'static str>,
}

/// An entry of a provider's state directory that configures what the CLI
/// runs (commands, hooks, MCP servers, instructions). Inside a session it
/// is read-only: an agent that could write it would plant a command that
/// its CLI runs later, unconfined, when the user starts it outside
/// vibesys. Everything else in the state directory (sessions, history,
/// logs, refreshed credentials) stays writable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigEntry {
    /// The name inside the state directory.
    pub name: &'static str,
    /// `None` for a directory; for a file, the content it is created with
    /// when missing (so the agent cannot create it either).
    pub empty_file: Option<&'static str>,
}

const fn config_file(name: &'static str, empty: &'static str) -> ConfigEntry {
    ConfigEntry {
        name,
        empty_file: Some(empty),
    }
}

const fn config_dir(name: &'static str) -> ConfigEntry {
    ConfigEntry {
        name,
        empty_file: None,
    }
}

const CODEX_CONFIG: &[ConfigEntry] = &[
    config_file("config.toml", ""),
    config_file(".env", ""),
    config_file("AGENTS.md", ""),
    config_file("AGENTS.override.md", ""),
    config_dir("prompts"),
    config_dir("rules"),
];

const CLAUDE_CONFIG: &[ConfigEntry] = &[
    config_file("settings.json", "{}\n"),
    config_file("settings.local.json", "{}\n"),
    config_file("CLAUDE.md", ""),
    config_dir("commands"),
    config_dir("agents"),
    config_dir("hooks"),
    config_dir("plugins"),
    config_dir("skills"),
    config_dir("output-styles"),
];

const GEMINI_CONFIG: &[ConfigEntry] = &[
    config_file("settings.json", "{}\n"),
    config_file(".env", ""),
    config_file("GEMINI.md", ""),
    config_dir("commands"),
    config_dir("extensions"),
];

/// An entry of a provider's state directory that the CLI itself must
/// write in a session: transcripts, history, credentials refreshed by a
/// login, caches. Only these are writable in a session; the rest of the
/// state directory is read-only (see [`Provider::kept_entries`]). None of
/// them is anything the provider's configuration can name as a command,
/// nor a script or program the CLI runs or sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeptEntry {
    /// The name inside the state directory.
    pub name: &'static str,
    /// A directory (created when missing, so the CLI can write below
    /// it); else a file, writable only when it exists (`create_empty`:
    /// created empty when missing, for a file whose empty form is valid).
    pub is_dir: bool,
    /// For a file: created empty when missing.
    pub create_empty: bool,
}

const fn kept_dir(name: &'static str) -> KeptEntry {
    KeptEntry {
        name,
        is_dir: true,
        create_empty: false,
    }
}

const fn kept_file(name: &'static str, create_empty: bool) -> KeptEntry {
    KeptEntry {
        name,
        is_dir: false,
        create_empty,
    }
}

// Each list names what the CLI writes during a turn, from its
// documentation and from watching the real CLI (Claude Code 2.x). Left
// out on purpose, because the CLI runs, sources or restores what they
// hold: Claude's `shell-snapshots/` (sourced before every Bash tool call)
// and `session-env/` (sourced for a session's commands, also when it is
// resumed), `local/` and `downloads/` (its own executables), `plugins/`,
// `backups/` (copies of `.claude.json`, with its `mcpServers`, which the
// CLI restores when that file is damaged) and `file-history/` (a rewind
// writes what it holds to the paths the transcript names);
// Gemini's `history/` (shadow git repositories whose hooks git would run
// when it checkpoints); every configuration file and directory.
const CLAUDE_KEPT: &[KeptEntry] = &[
    kept_dir("projects"),
    kept_dir("todos"),
    kept_dir("sessions"),
    kept_dir("telemetry"),
    kept_dir("statsig"),
    kept_dir("debug"),
    kept_dir("plans"),
    kept_dir("paste-cache"),
    kept_file("history.jsonl", true),
    kept_file(".credentials.json", false),
];

const CODEX_KEPT: &[KeptEntry] = &[
    kept_dir("sessions"),
    kept_dir("archived_sessions"),
    kept_file("history.jsonl", true),
    kept_file("session_index.jsonl", false),
    kept_file("auth.json", false),
];

const GEMINI_KEPT: &[KeptEntry] = &[
    kept_dir("tmp"),
    kept_file("oauth_creds.json", false),
    kept_file("google_accounts.json", false),
    kept_file("mcp-oauth-tokens.json", false),
    kept_file("installation_id", false),
    kept_file("user_id", false),
];

/// What kind of state location a resolved path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedStatePath {
    /// The absolute path.
    pub path: PathBuf,
    /// Whether it is a directory (else a file).
    pub is_dir: bool,
}

impl FromStr for Provider {
    type Err = AgentShimError;

    /// Parses a provider name: `codex`, `claude` (or `claude-code`),
    /// `gemini` (or `gemini-cli`), ignoring case and surrounding spaces.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name.trim().to_ascii_lowercase().as_str() {
            "codex" => Ok(Self::Codex),
            "claude" | "claude-code" => Ok(Self::Claude),
            "gemini" | "gemini-cli" => Ok(Self::Gemini),
            _ => Err(AgentShimError::UnknownProvider {
                name: name.to_owned(),
                known: KNOWN_PROVIDERS.join(", "),
            }),
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

fn os(items: &[&str]) -> Vec<OsString> {
    items.iter().map(OsString::from).collect()
}

fn check_prompt(prompt: &str) -> Result<(), AgentShimError> {
    if prompt.contains('\0') {
        return Err(AgentShimError::PromptContainsNul);
    }
    Ok(())
}

// The flags that turn each provider's own approvals and sandbox off.
//
// codex: `--dangerously-bypass-approvals-and-sandbox` (no approvals, no
//   Seatbelt/Landlock/bwrap of its own); a global option of `codex exec`,
//   so it also applies to `codex exec resume`.
// claude: `--dangerously-skip-permissions` (bypassPermissions mode). Claude
//   Code refuses it as root unless `IS_SANDBOX=1`, which declares exactly
//   what vibesys provides: an outer sandbox.
// gemini: `--approval-mode=yolo` (the `--yolo` spelling is deprecated and
//   may not be combined with it) and `--sandbox=false`; `GEMINI_SANDBOX`
//   takes precedence over the flag, so it is set to `false` too, and
//   `GEMINI_CLI_TRUST_WORKSPACE=true` stops folder trust from forcing the
//   approval mode back to `default` in an untrusted directory.
const CODEX_BYPASS: &str = "--dangerously-bypass-approvals-and-sandbox";
const CLAUDE_BYPASS: &str = "--dangerously-skip-permissions";
const GEMINI_BYPASS: [&str; 2] = ["--approval-mode=yolo", "--sandbox=false"];
const CLAUDE_ENV: &[(&str, &str)] = &[("IS_SANDBOX", "1")];
const GEMINI_ENV: &[(&str, &str)] = &[
    ("GEMINI_SANDBOX", "false"),
    ("GEMINI_CLI_TRUST_WORKSPACE", "true"),
];

impl Provider {
    /// A custom provider running `argv` (program first).
    pub fn custom<I, S>(argv: I) -> Result<Self, AgentShimError>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
        match argv.first() {
            Some(p) if !p.is_empty() => Ok(Self::Custom(CustomCommand { argv })),
            _ => Err(AgentShimError::EmptyCustomCommand),
        }
    }

    /// The variable that moves the provider's API endpoint, and its
    /// default endpoint.
    pub fn api_endpoint(&self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Codex => Some(("OPENAI_BASE_URL", "https://api.openai.com")),
            Self::Claude => Some(("ANTHROPIC_BASE_URL", "https://api.anthropic.com")),
            Self::Gemini => Some((
                "GOOGLE_GEMINI_BASE_URL",
                "https://generativelanguage.googleapis.com",
            )),
            Self::Custom(_) => None,
        }
    }

    /// The provider's API host as `host:port` (an egress allow-list
    /// admits it): the operator's base URL variable, read through `var`,
    /// else the default endpoint. `None` for a custom command; an error
    /// when the variable is not an `http://` or `https://` URL.
    pub fn api_host(
        &self,
        var: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<Option<String>, AgentShimError> {
        let Some((name, default)) = self.api_endpoint() else {
            return Ok(None);
        };
        let value = var(name)
            .map(|v| v.to_string_lossy().into_owned())
            .filter(|v| !v.trim().is_empty());
        let url = value.as_deref().unwrap_or(default).trim();
        let bad = || AgentShimError::BadBaseUrl {
            var: name,
            value: url.chars().take(200).collect(),
        };
        let (rest, port) = if let Some(r) = url.strip_prefix("https://") {
            (r, 443)
        } else if let Some(r) = url.strip_prefix("http://") {
            (r, 80)
        } else {
            return Err(bad());
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if authority.is_empty() || authority.contains('@') {
            return Err(bad());
        }
        let has_port = match authority.rfind(']') {
            Some(end) => authority[end..].contains(':'),
            None => authority.contains(':'),
        };
        Ok(Some(if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:{port}")
        }))
    }

    /// The known providers.
    pub fn known() -> [Provider; 3] {
        [Self::Codex, Self::Claude, Self::Gemini]
    }

    /// The provider's name (`custom:<program>` for a custom command).
    pub fn name(&self) -> String {
        match self {
            Self::Codex => "codex".to_owned(),
            Self::Claude => "claude".to_owned(),
            Self::Gemini => "gemini".to_owned(),
            Self::Custom(c) => format!(
                "custom:{}",
                c.argv
                    .first()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
        }
    }

    /// The program and the arguments that come before anything else.
    fn base(&self) -> Vec<OsString> {
        match self {
            Self::Codex => os(&["codex", CODEX_BYPASS]),
            Self::Claude => os(&["claude", CLAUDE_BYPASS]),
            Self::Gemini => {
                let mut v = os(&["gemini"]);
                v.extend(GEMINI_BYPASS.iter().map(OsString::from));
                v
            }
            Self::Custom(c) => c.argv.clone(),
        }
    }

    /// Variables that must be set for the argv to take effect.
    pub fn launch_env(&self) -> Vec<(&'static str, &'static str)> {
        match self {
            Self::Claude => CLAUDE_ENV.to_vec(),
            Self::Gemini => GEMINI_ENV.to_vec(),
            Self::Codex | Self::Custom(_) => Vec::new(),
        }
    }

    fn launch(&self, argv: Vec<OsString>) -> Launch {
        Launch {
            argv,
            env: self.launch_env(),
        }
    }

    /// An interactive session, with `extra` arguments appended as given
    /// (the operator's `-- ARGS`).
    pub fn interactive(&self, extra: &[OsString]) -> Launch {
        let mut argv = self.base();
        argv.extend_from_slice(extra);
        self.launch(argv)
    }

    /// A non-interactive run of one prompt; the answer goes to stdout.
    ///
    /// The prompt is always passed so that it cannot be read as a flag,
    /// even when it starts with `-`. A custom command gets it as its last
    /// argument.
    pub fn one_shot(&self, prompt: &str) -> Result<Launch, AgentShimError> {
        check_prompt(prompt)?;
        let mut argv = match self {
            // `codex exec` is the headless mode; it refuses to run outside a
            // git repository unless told otherwise, a check that belongs to
            // vibesys's workspace handling, not to the agent.
            Self::Codex => os(&["codex", "exec", CODEX_BYPASS, "--skip-git-repo-check"]),
            // `--print` is a switch; the prompt is the positional argument.
            Self::Claude => {
                let mut v = self.base();
                v.push("--print".into());
                v
            }
            Self::Gemini | Self::Custom(_) => self.base(),
        };
        match self {
            Self::Codex | Self::Claude => {
                argv.push("--".into());
                argv.push(prompt.into());
            }
            Self::Gemini => argv.push(format!("--prompt={prompt}").into()),
            Self::Custom(_) => argv.push(prompt.into()),
        }
        Ok(self.launch(argv))
    }

    /// Resumes a session: interactively when `prompt` is `None`, else as a
    /// one-shot run of `prompt` in that session.
    pub fn resume(&self, which: &Resume, prompt: Option<&str>) -> Result<Launch, AgentShimError> {
        if let Some(p) = prompt {
            check_prompt(p)?;
        }
        let mut argv;
        match self {
            Self::Codex => {
                // Interactive: `codex resume [ID | --last]` takes the TUI
                // flags. One-shot: `codex exec resume [ID | --last] PROMPT`,
                // where exec's options come before the subcommand.
                argv = match prompt {
                    None => os(&["codex", "resume", CODEX_BYPASS]),
                    Some(_) => os(&[
                        "codex",
                        "exec",
                        CODEX_BYPASS,
                        "--skip-git-repo-check",
                        "resume",
                    ]),
                };
                match which {
                    Resume::Latest => argv.push("--last".into()),
                    Resume::Id(id) => argv.push(id.as_str().into()),
                }
                if let Some(p) = prompt {
                    argv.push("--".into());
                    argv.push(p.into());
                }
            }
            Self::Claude => {
                argv = self.base();
                match which {
                    Resume::Latest => argv.push("--continue".into()),
                    Resume::Id(id) => argv.push(format!("--resume={}", id.as_str()).into()),
                }
                if let Some(p) = prompt {
                    argv.push("--print".into());
                    argv.push("--".into());
                    argv.push(p.into());
                }
            }
            Self::Gemini => {
                argv = self.base();
                match which {
                    Resume::Latest => argv.push("--resume=latest".into()),
                    Resume::Id(id) => argv.push(format!("--resume={}", id.as_str()).into()),
                }
                if let Some(p) = prompt {
                    argv.push(format!("--prompt={p}").into());
                }
            }
            Self::Custom(_) => {
                return Err(AgentShimError::ResumeUnsupported {
                    provider: self.name(),
                });
            }
        }
        Ok(self.launch(argv))
    }

    /// Where the provider keeps its state (credentials, sessions, settings),
    /// relative to `HOME`.
    pub fn state_paths(&self) -> &'static [StatePath] {
        match self {
            Self::Codex => &[StatePath {
                home_relative: ".codex",
                is_dir: true,
                override_var: Some("CODEX_HOME"),
            }],
            Self::Claude => &[
                StatePath {
                    home_relative: ".claude",
                    is_dir: true,
                    override_var: Some("CLAUDE_CONFIG_DIR"),
                },
                StatePath {
                    home_relative: ".claude.json",
                    is_dir: false,
                    override_var: Some("CLAUDE_CONFIG_DIR"),
                },
            ],
            Self::Gemini => &[StatePath {
                home_relative: ".gemini",
                is_dir: true,
                override_var: None,
            }],
            Self::Custom(_) => &[],
        }
    }

    /// The state locations for this `home` and environment: an override
    /// variable that is set (non-empty) replaces the default location (a
    /// file then sits inside the directory it names; duplicates are
    /// merged).
    pub fn resolve_state_paths(
        &self,
        home: &Path,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Vec<ResolvedStatePath> {
        let mut out: Vec<ResolvedStatePath> = Vec::new();
        for sp in self.state_paths() {
            let overridden = sp
                .override_var
                .and_then(&var)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from);
            let resolved = match overridden {
                Some(dir) if sp.is_dir => ResolvedStatePath {
                    path: dir,
                    is_dir: true,
                },
                Some(dir) => ResolvedStatePath {
                    path: dir.join(sp.home_relative),
                    is_dir: false,
                },
                None => ResolvedStatePath {
                    path: home.join(sp.home_relative),
                    is_dir: sp.is_dir,
                },
            };
            if !out.contains(&resolved) {
                out.push(resolved);
            }
        }
        out
    }

    /// The configuration entries of this provider's state directory
    /// (see [`ConfigEntry`]), read-only inside a session:
    /// - codex (`~/.codex` or `CODEX_HOME`): `config.toml` (notify command,
    ///   MCP servers, sandbox settings), `AGENTS.md`, `AGENTS.override.md`,
    ///   `prompts/`, `rules/`;
    /// - claude (`~/.claude` or `CLAUDE_CONFIG_DIR`): `settings.json`,
    ///   `settings.local.json` (hooks, permissions), `CLAUDE.md`,
    ///   `commands/`, `agents/`, `hooks/`, `plugins/`, `skills/`,
    ///   `output-styles/`. `~/.claude.json` (a file beside the directory,
    ///   or inside `CLAUDE_CONFIG_DIR`) mixes state Claude Code rewrites on
    ///   every start with `mcpServers`: it is not an entry here but a
    ///   non-directory state path, for which each session gets a private
    ///   copy (vs-agent's `private_copy`; read-only under Landlock);
    /// - gemini (`~/.gemini`): `settings.json` (MCP servers, tool
    ///   commands), `.env` (variables the CLI loads), `GEMINI.md`,
    ///   `commands/`, `extensions/`.
    ///
    /// codex also loads `.env` from its home (variables such as
    /// `OPENAI_BASE_URL` for the next, unconfined run): read-only too.
    /// Neither codex nor gemini keeps a configuration file directly in
    /// `HOME` (only their directories).
    pub fn config_entries(&self) -> &'static [ConfigEntry] {
        match self {
            Self::Codex => CODEX_CONFIG,
            Self::Claude => CLAUDE_CONFIG,
            Self::Gemini => GEMINI_CONFIG,
            Self::Custom(_) => &[],
        }
    }

    /// The entries of this provider's state directory the CLI must write
    /// in a session ([`KeptEntry`]); everything else in it is read-only
    /// there:
    /// - claude: `projects/` (transcripts), `todos/`, `sessions/`,
    ///   `telemetry/`,
    ///   `statsig/`, `debug/`, `plans/`, `paste-cache/`, `history.jsonl`,
    ///   `.credentials.json` (refreshed OAuth credentials, when present);
    /// - codex: `sessions/`, `archived_sessions/` (rollouts),
    ///   `history.jsonl`, `session_index.jsonl` and `auth.json` (when
    ///   present): Codex works on a private copy of its home (see
    ///   [`Provider::private_state_var`]) and only these go back;
    /// - gemini: `tmp/` (chats, logs, per-project state),
    ///   `oauth_creds.json`, `google_accounts.json`,
    ///   `mcp-oauth-tokens.json`, `installation_id`, `user_id` (when
    ///   present).
    pub fn kept_entries(&self) -> &'static [KeptEntry] {
        match self {
            Self::Codex => CODEX_KEPT,
            Self::Claude => CLAUDE_KEPT,
            Self::Gemini => GEMINI_KEPT,
            Self::Custom(_) => &[],
        }
    }

    /// For a provider whose CLI cannot work with a read-only state
    /// directory, the variable that points it at another one: the session
    /// then works on a private copy of the directory, seeded from the
    /// user's, and afterwards only the [`Provider::kept_entries`] go back.
    /// Codex (`CODEX_HOME`) keeps SQLite databases in WAL mode at the top
    /// of its home (creating and unlinking `-journal`, `-wal`, `-shm` files
    /// beside them), lock directories, an installation id, the system
    /// skills it installs, shell snapshots it sources and PATH aliases in
    /// `tmp/`: it refuses to start in a read-only home, and most of that
    /// must not reach the user's directory. Claude Code and Gemini CLI run
    /// with a read-only directory and writable kept entries (`None`).
    pub fn private_state_var(&self) -> Option<&'static str> {
        match self {
            Self::Codex => Some("CODEX_HOME"),
            _ => None,
        }
    }

    /// The files of this provider's state directory whose values may name
    /// a command the CLI runs (hooks, a statusline, `notify`, MCP servers,
    /// credential helpers): claude `settings.json` and
    /// `settings.local.json`, codex `config.toml`, gemini `settings.json`.
    /// vs-agent refuses a session when one names a path inside a
    /// [`Provider::kept_entries`] entry (writable in the session).
    pub fn settings_files(&self) -> &'static [&'static str] {
        match self {
            Self::Codex => &["config.toml"],
            Self::Claude => &["settings.json", "settings.local.json"],
            Self::Gemini => &["settings.json"],
            Self::Custom(_) => &[],
        }
    }

    /// Variables that carry credentials or select the model endpoint. Pass
    /// them through to the agent; never log their values.
    pub fn auth_env_vars(&self) -> &'static [&'static str] {
        match self {
            Self::Codex => &[
                "OPENAI_API_KEY",
                "CODEX_API_KEY",
                "OPENAI_BASE_URL",
                "OPENAI_ORG_ID",
                "OPENAI_PROJECT_ID",
            ],
            Self::Claude => &[
                "ANTHROPIC_API_KEY",
                "ANTHROPIC_AUTH_TOKEN",
                "CLAUDE_CODE_OAUTH_TOKEN",
                "ANTHROPIC_BASE_URL",
                "ANTHROPIC_MODEL",
                "CLAUDE_CODE_USE_BEDROCK",
                "CLAUDE_CODE_USE_VERTEX",
                "ANTHROPIC_VERTEX_PROJECT_ID",
                "CLOUD_ML_REGION",
                "AWS_REGION",
                "AWS_PROFILE",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN",
                "AWS_BEARER_TOKEN_BEDROCK",
            ],
            Self::Gemini => &[
                "GEMINI_API_KEY",
                "GOOGLE_API_KEY",
                "GOOGLE_CLOUD_PROJECT",
                "GOOGLE_CLOUD_LOCATION",
                "GOOGLE_GENAI_USE_VERTEXAI",
                "GOOGLE_GENAI_USE_GCA",
                "GOOGLE_APPLICATION_CREDENTIALS",
                "GEMINI_MODEL",
            ],
            Self::Custom(_) => &[],
        }
    }

    /// Variables that move the provider's state (see
    /// [`Provider::state_paths`]).
    pub fn state_env_vars(&self) -> Vec<&'static str> {
        let mut v: Vec<&'static str> = Vec::new();
        for sp in self.state_paths() {
            if let Some(var) = sp.override_var
                && !v.contains(&var)
            {
                v.push(var);
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_hosts_follow_the_base_url() {
        let none = |_: &str| None;
        assert_eq!(
            Provider::Claude.api_host(none).unwrap(),
            Some("api.anthropic.com:443".into())
        );
        assert_eq!(
            Provider::Gemini.api_host(none).unwrap(),
            Some("generativelanguage.googleapis.com:443".into())
        );
        let local = |v: &str| (v == "OPENAI_BASE_URL").then(|| "http://127.0.0.1:8080/v1".into());
        assert_eq!(
            Provider::Codex.api_host(local).unwrap(),
            Some("127.0.0.1:8080".into())
        );
        let plain = |_: &str| Some("http://proxy.example/v1".into());
        assert_eq!(
            Provider::Claude.api_host(plain).unwrap(),
            Some("proxy.example:80".into())
        );
        let bad = |_: &str| Some("ftp://x".into());
        assert!(Provider::Claude.api_host(bad).is_err());
    }

    #[test]
    fn names_parse_and_unknown_names_list_the_known_ones() {
        assert_eq!("codex".parse::<Provider>().unwrap(), Provider::Codex);
        assert_eq!(" Claude ".parse::<Provider>().unwrap(), Provider::Claude);
        assert_eq!("claude-code".parse::<Provider>().unwrap(), Provider::Claude);
        assert_eq!("GEMINI".parse::<Provider>().unwrap(), Provider::Gemini);
        let err = "copilot".parse::<Provider>().unwrap_err();
        assert_eq!(
            err,
            AgentShimError::UnknownProvider {
                name: "copilot".into(),
                known: "codex, claude, gemini".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "unknown provider \"copilot\"; known providers: codex, claude, gemini"
        );
        for p in Provider::known() {
            assert_eq!(p.name().parse::<Provider>().unwrap(), p);
            assert_eq!(p.to_string(), p.name());
        }
        assert_eq!(
            KNOWN_PROVIDERS.map(String::from),
            Provider::known().map(|p| p.name())
        );
    }

    #[test]
    fn custom_needs_a_program() {
        assert_eq!(
            Provider::custom(Vec::<String>::new()),
            Err(AgentShimError::EmptyCustomCommand)
        );
        assert_eq!(
            Provider::custom([""]),
            Err(AgentShimError::EmptyCustomCommand)
        );
        let p = Provider::custom(["/opt/agent", "--fast"]).unwrap();
        assert_eq!(p.name(), "custom:/opt/agent");
        assert_eq!(
            p.interactive(&["x".into()]).argv,
            os(&["/opt/agent", "--fast", "x"])
        );
        assert_eq!(
            p.one_shot("hi").unwrap().argv,
            os(&["/opt/agent", "--fast", "hi"])
        );
        assert!(matches!(
            p.resume(&Resume::Latest, None),
            Err(AgentShimError::ResumeUnsupported { .. })
        ));
        assert!(p.launch_env().is_empty() && p.state_paths().is_empty());
    }

    #[test]
    fn session_ids_cannot_be_flags() {
        assert!(SessionId::new("0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b").is_ok());
        for bad in ["", "-x", "--last", "a b", "a\nb", &"x".repeat(257)] {
            assert!(SessionId::new(bad).is_err(), "{bad:?}");
        }
        assert_eq!(
            SessionId::new("-rf").unwrap_err().to_string(),
            "invalid session id \"-rf\": it starts with '-'"
        );
    }

    #[test]
    fn every_known_provider_turns_its_own_sandbox_off_everywhere() {
        let id = Resume::Id(SessionId::new("abc").unwrap());
        for p in Provider::known() {
            let bypass: &[&str] = match p {
                Provider::Codex => &[CODEX_BYPASS],
                Provider::Claude => &[CLAUDE_BYPASS],
                _ => &GEMINI_BYPASS,
            };
            let launches = [
                p.interactive(&[]),
                p.one_shot("x").unwrap(),
                p.resume(&Resume::Latest, None).unwrap(),
                p.resume(&id, Some("x")).unwrap(),
            ];
            for l in launches {
                for flag in bypass {
                    assert!(l.argv.contains(&OsString::from(flag)), "{p}: {:?}", l.argv);
                }
            }
        }
    }

    #[test]
    fn prompts_with_nul_are_refused() {
        assert_eq!(
            Provider::Codex.one_shot("a\0b"),
            Err(AgentShimError::PromptContainsNul)
        );
        assert_eq!(
            Provider::Gemini.resume(&Resume::Latest, Some("\0")),
            Err(AgentShimError::PromptContainsNul)
        );
    }

    #[test]
    fn state_paths_follow_home_and_overrides() {
        let home = Path::new("/home/u");
        let none = |_: &str| None;
        let paths = |p: &Provider, f: &dyn Fn(&str) -> Option<OsString>| {
            p.resolve_state_paths(home, f)
                .into_iter()
                .map(|r| (r.path.display().to_string(), r.is_dir))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            paths(&Provider::Codex, &none),
            [("/home/u/.codex".into(), true)]
        );
        assert_eq!(
            paths(&Provider::Claude, &none),
            [
                ("/home/u/.claude".into(), true),
                ("/home/u/.claude.json".into(), false)
            ]
        );
        assert_eq!(
            paths(&Provider::Gemini, &none),
            [("/home/u/.gemini".into(), true)]
        );
        let codex_home = |v: &str| (v == "CODEX_HOME").then(|| OsString::from("/srv/codex"));
        assert_eq!(
            paths(&Provider::Codex, &codex_home),
            [("/srv/codex".into(), true)]
        );
        let claude_dir = |v: &str| (v == "CLAUDE_CONFIG_DIR").then(|| OsString::from("/srv/cl"));
        assert_eq!(
            paths(&Provider::Claude, &claude_dir),
            [
                ("/srv/cl".into(), true),
                ("/srv/cl/.claude.json".into(), false)
            ]
        );
        let empty = |_: &str| Some(OsString::new());
        assert_eq!(
            paths(&Provider::Codex, &empty),
            [("/home/u/.codex".into(), true)]
        );
        assert_eq!(Provider::Claude.state_env_vars(), ["CLAUDE_CONFIG_DIR"]);
        assert_eq!(Provider::Codex.state_env_vars(), ["CODEX_HOME"]);
        assert!(Provider::Gemini.state_env_vars().is_empty());
    }

    #[test]
    fn nothing_kept_is_configuration_or_runs() {
        let never = [
            "shell-snapshots",
            "session-env",
            "local",
            "downloads",
            "history",
            "backups",
            "file-history",
            "statusline-command.sh",
        ];
        for p in Provider::known() {
            for kept in p.kept_entries() {
                assert!(
                    !p.config_entries().iter().any(|c| c.name == kept.name),
                    "{p}: {} is configuration",
                    kept.name
                );
                assert!(!never.contains(&kept.name), "{p}: {}", kept.name);
                assert!(!kept.name.contains('/') && !kept.name.starts_with(".."));
                assert!(kept.is_dir || !kept.create_empty || kept.name.ends_with(".jsonl"));
            }
        }
    }

    #[test]
    fn auth_variables_are_valid_names_without_duplicates() {
        for p in Provider::known() {
            let vars = p.auth_env_vars();
            assert!(!vars.is_empty());
            for (i, v) in vars.iter().enumerate() {
                assert!(
                    v.bytes()
                        .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
                );
                assert!(!vars[..i].contains(v), "{p}: {v} twice");
            }
        }
        assert!(Provider::Codex.auth_env_vars().contains(&"OPENAI_API_KEY"));
        assert!(
            Provider::Claude
                .auth_env_vars()
                .contains(&"ANTHROPIC_API_KEY")
        );
        for v in ["GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_CLOUD_PROJECT"] {
            assert!(Provider::Gemini.auth_env_vars().contains(&v));
        }
    }
}
