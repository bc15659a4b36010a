//! What a tus request can do wrong, each with its status code and a stable code for
//! the JSON error body.

use http::StatusCode;

/// A refused tus request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TusError {
    #[error("Tus-Resumable must be {expected:?}", expected = crate::TUS_VERSION)]
    UnsupportedVersion,
    #[error("the {0} header is required")]
    MissingHeader(&'static str),
    #[error("the {header} header is invalid: {reason}")]
    InvalidHeader {
        header: &'static str,
        reason: String,
    },
    #[error("Upload-Metadata is malformed: {0}")]
    InvalidMetadata(String),
    #[error("PATCH bodies must have Content-Type: application/offset+octet-stream")]
    UnsupportedMediaType,
    #[error("Upload-Offset {given} does not match the upload's offset {expected}")]
    OffsetMismatch { expected: u64, given: u64 },
    #[error("the upload would be larger than the maximum of {max} bytes")]
    TooLarge { max: u64 },
    #[error("the body runs past the upload's length of {length} bytes")]
    BeyondLength { length: u64 },
    #[error("the upload's length is already set")]
    LengthAlreadySet,
    #[error("the upload's length is {length} bytes, but this request ends it at {reached}")]
    InconsistentLength { length: u64, reached: u64 },
    #[error("the upload's length must be set (Upload-Length) before it can complete")]
    LengthNotSet,
    #[error("unsupported checksum algorithm {0:?} (supported: sha1, md5, sha256)")]
    UnsupportedChecksumAlgorithm(String),
    #[error("the chunk's checksum does not match Upload-Checksum; the chunk was discarded")]
    ChecksumMismatch,
    #[error("no such upload")]
    NotFound,
    #[error("the upload was terminated or has expired")]
    Gone,
    #[error("another request is writing to this upload; retry after it ends")]
    Locked { retry_after_seconds: u64 },
    #[error("a final upload of a concatenation cannot be patched")]
    FinalUploadPatched,
    #[error("cannot concatenate: {0}")]
    InvalidConcat(String),
    #[error("this upload was made with {created_with}: continue it with that protocol")]
    OtherProtocol { created_with: &'static str },
    #[error("the upload's bytes do not match the {algorithm} digest given at its creation; the upload was discarded")]
    DigestMismatch { algorithm: &'static str },
}

impl TusError {
    pub fn status(&self) -> StatusCode {
        use TusError::*;
        match self {
            UnsupportedVersion => StatusCode::PRECONDITION_FAILED,
            MissingHeader(_)
            | InvalidHeader { .. }
            | InvalidMetadata(_)
            | LengthAlreadySet
            | InconsistentLength { .. }
            | LengthNotSet
            | UnsupportedChecksumAlgorithm(_)
            | InvalidConcat(_)
            | OtherProtocol { .. }
            | DigestMismatch { .. } => StatusCode::BAD_REQUEST,
            UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            OffsetMismatch { .. } => StatusCode::CONFLICT,
            TooLarge { .. } | BeyondLength { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ChecksumMismatch => StatusCode::from_u16(460).expect("460 is a valid status"),
            NotFound => StatusCode::NOT_FOUND,
            Gone => StatusCode::GONE,
            Locked { .. } => StatusCode::LOCKED,
            FinalUploadPatched => StatusCode::FORBIDDEN,
        }
    }

    /// Seconds a client should wait before trying again (`Retry-After`), where
    /// waiting helps.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            TusError::Locked {
                retry_after_seconds,
            } => Some(*retry_after_seconds),
            _ => None,
        }
    }

    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        use TusError::*;
        match self {
            UnsupportedVersion => "tus_version_unsupported",
            MissingHeader(_) => "missing_header",
            InvalidHeader { .. } => "invalid_header",
            InvalidMetadata(_) => "invalid_metadata",
            UnsupportedMediaType => "unsupported_media_type",
            OffsetMismatch { .. } => "offset_mismatch",
            TooLarge { .. } => "too_large",
            BeyondLength { .. } => "beyond_length",
            LengthAlreadySet => "length_already_set",
            InconsistentLength { .. } => "inconsistent_length",
            LengthNotSet => "length_not_set",
            UnsupportedChecksumAlgorithm(_) => "checksum_algorithm_unsupported",
            ChecksumMismatch => "checksum_mismatch",
            NotFound => "upload_not_found",
            Gone => "upload_gone",
            Locked { .. } => "upload_locked",
            FinalUploadPatched => "final_upload_patched",
            InvalidConcat(_) => "invalid_concat",
            OtherProtocol { .. } => "other_protocol",
            DigestMismatch { .. } => "digest_mismatch",
        }
    }
}
