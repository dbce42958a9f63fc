//! RFC 3339 UTC timestamps (`YYYY-MM-DDTHH:MM:SSZ`, whole seconds) through
//! `jiff`.

use jiff::Timestamp;

/// Now as `YYYY-MM-DDTHH:MM:SSZ`.
pub(crate) fn now_rfc3339() -> String {
    let secs = Timestamp::now().as_second();
    // `as_second` of a valid timestamp is always in range again.
    Timestamp::from_second(secs)
        .unwrap_or(Timestamp::UNIX_EPOCH)
        .to_string()
}

/// Whether `s` is a valid UTC time written as `YYYY-MM-DDTHH:MM:SSZ` (the
/// form [`now_rfc3339`] writes: parses, whole seconds, prints back the same).
pub(crate) fn is_rfc3339_utc(s: &str) -> bool {
    s.parse::<Timestamp>()
        .is_ok_and(|t| t.subsec_nanosecond() == 0 && t.to_string() == s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates() {
        assert!(is_rfc3339_utc(&now_rfc3339()));
        assert!(is_rfc3339_utc("1970-01-01T00:00:00Z"));
        assert!(is_rfc3339_utc("2000-02-29T00:00:00Z"));
        assert!(is_rfc3339_utc("2026-12-31T23:59:59Z"));
        assert!(!is_rfc3339_utc("2026-12-31 23:59:59Z"));
        assert!(!is_rfc3339_utc("2026-12-31T23:59:59.5Z"));
        assert!(!is_rfc3339_utc("2026-12-31T23:59:59+01:00"));
        assert!(!is_rfc3339_utc("2026-02-30T00:00:00Z"));
        assert_eq!(now_rfc3339().len(), 20);
    }
}
