//! The environment a container command receives: variables named in an
//! allow-list, with values read from the host environment at the time of
//! the command. Values are never stored in a plan, logged, or put in an
//! error; credential-like values are not even shown in `Debug` output.

use std::ffi::OsString;

use serde::Serialize;

/// Variables passed by default: terminal and locale settings and the
/// provider credentials an agent needs to reach its model API.
pub const DEFAULT_ENV_ALLOW: &[&str] = &[
    "TERM",
    "COLORTERM",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "NO_COLOR",
    "ANTHROPIC_API_KEY",
    "OPENAI_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
];

/// Names of environment variables allowed into the container.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct EnvAllowList {
    names: Vec<String>,
}

impl Default for EnvAllowList {
    fn default() -> Self {
        Self::new(DEFAULT_ENV_ALLOW.iter().copied())
    }
}

impl std::fmt::Debug for EnvAllowList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.names).finish()
    }
}

/// True for names that look like they hold a credential.
pub fn is_credential_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    [
        "KEY",
        "TOKEN",
        "SECRET",
        "PASSWORD",
        "PASSWD",
        "CREDENTIAL",
        "AUTH",
        "COOKIE",
        "SESSION",
    ]
    .iter()
    .any(|w| upper.contains(w))
}

impl EnvAllowList {
    /// An allow-list of these names; invalid names (empty, containing `=`
    /// or NUL) are dropped, duplicates removed.
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out: Vec<String> = Vec::new();
        for n in names {
            let n = n.as_ref();
            if n.is_empty() || n.contains(['=', '\0']) || out.iter().any(|o| o == n) {
                continue;
            }
            out.push(n.to_owned());
        }
        Self { names: out }
    }

    /// Adds names.
    #[must_use]
    pub fn with<I, S>(self, more: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let all: Vec<String> = self
            .names
            .into_iter()
            .chain(more.into_iter().map(|s| s.as_ref().to_owned()))
            .collect();
        Self::new(all)
    }

    /// The allowed names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether `name` is allowed.
    pub fn allows(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// `NAME=value` for every allowed name set in `env` (UTF-8 values
    /// only; others are skipped, never printed).
    pub fn pick<'a>(
        &self,
        env: impl IntoIterator<Item = (&'a OsString, &'a OsString)>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in env {
            let (Some(k), Some(v)) = (k.to_str(), v.to_str()) else {
                continue;
            };
            if self.allows(k) {
                out.push(format!("{k}={v}"));
            }
        }
        out
    }

    /// [`EnvAllowList::pick`] from this process's environment.
    pub fn pick_from_process(&self) -> Vec<String> {
        let env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        self.pick(env.iter().map(|(k, v)| (k, v)))
    }
}

/// A `NAME=value` list rendered for messages: credential-like values are
/// replaced by `<redacted>`.
pub fn redacted(entries: &[String]) -> Vec<String> {
    entries
        .iter()
        .map(|e| match e.split_once('=') {
            Some((k, _)) if is_credential_name(k) => format!("{k}=<redacted>"),
            _ => e.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_names_pass() {
        let list = EnvAllowList::new(["A", "OPENAI_API_KEY", "bad=name", ""]);
        assert_eq!(list.names(), ["A", "OPENAI_API_KEY"]);
        let env: Vec<(OsString, OsString)> = vec![
            ("A".into(), "1".into()),
            ("B".into(), "2".into()),
            ("OPENAI_API_KEY".into(), "sk-secret".into()),
        ];
        let picked = list.pick(env.iter().map(|(k, v)| (k, v)));
        assert_eq!(picked, ["A=1", "OPENAI_API_KEY=sk-secret"]);
        let shown = redacted(&picked);
        assert_eq!(shown, ["A=1", "OPENAI_API_KEY=<redacted>"]);
        assert!(!format!("{list:?}").contains("sk-secret"));
    }
}
