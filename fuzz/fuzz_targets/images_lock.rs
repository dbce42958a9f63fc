//! Fuzzes `images/images.lock` (`Lock::load`, what `vibesys image
//! verify`, `image load` and the Docker run environment call).
//!
//! Property: a lock that loads, saved and loaded again, is the same lock
//! (the writer's output round-trips through the reader).
#![no_main]

#[path = "common/mod.rs"]
mod common;

use libfuzzer_sys::fuzz_target;
use vs_image::Lock;

fuzz_target!(|data: &[u8]| {
    let path = common::scratch().join("images.lock");
    std::fs::write(&path, data).expect("write the input");
    let Ok(lock) = Lock::load(&path) else {
        return;
    };
    let out = common::scratch().join("images.lock.out");
    lock.save(&out).expect("an accepted lock can be written");
    let again = Lock::load(&out).expect("the written lock reads back");
    assert_eq!(again, lock, "write then read is not the identity");
});
