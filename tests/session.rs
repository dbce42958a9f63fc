//! `vibesys session`: real stand-in executables named codex, claude and
//! gemini on PATH record the argv and environment they were given, from
//! inside the confined process.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

const STANDIN: &str = r#"#!/bin/sh
# Records what it was given, from inside the sandbox.
out="$PWD/record-$(basename "$0")"
: > "$out"
for a in "$@"; do printf 'arg:%s\n' "$a" >> "$out"; done
env | sed 's/=.*//' | sort | sed 's/^/env:/' >> "$out"
printf 'token:[%s]\n' "$(cat token.txt 2>/dev/null)" >> "$out"
{ echo state > "$HOME/state-probe"; } 2>/dev/null && echo 'home-root:writable' >> "$out"
# Only what the CLI must write is writable in its state directory: not
# its configuration, nor any new file (a statusline or hook script the
# settings could name), nor anything unknown.
for c in .codex/config.toml .codex/prompts/p.md .codex/notify.sh .claude/settings.json \
         .claude/hooks/h .claude/statusline-command.sh .claude/shell-snapshots/s.sh \
         .gemini/settings.json .gemini/hook.sh .codex/history-probe .claude/history-probe; do
  { echo plant >> "$HOME/$c"; } 2>/dev/null && echo "config:writable:$c" >> "$out"
done
for f in .codex/history.jsonl .claude/history.jsonl .claude/projects/p.jsonl .gemini/tmp/chat.json; do
  d=${f%%/*}
  base="$HOME/$d"
  # Codex works on a private copy of its home, where CODEX_HOME points.
  [ "$d" = .codex ] && [ -n "$CODEX_HOME" ] && base="$CODEX_HOME"
  { [ -d "$base" ] && echo history >> "$base/${f#*/}"; } 2>/dev/null && echo "data:writable:$d" >> "$out"
done
# Its copy is writable whole: what it plants there must not go back.
if [ -n "$CODEX_HOME" ]; then
  echo 'notify = ["/tmp/planted"]' >> "$CODEX_HOME/config.toml"
  mkdir -p "$CODEX_HOME/skills/.system" "$CODEX_HOME/shell_snapshots" "$CODEX_HOME/tmp/arg0"
  echo planted > "$CODEX_HOME/skills/.system/SKILL.md"
  echo planted > "$CODEX_HOME/shell_snapshots/s.sh"
  echo planted > "$CODEX_HOME/tmp/arg0/git"
  echo planted > "$CODEX_HOME/planted.txt"
  mkdir -p "$CODEX_HOME/sessions/2026" && echo transcript > "$CODEX_HOME/sessions/2026/rollout.jsonl"
fi
exit 0
"#;

fn standins(dir: &Path) {
    for name in ["codex", "claude", "gemini"] {
        write_standin(dir, name, STANDIN);
    }
}

/// Writes the executable stand-in `dir/name` (creating `dir`).
fn write_standin(dir: &Path, name: &str, script: &str) {
    std::fs::create_dir_all(dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, script).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A project for `who` with the stand-in `name` (`script`) in
/// `outside/bin`; returns it, that bin directory and `outside/home` (not
/// created).
fn project_with_standin(who: As, name: &str, script: &str) -> (Project, PathBuf, PathBuf) {
    let p = project(who);
    let bin = p.outside.join("bin");
    write_standin(&bin, name, script);
    let home = p.outside.join("home");
    (p, bin, home)
}

/// `vibesys ARGS` as `who` in the project, with `bin` first on PATH and
/// `home` as HOME.
fn session_as(who: As, p: &Project, bin: &Path, home: &Path, args: &[&str]) -> Command {
    let mut cmd = command_as(who, &p.root, &vibesys(), args);
    cmd.env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", home);
    cmd
}

/// `vibesys session --provider codex --confine BACKEND EXTRA` as `who`,
/// with the stand-in codex `script` and a codex home holding a history
/// line of the user's own; returns the project, that HOME and the command.
fn codex_session(
    who: As,
    backend: &str,
    script: &str,
    extra: &[&str],
) -> (Project, PathBuf, Command) {
    let (p, bin, home) = project_with_standin(who, "codex", script);
    std::fs::create_dir_all(home.join(".codex")).unwrap();
    std::fs::write(home.join(".codex/history.jsonl"), "{\"mine\":1}\n").unwrap();
    chown_to(who, &[&p.outside]);
    let mut args = vec!["session", "--provider", "codex", "--confine", backend];
    args.extend_from_slice(extra);
    let cmd = session_as(who, &p, &bin, &home, &args);
    (p, home, cmd)
}

/// Asserts that `~/.codex/history.jsonl` holds the user's line and the
/// stand-in's, and nothing else.
fn assert_codex_history(home: &Path, case: &str) {
    assert_eq!(
        std::fs::read_to_string(home.join(".codex/history.jsonl")).unwrap(),
        "{\"mine\":1}\n{\"ok\":1}\n",
        "{case}"
    );
}

#[test]
fn providers_launch_confined_with_only_allow_listed_variables() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let p = project(As::Root);
    let bin = p.outside.join("bin");
    standins(&bin);
    let home = p.outside.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let cases = [
        (
            "codex",
            "--dangerously-bypass-approvals-and-sandbox",
            "OPENAI_API_KEY",
            ".codex",
        ),
        (
            "claude",
            "--dangerously-skip-permissions",
            "ANTHROPIC_API_KEY",
            ".claude",
        ),
        (
            "gemini",
            "--approval-mode=yolo",
            "GEMINI_API_KEY",
            ".gemini",
        ),
    ];
    for (provider, flag, auth, state) in cases {
        let out = session_as(
            As::Root,
            &p,
            &bin,
            &home,
            &[
                "session",
                "--provider",
                provider,
                "--confine",
                "bwrap",
                "--env",
                "MY_EXTRA",
                "--",
                "--model",
                "x",
            ],
        )
        .env("OPENAI_API_KEY", "sk-test")
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("GEMINI_API_KEY", "g-test")
        .env("VIBESYS_TEST_SECRET", "must-not-leak")
        .env("MY_EXTRA", "1")
        .env("SSH_AUTH_SOCK", "/tmp/agent.sock")
        .output()
        .unwrap();
        assert_code(&out, 0);
        let record = std::fs::read_to_string(p.root.join(format!("record-{provider}"))).unwrap();
        assert!(
            record.contains(&format!("arg:{flag}\n")),
            "{provider}: {record}"
        );
        assert!(
            record.contains("arg:--model\narg:x\n"),
            "{provider}: {record}"
        );
        assert!(
            record.contains("token:[]"),
            "{provider}: the hidden file was readable: {record}"
        );
        let names: Vec<&str> = record
            .lines()
            .filter_map(|l| l.strip_prefix("env:"))
            .collect();
        assert!(
            names.contains(&auth) && names.contains(&"MY_EXTRA") && names.contains(&"PATH"),
            "{provider}: {names:?}"
        );
        let allowed_extra = [
            "PWD",
            "SHLVL",
            "_",
            "OLDPWD",
            "IS_SANDBOX",
            "GEMINI_SANDBOX",
            "GEMINI_CLI_TRUST_WORKSPACE",
        ];
        for name in &names {
            let ok = ["PATH", "HOME", "LANG", "MY_EXTRA"].contains(name)
                || *name == auth
                || (provider == "codex" && *name == "CODEX_HOME")
                || allowed_extra.contains(name);
            assert!(ok, "{provider}: {name} is not on the allow-list: {names:?}");
        }
        for leaked in ["VIBESYS_TEST_SECRET", "SSH_AUTH_SOCK"] {
            assert!(!names.contains(&leaked), "{provider}: {leaked} leaked");
        }
        // The dropped names are logged, their values never.
        let err = stderr(&out);
        assert!(
            !err.contains("must-not-leak") && !err.contains("sk-"),
            "{err}"
        );
        // Only the provider's state dir is writable in HOME, not HOME itself.
        assert!(
            !record.contains("home-root:writable"),
            "{provider}: {record}"
        );
        assert!(
            home.join(state).exists(),
            "{provider}: state dir not prepared"
        );
        assert!(!record.contains("config:writable"), "{provider}: {record}");
        assert!(
            record.contains(&format!("data:writable:{state}")),
            "{provider}: {record}"
        );
        if provider == "codex" {
            // The private copy's history and transcript came back; nothing
            // else the stand-in planted in it did.
            let codex = home.join(".codex");
            assert!(
                std::fs::read_to_string(codex.join("history.jsonl"))
                    .unwrap()
                    .contains("history"),
                "codex: history did not come back"
            );
            assert_file_is(codex.join("sessions/2026/rollout.jsonl"), "transcript\n");
            for planted in [
                "config.toml",
                "skills",
                "shell_snapshots",
                "tmp",
                "planted.txt",
            ] {
                assert!(
                    !codex.join(planted).exists(),
                    "codex: {planted} reached ~/.codex"
                );
            }
        }
    }
}

#[test]
fn unknown_provider_fails_closed() {
    let p = project(As::Root);
    let out = vibesys_as(As::Root, &p.root, &["session", "--provider", "cursor"]);
    assert_code_stderr(&out, 125, "known providers: codex, claude, gemini");
}

#[test]
fn a_disabled_sandbox_refuses_the_session() {
    let p = project(As::Root);
    let out = command_as(
        As::Root,
        &p.root,
        &vibesys(),
        &["session", "--provider", "codex"],
    )
    .env("VIBESYS_AGENT_SANDBOX", "off")
    .output()
    .unwrap();
    assert_code_stderr(&out, 125, "requires enforcement");
}

/// A stand-in claude that reads its `~/.claude.json`, then plants a hook
/// and an MCP server command in it, and tries to move it away.
const CLAUDE_PLANTER: &str = r#"#!/bin/sh
out="$PWD/record-claude-json"
f="${CLAUDE_CONFIG_DIR:-$HOME}/.claude.json"
printf 'seen:%s\n' "$(cat "$f" 2>/dev/null)" > "$out"
{ printf '{"mcpServers":{"x":{"command":"/tmp/planted"}},"hooks":{"Stop":"/tmp/planted"}}\n' > "$f"; } 2>/dev/null && echo 'write:ok' >> "$out"
printf 'after:%s\n' "$(cat "$f" 2>/dev/null)" >> "$out"
{ mv "$f" "$f.moved"; } 2>/dev/null && echo 'moved:yes' >> "$out"
{ rm -f "$f"; } 2>/dev/null && [ ! -e "$f" ] && echo 'removed:yes' >> "$out"
exit 0
"#;

const USER_JSON: &str = "{\"numStartups\":7,\"userID\":\"user-owned\"}\n";

/// Runs the planter as `who` with `backend`; `config_dir` sets
/// CLAUDE_CONFIG_DIR. Returns the record and the user's file afterwards.
fn plant_claude_json(
    who: As,
    backend: &str,
    config_dir: bool,
) -> (std::process::Output, String, String) {
    let (p, bin, home) = project_with_standin(who, "claude", CLAUDE_PLANTER);
    let state = home.join("cfg");
    std::fs::create_dir_all(&state).unwrap();
    let user_file = if config_dir {
        state.join(".claude.json")
    } else {
        home.join(".claude.json")
    };
    std::fs::write(&user_file, USER_JSON).unwrap();
    chown_to(who, &[&p.outside]);
    let mut cmd = session_as(
        who,
        &p,
        &bin,
        &home,
        &["session", "--provider", "claude", "--confine", backend],
    );
    if config_dir {
        cmd.env("CLAUDE_CONFIG_DIR", &state);
    }
    let out = cmd.output().unwrap();
    let record = std::fs::read_to_string(p.root.join("record-claude-json")).unwrap_or_default();
    let after = std::fs::read_to_string(&user_file).unwrap_or_default();
    (out, record, after)
}

/// [`plant_claude_json`], which must exit 0 with the planter having seen
/// the user's file; also returns the case's name.
fn plant_and_see_claude_json(
    who: As,
    backend: &str,
    config_dir: bool,
) -> (std::process::Output, String, String, String) {
    let (out, record, after) = plant_claude_json(who, backend, config_dir);
    assert_code(&out, 0);
    let case = format!("{who:?} {backend}, CLAUDE_CONFIG_DIR={config_dir}");
    assert!(
        record.contains(&format!("seen:{}", USER_JSON.trim_end())),
        "{case}: {record}"
    );
    (out, record, after, case)
}

#[test]
fn claude_json_is_a_private_copy_under_bwrap() {
    require_tool("bwrap", "apt-get install bubblewrap");
    for who in users() {
        for config_dir in [false, true] {
            // The copy has the user's content and the CLI can write it...
            let (_, record, after, case) = plant_and_see_claude_json(who, "bwrap", config_dir);
            assert!(record.contains("write:ok"), "{case}: {record}");
            assert!(record.contains("after:{\"mcpServers\""), "{case}: {record}");
            // ...cannot move it away...
            assert!(!record.contains("moved:yes"), "{case}: {record}");
            assert!(!record.contains("removed:yes"), "{case}: {record}");
            // ...and nothing of it reaches the user's file.
            assert_eq!(after, USER_JSON, "{case}: the user's file was written");
        }
    }
}

/// Runs the planter under Landlock (see [`plant_claude_json`]) and
/// asserts that it saw the user's file and could not write it.
fn assert_claude_json_read_only(who: As, config_dir: bool) -> std::process::Output {
    let (out, record, after, case) = plant_and_see_claude_json(who, "landlock", config_dir);
    assert!(!record.contains("write:ok"), "{case}: {record}");
    assert_eq!(after, USER_JSON, "{case}: the user's file was written");
    out
}

#[test]
fn claude_json_is_read_only_under_landlock() {
    for who in users() {
        let out = assert_claude_json_read_only(who, false);
        assert_stderr_has(&out, "read-only in this session");
        // Inside CLAUDE_CONFIG_DIR too: the state directory is read-only
        // but for the entries the CLI must write, and this is not one.
        assert_claude_json_read_only(who, true);
    }
}

/// A stand-in codex that leaves a detached writer behind (its own
/// session, double-forked): were it still running when the private copy
/// goes back, it could change the copy while it is read.
const CODEX_LINGERER: &str = r#"#!/bin/sh
setsid sh -c 'sleep 2; echo LATE >> "$CODEX_HOME/history.jsonl"; echo alive > "$1/late-marker"' sh "$PWD" </dev/null >/dev/null 2>&1 &
echo '{"ok":1}' >> "$CODEX_HOME/history.jsonl"
exit 0
"#;

/// The copy of `~/.codex` goes back only once everything the session
/// started is gone: a detached writer does not outlive it, under bwrap
/// and Landlock, as root and as a user.
#[test]
fn nothing_of_a_codex_session_outlives_it_when_its_copy_goes_back() {
    require_tool("bwrap", "apt-get install bubblewrap");
    for (who, backend) in users_and_backends() {
        let (p, home, mut cmd) = codex_session(who, backend, CODEX_LINGERER, &[]);
        let out = cmd.output().unwrap();
        assert_code(&out, 0);
        std::thread::sleep(std::time::Duration::from_secs(3));
        assert!(
            !p.root.join("late-marker").exists(),
            "{who:?} {backend}: the detached writer outlived the session"
        );
        assert_codex_history(&home, &format!("{who:?} {backend}"));
    }
}

/// A stand-in codex that writes its history, says so, and waits.
const CODEX_WAITER: &str = r#"#!/bin/sh
echo '{"ok":1}' >> "$CODEX_HOME/history.jsonl"
: > "$PWD/started"
exec sleep 30
"#;

/// A session stopped with SIGTERM (or SIGINT, SIGHUP: a closed terminal)
/// ends as any other: the signal reaches the CLI, its history goes back
/// to `~/.codex`, and nothing of it keeps running. As root and as a user,
/// under bwrap and Landlock.
#[test]
fn a_codex_session_stopped_by_a_signal_still_returns_its_history() {
    require_tool("bwrap", "apt-get install bubblewrap");
    for (who, backend) in users_and_backends() {
        let (p, home, mut cmd) = codex_session(who, backend, CODEX_WAITER, &["--prompt", "hi"]);
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = p.root.join("started");
        for _ in 0..200 {
            if started.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert!(
            started.exists(),
            "{who:?} {backend}: the stand-in never ran"
        );
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(143), "{who:?} {backend}: {status:?}");
        assert_codex_history(
            &home,
            &format!("{who:?} {backend}: the session's history did not come back"),
        );
    }
}
