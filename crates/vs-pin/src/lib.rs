//! vs-pin: what an image is pinned to, and the one check that decides
//! whether a found image matches its pin.
//!
//! [`Digest`] is a validated `sha256:` digest; [`LockedImage`] is the entry
//! of one image in `images/images.lock` (the whole file is vs-image's
//! `Lock`); [`Pin::check`] compares an image found in a container engine or
//! read from an archive ([`FoundImage`]) with it.
//!
//! The crate is pure Rust and depends on nothing of ours, so that the
//! confinement crate (vs-sandbox), which checks every image it runs, builds
//! for every platform it confines on without the image builder.

mod digest;
mod error;
mod pin;

pub use digest::Digest;
pub use error::Error;
pub use pin::{FoundId, FoundImage, IdKind, LockedArchive, LockedImage, Pin};
