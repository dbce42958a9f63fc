//! vs-agent (see crates/README.md).
