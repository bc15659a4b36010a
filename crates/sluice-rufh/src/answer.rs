//! The header set of the draft's answers: the completion flag as the version
//! spells it, the offset, and the limits.

use http::{HeaderName, HeaderValue};

use crate::fields;
use crate::Interop;

/// An upload's state as answers report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadState {
    pub offset: u64,
    pub length: Option<u64>,
    pub complete: bool,
}

/// What the server allows, for `Upload-Limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_size: u64,
    /// Seconds the upload (or a new one) has left.
    pub lifetime_seconds: u64,
}

/// `Upload-Complete: ?1|?0`, or interop 3's `Upload-Incomplete: ?0|?1`.
pub fn completion(interop: Interop, complete: bool) -> (HeaderName, HeaderValue) {
    match interop.inverted_completion() {
        true => (crate::UPLOAD_INCOMPLETE, fields::boolean_value(!complete)),
        false => (crate::UPLOAD_COMPLETE, fields::boolean_value(complete)),
    }
}

/// `Upload-Limit` from interop 6 on (none before).
pub fn limits(interop: Interop, limits: Limits) -> Option<(HeaderName, HeaderValue)> {
    interop.has_limits().then(|| {
        let value = fields::integer_dictionary(&[
            ("max-size", limits.max_size),
            (interop.lifetime_key(), limits.lifetime_seconds),
        ]);
        (crate::UPLOAD_LIMIT, value)
    })
}

/// The version echoed on every answer (harmless, and it tells the middle
/// which protocol answered).
pub fn version(interop: Interop) -> (HeaderName, HeaderValue) {
    (
        crate::INTEROP_VERSION,
        HeaderValue::from(u16::from(interop.number())),
    )
}

/// What every answer about an upload says of it: offset, completion and,
/// from interop 6 on, length when known and limits.
pub fn state(
    interop: Interop,
    state: UploadState,
    upload_limits: Limits,
) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = vec![
        version(interop),
        (crate::UPLOAD_OFFSET, HeaderValue::from(state.offset)),
        completion(interop, state.complete),
    ];
    if interop.has_limits() {
        if let Some(length) = state.length {
            out.push((crate::UPLOAD_LENGTH, HeaderValue::from(length)));
        }
    }
    out.extend(limits(interop, upload_limits));
    out
}

/// The OPTIONS answer's headers: what an append's body is and the limits.
pub fn capabilities(interop: Interop, new_upload: Limits) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = vec![
        version(interop),
        (
            HeaderName::from_static("accept-patch"),
            HeaderValue::from_static(crate::PARTIAL_UPLOAD),
        ),
    ];
    out.extend(limits(interop, new_upload));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_version_spells_completion_and_limits_its_way() {
        let limits_of = Limits {
            max_size: 100,
            lifetime_seconds: 60,
        };
        let cases = [
            (3, "upload-incomplete", "?1", None),
            (5, "upload-complete", "?0", None),
            (6, "upload-complete", "?0", Some("max-size=100, expires=60")),
            (7, "upload-complete", "?0", Some("max-size=100, max-age=60")),
            (8, "upload-complete", "?0", Some("max-size=100, max-age=60")),
        ];
        for (version, name, value, limit) in cases {
            let interop = Interop::new(version).unwrap();
            let (n, v) = completion(interop, false);
            assert_eq!(
                (n.as_str(), v.to_str().unwrap()),
                (name, value),
                "{version}"
            );
            let got = limits(interop, limits_of).map(|(_, v)| v.to_str().unwrap().to_owned());
            assert_eq!(got.as_deref(), limit, "{version}");
        }
    }
}
