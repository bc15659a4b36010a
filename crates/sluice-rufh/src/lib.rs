//! Resumable Uploads for HTTP ("RUFH", draft-ietf-httpbis-resumable-upload), the
//! protocol the HTTP working group makes of tus, as a server speaks it: which
//! interop versions there are and how they differ ([`Interop`]), the structured
//! fields its headers are ([`fields`]), what a creation or an append request
//! says ([`request`]), the headers of every answer ([`answer`]) and its refusals
//! as RFC 9457 problem documents ([`DraftError`]). No I/O: the gateway's adapter
//! acts on what this crate parses, over the same resumable uploads as tus.
//!
//! Interop versions and drafts: 3 is -01 (`Upload-Incomplete`, inverted), 4 is
//! -02, 5 is -03, 6 is -04 and -05 (`application/partial-upload`, `Upload-Limit`
//! with `expires`), 7 is -06 to -08 (`max-age`, `Upload-Complete: ?0` on every
//! answer that did not complete), 8 is -09 to -11.

pub mod answer;
mod error;
pub mod fields;
mod interop;
pub mod request;

pub use error::{DraftError, ProblemType};
pub use interop::Interop;

/// The header every request of the draft carries, naming its interop version.
pub const INTEROP_VERSION: http::HeaderName =
    http::HeaderName::from_static("upload-draft-interop-version");
pub const UPLOAD_COMPLETE: http::HeaderName = http::HeaderName::from_static("upload-complete");
/// Interop version 3's inverse of `Upload-Complete`.
pub const UPLOAD_INCOMPLETE: http::HeaderName = http::HeaderName::from_static("upload-incomplete");
pub const UPLOAD_OFFSET: http::HeaderName = http::HeaderName::from_static("upload-offset");
pub const UPLOAD_LENGTH: http::HeaderName = http::HeaderName::from_static("upload-length");
pub const UPLOAD_LIMIT: http::HeaderName = http::HeaderName::from_static("upload-limit");
/// RFC 9530's digest of the whole representation, sent with a creation.
pub const REPR_DIGEST: http::HeaderName = http::HeaderName::from_static("repr-digest");
/// The media type of an append's body (interop 6 and later).
pub const PARTIAL_UPLOAD: &str = "application/partial-upload";
