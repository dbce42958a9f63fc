//! Fuzzes the operator's `VIBESYS_AGENT_SANDBOX` value
//! (`ConfineMode::from_env_value`, what every entry point reads).
//!
//! Property: only the documented spellings are accepted, and a value that
//! disables confinement is exactly one of `0`, `false`, `off`, `no`.
#![no_main]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use libfuzzer_sys::fuzz_target;
use vs_sandbox::ConfineMode;

fuzz_target!(|data: &[u8]| {
    let Ok(mode) = ConfineMode::from_env_value(Some(OsStr::from_bytes(data))) else {
        return;
    };
    let text = std::str::from_utf8(data).expect("accepted values are UTF-8");
    let word = text.trim().to_ascii_lowercase();
    let expected = match word.as_str() {
        "auto" => ConfineMode::Auto,
        "bwrap" => ConfineMode::Bwrap,
        "landlock" => ConfineMode::Landlock,
        "0" | "false" | "off" | "no" => ConfineMode::Off,
        other => panic!("accepted an undocumented value {other:?}"),
    };
    assert_eq!(mode, expected);
});
