//! Fuzzes the `[build]` table of the operator's `vibesys.toml`
//! (`BuildSpec::parse`, what `vibesys build` calls). An accepted build
//! names a program and only outputs that stay inside the build checkout.
#![no_main]

use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use vs_runtime::BuildSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(spec) = BuildSpec::parse(text, Path::new("vibesys.toml")) else {
        return;
    };
    assert!(!spec.argv().is_empty(), "a build with no program");
    for out in spec.outputs() {
        assert!(
            Path::new(out)
                .components()
                .all(|c| matches!(c, Component::Normal(_) | Component::CurDir)),
            "an output that leaves the checkout: {out:?}"
        );
    }
});
