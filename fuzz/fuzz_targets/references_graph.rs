//! Fuzzes a Nix `exportReferencesGraph` file (`ReferencesGraph::parse`,
//! what `vibesys image build --references-graph` calls).
#![no_main]

use libfuzzer_sys::fuzz_target;
use vs_image::ReferencesGraph;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = ReferencesGraph::parse(text);
});
