//! Fuzzes image spec text (`ImageSpec::parse`, what `vibesys image build`
//! calls on `images/*.toml`). An accepted spec parses the same way twice.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vs_image::ImageSpec;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(spec) = ImageSpec::parse(text) {
        assert!(!spec.name.is_empty());
        let again = ImageSpec::parse(text).expect("parses twice");
        assert_eq!(again.name, spec.name);
        assert_eq!(again.tag, spec.tag);
    }
});
