//! Build settings from the command line and the environment: the
//! timestamp (`SOURCE_DATE_EPOCH`), the default layer cache directory and
//! the [`Source`] the options select. The caller passes the environment's
//! values in, so every rule here is a plain function of its arguments.

use std::ffi::OsStr;
use std::num::ParseIntError;
use std::path::{Path, PathBuf};

use crate::options::Source;

/// A build setting that is refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// `SOURCE_DATE_EPOCH` is set to something other than a number.
    #[error("SOURCE_DATE_EPOCH={value:?} is not a non-negative integer")]
    SourceDateEpoch {
        /// The value as set.
        value: String,
        /// Why it does not parse.
        #[source]
        source: ParseIntError,
    },
    /// A host path cannot be made absolute.
    #[error("cannot resolve {path}")]
    Resolve {
        /// The path as given.
        path: PathBuf,
        /// Why it cannot.
        #[source]
        source: std::io::Error,
    },
    /// A host path is not UTF-8 (image paths are strings).
    #[error("{path} is not valid UTF-8")]
    NotUtf8 {
        /// The absolute path.
        path: PathBuf,
    },
}

/// The timestamp of every entry: `value` is `SOURCE_DATE_EPOCH` (`None`
/// when unset or not Unicode); unset or empty means 1.
pub fn source_date_epoch(value: Option<&str>) -> Result<u64, SettingsError> {
    match value {
        None | Some("") => Ok(1),
        Some(v) => v.parse().map_err(|source| SettingsError::SourceDateEpoch {
            value: v.to_owned(),
            source,
        }),
    }
}

/// The layer cache when none is given: `$XDG_CACHE_HOME/vibesys/images`,
/// else `$HOME/.cache/vibesys/images`, each only when it is an absolute
/// path to an existing directory (the Nix sandbox sets `HOME` to a path
/// that does not exist, and no home directory is ever created); none if
/// neither is.
pub fn default_cache_dir(xdg_cache_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    let usable = |v: Option<&OsStr>| {
        v.filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute() && p.is_dir())
    };
    usable(xdg_cache_home)
        .or_else(|| usable(home).map(|h| h.join(".cache")))
        .map(|p| p.join("vibesys").join("images"))
}

impl Source {
    /// The source the build options select: a root directory, else a
    /// references graph, else host paths (made absolute), else the spec's
    /// `[host]` section.
    pub fn select(
        root: Option<PathBuf>,
        references_graph: Option<PathBuf>,
        paths: &[PathBuf],
    ) -> Result<Self, SettingsError> {
        Ok(match (root, references_graph) {
            (Some(r), _) => Self::Root(r),
            (None, Some(g)) => Self::ReferencesGraph(g),
            (None, None) if paths.is_empty() => Self::Spec,
            (None, None) => Self::Paths(
                paths
                    .iter()
                    .map(|p| absolute(p))
                    .collect::<Result<_, _>>()?,
            ),
        })
    }
}

/// `p` made absolute without resolving symlinks, a trailing slash dropped.
fn absolute(p: &Path) -> Result<String, SettingsError> {
    let abs = std::path::absolute(p).map_err(|source| SettingsError::Resolve {
        path: p.to_owned(),
        source,
    })?;
    let s = abs
        .to_str()
        .ok_or_else(|| SettingsError::NotUtf8 { path: abs.clone() })?;
    Ok(match s.trim_end_matches('/') {
        "" => "/".to_owned(),
        s => s.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_date_epoch_defaults_to_one_and_refuses_words() {
        assert_eq!(source_date_epoch(None).unwrap(), 1);
        assert_eq!(source_date_epoch(Some("")).unwrap(), 1);
        assert_eq!(
            source_date_epoch(Some("1700000000")).unwrap(),
            1_700_000_000
        );
        let e = source_date_epoch(Some("-1")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "SOURCE_DATE_EPOCH=\"-1\" is not a non-negative integer"
        );
    }

    #[test]
    fn cache_dir_needs_an_existing_absolute_directory() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().as_os_str();
        let missing = OsStr::new("/homeless-shelter");
        assert_eq!(
            default_cache_dir(Some(dir), None),
            Some(d.path().join("vibesys/images"))
        );
        assert_eq!(
            default_cache_dir(Some(OsStr::new("rel")), Some(dir)),
            Some(d.path().join(".cache/vibesys/images"))
        );
        assert_eq!(default_cache_dir(Some(OsStr::new("")), Some(missing)), None);
        assert_eq!(default_cache_dir(None, None), None);
    }

    #[test]
    fn source_select_prefers_root_then_graph_then_paths() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            Source::select(Some(p("/r")), Some(p("/g")), &[]).unwrap(),
            Source::Root(p("/r"))
        );
        assert_eq!(
            Source::select(None, Some(p("/g")), &[p("/x")]).unwrap(),
            Source::ReferencesGraph(p("/g"))
        );
        assert_eq!(Source::select(None, None, &[]).unwrap(), Source::Spec);
        assert_eq!(
            Source::select(None, None, &[p("/usr/"), p("/")]).unwrap(),
            Source::Paths(vec!["/usr".to_owned(), "/".to_owned()])
        );
    }
}
