//! [`DirectSigner`] for a bucket: part URLs presigned by the SDK (SigV4 query
//! signing, no checksum signed: the store's client computes checksums only when
//! an operation requires one, so a browser's PUT of any bytes matches), and
//! browser form POSTs signed by hand (the SDK has no presigned POST): a policy
//! document, base64, signed with the SigV4 key of the day.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_s3::config::ProvideCredentials;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::Client;
use aws_smithy_types::date_time::{DateTime, Format};
use base64::Engine;
use serde_json::{json, Value};

use super::{errors, S3Store};
use crate::presign::{DirectSigner, PostPolicy, PresignedPost, MAX_PRESIGN_EXPIRY};
use crate::StoreError;

/// Signs for one bucket and prefix, as a browser reaches it.
#[derive(Debug, Clone)]
pub struct S3DirectSigner {
    /// The store's client, with the public endpoint.
    client: Client,
    credentials: Option<aws_sdk_s3::config::SharedCredentialsProvider>,
    bucket: String,
    prefix: String,
    region: String,
    /// Where form POSTs go: the bucket's URL.
    bucket_url: String,
}

impl S3DirectSigner {
    pub(super) fn new(store: &S3Store, public_endpoint: Option<&str>) -> S3DirectSigner {
        let endpoint = public_endpoint
            .map(|e| e.trim_end_matches('/').to_string())
            .or_else(|| {
                store
                    .endpoint
                    .as_ref()
                    .map(|e| e.trim_end_matches('/').to_string())
            });
        let mut config = store.client.config().to_builder();
        if let Some(endpoint) = &endpoint {
            config = config.endpoint_url(endpoint);
        }
        let region = store
            .client
            .config()
            .region()
            .map_or("us-east-1".to_string(), |r| r.to_string());
        S3DirectSigner {
            client: Client::from_conf(config.build()),
            credentials: store.credentials.clone(),
            bucket_url: bucket_url(
                endpoint.as_deref(),
                &store.bucket,
                &region,
                store.path_style,
            ),
            bucket: store.bucket.clone(),
            prefix: store.prefix.clone(),
            region,
        }
    }

    fn full_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }
}

/// What a key segment keeps unencoded in a URL: RFC 3986's unreserved characters.
const PATH_SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The URL of `bucket`: `ENDPOINT/BUCKET` path-style, `SCHEME://BUCKET.HOST`
/// virtual-hosted, AWS's regional name without an endpoint.
fn bucket_url(endpoint: Option<&str>, bucket: &str, region: &str, path_style: bool) -> String {
    match endpoint {
        Some(endpoint) if path_style => format!("{endpoint}/{bucket}"),
        Some(endpoint) => match endpoint.split_once("://") {
            Some((scheme, host)) => format!("{scheme}://{bucket}.{host}"),
            None => format!("https://{bucket}.{endpoint}"),
        },
        None => format!("https://{bucket}.s3.{region}.amazonaws.com"),
    }
}

fn signing_error(reason: impl std::fmt::Display) -> StoreError {
    StoreError::Service {
        status: 500,
        code: "SigningFailed".into(),
        message: reason.to_string(),
    }
}

#[async_trait]
impl DirectSigner for S3DirectSigner {
    fn bucket(&self) -> &str {
        &self.bucket
    }

    fn key_prefix(&self) -> &str {
        &self.prefix
    }

    fn object_url(&self, key: &str) -> String {
        let path: String = self
            .full_key(key)
            .split('/')
            .map(|segment| percent_encoding::utf8_percent_encode(segment, PATH_SEGMENT).to_string())
            .collect::<Vec<_>>()
            .join("/");
        format!("{}/{path}", self.bucket_url)
    }

    async fn upload_part_url(
        &self,
        key: &str,
        upload_id: &str,
        part_number: u32,
        expires: Duration,
    ) -> Result<String, StoreError> {
        let presigning =
            PresigningConfig::expires_in(expires.min(MAX_PRESIGN_EXPIRY)).map_err(signing_error)?;
        let request = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(self.full_key(key))
            .upload_id(upload_id)
            .part_number(part_number as i32)
            .presigned(presigning)
            .await
            .map_err(|e| {
                errors::map(
                    e,
                    errors::Context {
                        endpoint: &self.bucket_url,
                        bucket: &self.bucket,
                        key,
                        upload_id: Some(upload_id),
                    },
                )
            })?;
        Ok(request.uri().to_string())
    }

    async fn post(&self, policy: &PostPolicy) -> Result<PresignedPost, StoreError> {
        let provider = self
            .credentials
            .as_ref()
            .ok_or_else(|| signing_error("no credentials to sign with"))?;
        let credentials = provider
            .provide_credentials()
            .await
            .map_err(|e| StoreError::NoCredentials(e.to_string()))?;
        // Whole seconds: x-amz-date has no fraction.
        let now = SystemTime::UNIX_EPOCH
            + Duration::from_secs(DateTime::from(SystemTime::now()).secs().max(0) as u64);
        let stamp = DateTime::from(now)
            .fmt(Format::DateTime)
            .map_err(signing_error)?;
        // 2026-11-24T12:00:00Z -> 20261124T120000Z
        let amz_date: String = stamp.chars().filter(|c| *c != '-' && *c != ':').collect();
        let day = &amz_date[..8];
        let credential = format!(
            "{}/{day}/{}/s3/aws4_request",
            credentials.access_key_id(),
            self.region
        );
        let expiration = DateTime::from_secs(DateTime::from(policy.expires_at).secs())
            .fmt(Format::DateTime)
            .map_err(signing_error)?;
        let mut fields = vec![("key".to_string(), self.full_key(&policy.key))];
        if let Some(content_type) = &policy.content_type {
            fields.push(("Content-Type".into(), content_type.clone()));
        }
        for (name, value) in &policy.metadata {
            fields.push((format!("x-amz-meta-{name}"), value.clone()));
        }
        fields.push(("x-amz-algorithm".into(), "AWS4-HMAC-SHA256".into()));
        fields.push(("x-amz-credential".into(), credential));
        fields.push(("x-amz-date".into(), amz_date.clone()));
        if let Some(token) = credentials.session_token() {
            fields.push(("x-amz-security-token".into(), token.to_string()));
        }
        let mut conditions: Vec<Value> = vec![json!({ "bucket": self.bucket })];
        conditions.extend(fields.iter().map(|(name, value)| json!({ name: value })));
        conditions.push(json!(["content-length-range", 0, policy.max_size]));
        let document = json!({ "expiration": expiration, "conditions": conditions });
        let encoded = base64::engine::general_purpose::STANDARD.encode(document.to_string());
        let key = aws_sigv4::sign::v4::generate_signing_key(
            credentials.secret_access_key(),
            now,
            &self.region,
            "s3",
        );
        let signature = aws_sigv4::sign::v4::calculate_signature(key, encoded.as_bytes());
        fields.push(("policy".into(), encoded));
        fields.push(("x-amz-signature".into(), signature));
        Ok(PresignedPost {
            url: self.bucket_url.clone(),
            fields,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::bucket_url;

    #[test]
    fn bucket_urls() {
        let cases = [
            (
                Some("http://127.0.0.1:9000"),
                true,
                "http://127.0.0.1:9000/b",
            ),
            (
                Some("https://s3.example.com"),
                false,
                "https://b.s3.example.com",
            ),
            (None, false, "https://b.s3.eu-west-1.amazonaws.com"),
        ];
        for (endpoint, path_style, want) in cases {
            assert_eq!(bucket_url(endpoint, "b", "eu-west-1", path_style), want);
        }
    }
}
