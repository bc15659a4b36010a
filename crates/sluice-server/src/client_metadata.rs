//! Object metadata as clients send it (Uppy's `metadata[NAME]=value` or
//! JSON object, an import's `metadata`), checked and made storable: names of
//! letters, digits, `-` and `_`; values outside visible ASCII percent-encoded;
//! 2 KiB in all, like S3. A name or size outside that is a 400 before anything
//! is stored.

use std::collections::BTreeMap;

use serde_json::Value;
use sluice_store::Metadata;

use crate::error::ApiError;

/// Metadata from Uppy (`metadata[NAME]=value` or a JSON object), as object
/// metadata: names of letters, digits, `-` and `_`; values with anything
/// outside visible ASCII percent-encoded; 2 KiB in all, like S3.
pub fn object_metadata(
    pairs: impl IntoIterator<Item = (String, String)>,
) -> Result<Metadata, ApiError> {
    let mut metadata = Metadata::new();
    let mut total = 0;
    for (name, value) in pairs {
        let name = name.to_ascii_lowercase();
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(ApiError::BadRequest(format!(
                "metadata name {name:?}: letters, digits, '-' and '_' only"
            )));
        }
        let value: String =
            percent_encoding::utf8_percent_encode(&value, &VISIBLE_ASCII).to_string();
        total += name.len() + value.len();
        metadata.insert(name, value);
    }
    if total > 2048 {
        return Err(ApiError::BadRequest(format!(
            "metadata is {total} bytes; at most 2048 are allowed"
        )));
    }
    Ok(metadata)
}

/// Everything but visible ASCII and space is percent-encoded in metadata values.
const VISIBLE_ASCII: percent_encoding::AsciiSet = percent_encoding::CONTROLS.add(b'%');

/// A JSON metadata object's values as text (`null` dropped).
pub fn json_metadata(object: BTreeMap<String, Value>) -> Vec<(String, String)> {
    object
        .into_iter()
        .filter_map(|(name, value)| match value {
            Value::Null => None,
            Value::String(text) => Some((name, text)),
            other => Some((name, other.to_string())),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn metadata_from_uppy() {
        type Pairs<'a> = Vec<(&'a str, &'a str)>;
        // (pairs, stored or the error's words)
        let long = "x".repeat(2100);
        let cases: [(Pairs, Result<Pairs, &str>); 6] = [
            (vec![("name", "a.txt")], Ok(vec![("name", "a.txt")])),
            (vec![("Name", "café")], Ok(vec![("name", "caf%C3%A9")])),
            (vec![("note", "50% off")], Ok(vec![("note", "50%25 off")])),
            (vec![("a b", "x")], Err("letters, digits")),
            (vec![("", "x")], Err("letters, digits")),
            (vec![("big", long.as_str())], Err("at most 2048")),
        ];
        for (pairs, want) in cases {
            let got = object_metadata(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())));
            match (got, want) {
                (Ok(got), Ok(want)) => {
                    let want: Metadata = want
                        .into_iter()
                        .map(|(n, v)| (n.to_string(), v.to_string()))
                        .collect();
                    assert_eq!(got, want, "{pairs:?}");
                }
                (Err(e), Err(words)) => assert!(e.to_string().contains(words), "{pairs:?}: {e}"),
                (got, want) => panic!("{pairs:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn json_metadata_drops_nulls_and_keeps_text() {
        let object: BTreeMap<String, Value> = serde_json::from_value(json!({
            "name": "a", "relativePath": null, "size": 12, "tags": ["x"]
        }))
        .unwrap();
        assert_eq!(
            json_metadata(object),
            vec![
                ("name".to_string(), "a".to_string()),
                ("size".to_string(), "12".to_string()),
                ("tags".to_string(), "[\"x\"]".to_string()),
            ]
        );
    }
}
