//! The structured fields (RFC 9651) the draft's headers are: an Item holding an
//! Integer (`Upload-Offset`, `Upload-Length`, the interop version) or a Boolean
//! (`Upload-Complete`), parameters parsed (a field whose parameters do not
//! parse is invalid as a whole) and then ignored, and the Dictionaries of byte
//! sequences (`Repr-Digest`) and of integers (`Upload-Limit`). Parsing is the
//! `sfv` crate's. A field sent on two lines is no Item.

use http::{HeaderMap, HeaderName, HeaderValue};

/// Why a field could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldError {
    #[error("{name} is sent more than once")]
    Repeated { name: HeaderName },
    #[error("{name} must be {expected}, not {given:?}")]
    Invalid {
        name: HeaderName,
        expected: &'static str,
        given: String,
    },
}

/// The bare item of the one field line of `name`, parsed as RFC 9651's Item
/// (parameters included, then dropped: the draft defines none); None when
/// absent. A field that does not parse as a whole is invalid (§4.2: invalid
/// values make the field be ignored, which the draft turns into a refusal).
fn bare_item(
    headers: &HeaderMap,
    name: &HeaderName,
    expected: &'static str,
) -> Result<Option<sfv::BareItem>, FieldError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(FieldError::Repeated { name: name.clone() });
    }
    let item: sfv::Item =
        sfv::Parser::new(value.as_bytes())
            .parse()
            .map_err(|_| FieldError::Invalid {
                name: name.clone(),
                expected,
                given: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            })?;
    Ok(Some(item.bare_item))
}

/// The text of `value` for an error message.
fn given(value: &sfv::BareItem) -> String {
    sfv::ItemSerializer::new().bare_item(value).finish()
}

/// A non-negative Integer of at most 15 digits, as the draft's offsets and lengths are.
pub fn integer(headers: &HeaderMap, name: &HeaderName) -> Result<Option<u64>, FieldError> {
    const EXPECTED: &str = "a non-negative integer of at most 15 digits";
    let Some(bare) = bare_item(headers, name, EXPECTED)? else {
        return Ok(None);
    };
    match bare.as_integer().map(i64::from) {
        Some(n) if n >= 0 => Ok(Some(n as u64)),
        _ => Err(FieldError::Invalid {
            name: name.clone(),
            expected: EXPECTED,
            given: given(&bare),
        }),
    }
}

/// A Boolean: `?1` or `?0`.
pub fn boolean(headers: &HeaderMap, name: &HeaderName) -> Result<Option<bool>, FieldError> {
    const EXPECTED: &str = "a structured boolean, ?1 or ?0";
    let Some(bare) = bare_item(headers, name, EXPECTED)? else {
        return Ok(None);
    };
    match bare.as_boolean() {
        Some(value) => Ok(Some(value)),
        None => Err(FieldError::Invalid {
            name: name.clone(),
            expected: EXPECTED,
            given: given(&bare),
        }),
    }
}

/// A Dictionary member that should hold a Byte Sequence: its key, and its
/// bytes (None when it holds something else).
pub type ByteMember = (String, Option<Vec<u8>>);

/// A Dictionary whose members are Byte Sequences (`sha-256=:base64:, crc32c=:…:`,
/// as RFC 9530's digest fields are), in the order given; a member of another
/// type has no bytes (the caller decides: an algorithm it does not know may say
/// anything, one it checks must be a byte sequence).
/// Field lines are combined as RFC 9651 §4.2 says (joined with commas).
pub fn byte_sequences(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<Option<Vec<ByteMember>>, FieldError> {
    const EXPECTED: &str = "a dictionary of byte sequences, such as sha-256=:base64:";
    let lines: Vec<&[u8]> = headers.get_all(name).iter().map(|v| v.as_bytes()).collect();
    if lines.is_empty() {
        return Ok(None);
    }
    let combined = lines.join(&b", "[..]);
    let dictionary: sfv::Dictionary =
        sfv::Parser::new(&combined)
            .parse()
            .map_err(|_| FieldError::Invalid {
                name: name.clone(),
                expected: EXPECTED,
                given: String::from_utf8_lossy(&combined).into_owned(),
            })?;
    let members = dictionary
        .iter()
        .map(|(key, entry)| {
            let bytes = match entry {
                sfv::ListEntry::Item(item) => item.bare_item.as_byte_sequence().map(<[u8]>::to_vec),
                sfv::ListEntry::InnerList(_) => None,
            };
            (key.as_str().to_owned(), bytes)
        })
        .collect();
    Ok(Some(members))
}

/// A Boolean as a header value.
pub fn boolean_value(value: bool) -> HeaderValue {
    HeaderValue::from_static(if value { "?1" } else { "?0" })
}

/// A Dictionary of integers, in the order given (`max-size=10, max-age=3600`).
pub fn integer_dictionary(members: &[(&str, u64)]) -> HeaderValue {
    let text = members
        .iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(", ");
    HeaderValue::from_str(&text).expect("keys and numbers are visible ASCII")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for v in values {
            headers.append("upload-offset", HeaderValue::from_str(v).unwrap());
        }
        headers
    }

    #[test]
    fn integers_as_the_draft_sends_them() {
        let name = HeaderName::from_static("upload-offset");
        type Case<'a> = (&'a [&'a str], Result<Option<u64>, ()>);
        let cases: [Case; 20] = [
            (&[], Ok(None)),
            (&["0"], Ok(Some(0))),
            (&["25000000"], Ok(Some(25_000_000))),
            (&[" 12 "], Ok(Some(12))),
            (&["12;x=1"], Ok(Some(12))),
            (&["12;x"], Ok(Some(12))),
            (&["12; x=?0;y=\"s\";z=:AAEC:;w=tok;v=1.5"], Ok(Some(12))),
            (&["999999999999999"], Ok(Some(999_999_999_999_999))),
            (&["1000000000000000"], Err(())),
            (&["-1"], Err(())),
            (&["1.5"], Err(())),
            (&["12;X=1"], Err(())),
            (&["1", "2"], Err(())),
            // Issue 47: parameters whose values are no bare items (RFC 9651
            // §4.2.3.2) make the field invalid.
            (&["16;x="], Err(())),
            (&["100000;x="], Err(())),
            (&["12;a=\"x"], Err(())),
            (&["12;a=b=c"], Err(())),
            (&["12;"], Err(())),
            (&["12;a=1,"], Err(())),
            (&["?1"], Err(())),
        ];
        for (values, expected) in cases {
            let got = integer(&with(values), &name).map_err(|_| ());
            assert_eq!(got, expected, "{values:?}");
        }
    }

    #[test]
    fn booleans_are_question_marks() {
        let name = HeaderName::from_static("upload-offset");
        let cases: [(&str, Result<Option<bool>, ()>); 11] = [
            ("?1", Ok(Some(true))),
            ("?0", Ok(Some(false))),
            ("?1;a", Ok(Some(true))),
            ("?1;a=\"x\"", Ok(Some(true))),
            ("true", Err(())),
            ("1", Err(())),
            ("?", Err(())),
            // Issue 47: invalid parameters.
            ("?1;a=", Err(())),
            ("?1;a=\"x", Err(())),
            ("?1;a=b=c", Err(())),
            ("?1;A", Err(())),
        ];
        for (value, expected) in cases {
            let got = boolean(&with(&[value]), &name).map_err(|_| ());
            assert_eq!(got, expected, "{value:?}");
        }
    }

    #[test]
    fn digests_as_byte_sequences() {
        let name = HeaderName::from_static("repr-digest");
        let headers = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(name.clone(), HeaderValue::from_str(v).unwrap());
            h
        };
        let got = byte_sequences(
            &headers("sha-256=:AAEC:, crc32c=:AQID:;x, unixsum=30"),
            &name,
        )
        .unwrap();
        assert_eq!(
            got,
            Some(vec![
                ("sha-256".into(), Some(vec![0, 1, 2])),
                ("crc32c".into(), Some(vec![1, 2, 3])),
                ("unixsum".into(), None),
            ])
        );
        // A member that is no byte sequence has no bytes (a Boolean here).
        assert_eq!(
            byte_sequences(&headers("sha-256"), &name).unwrap(),
            Some(vec![("sha-256".into(), None)])
        );
        for bad in [
            "sha-256=:not base64!:",
            "SHA-256=:AAEC:",
            "sha-256=:AAEC:;x=",
        ] {
            assert!(byte_sequences(&headers(bad), &name).is_err(), "{bad}");
        }
        assert_eq!(byte_sequences(&HeaderMap::new(), &name).unwrap(), None);
    }

    #[test]
    fn a_dictionary_of_integers() {
        let value = integer_dictionary(&[("max-size", 10), ("max-age", 3600)]);
        assert_eq!(value, "max-size=10, max-age=3600");
    }
}
