//! Fuzzes `vibesys.toml` as the policy reader sees it
//! (`PolicyConfig::parse`, what `exec`, `session` and `policy show` call).
//!
//! Properties: an accepted file never yields a policy path that could name
//! a place outside the workspace, a duplicate or a forbidden overlap; every
//! `allow` entry is absolute; and the same text parses the same way twice.
#![no_main]

#[path = "common/mod.rs"]
mod common;

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use vs_sandbox::config::PolicyConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = PolicyConfig::parse(text, Path::new("vibesys.toml")) else {
        return;
    };
    let policy = config.policy().expect("parse validated the policy");
    common::check_policy(&policy);
    assert!(config.allow.iter().all(|p| p.is_absolute()));
    let max = config.max_processes();
    assert!(max >= 1);
    let again = PolicyConfig::parse(text, Path::new("vibesys.toml")).expect("parses twice");
    assert_eq!(again.policy().expect("valid"), policy);
});
