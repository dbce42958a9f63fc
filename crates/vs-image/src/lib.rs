//! vs-image: the reproducible OCI image builder.
//!
//! An image is declared by an [`ImageSpec`] (`images/*.toml`, read by Rust
//! and by Nix's `builtins.fromTOML`) and built from a closure: the
//! references graph Nix writes, host paths, or a root directory. The output
//! is bit-for-bit reproducible (sorted tar entries, clamped mtimes, uid/gid
//! 0, fixed compression, canonical JSON) and comes as an OCI layout
//! directory, an oci-archive, a docker-archive, the default hybrid archive
//! (both at once) or a squashfs rootfs.
//!
//! [`inspect`] reads any of the image formats back and, with verification,
//! re-hashes every blob. [`Lock`] is `images/images.lock`; [`Pin::check`]
//! (vs-pin's, re-exported here with the other pin types) is the one check
//! that decides whether a found image (in an engine, or read from an
//! archive) matches its pin; [`pin_images`], [`verify_images`] and
//! [`check_archive`] are the operations over it.
//!
//! The reports render for people through `Display` (the CLI's text
//! output) and for programs through serde (its `--json`); [`progress`]
//! holds the CLI's progress bars.

mod archive;
mod build;
mod cache;
mod digest;
mod error;
mod files;
mod graph;
mod input;
mod json;
mod known;
mod layer;
mod lock;
mod mounts;
mod oci;
mod options;
mod packages;
mod perm;
mod pinning;
mod pipe;
pub mod progress;
mod read;
pub mod registry;
mod report;
mod settings;
mod spec;
mod squashfs;
mod store;
mod tarw;
mod textfile;

pub use build::build;
pub use digest::Digest;
pub use error::Error;
pub use graph::{ReferencesGraph, StorePathInfo};
pub use lock::{Lock, relative_to};
pub use mounts::{MOUNT_POINTS, MountPoint};
pub use options::{BuildOptions, Compression, OutputFormat, Progress, Source};
pub use pinning::{
    CheckedArchive, PinRecord, PinReport, PinningError, VerifyReport, check_archive, pin_images,
    verify_images,
};
pub use read::{InspectReport, LayerReport, SbomSummary, inspect};
pub use report::{BuildReport, BuiltLayer};
pub use settings::{SettingsError, default_cache_dir, source_date_epoch};
pub use spec::{ExtraFile, FileKind, HostSource, ImageConfig, ImageSpec, NixSource};
/// The pin types live in vs-pin (pure Rust, so vs-sandbox builds for macOS
/// without this crate's C code); re-exported so callers name them here too.
pub use vs_pin::{FoundId, FoundImage, IdKind, LockedArchive, LockedImage, Pin};

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
