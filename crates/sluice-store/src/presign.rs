//! Direct-to-bucket uploads: the requests a browser may send to the bucket
//! itself, signed by the gateway (the way Uppy's Companion signs for
//! `@uppy/aws-s3`). A [`DirectSigner`] presigns one part of a multipart upload
//! (a PUT URL) and a whole small upload (a browser form POST with a policy that
//! pins its key, type, metadata and size range), the other requests of a
//! multipart upload a browser may send itself ([`BucketRequest`]), and hands
//! out temporary credentials confined by a session policy. Only a bucket store
//! has one: [`crate::s3::S3Store::direct_signer`].

use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::StoreError;

/// Longest lifetime S3 accepts for a presigned request (SigV4): 7 days.
pub const MAX_PRESIGN_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// Refuses a presigned URL's lifetime outside 1 second to
/// [`MAX_PRESIGN_EXPIRY`] (SigV4's limit on S3, kept on Azure alike).
pub fn check_expiry(expires: Duration) -> Result<(), StoreError> {
    if expires > MAX_PRESIGN_EXPIRY || expires.is_zero() {
        return Err(StoreError::Service {
            status: 400,
            code: "InvalidExpiry".into(),
            message: "a presigned URL lasts from 1 second to 7 days".into(),
        });
    }
    Ok(())
}

/// The request a presigned URL allows (`sluice presign`: a SigV4 URL on S3, a
/// service SAS on Azure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PresignedMethod {
    Get,
    Put,
    Delete,
}

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

/// One request to the bucket a client may send itself with a presigned URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketRequest {
    /// `POST /KEY?uploads`: starts a multipart upload; with a content type,
    /// its `Content-Type` header is signed, so the request must send exactly
    /// that type.
    CreateMultipart {
        key: String,
        content_type: Option<String>,
    },
    /// `PUT /KEY?partNumber=N&uploadId=ID`: one part, any bytes.
    UploadPart {
        key: String,
        upload_id: String,
        part_number: u32,
    },
    /// `GET /KEY?uploadId=ID`: the parts stored so far.
    ListParts { key: String, upload_id: String },
    /// `POST /KEY?uploadId=ID`: joins the parts the body names.
    Complete { key: String, upload_id: String },
    /// `DELETE /KEY?uploadId=ID`: aborts the upload.
    Abort { key: String, upload_id: String },
}

/// Short-lived credentials for the bucket (an STS session), confined by the
/// session policy they were asked for with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemporaryCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
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

    /// A form POST to the bucket that stores what `policy` allows, nothing else.
    async fn post(&self, policy: &PostPolicy) -> Result<PresignedPost, StoreError>;

    /// A URL for `request`, good for `expires`, signing no checksum and no body
    /// hash (a browser sends it with any body).
    async fn presign(
        &self,
        request: &BucketRequest,
        expires: Duration,
    ) -> Result<String, StoreError>;

    /// The bucket's endpoint as a client signing its own requests names it
    /// (`ENDPOINT/BUCKET` path-style, the bucket's host otherwise).
    fn bucket_endpoint(&self) -> &str;

    /// The region requests are signed for.
    fn region(&self) -> &str;

    /// Temporary credentials (STS `AssumeRole` of `role_arn`) for
    /// `duration`, allowed only what `policy` (an IAM policy document, whose
    /// resources name keys with the store's prefix) allows. MinIO ignores the
    /// role (it takes the caller's own keys); AWS needs one. A store without
    /// STS answers an error.
    async fn temporary_credentials(
        &self,
        policy: &str,
        role_arn: &str,
        duration: Duration,
    ) -> Result<TemporaryCredentials, StoreError>;
}
