//! The packages an image's content holds, for its SBOM and the lock: Debian
//! packages from the content's `var/lib/dpkg/status`, Python distributions
//! (an unpacked wheel) from `*.dist-info/METADATA`. Each is named by its
//! package URL (`pkg:deb/debian/git@1:2.39.5-0+deb12u3?arch=amd64`,
//! `pkg:pypi/claude-agent-sdk@0.2.189`), and keyed `deb:git`,
//! `pypi:claude-agent-sdk` where versions are compared.

use std::collections::BTreeMap;
use std::path::Path;

use crate::input::{Group, Kind};

/// Largest dpkg status file read (a full Debian system's is a few MiB).
const MAX_STATUS: u64 = 32 << 20;
/// Largest METADATA file read.
const MAX_METADATA: u64 = 1 << 20;

/// One package of the content.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Package {
    /// The package manager's type in a purl: `deb` or `pypi`.
    pub ecosystem: &'static str,
    /// Package name.
    pub name: String,
    /// Version as the package manager writes it.
    pub version: String,
    /// Architecture (Debian), if any.
    pub arch: Option<String>,
}

impl Package {
    /// The package URL.
    pub(crate) fn purl(&self) -> String {
        let ns = if self.ecosystem == "deb" {
            "debian/"
        } else {
            ""
        };
        let mut s = format!("pkg:{}/{ns}{}@{}", self.ecosystem, self.name, self.version);
        if let Some(a) = &self.arch {
            s.push_str("?arch=");
            s.push_str(a);
        }
        s
    }
}

/// `(key, version)` of a package URL written by [`Package::purl`]:
/// `pkg:deb/debian/git@1:2.39?arch=amd64` -> (`deb:git`, `1:2.39`).
pub(crate) fn key_of_purl(purl: &str) -> Option<(String, String)> {
    let rest = purl.strip_prefix("pkg:")?;
    let rest = rest.split(['?', '#']).next()?;
    let (ty, path) = rest.split_once('/')?;
    let (path, version) = path.rsplit_once('@')?;
    let name = path.rsplit('/').next()?;
    if ty.is_empty() || name.is_empty() || version.is_empty() {
        return None;
    }
    Some((format!("{ty}:{name}"), version.to_owned()))
}

/// The packages found in the groups' files, sorted; a file that cannot be
/// read or parsed is skipped (the SBOM is a record, not a gate) and logged.
pub(crate) fn of_groups(groups: &[&Group]) -> Vec<Package> {
    let mut out = Vec::new();
    for g in groups {
        for e in &g.entries {
            if !matches!(e.kind, Kind::File { .. }) {
                continue;
            }
            let dpkg = e.path == "var/lib/dpkg/status";
            let wheel = e.path.ends_with(".dist-info/METADATA");
            if !dpkg && !wheel {
                continue;
            }
            let file = g.host_root.join(&e.path);
            let limit = if dpkg { MAX_STATUS } else { MAX_METADATA };
            match read(&file, limit) {
                Ok(text) if dpkg => out.extend(parse_dpkg_status(&text)),
                Ok(text) => out.extend(parse_metadata(&text)),
                Err(why) => tracing::warn!("SBOM: {} skipped: {why}", file.display()),
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

fn read(path: &Path, limit: u64) -> Result<String, String> {
    crate::textfile::read_text(path, limit, |reason| crate::error::Error::InputPath {
        path: path.to_owned(),
        reason,
    })
    .map_err(|e| e.to_string())
}

/// The installed packages of a dpkg status file.
pub(crate) fn parse_dpkg_status(text: &str) -> Vec<Package> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let mut fields: BTreeMap<&str, &str> = BTreeMap::new();
        for line in stanza.lines() {
            if line.starts_with([' ', '\t']) {
                continue;
            }
            if let Some((k, v)) = line.split_once(':') {
                fields.insert(k.trim(), v.trim());
            }
        }
        let installed = fields
            .get("Status")
            .is_some_and(|s| s.ends_with(" installed"));
        if let (true, Some(name), Some(version)) =
            (installed, fields.get("Package"), fields.get("Version"))
        {
            out.push(Package {
                ecosystem: "deb",
                name: (*name).to_owned(),
                version: (*version).to_owned(),
                arch: fields.get("Architecture").map(|a| (*a).to_owned()),
            });
        }
    }
    out
}

/// The distribution a `METADATA` file describes (its `Name` normalised as
/// PyPI does: lowercase, runs of `-_.` as `-`).
pub(crate) fn parse_metadata(text: &str) -> Option<Package> {
    let mut name = None;
    let mut version = None;
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        if let Some(v) = line.strip_prefix("Name:") {
            name = Some(v.trim());
        } else if let Some(v) = line.strip_prefix("Version:") {
            version = Some(v.trim());
        }
    }
    let (name, version) = (name?, version?);
    let mut norm = String::new();
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !norm.ends_with('-') {
                norm.push('-');
            }
        } else {
            norm.push(c.to_ascii_lowercase());
        }
    }
    if norm.is_empty() || version.is_empty() {
        return None;
    }
    Some(Package {
        ecosystem: "pypi",
        name: norm,
        version: version.to_owned(),
        arch: None,
    })
}

/// How `found` differs from `pinned` (both `key -> version`), one phrase
/// per package, at most `limit` phrases and a count of the rest.
pub(crate) fn describe_changes(
    pinned: &BTreeMap<String, String>,
    found: &BTreeMap<String, String>,
    limit: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in pinned {
        match found.get(k) {
            Some(f) if f != v => out.push(format!("{k} {v} -> {f}")),
            Some(_) => {}
            None => out.push(format!("{k} {v} removed")),
        }
    }
    for (k, f) in found {
        if !pinned.contains_key(k) {
            out.push(format!("{k} {f} added"));
        }
    }
    if out.len() > limit {
        let more = out.len() - limit;
        out.truncate(limit);
        out.push(format!("and {more} more"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_status_lists_installed_packages_only() {
        let text = "Package: git\nStatus: install ok installed\nVersion: 1:2.39.5-0+deb12u3\nArchitecture: amd64\nDescription: x\n more\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 1\n\nPackage: base-files\nStatus: install ok installed\nArchitecture: amd64\nVersion: 12.4+deb12u13\n";
        let p = parse_dpkg_status(text);
        assert_eq!(p.len(), 2);
        assert_eq!(
            p[0].purl(),
            "pkg:deb/debian/git@1:2.39.5-0+deb12u3?arch=amd64"
        );
        assert_eq!(
            key_of_purl(&p[0].purl()).unwrap(),
            ("deb:git".to_owned(), "1:2.39.5-0+deb12u3".to_owned())
        );
        assert_eq!(p[1].name, "base-files");
    }

    #[test]
    fn wheel_metadata_names_the_distribution() {
        let p = parse_metadata(
            "Metadata-Version: 2.4\nName: claude_agent.SDK\nVersion: 0.2.189\n\nName: body",
        )
        .unwrap();
        assert_eq!(p.purl(), "pkg:pypi/claude-agent-sdk@0.2.189");
        assert!(parse_metadata("Name: x\n").is_none());
        assert!(key_of_purl("pkg:deb").is_none());
    }

    #[test]
    fn changes_name_each_package() {
        let m = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
                .collect::<BTreeMap<_, _>>()
        };
        let c = describe_changes(
            &m(&[("deb:git", "1"), ("deb:old", "2"), ("deb:same", "3")]),
            &m(&[("deb:git", "1.1"), ("deb:new", "4"), ("deb:same", "3")]),
            10,
        );
        assert_eq!(
            c,
            ["deb:git 1 -> 1.1", "deb:old 2 removed", "deb:new 4 added"]
        );
        let c = describe_changes(&m(&[]), &m(&[("a", "1"), ("b", "1"), ("c", "1")]), 2);
        assert_eq!(c.last().unwrap(), "and 1 more");
    }
}
