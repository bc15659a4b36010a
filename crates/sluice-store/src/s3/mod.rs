//! The S3 backend on the official aws-sdk-s3: AWS itself and every S3-compatible
//! server (MinIO, Ceph RGW, R2, ...). Credentials come from the standard AWS chain
//! (environment, profiles, web identity, instance metadata). With a custom
//! endpoint, path-style addressing is the default.
//!
//! The SDK's own retries are off: the engine retries, with one policy for all
//! requests. Payload signing is off for uploads (the CRC32C/CRC64NVME checksum each
//! write carries protects the bytes, at a fraction of SHA-256's CPU cost).

mod account;
mod errors;
mod presign;
mod settings;
mod stall;
mod trailer;
mod transport;
pub mod vitals;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_sdk_s3::config::StalledStreamProtectionConfig;
use aws_sdk_s3::config::{RequestChecksumCalculation, ResponseChecksumValidation};
use aws_sdk_s3::primitives::{ByteStream as SdkByteStream, Length};
use aws_sdk_s3::types::{
    ChecksumAlgorithm as SdkChecksumAlgorithm, ChecksumMode, ChecksumType,
    CompletedMultipartUpload, CompletedPart,
};
use aws_sdk_s3::Client;
use aws_smithy_types::retry::RetryConfig;
use aws_smithy_types::timeout::TimeoutConfig;
use futures::stream;

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::error::StoreError;
use crate::types::*;
use crate::ObjectStore;
use errors::Context;
use settings::{settings_of, with_settings};
use stall::{Progress, StallGuard, WatchAnswer};

pub use account::{BucketSummary, PresignedMethod};
pub use presign::S3DirectSigner;
pub use transport::http_client;

/// Buffer for streaming a file-backed body into a request.
const FILE_BUFFER: usize = 256 * 1024;

/// How to reach a bucket.
#[derive(Debug, Clone)]
pub struct S3Config {
    pub bucket: String,
    /// Prepended to every key (a `/` is added if missing); empty for none.
    pub prefix: String,
    /// A custom endpoint such as `http://127.0.0.1:9000`.
    pub endpoint: Option<String>,
    /// Region; when unset, the AWS chain decides, falling back to `us-east-1`.
    pub region: Option<String>,
    /// Path-style (`endpoint/bucket/key`) rather than virtual-hosted addressing.
    /// `None` means: path-style whenever an endpoint is given.
    pub path_style: Option<bool>,
    pub connect_timeout: Duration,
    /// Longest wait for the first byte of an answer.
    pub read_timeout: Duration,
    /// The longest a request may make no progress (no body bytes taken, no
    /// answer) before it is cancelled and counts as a transient failure; `None`
    /// turns the check off. The deadline itself follows the store's recent
    /// waits (see [`vitals`]), between `stall_floor` and this. Requests whose
    /// answer comes only after long work are not watched (the read timeout
    /// applies): multipart completions, copies, and parts streamed from files
    /// with a checksum trailer.
    pub stall_timeout: Option<Duration>,
    /// The shortest stall deadline, however fast the store has answered.
    pub stall_floor: Duration,
    /// The AWS profile to take credentials and region from (else AWS_PROFILE, else default).
    pub profile: Option<String>,
    /// Send requests unsigned (public buckets): no credentials are looked up.
    pub unsigned: bool,
}

impl S3Config {
    pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

    pub fn new(bucket: impl Into<String>) -> Self {
        S3Config {
            bucket: bucket.into(),
            prefix: String::new(),
            endpoint: None,
            region: None,
            path_style: None,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(120),
            stall_timeout: Some(S3Config::DEFAULT_STALL_TIMEOUT),
            stall_floor: vitals::DEFAULT_FLOOR,
            profile: None,
            unsigned: false,
        }
    }
}

/// A bucket (and optional key prefix) reached through aws-sdk-s3.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: Client,
    bucket: String,
    prefix: String,
    stall: StallGuard,
    /// What direct-upload signing needs besides the client.
    credentials: Option<aws_sdk_s3::config::SharedCredentialsProvider>,
    endpoint: Option<String>,
    /// The endpoint as errors and logs name it (AWS's regional one by default).
    shown_endpoint: String,
    path_style: bool,
}

impl S3Store {
    /// Resolves region and credentials and builds the client. Sends no request.
    pub async fn connect(config: S3Config) -> S3Store {
        // One transport for the S3 and STS clients and the credential providers.
        let http = transport::http_client();
        let mut loader =
            aws_config::defaults(aws_config::BehaviorVersion::latest()).http_client(http.clone());
        // With a custom endpoint the region is nominal: do not probe instance metadata for it.
        let region = config
            .region
            .clone()
            .or_else(|| config.endpoint.as_ref().map(|_| "us-east-1".to_string()));
        if let Some(region) = region {
            loader = loader.region(aws_config::Region::new(region));
        }
        if let Some(profile) = &config.profile {
            // A profile named on the command line wins over credentials in
            // the environment, as with aws --profile.
            loader = loader.profile_name(profile).credentials_provider(
                aws_config::profile::ProfileFileCredentialsProvider::builder()
                    .configure(
                        &aws_config::provider_config::ProviderConfig::without_region()
                            .with_http_client(http.clone()),
                    )
                    .profile_name(profile)
                    .build(),
            );
        }
        if config.unsigned {
            loader = loader.no_credentials();
        }
        let shared = loader.load().await;
        let mut builder = aws_sdk_s3::config::Builder::from(&shared)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(config.connect_timeout)
                    .read_timeout(config.read_timeout)
                    .build(),
            )
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if config.stall_timeout.is_some() {
            // The stall watchdog (stall.rs) covers uploads: it sees the body's
            // progress itself, and the SDK's own check would poll a throughput
            // tracker on every frame of every request besides.
            builder = builder.stalled_stream_protection(
                StalledStreamProtectionConfig::enabled()
                    .upload_enabled(false)
                    .build(),
            );
        }
        if shared.region().is_none() {
            builder = builder.region(aws_config::Region::new("us-east-1"));
        }
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        let path_style = config.path_style.unwrap_or(config.endpoint.is_some());
        let shown_endpoint = match &config.endpoint {
            Some(endpoint) => endpoint.clone(),
            None => format!(
                "https://s3.{}.amazonaws.com",
                shared.region().map_or("us-east-1", |r| r.as_ref())
            ),
        };
        builder = builder.force_path_style(path_style);
        let mut prefix = config.prefix.trim_start_matches('/').to_string();
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        S3Store {
            client: Client::from_conf(builder.build()),
            bucket: config.bucket,
            prefix,
            stall: StallGuard {
                vitals: config
                    .stall_timeout
                    .map(|ceiling| Arc::new(vitals::Vitals::new(config.stall_floor, ceiling))),
            },
            credentials: shared.credentials_provider(),
            shown_endpoint,
            endpoint: config.endpoint,
            path_style,
        }
    }

    /// The endpoint requests go to, as errors and logs name it (AWS's regional
    /// endpoint when none was given).
    pub fn endpoint(&self) -> &str {
        &self.shown_endpoint
    }

    /// Signs direct uploads into this bucket (and prefix) for browsers that
    /// reach it at `public_endpoint` (default: the endpoint the gateway uses).
    pub fn direct_signer(&self, public_endpoint: Option<&str>) -> S3DirectSigner {
        S3DirectSigner::new(self, public_endpoint)
    }

    /// Creates the bucket if it does not exist (for tests and first-time setups).
    pub async fn ensure_bucket(&self) -> Result<(), StoreError> {
        match self.client.head_bucket().bucket(&self.bucket).send().await {
            Ok(_) => Ok(()),
            Err(_) => match self
                .client
                .create_bucket()
                .bucket(&self.bucket)
                .send()
                .await
            {
                Ok(_) => Ok(()),
                Err(e) => {
                    let mapped = errors::map(e, self.context(""));
                    match &mapped {
                        StoreError::Service { code, .. }
                            if code == "BucketAlreadyOwnedByYou"
                                || code == "BucketAlreadyExists" =>
                        {
                            Ok(())
                        }
                        _ => Err(mapped),
                    }
                }
            },
        }
    }

    /// A listed object, its key without the store's prefix.
    fn summary(&self, o: &aws_sdk_s3::types::Object) -> Option<ObjectSummary> {
        let key = o.key()?.strip_prefix(self.prefix.as_str())?.to_string();
        Some(ObjectSummary {
            key,
            size: o.size().unwrap_or(0).max(0) as u64,
            etag: o.e_tag().unwrap_or_default().to_string(),
            last_modified: to_system_time(o.last_modified()),
        })
    }

    /// `x-amz-copy-source` for a key of this store or of another bucket.
    fn copy_source(&self, bucket: Option<&str>, key: &str) -> String {
        match bucket {
            Some(bucket) => format!("{bucket}/{}", encode_copy_source(key)),
            None => format!(
                "{}/{}",
                self.bucket,
                encode_copy_source(&self.full_key(key))
            ),
        }
    }

    fn full_key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn upload_context<'a>(&'a self, key: &'a str, upload_id: &'a str) -> Context<'a> {
        Context {
            endpoint: &self.shown_endpoint,
            bucket: &self.bucket,
            key,
            upload_id: Some(upload_id),
        }
    }

    fn context<'a>(&'a self, key: &'a str) -> Context<'a> {
        Context {
            endpoint: &self.shown_endpoint,
            bucket: &self.bucket,
            key,
            upload_id: None,
        }
    }
}

/// The SDK body for `body`, reporting progress to `progress` as it is sent.
async fn sdk_body(body: Body, progress: &Arc<Progress>) -> Result<SdkByteStream, StoreError> {
    match body {
        Body::Bytes(bytes) => Ok(SdkByteStream::new(stall::tracked_body(
            Arc::from([bytes]),
            progress.clone(),
        ))),
        Body::Chunks(chunks) => Ok(SdkByteStream::new(stall::tracked_body(
            chunks,
            progress.clone(),
        ))),
        Body::File { path, offset, len } => SdkByteStream::read_from()
            .path(path)
            .offset(offset)
            .length(Length::Exact(len))
            .buffer_size(FILE_BUFFER)
            .build()
            .await
            .map_err(|e| StoreError::Body(std::io::Error::other(e))),
    }
}

fn sdk_algorithm(algorithm: ChecksumAlgorithm) -> SdkChecksumAlgorithm {
    match algorithm {
        ChecksumAlgorithm::Crc32c => SdkChecksumAlgorithm::Crc32C,
        ChecksumAlgorithm::Crc64nvme => SdkChecksumAlgorithm::Crc64Nvme,
    }
}

/// The checksum of an object as S3 reports it: only full-object checksums count.
fn reported_checksum(crc32c: Option<&str>, crc64nvme: Option<&str>) -> Option<Checksum> {
    crc64nvme
        .and_then(|v| Checksum::from_base64(ChecksumAlgorithm::Crc64nvme, v))
        .or_else(|| crc32c.and_then(|v| Checksum::from_base64(ChecksumAlgorithm::Crc32c, v)))
}

fn to_system_time(t: Option<&aws_sdk_s3::primitives::DateTime>) -> SystemTime {
    t.and_then(|t| SystemTime::try_from(*t).ok())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

fn metadata_of(map: Option<&HashMap<String, String>>) -> Metadata {
    map.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// Total size from a `Content-Range: bytes a-b/total` header.
fn total_from_content_range(header: Option<&str>) -> Option<u64> {
    header?.rsplit_once('/')?.1.parse().ok()
}

#[async_trait]
impl ObjectStore for S3Store {
    fn describe(&self) -> String {
        format!("s3://{}/{}", self.bucket, self.prefix)
    }

    async fn put_object(&self, request: PutRequest) -> Result<PutOutput, StoreError> {
        let key = self.full_key(&request.key);
        let progress = self.stall.progress();
        let mut call = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .content_length(request.body.len() as i64)
            .body(sdk_body(request.body, &progress).await?)
            .set_content_type(request.content_type)
            .set_metadata(
                (!request.metadata.is_empty()).then(|| request.metadata.into_iter().collect()),
            );
        call = with_settings!(call, request.settings);
        call = match request.checksum {
            Some(c) if c.algorithm == ChecksumAlgorithm::Crc32c => {
                call.checksum_crc32_c(c.to_base64())
            }
            Some(c) => call.checksum_crc64_nvme(c.to_base64()),
            None => call,
        };
        call = match request.condition {
            Some(WriteCondition::IfNoneMatch) => call.if_none_match("*"),
            Some(WriteCondition::IfMatch(etag)) => call.if_match(etag),
            None => call,
        };
        let send = call.customize().disable_payload_signing().send();
        let output = self
            .stall
            .watch(Some(progress), send)
            .await
            .map_err(|e| e.into_store_error(|e| errors::map(e, self.context(&request.key))))?;
        Ok(PutOutput {
            etag: output.e_tag.unwrap_or_default(),
            checksum: request.checksum,
        })
    }

    async fn get_object(
        &self,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<GetOutput, StoreError> {
        // An end past any object's size is sent as "to the end": some servers
        // (MinIO) ignore a Range whose last position is huge and send everything.
        let header = range.map(
            |r| match r.end.filter(|&e| e <= crate::limits::MAX_OBJECT_SIZE) {
                None if r.end.is_some() => format!("bytes={}-", r.start),
                Some(end) if end > r.start => format!("bytes={}-{}", r.start, end - 1),
                Some(_) => format!("bytes={}-{}", r.start, r.start),
                None => format!("bytes={}-", r.start),
            },
        );
        if matches!(range, Some(ByteRange { start, end: Some(end) }) if end < start) {
            return Err(StoreError::InvalidRange);
        }
        let output = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(self.full_key(key))
            .set_range(header)
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .watched(&self.stall)
            .await
            .map_err(|e| e.into_store_error(|e| errors::map(e, self.context(key))))?;
        let length = output.content_length.unwrap_or(0).max(0) as u64;
        let size = total_from_content_range(output.content_range.as_deref()).unwrap_or(length);
        let start = range.map_or(0, |r| r.start);
        let mut end = start + length;
        // An empty range request is answered with one byte; keep the caller's range.
        let mut limit = None;
        if let Some(ByteRange { end: Some(e), .. }) = range {
            if e <= start {
                end = start;
                limit = Some(0u64);
            }
        }
        let meta = ObjectMeta {
            key: key.to_string(),
            size,
            etag: output.e_tag.clone().unwrap_or_default(),
            last_modified: to_system_time(output.last_modified.as_ref()),
            content_type: output.content_type.clone(),
            metadata: metadata_of(output.metadata.as_ref()),
            settings: settings_of!(output),
            // A checksum describes the whole object, not a range of it.
            checksum: if range.is_none() {
                reported_checksum(
                    output.checksum_crc32_c.as_deref(),
                    output.checksum_crc64_nvme.as_deref(),
                )
            } else {
                None
            },
        };
        let body = output.body;
        let key_owned = key.to_string();
        let stall = self.stall.clone();
        let endpoint = self.shown_endpoint.clone();
        let stream = stream::unfold(Some(body), move |body| {
            let key = key_owned.clone();
            let stall = stall.clone();
            let endpoint = endpoint.clone();
            async move {
                let mut body = body?;
                if limit == Some(0) {
                    return None;
                }
                let next = match stall.deadline() {
                    Some(deadline) => match tokio::time::timeout(deadline, body.try_next()).await {
                        Ok(next) => next,
                        Err(_) => return Some((Err(stall.stalled(deadline)), None)),
                    },
                    None => body.try_next().await,
                };
                if matches!(next, Ok(Some(_))) {
                    stall.alive();
                }
                match next {
                    Ok(Some(bytes)) => Some((Ok(bytes), Some(body))),
                    Ok(None) => None,
                    Err(e) => Some((
                        Err(StoreError::Transport {
                            at: Some(endpoint.clone()),
                            cause: format!("reading {key}: {}", crate::error_chain(&e)),
                        }),
                        None,
                    )),
                }
            }
        });
        Ok(GetOutput {
            meta,
            range: (start, end),
            body: Box::pin(stream),
        })
    }

    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        let output = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(self.full_key(key))
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .watched(&self.stall)
            .await
            .map_err(|e| e.into_store_error(|e| errors::map(e, self.context(key))))?;
        Ok(ObjectMeta {
            key: key.to_string(),
            size: output.content_length.unwrap_or(0).max(0) as u64,
            etag: output.e_tag.clone().unwrap_or_default(),
            last_modified: to_system_time(output.last_modified.as_ref()),
            content_type: output.content_type.clone(),
            metadata: metadata_of(output.metadata.as_ref()),
            settings: settings_of!(output),
            checksum: reported_checksum(
                output.checksum_crc32_c.as_deref(),
                output.checksum_crc64_nvme.as_deref(),
            ),
        })
    }

    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(self.full_key(key))
            .send()
            .watched(&self.stall)
            .await
            .map_err(|e| e.into_store_error(|e| errors::map(e, self.context(key))))?;
        Ok(())
    }

    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let output = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(self.full_key(prefix))
            .set_start_after(cursor.map(|after| self.full_key(after)))
            .max_keys(limit.clamp(1, 1000) as i32)
            .send()
            .watched(&self.stall)
            .await
            .map_err(|e| e.into_store_error(|e| errors::map(e, self.context(prefix))))?;
        let objects: Vec<ObjectSummary> = output
            .contents()
            .iter()
            .filter_map(|o| self.summary(o))
            .collect();
        // The cursor is the last key (StartAfter), the same on every backend.
        let next_cursor = if output.is_truncated() == Some(true) {
            objects.last().map(|o| o.key.clone())
        } else {
            None
        };
        Ok(ListPage {
            objects,
            next_cursor,
        })
    }

    async fn list_directory(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DirectoryPage, StoreError> {
        let output = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(self.full_key(prefix))
            .delimiter("/")
            .set_start_after(cursor.map(|after| self.full_key(after)))
            .max_keys(limit.clamp(1, 1000) as i32)
            .send()
            .watched(&self.stall)
            .await
            .map_err(|e| e.into_store_error(|e| errors::map(e, self.context(prefix))))?;
        let mut entries: Vec<DirectoryEntry> = output
            .contents()
            .iter()
            .filter_map(|o| self.summary(o))
            .map(DirectoryEntry::Object)
            .collect();
        entries.extend(output.common_prefixes().iter().filter_map(|p| {
            let sub = p.prefix()?.strip_prefix(self.prefix.as_str())?;
            // A cursor inside it: the prefix was listed on an earlier page.
            let listed = cursor.is_some_and(|c| c.starts_with(sub));
            (!listed).then(|| DirectoryEntry::Prefix(sub.to_string()))
        }));
        entries.sort_by(|a, b| a.name().cmp(b.name()));
        // StartAfter a prefix would list it again: continue after every key under it.
        let next_cursor = if output.is_truncated() == Some(true) {
            let last = output
                .contents()
                .iter()
                .filter_map(|o| o.key()?.strip_prefix(self.prefix.as_str()))
                .chain(
                    output
                        .common_prefixes()
                        .iter()
                        .filter_map(|p| p.prefix()?.strip_prefix(self.prefix.as_str())),
                )
                .max();
            last.map(
                |last| match last.ends_with('/') && last.len() > prefix.len() {
                    true => crate::cursor_past(last, cursor),
                    false => last.to_string(),
                },
            )
        } else {
            None
        };
        Ok(DirectoryPage {
            entries,
            next_cursor,
        })
    }

    async fn delete_objects(&self, keys: &[String]) -> Result<Vec<DeleteFailure>, StoreError> {
        use aws_sdk_s3::types::{Delete, ObjectIdentifier};
        let mut failures = Vec::new();
        for batch in keys.chunks(1000) {
            let first = batch.first().map(String::as_str).unwrap_or_default();
            let unbuildable = |_| StoreError::InvalidKey {
                key: first.to_string(),
                reason: "cannot be put in a DeleteObjects request",
            };
            let objects = batch
                .iter()
                .map(|key| ObjectIdentifier::builder().key(self.full_key(key)).build())
                .collect::<Result<Vec<_>, _>>()
                .map_err(unbuildable)?;
            let delete = Delete::builder()
                .set_objects(Some(objects))
                .quiet(true)
                .build()
                .map_err(unbuildable)?;
            let output = self
                .client
                .delete_objects()
                .bucket(&self.bucket)
                .delete(delete)
                .send()
                .watched(&self.stall)
                .await
                .map_err(|e| e.into_store_error(|e| errors::map(e, self.context(first))))?;
            failures.extend(output.errors().iter().map(|e| {
                DeleteFailure {
                    key: e
                        .key()
                        .map(|k| {
                            k.strip_prefix(self.prefix.as_str())
                                .unwrap_or(k)
                                .to_string()
                        })
                        .unwrap_or_default(),
                    reason: format!(
                        "{}: {}",
                        e.code().unwrap_or("Error"),
                        e.message().unwrap_or("no message")
                    ),
                }
            }));
        }
        Ok(failures)
    }

    async fn copy_object(&self, request: CopyObjectRequest) -> Result<PutOutput, StoreError> {
        let source = self.copy_source(request.source_bucket.as_deref(), &request.source_key);
        let (encryption, kms_key) = settings::encryption_fields(request.placement.encryption);
        let output = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(self.full_key(&request.key))
            .copy_source(source)
            .set_storage_class(
                request
                    .placement
                    .storage_class
                    .map(|c| aws_sdk_s3::types::StorageClass::from(c.as_str())),
            )
            .set_acl(
                request
                    .placement
                    .acl
                    .map(|a| aws_sdk_s3::types::ObjectCannedAcl::from(a.as_str())),
            )
            .set_server_side_encryption(encryption)
            .set_ssekms_key_id(kms_key)
            .send()
            // Not watched for stalls, like a part copy: the store answers once
            // it copied (up to 5 GiB), which takes longer than any deadline
            // drawn from ordinary waits; the read timeout applies.
            .await
            .map_err(|e| errors::map(e, self.context(&request.source_key)))?;
        let result = output.copy_object_result;
        Ok(PutOutput {
            etag: result
                .as_ref()
                .and_then(|r| r.e_tag.clone())
                .unwrap_or_default(),
            checksum: result
                .as_ref()
                .and_then(|r| reported_checksum(r.checksum_crc32_c(), r.checksum_crc64_nvme())),
        })
    }

    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        let mut call = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(self.full_key(&request.key))
            .set_content_type(request.content_type)
            .set_metadata(
                (!request.metadata.is_empty()).then(|| request.metadata.into_iter().collect()),
            );
        call = with_settings!(call, request.settings);
        if let Some(algorithm) = request.checksum_algorithm {
            call = call
                .checksum_algorithm(sdk_algorithm(algorithm))
                .checksum_type(ChecksumType::FullObject);
        }
        let output = call
            .send()
            .watched(&self.stall)
            .await
            .map_err(|e| e.into_store_error(|e| errors::map(e, self.context(&request.key))))?;
        output.upload_id.ok_or_else(|| StoreError::Service {
            status: 200,
            code: "MissingUploadId".into(),
            message: "CreateMultipartUpload answered without an upload id".into(),
        })
    }

    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError> {
        if let (PartChecksum::Streamed(algorithm), Body::File { path, offset, len }) =
            (request.checksum, &request.body)
        {
            return self
                .upload_file_part_with_trailer(&request, path.clone(), *offset, *len, algorithm)
                .await;
        }
        let size = request.body.len();
        let progress = self.stall.progress();
        let mut call = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(self.full_key(&request.key))
            .upload_id(&request.upload_id)
            .part_number(request.part_number as i32)
            .content_length(size as i64)
            .body(sdk_body(request.body, &progress).await?);
        call = match request.checksum {
            PartChecksum::Known(c) if c.algorithm == ChecksumAlgorithm::Crc32c => {
                call.checksum_crc32_c(c.to_base64())
            }
            PartChecksum::Known(c) => call.checksum_crc64_nvme(c.to_base64()),
            // The SDK computes it while the body streams and sends it as a trailer.
            PartChecksum::Streamed(algorithm) => call.checksum_algorithm(sdk_algorithm(algorithm)),
            PartChecksum::None => call,
        };
        let mut call = call.customize().disable_payload_signing();
        if let PartChecksum::Streamed(_) = request.checksum {
            // The client computes checksums only when asked to, not merely because
            // an algorithm is named; ask for this request.
            call = call.config_override(
                aws_sdk_s3::config::Builder::default()
                    .request_checksum_calculation(RequestChecksumCalculation::WhenSupported),
            );
        }
        let output = self
            .stall
            .watch(Some(progress), call.send())
            .await
            .map_err(|e| {
                e.into_store_error(|e| {
                    errors::map(e, self.upload_context(&request.key, &request.upload_id))
                })
            })?;
        Ok(UploadedPart {
            part_number: request.part_number,
            etag: output.e_tag.clone().unwrap_or_default(),
            size,
            checksum: request.checksum.known().or_else(|| {
                reported_checksum(output.checksum_crc32_c(), output.checksum_crc64_nvme())
            }),
        })
    }

    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        let source = self.copy_source(request.source_bucket.as_deref(), &request.source_key);
        let (size, range) = match request.source_range {
            Some(ByteRange {
                start,
                end: Some(end),
            }) if end > start => (end - start, Some(format!("bytes={start}-{}", end - 1))),
            Some(range) => {
                return Err(StoreError::InvalidPart(format!(
                    "copy range {range:?} is empty or open-ended"
                )))
            }
            None if request.source_bucket.is_none() => {
                (self.head_object(&request.source_key).await?.size, None)
            }
            None => {
                return Err(StoreError::InvalidPart(
                    "a copy from another bucket needs its range".into(),
                ))
            }
        };
        let output = self
            .client
            .upload_part_copy()
            .bucket(&self.bucket)
            .key(self.full_key(&request.key))
            .upload_id(&request.upload_id)
            .part_number(request.part_number as i32)
            .copy_source(source)
            .set_copy_source_range(range)
            .set_copy_source_if_match(request.source_if_match.clone())
            .send()
            .await
            .map_err(|e| errors::map(e, self.upload_context(&request.key, &request.upload_id)))?;
        let result = output.copy_part_result;
        Ok(UploadedPart {
            part_number: request.part_number,
            etag: result
                .as_ref()
                .and_then(|r| r.e_tag.clone())
                .unwrap_or_default(),
            size,
            checksum: result
                .as_ref()
                .and_then(|r| reported_checksum(r.checksum_crc32_c(), r.checksum_crc64_nvme())),
        })
    }

    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        let parts = request
            .parts
            .iter()
            .map(|p| {
                let part = CompletedPart::builder()
                    .part_number(p.part_number as i32)
                    .e_tag(&p.etag);
                match p.checksum {
                    Some(c) if c.algorithm == ChecksumAlgorithm::Crc32c => {
                        part.checksum_crc32_c(c.to_base64())
                    }
                    Some(c) => part.checksum_crc64_nvme(c.to_base64()),
                    None => part,
                }
                .build()
            })
            .collect();
        let mut call = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(self.full_key(&request.key))
            .upload_id(&request.upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            );
        if let Some(c) = request.checksum {
            call = match c.algorithm {
                ChecksumAlgorithm::Crc32c => call.checksum_crc32_c(c.to_base64()),
                ChecksumAlgorithm::Crc64nvme => call.checksum_crc64_nvme(c.to_base64()),
            }
            .checksum_type(ChecksumType::FullObject);
        }
        call = match &request.condition {
            None => call,
            Some(WriteCondition::IfNoneMatch) => call.if_none_match("*"),
            Some(WriteCondition::IfMatch(etag)) => call.if_match(etag),
        };
        // Not watched for stalls (the client's read timeout still applies): a
        // completion may take long, and MinIO, its connection closed midway, can
        // keep an upload that never completes (see sluice-upload's `ending`).
        let output = call
            .send()
            .await
            .map_err(|e| errors::map(e, self.upload_context(&request.key, &request.upload_id)))?;
        let reported = reported_checksum(output.checksum_crc32_c(), output.checksum_crc64_nvme());
        Ok(PutOutput {
            etag: output.e_tag.clone().unwrap_or_default(),
            checksum: reported.or(request.checksum),
        })
    }

    async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(self.full_key(key))
            .upload_id(upload_id)
            .send()
            .watched(&self.stall)
            .await
            .map_err(|e| {
                e.into_store_error(|e| errors::map(e, self.upload_context(key, upload_id)))
            })?;
        Ok(())
    }

    async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        let mut parts = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let output = self
                .client
                .list_parts()
                .bucket(&self.bucket)
                .key(self.full_key(key))
                .upload_id(upload_id)
                .set_part_number_marker(marker.clone())
                .send()
                .watched(&self.stall)
                .await
                .map_err(|e| {
                    e.into_store_error(|e| errors::map(e, self.upload_context(key, upload_id)))
                })?;
            for p in output.parts() {
                parts.push(UploadedPart {
                    part_number: p.part_number().unwrap_or(0).max(0) as u32,
                    etag: p.e_tag().unwrap_or_default().to_string(),
                    size: p.size().unwrap_or(0).max(0) as u64,
                    checksum: reported_checksum(p.checksum_crc32_c(), p.checksum_crc64_nvme()),
                });
            }
            match (output.is_truncated(), output.next_part_number_marker()) {
                (Some(true), Some(next)) if Some(next) != marker.as_deref() => {
                    marker = Some(next.to_string())
                }
                _ => break,
            }
        }
        parts.sort_by_key(|p| p.part_number);
        Ok(parts)
    }

    async fn check_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.client
            .list_parts()
            .bucket(&self.bucket)
            .key(self.full_key(key))
            .upload_id(upload_id)
            .max_parts(1)
            .send()
            .watched(&self.stall)
            .await
            .map_err(|e| {
                e.into_store_error(|e| errors::map(e, self.upload_context(key, upload_id)))
            })?;
        Ok(())
    }

    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        let full_prefix = self.full_key(prefix);
        let uploads = self.list_uploads_raw(&full_prefix, prefix).await?;
        if !uploads.is_empty() || full_prefix.is_empty() {
            return Ok(uploads);
        }
        // MinIO matches the prefix of ListMultipartUploads only against whole keys;
        // an empty answer may be that quirk, so list the bucket and filter here.
        let mut all = self.list_uploads_raw("", prefix).await?;
        all.retain(|u| u.key.starts_with(prefix));
        Ok(all)
    }

    async fn install_abort_lifecycle(&self, days: u32) -> Result<(), StoreError> {
        use aws_sdk_s3::types::{
            AbortIncompleteMultipartUpload, BucketLifecycleConfiguration, ExpirationStatus,
            LifecycleRule, LifecycleRuleFilter,
        };
        let existing = match self
            .client
            .get_bucket_lifecycle_configuration()
            .bucket(&self.bucket)
            .send()
            .watched(&self.stall)
            .await
        {
            Ok(output) => output.rules.unwrap_or_default(),
            Err(stall::Watched::Failed(e))
                if e.as_service_error()
                    .and_then(aws_sdk_s3::error::ProvideErrorMetadata::code)
                    == Some("NoSuchLifecycleConfiguration") =>
            {
                Vec::new()
            }
            Err(e) => return Err(e.into_store_error(|e| errors::map(e, self.context("")))),
        };
        let rule_id = format!("{LIFECYCLE_RULE_ID}{}", self.prefix);
        let mut rules: Vec<LifecycleRule> = existing
            .into_iter()
            .filter(|r| r.id() != Some(rule_id.as_str()))
            .collect();
        let rule = LifecycleRule::builder()
            .id(&rule_id)
            .status(ExpirationStatus::Enabled)
            .filter(LifecycleRuleFilter::builder().prefix(&self.prefix).build())
            .abort_incomplete_multipart_upload(
                AbortIncompleteMultipartUpload::builder()
                    .days_after_initiation(days as i32)
                    .build(),
            )
            .build()
            .map_err(|e| StoreError::Service {
                status: 0,
                code: "InvalidLifecycleRule".into(),
                message: e.to_string(),
            })?;
        rules.push(rule);
        let configuration = BucketLifecycleConfiguration::builder()
            .set_rules(Some(rules))
            .build()
            .map_err(|e| StoreError::Service {
                status: 0,
                code: "InvalidLifecycleRule".into(),
                message: e.to_string(),
            })?;
        self.client
            .put_bucket_lifecycle_configuration()
            .bucket(&self.bucket)
            .lifecycle_configuration(configuration)
            .send()
            .watched(&self.stall)
            .await
            .map_err(
                |e| match e.into_store_error(|e| errors::map(e, self.context(""))) {
                    // MinIO refuses the rule as malformed: it purges stale uploads
                    // by itself (after 24 h by default) instead.
                    StoreError::Service {
                        status: 400 | 501,
                        code,
                        ..
                    } if matches!(
                        code.as_str(),
                        "InvalidArgument" | "MalformedXML" | "NotImplemented"
                    ) =>
                    {
                        StoreError::Unsupported("AbortIncompleteMultipartUpload lifecycle rules")
                    }
                    other => other,
                },
            )?;
        Ok(())
    }
}

/// The id of the lifecycle rule sluice installs (followed by the store's prefix),
/// so that installing again replaces it rather than adding another.
pub const LIFECYCLE_RULE_ID: &str = "sluice-abort-incomplete-uploads:";

impl S3Store {
    /// Uploads a part from a file, checksummed as it streams (see [`trailer`]).
    async fn upload_file_part_with_trailer(
        &self,
        request: &UploadPartRequest,
        path: std::path::PathBuf,
        offset: u64,
        len: u64,
        algorithm: ChecksumAlgorithm,
    ) -> Result<UploadedPart, StoreError> {
        let slot = trailer::ChecksumSlot::default();
        let body = trailer::body(path, offset, len, algorithm, slot.clone());
        let output = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(self.full_key(&request.key))
            .upload_id(&request.upload_id)
            .part_number(request.part_number as i32)
            .content_length(trailer::encoded_len(len, algorithm) as i64)
            .body(SdkByteStream::new(body))
            .customize()
            .interceptor(trailer::UnsignedTrailer {
                decoded_len: len,
                algorithm,
            })
            .send()
            .await
            .map_err(|e| errors::map(e, self.upload_context(&request.key, &request.upload_id)))?;
        let computed = *slot.lock().unwrap_or_else(|p| p.into_inner());
        let reported = reported_checksum(output.checksum_crc32_c(), output.checksum_crc64_nvme());
        if let (Some(c), Some(r)) = (computed, reported) {
            if c != r {
                return Err(StoreError::ChecksumMismatch {
                    algorithm: algorithm.name(),
                });
            }
        }
        Ok(UploadedPart {
            part_number: request.part_number,
            etag: output.e_tag.clone().unwrap_or_default(),
            size: len,
            checksum: reported.or(computed),
        })
    }

    /// Pages through ListMultipartUploads for `request_prefix`, keeping uploads under
    /// the store's prefix (`key_prefix` is the caller's prefix, for error context).
    async fn list_uploads_raw(
        &self,
        request_prefix: &str,
        key_prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        const MAX_PAGES: usize = 1000;
        let mut uploads = Vec::new();
        let (mut key_marker, mut id_marker): (Option<String>, Option<String>) = (None, None);
        for _ in 0..MAX_PAGES {
            let output = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .set_prefix((!request_prefix.is_empty()).then(|| request_prefix.to_string()))
                .set_key_marker(key_marker.clone())
                .set_upload_id_marker(id_marker.clone())
                .send()
                .watched(&self.stall)
                .await
                .map_err(|e| e.into_store_error(|e| errors::map(e, self.context(key_prefix))))?;
            for u in output.uploads() {
                let Some(key) = u.key().and_then(|k| k.strip_prefix(self.prefix.as_str())) else {
                    continue;
                };
                uploads.push(MultipartUploadInfo {
                    key: key.to_string(),
                    upload_id: u.upload_id().unwrap_or_default().to_string(),
                    initiated: u.initiated().and_then(|t| SystemTime::try_from(*t).ok()),
                });
            }
            let next = (output.next_key_marker(), output.next_upload_id_marker());
            match (output.is_truncated(), next) {
                (Some(true), (Some(k), id))
                    if (Some(k), id) != (key_marker.as_deref(), id_marker.as_deref()) =>
                {
                    key_marker = Some(k.to_string());
                    id_marker = id.map(str::to_string);
                }
                _ => break,
            }
        }
        Ok(uploads)
    }
}

/// A key as the `x-amz-copy-source` header wants it: percent-encoded, `/` kept.
fn encode_copy_source(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                out.push(byte as char)
            }
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_total() {
        assert_eq!(
            total_from_content_range(Some("bytes 0-99/1000")),
            Some(1000)
        );
        assert_eq!(total_from_content_range(Some("bytes */1000")), Some(1000));
        assert_eq!(total_from_content_range(Some("bytes 0-99/*")), None);
        assert_eq!(total_from_content_range(None), None);
    }
}
