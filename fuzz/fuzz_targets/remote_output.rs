//! Fuzzes what a remote service sends back about a candidate's
//! evaluation: the SkyPilot task's streamed log (`skypilot::parse_output`,
//! whose marked lines the candidate's own code could imitate) and the
//! result file of the Modal entrypoint (`modal::parse_result`).
//!
//! Properties: no reported measure output exceeds the text it came from;
//! a Modal result re-encodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vs_runtime::remote::{modal, skypilot};

const NONCE: &str = "vs-0123456789abcdef";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(r) = skypilot::parse_output(&text, NONCE) {
        if let Some(m) = &r.measure {
            assert!(m.stdout.len() <= text.len(), "measure output from nowhere");
        }
        if let Some(b) = &r.build {
            assert!(b.log.len() <= text.len(), "build output from nowhere");
        }
    }
    if let Ok(r) = modal::parse_result(data) {
        let again = serde_json::to_vec(&r).expect("a result encodes");
        assert_eq!(modal::parse_result(&again).ok(), Some(r), "round trip");
    }
});
