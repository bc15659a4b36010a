//! `Upload-Metadata`: comma-separated pairs of a key and a base64 value (the value
//! may be absent). Keys are unique, non-empty, ASCII without spaces or commas.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::TusError;

/// The most bytes of metadata accepted in one header.
pub const MAX_METADATA_BYTES: usize = 16 * 1024;

/// Decoded metadata: values are bytes, usually UTF-8.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata(pub BTreeMap<String, Option<Vec<u8>>>);

impl Metadata {
    /// Parses the header's value.
    pub fn parse(header: &str) -> Result<Metadata, TusError> {
        let invalid = |m: String| TusError::InvalidMetadata(m);
        if header.len() > MAX_METADATA_BYTES {
            return Err(invalid(format!("longer than {MAX_METADATA_BYTES} bytes")));
        }
        let mut pairs = BTreeMap::new();
        if header.trim().is_empty() {
            return Ok(Metadata(pairs));
        }
        for pair in header.split(',') {
            let pair = pair.trim();
            let mut words = pair.split(' ').filter(|w| !w.is_empty());
            let key = words
                .next()
                .ok_or_else(|| invalid("an empty pair".into()))?;
            let value = words.next();
            if words.next().is_some() {
                return Err(invalid(format!(
                    "pair {pair:?} has more than a key and a value"
                )));
            }
            if !key.chars().all(|c| c.is_ascii_graphic()) {
                return Err(invalid(format!("key {key:?} is not printable ASCII")));
            }
            let value = match value {
                Some(v) => Some(
                    base64::engine::general_purpose::STANDARD
                        .decode(v)
                        .map_err(|_| invalid(format!("the value of {key:?} is not base64")))?,
                ),
                None => None,
            };
            if pairs.insert(key.to_owned(), value).is_some() {
                return Err(invalid(format!("key {key:?} appears twice")));
            }
        }
        Ok(Metadata(pairs))
    }

    /// The header's value.
    pub fn encode(&self) -> String {
        self.0
            .iter()
            .map(|(k, v)| match v {
                Some(v) => format!(
                    "{k} {}",
                    base64::engine::general_purpose::STANDARD.encode(v)
                ),
                None => k.clone(),
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A value as text, when it is valid UTF-8.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.0
            .get(key)?
            .as_deref()
            .and_then(|v| std::str::from_utf8(v).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_table() {
        // (header, Ok(pairs as (key, value text)) or Err)
        type Pairs = Vec<(&'static str, Option<&'static str>)>;
        let cases: Vec<(&str, Option<Pairs>)> = vec![
            ("", Some(vec![])),
            (
                "filename d29ybGRfZG9taW5hdGlvbl9wbGFuLnBkZg==",
                Some(vec![("filename", Some("world_domination_plan.pdf"))]),
            ),
            (
                "filename aGkudHh0,filetype dGV4dC9wbGFpbg==,is_confidential",
                Some(vec![
                    ("filename", Some("hi.txt")),
                    ("filetype", Some("text/plain")),
                    ("is_confidential", None),
                ]),
            ),
            (
                " a YQ== , b Yg== ",
                Some(vec![("a", Some("a")), ("b", Some("b"))]),
            ),
            ("empty ", Some(vec![("empty", None)])),
            ("a YQ==,a Yg==", None),
            ("a not-base64!", None),
            ("a YQ== extra", None),
            ("a YQ==,,b Yg==", None),
            ("ключ YQ==", None),
        ];
        for (header, expected) in cases {
            let got = Metadata::parse(header);
            match expected {
                Some(pairs) => {
                    let got = got.unwrap_or_else(|e| panic!("{header:?}: {e}"));
                    let got: Vec<(&str, Option<&str>)> = got
                        .0
                        .iter()
                        .map(|(k, v)| {
                            (
                                k.as_str(),
                                v.as_deref().map(|v| std::str::from_utf8(v).unwrap()),
                            )
                        })
                        .collect();
                    assert_eq!(got, pairs, "{header:?}");
                }
                None => assert!(
                    matches!(got, Err(TusError::InvalidMetadata(_))),
                    "{header:?}: {got:?}"
                ),
            }
        }
        assert!(Metadata::parse(&"a YQ==,".repeat(5000)).is_err());
    }

    #[test]
    fn encode_round_trips() {
        let m = Metadata::parse("filename aGkudHh0,flag,filetype dGV4dC9wbGFpbg==").unwrap();
        assert_eq!(Metadata::parse(&m.encode()).unwrap(), m);
        assert_eq!(m.text("filename"), Some("hi.txt"));
        assert_eq!(m.text("flag"), None);
    }
}
