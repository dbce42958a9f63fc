//! Image specs: `images/*.toml`, read by Rust here and by Nix with
//! `builtins.fromTOML`. Plain TOML only (no datetimes); unknown keys are an
//! error at every level.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Default maximum number of layers of an image.
pub const DEFAULT_LAYER_CAP: u32 = 100;
/// Largest layer cap accepted (overlayfs stacks stay well below 128).
pub const MAX_LAYER_CAP: u32 = 120;

/// One image, as declared in `images/<name>.toml`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageSpec {
    /// Image name (`editor`, `agent`, ...): lowercase letters, digits, `.`, `_`, `-`.
    pub name: String,
    /// Image tag; `latest` when absent.
    #[serde(default = "default_tag")]
    pub tag: String,
    /// Maximum number of layers, the top (extra files) layer included.
    #[serde(default = "default_cap")]
    pub layer_cap: u32,
    /// Keep setuid/setgid bits of input files (dropped by default).
    #[serde(default)]
    pub allow_setuid: bool,
    /// Add the mount points container runtimes expect (`/dev`, `/proc`,
    /// `/sys`, `/tmp`, ..., empty `/etc/hosts`, see [`crate::MOUNT_POINTS`])
    /// where the content does not provide them; `false` keeps an image to
    /// exactly its content.
    #[serde(default = "default_true")]
    pub mount_points: bool,
    /// Runtime configuration written into the image config.
    #[serde(default)]
    pub config: ImageConfig,
    /// Annotations of the image manifest.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// The contents for Nix: nixpkgs attribute names.
    #[serde(default)]
    pub nix: NixSource,
    /// The contents when building without Nix.
    #[serde(default)]
    pub host: HostSource,
    /// Extra files, directories and symlinks, in the top layer.
    #[serde(default)]
    pub files: Vec<ExtraFile>,
}

fn default_tag() -> String {
    "latest".to_owned()
}

fn default_true() -> bool {
    true
}

fn default_cap() -> u32 {
    DEFAULT_LAYER_CAP
}

/// The runtime part of the image config (OCI `config` object).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageConfig {
    /// `Entrypoint`.
    #[serde(default)]
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    #[serde(default)]
    pub cmd: Vec<String>,
    /// `Env`, each `NAME=value`.
    #[serde(default)]
    pub env: Vec<String>,
    /// `WorkingDir`.
    #[serde(default)]
    pub working_dir: Option<String>,
    /// `User` (name or uid[:gid]).
    #[serde(default)]
    pub user: Option<String>,
    /// `Labels`.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// Contents as nixpkgs attribute names (used by `nix/`, ignored by Rust).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NixSource {
    /// nixpkgs attribute names, e.g. `["bashInteractive", "coreutils"]`.
    #[serde(default)]
    pub packages: Vec<String>,
}

/// Contents taken from this machine when no other source is given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSource {
    /// Absolute host paths, kept at the same location in the image.
    #[serde(default)]
    pub paths: Vec<String>,
    /// An absolute root directory whose tree becomes the image's `/`.
    #[serde(default)]
    pub root: Option<String>,
    /// Extra entries added only when the contents do not come from a
    /// references graph (e.g. `/bin/sh -> busybox` for a busybox image).
    #[serde(default)]
    pub files: Vec<ExtraFile>,
}

/// What kind of extra entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileKind {
    /// A regular file with `content`.
    #[default]
    File,
    /// A directory.
    Dir,
    /// A symlink to `target`.
    Symlink,
}

/// One extra entry of the top layer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraFile {
    /// Absolute path in the image.
    pub path: String,
    /// `file` (default), `dir` or `symlink`.
    #[serde(default, rename = "type")]
    pub kind: FileKind,
    /// Octal permission string, e.g. `"0644"` or `"1777"`.
    #[serde(default)]
    pub mode: Option<String>,
    /// Content of a file (UTF-8 text).
    #[serde(default)]
    pub content: Option<String>,
    /// Target of a symlink.
    #[serde(default)]
    pub target: Option<String>,
}

impl ExtraFile {
    /// The permission bits (default 0644 for files, 0755 for directories).
    pub fn mode_bits(&self) -> Result<u32, Error> {
        match &self.mode {
            None => Ok(match self.kind {
                FileKind::File => 0o644,
                FileKind::Dir => 0o755,
                FileKind::Symlink => 0o777,
            }),
            Some(m) => {
                let bad = |reason: &str| Error::SpecInvalid {
                    field: format!("files[{}].mode", self.path),
                    reason: reason.to_owned(),
                };
                if m.is_empty() || m.len() > 5 {
                    return Err(bad("expected an octal string such as \"0644\""));
                }
                let v = u32::from_str_radix(m, 8)
                    .map_err(|_| bad("expected an octal string such as \"0644\""))?;
                if v > 0o7777 {
                    return Err(bad("mode above 07777"));
                }
                Ok(v)
            }
        }
    }
}

impl ImageSpec {
    /// Reads and validates a spec file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = crate::textfile::read_text(path, 4 << 20, |message| Error::SpecParse {
            path: path.to_owned(),
            message,
        })?;
        Self::parse(&text).map_err(|e| match e {
            Error::SpecParse { message, .. } => Error::SpecParse {
                path: path.to_owned(),
                message,
            },
            other => other,
        })
    }

    /// Parses and validates spec text.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let spec: ImageSpec = toml::from_str(text).map_err(|e| {
            let at = e.span().map(|s| {
                let start = s.start.min(text.len());
                let line_no = text[..start].matches('\n').count() + 1;
                let line = text.lines().nth(line_no - 1).unwrap_or("").trim();
                let line: String = line.chars().take(80).collect();
                format!("line {line_no}: {line}: ")
            });
            Error::SpecParse {
                path: "<text>".into(),
                message: format!("{}{}", at.unwrap_or_default(), e.message()),
            }
        })?;
        spec.validate()?;
        Ok(spec)
    }

    /// Checks every field; errors name the field.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |field: &str, reason: String| {
            Err(Error::SpecInvalid {
                field: field.to_owned(),
                reason,
            })
        };
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 128
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-/".contains(&b))
            && self.name.as_bytes()[0].is_ascii_alphanumeric();
        if !name_ok {
            return bad(
                "name",
                format!(
                    "{:?} is not a valid image name (lowercase letters, digits, . _ - /)",
                    self.name
                ),
            );
        }
        let tag_ok = !self.tag.is_empty()
            && self.tag.len() <= 128
            && self
                .tag
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
            && self.tag.as_bytes()[0] != b'.'
            && self.tag.as_bytes()[0] != b'-';
        if !tag_ok {
            return bad("tag", format!("{:?} is not a valid tag", self.tag));
        }
        if !(2..=MAX_LAYER_CAP).contains(&self.layer_cap) {
            return bad(
                "layer_cap",
                format!("{} is outside 2..={MAX_LAYER_CAP}", self.layer_cap),
            );
        }
        for (i, e) in self.config.env.iter().enumerate() {
            if !e.contains('=') || e.starts_with('=') {
                return bad(
                    &format!("config.env[{i}]"),
                    format!("{e:?} is not NAME=value"),
                );
            }
        }
        if let Some(w) = &self.config.working_dir
            && !w.starts_with('/')
        {
            return bad("config.working_dir", format!("{w:?} is not absolute"));
        }
        for (i, p) in self.host.paths.iter().enumerate() {
            if !p.starts_with('/') {
                return bad(
                    &format!("host.paths[{i}]"),
                    format!("{p:?} is not absolute"),
                );
            }
        }
        if let Some(r) = &self.host.root {
            if !r.starts_with('/') {
                return bad("host.root", format!("{r:?} is not absolute"));
            }
            if !self.host.paths.is_empty() {
                return bad("host", "give either paths or root, not both".to_owned());
            }
        }
        for p in &self.nix.packages {
            if p.is_empty()
                || !p
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b))
            {
                return bad(
                    "nix.packages",
                    format!("{p:?} is not a nixpkgs attribute path"),
                );
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for f in self.files.iter().chain(&self.host.files) {
            let field = format!("files[{}]", f.path);
            if normalize_abs(&f.path).is_none() {
                return bad(
                    &field,
                    "path must be absolute and normalised (no '..', '.', '//' or trailing '/')"
                        .to_owned(),
                );
            }
            if !seen.insert(f.path.as_str()) {
                return bad(&field, "duplicate path".to_owned());
            }
            f.mode_bits()?;
            match f.kind {
                FileKind::File if f.target.is_some() => {
                    return bad(&field, "a file has content, not target".to_owned());
                }
                FileKind::Dir if f.target.is_some() || f.content.is_some() => {
                    return bad(
                        &field,
                        "a directory has neither content nor target".to_owned(),
                    );
                }
                FileKind::Symlink => match &f.target {
                    None => return bad(&field, "a symlink needs a target".to_owned()),
                    Some(t) if t.is_empty() || t.contains('\0') => {
                        return bad(&field, "empty target".to_owned());
                    }
                    Some(_) if f.content.is_some() => {
                        return bad(&field, "a symlink has a target, not content".to_owned());
                    }
                    Some(_) => {}
                },
                _ => {}
            }
        }
        Ok(())
    }
}

/// `/a/b` -> `a/b` when the path is absolute and normalised; `None` otherwise.
pub(crate) fn normalize_abs(p: &str) -> Option<String> {
    let rest = p.strip_prefix('/')?;
    if rest.is_empty() || rest.contains('\0') {
        return None;
    }
    if rest
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return None;
    }
    Some(rest.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_spec_has_defaults() {
        let s = ImageSpec::parse("name = \"x\"").unwrap();
        assert_eq!(s.tag, "latest");
        assert_eq!(s.layer_cap, 100);
        assert!(s.mount_points);
        let s = ImageSpec::parse("name = \"x\"\nmount_points = false").unwrap();
        assert!(!s.mount_points);
    }

    #[test]
    fn unknown_keys_are_rejected_everywhere() {
        for text in [
            "name = \"x\"\nbogus = 1",
            "name = \"x\"\n[config]\nentrypoint = []\nbogus = 1",
            "name = \"x\"\n[[files]]\npath = \"/a\"\nbogus = 1",
            "name = \"x\"\n[host]\npathz = []",
        ] {
            let e = ImageSpec::parse(text).unwrap_err().to_string();
            assert!(e.contains("unknown field"), "{e}");
        }
    }

    #[test]
    fn invalid_values_name_the_field() {
        for (text, field) in [
            ("name = \"X Y\"", "name"),
            ("name = \"x\"\nlayer_cap = 1", "layer_cap"),
            (
                "name = \"x\"\n[[files]]\npath = \"/a/../b\"",
                "files[/a/../b]",
            ),
            (
                "name = \"x\"\n[[files]]\npath = \"/t\"\nmode = \"99\"",
                "files[/t].mode",
            ),
            (
                "name = \"x\"\n[[files]]\npath = \"/l\"\ntype = \"symlink\"",
                "files[/l]",
            ),
            ("name = \"x\"\n[host]\npaths = [\"rel\"]", "host.paths[0]"),
        ] {
            let e = ImageSpec::parse(text).unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
    }
}
