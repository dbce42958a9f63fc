//! Validated identifiers: run ids and candidate ids.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Result, RuntimeError};

/// Longest identifier accepted (the grammar allows 1 + 127 characters).
const MAX_ID_LEN: usize = 128;

/// Checks `^[a-z0-9][a-z0-9._-]{0,127}$`.
fn check_id(what: &'static str, value: &str) -> Result<()> {
    let err = |reason| RuntimeError::InvalidId {
        what,
        value: value.chars().take(160).collect(),
        reason,
    };
    let bytes = value.as_bytes();
    let Some(first) = bytes.first() else {
        return Err(err("it is empty"));
    };
    if bytes.len() > MAX_ID_LEN {
        return Err(err("it is longer than 128 characters"));
    }
    if !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
        return Err(err("it must start with a lowercase letter or a digit"));
    }
    if !bytes
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-'))
    {
        return Err(err(
            "only lowercase letters, digits, '.', '_' and '-' are allowed",
        ));
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Parses and validates an identifier.
            pub fn new(value: &str) -> Result<Self> {
                check_id($what, value)?;
                Ok(Self(value.to_owned()))
            }

            /// The identifier as text; safe as a single path component.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = RuntimeError;
            fn from_str(s: &str) -> Result<Self> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = RuntimeError;
            fn try_from(s: String) -> Result<Self> {
                check_id($what, &s)?;
                Ok(Self(s))
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// A run id: `^[a-z0-9][a-z0-9._-]{0,127}$`, so it is always one safe
    /// path component (never `.`, `..`, empty or containing `/`).
    RunId,
    "run id"
);

id_type!(
    /// A candidate id, same grammar as [`RunId`].
    CandidateId,
    "candidate id"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        for ok in ["a", "0", "run-1", "r.2_x", &"a".repeat(128)] {
            assert!(RunId::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "-a",
            "_a",
            ".a",
            "A",
            "a/b",
            "a b",
            "é",
            "a\0",
            &"a".repeat(129),
        ] {
            assert!(RunId::new(bad).is_err(), "{bad:?}");
        }
        let j: std::result::Result<RunId, _> = serde_json::from_str("\"../x\"");
        assert!(j.is_err());
    }
}
