//! vs-runtime (see crates/README.md).
