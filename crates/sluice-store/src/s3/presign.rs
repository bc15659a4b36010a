//! [`DirectSigner`] for a bucket: multipart requests presigned by the SDK
//! (SigV4 query signing, no checksum signed: the store's client computes
//! checksums only when an operation requires one, so a browser's PUT of any
//! bytes matches), browser form POSTs signed by hand (the SDK has no presigned
//! POST): a policy document, base64, signed with the SigV4 key of the day, and
//! temporary credentials from the store's STS (`AssumeRole` with a session
//! policy), asked at the store's own endpoint (MinIO serves STS there).

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_s3::config::ProvideCredentials;
use aws_sdk_s3::presigning::PresigningConfig;
use aws_smithy_types::date_time::{DateTime, Format};
use base64::Engine;
use serde_json::{json, Value};

use super::S3Store;
use crate::presign::{
    BucketRequest, DirectSigner, PostPolicy, PresignedPost, TemporaryCredentials,
    MAX_PRESIGN_EXPIRY,
};
use crate::StoreError;

/// Signs for one bucket and prefix, as a browser reaches it.
#[derive(Debug, Clone)]
pub struct S3DirectSigner {
    credentials: Option<aws_sdk_s3::config::SharedCredentialsProvider>,
    bucket: String,
    prefix: String,
    region: String,
    /// Where form POSTs go: the bucket's URL.
    bucket_url: String,
    /// The STS client: the store's own endpoint and credentials.
    sts: aws_sdk_sts::Client,
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
        let region = store
            .client
            .config()
            .region()
            .map_or("us-east-1".to_string(), |r| r.to_string());
        let s3_config = store.client.config();
        let mut sts = aws_sdk_sts::config::Builder::new()
            .behavior_version(aws_sdk_sts::config::BehaviorVersion::latest())
            .region(aws_sdk_sts::config::Region::new(region.clone()));
        if let Some(endpoint) = &store.endpoint {
            sts = sts.endpoint_url(endpoint);
        }
        if let Some(credentials) = &store.credentials {
            sts = sts.credentials_provider(credentials.clone());
        }
        if let Some(sleep) = s3_config.sleep_impl() {
            sts = sts.sleep_impl(sleep);
        }
        // The SDK's default client is not built: STS needs the transport too.
        sts = sts.http_client(
            s3_config
                .http_client()
                .unwrap_or_else(super::transport::http_client),
        );
        // The S3 client's connect and read timeouts, and no retries of its
        // own: a store that does not answer fails the call, not hangs it.
        if let Some(timeouts) = s3_config.timeout_config() {
            sts = sts.timeout_config(timeouts.clone());
        }
        sts = sts.retry_config(aws_sdk_sts::config::retry::RetryConfig::disabled());
        S3DirectSigner {
            sts: aws_sdk_sts::Client::from_conf(sts.build()),
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

    /// `url` query-signed (SigV4) for `method`, `UNSIGNED-PAYLOAD`, with `host`
    /// and `signed_headers` signed (the request must send exactly those): the
    /// SDK presigns only a few of S3's operations.
    async fn presign_url(
        &self,
        method: &str,
        url: &str,
        signed_headers: &[(&str, &str)],
        expires: Duration,
    ) -> Result<String, StoreError> {
        use aws_sigv4::http_request::{
            sign, PercentEncodingMode, SignableBody, SignableRequest, SignatureLocation,
            SigningSettings, UriPathNormalizationMode,
        };
        let provider = self
            .credentials
            .as_ref()
            .ok_or_else(|| signing_error("no credentials to sign with"))?;
        let credentials = provider
            .provide_credentials()
            .await
            .map_err(|e| StoreError::NoCredentials(e.to_string()))?;
        let identity = credentials.into();
        let mut settings = SigningSettings::default();
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(expires);
        // S3 takes the path as sent: encoded once, never normalised.
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        let params = aws_sigv4::sign::v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(signing_error)?
            .into();
        let signable = SignableRequest::new(
            method,
            url,
            signed_headers.iter().copied(),
            SignableBody::UnsignedPayload,
        )
        .map_err(signing_error)?;
        let (instructions, _signature) =
            sign(signable, &params).map_err(signing_error)?.into_parts();
        let mut request = http::Request::builder()
            .method(method)
            .uri(url)
            .body(())
            .map_err(signing_error)?;
        instructions.apply_to_request_http1x(&mut request);
        Ok(request.uri().to_string())
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

    async fn presign(
        &self,
        request: &BucketRequest,
        expires: Duration,
    ) -> Result<String, StoreError> {
        let presigning =
            PresigningConfig::expires_in(expires.min(MAX_PRESIGN_EXPIRY)).map_err(signing_error)?;
        let (key, upload_id) = match request {
            BucketRequest::CreateMultipart { key, .. } => (key, None),
            BucketRequest::UploadPart { key, upload_id, .. }
            | BucketRequest::ListParts { key, upload_id }
            | BucketRequest::Complete { key, upload_id }
            | BucketRequest::Abort { key, upload_id } => (key, Some(upload_id.as_str())),
        };
        let query: Vec<(&str, String)> = match request {
            BucketRequest::CreateMultipart { .. } => vec![("uploads", String::new())],
            BucketRequest::UploadPart { part_number, .. } => vec![
                ("partNumber", part_number.to_string()),
                ("uploadId", upload_id.unwrap_or_default().to_string()),
            ],
            BucketRequest::ListParts { .. }
            | BucketRequest::Complete { .. }
            | BucketRequest::Abort { .. } => {
                vec![("uploadId", upload_id.unwrap_or_default().to_string())]
            }
        };
        let method = match request {
            BucketRequest::CreateMultipart { .. } | BucketRequest::Complete { .. } => "POST",
            BucketRequest::UploadPart { .. } => "PUT",
            BucketRequest::ListParts { .. } => "GET",
            BucketRequest::Abort { .. } => "DELETE",
        };
        let query: String = query
            .iter()
            .map(|(name, value)| match value.is_empty() {
                true => name.to_string(),
                false => format!(
                    "{name}={}",
                    percent_encoding::utf8_percent_encode(value, PATH_SEGMENT)
                ),
            })
            .collect::<Vec<_>>()
            .join("&");
        let url = format!("{}?{query}", self.object_url(key));
        let signed_headers: Vec<(&str, &str)> = match request {
            BucketRequest::CreateMultipart {
                content_type: Some(content_type),
                ..
            } => vec![("content-type", content_type.as_str())],
            _ => Vec::new(),
        };
        self.presign_url(method, &url, &signed_headers, presigning.expires())
            .await
    }

    fn bucket_endpoint(&self) -> &str {
        &self.bucket_url
    }

    fn region(&self) -> &str {
        &self.region
    }

    async fn temporary_credentials(
        &self,
        policy: &str,
        role_arn: &str,
        duration: Duration,
    ) -> Result<TemporaryCredentials, StoreError> {
        let answer = self
            .sts
            .assume_role()
            .role_arn(role_arn)
            .role_session_name("sluice-direct")
            .policy(policy)
            .duration_seconds(duration.as_secs().clamp(900, 43_200) as i32)
            .send()
            .await
            .map_err(|e| {
                let service = e.as_service_error().map(|s| {
                    (
                        s.meta().code().unwrap_or("StsError").to_string(),
                        s.meta().message().unwrap_or_default().to_string(),
                    )
                });
                match service {
                    Some((code, message)) => StoreError::Service {
                        status: e.raw_response().map_or(500, |r| r.status().as_u16()),
                        code,
                        message,
                    },
                    None => StoreError::Transport {
                        at: None,
                        cause: format!(
                            "STS AssumeRole: {}",
                            aws_smithy_types::error::display::DisplayErrorContext(&e)
                        ),
                    },
                }
            })?;
        let credentials = answer
            .credentials()
            .ok_or_else(|| signing_error("STS answered without credentials"))?;
        let expires_at = SystemTime::UNIX_EPOCH
            + Duration::from_secs(credentials.expiration().secs().max(0) as u64);
        Ok(TemporaryCredentials {
            access_key_id: credentials.access_key_id().to_string(),
            secret_access_key: credentials.secret_access_key().to_string(),
            session_token: credentials.session_token().to_string(),
            expires_at,
        })
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
