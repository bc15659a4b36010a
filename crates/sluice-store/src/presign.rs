//! Direct-to-bucket uploads: the requests a browser may send to the bucket
//! itself, signed by the gateway (the way Uppy's Companion signs for
//! `@uppy/aws-s3`). A [`DirectSigner`] presigns one part of a multipart upload
//! (a PUT URL) and a whole small upload (a browser form POST with a policy that
//! pins its key, type, metadata and size range). Only a bucket store has one:
//! [`crate::s3::S3Store::direct_signer`].

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::StoreError;

/// Longest lifetime S3 accepts for a presigned request (SigV4): 7 days.
pub const MAX_PRESIGN_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// A browser form POST straight to the bucket: the URL and the form fields to
/// send before the file (`key`, `policy`, the signature fields ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PresignedPost {
    pub url: String,
    pub fields: Vec<(String, String)>,
}

/// What a presigned POST may store: exactly this key, content type and
/// metadata, a body of at most `max_size` bytes, sent before `expires_at`.
#[derive(Debug, Clone)]
pub struct PostPolicy {
    pub key: String,
    pub content_type: Option<String>,
    /// `x-amz-meta-*` fields, without the prefix.
    pub metadata: Vec<(String, String)>,
    pub max_size: u64,
    pub expires_at: SystemTime,
}

/// Signs requests a client sends to the bucket without the gateway.
#[async_trait]
pub trait DirectSigner: Send + Sync + std::fmt::Debug + 'static {
    /// The bucket's name, as clients see it in answers.
    fn bucket(&self) -> &str;

    /// What the bucket's keys start with before the gateway's keys (the store's
    /// prefix): a form POST's `key` field, which Uppy reports, carries it.
    fn key_prefix(&self) -> &str;

    /// Where the object at `key` can be found (for answers; not signed).
    fn object_url(&self, key: &str) -> String;

    /// A URL to PUT part `part_number` of the multipart upload `upload_id` of
    /// `key` to, good for `expires`. It signs no checksum and no body hash
    /// (`UNSIGNED-PAYLOAD`), so any bytes may be sent with it.
    async fn upload_part_url(
        &self,
        key: &str,
        upload_id: &str,
        part_number: u32,
        expires: Duration,
    ) -> Result<String, StoreError>;

    /// A form POST to the bucket that stores what `policy` allows, nothing else.
    async fn post(&self, policy: &PostPolicy) -> Result<PresignedPost, StoreError>;
}
