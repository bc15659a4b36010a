//! `ApiError`: every way a request can fail, each with an HTTP status and a stable
//! code, rendered as `{"error":{"code":"…","message":"…"}}`. 4xx messages tell
//! the client what to fix; 5xx bodies stay generic and the cause is logged. The
//! errors of the layers below become `ApiError`s in one place: [`crate::conversions`].

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sluice_store::{error_chain, StoreError};

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("invalid key: {0}")]
    InvalidKey(String),
    #[error("invalid prefix: {0}")]
    InvalidPrefix(String),
    #[error("{0}")]
    BadRequest(String),
    /// A request broken in how it came (its framing, a form's structure or
    /// limits), as no working client sends it; answered like `BadRequest`, and
    /// counted against the client's address ([`ApiError::is_offense`]).
    #[error("{0}")]
    Malformed(String),
    #[error("no object at this key")]
    NotFound,
    /// No token, or one that does not verify (the reason is safe to send).
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// The token does not allow this.
    #[error("{0}")]
    Forbidden(String),
    /// The pre-create hook refused the upload (its 4xx status and message).
    #[error("{message}")]
    HookRejected { status: StatusCode, message: String },
    /// The pre-create hook could not answer.
    #[error("the upload cannot be checked right now; retry later")]
    HookUnavailable,
    #[error("no such route (the API lives under /v1/objects)")]
    NoRoute,
    #[error("direct uploads are not enabled on this gateway (sluice serve --direct)")]
    DirectUploadsOff,
    #[error("imports are not enabled on this gateway (sluice serve --imports)")]
    ImportsOff,
    /// An import's URL names an address imports may not fetch from.
    #[error("{0}")]
    ImportRefused(String),
    /// An import's origin failed or said something unusable.
    #[error("{0}")]
    BadGateway(String),
    /// An import's URL names nothing to import.
    #[error("{0}")]
    Unprocessable(String),
    /// The store gave no temporary credentials (it has no STS, or refused).
    #[error("the store gives no temporary credentials: {0}")]
    CredentialsUnavailable(String),
    #[error("the object already exists or changed (precondition failed)")]
    PreconditionFailed,
    #[error("the upload is larger than the limit of {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("the requested range is not satisfiable")]
    RangeNotSatisfiable { size: u64 },
    #[error("expected {expected}")]
    UnsupportedMediaType { expected: &'static str },
    #[error("the request body stalled for longer than {seconds} s")]
    BodyTimeout { seconds: u64 },
    #[error("the request body arrived slower than {bytes_per_second} bytes/s")]
    BodyTooSlow { bytes_per_second: u64 },
    #[error("the server is at capacity; retry after {retry_after} s")]
    Overloaded { retry_after: u64 },
    #[error("the server is shutting down; retry after {retry_after} s")]
    ShuttingDown { retry_after: u64 },
    /// A tus protocol error (status and code from the protocol layer).
    #[error(transparent)]
    Tus(#[from] sluice_tus::TusError),
    #[error("{0}")]
    Conflict(String),
    /// Records that are not JSON (or too large); nothing of the request was taken.
    #[error("{0}")]
    InvalidRecords(String),
    /// The batch holding a request's records was not stored; none of them is
    /// acknowledged.
    #[error("the records were not stored; nothing of this request is acknowledged, retry later")]
    RecordsNotStored,
    #[error("no stream named {0:?} (streams are configured as [streams.NAME])")]
    NoStream(String),
    /// The key cannot be stored next to what the store holds already.
    #[error("the key conflicts with stored objects: {0}")]
    KeyConflict(String),
    /// The store failed or refused; the detail is logged, not sent.
    #[error("storage error")]
    Store(#[source] StoreError),
    #[error("internal error")]
    Internal(String),
}

/// Marks an answer to a request refused as malformed (see
/// [`ApiError::is_offense`]): the listener counts it against the client's
/// address ([`crate::offenders`]).
#[derive(Debug, Clone, Copy)]
pub struct Offense;

impl ApiError {
    /// Refused for how the request came, as no working client sends it: a
    /// malformed form or framing, a tus header that is missing or unreadable, a
    /// body slower than the minimum rate. Not counted: what a working client may
    /// get for what its request says (a key, records, metadata or a query
    /// refused, a tus length set twice), a client that went away mid-body or
    /// paused too long, and everything that is the server's or the store's
    /// doing.
    pub fn is_offense(&self) -> bool {
        use sluice_tus::TusError;
        matches!(
            self,
            ApiError::Malformed(_)
                | ApiError::BodyTooSlow { .. }
                | ApiError::Tus(
                    TusError::MissingHeader(_)
                        | TusError::InvalidHeader { .. }
                        | TusError::InvalidMetadata(_)
                )
        )
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::InvalidKey(_)
            | ApiError::InvalidPrefix(_)
            | ApiError::BadRequest(_)
            | ApiError::Malformed(_)
            | ApiError::InvalidRecords(_) => StatusCode::BAD_REQUEST,
            ApiError::NoStream(_) => StatusCode::NOT_FOUND,
            ApiError::RecordsNotStored => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::NotFound | ApiError::NoRoute | ApiError::DirectUploadsOff => {
                StatusCode::NOT_FOUND
            }
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::HookRejected { status, .. } => *status,
            ApiError::HookUnavailable => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::PreconditionFailed => StatusCode::PRECONDITION_FAILED,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::RangeNotSatisfiable { .. } => StatusCode::RANGE_NOT_SATISFIABLE,
            ApiError::UnsupportedMediaType { .. } => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::BodyTimeout { .. } | ApiError::BodyTooSlow { .. } => {
                StatusCode::REQUEST_TIMEOUT
            }
            ApiError::Overloaded { .. } | ApiError::ShuttingDown { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ApiError::Tus(e) => e.status(),
            ApiError::Conflict(_) | ApiError::KeyConflict(_) => StatusCode::CONFLICT,
            ApiError::Store(e) if e.is_transient() => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Store(_) => StatusCode::BAD_GATEWAY,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::CredentialsUnavailable(_) => StatusCode::NOT_IMPLEMENTED,
            ApiError::ImportsOff => StatusCode::NOT_FOUND,
            ApiError::ImportRefused(_) => StatusCode::FORBIDDEN,
            ApiError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            ApiError::Unprocessable(_) => StatusCode::UNPROCESSABLE_ENTITY,
        }
    }

    /// The stable code clients can match on.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidKey(_) => "invalid_key",
            ApiError::InvalidPrefix(_) => "invalid_prefix",
            ApiError::BadRequest(_) | ApiError::Malformed(_) => "bad_request",
            ApiError::NotFound => "not_found",
            ApiError::NoRoute => "no_route",
            ApiError::DirectUploadsOff => "direct_uploads_off",
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::HookRejected { .. } => "rejected_by_hook",
            ApiError::HookUnavailable => "hook_unavailable",
            ApiError::PreconditionFailed => "precondition_failed",
            ApiError::TooLarge { .. } => "too_large",
            ApiError::RangeNotSatisfiable { .. } => "range_not_satisfiable",
            ApiError::UnsupportedMediaType { .. } => "unsupported_media_type",
            ApiError::BodyTimeout { .. } => "body_timeout",
            ApiError::BodyTooSlow { .. } => "body_too_slow",
            ApiError::Overloaded { .. } => "overloaded",
            ApiError::ShuttingDown { .. } => "shutting_down",
            ApiError::Tus(e) => e.code(),
            ApiError::Conflict(_) => "conflict",
            ApiError::InvalidRecords(_) => "invalid_records",
            ApiError::RecordsNotStored => "not_stored",
            ApiError::NoStream(_) => "no_such_stream",
            ApiError::KeyConflict(_) => "key_conflict",
            ApiError::Store(e) if e.is_transient() => "store_unavailable",
            ApiError::Store(_) => "store_error",
            ApiError::Internal(_) => "internal",
            ApiError::CredentialsUnavailable(_) => "credentials_unavailable",
            ApiError::ImportsOff => "imports_off",
            ApiError::ImportRefused(_) => "import_refused",
            ApiError::BadGateway(_) => "origin_error",
            ApiError::Unprocessable(_) => "nothing_to_import",
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Overloaded { retry_after } | ApiError::ShuttingDown { retry_after } => {
                Some(*retry_after)
            }
            ApiError::Store(e) if e.is_transient() => Some(
                e.retry_after()
                    .map_or(1, |d| d.as_secs_f64().ceil().max(1.0) as u64),
            ),
            ApiError::Tus(e) => e.retry_after(),
            ApiError::HookUnavailable | ApiError::RecordsNotStored => Some(1),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.respond(Shape::Nested)
    }
}

/// The body an error is answered with.
#[derive(Debug, Clone, Copy)]
enum Shape {
    /// `{"error": {"code", "message"}}`: the gateway's own API.
    Nested,
    /// `{"error": CODE, "message"}`: what Uppy's Companion client reads.
    Flat,
    /// An RFC 9457 problem document (`about:blank`, with the code as a
    /// member): the IETF resumable-upload draft's routes.
    Problem,
}

/// An [`ApiError`] answered as an RFC 9457 problem document.
#[derive(Debug)]
pub struct ProblemApiError(pub ApiError);

impl IntoResponse for ProblemApiError {
    fn into_response(self) -> Response {
        self.0.respond(Shape::Problem)
    }
}

/// An [`ApiError`] answered as `{"error": CODE, "message": TEXT}`, the shape
/// Uppy's Companion client reads (the direct-upload routes).
#[derive(Debug)]
pub struct FlatApiError(pub ApiError);

impl From<ApiError> for FlatApiError {
    fn from(error: ApiError) -> Self {
        FlatApiError(error)
    }
}

impl IntoResponse for FlatApiError {
    fn into_response(self) -> Response {
        self.0.respond(Shape::Flat)
    }
}

impl ApiError {
    /// The answer: status, JSON body (in `shape`), and the headers the error
    /// calls for.
    fn respond(self, shape: Shape) -> Response {
        let status = self.status();
        let message = if status.is_server_error() {
            let detail = error_chain(&self);
            match &self {
                // Expected under load: worth a warning, not an error.
                ApiError::Overloaded { .. }
                | ApiError::ShuttingDown { .. }
                | ApiError::HookUnavailable => {
                    tracing::warn!(code = self.code(), %status, "request refused")
                }
                ApiError::Store(e) if e.is_transient() => {
                    tracing::warn!(code = self.code(), %status, error = %detail, "store unavailable after retries")
                }
                _ => {
                    tracing::error!(code = self.code(), %status, error = %detail, "request failed")
                }
            }
            match &self {
                ApiError::Overloaded { .. }
                | ApiError::ShuttingDown { .. }
                | ApiError::HookUnavailable => self.to_string(),
                _ => "the request could not be completed; try again later".to_string(),
            }
        } else {
            self.to_string()
        };
        let body = match shape {
            Shape::Flat => json!({ "error": self.code(), "message": message }),
            Shape::Nested => json!({ "error": { "code": self.code(), "message": message } }),
            Shape::Problem => json!({
                "type": "about:blank",
                "title": status.canonical_reason().unwrap_or("error"),
                "status": status.as_u16(),
                "detail": message,
                "code": self.code(),
            }),
        };
        let mut response = (status, axum::Json(body)).into_response();
        if let Shape::Problem = shape {
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            );
        }
        if self.is_offense() {
            response.extensions_mut().insert(Offense);
        }
        if let Some(seconds) = self.retry_after() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let ApiError::Unauthenticated(_) = self {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"sluice\""),
            );
        }
        if let ApiError::RangeNotSatisfiable { size } = self {
            if let Ok(value) = HeaderValue::from_str(&format!("bytes */{size}")) {
                response.headers_mut().insert(header::CONTENT_RANGE, value);
            }
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::BodyError;
    use sluice_tus::TusError;

    /// Which refusals count against the client's address.
    #[test]
    fn offenses() {
        let cases: Vec<(ApiError, bool)> = vec![
            (BodyError::FormHeaderTooLarge { limit: 16384 }.into(), true),
            (
                ApiError::Malformed("malformed multipart/form-data".into()),
                true,
            ),
            (
                BodyError::TooSlow {
                    bytes_per_second: 1024,
                }
                .into(),
                true,
            ),
            (
                ApiError::Tus(TusError::InvalidHeader {
                    header: "Upload-Length",
                    reason: "not a number".into(),
                }),
                true,
            ),
            (
                ApiError::Tus(TusError::MissingHeader("Upload-Offset")),
                true,
            ),
            // A client that went away or paused did nothing malformed.
            (BodyError::Client.into(), false),
            (BodyError::Idle { seconds: 30 }.into(), false),
            // Refused for what the request says, not how it came.
            (
                ApiError::BadRequest("limit must be within 1..=1000".into()),
                false,
            ),
            (ApiError::InvalidKey("..".into()), false),
            (ApiError::InvalidRecords("line 3 is not JSON".into()), false),
            (ApiError::Tus(TusError::LengthAlreadySet), false),
            (ApiError::TooLarge { limit: 1 }, false),
            (ApiError::NotFound, false),
            (ApiError::Overloaded { retry_after: 1 }, false),
        ];
        for (error, offense) in cases {
            assert_eq!(error.is_offense(), offense, "{error:?}");
            let marked = error
                .into_response()
                .extensions()
                .get::<Offense>()
                .is_some();
            assert_eq!(marked, offense);
        }
    }
}
