//! What the gateway keeps about a resumable upload, all of it in the store under
//! `_sluice/tus/{id}/`: the record (`state`, JSON, written with If-Match so that
//! no two writers interleave), the lock (`lock`, see [`super::lock`]) and the
//! carried bytes that were too few for a part (`seg-N`, written once each). Any
//! gateway instance can therefore serve any request of any upload.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use sluice_store::{
    Body, Checksum, ChecksumAlgorithm, ObjectStore, PutRequest, StoreError, UploadedPart,
    WriteCondition,
};
use sluice_tus::Upload;

/// Where resumable-upload state lives; client keys may not start with it.
pub const STATE_PREFIX: &str = "_sluice/tus/";

pub fn upload_prefix(id: &str) -> String {
    format!("{STATE_PREFIX}{id}/")
}

fn state_key(id: &str) -> String {
    format!("{STATE_PREFIX}{id}/state")
}

fn segment_key(id: &str, number: u32) -> String {
    format!("{STATE_PREFIX}{id}/seg-{number}")
}

/// A part stored in the multipart upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredPart {
    pub number: u32,
    pub etag: String,
    pub size: u64,
    /// `crc32c:BASE64` or `crc64nvme:BASE64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

impl StoredPart {
    pub fn from_uploaded(part: &UploadedPart) -> StoredPart {
        StoredPart {
            number: part.part_number,
            etag: part.etag.clone(),
            size: part.size,
            checksum: part
                .checksum
                .map(|c| format!("{}:{}", c.algorithm.name(), c.to_base64())),
        }
    }

    pub fn to_uploaded(&self) -> UploadedPart {
        let checksum = self.checksum.as_deref().and_then(|text| {
            let (name, value) = text.split_once(':')?;
            let algorithm: ChecksumAlgorithm = name.parse().ok()?;
            Checksum::from_base64(algorithm, value)
        });
        UploadedPart {
            part_number: self.number,
            etag: self.etag.clone(),
            size: self.size,
            checksum,
        }
    }
}

/// Carried bytes, stored as one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub number: u32,
    pub len: u64,
}

/// The stored record of one upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TusRecord {
    pub upload: Upload,
    /// The object the upload becomes.
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The multipart upload, once the first bytes arrive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multipart_id: Option<String>,
    #[serde(default)]
    pub parts: Vec<StoredPart>,
    #[serde(default)]
    pub segments: Vec<Segment>,
    #[serde(default)]
    pub next_segment: u32,
    /// Set when the object is complete in the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_etag: Option<String>,
}

impl TusRecord {
    pub fn is_finished(&self) -> bool {
        self.finished_etag.is_some()
    }

    /// Bytes held in segments.
    pub fn carried(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum()
    }
}

/// A record with the ETag it was read with.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub record: TusRecord,
    pub etag: String,
}

/// Reads and writes records and segments.
#[derive(Clone)]
pub struct RecordStore {
    store: Arc<dyn ObjectStore>,
}

/// A record that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("no such upload")]
    NotFound,
    #[error("the upload's record changed under this request")]
    Conflict,
    #[error("the upload's record is unreadable: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl RecordStore {
    pub fn new(store: Arc<dyn ObjectStore>) -> RecordStore {
        RecordStore { store }
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    async fn read(&self, key: &str) -> Result<(Bytes, String), StoreError> {
        read_object(self.store.as_ref(), key).await
    }

    pub async fn load(&self, id: &str) -> Result<Loaded, RecordError> {
        if !valid_id(id) {
            return Err(RecordError::NotFound);
        }
        let (bytes, etag) = match self.read(&state_key(id)).await {
            Ok(found) => found,
            Err(e) if e.is_not_found() => return Err(RecordError::NotFound),
            Err(e) => return Err(e.into()),
        };
        let record =
            serde_json::from_slice(&bytes).map_err(|e| RecordError::Corrupt(e.to_string()))?;
        Ok(Loaded { record, etag })
    }

    /// Writes a new record; fails with Conflict when one exists.
    pub async fn create(&self, record: &TusRecord) -> Result<String, RecordError> {
        self.write(record, WriteCondition::IfNoneMatch).await
    }

    /// Replaces the record read with `etag`; Conflict when it changed since.
    pub async fn replace(&self, record: &TusRecord, etag: &str) -> Result<String, RecordError> {
        self.write(record, WriteCondition::IfMatch(etag.to_owned()))
            .await
    }

    async fn write(
        &self,
        record: &TusRecord,
        condition: WriteCondition,
    ) -> Result<String, RecordError> {
        let json = serde_json::to_vec(record).map_err(|e| RecordError::Corrupt(e.to_string()))?;
        let mut request = PutRequest::new(state_key(&record.upload.id), Body::Bytes(json.into()));
        request.content_type = Some("application/json".into());
        request.condition = Some(condition);
        match self.store.put_object(request).await {
            Ok(output) => Ok(output.etag),
            Err(StoreError::PreconditionFailed) => Err(RecordError::Conflict),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn write_segment(
        &self,
        id: &str,
        number: u32,
        bytes: Vec<Bytes>,
    ) -> Result<(), StoreError> {
        let body = match bytes.len() {
            1 => Body::Bytes(bytes.into_iter().next().expect("one chunk")),
            _ => Body::Chunks(bytes.into()),
        };
        self.store
            .put_object(PutRequest::new(segment_key(id, number), body))
            .await
            .map(|_| ())
    }

    /// The carried bytes of a record, in order.
    pub async fn read_segments(&self, record: &TusRecord) -> Result<Vec<Bytes>, RecordError> {
        let mut out = Vec::with_capacity(record.segments.len());
        for segment in &record.segments {
            let (bytes, _) = self
                .read(&segment_key(&record.upload.id, segment.number))
                .await?;
            if bytes.len() as u64 != segment.len {
                return Err(RecordError::Corrupt(format!(
                    "segment {} holds {} bytes, not {}",
                    segment.number,
                    bytes.len(),
                    segment.len
                )));
            }
            out.push(bytes);
        }
        Ok(out)
    }

    pub async fn delete_segments(&self, id: &str, segments: &[Segment]) {
        for segment in segments {
            if let Err(error) = self
                .store
                .delete_object(&segment_key(id, segment.number))
                .await
            {
                tracing::warn!(upload_id = id, segment = segment.number, error = %sluice_store::error_chain(&error), "could not delete a segment; the sweeper will");
            }
        }
    }

    /// Deletes everything stored under the upload's prefix (record, lock, segments).
    pub async fn delete_all(&self, id: &str) -> Result<(), StoreError> {
        let prefix = upload_prefix(id);
        loop {
            let page = self.store.list_objects(&prefix, None, 1000).await?;
            if page.objects.is_empty() {
                return Ok(());
            }
            // The record goes last, so that a half-finished deletion is found again.
            let (record, rest): (Vec<_>, Vec<_>) = page
                .objects
                .into_iter()
                .partition(|o| o.key.ends_with("/state"));
            for object in rest.into_iter().chain(record) {
                self.store.delete_object(&object.key).await?;
            }
        }
    }
}

/// A small object's bytes and ETag (records, segments, locks).
pub(super) async fn read_object(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<(Bytes, String), StoreError> {
    let output = store.get_object(key, None).await?;
    let etag = output.meta.etag.clone();
    let mut buf = BytesMut::with_capacity(output.meta.size as usize);
    let mut body = output.body;
    while let Some(chunk) = body.try_next().await? {
        buf.extend_from_slice(&chunk);
    }
    Ok((buf.freeze(), etag))
}

/// Upload ids are 32 lowercase hex digits (a UUID without dashes).
pub fn valid_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A new upload id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_table() {
        let cases = [
            (new_id().as_str().to_owned(), true),
            ("0123456789abcdef0123456789abcdef".into(), true),
            ("0123456789ABCDEF0123456789abcdef".into(), false),
            ("../../etc/passwd".into(), false),
            ("".into(), false),
            ("0123456789abcdef0123456789abcde".into(), false),
        ];
        for (id, ok) in cases {
            assert_eq!(valid_id(&id), ok, "{id}");
        }
    }

    #[test]
    fn parts_keep_their_checksums() {
        let part = UploadedPart {
            part_number: 3,
            etag: "\"e\"".into(),
            size: 5 << 20,
            checksum: Some(ChecksumAlgorithm::Crc32c.checksum(b"abc")),
        };
        let stored = StoredPart::from_uploaded(&part);
        assert!(stored.checksum.as_deref().unwrap().starts_with("crc32c:"));
        assert_eq!(stored.to_uploaded(), part);
    }
}
