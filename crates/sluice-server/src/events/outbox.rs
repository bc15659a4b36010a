//! The outbox in the store: one object per (event, endpoint) under
//! `_sluice/events/pending/`, named by the event's id and the endpoint (the
//! same event written twice is one entry), holding the event and its delivery state (attempts, when it is next
//! due, until when it is retried, and who holds its claim until when). Every
//! change to an entry is a conditional write on the ETag that was read, so two
//! gateways never both believe they hold one entry; an entry given up on moves
//! to `_sluice/events/failed/`.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use sluice_store::{ObjectStore, PutRequest, StoreError, WriteCondition};

use super::Event;

pub const PENDING: &str = sluice_store::reserved_key!("events/pending/");
pub const FAILED: &str = sluice_store::reserved_key!("events/failed/");

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One event on its way to one endpoint.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    pub event: Event,
    pub url: String,
    pub attempts: u32,
    /// Not tried again before this (ms since the epoch).
    pub next_at_ms: u64,
    /// Given up on after this.
    pub give_up_at_ms: u64,
    /// The gateway delivering it now, and until when its claim holds.
    pub claimed_by: Option<String>,
    pub claimed_until_ms: u64,
    /// The last failure, for `failed/` and logs (status or transport error).
    pub last_error: Option<String>,
}

impl Entry {
    /// Due now and claimed by no one (or by a claim that lapsed).
    pub fn is_due(&self, now_ms: u64) -> bool {
        self.next_at_ms <= now_ms && self.claimed_until_ms <= now_ms
    }
}

/// An entry as read, with the ETag its next write must match.
pub struct Read {
    pub entry: Entry,
    pub etag: String,
}

#[derive(Clone)]
pub struct Outbox {
    store: Arc<dyn ObjectStore>,
}

/// A short, stable tag of an endpoint URL for entry names.
fn url_tag(url: &str) -> String {
    super::digest_hex(&[url.as_bytes()], 4)
}

impl Outbox {
    pub fn new(store: Arc<dyn ObjectStore>) -> Outbox {
        Outbox { store }
    }

    /// Writes the entry of `event` for `url`, due at once, named after the
    /// event's id: an entry there already (the same event written again) is
    /// left as it is.
    pub async fn add(
        &self,
        event: &Event,
        url: &str,
        give_up_at_ms: u64,
    ) -> Result<(), StoreError> {
        let now = now_ms();
        let entry = Entry {
            event: event.clone(),
            url: url.to_owned(),
            attempts: 0,
            next_at_ms: now,
            give_up_at_ms,
            claimed_by: None,
            claimed_until_ms: 0,
            last_error: None,
        };
        let key = format!("{PENDING}{}-{}.json", event.id, url_tag(url));
        let mut request = PutRequest::new(key, encode(&entry));
        request.content_type = Some("application/json".into());
        request.condition = Some(WriteCondition::IfNoneMatch);
        match self.store.put_object(request).await {
            Ok(_) | Err(StoreError::PreconditionFailed) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Up to `limit` pending entry keys after `after`, in key order.
    pub async fn list(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<String>, bool), StoreError> {
        let page = self.store.list_objects(PENDING, after, limit).await?;
        let more = page.next_cursor.is_some();
        Ok((page.objects.into_iter().map(|o| o.key).collect(), more))
    }

    /// The entry at `key`; `None` when it is gone (delivered meanwhile) or not
    /// one of ours.
    pub async fn read(&self, key: &str) -> Result<Option<Read>, StoreError> {
        let output = match self.store.get_object(key, None).await {
            Ok(output) => output,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let etag = output.meta.etag.clone();
        let mut bytes = BytesMut::new();
        let mut body = output.body;
        while let Some(chunk) = body.try_next().await? {
            bytes.extend_from_slice(&chunk);
        }
        match serde_json::from_slice(&bytes) {
            Ok(entry) => Ok(Some(Read { entry, etag })),
            Err(error) => {
                tracing::warn!(key, %error, "an outbox entry that does not parse is left alone");
                Ok(None)
            }
        }
    }

    /// Writes `entry` over the one read with `etag`; `None` when another
    /// gateway changed it first.
    pub async fn replace(
        &self,
        key: &str,
        entry: &Entry,
        etag: &str,
    ) -> Result<Option<String>, StoreError> {
        let mut request = PutRequest::new(key, encode(entry));
        request.content_type = Some("application/json".into());
        request.condition = Some(WriteCondition::IfMatch(etag.to_owned()));
        match self.store.put_object(request).await {
            Ok(output) => Ok(Some(output.etag)),
            Err(StoreError::PreconditionFailed) => Ok(None),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Removes a delivered entry.
    pub async fn remove(&self, key: &str) -> Result<(), StoreError> {
        self.store.delete_object(key).await
    }

    /// Moves an entry given up on to `failed/` (kept for people to look at).
    pub async fn give_up(&self, key: &str, entry: &Entry) -> Result<(), StoreError> {
        let name = key.strip_prefix(PENDING).unwrap_or(key);
        let mut request = PutRequest::new(format!("{FAILED}{name}"), encode(entry));
        request.content_type = Some("application/json".into());
        self.store.put_object(request).await?;
        self.store.delete_object(key).await
    }

    /// Entries still to deliver (`failed`: given up on), at most `limit` (the
    /// first in key order), oldest event first.
    pub async fn entries(&self, failed: bool, limit: usize) -> Result<Vec<Entry>, StoreError> {
        let prefix = if failed { FAILED } else { PENDING };
        let page = self.store.list_objects(prefix, None, limit).await?;
        let mut entries = Vec::new();
        for object in page.objects {
            if let Some(read) = self.read(&object.key).await? {
                entries.push(read.entry);
            }
        }
        entries.sort_by(|a, b| a.event.created_at.cmp(&b.event.created_at));
        Ok(entries)
    }
}

fn encode(entry: &Entry) -> Bytes {
    Bytes::from(serde_json::to_vec(entry).expect("entries serialise"))
}
