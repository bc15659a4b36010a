//! What the command line asks of a bucket beyond its objects: making and
//! removing the bucket itself, listing the account's buckets, and presigned
//! URLs for one object (SigV4 query signing by the SDK, as `aws s3 presign`
//! makes them). None of it is part of [`crate::ObjectStore`]: a gateway never
//! makes buckets.

use std::time::{Duration, SystemTime};

use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};

use super::{errors, to_system_time, S3Store};
use crate::error::StoreError;

/// One bucket of the account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BucketSummary {
    pub name: String,
    pub created: SystemTime,
}

pub use crate::presign::PresignedMethod;

impl S3Store {
    /// Makes the bucket, in the client's region (a location constraint outside
    /// us-east-1, as S3 wants). A bucket that already exists is an error
    /// (`BucketAlreadyOwnedByYou` or `BucketAlreadyExists`).
    pub async fn create_bucket(&self) -> Result<(), StoreError> {
        let region = self
            .client
            .config()
            .region()
            .map(|r| r.to_string())
            .filter(|r| r != "us-east-1" && self.endpoint.is_none());
        let configuration = region.map(|region| {
            CreateBucketConfiguration::builder()
                .location_constraint(BucketLocationConstraint::from(region.as_str()))
                .build()
        });
        self.client
            .create_bucket()
            .bucket(&self.bucket)
            .set_create_bucket_configuration(configuration)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| errors::map(e, self.context("")))
    }

    /// Removes the bucket, which must hold no object (`BucketNotEmpty`).
    pub async fn delete_bucket(&self) -> Result<(), StoreError> {
        self.client
            .delete_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| errors::map(e, self.context("")))
    }

    /// The buckets of the account the credentials belong to, by name.
    pub async fn list_buckets(&self) -> Result<Vec<BucketSummary>, StoreError> {
        let mut buckets = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .list_buckets()
                .set_continuation_token(token.take())
                .send()
                .await
                .map_err(|e| errors::map(e, self.context("")))?;
            buckets.extend(page.buckets().iter().filter_map(|bucket| {
                Some(BucketSummary {
                    name: bucket.name()?.to_string(),
                    created: to_system_time(bucket.creation_date()),
                })
            }));
            match page.continuation_token() {
                Some(next) if !next.is_empty() => token = Some(next.to_string()),
                _ => break,
            }
        }
        buckets.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(buckets)
    }

    /// A URL that allows `method` on `key` without credentials until
    /// `expires` from now (at most 7 days, SigV4's limit: longer is refused).
    pub async fn presign(
        &self,
        method: PresignedMethod,
        key: &str,
        expires: Duration,
    ) -> Result<String, StoreError> {
        crate::presign::check_expiry(expires)?;
        let config = PresigningConfig::expires_in(expires).map_err(|e| StoreError::Service {
            status: 400,
            code: "InvalidExpiry".into(),
            message: e.to_string(),
        })?;
        let full_key = self.full_key(key);
        let request = match method {
            PresignedMethod::Get => self
                .client
                .get_object()
                .bucket(&self.bucket)
                .key(&full_key)
                .presigned(config)
                .await
                .map_err(|e| errors::map(e, self.context(key)))?,
            PresignedMethod::Put => self
                .client
                .put_object()
                .bucket(&self.bucket)
                .key(&full_key)
                .presigned(config)
                .await
                .map_err(|e| errors::map(e, self.context(key)))?,
            PresignedMethod::Delete => self
                .client
                .delete_object()
                .bucket(&self.bucket)
                .key(&full_key)
                .presigned(config)
                .await
                .map_err(|e| errors::map(e, self.context(key)))?,
        };
        Ok(request.uri().to_string())
    }
}
