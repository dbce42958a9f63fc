//! Canonical JSON: object keys sorted, compact, no trailing newline.
//!
//! serde_json is built with `preserve_order` in this workspace, so maps keep
//! insertion order; every document is rebuilt with sorted keys before it is
//! written, so digests never depend on how a struct or map was filled.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::Error;

/// Serialises `value` to canonical JSON bytes.
pub(crate) fn canonical<T: Serialize>(what: &str, value: &T) -> Result<Vec<u8>, Error> {
    let v = serde_json::to_value(value).map_err(|source| Error::Json {
        what: what.to_owned(),
        source,
    })?;
    serde_json::to_vec(&sort(v)).map_err(|source| Error::Json {
        what: what.to_owned(),
        source,
    })
}

fn sort(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            let mut out = Map::new();
            for (k, v) in entries {
                out.insert(k, sort(v));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sort).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sorted_at_every_level() {
        let v = serde_json::json!({"b": 1, "a": {"z": [ {"y": 1, "x": 2} ], "c": null}});
        assert_eq!(
            String::from_utf8(canonical("t", &v).unwrap()).unwrap(),
            r#"{"a":{"c":null,"z":[{"x":2,"y":1}]},"b":1}"#
        );
    }
}
