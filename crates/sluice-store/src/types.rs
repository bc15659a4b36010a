//! The values that cross the `ObjectStore` boundary: request bodies, object
//! metadata, list pages and multipart records. Plain data, no behaviour of a backend.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::SystemTime;

use bytes::Bytes;
use futures::Stream;

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::error::StoreError;

/// How an object is kept and served besides its bytes, content type and
/// metadata: the HTTP headers S3 stores and sends back with it, its storage
/// class, a canned ACL and server-side encryption. Unset means the bucket's
/// defaults. A directory store keeps the headers and refuses the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ObjectSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_encoding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_disposition: Option<String>,
    /// `STANDARD`, `STANDARD_IA`, `GLACIER_IR`, … as the store names them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class: Option<String>,
    /// A canned ACL: `private`, `public-read`, `bucket-owner-full-control`, …
    /// (never reported back: S3 answers it only to GetObjectAcl).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acl: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<Encryption>,
}

impl ObjectSettings {
    /// What a directory store cannot keep, named for an error message.
    pub fn bucket_only(&self) -> Option<&'static str> {
        match (&self.storage_class, &self.acl, &self.encryption) {
            (Some(_), _, _) => Some("a storage class"),
            (_, Some(_), _) => Some("an ACL"),
            (_, _, Some(_)) => Some("server-side encryption"),
            _ => None,
        }
    }
}

/// Server-side encryption of an object at rest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Encryption {
    /// `AES256`: keys the store manages (SSE-S3).
    S3Managed,
    /// `aws:kms`: a KMS key, the account's default one when unnamed (SSE-KMS).
    Kms { key_id: Option<String> },
}

/// User metadata stored with an object (`x-amz-meta-*` on S3).
pub type Metadata = BTreeMap<String, String>;

/// A streamed object body as returned by `get_object`.
pub type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, StoreError>> + Send>>;

/// The bytes of a write. Both forms can be sent again when a request is retried.
#[derive(Clone)]
pub enum Body {
    /// Bytes already in memory.
    Bytes(Bytes),
    /// Bytes already in memory, in several buffers sent back to back.
    Chunks(std::sync::Arc<[Bytes]>),
    /// A byte range of a local file, streamed from disk with positioned reads
    /// rather than loaded into memory.
    File {
        path: PathBuf,
        offset: u64,
        len: u64,
    },
}

impl Body {
    pub fn len(&self) -> u64 {
        match self {
            Body::Bytes(b) => b.len() as u64,
            Body::Chunks(chunks) => chunks.iter().map(|c| c.len() as u64).sum(),
            Body::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Body::Bytes(b) => write!(f, "Body::Bytes({} bytes)", b.len()),
            Body::Chunks(c) => write!(f, "Body::Chunks({} buffers, {} bytes)", c.len(), self.len()),
            Body::File { path, offset, len } => {
                write!(f, "Body::File({}@{offset}+{len})", path.display())
            }
        }
    }
}

impl From<Bytes> for Body {
    fn from(b: Bytes) -> Self {
        Body::Bytes(b)
    }
}

impl From<Vec<u8>> for Body {
    fn from(b: Vec<u8>) -> Self {
        Body::Bytes(Bytes::from(b))
    }
}

/// A condition on a write, evaluated atomically by the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteCondition {
    /// `If-None-Match: *`: only if no object exists at the key.
    IfNoneMatch,
    /// `If-Match: etag`: only if the current object has this ETag.
    IfMatch(String),
}

/// A single-request write of a whole object.
#[derive(Debug, Clone)]
pub struct PutRequest {
    pub key: String,
    pub body: Body,
    pub content_type: Option<String>,
    pub metadata: Metadata,
    pub settings: ObjectSettings,
    /// Checksum of the body, verified by the store before the object becomes visible.
    pub checksum: Option<Checksum>,
    pub condition: Option<WriteCondition>,
}

impl PutRequest {
    pub fn new(key: impl Into<String>, body: impl Into<Body>) -> Self {
        PutRequest {
            key: key.into(),
            body: body.into(),
            content_type: None,
            metadata: Metadata::new(),
            settings: ObjectSettings::default(),
            checksum: None,
            condition: None,
        }
    }
}

/// What a completed write returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutOutput {
    pub etag: String,
    /// The full-object checksum as the store recorded it, when it reports one.
    pub checksum: Option<Checksum>,
}

/// An inclusive-exclusive byte range `[start, end)`; `end: None` reads to the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: Option<u64>,
}

impl ByteRange {
    pub fn new(start: u64, end: u64) -> Self {
        ByteRange {
            start,
            end: Some(end),
        }
    }

    pub fn from(start: u64) -> Self {
        ByteRange { start, end: None }
    }

    /// The range clipped to an object of `size` bytes, or `None` when it starts past
    /// the end (an unsatisfiable range). An empty object satisfies `0..`.
    pub fn resolve(&self, size: u64) -> Option<(u64, u64)> {
        let end = self.end.map_or(size, |e| e.min(size));
        if self.start > size || (self.start == size && size != 0) || end < self.start {
            return None;
        }
        Some((self.start, end))
    }
}

/// What is known about a stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub key: String,
    pub size: u64,
    pub etag: String,
    pub last_modified: SystemTime,
    pub content_type: Option<String>,
    pub metadata: Metadata,
    /// As stored (the ACL is never reported).
    pub settings: ObjectSettings,
    /// Full-object checksum, when the store has one (composite multipart checksums
    /// are not reported: they do not describe the content).
    pub checksum: Option<Checksum>,
}

/// A streamed read.
pub struct GetOutput {
    pub meta: ObjectMeta,
    /// The byte range of the object this body covers, `[start, end)`.
    pub range: (u64, u64),
    pub body: ByteStream,
}

impl GetOutput {
    /// The whole body, in memory: for small objects (metadata, logs,
    /// records), never for data.
    pub async fn bytes(self) -> Result<Bytes, StoreError> {
        use futures::TryStreamExt;
        let mut out = bytes::BytesMut::new();
        let mut body = self.body;
        while let Some(chunk) = body.try_next().await? {
            out.extend_from_slice(&chunk);
        }
        Ok(out.freeze())
    }
}

impl fmt::Debug for GetOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GetOutput")
            .field("meta", &self.meta)
            .field("range", &self.range)
            .finish_non_exhaustive()
    }
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectSummary {
    pub key: String,
    pub size: u64,
    pub etag: String,
    pub last_modified: SystemTime,
}

/// A page of a listing in key order; `next_cursor` continues it.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    pub objects: Vec<ObjectSummary>,
    pub next_cursor: Option<String>,
}

/// Starts a multipart upload.
#[derive(Debug, Clone)]
pub struct CreateMultipartRequest {
    pub key: String,
    pub content_type: Option<String>,
    pub metadata: Metadata,
    pub settings: ObjectSettings,
    /// The algorithm every part will carry a checksum of; the object then gets a
    /// full-object checksum of the same algorithm.
    pub checksum_algorithm: Option<ChecksumAlgorithm>,
}

impl CreateMultipartRequest {
    pub fn new(key: impl Into<String>) -> Self {
        CreateMultipartRequest {
            key: key.into(),
            content_type: None,
            metadata: Metadata::new(),
            settings: ObjectSettings::default(),
            checksum_algorithm: None,
        }
    }
}

/// The checksum a part carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PartChecksum {
    #[default]
    None,
    /// Computed by the caller beforehand; the store verifies it.
    Known(Checksum),
    /// Computed while the body streams (on S3 a trailing checksum) and verified by
    /// the store, which reports it back: the body is read only once.
    Streamed(ChecksumAlgorithm),
}

impl PartChecksum {
    pub fn known(self) -> Option<Checksum> {
        match self {
            PartChecksum::Known(c) => Some(c),
            _ => None,
        }
    }

    pub fn algorithm(self) -> Option<ChecksumAlgorithm> {
        match self {
            PartChecksum::None => None,
            PartChecksum::Known(c) => Some(c.algorithm),
            PartChecksum::Streamed(a) => Some(a),
        }
    }
}

/// One part of a multipart upload.
#[derive(Debug, Clone)]
pub struct UploadPartRequest {
    pub key: String,
    pub upload_id: String,
    /// 1..=10,000.
    pub part_number: u32,
    pub body: Body,
    /// Checksum of the part, verified by the store.
    pub checksum: PartChecksum,
}

/// One part of a multipart upload copied from an object of the same store
/// (S3's UploadPartCopy, Azure's Put Block From URL): the bytes do not pass
/// through the caller.
#[derive(Debug, Clone)]
pub struct CopyPartRequest {
    pub key: String,
    pub upload_id: String,
    /// 1..=10,000.
    pub part_number: u32,
    /// The object whose bytes become the part (at most 5 GiB of them).
    pub source_key: String,
    /// The source's bucket when it is not the store's own (S3 copies between
    /// buckets of one service); the key is then taken as is, without the
    /// store's prefix. Stores without buckets answer [`StoreError::Unsupported`].
    pub source_bucket: Option<String>,
    /// The bytes of the source to copy; `None`: all of it. A range past the
    /// source's end is refused, as S3 does.
    pub source_range: Option<ByteRange>,
    /// Copy only from the source version with this ETag
    /// (`x-amz-copy-source-if-match`), else [`StoreError::PreconditionFailed`]:
    /// the parts of one copy then all come from one version.
    pub source_if_match: Option<String>,
}

/// A whole object copied inside the store (S3's CopyObject, at most 5 GiB):
/// the bytes do not pass through the caller. Content type, metadata and the
/// full-object checksum are copied with it.
#[derive(Debug, Clone)]
pub struct CopyObjectRequest {
    pub key: String,
    pub source_key: String,
    /// As in [`CopyPartRequest::source_bucket`].
    pub source_bucket: Option<String>,
    /// The copy's storage class, ACL and encryption (unset: the bucket's
    /// defaults, as CopyObject has them); its headers are the source's.
    pub placement: ObjectSettings,
}

/// A listing that stops at the next `/`: the objects directly under a prefix
/// and the sub-prefixes (ending in `/`) that hold the rest, merged in key order.
#[derive(Debug, Clone, Default)]
pub struct DirectoryPage {
    pub entries: Vec<DirectoryEntry>,
    /// The last entry's key or prefix, to pass as the next page's cursor.
    pub next_cursor: Option<String>,
}

/// One entry of a [`DirectoryPage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirectoryEntry {
    Object(ObjectSummary),
    /// A prefix ending in `/` with at least one object under it.
    Prefix(String),
}

impl DirectoryEntry {
    /// The object's key, or the prefix.
    pub fn name(&self) -> &str {
        match self {
            DirectoryEntry::Object(o) => &o.key,
            DirectoryEntry::Prefix(p) => p,
        }
    }
}

/// A key a batched delete could not remove.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteFailure {
    pub key: String,
    /// The store's reason, for messages.
    pub reason: String,
}

/// A part the store holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadedPart {
    pub part_number: u32,
    pub etag: String,
    pub size: u64,
    pub checksum: Option<Checksum>,
}

/// Finishes a multipart upload from its parts, sorted by part number.
#[derive(Debug, Clone)]
pub struct CompleteMultipartRequest {
    pub key: String,
    pub upload_id: String,
    pub parts: Vec<UploadedPart>,
    /// The full-object checksum the caller computed; the store checks it.
    pub checksum: Option<Checksum>,
    /// Checked atomically as the object becomes visible: `IfNoneMatch` makes
    /// exactly one of two racing uploads to a new key win (the other gets
    /// `PreconditionFailed` and its upload stays, to be aborted).
    pub condition: Option<WriteCondition>,
}

/// A multipart upload that was started and neither completed nor aborted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartUploadInfo {
    pub key: String,
    pub upload_id: String,
    pub initiated: Option<SystemTime>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_resolution() {
        let cases = [
            (ByteRange::from(0), 0, Some((0, 0))),
            (ByteRange::from(0), 10, Some((0, 10))),
            (ByteRange::new(2, 5), 10, Some((2, 5))),
            (ByteRange::new(2, 50), 10, Some((2, 10))),
            (ByteRange::from(9), 10, Some((9, 10))),
            (ByteRange::from(10), 10, None),
            (ByteRange::from(11), 10, None),
            (ByteRange::new(5, 3), 10, None),
        ];
        for (range, size, expected) in cases {
            assert_eq!(range.resolve(size), expected, "{range:?} of {size}");
        }
    }
}
