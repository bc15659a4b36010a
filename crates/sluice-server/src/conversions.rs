//! The one place where the errors of the layers below become [`ApiError`]s: the
//! store's, the engine's, the request body's and the resumable-upload state's.
//! Handlers use `?` and never decide a status themselves.

use sluice_resumable::ResumableError;
use sluice_store::StoreError;
use sluice_tus::TusError;
use sluice_upload::{ConfigError, TransferError};

use crate::body::BodyError;
use crate::error::ApiError;

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NoSuchKey { .. } => ApiError::NotFound,
            StoreError::PreconditionFailed => ApiError::PreconditionFailed,
            StoreError::InvalidKey { reason, .. } => ApiError::InvalidKey(reason.to_string()),
            StoreError::KeyConflict { reason, .. } => ApiError::KeyConflict(reason.to_string()),
            other => ApiError::Store(other),
        }
    }
}

impl From<BodyError> for ApiError {
    fn from(error: BodyError) -> Self {
        match error {
            BodyError::TooLarge { limit } => ApiError::TooLarge { limit },
            BodyError::Idle { seconds } => ApiError::BodyTimeout { seconds },
            BodyError::TooSlow { bytes_per_second } => ApiError::BodyTooSlow { bytes_per_second },
            BodyError::Client => {
                ApiError::BadRequest("the client connection failed while sending the body".into())
            }
            e @ BodyError::FormHeaderTooLarge { .. } => ApiError::Malformed(e.to_string()),
            BodyError::ShuttingDown => ApiError::ShuttingDown { retry_after: 1 },
        }
    }
}

/// A request body that failed, as the engine or the state layer saw it (an
/// `io::Error` that may carry the [`BodyError`] saying why).
pub(crate) fn body_failed(error: &std::io::Error) -> ApiError {
    BodyError::find(error).map_or_else(
        || ApiError::BadRequest("the request body could not be read".into()),
        ApiError::from,
    )
}

impl From<TransferError> for ApiError {
    fn from(error: TransferError) -> Self {
        match error {
            TransferError::Store { operation, source } => {
                let answer = ApiError::from(source);
                // Said here, inside the request's span (its route and upload
                // id): the answer's own log line names neither the request nor
                // which store operation failed. Only for a store's refusal
                // answered 502; a transient one is retried and counted, a
                // 4xx is the client's.
                if let ApiError::Store(source) = &answer {
                    if answer.status() == axum::http::StatusCode::BAD_GATEWAY {
                        tracing::error!(operation, error = %sluice_store::error_chain(source), "a store request failed");
                    }
                }
                answer
            }
            TransferError::Config(ConfigError::PartExceedsBudget { budget, .. }) => {
                ApiError::TooLarge {
                    limit: budget.saturating_mul(sluice_store::limits::MAX_PARTS as u64),
                }
            }
            TransferError::Config(ConfigError::ObjectTooLarge(_)) => ApiError::TooLarge {
                limit: sluice_store::limits::MAX_OBJECT_SIZE,
            },
            TransferError::Config(e) => ApiError::BadRequest(e.to_string()),
            TransferError::Source(io) => body_failed(&io),
            TransferError::SourceShort { expected, actual } => {
                ApiError::BadRequest(format!("the body ended after {actual} of {expected} bytes"))
            }
            TransferError::SourceLong { expected } => ApiError::BadRequest(format!(
                "the body is longer than its Content-Length of {expected}"
            )),
            TransferError::StreamTooLarge(limit) => ApiError::TooLarge { limit },
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl From<sluice_streams::StreamError> for ApiError {
    fn from(error: sluice_streams::StreamError) -> Self {
        use sluice_streams::StreamError;
        match error {
            StreamError::BadInput(reason) => ApiError::BadRequest(reason),
            StreamError::BadRecords { .. } => ApiError::InvalidRecords(error.to_string()),
            StreamError::NotStored(_) | StreamError::NotCommitted(_) => ApiError::RecordsNotStored,
            StreamError::Closed => ApiError::ShuttingDown { retry_after: 1 },
            StreamError::Busy => ApiError::Overloaded { retry_after: 1 },
        }
    }
}

impl From<ResumableError> for ApiError {
    fn from(error: ResumableError) -> Self {
        match error {
            ResumableError::Protocol(e) => ApiError::Tus(e),
            ResumableError::Locked { retry_after } => ApiError::Tus(TusError::Locked {
                retry_after_seconds: retry_after.as_secs_f64().ceil().max(1.0) as u64,
            }),
            ResumableError::Conflict => ApiError::Conflict(
                "the upload changed during this request; ask for its offset and retry".into(),
            ),
            ResumableError::Body(io) => body_failed(&io),
            ResumableError::Corrupt(reason) => ApiError::Internal(reason),
            ResumableError::Store(e) => ApiError::from(e),
            ResumableError::Transfer(e) => ApiError::from(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn resumable_errors_table() {
        let cases: Vec<(ResumableError, u16, &str)> = vec![
            (ResumableError::not_found(), 404, "upload_not_found"),
            (
                ResumableError::Locked {
                    retry_after: Duration::from_millis(2500),
                },
                423,
                "upload_locked",
            ),
            (ResumableError::Conflict, 409, "conflict"),
            (
                ResumableError::Body(std::io::Error::other(BodyError::Idle { seconds: 3 })),
                408,
                "body_timeout",
            ),
            (ResumableError::Corrupt("x".into()), 500, "internal"),
            (
                ResumableError::Store(StoreError::PreconditionFailed),
                412,
                "precondition_failed",
            ),
        ];
        for (error, status, code) in cases {
            let api = ApiError::from(error);
            assert_eq!((api.status().as_u16(), api.code()), (status, code));
        }
        let locked = ApiError::from(ResumableError::Locked {
            retry_after: Duration::from_millis(2500),
        });
        let response = axum::response::IntoResponse::into_response(locked);
        assert_eq!(response.headers()["retry-after"], "3");
    }
}
