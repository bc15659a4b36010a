//! What is kept about a resumable upload, all of it in the store under
//! `_sluice/tus/{id}/`: the record (`state`, JSON, written with If-Match so that
//! no two writers interleave), the lock (`lock`, see [`crate::lock`]) and the
//! carried bytes that were too few for a part (`seg-N`, written once each; the
//! newest few kilobytes ride in the record itself, see [`Receiving::tail`]). Any
//! gateway instance can therefore serve any request of any upload.
//!
//! An upload is in exactly one [`Phase`]: created (no bytes yet), receiving (a
//! multipart upload with parts and carried bytes, always short of the whole
//! length), finished (the object is complete) or invalid (ended by a request
//! the protocol says ends it; answered 410 until it expires). The step that brings the last
//! bytes completes the object before it records anything, so a record never
//! says "all bytes in" without the object existing.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use sluice_store::{
    Body, Checksum, ChecksumAlgorithm, ObjectStore, PutRequest, StoreError, UploadedPart,
    WriteCondition,
};
use sluice_tus::Upload;
use sluice_upload::{Origin, UploadKind};

use crate::error::ResumableError;

/// Where resumable-upload state lives; client keys may not start with it.
pub const STATE_PREFIX: &str = sluice_store::reserved_key!("tus/");

pub fn upload_prefix(id: &str) -> String {
    format!("{STATE_PREFIX}{id}/")
}

fn state_key(id: &str) -> String {
    format!("{STATE_PREFIX}{id}/state")
}

pub(crate) fn segment_key(id: &str, segment: &Segment) -> String {
    match &segment.tag {
        Some(tag) => format!("{STATE_PREFIX}{id}/seg-{}-{tag}", segment.number),
        None => format!("{STATE_PREFIX}{id}/seg-{}", segment.number),
    }
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
            checksum: part.checksum.map(|c| checksum_text(&c)),
        }
    }

    pub fn to_uploaded(&self) -> UploadedPart {
        UploadedPart {
            part_number: self.number,
            etag: self.etag.clone(),
            size: self.size,
            checksum: self.checksum.as_deref().and_then(parse_checksum),
        }
    }
}

/// `algorithm:BASE64`, as records keep checksums.
pub fn checksum_text(checksum: &Checksum) -> String {
    format!("{}:{}", checksum.algorithm.name(), checksum.to_base64())
}

fn parse_checksum(text: &str) -> Option<Checksum> {
    let (name, value) = text.split_once(':')?;
    let algorithm: ChecksumAlgorithm = name.parse().ok()?;
    Checksum::from_base64(algorithm, value)
}

/// Carried bytes, stored as one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Segment {
    pub number: u32,
    pub len: u64,
    /// Random, in the object's name: a writer whose lock lapsed can never
    /// overwrite the segment a later writer recorded (records written before
    /// tags existed name `seg-N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

impl Segment {
    /// A new segment object's name and size.
    pub fn new(number: u32, len: u64) -> Segment {
        let tag = uuid::Uuid::new_v4().simple().to_string();
        Segment {
            number,
            len,
            tag: Some(tag[..12].to_owned()),
        }
    }
}

/// Most carried bytes kept in the record itself ([`Receiving::tail`]).
pub const TAIL_BYTES: usize = 8 << 10;

/// An upload receiving bytes: its multipart upload (started when the first part
/// is cut), the parts stored in it, and the bytes after the last part (fewer than
/// a part): in segment objects, then the newest few in the record itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Receiving {
    pub multipart_id: Option<String>,
    pub parts: Vec<StoredPart>,
    pub segments: Vec<Segment>,
    /// The number the next segment object gets.
    pub next_segment: u32,
    /// The carried bytes after the segments, while they are at most
    /// [`TAIL_BYTES`]: a small PATCH then writes no segment object (nor, later,
    /// merges and deletes one), only the record it has to write anyway.
    pub tail: Bytes,
}

impl Receiving {
    /// Bytes carried: in segments and in the tail.
    pub fn carried(&self) -> u64 {
        self.segments.iter().map(|s| s.len).sum::<u64>() + self.tail.len() as u64
    }
}

/// An upload whose object is complete in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub etag: String,
    pub checksum: Option<Checksum>,
}

/// Where an upload is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Created; no byte stored yet, no multipart upload.
    Created,
    Receiving(Receiving),
    Finished(Finished),
    /// Ended by a request the protocol says ends it (an IETF draft append past
    /// the upload's length): its bytes are gone, every later request is
    /// answered 410 until the record expires and is swept.
    Invalid,
}

/// The stored record of one upload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StoredRecord", into = "StoredRecord")]
pub struct UploadRecord {
    /// The protocol's view: id, length, offset, metadata, concatenation, expiry.
    pub upload: Upload,
    /// The object the upload becomes.
    pub key: String,
    pub content_type: Option<String>,
    /// Who created the upload (the tenant), when the gateway knows.
    pub owner: Option<String>,
    /// The protocol it was created with, the only one that may continue it.
    pub protocol: Protocol,
    /// The digest the client asked the whole upload to be checked against,
    /// with the hash of the bytes committed so far.
    pub digest: Option<crate::Digesting>,
    pub phase: Phase,
}

/// The protocol of an upload: the same state behind either, but a client of
/// one cannot continue an upload of the other (their offsets and completion
/// rules are spoken differently).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// tus 1.0.
    #[default]
    Tus,
    /// The IETF draft "Resumable Uploads for HTTP".
    IetfDraft,
}

impl Protocol {
    fn is_tus(&self) -> bool {
        *self == Protocol::Tus
    }

    /// How a creation that carried every byte is announced.
    pub fn creation_kind(&self) -> UploadKind {
        match self {
            Protocol::Tus => UploadKind::TusCreation,
            Protocol::IetfDraft => UploadKind::ResumableCreation,
        }
    }

    /// How a write that brought the last byte is announced.
    pub fn append_kind(&self) -> UploadKind {
        match self {
            Protocol::Tus => UploadKind::TusPatch,
            Protocol::IetfDraft => UploadKind::ResumableAppend,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Protocol::Tus => "tus",
            Protocol::IetfDraft => "the IETF resumable-upload draft",
        }
    }
}

impl UploadRecord {
    /// Refuses a request of `protocol` on an upload made with the other one.
    pub fn check_protocol(&self, protocol: Protocol) -> Result<(), sluice_tus::TusError> {
        match self.protocol == protocol {
            true => Ok(()),
            false => Err(sluice_tus::TusError::OtherProtocol {
                created_with: self.protocol.name(),
            }),
        }
    }
}

/// The origin of a resumable upload's object: its id, tenant, content type and
/// text metadata.
pub(crate) fn origin(
    kind: UploadKind,
    id: &str,
    owner: &Option<String>,
    content_type: &Option<String>,
    metadata: &sluice_tus::Metadata,
) -> Arc<Origin> {
    let metadata = metadata
        .0
        .keys()
        .filter_map(|k| Some((k.clone(), metadata.text(k)?.to_owned())))
        .collect();
    Arc::new(Origin {
        kind,
        tenant: owner.clone(),
        upload_id: Some(id.to_owned()),
        content_type: content_type.clone(),
        metadata,
        ..Origin::default()
    })
}

impl UploadRecord {
    pub fn id(&self) -> &str {
        &self.upload.id
    }

    /// The origin of the object this upload becomes, as `kind`; none for a
    /// partial upload (its final upload is the object).
    pub fn origin(&self, kind: UploadKind) -> Option<Arc<Origin>> {
        if self.upload.concat == sluice_tus::Concat::Partial {
            return None;
        }
        Some(origin(
            kind,
            self.id(),
            &self.owner,
            &self.content_type,
            &self.upload.metadata,
        ))
    }

    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Finished(_))
    }

    /// Ended by a request the protocol says ends it (see [`Phase::Invalid`]).
    pub fn is_invalid(&self) -> bool {
        matches!(self.phase, Phase::Invalid)
    }

    /// Whether the object key holds the upload's id (the default key
    /// template's `{uuid}`): then no other upload writes to it.
    pub fn key_is_its_own(&self) -> bool {
        self.key.contains(self.id())
    }

    pub fn multipart_id(&self) -> Option<&str> {
        match &self.phase {
            Phase::Receiving(r) => r.multipart_id.as_deref(),
            _ => None,
        }
    }
}

/// The record as JSON: flat, with the phase named. Records written before phases
/// existed (no `phase`) are read by what they hold. A field this build does not
/// know makes the record unreadable rather than silently dropped by the next
/// write (a newer gateway's `tail` of carried bytes, say).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredRecord {
    upload: Upload,
    key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    #[serde(default, skip_serializing_if = "Protocol::is_tus")]
    protocol: Protocol,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    digest: Option<crate::Digesting>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    phase: Option<PhaseName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    multipart_id: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    parts: Vec<StoredPart>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    segments: Vec<Segment>,
    #[serde(default)]
    next_segment: u32,
    /// [`Receiving::tail`], base64.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    tail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    finished_etag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    checksum: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum PhaseName {
    Created,
    Receiving,
    Finished,
    Invalid,
}

impl TryFrom<StoredRecord> for UploadRecord {
    type Error = String;

    fn try_from(stored: StoredRecord) -> Result<Self, String> {
        let holds_bytes = stored.multipart_id.is_some()
            || !stored.parts.is_empty()
            || !stored.segments.is_empty()
            || !stored.tail.is_empty();
        let legacy = match (&stored.finished_etag, holds_bytes) {
            (Some(_), _) => PhaseName::Finished,
            (None, true) => PhaseName::Receiving,
            (None, false) => PhaseName::Created,
        };
        let name = stored.phase.unwrap_or(legacy);
        let phase = match name {
            PhaseName::Created => Phase::Created,
            PhaseName::Receiving => Phase::Receiving(Receiving {
                multipart_id: stored.multipart_id,
                parts: stored.parts,
                segments: stored.segments,
                next_segment: stored.next_segment,
                tail: BASE64
                    .decode(&stored.tail)
                    .map_err(|e| format!("the record's tail: {e}"))?
                    .into(),
            }),
            PhaseName::Finished => Phase::Finished(Finished {
                etag: stored
                    .finished_etag
                    .ok_or("a finished upload without its object's ETag")?,
                checksum: stored.checksum.as_deref().and_then(parse_checksum),
            }),
            PhaseName::Invalid => Phase::Invalid,
        };
        Ok(UploadRecord {
            upload: stored.upload,
            key: stored.key,
            content_type: stored.content_type,
            owner: stored.owner,
            protocol: stored.protocol,
            digest: stored.digest,
            phase,
        })
    }
}

impl From<UploadRecord> for StoredRecord {
    fn from(record: UploadRecord) -> Self {
        let mut stored = StoredRecord {
            upload: record.upload,
            key: record.key,
            content_type: record.content_type,
            owner: record.owner,
            protocol: record.protocol,
            digest: record.digest,
            phase: None,
            multipart_id: None,
            parts: Vec::new(),
            segments: Vec::new(),
            next_segment: 0,
            tail: String::new(),
            finished_etag: None,
            checksum: None,
        };
        stored.phase = Some(match record.phase {
            Phase::Created => PhaseName::Created,
            Phase::Receiving(r) => {
                stored.multipart_id = r.multipart_id;
                stored.parts = r.parts;
                stored.segments = r.segments;
                stored.next_segment = r.next_segment;
                stored.tail = BASE64.encode(&r.tail);
                PhaseName::Receiving
            }
            Phase::Finished(f) => {
                stored.finished_etag = Some(f.etag);
                stored.checksum = f.checksum.as_ref().map(checksum_text);
                PhaseName::Finished
            }
            Phase::Invalid => PhaseName::Invalid,
        });
        stored
    }
}

/// A record with the ETag it was read with.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub record: UploadRecord,
    pub etag: String,
}

/// Reads and writes records and segments, and remembers the records this
/// process wrote last (see `Held` in lib.rs).
#[derive(Clone, Debug)]
pub struct RecordStore {
    store: Arc<dyn ObjectStore>,
    written: Arc<Mutex<WrittenHere>>,
}

/// The records this process wrote last, by upload id, with about how many
/// bytes they hold; when that passes [`WrittenHere::MAX_BYTES`] everything is
/// forgotten (a forgotten record costs one read).
#[derive(Debug, Default)]
struct WrittenHere {
    records: HashMap<String, Loaded>,
    bytes: usize,
}

impl WrittenHere {
    const MAX_BYTES: usize = 16 << 20;

    fn size(loaded: &Loaded) -> usize {
        let carried = match &loaded.record.phase {
            Phase::Receiving(r) => r.parts.len() * 128 + r.segments.len() * 64 + r.tail.len(),
            _ => 0,
        };
        512 + loaded.record.key.len() + carried
    }
}

impl RecordStore {
    pub fn new(store: Arc<dyn ObjectStore>) -> RecordStore {
        RecordStore {
            store,
            written: Arc::default(),
        }
    }

    /// Upload `id`'s record as this process last wrote it, forgotten as it is
    /// taken: whoever takes it may change the record.
    pub fn written_here(&self, id: &str) -> Option<Loaded> {
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        let loaded = written.records.remove(id)?;
        written.bytes -= WrittenHere::size(&loaded);
        Some(loaded)
    }

    /// `loaded` is the record this process just wrote, under the upload's lock.
    pub fn remember_written(&self, loaded: &Loaded) {
        let size = WrittenHere::size(loaded);
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        if written.bytes + size > WrittenHere::MAX_BYTES {
            written.records.clear();
            written.bytes = 0;
        }
        if let Some(old) = written
            .records
            .insert(loaded.record.id().to_owned(), loaded.clone())
        {
            written.bytes -= WrittenHere::size(&old);
        }
        written.bytes += size;
    }

    pub async fn load(&self, id: &str) -> Result<Loaded, ResumableError> {
        if !valid_id(id) {
            return Err(ResumableError::not_found());
        }
        let (bytes, etag) = match read_object(self.store.as_ref(), &state_key(id)).await {
            Ok(found) => found,
            Err(e) if e.is_not_found() => return Err(ResumableError::not_found()),
            Err(e) => return Err(e.into()),
        };
        let record = serde_json::from_slice(&bytes)
            .map_err(|e| ResumableError::Corrupt(format!("record of {id}: {e}")))?;
        Ok(Loaded { record, etag })
    }

    /// Writes a new record; Conflict when one exists.
    pub async fn create(&self, record: &UploadRecord) -> Result<String, ResumableError> {
        self.write(record, WriteCondition::IfNoneMatch).await
    }

    /// Replaces the record read with `etag`; Conflict when it changed since.
    pub async fn replace(
        &self,
        record: &UploadRecord,
        etag: &str,
    ) -> Result<String, ResumableError> {
        self.write(record, WriteCondition::IfMatch(etag.to_owned()))
            .await
    }

    async fn write(
        &self,
        record: &UploadRecord,
        condition: WriteCondition,
    ) -> Result<String, ResumableError> {
        let json = serde_json::to_vec(record).expect("a record serialises");
        let mut request = PutRequest::new(state_key(record.id()), Body::Bytes(json.into()));
        request.content_type = Some("application/json".into());
        request.condition = Some(condition);
        match self.store.put_object(request).await {
            Ok(output) => Ok(output.etag),
            Err(StoreError::PreconditionFailed) => Err(ResumableError::Conflict),
            Err(e) => Err(e.into()),
        }
    }

    pub async fn write_segment(
        &self,
        id: &str,
        segment: &Segment,
        bytes: Vec<Bytes>,
    ) -> Result<(), StoreError> {
        let body = match bytes.len() {
            1 => Body::Bytes(bytes.into_iter().next().expect("one chunk")),
            _ => Body::Chunks(bytes.into()),
        };
        self.store
            .put_object(PutRequest::new(segment_key(id, segment), body))
            .await
            .map(|_| ())
    }

    pub async fn delete_segments(&self, id: &str, segments: &[Segment]) {
        for segment in segments {
            if let Err(error) = self.store.delete_object(&segment_key(id, segment)).await {
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
            // Segments first, then the record (so that a half-finished deletion is
            // found again), the lock last (so that no other request takes it midway).
            let mut objects = page.objects;
            objects.sort_by_key(|o| match o.key.rsplit('/').next() {
                Some("state") => 1,
                Some("lock") => 2,
                _ => 0,
            });
            for object in objects {
                self.store.delete_object(&object.key).await?;
            }
        }
    }
}

/// A small object's bytes and ETag (records, segments, locks).
pub(crate) async fn read_object(
    store: &dyn ObjectStore,
    key: &str,
) -> Result<(Bytes, String), StoreError> {
    let output = store.get_object(key, None).await?;
    let etag = output.meta.etag.clone();
    let mut buf = BytesMut::with_capacity(output.meta.size.min(1 << 20) as usize);
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
    use std::time::{Duration, UNIX_EPOCH};

    use sluice_tus::{Concat, Metadata};

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

    fn upload() -> Upload {
        Upload::new(
            new_id(),
            Some(10),
            Metadata::default(),
            Concat::None,
            UNIX_EPOCH,
            Duration::from_secs(60),
        )
    }

    #[test]
    fn every_phase_round_trips_through_json() {
        let phases = [
            Phase::Created,
            Phase::Receiving(Receiving {
                multipart_id: Some("mp".into()),
                parts: vec![StoredPart {
                    number: 1,
                    etag: "e".into(),
                    size: 5,
                    checksum: None,
                }],
                segments: vec![Segment::new(2, 3)],
                next_segment: 3,
                tail: Bytes::from_static(b"tail \x00\xff"),
            }),
            // Carried bytes in the tail alone: no multipart upload yet.
            Phase::Receiving(Receiving {
                tail: Bytes::from_static(b"x"),
                ..Receiving::default()
            }),
            Phase::Finished(Finished {
                etag: "e".into(),
                checksum: Some(ChecksumAlgorithm::Crc32c.checksum(b"abc")),
            }),
        ];
        for phase in phases {
            for protocol in [Protocol::Tus, Protocol::IetfDraft] {
                let record = UploadRecord {
                    upload: upload(),
                    key: "k".into(),
                    content_type: None,
                    owner: Some("tenant".into()),
                    protocol,
                    digest: None,
                    phase: phase.clone(),
                };
                let json = serde_json::to_string(&record).unwrap();
                assert_eq!(serde_json::from_str::<UploadRecord>(&json).unwrap(), record);
                // A tus record reads as before this field existed.
                assert_eq!(json.contains("protocol"), protocol != Protocol::Tus);
            }
        }
    }

    #[test]
    fn records_from_before_phases_are_read_by_what_they_hold() {
        let upload = serde_json::to_value(upload()).unwrap();
        let cases = [
            (serde_json::json!({"upload": upload, "key": "k"}), "created"),
            (
                serde_json::json!({"upload": upload, "key": "k", "multipart_id": "m", "parts": [], "segments": [], "next_segment": 0}),
                "receiving",
            ),
            (
                serde_json::json!({"upload": upload, "key": "k", "multipart_id": "m", "finished_etag": "e"}),
                "finished",
            ),
        ];
        for (json, expected) in cases {
            let record: UploadRecord = serde_json::from_value(json).unwrap();
            let got = match record.phase {
                Phase::Created => "created",
                Phase::Receiving(_) => "receiving",
                Phase::Finished(_) => "finished",
                Phase::Invalid => "invalid",
            };
            assert_eq!(got, expected);
        }
        let contradictory = serde_json::json!({"upload": upload, "key": "k", "phase": "finished"});
        assert!(serde_json::from_value::<UploadRecord>(contradictory).is_err());
        let from_a_newer_build = serde_json::json!({"upload": upload, "key": "k", "phase": "receiving", "carried_elsewhere": "?"});
        assert!(serde_json::from_value::<UploadRecord>(from_a_newer_build).is_err());
    }
}
