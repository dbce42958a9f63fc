//! `sha256:` digests (vs-pin's [`Digest`]) and writers that hash what
//! passes through them.

use std::io::{self, Read, Write};

use oci_spec::image::DigestAlgorithm;
use sha2::{Digest as _, Sha256};

pub use vs_pin::Digest;

use crate::error::Error;

/// The oci-spec conversions of a [`Digest`] (which vs-pin defines, free of
/// oci-spec), and the digest of a finished hasher.
pub(crate) trait DigestExt: Sized {
    /// The digest `h` computed.
    fn from_hasher(h: Sha256) -> Self;
    /// This digest as oci-spec's type (for descriptors).
    fn to_oci(&self) -> Result<oci_spec::image::Digest, Error>;
    /// The sha256 digest `d` names; any other algorithm is refused.
    fn from_oci(d: &oci_spec::image::Digest) -> Result<Self, Error>;
}

impl DigestExt for Digest {
    fn from_hasher(h: Sha256) -> Self {
        Digest::from_sha256(h.finalize().into())
    }

    fn to_oci(&self) -> Result<oci_spec::image::Digest, Error> {
        self.to_string().parse().map_err(|_| Error::InvalidDigest {
            value: self.to_string(),
        })
    }

    fn from_oci(d: &oci_spec::image::Digest) -> Result<Self, Error> {
        // oci-spec has checked the encoding; vs-pin checks it again.
        match d.algorithm() {
            DigestAlgorithm::Sha256 => Ok(d.to_string().parse()?),
            _ => Err(Error::InvalidDigest {
                value: d.to_string().chars().take(100).collect(),
            }),
        }
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
