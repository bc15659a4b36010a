//! The store's error type, split as mountpoint-s3 does: errors the service
//! modelled (missing key, failed precondition, denied access, ...) that callers act
//! on, and transport or server-side failures that a retry may cure.

use std::io;
use std::time::Duration;

/// The messages of an error and its sources joined with `: `, skipping repeats
/// (for logs; `{:#}` of anyhow does the same in the binary).
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current = Some(error);
    while let Some(e) = current {
        let text = e.to_string();
        if !text.is_empty() && !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

/// What went wrong talking to a store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no object at key {key:?}")]
    NoSuchKey { key: String },
    #[error("bucket {bucket:?} does not exist")]
    NoSuchBucket { bucket: String },
    #[error("multipart upload {upload_id:?} does not exist (completed, aborted or expired)")]
    NoSuchUpload { upload_id: String },
    #[error("precondition failed: the object changed or already exists")]
    PreconditionFailed,
    #[error("key {key:?} is not valid for this store: {reason}")]
    InvalidKey { key: String, reason: &'static str },
    /// The key cannot be stored next to what is stored already (a directory
    /// store holding `a` cannot hold `a/b`).
    #[error("key {key:?} conflicts with stored objects: {reason}")]
    KeyConflict { key: String, reason: &'static str },
    #[error("requested range is not satisfiable")]
    InvalidRange,
    #[error("invalid part list: {0}")]
    InvalidPart(String),
    #[error("a part other than the last is smaller than the store's minimum part size")]
    EntityTooSmall,
    #[error("the store rejected the data: {algorithm} checksum mismatch")]
    ChecksumMismatch { algorithm: &'static str },
    #[error("the body was {actual} bytes but {expected} were declared")]
    LengthMismatch { expected: u64, actual: u64 },
    #[error("access denied: {0}")]
    AccessDenied(String),
    #[error("the credentials were refused: {0}")]
    InvalidCredentials(String),
    #[error("no credentials found: {0}")]
    NoCredentials(String),
    /// 503 SlowDown, with the wait the store asked for in `Retry-After`, if any.
    #[error("the store is throttling requests (503 SlowDown)")]
    Throttled { retry_after: Option<Duration> },
    /// A request made no progress (no body bytes sent, no answer) for this long
    /// and was cancelled; its connection was dropped. `store_silent`: no other
    /// request got an answer or sent a byte meanwhile either (the store is not
    /// slow but gone: a breaker opens at once).
    #[error("the request made no progress for {}s and was cancelled{}", .after.as_secs_f64(), if *.store_silent { "; the store showed no sign of life meanwhile" } else { "" })]
    Stalled { after: Duration, store_silent: bool },
    /// The store does not offer this operation.
    #[error("this store does not support {0}")]
    Unsupported(&'static str),
    /// Any other answer of the service, with its HTTP status and error code.
    #[error("the store answered {status} {code}: {message}")]
    Service {
        status: u16,
        code: String,
        message: String,
    },
    /// The store kept failing and requests to it are refused for now (the
    /// engine's circuit breaker); try again after `retry_after`.
    #[error("the store is unavailable (it kept failing); retry in {}s", .retry_after.as_secs_f64())]
    Unavailable { retry_after: Duration },
    /// The request did not get an answer: connect failure, reset, timeout;
    /// `at` names the endpoint tried, when the store has one.
    #[error("could not reach the store{}: {cause}", at.as_deref().map(|at| format!(" at {at}")).unwrap_or_default())]
    Transport { at: Option<String>, cause: String },
    /// Reading the local source of a request body failed.
    #[error("reading the request body failed")]
    Body(#[source] io::Error),
    /// A local filesystem error in the directory store.
    #[error("local store I/O error")]
    Io(#[from] io::Error),
}

impl StoreError {
    /// A request that got no answer, from a store without an endpoint to name.
    pub fn transport(cause: impl Into<String>) -> StoreError {
        StoreError::Transport {
            at: None,
            cause: cause.into(),
        }
    }

    /// True when the same request may succeed if sent again: throttling, 5xx answers,
    /// timeouts, refused or reset connections.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Throttled { .. }
            | StoreError::Stalled { .. }
            | StoreError::Unavailable { .. }
            | StoreError::Transport { .. } => true,
            StoreError::Service { status, code, .. } => {
                *status >= 500
                    || *status == 408
                    || *status == 429
                    || matches!(
                        code.as_str(),
                        "RequestTimeout" | "RequestTimeTooSkewed" | "InternalError" | "SlowDown"
                    )
            }
            StoreError::Io(e) => matches!(
                e.kind(),
                io::ErrorKind::Interrupted | io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            _ => false,
        }
    }

    /// The wait a throttling store asked for (`Retry-After`), if it named one.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            StoreError::Throttled { retry_after } => *retry_after,
            StoreError::Unavailable { retry_after } => Some(*retry_after),
            _ => None,
        }
    }

    /// True for a 404 of the object itself.
    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NoSuchKey { .. })
    }

    /// A short stable name for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::NoSuchKey { .. } => "no_such_key",
            StoreError::NoSuchBucket { .. } => "no_such_bucket",
            StoreError::NoSuchUpload { .. } => "no_such_upload",
            StoreError::PreconditionFailed => "precondition_failed",
            StoreError::InvalidKey { .. } => "invalid_key",
            StoreError::KeyConflict { .. } => "key_conflict",
            StoreError::InvalidRange => "invalid_range",
            StoreError::InvalidPart(_) => "invalid_part",
            StoreError::EntityTooSmall => "entity_too_small",
            StoreError::ChecksumMismatch { .. } => "checksum_mismatch",
            StoreError::LengthMismatch { .. } => "length_mismatch",
            StoreError::AccessDenied(_) => "access_denied",
            StoreError::InvalidCredentials(_) => "invalid_credentials",
            StoreError::NoCredentials(_) => "no_credentials",
            StoreError::Throttled { .. } => "throttled",
            StoreError::Stalled { .. } => "stalled",
            StoreError::Unsupported(_) => "unsupported",
            StoreError::Service { .. } => "service",
            StoreError::Transport { .. } => "transport",
            StoreError::Unavailable { .. } => "unavailable",
            StoreError::Body(_) => "body",
            StoreError::Io(_) => "io",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_classification() {
        let service = |status: u16, code: &str| StoreError::Service {
            status,
            code: code.into(),
            message: String::new(),
        };
        let cases: Vec<(StoreError, bool)> = vec![
            (StoreError::Throttled { retry_after: None }, true),
            (
                StoreError::Stalled {
                    after: Duration::from_secs(1),
                    store_silent: false,
                },
                true,
            ),
            (StoreError::Unsupported("lifecycle rules"), false),
            (StoreError::transport("connection reset"), true),
            (service(500, "InternalError"), true),
            (service(503, "ServiceUnavailable"), true),
            (service(400, "RequestTimeout"), true),
            (service(400, "InvalidArgument"), false),
            (StoreError::AccessDenied("no".into()), false),
            (StoreError::InvalidCredentials("bad key".into()), false),
            (StoreError::NoSuchBucket { bucket: "b".into() }, false),
            (StoreError::NoSuchKey { key: "k".into() }, false),
            (StoreError::PreconditionFailed, false),
            (
                StoreError::ChecksumMismatch {
                    algorithm: "crc32c",
                },
                false,
            ),
        ];
        for (error, transient) in cases {
            assert_eq!(error.is_transient(), transient, "{error}");
        }
    }
}
