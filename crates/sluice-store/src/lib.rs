//! sluice-store owns the `ObjectStore` trait — the storage operations the engine,
//! the gateway and the janitor use, and no others — and its backends:
//! [`s3::S3Store`] (aws-sdk-s3; AWS, MinIO, Ceph RGW, R2, ...),
//! [`az::AzureStore`] (Azure Blob Storage and Azurite) and [`fs::FsStore`] (a
//! local directory, the embedded default).
//!
//! Errors are [`StoreError`], split into modelled answers and transient failures
//! ([`StoreError::is_transient`]). Retrying is the caller's job: backends send each
//! request once so that one retry policy, the engine's, governs every request.

#[cfg(feature = "az")]
pub mod az;
pub mod checksum;
mod error;
pub mod exit_fault;
pub mod fs;
#[cfg(feature = "gcs")]
pub mod gcs;
pub mod location;
pub mod presign;
pub mod probe;
#[cfg(feature = "rest")]
mod rest;
#[cfg(feature = "s3")]
pub mod s3;
mod types;

use async_trait::async_trait;

pub use checksum::{Checksum, ChecksumAlgorithm, Hasher};
pub use error::{error_chain, StoreError};
pub use location::{Service, StoreLocation};
pub use presign::{
    BucketRequest, DirectSigner, PostPolicy, PresignedMethod, PresignedPost, TemporaryCredentials,
};
pub use types::*;

/// The first key segment of sluice's own state in a store (resumable uploads
/// under `_sluice/tus/`, the breaker's probe): no object a client names may
/// take it, or a directory store could no longer hold that state.
pub const RESERVED_SEGMENT: &str = "_sluice";

/// A key (or prefix) of sluice's own state, under [`RESERVED_SEGMENT`], as a
/// constant: `reserved_key!("tus/")` is `"_sluice/tus/"`. Every such key is
/// made with it, so the segment is spelled in one place (a test checks the two
/// agree).
#[macro_export]
macro_rules! reserved_key {
    ($rest:literal) => {
        concat!("_sluice/", $rest)
    };
}

/// True for `_sluice` and keys under `_sluice/`.
pub fn is_reserved_key(key: &str) -> bool {
    key.split('/').next() == Some(RESERVED_SEGMENT)
}

/// A listing cursor after every key under `prefix` (which ends in `/`): the
/// prefix and U+10FFFF, which sorts after every other character, with more of
/// them while that is not past `after` (keys may hold U+10FFFF themselves), so
/// that a listing always moves forward.
pub fn cursor_past(prefix: &str, after: Option<&str>) -> String {
    let mut cursor = format!("{prefix}{}", char::MAX);
    while after.is_some_and(|a| a >= cursor.as_str()) {
        cursor.push(char::MAX);
    }
    cursor
}

/// S3's limits, which every backend enforces so that what works locally works on S3.
/// Every object whose key starts with `prefix`, in key order, page after
/// page (for listings a caller holds whole anyway: a table's files).
pub async fn list_all(
    store: &dyn ObjectStore,
    prefix: &str,
) -> Result<Vec<ObjectSummary>, StoreError> {
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store.list_objects(prefix, cursor.as_deref(), 1000).await?;
        listed.extend(page.objects);
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(listed),
        }
    }
}

pub mod limits {
    /// Smallest part other than the last: 5 MiB.
    pub const MIN_PART_SIZE: u64 = 5 * 1024 * 1024;
    /// Largest part: 5 GiB.
    pub const MAX_PART_SIZE: u64 = 5 * 1024 * 1024 * 1024;
    /// Most parts in one upload.
    pub const MAX_PARTS: u32 = 10_000;
    /// Largest object: 5 TiB.
    pub const MAX_OBJECT_SIZE: u64 = 5 * 1024 * 1024 * 1024 * 1024;
    /// Largest single PUT: 5 GiB.
    pub const MAX_PUT_SIZE: u64 = MAX_PART_SIZE;
    /// Longest key in bytes.
    pub const MAX_KEY_LEN: usize = 1024;
}

/// The storage operations sluice needs. Every method sends one request (no
/// retries); see [`StoreError::is_transient`] for which failures are worth another.
#[async_trait]
pub trait ObjectStore: Send + Sync + std::fmt::Debug + 'static {
    /// A human-readable name of where objects go, such as `s3://bucket/prefix` or
    /// `file:///srv/data`, for messages.
    fn describe(&self) -> String;

    /// Writes a whole object in one request, atomically: readers see the old object
    /// or the new one, never a part.
    async fn put_object(&self, request: PutRequest) -> Result<PutOutput, StoreError>;

    /// Reads an object or a byte range of it as a stream.
    async fn get_object(
        &self,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<GetOutput, StoreError>;

    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError>;

    /// Deletes an object; deleting a missing key succeeds.
    async fn delete_object(&self, key: &str) -> Result<(), StoreError>;

    /// Lists objects whose key starts with `prefix`, in key order, at most
    /// `limit` per page, starting after the key `cursor` (the previous page's
    /// `next_cursor`, which is its last key: any key may be given).
    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError>;

    /// Lists one level under `prefix` (which ends in `/` or is empty): the
    /// objects directly under it and the sub-prefixes holding the rest, in key
    /// order, about `limit` entries per page, after `cursor` (a previous page's
    /// `next_cursor`).
    ///
    /// The default walks [`ObjectStore::list_objects`] and skips each
    /// sub-prefix's keys with one request per sub-prefix; S3 asks the server
    /// to group them (`delimiter=/`).
    async fn list_directory(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DirectoryPage, StoreError> {
        let limit = limit.max(1);
        let mut entries: Vec<DirectoryEntry> = Vec::new();
        let mut after = cursor.map(str::to_string);
        loop {
            let page = self.list_objects(prefix, after.as_deref(), limit).await?;
            let mut skipped_to = None;
            for object in page.objects {
                let rest = &object.key[prefix.len().min(object.key.len())..];
                match rest.find('/') {
                    Some(slash) => {
                        let sub = object.key[..prefix.len() + slash + 1].to_string();
                        // A cursor inside `sub` continues a prefix already listed.
                        let listed = after.as_deref().is_some_and(|a| a.starts_with(&sub));
                        skipped_to = Some(cursor_past(&sub, after.as_deref()));
                        if !listed {
                            entries.push(DirectoryEntry::Prefix(sub));
                        }
                        break;
                    }
                    None => entries.push(DirectoryEntry::Object(object)),
                }
            }
            let next = match skipped_to {
                Some(skip) => Some(skip),
                None => page.next_cursor,
            };
            match next {
                Some(next) if entries.len() < limit => after = Some(next),
                Some(next) => {
                    let next_cursor = entries.last().map(|e| match e {
                        DirectoryEntry::Prefix(p) => cursor_past(p, Some(&next)),
                        DirectoryEntry::Object(o) => o.key.clone(),
                    });
                    return Ok(DirectoryPage {
                        entries,
                        next_cursor,
                    });
                }
                None => {
                    return Ok(DirectoryPage {
                        entries,
                        next_cursor: None,
                    })
                }
            }
        }
    }

    /// Deletes many keys; deleting a missing key succeeds. Answers the keys
    /// that could not be deleted. The default deletes one key per request; S3
    /// sends up to 1,000 keys per DeleteObjects request.
    async fn delete_objects(&self, keys: &[String]) -> Result<Vec<DeleteFailure>, StoreError> {
        for key in keys {
            self.delete_object(key).await?;
        }
        Ok(Vec::new())
    }

    /// Copies a whole object (at most [`ObjectStore::copy_object_limit`]
    /// bytes) without passing its bytes through the caller. Stores that
    /// cannot answer [`StoreError::Unsupported`].
    async fn copy_object(&self, request: CopyObjectRequest) -> Result<PutOutput, StoreError> {
        let _ = request;
        Err(StoreError::Unsupported("server-side copy"))
    }

    /// The largest object [`ObjectStore::copy_object`] copies in one
    /// request: S3's CopyObject stops at 5 GiB, and a larger object is copied
    /// as ranges, each a part ([`ObjectStore::upload_part_copy`]). Azure's
    /// Copy Blob and GCS's rewrite take any size.
    fn copy_object_limit(&self) -> u64 {
        limits::MAX_PUT_SIZE
    }

    /// Starts a multipart upload and returns its upload id.
    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError>;

    /// Stores one part; parts may arrive in any order and concurrently.
    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError>;

    /// Stores a part copied from an object of this store (a range of it, or
    /// all of it) without passing its bytes through the caller where the
    /// service can: S3's UploadPartCopy, Azure's Put Block From URL, GCS's
    /// rewrite of a whole object, the directory store file to file (GCS ranges
    /// and large or refused Azure blocks stream through the store). Stores that
    /// cannot at all answer [`StoreError::Unsupported`], and callers stream the
    /// bytes instead (never buffering a whole part).
    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        let _ = request;
        Err(StoreError::Unsupported("server-side part copy"))
    }

    /// Assembles the object from the listed parts (sorted by part number) and
    /// makes it visible atomically.
    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError>;

    /// Discards an upload and every part of it.
    async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError>;

    /// The parts stored so far, sorted by part number.
    async fn list_parts(&self, key: &str, upload_id: &str)
        -> Result<Vec<UploadedPart>, StoreError>;

    /// Whether `upload_id` is an upload in progress at `key`: `Ok` if so,
    /// [`StoreError::NoSuchUpload`] if the id is unknown or goes with another
    /// key. Costs one short request where [`Self::list_parts`] may cost pages.
    async fn check_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.list_parts(key, upload_id).await.map(|_| ())
    }

    /// Multipart uploads under `prefix` that were neither completed nor aborted.
    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError>;

    /// Checks, before any byte is sent, that an object could be stored at `key`
    /// next to what the store holds: the directory store refuses `a/b` while
    /// `a` exists ([`StoreError::KeyConflict`]). Stores with flat keys hold any
    /// valid key and answer at once, without a request.
    async fn check_key(&self, key: &str) -> Result<(), StoreError> {
        let _ = key;
        Ok(())
    }

    /// Makes the store itself abort multipart uploads left incomplete for `days`
    /// days (an S3 lifecycle rule, merged with the bucket's other rules). Stores
    /// without such rules answer [`StoreError::Unsupported`].
    async fn install_abort_lifecycle(&self, days: u32) -> Result<(), StoreError> {
        let _ = days;
        Err(StoreError::Unsupported("lifecycle rules"))
    }
}

#[cfg(test)]
mod reserved_tests {
    #[test]
    fn reserved_keys_are_under_the_reserved_segment() {
        assert_eq!(reserved_key!(""), format!("{}/", super::RESERVED_SEGMENT));
        assert!(super::is_reserved_key(reserved_key!("tus/x/state")));
    }
}
