//! `sha256:` content digests.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

use crate::error::Error;

/// A validated `sha256:<64 lowercase hex>` content digest.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// Digest of a byte slice.
    pub fn of(bytes: &[u8]) -> Self {
        Self::from_sha256(Sha256::digest(bytes).into())
    }

    /// The digest whose sha256 hash is `hash` (what a hasher finished with).
    pub fn from_sha256(hash: [u8; 32]) -> Self {
        Self {
            hex: hex::encode(hash),
        }
    }

    /// The 64 hex digits, without the algorithm.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The path of this blob inside an OCI layout (`blobs/sha256/<hex>`).
    pub fn blob_path(&self) -> String {
        format!("blobs/sha256/{}", self.hex)
    }
}

impl FromStr for Digest {
    type Err = Error;
    /// Only sha256 is accepted, encoded as the OCI image spec registers it:
    /// exactly 64 lowercase hex digits (so a digest is also a safe file
    /// name: no `/`, no `..`).
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.strip_prefix("sha256:") {
            Some(hex)
                if hex.len() == 64
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
            {
                Ok(Self {
                    hex: hex.to_owned(),
                })
            }
            _ => Err(Error::InvalidDigest {
                value: s.chars().take(100).collect(),
            }),
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let d = Digest::of(b"");
        assert_eq!(
            d.to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(d.to_string().parse::<Digest>().unwrap(), d);
        for bad in [
            "",
            "sha256:",
            "md5:00",
            "sha512:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85",
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b8555",
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85g",
            " sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "SHA256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            "sha256:../../etc/passwd",
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
    }
}
