//! GCS's error answers as [`StoreError`]s: the status and the JSON body's
//! `error.errors[0].reason` and `error.message` mapped to the modelled
//! errors the engine acts on, the rest kept as `Service` for logs.

use std::time::Duration;

use crate::error::StoreError;

/// What a failed request was about, for the errors that name it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context<'a> {
    pub key: &'a str,
    pub bucket: &'a str,
}

/// What an error answer's body says (`{"error": {"code", "message",
/// "errors": [{"reason"}]}}`); empty where it says nothing.
#[derive(Debug, Default)]
pub(crate) struct Said {
    pub reason: String,
    pub message: String,
}

impl Said {
    pub fn read(text: &str) -> Said {
        let Ok(value) = serde_json::from_str::<serde_json::Value>(text) else {
            return Said {
                reason: String::new(),
                message: text
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(300)
                    .collect(),
            };
        };
        let error = &value["error"];
        Said {
            reason: error["errors"][0]["reason"]
                .as_str()
                .unwrap_or("")
                .to_string(),
            message: error["message"].as_str().unwrap_or("").to_string(),
        }
    }
}

/// An error answer with `status`, what its body `said`, and Retry-After.
pub(crate) fn map(
    status: u16,
    said: &Said,
    retry_after: Option<Duration>,
    context: Context<'_>,
) -> StoreError {
    let message = said.message.as_str();
    match status {
        404 if message.contains("bucket does not exist") => StoreError::NoSuchBucket {
            bucket: context.bucket.to_string(),
        },
        404 => StoreError::NoSuchKey {
            key: context.key.to_string(),
        },
        412 => StoreError::PreconditionFailed,
        416 => StoreError::InvalidRange,
        400 if message.contains("CRC32C") || message.contains("crc32c") => {
            StoreError::ChecksumMismatch {
                algorithm: "crc32c",
            }
        }
        400 if message.contains("MD5") => StoreError::ChecksumMismatch { algorithm: "md5" },
        401 => StoreError::InvalidCredentials(message.to_string()),
        403 => StoreError::AccessDenied(if said.reason.is_empty() {
            message.to_string()
        } else {
            format!("{}: {message}", said.reason)
        }),
        429 | 503 => StoreError::Throttled { retry_after },
        _ => StoreError::Service {
            status,
            code: said.reason.clone(),
            message: message.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_the_errors_the_engine_acts_on() {
        let context = Context {
            key: "k",
            bucket: "b",
        };
        // (status, body, error)
        let cases = [
            (
                404,
                r#"{"error": {"code": 404, "message": "No such object: b/k", "errors": [{"reason": "notFound"}]}}"#,
                "NoSuchKey",
            ),
            (
                404,
                r#"{"error": {"code": 404, "message": "The specified bucket does not exist.", "errors": [{"reason": "notFound"}]}}"#,
                "NoSuchBucket",
            ),
            (
                412,
                r#"{"error": {"code": 412, "message": "At least one of the pre-conditions you specified did not hold.", "errors": [{"reason": "conditionNotMet"}]}}"#,
                "PreconditionFailed",
            ),
            (
                400,
                r#"{"error": {"code": 400, "message": "Provided CRC32C \"AAAAAA==\" doesn't match calculated CRC32C \"x\"."}}"#,
                "ChecksumMismatch",
            ),
            (429, "rate", "Throttled"),
            (503, "", "Throttled"),
            (
                401,
                r#"{"error": {"code": 401, "message": "Invalid Credentials"}}"#,
                "InvalidCredentials",
            ),
            (
                403,
                r#"{"error": {"code": 403, "message": "x does not have storage.objects.create access", "errors": [{"reason": "forbidden"}]}}"#,
                "AccessDenied",
            ),
            (416, "", "InvalidRange"),
            (500, "boom", "Service"),
        ];
        for (status, body, want) in cases {
            let got = format!("{:?}", map(status, &Said::read(body), None, context));
            assert!(got.starts_with(want), "{status} {body}: {got}");
        }
    }
}
