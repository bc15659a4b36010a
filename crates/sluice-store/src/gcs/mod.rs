//! The Google Cloud Storage backend, on the JSON API over `reqwest` (OAuth
//! 2.0 bearer tokens, or none for an emulator): objects in one bucket, under
//! an optional prefix.
//!
//! How S3's model maps onto it:
//! - a put is a multipart upload of the JSON API (the object's resource and
//!   its bytes in one request) with `ifGenerationMatch` for the condition
//!   (`0`: must not exist; an ETag is a generation, [`resource`]); the CRC-32C
//!   is declared and GCS refuses bytes that do not match it; the object's
//!   checksum in sluice's terms (CRC-64/NVME unless asked otherwise) is kept
//!   in an own metadata entry;
//! - a multipart upload is a record `_sluice/gcs/uploads/KEY/ID` (content
//!   type, metadata and settings given at the start, written create-only) and
//!   one object per part, `_sluice/gcs/parts/KEY/ID/NNNNN`, each with its
//!   declared CRC-32C; a part's ETag is its generation, so completion composes
//!   exactly the parts the caller stored;
//! - completion composes the parts, 32 at a time in a tree when there are
//!   more, into the key with the condition as `ifGenerationMatch`, checks the
//!   composed CRC-32C against the parts', then deletes the record (the upload
//!   is complete) and the parts. The object names its upload in an own entry,
//!   so a completion sent again finds no record and recognises its object;
//! - a storage class asked for at the start rides in the upload id, so parts
//!   are written in it (compose takes sources of one class);
//! - abort deletes the record and the parts; the janitor's listing is the
//!   records, and part folders left without one;
//! - a copy is a rewrite, server-side, of any size; so is a part copied from
//!   a whole object (tus concatenation). A part copied from a range of an
//!   object streams through this process: GCS has no ranged copy.

mod auth;
mod client;
mod copy;
mod errors;
mod resource;
mod signed_url;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use reqwest::Method;

pub use auth::{
    AuthorizedUser, GcsCredential, GcsCredentialError, ServiceAccountKey, SCOPE, TOKEN_URI,
};
pub use client::DEFAULT_ENDPOINT;

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::error::StoreError;
use crate::rest::body::{self, Outgoing, PartCrcs};
use crate::rest::model::{self, check_part_number, Page, UploadRecord};
use crate::types::*;
use crate::ObjectStore;
use client::{header_text, Api, Call, Client};
use copy::CopySource;
use errors::Context;
use resource::{Listing, Resource, PART_CRC64_ENTRY, UPLOAD_ENTRY};

/// Where the records of uploads in progress are kept, under the store's prefix.
const RECORDS: &str = crate::reserved_key!("gcs/uploads/");
/// Where the parts of uploads in progress are kept.
const PARTS: &str = crate::reserved_key!("gcs/parts/");
/// The most sources one compose takes.
const COMPOSE_MAX: usize = 32;
/// The most bytes one rewrite call copies (a multiple of 1 MiB, as GCS asks).
const REWRITE_STEP: u64 = 128 * 1024 * 1024;
/// What a listing asks of each object (and the next page's token).
const LISTED_FIELDS: &str = "items(name,size,generation,updated,crc32c,metadata),nextPageToken";
/// Part objects deleted at once after a completion or an abort.
const DELETES_AT_ONCE: usize = 8;

/// How to reach a bucket.
#[derive(Debug, Clone)]
pub struct GcsConfig {
    pub bucket: String,
    /// The JSON API's origin: [`DEFAULT_ENDPOINT`], or an emulator's.
    pub endpoint: String,
    pub credential: GcsCredential,
    /// Prepended to every key (a `/` is added if missing); empty for none.
    pub prefix: String,
    pub connect_timeout: Duration,
    /// The longest a request may wait for an answer or the next body byte;
    /// `None` waits as long as the connection lives.
    pub stall_timeout: Option<Duration>,
}

impl GcsConfig {
    pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

    pub fn new(bucket: impl Into<String>, credential: GcsCredential) -> GcsConfig {
        GcsConfig {
            bucket: bucket.into(),
            endpoint: DEFAULT_ENDPOINT.to_string(),
            credential,
            prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
            stall_timeout: Some(GcsConfig::DEFAULT_STALL_TIMEOUT),
        }
    }
}

/// A bucket of Google Cloud Storage as an [`ObjectStore`].
#[derive(Debug)]
pub struct GcsStore {
    client: Client,
    prefix: String,
    /// What signs presigned URLs (a service account's key), if anything can.
    credential: GcsCredential,
}

/// What a write sends besides its bytes.
struct Upload<'a> {
    name: &'a str,
    key: &'a str,
    resource: serde_json::Map<String, serde_json::Value>,
    generation: Option<u64>,
}

impl GcsStore {
    pub fn open(config: GcsConfig) -> Result<GcsStore, StoreError> {
        let mut prefix = config.prefix;
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        let client = Client::new(
            &config.endpoint,
            config.bucket,
            config.credential.clone(),
            config.connect_timeout,
            config.stall_timeout,
        )?;
        Ok(GcsStore {
            client,
            prefix,
            credential: config.credential,
        })
    }

    /// A V4 signed URL that allows `method` on `key` without credentials for
    /// `expires` from now (at most 7 days), signed with the service account's
    /// key; other credentials cannot sign and are refused.
    pub fn presign(
        &self,
        method: crate::presign::PresignedMethod,
        key: &str,
        expires: Duration,
    ) -> Result<String, StoreError> {
        self.presign_at(method, key, expires, SystemTime::now())
    }

    /// [`GcsStore::presign`] as if it were `now`: the same inputs give the
    /// same URL (the tests compare it with Google's own library's).
    pub fn presign_at(
        &self,
        method: crate::presign::PresignedMethod,
        key: &str,
        expires: Duration,
        now: SystemTime,
    ) -> Result<String, StoreError> {
        crate::presign::check_expiry(expires)?;
        let signer = match &self.credential {
            GcsCredential::ServiceAccount(signer) => signer,
            GcsCredential::AuthorizedUser(_) => {
                return Err(StoreError::Unsupported(
                    "V4 signed URLs from a user's credentials (they are signed with a service account's key)",
                ))
            }
            GcsCredential::Anonymous => {
                return Err(StoreError::Unsupported(
                    "V4 signed URLs without a service account's key",
                ))
            }
        };
        signed_url::v4_signed_url(
            signer,
            self.client.endpoint(),
            self.client.bucket(),
            &self.full(key),
            method,
            expires,
            now,
        )
    }

    /// The JSON API's origin requests go to, for messages.
    pub fn endpoint(&self) -> &str {
        self.client.endpoint()
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn context<'a>(&'a self, key: &'a str) -> Context<'a> {
        Context {
            key,
            bucket: self.client.bucket(),
        }
    }

    fn record_name(&self, key: &str, upload_id: &str) -> String {
        self.full(&format!("{RECORDS}{key}/{upload_id}"))
    }

    /// The folder of an upload's parts, relative to the store.
    fn parts_of(key: &str, upload_id: &str) -> String {
        format!("{PARTS}{key}/{upload_id}/")
    }

    /// The full name of an upload's part.
    fn part_name(&self, key: &str, upload_id: &str, part_number: u32) -> String {
        self.full(&format!(
            "{}{part_number:05}",
            Self::parts_of(key, upload_id)
        ))
    }

    /// One object written with its resource (the JSON API's multipart
    /// upload): the resource and the bytes in one `multipart/related` body.
    async fn upload(
        &self,
        upload: Upload<'_>,
        sent: Outgoing,
        len: u64,
    ) -> Result<Resource, StoreError> {
        let Upload {
            name,
            key,
            mut resource,
            generation,
        } = upload;
        resource.insert("name".into(), name.into());
        // The bytes' part names the content type too (fake-gcs-server takes
        // it from there, GCS from the resource).
        let media_type = resource
            .get("contentType")
            .and_then(|t| t.as_str())
            .unwrap_or("application/octet-stream")
            .to_string();
        let boundary = format!("sluice-{}", uuid::Uuid::new_v4().simple());
        let head = format!(
            "--{boundary}\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n{}\r\n--{boundary}\r\ncontent-type: {media_type}\r\n\r\n",
            serde_json::Value::Object(resource)
        );
        let tail = format!("\r\n--{boundary}--\r\n");
        let total = head.len() as u64 + len + tail.len() as u64;
        let framed = futures::stream::once(async move { Ok(Bytes::from(head)) })
            .chain(sent)
            .chain(futures::stream::once(async move { Ok(Bytes::from(tail)) }))
            .boxed();
        let call = Call::new(Method::POST, Api::Upload, None, self.context(key))
            .query("uploadType", "multipart")
            .if_generation(generation)
            .header(
                "content-type",
                format!("multipart/related; boundary={boundary}"),
            )
            .body(framed, total);
        let answer = self.client.send(call).await?;
        self.client.json(answer).await
    }

    /// An object's resource, or `None` when it does not exist.
    async fn resource(&self, key: &str) -> Result<Option<Resource>, StoreError> {
        self.source_resource(&CopySource { bucket: None, key })
            .await
    }

    /// The resource of an object in this bucket or another, or `None`.
    async fn source_resource(
        &self,
        source: &CopySource<'_>,
    ) -> Result<Option<Resource>, StoreError> {
        let name = self.source_name(source);
        let call = source.in_bucket(Call::new(
            Method::GET,
            Api::Objects,
            Some(&name),
            self.source_context(source),
        ));
        match self.client.send(call).await {
            Ok(answer) => self.client.json(answer).await.map(Some),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The record of an upload, or `NoSuchUpload`.
    async fn record(&self, key: &str, upload_id: &str) -> Result<UploadRecord, StoreError> {
        let name = self.record_name(key, upload_id);
        let no_such = || StoreError::NoSuchUpload {
            upload_id: upload_id.to_string(),
        };
        let call = Call::new(Method::GET, Api::Download, Some(&name), self.context(key));
        let answer =
            self.client
                .send(call)
                .await
                .map_err(|e| if e.is_not_found() { no_such() } else { e })?;
        let text = self.client.text(answer).await?;
        UploadRecord::read(&text, &name, key, upload_id)
    }

    /// Whether the record of an upload exists (one metadata request).
    async fn check_record(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        let name = self.record_name(key, upload_id);
        let call = Call::new(Method::GET, Api::Objects, Some(&name), self.context(key))
            .query("fields", "generation");
        match self.client.send(call).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Err(StoreError::NoSuchUpload {
                upload_id: upload_id.to_string(),
            }),
            Err(e) => Err(e),
        }
    }

    /// Every object under `prefix` (relative to the store), with its resource.
    async fn resources_under(&self, prefix: &str) -> Result<Vec<Resource>, StoreError> {
        let mut all = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let listing = self.listing(prefix, None, 1000, token.as_deref()).await?;
            all.extend(listing.items);
            match listing.next_page_token {
                Some(next) if !next.is_empty() => token = Some(next),
                _ => return Ok(all),
            }
        }
    }

    /// One page of objects under `prefix`.
    async fn listing(
        &self,
        prefix: &str,
        start: Option<&str>,
        limit: usize,
        page_token: Option<&str>,
    ) -> Result<Listing, StoreError> {
        let full_prefix = self.full(prefix);
        let mut call = Call::new(Method::GET, Api::Objects, None, self.context(prefix))
            .query("maxResults", limit.to_string())
            .query("fields", LISTED_FIELDS);
        if !full_prefix.is_empty() {
            call = call.query("prefix", full_prefix);
        }
        if let Some(start) = start {
            call = call.query("startOffset", self.full(start));
        }
        if let Some(token) = page_token {
            call = call.query("pageToken", token);
        }
        let answer = self.client.send(call).await?;
        self.client.json(answer).await
    }

    /// The parts stored for an upload, by part number (composed pieces of an
    /// unfinished completion are not parts).
    async fn stored_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<BTreeMap<u32, Resource>, StoreError> {
        let folder = self.full(&Self::parts_of(key, upload_id));
        let mut parts = BTreeMap::new();
        for resource in self
            .resources_under(&Self::parts_of(key, upload_id))
            .await?
        {
            let number = resource
                .name
                .strip_prefix(&folder)
                .filter(|n| n.len() == 5)
                .and_then(|n| n.parse::<u32>().ok());
            if let Some(number) = number {
                parts.insert(number, resource);
            }
        }
        Ok(parts)
    }

    /// Deletes objects by full name, some at once; a name already gone is fine.
    async fn delete_names(&self, names: Vec<String>) -> Result<(), StoreError> {
        let results: Vec<Result<(), StoreError>> = futures::stream::iter(names)
            .map(|name| async move {
                let call = Call::new(Method::DELETE, Api::Objects, Some(&name), self.context(""));
                match self.client.send(call).await {
                    Ok(_) => Ok(()),
                    Err(e) if e.is_not_found() => Ok(()),
                    Err(e) => Err(e),
                }
            })
            .buffer_unordered(DELETES_AT_ONCE)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Composes `sources` (full names with their generations) into `name`.
    async fn compose(
        &self,
        key: &str,
        name: &str,
        sources: &[(String, u64)],
        destination: serde_json::Map<String, serde_json::Value>,
        generation: Option<u64>,
    ) -> Result<Resource, StoreError> {
        let sources: Vec<serde_json::Value> = sources
            .iter()
            .map(|(name, generation)| {
                serde_json::json!({"name": name, "generation": generation.to_string()})
            })
            .collect();
        let request = serde_json::json!({
            "sourceObjects": sources,
            "destination": serde_json::Value::Object(destination),
        });
        let call = Call::new(Method::POST, Api::Objects, Some(name), self.context(key))
            .suffix("/compose")
            .if_generation(generation)
            .json(&request);
        let answer = self.client.send(call).await?;
        self.client.json(answer).await
    }

    /// `PreconditionFailed` when `condition` does not hold for the key now.
    async fn check_condition(
        &self,
        key: &str,
        condition: &Option<WriteCondition>,
    ) -> Result<(), StoreError> {
        let current = self.resource(key).await?.map(|r| r.etag());
        model::condition_holds(condition, current.as_deref())
    }

    /// Stores one part's object, while the upload's record is checked beside it.
    async fn upload_part_object(
        &self,
        key: &str,
        upload_id: &str,
        part_number: u32,
        fields: serde_json::Map<String, serde_json::Value>,
        (sent, len): (Outgoing, u64),
    ) -> Result<Resource, StoreError> {
        let mut fields = fields;
        if let Some(class) = class_of(upload_id) {
            fields.insert("storageClass".into(), class.into());
        }
        let name = self.part_name(key, upload_id, part_number);
        let (record, stored) = tokio::join!(
            self.check_record(key, upload_id),
            self.upload(
                Upload {
                    name: &name,
                    key,
                    resource: fields,
                    generation: None,
                },
                sent,
                len,
            )
        );
        record?;
        stored
    }
}

/// An object's size and the length of the answer's body, from a download's
/// headers.
fn sizes_of(answer: &reqwest::Response) -> (u64, u64) {
    let length: u64 = header_text(answer, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let size = header_text(answer, "content-range")
        .and_then(|r| r.rsplit('/').next().and_then(|t| t.parse().ok()))
        .or_else(|| {
            header_text(answer, "x-goog-stored-content-length").and_then(|v| v.parse().ok())
        })
        .unwrap_or(length);
    (size, length)
}

/// An object's description from a download's headers.
fn meta_of_download(key: &str, answer: &reqwest::Response, whole: bool) -> ObjectMeta {
    let header = |name: &str| header_text(answer, name);
    let (size, _) = sizes_of(answer);
    let entries: Vec<(String, String)> = answer
        .headers()
        .iter()
        .filter_map(|(name, value)| {
            let name = name.as_str().strip_prefix("x-goog-meta-")?;
            Some((
                name.to_string(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            ))
        })
        .collect();
    let (metadata, own) =
        resource::split_metadata(entries.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let crc32c = header("x-goog-hash").and_then(|hashes| {
        hashes
            .split(',')
            .find_map(|h| h.trim().strip_prefix("crc32c="))
            .and_then(resource::crc32c_in)
    });
    ObjectMeta {
        key: key.to_string(),
        size,
        etag: resource::etag_of(
            header("x-goog-generation")
                .and_then(|g| g.parse().ok())
                .unwrap_or(0),
        ),
        last_modified: header("last-modified")
            .and_then(|d| httpdate::parse_http_date(&d).ok())
            .unwrap_or(SystemTime::UNIX_EPOCH),
        content_type: header("content-type"),
        metadata,
        settings: ObjectSettings {
            cache_control: header("cache-control"),
            content_encoding: header("content-encoding"),
            content_disposition: header("content-disposition"),
            storage_class: header("x-goog-storage-class"),
            acl: None,
            encryption: None,
        },
        checksum: resource::object_checksum(&own, crc32c).filter(|_| whole),
    }
}

/// The generation a write's condition asks for (`Some(0)`: must not exist).
fn generation_for(condition: &Option<WriteCondition>) -> Result<Option<u64>, StoreError> {
    match condition {
        None => Ok(None),
        Some(WriteCondition::IfNoneMatch) => Ok(Some(0)),
        // An ETag sluice did not make names no generation: it matches nothing.
        Some(WriteCondition::IfMatch(etag)) => resource::generation_of(etag)
            .map(Some)
            .ok_or(StoreError::PreconditionFailed),
    }
}

/// The resource fields that carry a content type, settings and metadata.
fn resource_fields(
    content_type: Option<&str>,
    metadata: &Metadata,
    settings: &ObjectSettings,
    own: &[(&str, String)],
) -> Result<serde_json::Map<String, serde_json::Value>, StoreError> {
    if settings.acl.is_some() {
        return Err(StoreError::Unsupported(
            "canned ACLs on Google Cloud Storage (sluice writes with the bucket's access settings)",
        ));
    }
    if settings.encryption.is_some() {
        return Err(StoreError::Unsupported(
            "S3 server-side encryption settings on Google Cloud Storage (GCS encrypts every object)",
        ));
    }
    let mut fields = serde_json::Map::new();
    let mut set = |name: &str, value: Option<&str>| {
        if let Some(value) = value {
            fields.insert(name.to_string(), value.into());
        }
    };
    set("contentType", content_type);
    set("cacheControl", settings.cache_control.as_deref());
    set("contentEncoding", settings.content_encoding.as_deref());
    set(
        "contentDisposition",
        settings.content_disposition.as_deref(),
    );
    if let Some(class) = &settings.storage_class {
        let class = STORAGE_CLASSES
            .into_iter()
            .find(|c| c.eq_ignore_ascii_case(class))
            .ok_or(StoreError::Unsupported(
                "this storage class on Google Cloud Storage (its classes are STANDARD, NEARLINE, COLDLINE and ARCHIVE)",
            ))?;
        fields.insert("storageClass".into(), class.into());
    }
    let metadata = resource::metadata_out(metadata, own);
    if !metadata.is_empty() {
        fields.insert("metadata".into(), serde_json::Value::Object(metadata));
    }
    Ok(fields)
}

/// GCS's storage classes, as a resource names them.
const STORAGE_CLASSES: [&str; 4] = ["STANDARD", "NEARLINE", "COLDLINE", "ARCHIVE"];

/// A new upload id: a UUID's 32 hex digits, then `-CLASS` when the upload
/// asks for a storage class. Compose takes sources of one class and gives
/// the object theirs, so parts are written in the object's class, and the
/// id is where a part finds it without reading the record.
fn new_upload_id(storage_class: Option<&str>) -> String {
    let id = uuid::Uuid::new_v4().simple().to_string();
    match storage_class {
        Some(class) => format!("{id}-{}", class.to_ascii_lowercase()),
        None => id,
    }
}

/// The storage class an upload id names (`None`: the bucket's default).
fn class_of(upload_id: &str) -> Option<&'static str> {
    let suffix = upload_id.get(32..)?.strip_prefix('-')?;
    STORAGE_CLASSES
        .into_iter()
        .find(|c| c.eq_ignore_ascii_case(suffix))
}

/// The upload id's form ([`new_upload_id`]); any other names no upload.
fn check_upload_id(upload_id: &str) -> Result<(), StoreError> {
    let uuid = upload_id
        .get(..32)
        .is_some_and(|u| uuid::Uuid::try_parse(u).is_ok());
    let rest = upload_id.get(32..).unwrap_or("");
    match uuid && (rest.is_empty() || class_of(upload_id).is_some()) {
        true => Ok(()),
        false => Err(StoreError::NoSuchUpload {
            upload_id: upload_id.to_string(),
        }),
    }
}

/// A part's two CRCs as its resource holds them (the CRC-64 in an own
/// entry, absent for a copied part).
fn part_crcs(part: &Resource) -> Option<PartCrcs> {
    Some(PartCrcs {
        crc64nvme: part.own(PART_CRC64_ENTRY)?.parse().ok()?,
        crc32c: part.crc32c()?,
    })
}

/// A part's checksum of `algorithm`.
fn part_checksum(part: &Resource, algorithm: ChecksumAlgorithm) -> Option<Checksum> {
    match algorithm {
        ChecksumAlgorithm::Crc32c => part.crc32c().map(|value| Checksum {
            algorithm,
            value: u64::from(value),
        }),
        ChecksumAlgorithm::Crc64nvme => PartCrcs::of(algorithm, part_crcs(part)),
    }
}

#[async_trait]
impl ObjectStore for GcsStore {
    fn describe(&self) -> String {
        format!("gs://{}/{}", self.client.bucket(), self.prefix)
    }

    fn copy_object_limit(&self) -> u64 {
        u64::MAX
    }

    async fn put_object(&self, request: PutRequest) -> Result<PutOutput, StoreError> {
        let (crcs, checksum) = body::put_checksums(&request).await?;
        let generation = generation_for(&request.condition)?;
        let mut fields = resource_fields(
            request.content_type.as_deref(),
            &request.metadata,
            &request.settings,
            &checksum
                .map(|c| (resource::checksum_entry(c.algorithm), c.to_base64()))
                .into_iter()
                .collect::<Vec<_>>(),
        )?;
        fields.insert("crc32c".into(), resource::crc32c_text(crcs.crc32c).into());
        let name = self.full(&request.key);
        let (sent, len) = body::outgoing(&request.body);
        let stored = self
            .upload(
                Upload {
                    name: &name,
                    key: &request.key,
                    resource: fields,
                    generation,
                },
                sent,
                len,
            )
            .await?;
        Ok(PutOutput {
            etag: stored.etag(),
            checksum,
        })
    }

    async fn get_object(
        &self,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<GetOutput, StoreError> {
        let read = model::Read::new(range)?;
        let name = self.full(key);
        // The stored bytes, never a transcoded form.
        let mut call = Call::new(Method::GET, Api::Download, Some(&name), self.context(key))
            .header("accept-encoding", "gzip");
        if let Some(header) = &read.header {
            call = call.header("range", header.clone());
        }
        let answer = match self.client.send(call).await {
            Ok(answer) => answer,
            Err(e) => return read.refused(e, self, key).await,
        };
        let meta = meta_of_download(key, &answer, range.is_none());
        let (_, length) = sizes_of(&answer);
        read.answered(meta, length, || self.client.body_stream(answer))
    }

    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        match self.resource(key).await? {
            Some(resource) => Ok(resource.meta(key)),
            None => Err(StoreError::NoSuchKey {
                key: key.to_string(),
            }),
        }
    }

    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        self.delete_names(vec![self.full(key)]).await
    }

    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let limit = limit.clamp(1, 1000);
        let mut page = Page::new(cursor, limit);
        let mut token: Option<String> = None;
        loop {
            // `startOffset` is inclusive: one more than asked, for the cursor.
            let listing = self
                .listing(prefix, cursor, (limit + 1).min(1000), token.as_deref())
                .await?;
            for item in &listing.items {
                if let Some(key) = item.name.strip_prefix(&self.prefix) {
                    page.take(item.summary(key.to_string()));
                }
            }
            token = listing.next_page_token.filter(|t| !t.is_empty());
            if let Some(done) = page.finish(token.is_some()) {
                return Ok(done);
            }
        }
    }

    async fn copy_object(&self, request: CopyObjectRequest) -> Result<PutOutput, StoreError> {
        // The metadata read and the bytes rewritten are of one generation; a
        // source replaced in between is read again.
        model::copy_of_one_version(|| self.copy_generation(&request)).await
    }

    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        // Refused at the start rather than at completion.
        let fields = resource_fields(
            request.content_type.as_deref(),
            &request.metadata,
            &request.settings,
            &[],
        )?;
        let class = fields
            .get("storageClass")
            .and_then(|c| c.as_str())
            .map(str::to_string);
        let upload_id = new_upload_id(class.as_deref());
        let text = UploadRecord::of(&request);
        let crcs = body::crcs_of(&Body::from(text.clone())).await?;
        let name = self.record_name(&request.key, &upload_id);
        let mut fields = serde_json::Map::new();
        fields.insert("contentType".into(), "application/json".into());
        fields.insert("crc32c".into(), resource::crc32c_text(crcs.crc32c).into());
        let len = text.len() as u64;
        self.upload(
            Upload {
                name: &name,
                key: &request.key,
                resource: fields,
                generation: Some(0),
            },
            body::in_memory(text),
            len,
        )
        .await?;
        Ok(upload_id)
    }

    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError> {
        check_upload_id(&request.upload_id)?;
        check_part_number(request.part_number)?;
        let crcs = body::crcs_of(&request.body).await?;
        body::check_declared(crcs, request.checksum.known())?;
        let mut fields = serde_json::Map::new();
        fields.insert("crc32c".into(), resource::crc32c_text(crcs.crc32c).into());
        fields.insert(
            "metadata".into(),
            serde_json::Value::Object(resource::metadata_out(
                &Metadata::new(),
                &[(PART_CRC64_ENTRY, crcs.crc64nvme.to_string())],
            )),
        );
        let sent = body::outgoing(&request.body);
        let stored = self
            .upload_part_object(
                &request.key,
                &request.upload_id,
                request.part_number,
                fields,
                sent,
            )
            .await?;
        Ok(UploadedPart {
            part_number: request.part_number,
            etag: stored.etag(),
            size: stored.size(),
            checksum: request
                .checksum
                .algorithm()
                .and_then(|a| PartCrcs::of(a, Some(crcs))),
        })
    }

    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        check_upload_id(&request.upload_id)?;
        check_part_number(request.part_number)?;
        let stored = self.copy_part(&request).await?;
        Ok(UploadedPart {
            part_number: request.part_number,
            etag: stored.etag(),
            size: stored.size(),
            checksum: None,
        })
    }

    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        check_upload_id(&request.upload_id)?;
        let record = match self.record(&request.key, &request.upload_id).await {
            Ok(record) => record,
            // Completed before (the record goes right after the compose):
            // the object names this upload, unless it was replaced since.
            Err(StoreError::NoSuchUpload { upload_id }) => {
                return match self.made_by(&request.key, &upload_id).await? {
                    Some(done) => Ok(done),
                    None => Err(StoreError::NoSuchUpload { upload_id }),
                }
            }
            Err(e) => return Err(e),
        };
        let generation = generation_for(&request.condition)?;
        let stored = self.stored_parts(&request.key, &request.upload_id).await?;
        let algorithm = record
            .checksum_algorithm
            .unwrap_or(ChecksumAlgorithm::Crc64nvme);
        let mut sources = Vec::new();
        let mut pieces = Vec::new();
        let mut crc32c_pieces = Vec::new();
        let mut last_number = 0;
        for (i, part) in request.parts.iter().enumerate() {
            let found = stored
                .get(&part.part_number)
                .filter(|s| Some(s.generation()) == resource::generation_of(&part.etag));
            let Some(found) = found else {
                // A completion sent again after it was carried out (its
                // parts are deleted), or a part another send replaced.
                if let Some(done) = self.made_by(&request.key, &request.upload_id).await? {
                    return Ok(done);
                }
                self.check_condition(&request.key, &request.condition)
                    .await?;
                return Err(StoreError::InvalidPart(format!(
                    "part {} is not a stored part of this upload",
                    part.part_number
                )));
            };
            model::check_part_in_order(
                part,
                i,
                request.parts.len(),
                found.size(),
                &mut last_number,
            )?;
            pieces.push((part_checksum(found, algorithm), found.size()));
            crc32c_pieces.push((
                part_checksum(found, ChecksumAlgorithm::Crc32c),
                found.size(),
            ));
            sources.push((found.name.clone(), found.generation()));
        }
        if sources.is_empty() {
            return Err(StoreError::InvalidPart("no parts".into()));
        }
        let checksum = Checksum::combine_in_order(pieces);
        if let (Some(want), Some(got)) = (request.checksum, checksum) {
            if want.algorithm == got.algorithm && want != got {
                return Err(StoreError::ChecksumMismatch {
                    algorithm: want.algorithm.name(),
                });
            }
        }
        // GCS enforces the condition on the compose below; checked first as
        // well, since fake-gcs-server ignores compose's preconditions (a
        // loser that comes after the winner is refused there too; racing
        // ones are kept apart only by a service that enforces them).
        if request.condition.is_some() {
            if let Err(refused) = self.check_condition(&request.key, &request.condition).await {
                // Unless this upload made the object and is sent again.
                return match self.made_by(&request.key, &request.upload_id).await? {
                    Some(done) => Ok(done),
                    None => Err(refused),
                };
            }
        }
        let mut own = vec![(UPLOAD_ENTRY, request.upload_id.clone())];
        if let Some(checksum) = checksum {
            own.push((
                resource::checksum_entry(checksum.algorithm),
                checksum.to_base64(),
            ));
        }
        let destination = resource_fields(
            record.content_type.as_deref(),
            &record.metadata,
            &record.settings,
            &own,
        )?;
        // More than 32 parts: composed 32 at a time into pieces beside them.
        let folder = self.full(&Self::parts_of(&request.key, &request.upload_id));
        let mut level = 0;
        while sources.len() > COMPOSE_MAX {
            let mut next = Vec::new();
            for (i, group) in sources.chunks(COMPOSE_MAX).enumerate() {
                let name = format!("{folder}c{level}-{i:05}");
                let mut piece_fields = serde_json::Map::new();
                if let Some(class) = class_of(&request.upload_id) {
                    piece_fields.insert("storageClass".into(), class.into());
                }
                let piece = self
                    .compose(&request.key, &name, group, piece_fields, None)
                    .await?;
                next.push((name, piece.generation()));
            }
            sources = next;
            level += 1;
        }
        let name = self.full(&request.key);
        let made = match self
            .compose(&request.key, &name, &sources, destination, generation)
            .await
        {
            Ok(made) => made,
            // Sent again after it was carried out: the object names this upload.
            Err(StoreError::PreconditionFailed) | Err(StoreError::NoSuchKey { .. }) => {
                if let Some(done) = self.made_by(&request.key, &request.upload_id).await? {
                    return Ok(done);
                }
                self.check_condition(&request.key, &request.condition)
                    .await?;
                return Err(StoreError::InvalidPart(
                    "a part of this upload was deleted before its completion".into(),
                ));
            }
            Err(e) => return Err(e),
        };
        let want_crc32c = Checksum::combine_in_order(crc32c_pieces).map(|c| c.value as u32);
        if want_crc32c.is_some() && made.crc32c() != want_crc32c {
            tracing::error!(
                key = %request.key,
                upload_id = %request.upload_id,
                "the composed object's CRC-32C is not its parts'; removing it"
            );
            // Taken back (this generation only: never a later writer's), so
            // that no one reads it and a retry does not take it as done.
            self.delete_generation(&request.key, &name, made.generation())
                .await?;
            return Err(StoreError::ChecksumMismatch {
                algorithm: "crc32c",
            });
        }
        // The record first: from here the upload is complete, and a retry
        // finds no record and recognises its object (or, replaced since,
        // says the upload is gone rather than composing it again). Then the
        // parts; ones a crash leaves are the janitor's (a parts folder
        // without a record).
        self.finish(&request.key, &request.upload_id).await?;
        Ok(PutOutput {
            etag: made.etag(),
            checksum,
        })
    }

    async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        check_upload_id(upload_id)?;
        let record = self.check_record(key, upload_id).await;
        let parts = self.part_objects(key, upload_id).await?;
        if record.is_err() && parts.is_empty() {
            return record;
        }
        self.delete_names(vec![self.record_name(key, upload_id)])
            .await?;
        self.delete_names(parts).await
    }

    async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        check_upload_id(upload_id)?;
        let record = self.record(key, upload_id).await?;
        Ok(self
            .stored_parts(key, upload_id)
            .await?
            .into_iter()
            .map(|(number, part)| UploadedPart {
                part_number: number,
                etag: part.etag(),
                size: part.size(),
                checksum: record
                    .checksum_algorithm
                    .and_then(|a| part_checksum(&part, a)),
            })
            .collect())
    }

    async fn check_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        check_upload_id(upload_id)?;
        self.check_record(key, upload_id).await
    }

    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        let records_at = self.full(RECORDS);
        let mut uploads: BTreeMap<(String, String), Option<SystemTime>> = BTreeMap::new();
        for record in self.resources_under(&format!("{RECORDS}{prefix}")).await? {
            let Some((key, id)) = record
                .name
                .strip_prefix(&records_at)
                .and_then(|rest| rest.rsplit_once('/'))
            else {
                continue;
            };
            uploads.insert((key.to_string(), id.to_string()), Some(record.updated()));
        }
        // Parts whose record is gone (an abort that raced a part's upload).
        let parts_at = self.full(PARTS);
        for part in self.resources_under(&format!("{PARTS}{prefix}")).await? {
            let Some((key, id)) = part
                .name
                .strip_prefix(&parts_at)
                .and_then(|rest| rest.rsplit_once('/'))
                .and_then(|(folder, _)| folder.rsplit_once('/'))
            else {
                continue;
            };
            uploads
                .entry((key.to_string(), id.to_string()))
                .or_insert(Some(part.updated()));
        }
        Ok(uploads
            .into_iter()
            .map(|((key, upload_id), initiated)| MultipartUploadInfo {
                key,
                upload_id,
                initiated,
            })
            .collect())
    }
}

impl GcsStore {
    /// Ends an upload: its record, then its parts (and composed pieces).
    async fn finish(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.delete_names(vec![self.record_name(key, upload_id)])
            .await?;
        let parts = self.part_objects(key, upload_id).await?;
        self.delete_names(parts).await
    }

    /// The full names of an upload's part objects and composed pieces: the
    /// objects directly in its folder (another key's folder may lie below).
    async fn part_objects(&self, key: &str, upload_id: &str) -> Result<Vec<String>, StoreError> {
        let folder = self.full(&Self::parts_of(key, upload_id));
        Ok(self
            .resources_under(&Self::parts_of(key, upload_id))
            .await?
            .into_iter()
            .map(|r| r.name)
            .filter(|name| {
                name.strip_prefix(&folder)
                    .is_some_and(|leaf| !leaf.contains('/'))
            })
            .collect())
    }

    /// Deletes one generation of an object (a later one is left alone).
    async fn delete_generation(
        &self,
        key: &str,
        name: &str,
        generation: u64,
    ) -> Result<(), StoreError> {
        let call = Call::new(Method::DELETE, Api::Objects, Some(name), self.context(key))
            .if_generation(Some(generation));
        match self.client.send(call).await {
            Ok(_) | Err(StoreError::PreconditionFailed) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The object at `key`, if the upload `upload_id` made it.
    async fn made_by(&self, key: &str, upload_id: &str) -> Result<Option<PutOutput>, StoreError> {
        let Some(current) = self.resource(key).await? else {
            return Ok(None);
        };
        if current.own(UPLOAD_ENTRY) != Some(upload_id) {
            return Ok(None);
        }
        // Finish what the first completion left.
        self.finish(key, upload_id).await?;
        let meta = current.meta(key);
        Ok(Some(PutOutput {
            etag: meta.etag,
            checksum: meta.checksum,
        }))
    }

    /// Creates the bucket in `project` (`sluice mb`); one that exists is a
    /// 409 `Service` error.
    pub async fn create_bucket(&self, project: Option<&str>) -> Result<(), StoreError> {
        let mut call = Call::new(Method::POST, Api::Buckets, None, self.context(""))
            .json(&serde_json::json!({"name": self.client.bucket()}));
        if let Some(project) = project {
            call = call.query("project", project);
        }
        self.client.send(call).await.map(|_| ())
    }

    /// Creates the bucket when it does not exist (tests, emulators).
    pub async fn ensure_bucket(&self) -> Result<(), StoreError> {
        match self.create_bucket(None).await {
            Ok(()) | Err(StoreError::Service { status: 409, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
