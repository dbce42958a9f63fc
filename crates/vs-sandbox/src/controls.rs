//! Operator controls: `VIBESYS_AGENT_SANDBOX`, enforcement requirements
//! and the error that stops a run when confinement cannot be had.

use serde::Serialize;

use crate::error::SandboxError;
pub use crate::error::SandboxUnavailableError;

/// The environment variable that chooses the confinement mechanism.
pub const SANDBOX_ENV: &str = "VIBESYS_AGENT_SANDBOX";
/// The environment variable naming extra read-only host paths
/// (separated like `PATH`).
pub const ALLOW_ENV: &str = "VIBESYS_AGENT_SANDBOX_ALLOW";

/// The confinement mechanism an operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConfineMode {
    /// The platform's strong default: bubblewrap on Linux, Seatbelt on macOS.
    Auto,
    /// bubblewrap (Linux).
    Bwrap,
    /// Landlock (Linux); weaker, never chosen automatically.
    Landlock,
    /// A Docker container.
    Docker,
    /// No confinement (honoured only when enforcement is not required).
    Off,
}

impl ConfineMode {
    /// Parses an operator value of `VIBESYS_AGENT_SANDBOX`. Case and
    /// surrounding spaces are ignored. Exactly `auto`, `bwrap`, `landlock`
    /// choose a mechanism and `0`, `false`, `off`, `no` disable
    /// confinement; anything else (`1`, `true`, `yes`, `bubblewrap`,
    /// `docker`, `none`, an empty value, a typo) is an error, whether or
    /// not enforcement is required: a value that only looks like it enables
    /// a sandbox must never silently pick one. Docker is chosen with
    /// `--confine docker` or the run environment, not this variable.
    pub fn parse(value: &str, source_name: &'static str) -> Result<Self, SandboxError> {
        match value.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Self::Auto),
            "bwrap" => Ok(Self::Bwrap),
            "landlock" => Ok(Self::Landlock),
            "0" | "false" | "off" | "no" => Ok(Self::Off),
            _ => Err(SandboxError::UnknownMode {
                value: value.chars().take(80).collect(),
                source_name,
            }),
        }
    }

    /// Reads the mode from the value of `VIBESYS_AGENT_SANDBOX` (unset
    /// means `auto`). The caller passes the value explicitly.
    pub fn from_env_value(value: Option<&std::ffi::OsStr>) -> Result<Self, SandboxError> {
        match value {
            None => Ok(Self::Auto),
            Some(v) => match v.to_str() {
                Some(s) => Self::parse(s, SANDBOX_ENV),
                None => Err(SandboxError::UnknownMode {
                    value: v.to_string_lossy().into_owned(),
                    source_name: SANDBOX_ENV,
                }),
            },
        }
    }

    /// The canonical name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Bwrap => "bwrap",
            Self::Landlock => "landlock",
            Self::Docker => "docker",
            Self::Off => "off",
        }
    }
}

/// Whether the caller requires the agent to be confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcement {
    /// A missing or disabled mechanism is an error (every run entry point).
    Required,
    /// A library embedder may run unconfined; a loud log line says so.
    Optional,
}

/// Decides what to do with a disabled mode: an error under
/// [`Enforcement::Required`], a warning otherwise. Returns true when the
/// caller may run unconfined.
pub fn allow_unconfined(
    mode: ConfineMode,
    enforcement: Enforcement,
) -> Result<bool, SandboxUnavailableError> {
    if mode != ConfineMode::Off {
        return Ok(false);
    }
    match enforcement {
        Enforcement::Required => Err(SandboxUnavailableError::new(
            "agent confinement",
            format!(
                "confinement is disabled ({SANDBOX_ENV}=off or --confine none) but this run requires enforcement"
            ),
            format!(
                "unset {SANDBOX_ENV} or set it to auto, bwrap or landlock; an embedder that accepts an unconfined agent passes --no-require-enforcement"
            ),
        )),
        Enforcement::Optional => {
            tracing::warn!(
                "AGENT CONFINEMENT DISABLED: the command runs with the full rights of this user ({SANDBOX_ENV}=off)"
            );
            Ok(true)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_case_and_spaces() {
        assert_eq!(
            ConfineMode::parse("  BWRAP ", "t").unwrap(),
            ConfineMode::Bwrap
        );
        assert_eq!(
            ConfineMode::parse("LandLock", "t").unwrap(),
            ConfineMode::Landlock
        );
        for off in ["0", "false", "OFF", " no "] {
            assert_eq!(ConfineMode::parse(off, "t").unwrap(), ConfineMode::Off);
        }
        assert_eq!(ConfineMode::parse(" Auto", "t").unwrap(), ConfineMode::Auto);
        assert_eq!(
            ConfineMode::from_env_value(None).unwrap(),
            ConfineMode::Auto
        );
    }

    #[test]
    fn values_outside_the_seed_are_errors() {
        for bad in [
            "1",
            "true",
            "on",
            "yes",
            "bubblewrap",
            "docker",
            "none",
            "",
            "  ",
        ] {
            let err = ConfineMode::parse(bad, SANDBOX_ENV).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("expected one of auto, bwrap, landlock"),
                "{bad:?}: {text}"
            );
        }
    }

    #[test]
    fn unknown_values_are_errors() {
        let err = ConfineMode::parse("firejail", SANDBOX_ENV).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("firejail") && text.contains(SANDBOX_ENV),
            "{text}"
        );
    }

    #[test]
    fn disabled_is_refused_when_required() {
        let err = allow_unconfined(ConfineMode::Off, Enforcement::Required).unwrap_err();
        assert!(err.to_string().contains("requires enforcement"));
        assert!(allow_unconfined(ConfineMode::Off, Enforcement::Optional).unwrap());
        assert!(!allow_unconfined(ConfineMode::Bwrap, Enforcement::Required).unwrap());
    }
}
