//! agentshim (see crates/README.md).
