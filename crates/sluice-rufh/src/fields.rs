//! The structured fields (RFC 9651) the draft's headers are: an Item holding an
//! Integer (`Upload-Offset`, `Upload-Length`, the interop version) or a Boolean
//! (`Upload-Complete`), parameters allowed and ignored, and the Dictionary of
//! integers `Upload-Limit` is. A field sent on two lines is no Item.

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

/// The bare item of the one field line of `name`, its parameters checked and
/// dropped; None when absent.
fn bare_item<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    expected: &'static str,
) -> Result<Option<&'a str>, FieldError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(FieldError::Repeated { name: name.clone() });
    }
    let invalid = || FieldError::Invalid {
        name: name.clone(),
        expected,
        given: String::from_utf8_lossy(value.as_bytes()).into_owned(),
    };
    let text = value.to_str().map_err(|_| invalid())?.trim_matches(' ');
    let mut pieces = text.split(';');
    let bare = pieces.next().unwrap_or("");
    for parameter in pieces {
        let key = parameter
            .split('=')
            .next()
            .unwrap_or("")
            .trim_start_matches(' ');
        let key_ok = key.starts_with(|c: char| c.is_ascii_lowercase() || c == '*')
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.*".contains(c));
        if !key_ok {
            return Err(invalid());
        }
    }
    Ok(Some(bare))
}

/// A non-negative Integer of at most 15 digits, as the draft's offsets and lengths are.
pub fn integer(headers: &HeaderMap, name: &HeaderName) -> Result<Option<u64>, FieldError> {
    const EXPECTED: &str = "a non-negative integer of at most 15 digits";
    let Some(bare) = bare_item(headers, name, EXPECTED)? else {
        return Ok(None);
    };
    let valid = !bare.is_empty() && bare.len() <= 15 && bare.bytes().all(|b| b.is_ascii_digit());
    match valid {
        true => Ok(Some(bare.parse().expect("15 digits fit"))),
        false => Err(FieldError::Invalid {
            name: name.clone(),
            expected: EXPECTED,
            given: bare.to_owned(),
        }),
    }
}

/// A Boolean: `?1` or `?0`.
pub fn boolean(headers: &HeaderMap, name: &HeaderName) -> Result<Option<bool>, FieldError> {
    const EXPECTED: &str = "a structured boolean, ?1 or ?0";
    match bare_item(headers, name, EXPECTED)? {
        None => Ok(None),
        Some("?1") => Ok(Some(true)),
        Some("?0") => Ok(Some(false)),
        Some(other) => Err(FieldError::Invalid {
            name: name.clone(),
            expected: EXPECTED,
            given: other.to_owned(),
        }),
    }
}

/// A Dictionary member holding a Byte Sequence: its key and bytes.
pub type ByteMember = (String, Vec<u8>);

/// A Dictionary whose members are Byte Sequences (`sha-256=:base64:, crc32c=:…:`,
/// as RFC 9530's digest fields are), in the order given; members of another
/// type are skipped (an algorithm this reader does not know may say anything).
pub fn byte_sequences(
    headers: &HeaderMap,
    name: &HeaderName,
) -> Result<Option<Vec<ByteMember>>, FieldError> {
    use base64::Engine as _;
    const EXPECTED: &str = "a dictionary of byte sequences, such as sha-256=:base64:";
    let mut lines = headers.get_all(name).iter().peekable();
    if lines.peek().is_none() {
        return Ok(None);
    }
    let mut members = Vec::new();
    for line in lines {
        let invalid = || FieldError::Invalid {
            name: name.clone(),
            expected: EXPECTED,
            given: String::from_utf8_lossy(line.as_bytes()).into_owned(),
        };
        let text = line.to_str().map_err(|_| invalid())?;
        for member in text.split(',') {
            let member = member.trim_matches(|c| c == ' ' || c == '\t');
            let (key, value) = member.split_once('=').ok_or_else(invalid)?;
            let key_ok = key.starts_with(|c: char| c.is_ascii_lowercase() || c == '*')
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_-.*".contains(c));
            if !key_ok {
                return Err(invalid());
            }
            let value = value.split(';').next().unwrap_or("");
            if let Some(inner) = value.strip_prefix(':').and_then(|v| v.strip_suffix(':')) {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(inner)
                    .map_err(|_| invalid())?;
                members.push((key.to_owned(), bytes));
            }
        }
    }
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
        let cases: [Case; 11] = [
            (&[], Ok(None)),
            (&["0"], Ok(Some(0))),
            (&["25000000"], Ok(Some(25_000_000))),
            (&[" 12 "], Ok(Some(12))),
            (&["12;x=1"], Ok(Some(12))),
            (&["999999999999999"], Ok(Some(999_999_999_999_999))),
            (&["1000000000000000"], Err(())),
            (&["-1"], Err(())),
            (&["1.5"], Err(())),
            (&["12;X=1"], Err(())),
            (&["1", "2"], Err(())),
        ];
        for (values, expected) in cases {
            let got = integer(&with(values), &name).map_err(|_| ());
            assert_eq!(got, expected, "{values:?}");
        }
    }

    #[test]
    fn booleans_are_question_marks() {
        let name = HeaderName::from_static("upload-offset");
        let cases: [(&str, Result<Option<bool>, ()>); 6] = [
            ("?1", Ok(Some(true))),
            ("?0", Ok(Some(false))),
            ("?1;a", Ok(Some(true))),
            ("true", Err(())),
            ("1", Err(())),
            ("?", Err(())),
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
                ("sha-256".into(), vec![0, 1, 2]),
                ("crc32c".into(), vec![1, 2, 3])
            ])
        );
        for bad in ["sha-256", "sha-256=:not base64!:", "SHA-256=:AAEC:"] {
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
