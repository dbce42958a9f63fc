//! Standard base64 (RFC 4648, padded) for the lossless JSON form of binary
//! output and of the command server's stdin: one place that names the
//! engine (the `base64` crate's `STANDARD`: padded on encode, canonical
//! padding and no stray trailing bits on decode).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;

/// Encodes `data` as padded base64.
pub fn encode(data: &[u8]) -> String {
    STANDARD.encode(data)
}

/// Decodes padded base64; `None` when `s` is not canonical padded base64.
pub fn decode(s: &str) -> Option<Vec<u8>> {
    STANDARD.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        for (plain, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), enc);
            assert_eq!(decode(enc).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn all_bytes_round_trip_and_garbage_is_rejected() {
        let data: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&data)).unwrap(), data);
        for bad in ["a", "ab=c", "Zg==Zg==", "Z===", "Zm9*", "Zh==", "Zg"] {
            assert!(decode(bad).is_none(), "{bad}");
        }
    }
}
