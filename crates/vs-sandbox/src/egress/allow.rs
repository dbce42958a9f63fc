//! The egress allow-list: `[sandbox] allow_hosts` and `--allow-host`
//! patterns, parsed and validated once, matched by the proxy.
//!
//! A pattern is `HOST`, `HOST:PORT`, `*.DOMAIN[:PORT]`, an IPv4 address
//! or a bracketed IPv6 address (`[::1]:8080`). With no port it admits 443
//! and 80; `*.` matches subdomains only (`*.example.com` admits
//! `a.example.com`, never `example.com`). Names compare without case.

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

/// Ports a pattern without one admits.
pub const DEFAULT_PORTS: [u16; 2] = [443, 80];

/// A host pattern that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("allow_hosts entry {pattern:?} {reason}")]
pub struct HostPatternError {
    /// The pattern as given.
    pub pattern: String,
    /// What is wrong with it.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    /// A name, lower case.
    Name(String),
    /// `*.` and a domain: the suffix with its leading dot, lower case.
    Subdomains(String),
    /// An address, matched only by the same address literal.
    Address(IpAddr),
}

/// One allow-list entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    host: HostMatch,
    port: Option<u16>,
}

impl HostPattern {
    /// Parses and validates one pattern.
    pub fn parse(text: &str) -> Result<Self, HostPatternError> {
        let bad = |reason: &str| HostPatternError {
            pattern: text.to_owned(),
            reason: reason.to_owned(),
        };
        if text.is_empty() || text.len() > 261 {
            return Err(bad("is empty or longer than a host name and port can be"));
        }
        let (host, port) = split_host_port(text).map_err(|r| bad(&r))?;
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n > 0 && !p.starts_with('+') => Some(n),
                _ => return Err(bad("has a port that is not a number from 1 to 65535")),
            },
        };
        let host = if let Some(inner) = host.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| bad("has an unclosed '['"))?;
            match inner.parse::<std::net::Ipv6Addr>() {
                Ok(a) => HostMatch::Address(IpAddr::V6(a)),
                Err(_) => return Err(bad("has brackets around something not an IPv6 address")),
            }
        } else if let Ok(a) = host.parse::<std::net::Ipv4Addr>() {
            HostMatch::Address(IpAddr::V4(a))
        } else if let Some(domain) = host.strip_prefix("*.") {
            check_name(domain).map_err(|r| bad(&r))?;
            HostMatch::Subdomains(format!(".{}", domain.to_ascii_lowercase()))
        } else {
            check_name(host).map_err(|r| bad(&r))?;
            HostMatch::Name(host.to_ascii_lowercase())
        };
        Ok(Self { host, port })
    }

    /// Whether this pattern admits `host` (a name or an address literal,
    /// as a client asked for it) on `port`.
    pub fn admits(&self, host: &Host, port: u16) -> bool {
        let port_ok = match self.port {
            Some(p) => p == port,
            None => DEFAULT_PORTS.contains(&port),
        };
        port_ok
            && match (&self.host, host) {
                (HostMatch::Name(n), Host::Name(h)) => n == h,
                (HostMatch::Subdomains(s), Host::Name(h)) => h.len() > s.len() && h.ends_with(s),
                (HostMatch::Address(a), Host::Address(b)) => a == b,
                _ => false,
            }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostMatch::Name(n) => write!(f, "{n}")?,
            HostMatch::Subdomains(s) => write!(f, "*{s}")?,
            HostMatch::Address(IpAddr::V6(a)) => write!(f, "[{a}]")?,
            HostMatch::Address(IpAddr::V4(a)) => write!(f, "{a}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => write!(f, ":{{443,80}}"),
        }
    }
}

impl Serialize for HostPattern {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// `HOST[:PORT]`, the port split off (an IPv6 address only in brackets).
fn split_host_port(text: &str) -> Result<(&str, Option<&str>), String> {
    if text.starts_with('[') {
        return match text.find(']') {
            Some(end) => match &text[end + 1..] {
                "" => Ok((text, None)),
                rest => match rest.strip_prefix(':') {
                    Some(p) => Ok((&text[..=end], Some(p))),
                    None => Err("has something other than :PORT after ']'".into()),
                },
            },
            None => Err("has an unclosed '['".into()),
        };
    }
    match text.split_once(':') {
        None => Ok((text, None)),
        Some((_, p)) if p.contains(':') => {
            Err("has more than one ':' (write an IPv6 address in brackets)".into())
        }
        Some((h, p)) => Ok((h, Some(p))),
    }
}

/// A DNS name: labels of letters, digits, '-' and '_', none empty or
/// longer than 63, 253 in all.
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err("has an empty or over-long host name".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("has an empty or over-long label in its host name".into());
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(
                "has a character a host name cannot hold ('*' only as a leading '*.')".into(),
            );
        }
    }
    Ok(())
}

/// A host a client asked for: a name (lower case) or an address literal.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Host {
    /// A DNS name.
    Name(String),
    /// An address literal.
    Address(IpAddr),
}

impl Host {
    /// Reads a host as a client sends it (`[::1]` or `::1`, `127.0.0.1`,
    /// a name). `None` when it is neither a valid name nor an address.
    pub fn parse(text: &str) -> Option<Self> {
        let bare = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        if let Ok(a) = bare.parse::<IpAddr>() {
            return Some(Self::Address(a));
        }
        check_name(text).ok()?;
        Some(Self::Name(text.to_ascii_lowercase()))
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => write!(f, "{n}"),
            Self::Address(IpAddr::V6(a)) => write!(f, "[{a}]"),
            Self::Address(IpAddr::V4(a)) => write!(f, "{a}"),
        }
    }
}

/// The allow-list: non-empty when it restricts anything.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct AllowList {
    patterns: Vec<HostPattern>,
}

impl AllowList {
    /// Parses every pattern; the error names each one that is invalid.
    pub fn parse<S: AsRef<str>>(
        texts: impl IntoIterator<Item = S>,
    ) -> Result<Self, Vec<HostPatternError>> {
        let mut list = Self::default();
        let mut errors = Vec::new();
        for t in texts {
            match HostPattern::parse(t.as_ref()) {
                Ok(p) => list.push(p),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(list)
        } else {
            Err(errors)
        }
    }

    /// Adds a pattern (a duplicate is kept once).
    pub fn push(&mut self, pattern: HostPattern) {
        if !self.patterns.contains(&pattern) {
            self.patterns.push(pattern);
        }
    }

    /// No pattern: nothing is restricted by this list.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The patterns, in order.
    pub fn patterns(&self) -> &[HostPattern] {
        &self.patterns
    }

    /// Whether some pattern admits `host` on `port`.
    pub fn admits(&self, host: &Host, port: u16) -> bool {
        self.patterns.iter().any(|p| p.admits(host, port))
    }

    /// Whether the list names `addr` itself (a loopback or link-local
    /// address is reached only then).
    pub fn names_address(&self, addr: IpAddr) -> bool {
        self.patterns
            .iter()
            .any(|p| p.host == HostMatch::Address(addr))
    }
}

/// The patterns, `, `-separated: how reports name the list.
impl fmt::Display for AllowList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.patterns.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// An address a name must not lead to unless the list names it: loopback,
/// link-local, unspecified, multicast (IPv4-mapped IPv6 included).
pub fn is_local_address(addr: IpAddr) -> bool {
    let addr = match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    };
    match addr {
        IpAddr::V4(a) => {
            a.is_loopback()
                || a.is_link_local()
                || a.is_unspecified()
                || a.is_multicast()
                || a.is_broadcast()
        }
        IpAddr::V6(a) => {
            a.is_loopback()
                || a.is_unspecified()
                || a.is_multicast()
                || (a.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(t: &str) -> Host {
        Host::parse(t).unwrap_or_else(|| panic!("{t}"))
    }

    #[test]
    fn ports_default_to_https_and_http() {
        let p = HostPattern::parse("API.anthropic.com").unwrap_or_else(|e| panic!("{e}"));
        assert!(p.admits(&host("api.anthropic.com"), 443));
        assert!(p.admits(&host("api.ANTHROPIC.com"), 80));
        assert!(!p.admits(&host("api.anthropic.com"), 22));
        assert!(!p.admits(&host("x.api.anthropic.com"), 443));
    }

    #[test]
    fn wildcard_matches_subdomains_only() {
        let p = HostPattern::parse("*.example.com:8443").unwrap_or_else(|e| panic!("{e}"));
        assert!(p.admits(&host("a.example.com"), 8443));
        assert!(p.admits(&host("a.b.example.com"), 8443));
        assert!(!p.admits(&host("example.com"), 8443));
        assert!(!p.admits(&host("badexample.com"), 8443));
        assert!(!p.admits(&host("a.example.com"), 443));
    }

    #[test]
    fn addresses_match_only_themselves() {
        let list =
            AllowList::parse(["127.0.0.1:8080", "[::1]:9"]).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(list.admits(&host("127.0.0.1"), 8080));
        assert!(list.admits(&host("[::1]"), 9));
        assert!(!list.admits(&host("localhost"), 8080));
        assert!(!list.admits(&host("127.0.0.1"), 8081));
        assert!(list.names_address("127.0.0.1".parse().unwrap_or_else(|_| panic!())));
    }

    #[test]
    fn bad_patterns_are_named() {
        let errors = AllowList::parse([
            "ok.com", "*", "a b", "x:0", "x:99999", "::1", "a..b", "*.*.x",
        ])
        .err()
        .unwrap_or_default();
        let named: Vec<&str> = errors.iter().map(|e| e.pattern.as_str()).collect();
        assert_eq!(
            named,
            ["*", "a b", "x:0", "x:99999", "::1", "a..b", "*.*.x"]
        );
    }

    #[test]
    fn local_addresses() {
        for a in [
            "127.0.0.5",
            "169.254.169.254",
            "::1",
            "fe80::1",
            "0.0.0.0",
            "::ffff:127.0.0.1",
        ] {
            assert!(
                is_local_address(a.parse().unwrap_or_else(|_| panic!("{a}"))),
                "{a}"
            );
        }
        assert!(!is_local_address(
            "1.1.1.1".parse().unwrap_or_else(|_| panic!())
        ));
    }
}
