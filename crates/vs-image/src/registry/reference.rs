//! `ImageRef`: a registry image reference (`HOST[:PORT]/REPO[:TAG][@sha256:...]`).

use std::fmt;
use std::str::FromStr;

use oci_client::Reference;

use crate::digest::Digest;
use crate::error::Error;

/// A validated image reference: registry, repository, and a tag and/or a
/// sha256 digest. The grammar is the distribution reference's (parsed by
/// oci-spec); a name without a registry means Docker Hub, as everywhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageRef {
    inner: Reference,
    digest: Option<Digest>,
}

impl ImageRef {
    /// The registry host (`docker.io` resolved to its API host).
    pub fn registry(&self) -> &str {
        self.inner.resolve_registry()
    }

    /// The registry as written (`127.0.0.1:5000`, `docker.io`).
    pub fn registry_name(&self) -> &str {
        self.inner.registry()
    }

    /// The repository (`vibesys/editor`).
    pub fn repository(&self) -> &str {
        self.inner.repository()
    }

    /// The tag, if one was given.
    pub fn tag(&self) -> Option<&str> {
        self.inner.tag()
    }

    /// The digest, if one was given.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// `REGISTRY/REPOSITORY` without tag or digest.
    pub fn repository_name(&self) -> String {
        format!("{}/{}", self.registry_name(), self.repository())
    }

    /// `REGISTRY/REPOSITORY@DIGEST`: the reference every tool (docker,
    /// podman, skopeo, Modal, SkyPilot) pulls exactly this image by.
    pub fn with_digest(&self, d: &Digest) -> Self {
        Self {
            inner: Reference::with_digest(
                self.registry_name().to_owned(),
                self.repository().to_owned(),
                d.to_string(),
            ),
            digest: Some(d.clone()),
        }
    }

    /// `REGISTRY/REPOSITORY:TAG`.
    pub fn with_tag(&self, tag: &str) -> Self {
        Self {
            inner: Reference::with_tag(
                self.registry_name().to_owned(),
                self.repository().to_owned(),
                tag.to_owned(),
            ),
            digest: None,
        }
    }

    /// The same repository on the same registry.
    pub fn same_repository(&self, other: &Self) -> bool {
        self.registry() == other.registry() && self.repository() == other.repository()
    }

    /// Whether the registry is on this machine's loopback (`localhost`,
    /// `127.0.0.0/8`, `::1`): plain HTTP is allowed there without a flag.
    pub fn is_loopback(&self) -> bool {
        let host = self.registry();
        let host = match host.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or(rest),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h),
        };
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    pub(crate) fn oci(&self) -> &Reference {
        &self.inner
    }
}

impl FromStr for ImageRef {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let refuse = |reason: String| Error::Reference {
            reference: s.chars().take(300).collect(),
            reason,
        };
        if s.len() > 1024 {
            return Err(refuse("longer than 1024 bytes".to_owned()));
        }
        let inner: Reference = s.parse().map_err(|e| refuse(format!("{e}")))?;
        let digest = match inner.digest() {
            Some(d) => Some(d.parse::<Digest>().map_err(|_| {
                refuse("only sha256 digests (sha256:<64 lowercase hex>) are accepted".to_owned())
            })?),
            None => None,
        };
        Ok(Self { inner, digest })
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repository_name())?;
        if let Some(t) = self.tag() {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_parse_and_print() {
        let d = "sha256:".to_owned() + &"a".repeat(64);
        let r: ImageRef = format!("127.0.0.1:5000/vs/editor@{d}").parse().unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "vs/editor");
        assert_eq!(r.digest().unwrap().to_string(), d);
        assert!(r.is_loopback());
        assert_eq!(r.to_string(), format!("127.0.0.1:5000/vs/editor@{d}"));
        let t: ImageRef = "localhost:5000/a:v1".parse().unwrap();
        assert_eq!(t.tag(), Some("v1"));
        assert!(t.is_loopback());
        assert!(
            !"registry.example.org/a:v1"
                .parse::<ImageRef>()
                .unwrap()
                .is_loopback()
        );
        assert!(
            !"127.0.0.1.example.org/a"
                .parse::<ImageRef>()
                .unwrap()
                .is_loopback()
        );
        assert!("x/a@sha512:abc".parse::<ImageRef>().is_err());
        assert!("127.0.0.1:5000/Upper".parse::<ImageRef>().is_err());
    }
}
