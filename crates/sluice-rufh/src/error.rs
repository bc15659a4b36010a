//! What a request of the draft can do wrong, each as an RFC 9457 problem
//! document: the draft's own problem types where it names one, `about:blank`
//! with a stable `code` otherwise.

use http::{HeaderName, HeaderValue, StatusCode};

use crate::fields::FieldError;

/// The problem types the draft registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemType {
    MismatchingUploadOffset,
    CompletedUpload,
    InconsistentUploadLength,
}

impl ProblemType {
    pub fn uri(self) -> &'static str {
        match self {
            ProblemType::MismatchingUploadOffset => {
                "https://iana.org/assignments/http-problem-types#mismatching-upload-offset"
            }
            ProblemType::CompletedUpload => {
                "https://iana.org/assignments/http-problem-types#completed-upload"
            }
            ProblemType::InconsistentUploadLength => {
                "https://iana.org/assignments/http-problem-types#inconsistent-upload-length"
            }
        }
    }
}

/// A refused request of the draft.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DraftError {
    #[error("Upload-Draft-Interop-Version {given:?} is not served here (versions 3 to 8 are)")]
    UnsupportedVersion { given: String },
    #[error("the request carries both Tus-Resumable and Upload-Draft-Interop-Version: speak one protocol")]
    BothProtocols,
    #[error(transparent)]
    Field(#[from] FieldError),
    #[error("the {0} header is required")]
    Missing(&'static str),
    #[error("{0} is not allowed on this request")]
    NotAllowed(&'static str),
    #[error("an append's body must be Content-Type: application/partial-upload")]
    NotPartialUpload,
    #[error("Upload-Offset {provided} does not match the upload's offset {expected}")]
    MismatchingOffset { expected: u64, provided: u64 },
    #[error("the upload is already complete")]
    CompletedUpload { status: StatusCode },
    #[error("inconsistent upload length: {detail}")]
    InconsistentLength { detail: String },
}

impl DraftError {
    pub fn status(&self) -> StatusCode {
        match self {
            DraftError::NotPartialUpload => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            DraftError::MismatchingOffset { .. } => StatusCode::CONFLICT,
            DraftError::CompletedUpload { status } => *status,
            _ => StatusCode::BAD_REQUEST,
        }
    }

    /// A stable machine-readable code, as the gateway's other errors have.
    pub fn code(&self) -> &'static str {
        match self {
            DraftError::UnsupportedVersion { .. } => "interop_version_unsupported",
            DraftError::BothProtocols => "both_protocols",
            DraftError::Field(_) => "invalid_header",
            DraftError::Missing(_) => "missing_header",
            DraftError::NotAllowed(_) => "header_not_allowed",
            DraftError::NotPartialUpload => "unsupported_media_type",
            DraftError::MismatchingOffset { .. } => "offset_mismatch",
            DraftError::CompletedUpload { .. } => "completed_upload",
            DraftError::InconsistentLength { .. } => "inconsistent_length",
        }
    }

    pub fn problem_type(&self) -> Option<ProblemType> {
        match self {
            DraftError::MismatchingOffset { .. } => Some(ProblemType::MismatchingUploadOffset),
            DraftError::CompletedUpload { .. } => Some(ProblemType::CompletedUpload),
            DraftError::InconsistentLength { .. } => Some(ProblemType::InconsistentUploadLength),
            _ => None,
        }
    }

    /// The problem document (`application/problem+json`).
    pub fn problem(&self) -> serde_json::Value {
        let status = self.status();
        let mut problem = serde_json::json!({
            "type": self.problem_type().map_or("about:blank", ProblemType::uri),
            "title": status.canonical_reason().unwrap_or("error"),
            "status": status.as_u16(),
            "detail": self.to_string(),
            "code": self.code(),
        });
        if let DraftError::MismatchingOffset { expected, provided } = self {
            problem["expected-offset"] = (*expected).into();
            problem["provided-offset"] = (*provided).into();
        }
        problem
    }

    /// Headers the answer carries besides: the real offset with a mismatch.
    pub fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        match self {
            DraftError::MismatchingOffset { expected, .. } => {
                vec![(crate::UPLOAD_OFFSET, HeaderValue::from(*expected))]
            }
            _ => Vec::new(),
        }
    }
}
