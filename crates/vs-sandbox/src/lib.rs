//! vs-sandbox (see crates/README.md).
