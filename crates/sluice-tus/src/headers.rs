//! The tus request headers, parsed and checked: the version, creation and PATCH
//! requests as typed values, and the headers every response carries.

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::checksum::UploadChecksum;
use crate::metadata::Metadata;
use crate::{TusError, OFFSET_OCTET_STREAM, TUS_VERSION};

pub const TUS_RESUMABLE: HeaderName = HeaderName::from_static("tus-resumable");
pub const TUS_VERSION_HEADER: HeaderName = HeaderName::from_static("tus-version");
pub const TUS_EXTENSION: HeaderName = HeaderName::from_static("tus-extension");
pub const TUS_MAX_SIZE: HeaderName = HeaderName::from_static("tus-max-size");
pub const TUS_CHECKSUM_ALGORITHM: HeaderName = HeaderName::from_static("tus-checksum-algorithm");
pub const UPLOAD_OFFSET: HeaderName = HeaderName::from_static("upload-offset");
pub const UPLOAD_LENGTH: HeaderName = HeaderName::from_static("upload-length");
pub const UPLOAD_DEFER_LENGTH: HeaderName = HeaderName::from_static("upload-defer-length");
pub const UPLOAD_METADATA: HeaderName = HeaderName::from_static("upload-metadata");
pub const UPLOAD_CHECKSUM: HeaderName = HeaderName::from_static("upload-checksum");
pub const UPLOAD_EXPIRES: HeaderName = HeaderName::from_static("upload-expires");
pub const UPLOAD_CONCAT: HeaderName = HeaderName::from_static("upload-concat");

/// Headers a browser may read from tus responses (for CORS `Access-Control-Expose-Headers`).
pub const EXPOSED: &str =
    "Location, Upload-Offset, Upload-Length, Upload-Defer-Length, Upload-Metadata, \
Upload-Expires, Upload-Concat, Tus-Resumable, Tus-Version, Tus-Extension, Tus-Max-Size, \
Tus-Checksum-Algorithm, X-Sluice-Key";
/// Headers a browser may send (for CORS `Access-Control-Allow-Headers`).
pub const ALLOWED: &str =
    "Content-Type, Upload-Offset, Upload-Length, Upload-Defer-Length, Upload-Metadata, \
Upload-Checksum, Upload-Concat, Tus-Resumable, X-HTTP-Method-Override, X-Requested-With";

/// `X-HTTP-Method-Override`, honoured on POST (for clients behind proxies that
/// allow only GET and POST).
pub const METHOD_OVERRIDE: HeaderName = HeaderName::from_static("x-http-method-override");

/// The method a request stands for: a POST's `X-HTTP-Method-Override` when it has one.
pub fn effective_method(
    method: &http::Method,
    headers: &HeaderMap,
) -> Result<http::Method, TusError> {
    match (method, headers.get(METHOD_OVERRIDE)) {
        (&http::Method::POST, Some(value)) => value
            .to_str()
            .ok()
            .and_then(|v| http::Method::from_bytes(v.trim().to_ascii_uppercase().as_bytes()).ok())
            .ok_or(TusError::InvalidHeader {
                header: "X-HTTP-Method-Override",
                reason: "names no method".into(),
            }),
        _ => Ok(method.clone()),
    }
}

/// Whether `headers` announce a body of `application/offset+octet-stream`.
fn is_offset_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case(OFFSET_OCTET_STREAM)
        })
}

/// The request's Content-Length: None when absent, an error when not a number.
pub fn content_length(headers: &HeaderMap) -> Result<Option<u64>, TusError> {
    number(headers, &http::header::CONTENT_LENGTH, "Content-Length")
}

/// The id in an upload URL (absolute, or a path) under `base` (such as
/// `/v1/tus/`), as `Upload-Concat: final;…` names partial uploads. The id's own
/// form is for the caller to check.
pub fn upload_id_from_url<'a>(url: &'a str, base: &str) -> Option<&'a str> {
    let path = match url.find("://") {
        Some(scheme_end) => {
            let rest = &url[scheme_end + 3..];
            &rest[rest.find('/')?..]
        }
        None => url,
    };
    let path = path.split(['?', '#']).next().unwrap_or("");
    let id = path.strip_prefix(base)?.trim_end_matches('/');
    (!id.is_empty() && !id.contains('/')).then_some(id)
}

/// Every request but OPTIONS must speak our version: 412 otherwise.
pub fn check_version(headers: &HeaderMap) -> Result<(), TusError> {
    match headers.get(TUS_RESUMABLE) {
        Some(v) if v.as_bytes() == TUS_VERSION.as_bytes() => Ok(()),
        _ => Err(TusError::UnsupportedVersion),
    }
}

fn text<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
    label: &'static str,
) -> Result<Option<&'a str>, TusError> {
    headers
        .get(name)
        .map(|v| {
            v.to_str().map_err(|_| TusError::InvalidHeader {
                header: label,
                reason: "not visible ASCII".into(),
            })
        })
        .transpose()
}

fn number(
    headers: &HeaderMap,
    name: &HeaderName,
    label: &'static str,
) -> Result<Option<u64>, TusError> {
    match text(headers, name, label)? {
        None => Ok(None),
        Some(v) if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
            v.parse().map(Some).map_err(|_| TusError::InvalidHeader {
                header: label,
                reason: "out of range".into(),
            })
        }
        Some(_) => Err(TusError::InvalidHeader {
            header: label,
            reason: "expected a non-negative integer".into(),
        }),
    }
}

/// `Upload-Concat` of a creation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConcatRequest {
    Partial,
    /// The partial uploads' URLs (or paths), in order.
    Final(Vec<String>),
}

/// A creation request (POST).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    /// None with `Upload-Defer-Length: 1`, or for a final concatenation.
    pub length: Option<u64>,
    pub metadata: Metadata,
    pub concat: Option<ConcatRequest>,
    /// Whether the request carries the first bytes (creation-with-upload).
    pub has_body: bool,
    /// Content-Length, when sent.
    pub body_length: Option<u64>,
    /// `Upload-Checksum` of the bytes it carries.
    pub checksum: Option<UploadChecksum>,
}

impl CreateRequest {
    /// Parses and checks a creation request; `max_size` is the largest upload accepted.
    pub fn from_headers(headers: &HeaderMap, max_size: u64) -> Result<CreateRequest, TusError> {
        check_version(headers)?;
        let length = number(headers, &UPLOAD_LENGTH, "Upload-Length")?;
        let defer = match text(headers, &UPLOAD_DEFER_LENGTH, "Upload-Defer-Length")? {
            None => false,
            Some("1") => true,
            Some(_) => {
                return Err(TusError::InvalidHeader {
                    header: "Upload-Defer-Length",
                    reason: "the only value allowed is 1".into(),
                })
            }
        };
        let metadata = match text(headers, &UPLOAD_METADATA, "Upload-Metadata")? {
            Some(v) => Metadata::parse(v)?,
            None => Metadata::default(),
        };
        let concat = match text(headers, &UPLOAD_CONCAT, "Upload-Concat")? {
            None => None,
            Some("partial") => Some(ConcatRequest::Partial),
            Some(v) if v.starts_with("final;") => {
                let parts: Vec<String> = v["final;".len()..]
                    .split(' ')
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned)
                    .collect();
                if parts.is_empty() {
                    return Err(TusError::InvalidConcat(
                        "a final upload names no partial uploads".into(),
                    ));
                }
                Some(ConcatRequest::Final(parts))
            }
            Some(_) => {
                return Err(TusError::InvalidHeader {
                    header: "Upload-Concat",
                    reason: "expected \"partial\" or \"final;URL URL ...\"".into(),
                })
            }
        };
        match (&concat, length, defer) {
            (Some(ConcatRequest::Final(_)), None, false) => {}
            (Some(ConcatRequest::Final(_)), _, _) => {
                return Err(TusError::InvalidConcat(
                    "a final upload takes its length from its partial uploads".into(),
                ))
            }
            (_, Some(_), true) => {
                return Err(TusError::InvalidHeader {
                    header: "Upload-Defer-Length",
                    reason: "cannot be sent with Upload-Length".into(),
                })
            }
            (_, None, false) => return Err(TusError::MissingHeader("Upload-Length")),
            _ => {}
        }
        if let Some(length) = length {
            if length > max_size {
                return Err(TusError::TooLarge { max: max_size });
            }
        }
        let body_length = content_length(headers)?;
        let chunked = headers.contains_key(http::header::TRANSFER_ENCODING);
        let has_body = body_length.map_or(chunked, |n| n > 0);
        if has_body && !is_offset_stream(headers) {
            return Err(TusError::UnsupportedMediaType);
        }
        if has_body && matches!(concat, Some(ConcatRequest::Final(_))) {
            return Err(TusError::InvalidConcat(
                "a final upload carries no bytes of its own".into(),
            ));
        }
        if let (Some(length), Some(body)) = (length, body_length) {
            if body > length {
                return Err(TusError::BeyondLength { length });
            }
        }
        let checksum = text(headers, &UPLOAD_CHECKSUM, "Upload-Checksum")?
            .map(UploadChecksum::parse)
            .transpose()?;
        Ok(CreateRequest {
            length,
            metadata,
            concat,
            has_body,
            body_length,
            checksum,
        })
    }
}

/// A PATCH request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchRequest {
    pub offset: u64,
    /// Content-Length, when sent.
    pub body_length: Option<u64>,
    /// Sets a deferred length.
    pub length: Option<u64>,
    pub checksum: Option<UploadChecksum>,
}

impl PatchRequest {
    pub fn from_headers(headers: &HeaderMap) -> Result<PatchRequest, TusError> {
        check_version(headers)?;
        let content_type = headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .to_ascii_lowercase()
            });
        if content_type.as_deref() != Some(OFFSET_OCTET_STREAM) {
            return Err(TusError::UnsupportedMediaType);
        }
        let offset = number(headers, &UPLOAD_OFFSET, "Upload-Offset")?
            .ok_or(TusError::MissingHeader("Upload-Offset"))?;
        let length = number(headers, &UPLOAD_LENGTH, "Upload-Length")?;
        let checksum = text(headers, &UPLOAD_CHECKSUM, "Upload-Checksum")?
            .map(UploadChecksum::parse)
            .transpose()?;
        Ok(PatchRequest {
            offset,
            body_length: content_length(headers)?,
            length,
            checksum,
        })
    }
}

/// `Tus-Resumable` for every response.
pub fn resumable() -> (HeaderName, HeaderValue) {
    (TUS_RESUMABLE, HeaderValue::from_static(TUS_VERSION))
}

/// What an OPTIONS response announces.
pub fn capabilities(max_size: u64) -> Vec<(HeaderName, HeaderValue)> {
    vec![
        resumable(),
        (TUS_VERSION_HEADER, HeaderValue::from_static(TUS_VERSION)),
        (TUS_EXTENSION, HeaderValue::from_static(crate::EXTENSIONS)),
        (TUS_MAX_SIZE, HeaderValue::from(max_size)),
        (
            TUS_CHECKSUM_ALGORITHM,
            HeaderValue::from_static(crate::checksum::SUPPORTED),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        map
    }

    const V: (&str, &str) = ("tus-resumable", "1.0.0");

    #[test]
    fn create_table() {
        // (headers, Ok((length, concat is some)) or Err(code))
        type Case = (
            Vec<(&'static str, &'static str)>,
            Result<(Option<u64>, bool), &'static str>,
        );
        let cases: Vec<Case> = vec![
            (vec![V, ("upload-length", "100")], Ok((Some(100), false))),
            (vec![V, ("upload-length", "0")], Ok((Some(0), false))),
            (vec![V, ("upload-defer-length", "1")], Ok((None, false))),
            (
                vec![V, ("upload-length", "10"), ("upload-concat", "partial")],
                Ok((Some(10), true)),
            ),
            (
                vec![V, ("upload-concat", "final;/v1/tus/a /v1/tus/b")],
                Ok((None, true)),
            ),
            (
                vec![("upload-length", "100")],
                Err("tus_version_unsupported"),
            ),
            (
                vec![("tus-resumable", "0.2.2"), ("upload-length", "100")],
                Err("tus_version_unsupported"),
            ),
            (vec![V], Err("missing_header")),
            (vec![V, ("upload-length", "-1")], Err("invalid_header")),
            (vec![V, ("upload-length", "ten")], Err("invalid_header")),
            (
                vec![V, ("upload-length", "99999999999999999999999")],
                Err("invalid_header"),
            ),
            (vec![V, ("upload-length", "1001")], Err("too_large")),
            (vec![V, ("upload-defer-length", "2")], Err("invalid_header")),
            (
                vec![V, ("upload-length", "5"), ("upload-defer-length", "1")],
                Err("invalid_header"),
            ),
            (
                vec![V, ("upload-length", "5"), ("upload-metadata", "a b c")],
                Err("invalid_metadata"),
            ),
            (
                vec![V, ("upload-length", "5"), ("upload-concat", "whole")],
                Err("invalid_header"),
            ),
            (vec![V, ("upload-concat", "final;")], Err("invalid_concat")),
            (
                vec![V, ("upload-length", "5"), ("upload-concat", "final;/a")],
                Err("invalid_concat"),
            ),
            // Creation with upload: the body's type, its size against the length, its checksum.
            (
                vec![
                    V,
                    ("upload-length", "5"),
                    ("content-length", "5"),
                    ("content-type", OFFSET_OCTET_STREAM),
                ],
                Ok((Some(5), false)),
            ),
            (
                vec![V, ("upload-length", "5"), ("content-length", "5")],
                Err("unsupported_media_type"),
            ),
            (
                vec![
                    V,
                    ("upload-length", "0"),
                    ("content-length", "1"),
                    ("content-type", OFFSET_OCTET_STREAM),
                ],
                Err("beyond_length"),
            ),
            (
                vec![V, ("upload-length", "5"), ("content-length", "x")],
                Err("invalid_header"),
            ),
            (
                vec![V, ("upload-length", "5"), ("upload-checksum", "crc9 AAAA")],
                Err("checksum_algorithm_unsupported"),
            ),
            (
                vec![
                    V,
                    ("upload-concat", "final;/a"),
                    ("content-length", "3"),
                    ("content-type", OFFSET_OCTET_STREAM),
                ],
                Err("invalid_concat"),
            ),
        ];
        for (pairs, expected) in cases {
            let got = CreateRequest::from_headers(&headers(&pairs), 1000);
            match (got, expected) {
                (Ok(c), Ok((length, concat))) => {
                    assert_eq!(
                        (c.length, c.concat.is_some()),
                        (length, concat),
                        "{pairs:?}"
                    )
                }
                (Err(e), Err(code)) => assert_eq!(e.code(), code, "{pairs:?}"),
                (got, expected) => panic!("{pairs:?}: {got:?} vs {expected:?}"),
            }
        }
    }

    #[test]
    fn upload_urls_table() {
        let id = "0123456789abcdef0123456789abcdef";
        let cases = [
            (format!("/v1/tus/{id}"), Some(id)),
            (format!("http://gateway.example:8080/v1/tus/{id}"), Some(id)),
            (format!("/v1/tus/{id}/"), Some(id)),
            (format!("/v1/tus/{id}?x=1"), Some(id)),
            (format!("/files/{id}"), None),
            ("/v1/tus/../state".to_owned(), None),
            ("/v1/tus/".to_owned(), None),
            ("http://host".to_owned(), None),
        ];
        for (url, expected) in cases {
            assert_eq!(upload_id_from_url(&url, "/v1/tus/"), expected, "{url}");
        }
    }

    #[test]
    fn method_override_table() {
        use http::Method;
        let cases: [(Method, Option<&str>, Result<Method, ()>); 5] = [
            (Method::POST, Some("PATCH"), Ok(Method::PATCH)),
            (Method::POST, Some(" delete "), Ok(Method::DELETE)),
            (Method::POST, None, Ok(Method::POST)),
            (Method::PUT, Some("PATCH"), Ok(Method::PUT)),
            (Method::POST, Some("NOT A METHOD"), Err(())),
        ];
        for (method, over, expected) in cases {
            let map = match over {
                Some(v) => headers(&[("x-http-method-override", v)]),
                None => HeaderMap::new(),
            };
            assert_eq!(
                effective_method(&method, &map).map_err(|_| ()),
                expected,
                "{method} {over:?}"
            );
        }
    }

    #[test]
    fn patch_table() {
        const CT: (&str, &str) = ("content-type", "application/offset+octet-stream");
        type Case = (Vec<(&'static str, &'static str)>, Result<u64, &'static str>);
        let cases: Vec<Case> = vec![
            (vec![V, CT, ("upload-offset", "0")], Ok(0)),
            (
                vec![
                    V,
                    ("content-type", "application/offset+octet-stream; charset=x"),
                    ("upload-offset", "7"),
                ],
                Ok(7),
            ),
            (
                vec![CT, ("upload-offset", "0")],
                Err("tus_version_unsupported"),
            ),
            (
                vec![V, ("upload-offset", "0")],
                Err("unsupported_media_type"),
            ),
            (
                vec![V, ("content-type", "text/plain"), ("upload-offset", "0")],
                Err("unsupported_media_type"),
            ),
            (vec![V, CT], Err("missing_header")),
            (vec![V, CT, ("upload-offset", "x")], Err("invalid_header")),
            (
                vec![
                    V,
                    CT,
                    ("upload-offset", "0"),
                    ("upload-checksum", "crc32 AAAA"),
                ],
                Err("checksum_algorithm_unsupported"),
            ),
            (
                vec![V, CT, ("upload-offset", "0"), ("upload-checksum", "sha1")],
                Err("invalid_header"),
            ),
        ];
        for (pairs, expected) in cases {
            let got = PatchRequest::from_headers(&headers(&pairs));
            match (got, expected) {
                (Ok(p), Ok(offset)) => assert_eq!(p.offset, offset, "{pairs:?}"),
                (Err(e), Err(code)) => assert_eq!(e.code(), code, "{pairs:?}"),
                (got, expected) => panic!("{pairs:?}: {got:?} vs {expected:?}"),
            }
        }
    }
}
