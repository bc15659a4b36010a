//! An import's state, kept in the bucket (`_sluice/imports/ID.json`) so that
//! any gateway on the bucket can carry it on after another died: what to
//! fetch, where it goes, the multipart upload and the parts stored so far (in
//! number order, without gaps), the bytes fetched, and a lease: the gateway
//! working on it holds the record until `lease_until_ms`, renewing it as it
//! goes, and every write is conditional on the ETag it read, so two gateways
//! never both carry one import on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use sluice_resumable::record::StoredPart;
use sluice_store::{ObjectStore, PutRequest, StoreError, WriteCondition};

pub const IMPORTS: &str = sluice_store::reserved_key!("imports/");

/// Where an import is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Fetching and storing parts (or waiting for a gateway to go on).
    Running,
    /// The object is made and announced.
    Completed,
    /// Given up: `error` says why; its parts are gone.
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportRecord {
    pub id: String,
    /// The URL as the caller gave it (redirects are followed, and checked, on
    /// every request).
    pub url: String,
    pub owner: Option<String>,
    pub key: String,
    pub content_type: Option<String>,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// The object's size, as the origin said.
    pub size: u64,
    /// `If-Range` validator: the origin's strong ETag or Last-Modified.
    #[serde(default)]
    pub validator: Option<String>,
    /// Whether the origin serves ranges (otherwise a restart fetches from the
    /// start again).
    pub ranges: bool,
    pub upload_id: String,
    pub part_size: u64,
    /// Parts stored, numbered 1.. without gaps.
    #[serde(default)]
    pub parts: Vec<StoredPart>,
    /// Bytes read from the origin across every attempt and gateway.
    #[serde(default)]
    pub bytes_fetched: u64,
    pub phase: Phase,
    #[serde(default)]
    pub error: Option<String>,
    /// Attempts that ended early (origin errors, stalls, gateway deaths).
    #[serde(default)]
    pub attempts: u32,
    /// Held by a gateway until then (milliseconds since the epoch).
    #[serde(default)]
    pub lease_until_ms: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
    /// 32 random hex digits that open the progress socket: its token is the
    /// id followed by them (the id alone is in events and URLs others see).
    /// Never shown by [`ImportRecord::view`].
    #[serde(default)]
    pub socket_secret: String,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl ImportRecord {
    pub fn name(id: &str) -> String {
        format!("{IMPORTS}{id}.json")
    }

    /// What opens this import's progress socket (`/api/TOKEN`).
    pub fn socket_token(&self) -> String {
        format!("{}{}", self.id, self.socket_secret)
    }

    /// Whether `token` opens this import's progress socket (compared in
    /// constant time; a record without a secret opens to none).
    pub fn opens_socket(&self, token: &str) -> bool {
        let expected = self.socket_token();
        !self.socket_secret.is_empty()
            && token.len() == expected.len()
            && token
                .bytes()
                .zip(expected.bytes())
                .fold(0u8, |differ, (a, b)| differ | (a ^ b))
                == 0
    }

    /// Bytes stored in parts.
    pub fn stored(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum()
    }

    /// What `GET /v1/imports/ID` shows.
    pub fn view(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "url": self.url,
            "key": self.key,
            "state": self.phase,
            "size": self.size,
            "bytes_stored": self.stored(),
            "bytes_fetched": self.bytes_fetched,
            "attempts": self.attempts,
            "error": self.error,
        })
    }
}

fn encode(record: &ImportRecord) -> Bytes {
    Bytes::from(serde_json::to_vec(record).expect("records serialise"))
}

/// Writes a new record (create-only); its ETag.
pub async fn create(
    store: &Arc<dyn ObjectStore>,
    record: &ImportRecord,
) -> Result<String, StoreError> {
    let mut request = PutRequest::new(ImportRecord::name(&record.id), encode(record));
    request.content_type = Some("application/json".into());
    request.condition = Some(WriteCondition::IfNoneMatch);
    Ok(store.put_object(request).await?.etag)
}

/// The record and its ETag, if it exists.
pub async fn read(
    store: &Arc<dyn ObjectStore>,
    id: &str,
) -> Result<Option<(ImportRecord, String)>, StoreError> {
    let output = match store.get_object(&ImportRecord::name(id), None).await {
        Ok(output) => output,
        Err(StoreError::NoSuchKey { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let etag = output.meta.etag.clone();
    let bytes: BytesMut = output.body.try_collect().await?;
    match serde_json::from_slice(&bytes) {
        Ok(record) => Ok(Some((record, etag))),
        Err(e) => {
            tracing::warn!(id, error = %e, "an unreadable import record");
            Ok(None)
        }
    }
}

/// Replaces the record if it is still at `etag`; its new ETag.
/// `PreconditionFailed`: another gateway has it now.
pub async fn replace(
    store: &Arc<dyn ObjectStore>,
    record: &mut ImportRecord,
    etag: &str,
) -> Result<String, StoreError> {
    record.updated_ms = now_ms();
    let mut request = PutRequest::new(ImportRecord::name(&record.id), encode(record));
    request.content_type = Some("application/json".into());
    request.condition = Some(WriteCondition::IfMatch(etag.to_owned()));
    Ok(store.put_object(request).await?.etag)
}

/// The multipart uploads of the imports still running (the janitor spares them).
pub async fn running_upload_ids(
    store: &Arc<dyn ObjectStore>,
) -> Result<BTreeSet<String>, StoreError> {
    let mut ids = BTreeSet::new();
    let mut cursor = None;
    loop {
        let page = store.list_objects(IMPORTS, cursor.as_deref(), 1000).await?;
        for entry in &page.objects {
            let Some(id) = entry
                .key
                .strip_prefix(IMPORTS)
                .and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            if let Some((record, _)) = read(store, id).await? {
                if record.phase == Phase::Running {
                    ids.insert(record.upload_id);
                }
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(ids),
        }
    }
}
