//! What a request of the draft says: a creation (any request with content that
//! says whether it completes), an append (PATCH on the upload), and the bare
//! requests (HEAD, DELETE) that must carry no upload fields.

use http::header::{CONTENT_DISPOSITION, CONTENT_LENGTH, CONTENT_TYPE};
use http::HeaderMap;

use crate::error::DraftError;
use crate::fields::{self, FieldError};
use crate::Interop;

/// A creation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Creation {
    /// The body is the whole representation.
    pub complete: bool,
    /// The length it names (Upload-Length), or, for a complete body of known
    /// size, that size.
    pub length: Option<u64>,
    /// Content-Length, when sent.
    pub body_length: Option<u64>,
    /// The representation's media type (an append's `application/partial-upload`
    /// is no representation's).
    pub content_type: Option<String>,
    /// The file name of `Content-Disposition`.
    pub filename: Option<String>,
    /// `Repr-Digest`'s members (algorithm, digest), in the order sent.
    pub digests: Vec<fields::ByteMember>,
}

/// An append (PATCH on the upload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    pub offset: u64,
    /// The body ends the upload.
    pub complete: bool,
    /// The upload's length, when the request names it (Upload-Length).
    pub length: Option<u64>,
    pub body_length: Option<u64>,
}

/// Whether the request says it completes the upload: `Upload-Complete`, or
/// interop 3's inverse `Upload-Incomplete`; None when it says nothing.
fn completion(headers: &HeaderMap, interop: Interop) -> Result<Option<bool>, DraftError> {
    let (wanted, unwanted) = match interop.inverted_completion() {
        true => (crate::UPLOAD_INCOMPLETE, crate::UPLOAD_COMPLETE),
        false => (crate::UPLOAD_COMPLETE, crate::UPLOAD_INCOMPLETE),
    };
    if headers.contains_key(&unwanted) {
        return Err(DraftError::NotAllowed(
            match interop.inverted_completion() {
                true => "Upload-Complete (interop 3 says Upload-Incomplete)",
                false => "Upload-Incomplete (only interop 3 says it)",
            },
        ));
    }
    let value = fields::boolean(headers, &wanted)?;
    Ok(value.map(|v| v != interop.inverted_completion()))
}

fn content_length(headers: &HeaderMap) -> Result<Option<u64>, DraftError> {
    match headers.get(CONTENT_LENGTH) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.parse().ok())
            .map(Some)
            .ok_or_else(|| {
                FieldError::Invalid {
                    name: CONTENT_LENGTH,
                    expected: "a number",
                    given: String::from_utf8_lossy(value.as_bytes()).into_owned(),
                }
                .into()
            }),
    }
}

fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(CONTENT_TYPE)?.to_str().ok()?;
    let essence = value.split(';').next()?.trim().to_ascii_lowercase();
    (!essence.is_empty()).then_some(essence)
}

/// Whether the request asks to create an upload: it says whether its content
/// completes one. A request that says nothing of it is no creation.
pub fn is_creation(headers: &HeaderMap) -> bool {
    headers.contains_key(crate::UPLOAD_COMPLETE) || headers.contains_key(crate::UPLOAD_INCOMPLETE)
}

impl Creation {
    pub fn from_headers(headers: &HeaderMap, interop: Interop) -> Result<Creation, DraftError> {
        let complete = completion(headers, interop)?.ok_or(DraftError::Missing(
            match interop.inverted_completion() {
                true => "Upload-Incomplete",
                false => "Upload-Complete",
            },
        ))?;
        if fields::integer(headers, &crate::UPLOAD_OFFSET)?.is_some_and(|o| o != 0) {
            return Err(DraftError::NotAllowed(
                "an Upload-Offset other than 0 on a creation",
            ));
        }
        let body_length = content_length(headers)?;
        let named = fields::integer(headers, &crate::UPLOAD_LENGTH)?;
        let length = match (named, body_length.filter(|_| complete)) {
            (Some(named), Some(body)) if named != body => {
                return Err(DraftError::InconsistentLength {
                    detail: format!(
                        "Upload-Length is {named} but the complete body is {body} bytes"
                    ),
                })
            }
            (Some(named), _) if body_length.is_some_and(|b| b > named) => {
                return Err(DraftError::InconsistentLength {
                    detail: format!("the body is longer than Upload-Length {named}"),
                })
            }
            (named, body) => named.or(body),
        };
        let content_type = media_type(headers).filter(|t| t != crate::PARTIAL_UPLOAD);
        let filename = headers
            .get(CONTENT_DISPOSITION)
            .and_then(|v| v.to_str().ok())
            .and_then(disposition_filename);
        let digests = fields::byte_sequences(headers, &crate::REPR_DIGEST)?.unwrap_or_default();
        Ok(Creation {
            complete,
            length,
            body_length,
            content_type,
            filename,
            digests,
        })
    }
}

impl Append {
    pub fn from_headers(headers: &HeaderMap, interop: Interop) -> Result<Append, DraftError> {
        if interop.requires_partial_upload_type()
            && media_type(headers).as_deref() != Some(crate::PARTIAL_UPLOAD)
        {
            return Err(DraftError::NotPartialUpload);
        }
        let offset = fields::integer(headers, &crate::UPLOAD_OFFSET)?
            .ok_or(DraftError::Missing("Upload-Offset"))?;
        let complete = match completion(headers, interop)? {
            Some(complete) => complete,
            None if interop.completion_required() => {
                return Err(DraftError::Missing("Upload-Complete"))
            }
            // Interop 3: only Upload-Incomplete: ?1 leaves the upload open.
            None => interop.inverted_completion(),
        };
        let body_length = content_length(headers)?;
        let length = fields::integer(headers, &crate::UPLOAD_LENGTH)?;
        if let (Some(length), Some(body)) = (length, body_length) {
            let end = offset.saturating_add(body);
            if end > length || (complete && end != length) {
                return Err(DraftError::InconsistentLength {
                    detail: format!("Upload-Length is {length} but this append ends at {end}"),
                });
            }
        }
        Ok(Append {
            offset,
            complete,
            length,
            body_length,
        })
    }
}

/// Offset retrieval and cancellation carry no upload fields (interop 3 to 6
/// say so; later versions have no use for them).
pub fn check_bare(headers: &HeaderMap) -> Result<(), DraftError> {
    for (name, shown) in [
        (crate::UPLOAD_OFFSET, "Upload-Offset"),
        (crate::UPLOAD_COMPLETE, "Upload-Complete"),
        (crate::UPLOAD_INCOMPLETE, "Upload-Incomplete"),
        (crate::UPLOAD_LENGTH, "Upload-Length"),
    ] {
        if headers.contains_key(name) {
            return Err(DraftError::NotAllowed(shown));
        }
    }
    Ok(())
}

/// The file name of a Content-Disposition value: `filename*` (RFC 8187, UTF-8)
/// wins over `filename` (a token or a quoted string).
pub fn disposition_filename(value: &str) -> Option<String> {
    let mut plain = None;
    let mut extended = None;
    for parameter in split_parameters(value).into_iter().skip(1) {
        let Some((name, raw)) = parameter.split_once('=') else {
            continue;
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "filename" => plain = Some(unquote(raw.trim())),
            "filename*" => extended = ext_value(raw.trim()),
            _ => {}
        }
    }
    extended
        .or(plain)
        .filter(|name| !name.is_empty() && !name.chars().any(char::is_control))
}

/// `;`-separated pieces, `;` inside a quoted string kept.
fn split_parameters(value: &str) -> Vec<String> {
    let (mut pieces, mut current, mut quoted, mut escaped) =
        (Vec::new(), String::new(), false, false);
    for c in value.chars() {
        match c {
            _ if escaped => {
                escaped = false;
                current.push(c);
            }
            '\\' if quoted => {
                escaped = true;
                current.push(c);
            }
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            ';' if !quoted => pieces.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    pieces.push(current);
    pieces
}

fn unquote(raw: &str) -> String {
    match raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        Some(inner) => {
            let mut out = String::with_capacity(inner.len());
            let mut escaped = false;
            for c in inner.chars() {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    _ => {
                        escaped = false;
                        out.push(c);
                    }
                }
            }
            out
        }
        None => raw.to_owned(),
    }
}

/// RFC 8187's `UTF-8''percent%20encoded` (other charsets are not read).
fn ext_value(raw: &str) -> Option<String> {
    let (charset, rest) = raw.split_once('\'')?;
    let (_language, encoded) = rest.split_once('\'')?;
    if !charset.eq_ignore_ascii_case("utf-8") {
        return None;
    }
    let bytes = encoded.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    #[test]
    fn creations_as_each_version_says_them() {
        let v = |n| Interop::new(n).unwrap();
        type Case<'a> = (
            u8,
            &'a [(&'a str, &'a str)],
            Result<(bool, Option<u64>), &'a str>,
        );
        #[rustfmt::skip]
        let cases: [Case; 10] = [
            (8, &[("upload-complete", "?0")], Ok((false, None))),
            (8, &[("upload-complete", "?1"), ("content-length", "11")], Ok((true, Some(11)))),
            (8, &[("upload-complete", "?0"), ("upload-length", "100"), ("content-length", "10")], Ok((false, Some(100)))),
            (8, &[("upload-complete", "?1"), ("upload-length", "100"), ("content-length", "10")], Err("inconsistent_length")),
            (8, &[("upload-complete", "?0"), ("upload-length", "5"), ("content-length", "10")], Err("inconsistent_length")),
            (8, &[("upload-complete", "yes")], Err("invalid_header")),
            (8, &[("upload-complete", "?0"), ("upload-offset", "5")], Err("header_not_allowed")),
            (8, &[("upload-incomplete", "?1")], Err("header_not_allowed")),
            (3, &[("upload-incomplete", "?1")], Ok((false, None))),
            (3, &[("upload-incomplete", "?0"), ("content-length", "4")], Ok((true, Some(4)))),
        ];
        for (version, pairs, expected) in cases {
            let got = Creation::from_headers(&headers(pairs), v(version))
                .map(|c| (c.complete, c.length))
                .map_err(|e| e.code());
            assert_eq!(got, expected, "interop {version} {pairs:?}");
        }
    }

    #[test]
    fn appends_as_each_version_says_them() {
        let v = |n| Interop::new(n).unwrap();
        const PARTIAL: (&str, &str) = ("content-type", "application/partial-upload");
        type Case<'a> = (u8, &'a [(&'a str, &'a str)], Result<(u64, bool), &'a str>);
        #[rustfmt::skip]
        let cases: [Case; 9] = [
            (8, &[PARTIAL, ("upload-offset", "5"), ("upload-complete", "?0")], Ok((5, false))),
            (8, &[PARTIAL, ("upload-offset", "5"), ("upload-complete", "?1")], Ok((5, true))),
            (8, &[PARTIAL, ("upload-offset", "5")], Err("missing_header")),
            (8, &[("upload-offset", "5"), ("upload-complete", "?0")], Err("unsupported_media_type")),
            (8, &[("content-type", "application/offset+octet-stream"), ("upload-offset", "5"), ("upload-complete", "?0")], Err("unsupported_media_type")),
            (8, &[PARTIAL, ("upload-offset", "5"), ("upload-complete", "?1"), ("upload-length", "10"), ("content-length", "4")], Err("inconsistent_length")),
            (5, &[("upload-offset", "5")], Ok((5, false))),
            (3, &[("upload-offset", "5")], Ok((5, true))),
            (3, &[("upload-offset", "5"), ("upload-incomplete", "?1")], Ok((5, false))),
        ];
        for (version, pairs, expected) in cases {
            let got = Append::from_headers(&headers(pairs), v(version))
                .map(|a| (a.offset, a.complete))
                .map_err(|e| e.code());
            assert_eq!(got, expected, "interop {version} {pairs:?}");
        }
    }

    #[test]
    fn file_names_from_content_disposition() {
        let cases = [
            ("inline; filename=\"file name.jpg\"", Some("file name.jpg")),
            ("attachment; filename=plain.txt", Some("plain.txt")),
            ("inline; filename=\"a;b.txt\"", Some("a;b.txt")),
            (
                "inline; filename=\"x.jpg\"; filename*=UTF-8''file%20n%C3%A4me.jpg",
                Some("file näme.jpg"),
            ),
            ("inline; filename*=ISO-8859-1''x.jpg", None),
            ("inline", None),
            ("inline; filename=\"\"", None),
        ];
        for (value, expected) in cases {
            assert_eq!(disposition_filename(value).as_deref(), expected, "{value}");
        }
    }
}
