//! Intents in the store: one object under `_sluice/events/intents/` for every
//! object about to be made for an upload, written before it is made and
//! removed once its event is in the outbox. What a process killed in between
//! leaves behind, the reconciliation ([`super::reconcile`]) settles.
//!
//! An intent's id is stable for what it stands for: a multipart upload's
//! completion has one id however many requests (or gateways) try it, so its
//! event has one id too; a single PUT has the engine's nonce; a table's data
//! file has one id however many commits try to add it.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use sluice_store::{Checksum, ObjectStore, PutRequest, StoreError};
use sluice_upload::{Intent, Making};

pub const INTENTS: &str = sluice_store::reserved_key!("events/intents/");

/// An intent as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentRecord {
    /// 32 hex digits: the intent's name (its event's id is `Completion::event_id`).
    pub id: String,
    /// When the intent was written (ms since the epoch).
    pub at_ms: u64,
    /// `put`, `form`, `tus_patch`, ... (`UploadKind::as_str`).
    pub kind: String,
    pub key: String,
    pub size: u64,
    /// `algorithm:base64`, when known before the object was made.
    pub checksum: Option<String>,
    /// The multipart upload whose completion makes the object.
    pub multipart_upload_id: Option<String>,
    pub tenant: Option<String>,
    pub upload_id: Option<String>,
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// Content type and metadata are the stored object's.
    #[serde(default)]
    pub described_by_store: bool,
    /// Where its writer sends events (`Events::destination_tag`): only a
    /// reconciliation sending to the same endpoints settles it. Unset (an
    /// intent written before tags existed): any reconciliation does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<String>,
    /// The root key of the table whose commit adds the object (a table's
    /// data file, announced once the table's log holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
}

impl IntentRecord {
    /// The record of the engine's `intent`.
    pub fn of(intent: &Intent) -> IntentRecord {
        let at_ms = intent
            .at
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let origin = &intent.origin;
        let (id, multipart_upload_id, table) = match &intent.making {
            Making::Put { nonce } => (format!("{nonce:032x}"), None, None),
            Making::Multipart { upload_id } => (
                multipart_intent_id(&intent.key, upload_id),
                Some(upload_id.clone()),
                None,
            ),
            Making::TableCommit { table } => (
                table_file_intent_id(table, &intent.key),
                None,
                Some(table.clone()),
            ),
        };
        IntentRecord {
            id,
            at_ms,
            kind: origin.kind.as_str().to_owned(),
            key: intent.key.clone(),
            size: intent.size,
            checksum: intent.checksum.map(|c| c.to_string()),
            multipart_upload_id,
            tenant: origin.tenant.clone(),
            upload_id: origin.upload_id.clone(),
            content_type: origin.content_type.clone(),
            metadata: origin.metadata.clone(),
            described_by_store: origin.described_by_store,
            destination: None,
            table,
        }
    }

    /// The checksum, parsed.
    pub fn checksum(&self) -> Option<Checksum> {
        parse_checksum(self.checksum.as_deref()?)
    }

    fn name(&self) -> String {
        format!("{INTENTS}{}.json", self.id)
    }
}

/// The one id of the completion of `upload_id` at `key`.
fn multipart_intent_id(key: &str, upload_id: &str) -> String {
    crate::events::digest_hex(&[key.as_bytes(), upload_id.as_bytes()], 16)
}

/// The one id of the table file at `key` joining the table at `table`
/// (however many commits try to add it).
fn table_file_intent_id(table: &str, key: &str) -> String {
    crate::events::digest_hex(&[b"table", table.as_bytes(), key.as_bytes()], 16)
}

/// `crc32c:base64` (as `Checksum`'s `Display` writes it) back to a checksum.
pub fn parse_checksum(text: &str) -> Option<Checksum> {
    let (name, value) = text.split_once(':')?;
    Checksum::from_base64(name.parse().ok()?, value)
}

/// The intents of one store.
#[derive(Clone)]
pub struct Intents {
    store: Arc<dyn ObjectStore>,
}

impl Intents {
    pub fn new(store: Arc<dyn ObjectStore>) -> Intents {
        Intents { store }
    }

    /// Writes `record`, unless its intent is there already (a completion
    /// tried again keeps the first one's time).
    pub async fn write(&self, record: &IntentRecord) -> Result<(), StoreError> {
        let body = Bytes::from(serde_json::to_vec(record).expect("intents serialise"));
        let mut request = PutRequest::new(record.name(), body);
        request.content_type = Some("application/json".into());
        request.condition = Some(sluice_store::WriteCondition::IfNoneMatch);
        match self.store.put_object(request).await {
            Ok(_) | Err(StoreError::PreconditionFailed) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The intent `id`, when it is still there.
    pub async fn get(&self, id: &str) -> Result<Option<IntentRecord>, StoreError> {
        self.read(&format!("{INTENTS}{id}.json")).await
    }

    /// Removes the intent `id` (gone already is fine).
    pub async fn remove(&self, id: &str) -> Result<(), StoreError> {
        match self
            .store
            .delete_object(&format!("{INTENTS}{id}.json"))
            .await
        {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// Up to `limit` intents after `after`, each with when it was written,
    /// and whether there are more.
    pub async fn list(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<(String, std::time::SystemTime)>, bool), StoreError> {
        let page = self.store.list_objects(INTENTS, after, limit).await?;
        let more = page.next_cursor.is_some();
        let listed = page
            .objects
            .into_iter()
            .map(|o| (o.key, o.last_modified))
            .collect();
        Ok((listed, more))
    }

    /// The intent stored as `name`; `None` when it is gone or does not parse
    /// (left alone, and logged).
    pub async fn read(&self, name: &str) -> Result<Option<IntentRecord>, StoreError> {
        let output = match self.store.get_object(name, None).await {
            Ok(output) => output,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut bytes = BytesMut::new();
        let mut body = output.body;
        while let Some(chunk) = body.try_next().await? {
            bytes.extend_from_slice(&chunk);
        }
        match serde_json::from_slice(&bytes) {
            Ok(record) => Ok(Some(record)),
            Err(error) => {
                tracing::warn!(name, %error, "an intent that does not parse is left alone");
                Ok(None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_upload::{Origin, UploadKind};

    fn intent(making: Making) -> Intent {
        Intent {
            origin: Origin::new(UploadKind::TusPatch),
            key: "a/b".into(),
            size: 3,
            checksum: None,
            making,
            at: std::time::SystemTime::now(),
        }
    }

    #[test]
    fn ids_are_stable_for_a_multipart_completion_and_unique_for_a_put() {
        let multipart = |id: &str| {
            IntentRecord::of(&intent(Making::Multipart {
                upload_id: id.into(),
            }))
            .id
        };
        assert_eq!(multipart("u1"), multipart("u1"));
        assert_ne!(multipart("u1"), multipart("u2"));
        assert_eq!(multipart("u1").len(), 32);
        let put = |nonce| IntentRecord::of(&intent(Making::Put { nonce })).id;
        assert_ne!(put(1), put(2));
        assert_eq!(put(1).len(), 32);
    }

    #[test]
    fn checksums_read_back() {
        let checksum = sluice_store::ChecksumAlgorithm::Crc32c.checksum(b"abc");
        assert_eq!(parse_checksum(&checksum.to_string()), Some(checksum));
        assert_eq!(parse_checksum("nonsense"), None);
    }
}
