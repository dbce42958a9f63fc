//! `session_env_allowlist`: only named variables reach the agent.

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};

use agentshim::Provider;

use crate::error::AgentError;

/// Variables every session keeps: the shell basics, locale, terminal,
/// time zone, temp dir, proxies and CA bundles.
pub const BASE_ALLOWLIST: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TZ",
    "TMPDIR",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
];

/// vibesys's own operator controls and the accelerator selection: they
/// reach a confined command so that a nested vibesys (or a tool run by the
/// agent) sees the same choice, and a GPU job sees its devices.
pub const CONTROL_ALLOWLIST: &[&str] = &[
    "VIBESYS_AGENT_SANDBOX",
    "VIBESYS_AGENT_SANDBOX_ALLOW",
    "CUDA_VISIBLE_DEVICES",
];

/// Credentials of the remote run environments (Modal, SkyPilot and the
/// clouds SkyPilot drives): they stay on the host, where vibesys runs the
/// services' clients. None reaches a session or a confined command, not
/// even when an operator names it with `--env` (refused).
pub const REMOTE_CREDENTIAL_PREFIXES: &[&str] = &["MODAL_", "SKYPILOT_", "SKY_"];

/// Cloud credential variables SkyPilot's clouds read (kept on the host).
pub const REMOTE_CREDENTIAL_NAMES: &[&str] = &[
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "AZURE_CLIENT_SECRET",
    "KUBECONFIG",
    "RUNPOD_API_KEY",
    "LAMBDA_API_KEY",
];

/// Whether `name` is a remote run environment's credential.
pub fn is_remote_credential(name: &str) -> bool {
    REMOTE_CREDENTIAL_NAMES.contains(&name)
        || REMOTE_CREDENTIAL_PREFIXES
            .iter()
            .any(|p| name.starts_with(p))
}

/// Extras must be valid names and never a remote credential.
fn check_extras(extras: &[String]) -> Result<(), AgentError> {
    if let Some(cred) = extras.iter().find(|n| is_remote_credential(n)) {
        return Err(AgentError::RemoteCredential { name: cred.clone() });
    }
    match extras.iter().find(|n| !is_valid_name(n)) {
        Some(bad) => Err(AgentError::InvalidEnvName { name: bad.clone() }),
        None => Ok(()),
    }
}

/// Prefixes kept (the locale family).
pub const ALLOWED_PREFIXES: &[&str] = &["LC_"];

/// The environment a session gets, and the names that were dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionEnv {
    /// The variables kept, in input order.
    pub vars: Vec<(OsString, OsString)>,
    /// Names that were dropped (sorted, unique). Values are never kept.
    pub dropped: Vec<String>,
}

/// True for a valid environment variable name: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Filters `env` down to the allow-list: the base list, `LC_*`, the
/// provider's auth and state variables, and the operator's `extras` (each
/// must be a valid name). Dropped names are logged once, values never.
pub fn session_env_allowlist<I, K, V>(
    env: I,
    provider: &Provider,
    extras: &[String],
) -> Result<SessionEnv, AgentError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    check_extras(extras)?;
    let mut allowed: BTreeSet<&str> = BASE_ALLOWLIST.iter().copied().collect();
    allowed.extend(CONTROL_ALLOWLIST.iter().copied());
    allowed.extend(provider.auth_env_vars().iter().copied());
    allowed.extend(provider.state_env_vars());
    allowed.extend(extras.iter().map(String::as_str));
    filter(env, &allowed)
}

/// The environment of `vibesys exec`: the same allow-list as a session
/// without a provider's variables (the base list, `LC_*`, the operator
/// controls, `CUDA_VISIBLE_DEVICES`) plus the operator's `extras`.
pub fn exec_env_allowlist<I, K, V>(env: I, extras: &[String]) -> Result<SessionEnv, AgentError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    check_extras(extras)?;
    let mut allowed: BTreeSet<&str> = BASE_ALLOWLIST.iter().copied().collect();
    allowed.extend(CONTROL_ALLOWLIST.iter().copied());
    allowed.extend(extras.iter().map(String::as_str));
    filter(env, &allowed)
}

fn filter<I, K, V>(env: I, allowed: &BTreeSet<&str>) -> Result<SessionEnv, AgentError>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut vars = Vec::new();
    let mut dropped = BTreeSet::new();
    for (k, v) in env {
        let (k, v) = (k.as_ref(), v.as_ref());
        let keep = k.to_str().is_some_and(|name| {
            (allowed.contains(name) || ALLOWED_PREFIXES.iter().any(|p| name.starts_with(p)))
                && !is_remote_credential(name)
        });
        if keep {
            vars.push((k.to_os_string(), v.to_os_string()));
        } else {
            dropped.insert(k.to_string_lossy().into_owned());
        }
    }
    let dropped: Vec<String> = dropped.into_iter().collect();
    if !dropped.is_empty() {
        tracing::info!(
            names = %dropped.join(" "),
            "session environment: dropped {} variable(s) not on the allow-list",
            dropped.len()
        );
    }
    Ok(SessionEnv { vars, dropped })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_the_allow_list() {
        let env = [
            ("PATH", "/usr/bin"),
            ("LC_ALL", "C"),
            ("OPENAI_API_KEY", "sk-secret"),
            ("ANTHROPIC_API_KEY", "other-provider"),
            ("AWS_SECRET_ACCESS_KEY", "aws"),
            ("MY_EXTRA", "1"),
        ];
        let out = session_env_allowlist(env, &Provider::Codex, &["MY_EXTRA".into()]).unwrap();
        let names: Vec<_> = out.vars.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["PATH", "LC_ALL", "OPENAI_API_KEY", "MY_EXTRA"]);
        assert_eq!(out.dropped, ["ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY"]);
    }

    #[test]
    fn remote_credentials_stay_on_the_host() {
        let env = [
            ("PATH", "/usr/bin"),
            ("MODAL_TOKEN_ID", "ak-1"),
            ("MODAL_TOKEN_SECRET", "as-1"),
            ("SKYPILOT_API_SERVER_ENDPOINT", "http://sky"),
            ("AWS_ACCESS_KEY_ID", "aws"),
            ("KUBECONFIG", "/k"),
        ];
        for provider in [Provider::Codex, Provider::Claude, Provider::Gemini] {
            let out = session_env_allowlist(env, &provider, &[]).unwrap();
            let names: Vec<_> = out.vars.iter().map(|(k, _)| k.to_str().unwrap()).collect();
            assert_eq!(names, ["PATH"], "{provider:?}");
        }
        let out = exec_env_allowlist(env, &[]).unwrap();
        assert_eq!(out.vars.len(), 1);
        for name in ["MODAL_TOKEN_ID", "SKYPILOT_DEBUG", "AWS_SECRET_ACCESS_KEY"] {
            let err = session_env_allowlist(env, &Provider::Codex, &[name.into()])
                .unwrap_err()
                .to_string();
            assert!(err.contains(name) && err.contains("host"), "{err}");
            assert!(exec_env_allowlist(env, &[name.into()]).is_err());
        }
    }

    #[test]
    fn extras_must_be_valid_names() {
        for bad in ["", "1X", "A-B", "A=B", "A B"] {
            let err =
                session_env_allowlist(Vec::<(&str, &str)>::new(), &Provider::Claude, &[bad.into()]);
            assert!(err.is_err(), "{bad:?}");
        }
    }
}
