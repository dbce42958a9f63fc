//! The provider-state attack, end to end with the real Claude Code CLI
//! (the one bundled in the pinned claude-agent-sdk wheel,
//! `scripts/claude-cli.sh`) against a scripted model endpoint on loopback
//! (`scripts/model-endpoint.py`): a confined session's tool call rewrites
//! every script and hook the operator's settings name (and the settings
//! themselves), then the operator's next unconfined `claude -p` turn
//! runs, and no marker the agent planted appears, while the operator's
//! own hooks still run. As root and as an unprivileged user, under bwrap
//! and Landlock.

mod common;

use std::path::Path;

use common::model_endpoint::{Endpoint, claude_cli, claude_session, cli_home};
use common::*;

/// The scripts the operator's settings name, relative to `~/.claude`: a
/// statusline script (what `/statusline` writes), a hook in `hooks/`, one
/// outside it and one at the top.
const NAMED: [&str; 4] = [
    "statusline-command.sh",
    "hooks/on-start.sh",
    "scripts/on-prompt.sh",
    "on-stop.sh",
];

const SETTINGS: &str = r#"{
  "statusLine": {"type": "command", "command": "bash ~/.claude/statusline-command.sh"},
  "hooks": {
    "SessionStart": [{"hooks": [{"type": "command", "command": "bash ~/.claude/hooks/on-start.sh"}]}],
    "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "bash $HOME/.claude/scripts/on-prompt.sh"}]}],
    "Stop": [{"hooks": [{"type": "command", "command": "sh ~/.claude/on-stop.sh"}]}]
  }
}
"#;

/// The confined turn: one Bash tool call that tries every way to plant a
/// command (rewrite, remove and recreate each named script, rewrite the
/// settings to name a script in a writable directory, move `hooks/`),
/// then ends.
const ATTACK: &str = r#"[{"tool": "Bash", "input": {"command": "cd ~/.claude; for f in statusline-command.sh hooks/on-start.sh scripts/on-prompt.sh on-stop.sh; do printf '#!/bin/sh\\necho PLANTED >> \"$HOME/planted.log\"\\n' > $f && echo WROTE $f; rm -f $f && echo REMOVED $f; printf 'echo PLANTED >> $HOME/planted.log' > $f && echo RECREATED $f; done; printf '{\"hooks\":{\"Stop\":[{\"hooks\":[{\"type\":\"command\",\"command\":\"sh ~/.claude/projects/x.sh\"}]}]}}' > settings.json && echo WROTE settings; printf '{\"hooks\":{}}' > settings.local.json && echo WROTE local; printf 'echo PLANTED >> $HOME/planted.log' > projects/x.sh; mv hooks hooks2 && echo MOVED; echo ATTACK-END"}}, {"text": "done"}]"#;

const HELLO: &str = r#"[{"text": "hello back"}]"#;

fn endpoint(_dir: &Path) -> Endpoint {
    Endpoint::start(&[("attack", ATTACK), ("", HELLO)])
}

/// The text of every tool result the CLI sent back to the endpoint.
fn tool_results(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut out = String::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let messages = v["body"]["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for m in messages {
            for block in m["content"].as_array().cloned().unwrap_or_default() {
                if block["type"] == "tool_result" {
                    out.push_str(&block["content"].to_string());
                    out.push('\n');
                }
            }
        }
    }
    out
}

/// The operator's `~/.claude`: the settings and the scripts they name,
/// each appending its name to `~/ran.log` when it runs.
fn operator_home(home: &Path) {
    let claude = home.join(".claude");
    for dir in ["hooks", "scripts"] {
        std::fs::create_dir_all(claude.join(dir)).unwrap();
    }
    std::fs::write(claude.join("settings.json"), SETTINGS).unwrap();
    for f in NAMED {
        let name = Path::new(f).file_name().unwrap().to_string_lossy();
        let p = claude.join(f);
        std::fs::write(
            &p,
            format!("#!/bin/sh\necho RAN-{name} >> \"$HOME/ran.log\"\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The contents of the settings and every named script.
fn named_contents(home: &Path) -> Vec<(String, Option<String>)> {
    NAMED
        .iter()
        .chain(&["settings.json", "settings.local.json"])
        .map(|f| {
            (
                f.to_string(),
                std::fs::read_to_string(home.join(".claude").join(f)).ok(),
            )
        })
        .collect()
}

#[test]
fn a_session_cannot_plant_what_the_operators_next_claude_runs() {
    require_tool("bwrap", "apt-get install bubblewrap");
    claude_cli();
    for (who, backend) in users_and_backends() {
        let p = project(who);
        let (home, path) = cli_home(who, &p.outside, operator_home);
        let ep = endpoint(&p.outside);
        let before = named_contents(&home);
        // A confined session whose prompt plays the attack.
        let attack = || {
            ep.cli_env(
                &mut claude_session(who, &p.root, backend, &[], "attack"),
                &home,
                &path,
            )
            .output()
            .unwrap()
        };

        // The confined session: its one tool call is the attack.
        let session = attack();
        assert_code(&session, 0);
        let result = tool_results(&ep.log);
        assert!(
            result.contains("ATTACK-END"),
            "{who:?} {backend}: the attack's tool call never ran: {}\n{result}",
            stderr(&session)
        );
        for planted in ["WROTE", "REMOVED", "RECREATED", "MOVED"] {
            assert!(
                !result.contains(planted),
                "{who:?} {backend}: the attack got through ({planted}): {result}"
            );
        }
        assert_eq!(
            named_contents(&home),
            before,
            "{who:?} {backend}: a named script or the settings changed"
        );
        // The session's own transcript was written (the CLI works).
        let projects = home.join(".claude/projects");
        assert!(
            std::fs::read_dir(&projects)
                .unwrap()
                .flatten()
                .any(|d| d.path().is_dir()),
            "{who:?} {backend}: no transcript in {}",
            projects.display()
        );

        // The operator's next turn, unconfined: its hooks run, nothing
        // the agent planted does.
        let _ = std::fs::remove_file(home.join("ran.log"));
        let turn = ep
            .cli_env(
                &mut command_as(
                    who,
                    &p.root,
                    &p.outside.join("bin/claude"),
                    &["-p", "hello"],
                ),
                &home,
                &path,
            )
            .output()
            .unwrap();
        assert_code(&turn, 0);
        let ran = std::fs::read_to_string(home.join("ran.log")).unwrap_or_default();
        for hook in ["RAN-on-start.sh", "RAN-on-prompt.sh", "RAN-on-stop.sh"] {
            assert!(
                ran.contains(hook),
                "{who:?} {backend}: the operator's hook did not run, so the test proves nothing: {ran:?}"
            );
        }
        assert!(
            !home.join("planted.log").exists() && !ran.contains("PLANTED"),
            "{who:?} {backend}: a planted command ran in the operator's turn"
        );

        // Settings that name a command inside an entry the CLI writes
        // (so writable in a session) refuse the session before it starts.
        let local = home.join(".claude/settings.local.json");
        std::fs::write(
            &local,
            r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"sh ~/.claude/projects/x.sh"}]}]}}"#,
        )
        .unwrap();
        let refused = attack();
        assert_code(&refused, 125);
        let err = stderr(&refused);
        assert!(
            err.contains("settings.local.json") && err.contains("projects/x.sh"),
            "{who:?} {backend}: {err}"
        );
        std::fs::remove_file(&local).unwrap();
    }
}
