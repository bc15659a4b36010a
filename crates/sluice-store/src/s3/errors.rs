//! Turns aws-sdk-s3's errors into [`StoreError`]: modelled answers by their S3
//! error code or HTTP status, everything that never got an answer as transport.
//! Messages never include credentials; the SDK does not put them in errors.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_smithy_runtime_api::client::orchestrator::HttpResponse;

use crate::error::StoreError;

/// What the mapping needs to know about the request that failed.
pub(super) struct Context<'a> {
    /// The endpoint requests go to, as errors name it.
    pub endpoint: &'a str,
    pub bucket: &'a str,
    pub key: &'a str,
    pub upload_id: Option<&'a str>,
}

pub(super) fn map<E>(error: SdkError<E, HttpResponse>, context: Context<'_>) -> StoreError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    if let SdkError::ServiceError(service) = &error {
        let status = service.raw().status().as_u16();
        let code = service.err().code().unwrap_or_default().to_string();
        let message = service.err().message().unwrap_or_default().to_string();
        let mapped = from_answer(status, &code, message, &context);
        if let StoreError::Throttled { .. } = mapped {
            let retry_after = service
                .raw()
                .headers()
                .get("retry-after")
                .and_then(parse_retry_after);
            return StoreError::Throttled { retry_after };
        }
        return mapped;
    }
    let text = crate::error_chain(&error);
    // A profile that is missing or broken (`--profile`, AWS_PROFILE).
    if text.contains("profile") && text.contains("not defined") {
        return StoreError::NoCredentials(root_cause(&error).unwrap_or(text));
    }
    if text.contains("credentials") {
        return StoreError::NoCredentials(
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run where instance or \
             web-identity credentials are available"
                .into(),
        );
    }
    match error {
        SdkError::TimeoutError(_) => StoreError::Transport {
            at: Some(context.endpoint.to_string()),
            cause: "the request timed out".into(),
        },
        SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => StoreError::Transport {
            at: Some(context.endpoint.to_string()),
            cause: root_cause(&error).unwrap_or(text),
        },
        _ => StoreError::Service {
            status: 0,
            code: "RequestNotSent".into(),
            message: text,
        },
    }
}

/// The innermost cause of a failure without an answer ("Connection refused
/// (os error 111)", "failed to lookup address information: ..."): the SDK's
/// wrappers around it say nothing a user can act on.
fn root_cause(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut current = error;
    while let Some(source) = current.source() {
        current = source;
    }
    let text = current.to_string();
    (!text.is_empty()).then_some(text)
}

/// Maps an S3 answer (status and error code) to the modelled error it stands for.
pub(super) fn from_answer(
    status: u16,
    code: &str,
    message: String,
    context: &Context<'_>,
) -> StoreError {
    match (status, code) {
        (_, "NoSuchBucket") => StoreError::NoSuchBucket {
            bucket: context.bucket.to_string(),
        },
        (_, "NoSuchUpload") => StoreError::NoSuchUpload {
            upload_id: context.upload_id.unwrap_or_default().to_string(),
        },
        (_, "NoSuchKey") | (404, "NotFound") | (404, "") => StoreError::NoSuchKey {
            key: context.key.to_string(),
        },
        (_, "PreconditionFailed") | (412, _) | (_, "ConditionalRequestConflict") => {
            StoreError::PreconditionFailed
        }
        (_, "InvalidRange") | (416, _) => StoreError::InvalidRange,
        (_, "EntityTooSmall") => StoreError::EntityTooSmall,
        (_, "InvalidPart") | (_, "InvalidPartOrder") => StoreError::InvalidPart(message),
        (_, "BadDigest")
        | (_, "InvalidDigest")
        | (_, "XAmzContentChecksumMismatch")
        | (_, "XAmzContentSHA256Mismatch") => StoreError::ChecksumMismatch {
            algorithm: "checksum",
        },
        (_, "InvalidAccessKeyId")
        | (_, "SignatureDoesNotMatch")
        | (_, "ExpiredToken")
        | (_, "InvalidToken") => StoreError::InvalidCredentials(format!("{code}: {message}")),
        (_, "AccessDenied") | (403, _) => StoreError::AccessDenied(if message.is_empty() {
            format!("to s3://{}/{}", context.bucket, context.key)
        } else {
            message
        }),
        (503, _) | (_, "SlowDown") => StoreError::Throttled { retry_after: None },
        (status, code) => StoreError::Service {
            status,
            code: if code.is_empty() {
                format!("HTTP{status}")
            } else {
                code.to_string()
            },
            message,
        },
    }
}

/// `Retry-After` in delay-seconds form (S3 and the proxies in front of it use no
/// other); an HTTP date or garbage counts as absent.
pub(super) fn parse_retry_after(value: &str) -> Option<std::time::Duration> {
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && (0.0..=3600.0).contains(&seconds))
        .then(|| std::time::Duration::from_secs_f64(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_values() {
        let cases = [
            ("1", Some(1000)),
            (" 2 ", Some(2000)),
            ("0.5", Some(500)),
            ("-1", None),
            ("Wed, 21 Oct 2015 07:28:00 GMT", None),
            ("99999", None),
        ];
        for (value, millis) in cases {
            assert_eq!(
                parse_retry_after(value).map(|d| d.as_millis() as u64),
                millis,
                "{value}"
            );
        }
    }

    #[test]
    fn answers_map_to_modelled_errors() {
        let context = Context {
            endpoint: "http://127.0.0.1:9000",
            bucket: "b",
            key: "k",
            upload_id: Some("u"),
        };
        let cases: Vec<(u16, &str, &str)> = vec![
            (404, "NoSuchKey", "no_such_key"),
            (404, "", "no_such_key"),
            (404, "NoSuchBucket", "no_such_bucket"),
            (404, "NoSuchUpload", "no_such_upload"),
            (412, "PreconditionFailed", "precondition_failed"),
            (409, "ConditionalRequestConflict", "precondition_failed"),
            (416, "InvalidRange", "invalid_range"),
            (400, "EntityTooSmall", "entity_too_small"),
            (400, "InvalidPart", "invalid_part"),
            (400, "BadDigest", "checksum_mismatch"),
            (403, "InvalidAccessKeyId", "invalid_credentials"),
            (403, "SignatureDoesNotMatch", "invalid_credentials"),
            (403, "AccessDenied", "access_denied"),
            (503, "SlowDown", "throttled"),
            (503, "", "throttled"),
            (500, "InternalError", "service"),
        ];
        for (status, code, kind) in cases {
            let error = from_answer(status, code, String::new(), &context);
            assert_eq!(error.kind(), kind, "{status} {code}");
        }
    }
}
