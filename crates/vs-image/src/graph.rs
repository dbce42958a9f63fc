//! The references-graph file Nix's `exportReferencesGraph` writes, and the
//! popularity order used for layering.
//!
//! The file repeats, for every path of the closure: the store path, its
//! deriver (may be empty), the number of references, then one reference per
//! line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::error::Error;

/// One store path of a closure and its direct references.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorePathInfo {
    /// Absolute store path, e.g. `/nix/store/<hash>-bash-5.2`.
    pub path: String,
    /// Direct references (other store paths of the closure), self excluded.
    pub references: BTreeSet<String>,
}

/// A parsed, closed references graph.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReferencesGraph {
    nodes: BTreeMap<String, BTreeSet<String>>,
}

const MAX_GRAPH_BYTES: u64 = 256 << 20;

impl ReferencesGraph {
    /// Reads a graph file.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = crate::textfile::read_text(path, MAX_GRAPH_BYTES, |reason| Error::Graph {
            path: path.to_owned(),
            line: 0,
            reason,
        })?;
        Self::parse(&text).map_err(|e| match e {
            Error::Graph { line, reason, .. } => Error::Graph {
                path: path.to_owned(),
                line,
                reason,
            },
            other => other,
        })
    }

    /// Parses graph text; every reference must itself be a node.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let err = |line: usize, reason: String| Error::Graph {
            path: "<text>".into(),
            line,
            reason,
        };
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        let mut nodes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut refs_line: BTreeMap<String, usize> = BTreeMap::new();
        while let Some((ln, path)) = lines.next() {
            if path.is_empty() {
                // Tolerate trailing blank lines only.
                if lines.clone().all(|(_, l)| l.is_empty()) {
                    break;
                }
                return Err(err(ln, "empty store path".to_owned()));
            }
            check_store_path(path).map_err(|r| err(ln, r))?;
            let (_, _deriver) = lines
                .next()
                .ok_or_else(|| err(ln + 1, "missing deriver line".to_owned()))?;
            let (cl, count) = lines
                .next()
                .ok_or_else(|| err(ln + 2, "missing reference count".to_owned()))?;
            let n: usize = count
                .parse()
                .map_err(|_| err(cl, format!("{count:?} is not a reference count")))?;
            let mut refs = BTreeSet::new();
            for _ in 0..n {
                let (rl, r) = lines
                    .next()
                    .ok_or_else(|| err(cl + 1, format!("{path}: fewer than {n} references")))?;
                check_store_path(r).map_err(|reason| err(rl, reason))?;
                if r != path {
                    refs_line.entry(r.to_owned()).or_insert(rl);
                    refs.insert(r.to_owned());
                }
            }
            if nodes.insert(path.to_owned(), refs).is_some() {
                return Err(err(ln, format!("{path} listed twice")));
            }
        }
        for (r, line) in &refs_line {
            if !nodes.contains_key(r) {
                return Err(err(
                    *line,
                    format!("reference {r} is not in the graph (closure incomplete)"),
                ));
            }
        }
        Ok(Self { nodes })
    }

    /// Builds a graph from explicit nodes (references outside are dropped).
    pub fn from_paths(paths: impl IntoIterator<Item = StorePathInfo>) -> Self {
        let mut nodes: BTreeMap<String, BTreeSet<String>> =
            paths.into_iter().map(|p| (p.path, p.references)).collect();
        let keys: BTreeSet<String> = nodes.keys().cloned().collect();
        for (k, refs) in nodes.iter_mut() {
            refs.retain(|r| r != k && keys.contains(r));
        }
        Self { nodes }
    }

    /// All store paths, sorted.
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.nodes.keys().map(String::as_str)
    }

    /// Number of store paths.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no paths.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Store paths, most popular first: popularity is the number of other
    /// paths whose closure contains the path; ties are broken by path.
    pub fn by_popularity(&self) -> Vec<(String, usize)> {
        let mut popularity: BTreeMap<&str, usize> =
            self.nodes.keys().map(|k| (k.as_str(), 0)).collect();
        for start in self.nodes.keys() {
            // Closure of `start` (excluding itself): each member gains one.
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            let mut stack: Vec<&str> = self.nodes[start].iter().map(String::as_str).collect();
            while let Some(p) = stack.pop() {
                if p == start || !seen.insert(p) {
                    continue;
                }
                if let Some(refs) = self.nodes.get(p) {
                    stack.extend(refs.iter().map(String::as_str));
                }
            }
            for p in seen {
                if let Some(c) = popularity.get_mut(p) {
                    *c += 1;
                }
            }
        }
        let mut out: Vec<(String, usize)> = popularity
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        out
    }
}

fn check_store_path(p: &str) -> Result<(), String> {
    if crate::spec::normalize_abs(p).is_none() {
        return Err(format!("{p:?} is not an absolute normalised path"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = "/nix/store/aaa-app\n/nix/store/d-app.drv\n2\n/nix/store/bbb-lib\n/nix/store/ccc-libc\n\
/nix/store/bbb-lib\n\n1\n/nix/store/ccc-libc\n/nix/store/ccc-libc\n\n1\n/nix/store/ccc-libc\n";

    #[test]
    fn parses_and_orders_by_popularity() {
        let g = ReferencesGraph::parse(G).unwrap();
        assert_eq!(g.len(), 3);
        let order: Vec<_> = g.by_popularity().into_iter().collect();
        assert_eq!(
            order,
            vec![
                ("/nix/store/ccc-libc".to_owned(), 2),
                ("/nix/store/bbb-lib".to_owned(), 1),
                ("/nix/store/aaa-app".to_owned(), 0)
            ]
        );
    }

    #[test]
    fn malformed_graphs_name_the_line() {
        for (text, needle) in [
            ("/nix/store/a\n\nx\n", "line 3"),
            (
                "/nix/store/a\n\n1\n/nix/store/missing\n",
                "closure incomplete",
            ),
            ("relative\n\n0\n", "line 1"),
            ("/nix/store/a\n\n2\n/nix/store/a\n", "fewer than 2"),
            ("/nix/store/a\n\n0\n/nix/store/a\n\n0\n", "listed twice"),
        ] {
            let e = ReferencesGraph::parse(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
