//! The operator's provider settings may name commands its CLI runs later,
//! unconfined (hooks, a statusline, Codex's `notify`, MCP servers,
//! credential helpers). The settings themselves are read-only in a
//! session, and so is every other file of the state directory but the
//! entries the CLI must write ([`agentshim::Provider::kept_entries`]). A
//! command that lies inside one of those would still be writable: such a
//! session is refused.
//!
//! Every string value of the settings is read as a command line: quotes
//! are dropped (the shell joins `"$HOME"/x` into one word), and each word
//! that is an absolute path, or starts with `~/`, `$NAME/` or `${NAME}/`
//! (`HOME`, or any variable set here, such as `CLAUDE_CONFIG_DIR`), is
//! taken as a path and compared with the kept entries, both as written
//! (`.` and `..` resolved) and with the symbolic links of the part of it
//! that exists resolved (a script whose directory, or itself, links into
//! a kept entry). Broader than what the CLI runs (any string), never
//! narrower. What no such check can see: a command that reaches a kept
//! entry by a relative path after a `cd`, or a script outside them that
//! runs one inside.

use std::path::{Component, Path, PathBuf};

use crate::error::AgentError;

/// Looks up a variable of the environment the operator runs in.
pub type VarLookup<'a> = &'a dyn Fn(&str) -> Option<std::ffi::OsString>;

/// The most a settings file may hold to be checked.
const MAX_SETTINGS: u64 = 4 * 1024 * 1024;

/// Refuses when a settings file of `state_dir` (`provider`'s, see
/// [`agentshim::Provider::settings_files`]) names a path inside one of
/// `kept` (absolute paths of the entries writable in a session). `dirs`
/// are the names the state directory goes by (as configured, and
/// canonical); `home` expands `~` and `$HOME`, `var` any other variable.
pub fn check(
    provider: &agentshim::Provider,
    state_dir: &Path,
    dirs: &[PathBuf],
    (home, var): (&Path, VarLookup<'_>),
    kept: &[PathBuf],
) -> Result<(), AgentError> {
    // Each kept entry under every name of its state directory.
    let kept: Vec<PathBuf> = kept
        .iter()
        .flat_map(|k| {
            let rel = k.strip_prefix(state_dir).ok().map(Path::to_path_buf);
            let mut names = vec![k.clone()];
            if let Some(rel) = rel {
                names.extend(dirs.iter().map(|d| d.join(&rel)));
            }
            names
        })
        .collect();
    for name in provider.settings_files() {
        let file = state_dir.join(name);
        let Some(text) = read_bounded(&file)? else {
            continue;
        };
        // A file that does not parse (Gemini allows comments in its JSON)
        // is read as one command line: broader, never narrower.
        let strings = if name.ends_with(".toml") {
            toml::from_str::<toml::Value>(&text)
                .map(|v| toml_strings(&v))
                .unwrap_or_else(|_| vec![text.clone()])
        } else {
            serde_json::from_str::<serde_json::Value>(&text)
                .map(|v| json_strings(&v))
                .unwrap_or_else(|_| vec![text.clone()])
        };
        for s in strings {
            for path in paths_in(&s, home, var) {
                let resolved = resolve(&path);
                if let Some(entry) = kept
                    .iter()
                    .find(|k| path.starts_with(k) || resolved.starts_with(k))
                {
                    return Err(AgentError::NamedCommandWritable {
                        file,
                        command: path,
                        entry: entry.clone(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// The file's text; `None` when it does not exist (or is empty).
fn read_bounded(file: &Path) -> Result<Option<String>, AgentError> {
    use std::io::Read;
    let err = |reason: String| AgentError::Settings {
        path: file.to_path_buf(),
        reason,
    };
    let f = match std::fs::File::open(file) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e.to_string())),
    };
    let meta = f.metadata().map_err(|e| err(e.to_string()))?;
    if !meta.is_file() {
        return Err(err("it is not a regular file".into()));
    }
    let mut text = String::new();
    f.take(MAX_SETTINGS + 1)
        .read_to_string(&mut text)
        .map_err(|e| err(e.to_string()))?;
    if text.len() as u64 > MAX_SETTINGS {
        return Err(err(format!("it is larger than {MAX_SETTINGS} bytes")));
    }
    Ok((!text.trim().is_empty()).then_some(text))
}

fn json_strings(v: &serde_json::Value) -> Vec<String> {
    match v {
        serde_json::Value::String(s) => vec![s.clone()],
        serde_json::Value::Array(a) => a.iter().flat_map(json_strings).collect(),
        serde_json::Value::Object(o) => o
            .iter()
            .flat_map(|(k, v)| std::iter::once(k.clone()).chain(json_strings(v)))
            .collect(),
        _ => Vec::new(),
    }
}

fn toml_strings(v: &toml::Value) -> Vec<String> {
    match v {
        toml::Value::String(s) => vec![s.clone()],
        toml::Value::Array(a) => a.iter().flat_map(toml_strings).collect(),
        toml::Value::Table(t) => t
            .iter()
            .flat_map(|(k, v)| std::iter::once(k.clone()).chain(toml_strings(v)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The paths a command line names: its words (quotes dropped, split at
/// blanks and shell punctuation) that are absolute or start at the home
/// directory or a variable, normalised lexically (`.` and `..` resolved,
/// no file-system access).
fn paths_in(command: &str, home: &Path, var: VarLookup<'_>) -> Vec<PathBuf> {
    let unquoted: String = command.chars().filter(|c| !"'\"\\".contains(*c)).collect();
    let separators = |c: char| c.is_whitespace() || "`;&|()<>=,".contains(c);
    unquoted
        .split(separators)
        .filter_map(|word| {
            let expanded = if let Some(rest) = word.strip_prefix("~/") {
                home.join(rest)
            } else if let Some(rest) = word.strip_prefix('$') {
                let (name, rest) = match rest.strip_prefix('{') {
                    Some(braced) => braced.split_once("}/")?,
                    None => rest.split_once('/')?,
                };
                let value = if name == "HOME" {
                    home.to_path_buf()
                } else {
                    PathBuf::from(var(name)?)
                };
                if !value.is_absolute() {
                    return None;
                }
                value.join(rest)
            } else if word.starts_with('/') {
                PathBuf::from(word)
            } else {
                return None;
            };
            Some(normalise(&expanded))
        })
        .collect()
}

/// `path` (absolute) with every symbolic link on the way resolved, as
/// the kernel would (a dangling one included: its target may be created
/// later); the part that does not exist is kept as written.
fn resolve(path: &Path) -> PathBuf {
    let mut todo: std::collections::VecDeque<std::ffi::OsString> = path
        .components()
        .map(|c| c.as_os_str().to_os_string())
        .collect();
    let mut out = PathBuf::from("/");
    let mut hops = 0;
    while let Some(c) = todo.pop_front() {
        match Path::new(&c).components().next() {
            Some(Component::RootDir) => out = PathBuf::from("/"),
            Some(Component::ParentDir) => {
                out.pop();
            }
            Some(Component::Normal(name)) => {
                let next = out.join(name);
                match std::fs::read_link(&next) {
                    Ok(target) if hops < 40 => {
                        hops += 1;
                        for t in target.components().rev() {
                            todo.push_front(t.as_os_str().to_os_string());
                        }
                    }
                    _ => out = next,
                }
            }
            _ => {}
        }
    }
    out
}

fn normalise(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_that_are_paths_are_found() {
        let home = Path::new("/home/u");
        let var = |v: &str| (v == "CLAUDE_CONFIG_DIR").then(|| "/cfg".into());
        let found = paths_in(
            "bash ~/.claude/statusline.sh; sh \"$HOME/.claude/projects/x.sh\" --flag=${HOME}/a/../b /usr/bin/env x \"$HOME\"/q '$CLAUDE_CONFIG_DIR'/p $UNSET/z",
            home,
            &var,
        );
        assert_eq!(
            found,
            [
                "/home/u/.claude/statusline.sh",
                "/home/u/.claude/projects/x.sh",
                "/home/u/b",
                "/usr/bin/env",
                "/home/u/q",
                "/cfg/p"
            ]
            .map(PathBuf::from)
        );
    }

    #[test]
    fn a_command_inside_a_kept_entry_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let state = home.join(".claude");
        std::fs::create_dir_all(state.join("projects")).unwrap();
        let kept = vec![state.join("projects"), state.join("history.jsonl")];
        let claude = agentshim::Provider::Claude;
        let none = |_: &str| None;
        let write = |text: &str| std::fs::write(state.join("settings.json"), text).unwrap();
        write(r#"{"statusLine":{"type":"command","command":"bash ~/.claude/statusline.sh"}}"#);
        check(
            &claude,
            &state,
            std::slice::from_ref(&state),
            (home, &none),
            &kept,
        )
        .unwrap();
        write(
            r#"{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"sh ~/.claude/projects/../projects/x.sh"}]}]}}"#,
        );
        let err = check(
            &claude,
            &state,
            std::slice::from_ref(&state),
            (home, &none),
            &kept,
        )
        .unwrap_err();
        assert!(
            matches!(&err, AgentError::NamedCommandWritable { entry, .. } if *entry == state.join("projects")),
            "{err}"
        );
        // Not JSON (comments): the whole text is read as a command line.
        write("{ // a comment\n \"statusLine\": \"~/.claude/projects/s.sh\" }");
        assert!(matches!(
            check(
                &claude,
                &state,
                std::slice::from_ref(&state),
                (home, &none),
                &kept
            ),
            Err(AgentError::NamedCommandWritable { .. })
        ));
        let codex = agentshim::Provider::Codex;
        let codex_dir = home.join(".codex");
        std::fs::create_dir_all(&codex_dir).unwrap();
        std::fs::write(
            codex_dir.join("config.toml"),
            "notify = [\"python3\", \"/home/x/.codex/sessions/n.py\"]\n",
        )
        .unwrap();
        let kept = vec![PathBuf::from("/home/x/.codex/sessions")];
        let err = check(&codex, &codex_dir, &[], (home, &none), &kept).unwrap_err();
        assert!(err.to_string().contains("n.py"), "{err}");
    }

    /// Quoting, another variable or a symbolic link does not hide a
    /// command that lies in a kept entry.
    #[test]
    fn quotes_variables_and_links_do_not_hide_a_kept_entry() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path();
        let state = home.join(".claude");
        std::fs::create_dir_all(state.join("projects")).unwrap();
        std::fs::create_dir_all(home.join("bin")).unwrap();
        std::os::unix::fs::symlink(state.join("projects"), home.join("bin/hooks")).unwrap();
        std::os::unix::fs::symlink("projects/s.sh", state.join("statusline.sh")).unwrap();
        let kept = vec![state.join("projects")];
        let claude = agentshim::Provider::Claude;
        let cfg = state.clone();
        let var = move |v: &str| (v == "CLAUDE_CONFIG_DIR").then(|| cfg.clone().into());
        for command in [
            "bash \"$HOME\"/.claude/projects/x.sh",
            "sh ~/'.claude/projects'/x.sh",
            "sh ${CLAUDE_CONFIG_DIR}/projects/x.sh",
            "sh ~/bin/hooks/x.sh",
            "bash ~/.claude/statusline.sh",
        ] {
            let settings =
                serde_json::json!({"statusLine": {"type": "command", "command": command}});
            std::fs::write(state.join("settings.json"), settings.to_string()).unwrap();
            let got = check(
                &claude,
                &state,
                std::slice::from_ref(&state),
                (home, &var),
                &kept,
            );
            assert!(
                matches!(got, Err(AgentError::NamedCommandWritable { .. })),
                "{command}: {got:?}"
            );
        }
    }
}
