//! Fuzzes the image reader on raw bytes as an archive file
//! (`vs_image::inspect` with verification, what `vibesys image inspect
//! --verify`, `image verify` and `image load` call on a downloaded file).
//!
//! Property: a report that says `verified` carries the digest of exactly
//! the bytes that were read.
#![no_main]

#[path = "common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use sha2::{Digest as _, Sha256};

fuzz_target!(|data: &[u8]| {
    let path = common::scratch().join("image.tar");
    std::fs::write(&path, data).expect("write the input");
    let Ok(report) = vs_image::inspect(&path, true) else {
        return;
    };
    if report.verified {
        let want = format!("sha256:{:x}", Sha256::digest(data));
        assert_eq!(
            report.archive_digest.map(|d| d.to_string()),
            Some(want),
            "a verified report names other bytes than those read"
        );
    }
});
