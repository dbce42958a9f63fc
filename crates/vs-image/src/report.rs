//! What a build produced: the report `image build --json` prints, and the
//! human renderings of it and of [`InspectReport`] (`image build` and
//! `image inspect` without `--json`).

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::digest::Digest;
use crate::options::OutputFormat;
use crate::read::InspectReport;

/// One layer of a finished build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuiltLayer {
    /// Blob digest.
    pub digest: Digest,
    /// Uncompressed digest (`rootfs.diff_ids`).
    pub diff_id: Digest,
    /// Blob size in bytes.
    pub size: u64,
    /// Whether the layer came from the cache.
    pub cached: bool,
    /// The groups (store paths, host trees, `extra files`) in the layer.
    pub groups: Vec<String>,
}

/// What a build produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuildReport {
    /// Image name.
    pub name: String,
    /// Image tag.
    pub tag: String,
    /// Output format.
    pub format: OutputFormat,
    /// Output path.
    pub out: PathBuf,
    /// Image manifest digest (none for squashfs).
    pub manifest_digest: Option<Digest>,
    /// Image config digest, the Docker image ID with the classic store
    /// (none for squashfs).
    pub config_digest: Option<Digest>,
    /// SBOM document digest (none for squashfs).
    pub sbom_digest: Option<Digest>,
    /// Layers, bottom first.
    pub layers: Vec<BuiltLayer>,
    /// Digest of the output file (squashfs only; for archives `inspect
    /// --verify` and `pin` compute it).
    pub archive_digest: Option<Digest>,
}

/// A byte count as the CLI shows it: `12.3 MiB` from 1 MiB up, else `N B`.
pub(crate) fn human_size(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{:.1} MiB", n as f64 / f64::from(1 << 20))
    } else {
        format!("{n} B")
    }
}

impl fmt::Display for BuildReport {
    /// What was built and where, its digests and layer count, one line each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "built {}:{} ({}) -> {}",
            self.name,
            self.tag,
            self.format.as_str(),
            self.out.display()
        )?;
        if let Some(d) = &self.manifest_digest {
            writeln!(f, "  manifest  {d}")?;
        }
        if let Some(d) = &self.config_digest {
            writeln!(f, "  config    {d}  (image ID)")?;
        }
        if !self.layers.is_empty() {
            let cached = self.layers.iter().filter(|l| l.cached).count();
            let size: u64 = self.layers.iter().map(|l| l.size).sum();
            writeln!(
                f,
                "  layers    {} ({cached} from cache), {}",
                self.layers.len(),
                human_size(size)
            )?;
        }
        if let Some(d) = &self.archive_digest {
            writeln!(f, "  file      {d}")?;
        }
        Ok(())
    }
}

impl fmt::Display for InspectReport {
    /// The image's name, digests, config entry points, layers and SBOM,
    /// one line each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{}:{}  ({}, {})",
            self.name.as_deref().unwrap_or("<unnamed>"),
            self.tag.as_deref().unwrap_or("latest"),
            self.format,
            self.platform
        )?;
        if let Some(d) = &self.manifest_digest {
            writeln!(f, "manifest  {d}")?;
        }
        writeln!(f, "config    {}  (image ID)", self.config_digest)?;
        for key in ["Entrypoint", "Cmd", "User", "WorkingDir"] {
            if let Some(v) = self.config.get(key) {
                writeln!(f, "{:<9} {v}", key.to_lowercase())?;
            }
        }
        writeln!(
            f,
            "layers    {} ({})",
            self.layers.len(),
            human_size(self.total_layer_size)
        )?;
        for (i, l) in self.layers.iter().enumerate() {
            writeln!(
                f,
                "  {:>3}  {}  {:>10}  diff_id {}",
                i + 1,
                l.digest,
                human_size(l.size),
                l.diff_id
            )?;
        }
        match &self.sbom {
            Some(s) => writeln!(
                f,
                "sbom      {} ({}, {} packages)",
                s.digest, s.spdx_version, s.packages
            )?,
            None => writeln!(f, "sbom      none")?,
        }
        if let Some(d) = &self.archive_digest {
            writeln!(f, "file      {d}")?;
        }
        if self.verified {
            writeln!(
                f,
                "verified: every blob re-hashed, every layer entry checked"
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_mib_from_one_mib() {
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(3 << 19), "1.5 MiB");
    }

    #[test]
    fn a_build_report_reads_as_the_cli_prints_it() {
        let d = Digest::of(b"");
        let layer = |cached| BuiltLayer {
            digest: d.clone(),
            diff_id: d.clone(),
            size: 1 << 20,
            cached,
            groups: Vec::new(),
        };
        let r = BuildReport {
            name: "tiny".to_owned(),
            tag: "t1".to_owned(),
            format: OutputFormat::Archive,
            out: PathBuf::from("a.tar"),
            manifest_digest: Some(d.clone()),
            config_digest: None,
            sbom_digest: None,
            layers: vec![layer(true), layer(false)],
            archive_digest: None,
        };
        assert_eq!(
            r.to_string(),
            format!(
                "built tiny:t1 (archive) -> a.tar\n  manifest  {d}\n  layers    2 (1 from cache), 2.0 MiB\n"
            )
        );
    }
}
