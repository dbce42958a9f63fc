//! Registries by digest: [`push`] an image (archive or OCI layout) to an
//! OCI distribution registry, [`pull`] it back by digest into any output
//! format with the bytes a local build of it writes.
//!
//! The distribution API is `oci-client`'s (auth challenges, bearer tokens,
//! uploads, referrers); this module decides what is sent and checks
//! everything that comes back:
//!
//! * push HEADs every blob first and uploads only what the registry lacks
//!   (a cross-repository mount first when the lock records the image in
//!   another repository of the same registry), then the image manifest,
//!   then the SBOM artifact manifest as a referrer of it (the referrers
//!   tag `sha256-<hex>` of OCI distribution 1.1, which every registry
//!   serves);
//! * pull fetches by digest only, checks every document and blob against
//!   its digest and size while it is written into a temporary directory
//!   next to the output, and puts the output in place through the writer
//!   a build uses ([`crate::build::put_output`]), so a failure leaves
//!   nothing behind.

mod auth;
mod connect;
mod pull;
mod push;
mod reference;
mod rootfs;

use std::path::PathBuf;

use serde::Serialize;

use crate::digest::Digest;

pub use pull::{PullOptions, PullReport, pull};
pub use push::{BlobAction, PushOptions, PushReport, PushedBlob, push};
pub use reference::ImageRef;

/// How to reach a registry: the settings push and pull share.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// A PEM file of CA certificates trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Allow plain HTTP to a registry that is not on loopback (a loopback
    /// registry may always answer in plain HTTP).
    pub insecure_http: bool,
}

/// Progress of blob transfers (the CLI draws bars for large blobs).
pub trait TransferProgress: Sync {
    /// A blob of `size` bytes starts to move.
    fn start(&self, _digest: &Digest, _size: u64) {}
    /// `n` more bytes of the current blob moved.
    fn advance(&self, _digest: &Digest, _n: u64) {}
    /// The blob is done.
    fn finish(&self, _digest: &Digest) {}
    /// Whether the operator asked to stop (Ctrl-C): a pull then stops at
    /// the next chunk or step and removes what it wrote.
    fn cancelled(&self) -> bool {
        false
    }
}

impl TransferProgress for () {}

/// The largest manifest, config or SBOM document accepted from a registry.
const MAX_DOC: u64 = 16 << 20;

/// What each blob moved by a push or pull was.
#[derive(Debug, Clone, Serialize)]
pub struct BlobSummary {
    /// Blobs sent or received.
    pub transferred: usize,
    /// Bytes sent or received.
    pub bytes: u64,
}
