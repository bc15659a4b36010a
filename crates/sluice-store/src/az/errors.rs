//! Azure Blob's answers as [`StoreError`]s: the status and the
//! `x-ms-error-code` (a HEAD answer has no body to say it) mapped to the
//! modelled errors the engine acts on, the rest kept as `Service` with the
//! code and message for logs.

use std::time::Duration;

use crate::error::StoreError;

/// What a failed request was about, for the errors that name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    pub key: &'a str,
    pub container: &'a str,
    /// The request carried `If-None-Match: *` (set by `Call::condition`): a 409 `BlobAlreadyExists` is
    /// its precondition failing (Azure answers 409 where the documentation
    /// says 412).
    pub create_only: bool,
}

/// An error answer: `status`, `code` (`x-ms-error-code` or the body's
/// `<Code>`), `message` (the body's `<Message>`), `retry_after` in seconds.
pub(crate) fn map(
    status: u16,
    code: &str,
    message: &str,
    retry_after: Option<Duration>,
    context: Context<'_>,
) -> StoreError {
    match (status, code) {
        (404, "ContainerNotFound") => StoreError::NoSuchBucket {
            bucket: context.container.to_string(),
        },
        (404, _) => StoreError::NoSuchKey {
            key: context.key.to_string(),
        },
        (412, _) => StoreError::PreconditionFailed,
        (409, "BlobAlreadyExists") if context.create_only => StoreError::PreconditionFailed,
        (416, _) => StoreError::InvalidRange,
        (400, "Crc64Mismatch") => StoreError::ChecksumMismatch {
            algorithm: "crc64nvme",
        },
        (400, "Md5Mismatch") => StoreError::ChecksumMismatch { algorithm: "md5" },
        (400, "InvalidBlockList") => StoreError::InvalidPart(
            "a block the list names is not stored (the upload was completed, aborted or overwritten)"
                .into(),
        ),
        (403, "AuthenticationFailed") | (403, "InvalidAuthenticationInfo") => {
            StoreError::InvalidCredentials(first_line(message))
        }
        (403, _) => StoreError::AccessDenied(if code.is_empty() {
            first_line(message)
        } else {
            format!("{code}: {}", first_line(message))
        }),
        (503, _) | (429, _) => StoreError::Throttled { retry_after },
        _ => StoreError::Service {
            status,
            code: code.to_string(),
            message: first_line(message),
        },
    }
}

/// Azure's messages carry `RequestId:` and `Time:` lines after the first.
fn first_line(message: &str) -> String {
    message.lines().next().unwrap_or("").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_modelled_errors() {
        let context = |create_only| Context {
            key: "k",
            container: "c",
            create_only,
        };
        // (status, code, create-only, expected kind)
        let cases = [
            (404, "BlobNotFound", false, "NoSuchKey"),
            (404, "", false, "NoSuchKey"),
            (404, "ContainerNotFound", false, "NoSuchBucket"),
            (412, "ConditionNotMet", false, "PreconditionFailed"),
            (409, "BlobAlreadyExists", true, "PreconditionFailed"),
            (409, "BlobAlreadyExists", false, "Service"),
            (416, "InvalidRange", false, "InvalidRange"),
            (400, "Crc64Mismatch", false, "ChecksumMismatch"),
            (400, "InvalidBlockList", false, "InvalidPart"),
            (403, "AuthenticationFailed", false, "InvalidCredentials"),
            (
                403,
                "AuthorizationPermissionMismatch",
                false,
                "AccessDenied",
            ),
            (503, "ServerBusy", false, "Throttled"),
            (500, "OperationTimedOut", false, "Service"),
        ];
        for (status, code, create_only, kind) in cases {
            let error = map(status, code, "m\nRequestId:x", None, context(create_only));
            let got = format!("{error:?}");
            assert!(got.starts_with(kind), "{status} {code}: {got}");
            assert!(!error.to_string().contains("RequestId"), "{error}");
        }
        assert!(map(500, "OperationTimedOut", "", None, context(false)).is_transient());
    }
}
