//! The trust boundary with no policy written, on the real bwrap, as root
//! and as an unprivileged user: credentials are hidden, the agent cannot
//! rewrite its policy, the task, the run state or what git executes, git
//! still works inside, and the environment carries no credentials. Every
//! refused operator value and widening names the cause.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;

/// A project with credentials, a real git repository and run state, and
/// no `[sandbox]` table at all.
fn bare_project(who: As) -> Project {
    let p = project(who);
    std::fs::write(p.root.join("vibesys.toml"), "[build]\nargv = [\"true\"]\n").unwrap();
    std::fs::remove_dir_all(p.root.join(".git")).unwrap();
    git(
        &p.root,
        &["-c", "safe.directory=*", "init", "-q", "-b", "main"],
    );
    std::fs::write(
        p.root.join("agent.toml"),
        "api_key = \"AGENT-TOML-SECRET\"\n",
    )
    .unwrap();
    std::fs::write(p.root.join(".env"), "TOKEN=DOTENV-SECRET\n").unwrap();
    std::fs::write(p.root.join(".env.local"), "TOKEN=DOTENV-LOCAL-SECRET\n").unwrap();
    std::fs::write(p.root.join(".gitignore"), "agent.toml\n.env*\n").unwrap();
    git(
        &p.root,
        &[
            "-c",
            "safe.directory=*",
            "add",
            "docs",
            "vibesys.toml",
            ".gitignore",
        ],
    );
    git(
        &p.root,
        &["-c", "safe.directory=*", "commit", "-qm", "init"],
    );
    std::fs::create_dir_all(p.root.join(".vibesys/state/runs/r1")).unwrap();
    std::fs::write(p.root.join(".vibesys/state/runs/r1/baseline"), "TRUSTED\n").unwrap();
    if who == As::User {
        let (uid, gid) = test_user();
        let status = std::process::Command::new("chown")
            .args(["-R", "-h", &format!("{uid}:{gid}")])
            .arg(&p.root)
            .status()
            .unwrap();
        assert!(status.success());
    }
    p
}

fn exec(who: As, p: &Project, extra: &[&str], script: &str) -> Output {
    exec_sh_opts(who, p, "bwrap", extra, script)
}

#[test]
fn credentials_are_hidden_and_the_framework_files_read_only_by_default() {
    require_tool("bwrap", "apt-get install bubblewrap");
    require_tool("git", "apt-get install git");
    for who in users() {
        let p = bare_project(who);
        let out = exec(
            who,
            &p,
            &[],
            "cat agent.toml .env .env.local; \
             for f in vibesys.toml .git/config .git/HEAD; do (echo x >> $f) 2>/dev/null && echo WROTE $f; done; \
             (echo '#!/bin/sh' > .git/hooks/post-checkout) 2>/dev/null && echo WROTE-HOOK; \
             (echo x > .git/info/attributes) 2>/dev/null && echo WROTE-INFO; \
             (echo x > .vibesys/planted) 2>/dev/null && echo WROTE-VIBESYS; \
             mv vibesys.toml v.old 2>/dev/null && echo MOVED-TOML; \
             mv .git git.old 2>/dev/null && echo MOVED-GIT; \
             ls -A .vibesys/state/runs; \
             git log --oneline | wc -l; git status --porcelain >/dev/null && echo STATUS-OK; exit 0",
        );
        assert_code(&out, 0);
        let text = stdout(&out);
        for secret in ["AGENT-TOML-SECRET", "DOTENV-SECRET", "DOTENV-LOCAL-SECRET"] {
            assert!(!text.contains(secret), "{who:?}: {text}");
        }
        for bad in ["WROTE", "MOVED", "r1"] {
            assert!(!text.contains(bad), "{who:?}: {text}");
        }
        assert!(
            text.contains("STATUS-OK"),
            "{who:?}: {text}\n{}",
            stderr(&out)
        );
        assert!(text.lines().any(|l| l.trim() == "1"), "git log: {text}");
        assert_file_is(p.root.join("vibesys.toml"), "[build]\nargv = [\"true\"]\n");
        assert!(!p.root.join(".git/hooks/post-checkout").exists());

        // policy show lists them as defaults.
        let out = vibesys_as(who, &p.root, &["policy", "show", "--backend", "bwrap"]);
        assert_code(&out, 0);
        let text = stdout(&out);
        for line in [
            "default   hidden    agent.toml",
            "default   hidden    .env",
            "default   hidden    .env.local",
            "default   read-only .git",
            "default   read-only vibesys.toml",
            "default   read-only .vibesys",
        ] {
            assert!(text.contains(line), "{line}: {text}");
        }
    }
}

/// A provider's project configuration names commands the operator's next
/// unconfined CLI in the project runs (hooks in `.claude/settings.json`,
/// MCP servers in `.mcp.json`, Codex's and Gemini's settings): read-only
/// by default, as `.git` is, for root and for a user.
#[test]
fn provider_project_configuration_is_read_only_by_default() {
    require_tool("bwrap", "apt-get install bubblewrap");
    for who in users() {
        let p = bare_project(who);
        for (dir, file) in [
            (".claude", "settings.json"),
            (".codex", "config.toml"),
            (".gemini", "settings.json"),
        ] {
            std::fs::create_dir_all(p.root.join(dir)).unwrap();
            std::fs::write(p.root.join(dir).join(file), "{}\n").unwrap();
        }
        std::fs::write(p.root.join(".mcp.json"), "{}\n").unwrap();
        chown_to(who, &[&p.root]);
        let out = exec(
            who,
            &p,
            &[],
            "for f in .claude/settings.json .claude/settings.local.json .codex/config.toml \
             .gemini/settings.json .mcp.json; do (echo x >> $f) 2>/dev/null && echo WROTE $f; done; \
             mv .claude claude.old 2>/dev/null && echo MOVED; exit 0",
        );
        assert_code(&out, 0);
        let text = stdout(&out);
        assert!(
            !text.contains("WROTE") && !text.contains("MOVED"),
            "{who:?}: {text}"
        );
        assert_file_is(p.root.join(".claude/settings.json"), "{}\n");
        assert!(!p.root.join(".claude/settings.local.json").exists());
    }
}

#[test]
fn a_project_without_git_still_works() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let p = project(As::Root);
    std::fs::remove_dir_all(p.root.join(".git")).unwrap();
    let out = exec(As::Root, &p, &[], "echo ok > built && cat built");
    assert_code(&out, 0);
    assert_eq!(stdout(&out), "ok\n");
}

#[test]
fn widening_is_explicit_logged_and_checked() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let p = bare_project(As::Root);
    // `script` under this `vibesys.toml`, exiting `code`.
    let run_with = |toml: &str, script: &str, code: i32| {
        std::fs::write(p.root.join("vibesys.toml"), toml).unwrap();
        let out = exec(As::Root, &p, &[], script);
        assert_code(&out, code);
        out
    };
    let out = run_with(
        "[sandbox]\nwiden = [\".env\"]\n",
        "cat .env; cat agent.toml",
        0,
    );
    assert!(stdout(&out).contains("DOTENV-SECRET"));
    assert!(!stdout(&out).contains("AGENT-TOML-SECRET"));
    assert!(
        stderr(&out).contains("WIDENED") && stderr(&out).contains(".env"),
        "{}",
        stderr(&out)
    );

    // A widen entry that names no default is refused, naming it.
    let out = run_with("[sandbox]\nwiden = [\"src\"]\n", "touch ran", 125);
    assert!(
        stderr(&out).contains("\"src\"") && stderr(&out).contains("not a default protection"),
        "{}",
        stderr(&out)
    );
    assert!(!p.root.join("ran").exists());

    // A weaker operator entry on a default path does not weaken it.
    let out = run_with(
        "[sandbox]\nread_only = [\"agent.toml\"]\n",
        "cat agent.toml",
        0,
    );
    assert!(!stdout(&out).contains("AGENT-TOML-SECRET"));

    // git = "commit": objects and refs writable, configuration never.
    std::fs::write(p.root.join("vibesys.toml"), "[sandbox]\ngit = \"commit\"\n").unwrap();
    let out = exec(
        As::Root,
        &p,
        &[],
        "echo more >> docs/readme; git add docs/readme && \
         git -c user.name=a -c user.email=a@a commit -qm agent && echo COMMITTED; \
         (echo x >> .git/config) 2>/dev/null && echo WROTE-CONFIG; \
         (echo x > .git/hooks/pre-commit) 2>/dev/null && echo WROTE-HOOK; exit 0",
    );
    assert_code(&out, 0);
    let text = stdout(&out);
    assert!(text.contains("COMMITTED"), "{text}\n{}", stderr(&out));
    assert!(!text.contains("WROTE"), "{text}");
    let out = run_with("[sandbox]\ngit = \"all\"\n", "true", 125);
    assert!(
        stderr(&out).contains("git = \"all\"") && stderr(&out).contains("commit"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn operator_values_outside_the_seed_are_refused() {
    require_tool("bwrap", "apt-get install bubblewrap");
    let p = project(As::Root);
    for value in ["1", "true", "on", "yes", "bubblewrap", "docker", "none", ""] {
        let out = command_as(
            As::Root,
            &p.root,
            &vibesys(),
            &["exec", "--", "touch", "ran"],
        )
        .env("VIBESYS_AGENT_SANDBOX", value)
        .output()
        .unwrap();
        assert_code(&out, 125);
        let err = stderr(&out);
        assert!(
            err.contains(&format!("unknown sandbox mode {value:?}"))
                && err.contains("expected one of auto, bwrap, landlock"),
            "{value:?}: {err}"
        );
        assert!(!p.root.join("ran").exists());
    }
    for value in ["auto", " BWRAP ", "bwrap"] {
        let out = command_as(As::Root, &p.root, &vibesys(), &["exec", "--", "true"])
            .env("VIBESYS_AGENT_SANDBOX", value)
            .output()
            .unwrap();
        assert_code(&out, 0);
    }
}

#[test]
fn exec_passes_only_the_allow_list() {
    require_tool("bwrap", "apt-get install bubblewrap");
    for (who, backend) in users()
        .into_iter()
        .flat_map(|w| [(w, "bwrap"), (w, "landlock")])
    {
        let p = project(who);
        let run = |extra: &[&str]| {
            let mut args = vec!["exec", "--confine", backend];
            args.extend_from_slice(extra);
            args.extend(["--", "env"]);
            command_as(who, &p.root, &vibesys(), &args)
                .env(
                    "AWS_SECRET_ACCESS_KEY",
                    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
                )
                .env("GITHUB_TOKEN", "ghp_EXAMPLEEXAMPLEEXAMPLEEXAMPLE0000")
                .env("OPENAI_API_KEY", "sk-EXAMPLE")
                .env("CUDA_VISIBLE_DEVICES", "0,1")
                .env("VIBESYS_AGENT_SANDBOX", "bwrap")
                .env("VIBESYS_AGENT_SANDBOX_ALLOW", "/opt")
                .env("MY_SETTING", "kept-when-asked")
                .output()
                .unwrap()
        };
        let out = run(&[]);
        assert_code(&out, 0);
        let text = stdout(&out);
        for secret in [
            "wJalrXUtnFEMI",
            "ghp_EXAMPLE",
            "sk-EXAMPLE",
            "kept-when-asked",
        ] {
            assert!(!text.contains(secret), "{who:?}: {text}");
        }
        for kept in [
            "CUDA_VISIBLE_DEVICES=0,1",
            "VIBESYS_AGENT_SANDBOX=bwrap",
            "VIBESYS_AGENT_SANDBOX_ALLOW=/opt",
            "PATH=",
            "LANG=C",
        ] {
            assert!(text.contains(kept), "{who:?} {kept}: {text}");
        }
        let out = run(&["--env", "MY_SETTING"]);
        assert!(stdout(&out).contains("MY_SETTING=kept-when-asked"));
        assert!(!stdout(&out).contains("wJalrXUtnFEMI"));
        let out = run(&["--inherit-env"]);
        assert!(stdout(&out).contains("GITHUB_TOKEN=ghp_EXAMPLE"));
        assert_stderr_has(&out, "--inherit-env");
        let out = run(&["--env", "BAD-NAME"]);
        assert_code(&out, 125);
    }
}

#[test]
fn a_hidden_path_in_history_is_reported() {
    require_tool("git", "apt-get install git");
    let p = bare_project(As::Root);
    std::fs::write(p.root.join("secret/key"), "SECRET-KEY\n").unwrap();
    git(&p.root, &["add", "-f", "secret/key"]);
    git(&p.root, &["commit", "-qm", "oops"]);
    git(&p.root, &["rm", "-q", "--cached", "secret/key"]);
    git(&p.root, &["commit", "-qm", "untrack"]);
    let show = |args: &[&str]| vibesys_as(As::Root, &p.root, args);
    let out = show(&["policy", "show", "--hidden", "secret", "--backend", "bwrap"]);
    assert_code(&out, 0);
    assert!(
        stdout(&out).contains("hidden path secret/key is in git history"),
        "{}",
        stdout(&out)
    );
    let out = show(&["policy", "show", "--hidden", "secret", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["hidden_in_history"], serde_json::json!(["secret/key"]));
    let _ = Path::new("");
}
