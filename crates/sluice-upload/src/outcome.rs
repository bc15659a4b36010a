//! What a finished upload made: the object's key, size, ETag, checksum and
//! parts, as every way of making one (and its announcement) reports it.

use sluice_store::Checksum;

/// A finished upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadOutcome {
    pub key: String,
    pub size: u64,
    pub etag: String,
    /// Checksum of the whole object, as the store verified it.
    pub checksum: Option<Checksum>,
    /// Number of parts; 0 for a single PUT.
    pub parts: u32,
}
