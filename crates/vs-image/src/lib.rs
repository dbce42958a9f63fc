//! vs-image (see crates/README.md).
