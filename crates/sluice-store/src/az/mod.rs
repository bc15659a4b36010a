//! The Azure Blob Storage backend, on Azure's REST API over `reqwest` (Shared
//! Key or SAS): block blobs in one container, under an optional prefix.
//!
//! How S3's model maps onto it:
//! - a put is Put Blob, with `If-None-Match: *` / `If-Match` as sent (Azure
//!   answers 409 `BlobAlreadyExists` where S3 answers 412: both are
//!   [`StoreError::PreconditionFailed`]);
//! - every write carries `x-ms-content-crc64`, which Azure verifies; the
//!   object's checksum (CRC-64/NVME, or CRC-32C when asked) is kept in a
//!   metadata entry of sluice's own, since Azure stores none;
//! - a multipart upload stages blocks on the destination blob itself (Put
//!   Block); a block's id names the upload, the part and its CRCs
//!   ([`names`]); completion is Put Block List with the condition;
//! - an upload exists while its record `_sluice/azure/uploads/KEY/ID` does
//!   (content type, metadata and settings given at the start): `list_parts`,
//!   completion and the janitor's listing go by it, and abort deletes it.
//!   Azure collects the blocks of an aborted upload after a week.
//!
//! - copies are made by Azure from the source's URL in the same account
//!   (this container or another), pinned to the ETag its HEAD read: an
//!   object by Copy Blob, a part by Put Block From URL ([`copy`]).
//!
//! Two uploads to one key share that blob's uncommitted blocks: completing or
//! overwriting the key drops the other's parts, whose completion then fails
//! (S3 keeps them apart). sluice's keys are unique per upload by default.

mod auth;
mod client;
mod copy;
mod errors;
mod names;
mod sas;
mod xml;

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use reqwest::Method;

pub use auth::{AzureAccount, AzureAccountError, AzureCredential, EMULATOR_ACCOUNT, EMULATOR_KEY};

use crate::checksum::{Checksum, ChecksumAlgorithm};
use crate::error::StoreError;
use crate::rest::body::{self, PartCrcs};
use crate::rest::model::{self, check_part_number, Page, UploadRecord};
use crate::types::*;
use crate::ObjectStore;
use client::{header_text, Call, Client};
use errors::Context;
use names::{BlockId, StoredName};

/// Where the records of uploads in progress are kept, under the store's prefix.
const RECORDS: &str = crate::reserved_key!("azure/uploads/");

/// How to reach a container.
#[derive(Debug, Clone)]
pub struct AzureConfig {
    pub account: AzureAccount,
    pub container: String,
    /// Prepended to every key (a `/` is added if missing); empty for none.
    pub prefix: String,
    pub connect_timeout: Duration,
    /// The longest a request may wait for an answer or the next body byte;
    /// `None` waits as long as the connection lives.
    pub stall_timeout: Option<Duration>,
}

impl AzureConfig {
    pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(30);

    pub fn new(account: AzureAccount, container: impl Into<String>) -> AzureConfig {
        AzureConfig {
            account,
            container: container.into(),
            prefix: String::new(),
            connect_timeout: Duration::from_secs(5),
            stall_timeout: Some(AzureConfig::DEFAULT_STALL_TIMEOUT),
        }
    }
}

/// A container of an Azure storage account as an [`ObjectStore`].
#[derive(Debug)]
pub struct AzureStore {
    client: Client,
    prefix: String,
    /// Whether part copies are tried as Put Block From URL: cleared once the
    /// service said it cannot read sources by URL ([`copy`]).
    blocks_by_url: AtomicBool,
}

impl AzureStore {
    pub fn open(config: AzureConfig) -> Result<AzureStore, StoreError> {
        let mut prefix = config.prefix;
        if !prefix.is_empty() && !prefix.ends_with('/') {
            prefix.push('/');
        }
        let client = Client::new(
            config.account,
            config.container,
            config.connect_timeout,
            config.stall_timeout,
        )?;
        Ok(AzureStore {
            client,
            prefix,
            blocks_by_url: AtomicBool::new(true),
        })
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    fn context<'a>(&'a self, key: &'a str) -> Context<'a> {
        Context {
            key,
            container: self.client.container(),
            create_only: false,
        }
    }

    fn record_name(&self, key: &str, upload_id: &str) -> String {
        self.full(&format!("{RECORDS}{key}/{upload_id}"))
    }

    /// The record of an upload, or `NoSuchUpload`.
    async fn record(&self, key: &str, upload_id: &str) -> Result<UploadRecord, StoreError> {
        let name = self.record_name(key, upload_id);
        let no_such = || StoreError::NoSuchUpload {
            upload_id: upload_id.to_string(),
        };
        let answer = self
            .client
            .send(Call::new(Method::GET, Some(&name), self.context(key)))
            .await
            .map_err(|e| if e.is_not_found() { no_such() } else { e })?;
        let text = self.client.text(answer).await?;
        UploadRecord::read(&text, &name, key, upload_id)
    }

    /// Whether the record of an upload exists (one HEAD).
    async fn check_record(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        let name = self.record_name(key, upload_id);
        self.client
            .send(Call::new(Method::HEAD, Some(&name), self.context(key)))
            .await
            .map(|_| ())
            .map_err(|e| match e {
                e if e.is_not_found() => StoreError::NoSuchUpload {
                    upload_id: upload_id.to_string(),
                },
                e => e,
            })
    }

    /// sluice's blocks of a blob, committed or not, by id.
    async fn blocks(&self, key: &str) -> Result<Vec<(BlockId, String, u64)>, StoreError> {
        let name = self.full(key);
        let call = Call::new(Method::GET, Some(&name), self.context(key))
            .query("comp", "blocklist")
            .query("blocklisttype", "all");
        let answer = match self.client.send(call).await {
            Ok(answer) => answer,
            // No blob and no staged block.
            Err(e) if e.is_not_found() => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let text = self.client.text(answer).await?;
        let root = xml::parse(&text).map_err(unreadable)?;
        let mut blocks = Vec::new();
        for list in ["CommittedBlocks", "UncommittedBlocks"] {
            let Some(list) = root.child(list) else {
                continue;
            };
            for block in list.children_named("Block") {
                let id_text = block.text_at("Name").unwrap_or("");
                let size = block
                    .text_at("Size")
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(0);
                if let Some(id) = BlockId::decode(id_text) {
                    blocks.push((id, id_text.to_string(), size));
                }
            }
        }
        Ok(blocks)
    }

    /// Stages one block: sent with its CRC-64 when known, while the upload's
    /// record is checked beside it.
    async fn stage_block(
        &self,
        key: &str,
        upload_id: &str,
        id: &str,
        sent: body::Outgoing,
        len: u64,
        crc64: Option<String>,
    ) -> Result<(), StoreError> {
        let name = self.full(key);
        let mut call = Call::new(Method::PUT, Some(&name), self.context(key))
            .query("comp", "block")
            .query("blockid", id)
            .body(sent, len);
        if let Some(crc64) = crc64 {
            call = call.header("x-ms-content-crc64", crc64);
        }
        let (record, staged) =
            tokio::join!(self.check_record(key, upload_id), self.client.send(call));
        record?;
        staged.map(|_| ())
    }

    /// Every upload record under `prefix` (relative to the store).
    async fn records(&self, prefix: &str) -> Result<Vec<ObjectSummary>, StoreError> {
        let mut listed = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = self
                .list_objects(&format!("{RECORDS}{prefix}"), cursor.as_deref(), 1000)
                .await?;
            listed.extend(page.objects);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(listed),
            }
        }
    }

    /// An object's description from the headers of a GET or HEAD answer.
    fn meta_of(&self, key: &str, answer: &reqwest::Response, whole: bool) -> ObjectMeta {
        let header = |name: &str| header_text(answer, name);
        let length: u64 = header("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let size = header("content-range")
            .and_then(|r| r.rsplit('/').next().and_then(|t| t.parse().ok()))
            .unwrap_or(length);
        let mut metadata = Metadata::new();
        let mut own = BTreeMap::new();
        for (name, value) in answer.headers() {
            let Some(stored) = name.as_str().strip_prefix("x-ms-meta-") else {
                continue;
            };
            let value = value.to_str().unwrap_or("").to_string();
            match names::metadata_name_in(stored) {
                StoredName::User(name) => {
                    metadata.insert(name, value);
                }
                StoredName::Own(name) => {
                    own.insert(name, value);
                }
            }
        }
        let checksum = [ChecksumAlgorithm::Crc64nvme, ChecksumAlgorithm::Crc32c]
            .into_iter()
            .find_map(|a| {
                own.get(a.name())
                    .and_then(|text| Checksum::from_base64(a, text))
            })
            .filter(|_| whole);
        let explicit_tier = header("x-ms-access-tier-inferred").as_deref() != Some("true");
        ObjectMeta {
            key: key.to_string(),
            size,
            etag: header("etag").unwrap_or_default(),
            last_modified: header("last-modified")
                .and_then(|d| httpdate::parse_http_date(&d).ok())
                .unwrap_or(SystemTime::UNIX_EPOCH),
            content_type: header("content-type"),
            metadata,
            settings: ObjectSettings {
                cache_control: header("cache-control"),
                content_encoding: header("content-encoding"),
                content_disposition: header("content-disposition"),
                storage_class: header("x-ms-access-tier").filter(|_| explicit_tier),
                acl: None,
                encryption: None,
            },
            checksum,
        }
    }
}

/// The upload id's bytes, as block ids hold them; an id sluice did not
/// make names no upload.
fn upload_of(upload_id: &str) -> Result<[u8; 16], StoreError> {
    names::upload_bytes(upload_id).ok_or_else(|| StoreError::NoSuchUpload {
        upload_id: upload_id.to_string(),
    })
}

/// An ETag in quotes (listings give them bare, headers quoted).
fn quoted(etag: &str) -> String {
    match etag {
        "" => String::new(),
        e if e.starts_with('"') => e.to_string(),
        e => format!("\"{e}\""),
    }
}

/// An answer that is not the XML it should be.
fn unreadable(error: xml::XmlError) -> StoreError {
    StoreError::Service {
        status: 200,
        code: "UnreadableAnswer".into(),
        message: error.to_string(),
    }
}

/// The headers that set a blob's content type, settings and metadata (the
/// user's and sluice's own entries).
fn property_headers(
    content_type: Option<&str>,
    metadata: &Metadata,
    settings: &ObjectSettings,
    checksum: Option<Checksum>,
) -> Result<Vec<(String, String)>, StoreError> {
    if settings.acl.is_some() {
        return Err(StoreError::Unsupported(
            "ACLs on Azure Blob (access is set per container)",
        ));
    }
    if settings.encryption.is_some() {
        return Err(StoreError::Unsupported(
            "S3 server-side encryption settings on Azure Blob (Azure encrypts every blob)",
        ));
    }
    let mut headers = Vec::new();
    let mut set = |name: &str, value: Option<&String>| {
        if let Some(value) = value {
            headers.push((name.to_string(), value.clone()));
        }
    };
    set(
        "x-ms-blob-content-type",
        content_type.map(str::to_string).as_ref(),
    );
    set("x-ms-blob-cache-control", settings.cache_control.as_ref());
    set(
        "x-ms-blob-content-encoding",
        settings.content_encoding.as_ref(),
    );
    set(
        "x-ms-blob-content-disposition",
        settings.content_disposition.as_ref(),
    );
    if let Some(class) = &settings.storage_class {
        let tier = ["Hot", "Cool", "Cold", "Archive"]
            .into_iter()
            .find(|t| t.eq_ignore_ascii_case(class))
            .ok_or(StoreError::Unsupported(
                "this storage class on Azure Blob (its access tiers are Hot, Cool, Cold and Archive)",
            ))?;
        headers.push(("x-ms-access-tier".into(), tier.into()));
    }
    for (name, value) in metadata {
        headers.push((
            format!("x-ms-meta-{}", names::metadata_name_out(name)),
            value.clone(),
        ));
    }
    if let Some(checksum) = checksum {
        headers.push((
            format!("x-ms-meta-{}", names::checksum_entry(checksum.algorithm)),
            checksum.to_base64(),
        ));
    }
    Ok(headers)
}

/// `x-ms-content-crc64`: the CRC-64/NVME's bytes little-endian, in base64
/// (S3 sends the same value big-endian).
fn crc64_header(crcs: PartCrcs) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(crcs.crc64nvme.to_le_bytes())
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

#[async_trait]
impl ObjectStore for AzureStore {
    fn describe(&self) -> String {
        format!("az://{}/{}", self.client.container(), self.prefix)
    }

    fn copy_object_limit(&self) -> u64 {
        u64::MAX
    }

    async fn put_object(&self, request: PutRequest) -> Result<PutOutput, StoreError> {
        let (crcs, checksum) = body::put_checksums(&request).await?;
        let name = self.full(&request.key);
        let (sent, len) = body::outgoing(&request.body);
        let call = Call::new(Method::PUT, Some(&name), self.context(&request.key))
            .header("x-ms-blob-type", "BlockBlob")
            .header("x-ms-content-crc64", crc64_header(crcs))
            .headers(property_headers(
                request.content_type.as_deref(),
                &request.metadata,
                &request.settings,
                checksum,
            )?)
            .condition(&request.condition)
            .body(sent, len);
        let answer = self.client.send(call).await?;
        Ok(PutOutput {
            etag: header_text(&answer, "etag").unwrap_or_default(),
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
        let mut call = Call::new(Method::GET, Some(&name), self.context(key));
        if let Some(header) = &read.header {
            call = call.header("x-ms-range", header.clone());
        }
        let answer = match self.client.send(call).await {
            Ok(answer) => answer,
            Err(e) => return read.refused(e, self, key).await,
        };
        let meta = self.meta_of(key, &answer, range.is_none());
        let length: u64 = header_text(&answer, "content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        read.answered(meta, length, || self.client.body_stream(answer))
    }

    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        let name = self.full(key);
        let answer = self
            .client
            .send(Call::new(Method::HEAD, Some(&name), self.context(key)))
            .await?;
        Ok(self.meta_of(key, &answer, true))
    }

    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        let name = self.full(key);
        let call = Call::new(Method::DELETE, Some(&name), self.context(key))
            .header("x-ms-delete-snapshots", "include");
        match self.client.send(call).await {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e),
        }
    }

    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let limit = limit.clamp(1, 5000);
        let full_prefix = self.full(prefix);
        let mut page = Page::new(cursor, limit);
        let mut marker: Option<String> = None;
        loop {
            let mut call = Call::new(Method::GET, None, self.context(prefix))
                .query("restype", "container")
                .query("comp", "list")
                .query("maxresults", (limit + 1).min(5000).to_string());
            if !full_prefix.is_empty() {
                call = call.query("prefix", full_prefix.as_str());
            }
            match (&marker, cursor) {
                (Some(marker), _) => call = call.query("marker", marker.as_str()),
                (None, Some(cursor)) => call = call.query("startFrom", self.full(cursor)),
                (None, None) => {}
            }
            let answer = self.client.send(call).await?;
            let text = self.client.text(answer).await?;
            let root = xml::parse(&text).map_err(unreadable)?;
            for blob in root
                .child("Blobs")
                .into_iter()
                .flat_map(|b| b.children_named("Blob"))
            {
                let Some(name) = blob.child("Name") else {
                    continue;
                };
                let name = if name.attribute("Encoded") == Some("true") {
                    percent_encoding::percent_decode_str(&name.text)
                        .decode_utf8_lossy()
                        .into_owned()
                } else {
                    name.text.clone()
                };
                let Some(key) = name.strip_prefix(&self.prefix) else {
                    continue;
                };
                // `startFrom` is inclusive: the page skips the cursor's key.
                page.take(ObjectSummary {
                    key: key.to_string(),
                    size: blob
                        .text_at("Properties/Content-Length")
                        .and_then(|s| s.trim().parse().ok())
                        .unwrap_or(0),
                    // Quoted, as the ETag header of a HEAD or GET has it.
                    etag: quoted(blob.text_at("Properties/Etag").unwrap_or("")),
                    last_modified: blob
                        .text_at("Properties/Last-Modified")
                        .and_then(|d| httpdate::parse_http_date(d).ok())
                        .unwrap_or(SystemTime::UNIX_EPOCH),
                });
            }
            marker = root
                .text_at("NextMarker")
                .filter(|m| !m.is_empty())
                .map(str::to_string);
            if let Some(done) = page.finish(marker.is_some()) {
                return Ok(done);
            }
        }
    }

    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        // Refused at the start rather than at completion.
        property_headers(
            request.content_type.as_deref(),
            &request.metadata,
            &request.settings,
            None,
        )?;
        let upload_id = uuid::Uuid::new_v4().simple().to_string();
        let name = self.record_name(&request.key, &upload_id);
        let text = UploadRecord::of(&request);
        let crcs = body::crcs_of(&Body::from(text.clone())).await?;
        let call = Call::new(Method::PUT, Some(&name), self.context(&request.key))
            .header("x-ms-blob-type", "BlockBlob")
            .header("x-ms-blob-content-type", "application/json")
            .header("x-ms-content-crc64", crc64_header(crcs))
            .condition(&Some(WriteCondition::IfNoneMatch))
            .bytes(text);
        self.client.send(call).await?;
        Ok(upload_id)
    }

    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError> {
        let upload = upload_of(&request.upload_id)?;
        check_part_number(request.part_number)?;
        let crcs = body::crcs_of(&request.body).await?;
        body::check_declared(crcs, request.checksum.known())?;
        let id = BlockId {
            upload,
            part_number: request.part_number as u16,
            staged_at_micros: now_micros(),
            crcs: Some(crcs),
        }
        .encode();
        let (sent, len) = body::outgoing(&request.body);
        self.stage_block(
            &request.key,
            &request.upload_id,
            &id,
            sent,
            len,
            Some(crc64_header(crcs)),
        )
        .await?;
        Ok(UploadedPart {
            part_number: request.part_number,
            etag: id,
            size: len,
            checksum: request
                .checksum
                .algorithm()
                .and_then(|a| PartCrcs::of(a, Some(crcs))),
        })
    }

    async fn copy_object(&self, request: CopyObjectRequest) -> Result<PutOutput, StoreError> {
        // A source replaced between its HEAD and the copy is read again.
        model::copy_of_one_version(|| self.copy_version(&request)).await
    }

    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        let upload = upload_of(&request.upload_id)?;
        check_part_number(request.part_number)?;
        let id = BlockId {
            upload,
            part_number: request.part_number as u16,
            staged_at_micros: now_micros(),
            crcs: None,
        }
        .encode();
        let size = match request.source_if_match {
            Some(_) => self.copy_block(&request, &id).await?,
            // A source replaced between its HEAD and the copy is read again.
            None => model::copy_of_one_version(|| self.copy_block(&request, &id)).await?,
        };
        Ok(UploadedPart {
            part_number: request.part_number,
            etag: id,
            size,
            checksum: None,
        })
    }

    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        let record = self.record(&request.key, &request.upload_id).await?;
        let upload = upload_of(&request.upload_id)?;
        let stored: BTreeMap<String, u64> = self
            .blocks(&request.key)
            .await?
            .into_iter()
            .filter(|(id, _, _)| id.upload == upload)
            .map(|(_, text, size)| (text, size))
            .collect();
        let algorithm = record
            .checksum_algorithm
            .unwrap_or(ChecksumAlgorithm::Crc64nvme);
        let mut pieces = Vec::new();
        let mut ids = Vec::new();
        let mut last_number = 0;
        for (i, part) in request.parts.iter().enumerate() {
            let id = BlockId::decode(&part.etag)
                .filter(|id| id.upload == upload && u32::from(id.part_number) == part.part_number);
            let size = stored.get(&part.etag);
            let (Some(id), Some(&size)) = (id, size) else {
                // Another upload's completion (or a put) of this key drops
                // every block it does not name: a create-only loser hears
                // that it lost, as on S3.
                self.check_condition(&request.key, &request.condition)
                    .await?;
                return Err(StoreError::InvalidPart(format!(
                    "part {} is not a stored part of this upload",
                    part.part_number
                )));
            };
            model::check_part_in_order(part, i, request.parts.len(), size, &mut last_number)?;
            pieces.push((PartCrcs::of(algorithm, id.crcs), size));
            ids.push(part.etag.clone());
        }
        if ids.is_empty() {
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
        let name = self.full(&request.key);
        let call = Call::new(Method::PUT, Some(&name), self.context(&request.key))
            .query("comp", "blocklist")
            .headers(property_headers(
                record.content_type.as_deref(),
                &record.metadata,
                &record.settings,
                checksum,
            )?)
            .condition(&request.condition)
            .bytes(xml::block_list(&ids));
        let etag = match self.client.send(call).await {
            Ok(answer) => header_text(&answer, "etag").unwrap_or_default(),
            // A completion sent again after it was carried out: the blob
            // holds exactly this upload's blocks.
            Err(StoreError::PreconditionFailed) => {
                let committed = self.committed_ids(&request.key).await?;
                if committed != ids {
                    return Err(StoreError::PreconditionFailed);
                }
                self.head_object(&request.key).await?.etag
            }
            Err(e) => return Err(e),
        };
        // The upload ends with its record. A delete that did not land is an
        // error the caller retries, as any completion whose answer it lacks:
        // the next attempt finds the blob made of exactly these blocks.
        let record_name = self.record_name(&request.key, &request.upload_id);
        match self
            .client
            .send(Call::new(
                Method::DELETE,
                Some(&record_name),
                self.context(&request.key),
            ))
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        Ok(PutOutput { etag, checksum })
    }

    async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        let name = self.record_name(key, upload_id);
        match self
            .client
            .send(Call::new(Method::DELETE, Some(&name), self.context(key)))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.is_not_found() => Err(StoreError::NoSuchUpload {
                upload_id: upload_id.to_string(),
            }),
            Err(e) => Err(e),
        }
    }

    async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        let record = self.record(key, upload_id).await?;
        let upload = upload_of(upload_id)?;
        // A part sent more than once: the newest block is the part.
        let mut parts: BTreeMap<u16, (BlockId, String, u64)> = BTreeMap::new();
        for (id, text, size) in self.blocks(key).await? {
            if id.upload != upload {
                continue;
            }
            let newer = parts
                .get(&id.part_number)
                .is_none_or(|(held, _, _)| held.staged_at_micros < id.staged_at_micros);
            if newer {
                parts.insert(id.part_number, (id, text, size));
            }
        }
        Ok(parts
            .into_values()
            .map(|(id, text, size)| UploadedPart {
                part_number: u32::from(id.part_number),
                etag: text,
                size,
                checksum: record
                    .checksum_algorithm
                    .and_then(|a| PartCrcs::of(a, id.crcs)),
            })
            .collect())
    }

    async fn check_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.check_record(key, upload_id).await
    }

    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        Ok(self
            .records(prefix)
            .await?
            .into_iter()
            .filter_map(|record| {
                let rest = record.key.strip_prefix(RECORDS)?;
                let (key, upload_id) = rest.rsplit_once('/')?;
                Some(MultipartUploadInfo {
                    key: key.to_string(),
                    upload_id: upload_id.to_string(),
                    initiated: Some(record.last_modified),
                })
            })
            .collect())
    }
}

impl AzureStore {
    /// `PreconditionFailed` when `condition` does not hold for the key now.
    async fn check_condition(
        &self,
        key: &str,
        condition: &Option<WriteCondition>,
    ) -> Result<(), StoreError> {
        let current = match self.head_object(key).await {
            Ok(meta) => Some(meta.etag),
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        model::condition_holds(condition, current.as_deref())
    }

    /// The ids of a blob's committed blocks, in order.
    async fn committed_ids(&self, key: &str) -> Result<Vec<String>, StoreError> {
        let name = self.full(key);
        let call = Call::new(Method::GET, Some(&name), self.context(key))
            .query("comp", "blocklist")
            .query("blocklisttype", "committed");
        let answer = self.client.send(call).await?;
        let text = self.client.text(answer).await?;
        let root = xml::parse(&text).map_err(unreadable)?;
        Ok(root
            .child("CommittedBlocks")
            .into_iter()
            .flat_map(|l| l.children_named("Block"))
            .map(|b| b.text_at("Name").unwrap_or("").to_string())
            .collect())
    }
}

impl AzureStore {
    /// Creates the container (`sluice mb`); one that exists is a 409 `Service` error.
    pub async fn create_container(&self) -> Result<(), StoreError> {
        let call = Call::new(Method::PUT, None, self.context("")).query("restype", "container");
        self.client.send(call).await.map(|_| ())
    }

    /// Creates the container when it does not exist (tests).
    pub async fn ensure_container(&self) -> Result<(), StoreError> {
        match self.create_container().await {
            Ok(()) | Err(StoreError::Service { status: 409, .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl AzureStore {
    /// A URL that allows `method` on `key` without credentials until
    /// `expires` from now (a service SAS signed with the account key; at most
    /// [`crate::presign::MAX_PRESIGN_EXPIRY`]). A PUT through it must send `x-ms-blob-type:
    /// BlockBlob`, as every Put Blob must.
    pub fn presign(
        &self,
        method: crate::presign::PresignedMethod,
        key: &str,
        expires: Duration,
    ) -> Result<String, StoreError> {
        crate::presign::check_expiry(expires)?;
        let blob = self.full(key);
        if client::has_dot_segment(&blob) {
            return Err(StoreError::InvalidKey {
                key: key.to_string(),
                reason:
                    "a segment `.` or `..` cannot be in a blob's name on Azure (URLs resolve them)",
            });
        }
        let query = sas::blob_sas(
            self.client.account(),
            self.client.container(),
            &blob,
            method,
            SystemTime::now() + expires,
            client::SERVICE_VERSION,
        )?;
        Ok(format!("{}?{query}", self.client.url_of(Some(&blob)).0))
    }

    /// The blob endpoint requests go to, for messages.
    pub fn endpoint(&self) -> &str {
        &self.client.account().endpoint
    }
}
