//! The tus 1.0 resumable upload protocol (<https://tus.io/protocols/resumable-upload>)
//! on `http` types, without I/O: the headers and their parsing ([`headers`]),
//! `Upload-Metadata` ([`metadata`]), `Upload-Checksum` ([`checksum`]), the upload
//! record with the rules every request must satisfy ([`upload`]), and the errors
//! with their status codes ([`TusError`]). The gateway keeps the record in the store
//! and moves the bytes; this crate decides what a request may do.

pub mod checksum;
mod error;
pub mod headers;
pub mod metadata;
pub mod upload;

pub use checksum::{ChecksumAlgorithm, UploadChecksum};
pub use error::TusError;
pub use metadata::Metadata;
pub use upload::{Concat, Upload};

/// The protocol version spoken.
pub const TUS_VERSION: &str = "1.0.0";
/// Extensions supported, as announced in `Tus-Extension`.
pub const EXTENSIONS: &str =
    "creation,creation-with-upload,creation-defer-length,termination,checksum,expiration,concatenation";
/// The media type of PATCH bodies.
pub const OFFSET_OCTET_STREAM: &str = "application/offset+octet-stream";
