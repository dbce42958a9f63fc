//! `sha256:` digests and writers that hash what passes through them.

use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

use oci_spec::image::DigestAlgorithm;
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
        Self::from_hasher(Sha256::new_with_prefix(bytes))
    }

    pub(crate) fn from_hasher(h: Sha256) -> Self {
        Self {
            hex: hex::encode(h.finalize()),
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

impl Digest {
    /// This digest as oci-spec's type (for descriptors).
    pub(crate) fn to_oci(&self) -> Result<oci_spec::image::Digest, Error> {
        self.to_string().parse().map_err(|_| Error::InvalidDigest {
            value: self.to_string(),
        })
    }

    /// The sha256 digest `d` names; any other algorithm is refused.
    pub(crate) fn from_oci(d: &oci_spec::image::Digest) -> Result<Self, Error> {
        // oci-spec has checked the encoding: 64 lowercase hex digits for sha256.
        match d.algorithm() {
            DigestAlgorithm::Sha256 => Ok(Self {
                hex: d.digest().to_owned(),
            }),
            _ => Err(Error::InvalidDigest {
                value: d.to_string().chars().take(100).collect(),
            }),
        }
    }
}

impl FromStr for Digest {
    type Err = Error;
    /// Validation is oci-spec's (algorithm grammar, length and lowercase
    /// hex of a sha256 encoding); only sha256 is accepted.
    fn from_str(s: &str) -> Result<Self, Error> {
        let d: oci_spec::image::Digest = s.parse().map_err(|_| Error::InvalidDigest {
            value: s.chars().take(100).collect(),
        })?;
        Self::from_oci(&d)
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

/// A writer that hashes and counts everything written through it.
pub(crate) struct HashWriter<W> {
    inner: W,
    hasher: Sha256,
    count: u64,
    enabled: bool,
}

impl<W: Write> HashWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            count: 0,
            enabled: true,
        }
    }

    /// Counts but does not hash (the digest returned is meaningless).
    pub(crate) fn counting(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            count: 0,
            enabled: false,
        }
    }

    /// The inner writer, the digest and the byte count.
    pub(crate) fn finish(self) -> (W, Digest, u64) {
        (self.inner, Digest::from_hasher(self.hasher), self.count)
    }
}

impl<W: Write> Write for HashWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        if self.enabled {
            self.hasher.update(&buf[..n]);
        }
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A reader that hashes and counts everything read through it.
pub(crate) struct HashReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Reads the rest to the end, then returns the digest and byte count.
    pub(crate) fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((Digest::from_hasher(self.hasher), self.count))
    }
}

impl<R: Read> Read for HashReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
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
            "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
            "sha256:../../etc/passwd",
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad}");
        }
    }
}
