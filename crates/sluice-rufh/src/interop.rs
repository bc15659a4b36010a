//! The interop versions a server of the draft speaks and where they differ.

use http::{HeaderMap, StatusCode};

use crate::error::DraftError;
use crate::fields;

/// One interop version of the draft, from 3 to 8.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Interop(u8);

impl Interop {
    /// Every version served, oldest first.
    pub const SUPPORTED: [u8; 6] = [3, 4, 5, 6, 7, 8];
    /// The current one (drafts -09 to -11).
    pub const LATEST: Interop = Interop(8);

    pub fn new(version: u8) -> Option<Interop> {
        Interop::SUPPORTED
            .contains(&version)
            .then_some(Interop(version))
    }

    pub fn number(self) -> u8 {
        self.0
    }

    /// The version a request asks for; None when it asks for none (a tus or
    /// plain request).
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Interop>, DraftError> {
        let Some(given) = fields::integer(headers, &crate::INTEROP_VERSION)? else {
            return match headers.contains_key(crate::INTEROP_VERSION) {
                true => Err(DraftError::UnsupportedVersion {
                    given: String::new(),
                }),
                false => Ok(None),
            };
        };
        u8::try_from(given)
            .ok()
            .and_then(Interop::new)
            .map(Some)
            .ok_or(DraftError::UnsupportedVersion {
                given: given.to_string(),
            })
    }

    /// Interop 3 says `Upload-Incomplete: ?1` where later ones say
    /// `Upload-Complete: ?0`.
    pub fn inverted_completion(self) -> bool {
        self.0 == 3
    }

    /// An append's body is `application/partial-upload` from interop 6 on.
    pub fn requires_partial_upload_type(self) -> bool {
        self.0 >= 6
    }

    /// `Upload-Limit` and `Upload-Length` exist from interop 6 on.
    pub fn has_limits(self) -> bool {
        self.0 >= 6
    }

    /// The `Upload-Limit` key of an upload's remaining lifetime: `expires` until
    /// interop 6, `max-age` since.
    pub fn lifetime_key(self) -> &'static str {
        if self.0 <= 6 {
            "expires"
        } else {
            "max-age"
        }
    }

    /// An append must say whether it completes from interop 7 on; before, a
    /// missing header leaves the upload open (as tusd reads it), except in
    /// interop 3, where only `Upload-Incomplete: ?1` does.
    pub fn completion_required(self) -> bool {
        self.0 >= 7
    }

    /// The answer to an append that did not complete the upload: 201 until
    /// interop 6 (their RECOMMENDED status), 204 since (the examples' status).
    pub fn append_status(self) -> StatusCode {
        if self.0 <= 6 {
            StatusCode::CREATED
        } else {
            StatusCode::NO_CONTENT
        }
    }

    /// Drafts -10 and -11 (interop 8) answer an empty append to a completed
    /// upload 410 and a non-empty one as an inconsistent length; earlier ones
    /// answer both 400 `completed-upload`.
    pub fn completed_upload(self, empty_body: bool) -> DraftError {
        match (self.0 >= 8, empty_body) {
            (true, false) => DraftError::InconsistentLength {
                detail: "the upload is already complete".into(),
            },
            (true, true) => DraftError::CompletedUpload {
                status: StatusCode::GONE,
            },
            (false, _) => DraftError::CompletedUpload {
                status: StatusCode::BAD_REQUEST,
            },
        }
    }
}

impl std::fmt::Display for Interop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn versions_asked_for() {
        type Case<'a> = (Option<&'a str>, Result<Option<u8>, ()>);
        let cases: [Case; 8] = [
            (None, Ok(None)),
            (Some("8"), Ok(Some(8))),
            (Some("3"), Ok(Some(3))),
            (Some("6;x"), Ok(Some(6))),
            (Some("2"), Err(())),
            (Some("9"), Err(())),
            (Some("eight"), Err(())),
            (Some("300"), Err(())),
        ];
        for (value, expected) in cases {
            let mut headers = HeaderMap::new();
            if let Some(v) = value {
                headers.insert(crate::INTEROP_VERSION, HeaderValue::from_str(v).unwrap());
            }
            let got = Interop::from_headers(&headers)
                .map(|i| i.map(Interop::number))
                .map_err(|_| ());
            assert_eq!(got, expected, "{value:?}");
        }
    }
}
