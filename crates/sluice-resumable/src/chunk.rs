//! One request's body appended at the upload's offset, in three steps:
//!
//! 1. **planning** ([`ChunkLayout`], no I/O): where the next part starts (the
//!    first carried byte), how big it is, how much of the body completes it,
//!    and whether what came is cut as a part or carried;
//! 2. **storing** ([`Resumable::store_chunk`]): the head of the body read up to
//!    the next part; when a part is cut, the multipart upload started (and
//!    recorded) if need be, the carried segments read, and parts stored by the
//!    engine, each recorded as it lands (see `checkpoint`); else the head is
//!    carried;
//! 3. **committing** ([`Resumable::commit_chunk`]): what the request comes to
//!    (kept or refused whole: an overflow, a checksum not met), the object
//!    completed when every byte is in, else the new carried bytes written and
//!    the record that names them.
//!
//! The module documentation of `write` says why parts are cut where they are.

use std::io;

use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use sluice_store::{limits, UploadedPart};
use sluice_tus::upload::PatchPlan;
use sluice_tus::TusError;
use sluice_upload::{
    AppendRequest, HeadRequest, HeldMemory, TransferError, UploadKind, UploadSource,
};

use crate::checkpoint::Checkpoints;
use crate::digest::Feed;
use crate::error::ResumableError;
use crate::record::{Loaded, Phase, Receiving, Segment, StoredPart, TAIL_BYTES};
use crate::write::{
    is_no_such_upload, is_overflow, limited, Chunk, ChunkCheck, Written, MAX_SEGMENTS,
};
use crate::Resumable;

/// Where one chunk's bytes go, from the record alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkLayout {
    /// The upload's offset before the chunk.
    pub offset: u64,
    /// Bytes carried from earlier requests (segments and tail), in front of the body.
    pub carried: u64,
    pub part_size: u64,
    /// Body bytes that complete the next part (at least 1).
    pub room: u64,
    /// The number of the next part.
    pub first_part: u32,
    /// Parts already stored.
    pub parts: u64,
    /// From the first carried byte to the end of the object, when its length is known.
    pub remaining: Option<u64>,
    /// The fewest bytes the head may stop at when memory is short.
    pub cut_at: u64,
    /// The object's length, when known.
    pub length: Option<u64>,
}

impl ChunkLayout {
    /// The layout of a chunk at `offset` of an upload `receiving` as it is,
    /// of `length` when known, in parts of `part_size`.
    pub fn of(receiving: &Receiving, offset: u64, length: Option<u64>, part_size: u64) -> Self {
        let carried = receiving.carried();
        let first_part = receiving.parts.len() as u32 + 1;
        let remaining = length.map(|length| length - (offset - carried));
        ChunkLayout {
            offset,
            carried,
            part_size,
            room: part_size.saturating_sub(carried).max(1),
            first_part,
            parts: receiving.parts.len() as u64,
            remaining,
            cut_at: remaining.map_or(limits::MIN_PART_SIZE, |remaining| {
                sluice_upload::cut_floor(remaining, first_part, part_size)
            }),
            length,
        }
    }

    /// Whether a head of `head` body bytes is cut as a part: when it fills
    /// one, and also when the carried bytes and the head make S3's 5 MiB
    /// minimum (clients that send 5 MiB chunks then cost one part per PATCH
    /// and no segments), as long as the parts left still fit in S3's 10,000.
    pub fn cuts_a_part(&self, head: u64) -> bool {
        let fits_early = match self.length {
            Some(length) => {
                let after = self.offset + head;
                self.parts + 1 + length.saturating_sub(after).div_ceil(self.part_size)
                    <= limits::MAX_PARTS as u64
            }
            None => true,
        };
        head >= self.room || (fits_early && self.carried + head >= limits::MIN_PART_SIZE)
    }

    /// The offset once `kept` bytes are in: counted from the first carried
    /// byte when the parts stored consumed the carried ones.
    pub fn offset_after(&self, kept: u64, consumed_carried: bool) -> u64 {
        match consumed_carried {
            true => self.offset - self.carried + kept,
            false => self.offset + kept,
        }
    }
}

/// What reading (and perhaps storing) one chunk came to, nothing committed yet.
pub(crate) struct StoredChunk {
    /// Parts stored, numbered on from the layout's first part without a gap.
    pub parts: Vec<UploadedPart>,
    /// Bytes after the last part, to be carried.
    pub leftover: Vec<Bytes>,
    /// The memory holding them, until they are written.
    pub _leftover_memory: Option<HeldMemory>,
    /// The carried bytes went into the first part (a part was cut).
    pub consumed_carried: bool,
    /// The body broke off (or ran past its maximum).
    pub failure: Option<io::Error>,
    /// A part could not be stored.
    pub part_error: Option<TransferError>,
}

impl StoredChunk {
    /// Bytes the parts and the leftover hold.
    fn kept(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum::<u64>()
            + self.leftover.iter().map(|b| b.len() as u64).sum::<u64>()
    }
}

impl Resumable {
    /// Appends one body (already checked against the record as `plan`) at the
    /// record's offset: the three steps of the module documentation.
    pub(crate) async fn write_chunk(
        &self,
        mut loaded: Loaded,
        plan: PatchPlan,
        chunk: Chunk,
        kind: UploadKind,
    ) -> Result<Written, ResumableError> {
        let mut receiving = match &loaded.record.phase {
            Phase::Created => Receiving::default(),
            Phase::Receiving(receiving) => receiving.clone(),
            Phase::Finished(_) => return Ok(Written::unchanged(loaded.record)),
            Phase::Invalid => return Err(TusError::Gone.into()),
        };
        let completes = chunk.completes;
        let (check, body) = ChunkCheck::new(chunk.checksum, limited(chunk.body, plan.max_body));
        // The body hashed as it is read, when the upload is to be checked.
        let (feed, body) = match &loaded.record.digest {
            Some(digesting) => {
                let running = digesting.running().map_err(ResumableError::Corrupt)?;
                let (feed, body) = Feed::wrap(running, body);
                (Some(feed), body)
            }
            None => (None, body),
        };
        let layout = ChunkLayout::of(
            &receiving,
            loaded.record.upload.offset,
            plan.length,
            self.part_size(plan.length),
        );
        // Parts are recorded as they land when their bytes would be kept on a
        // clean break anyway.
        let checkpointed = !check.required() && loaded.record.digest.is_none();
        let stored = self
            .store_chunk(&mut loaded, &mut receiving, &layout, body, checkpointed)
            .await?;
        let ending = ChunkEnding {
            check,
            feed,
            completes,
            kind,
        };
        self.commit_chunk(loaded, receiving, plan, layout, stored, ending)
            .await
    }

    /// Step 2: reads the head of `body` up to what completes the next part
    /// (its memory taken as its bytes arrive; when memory is short it stops
    /// at S3's 5 MiB minimum, as long as the parts left fit) and, when
    /// [`ChunkLayout::cuts_a_part`], stores the carried bytes, the head and
    /// the rest of the body as parts, recording them as they land when
    /// `checkpointed`. `loaded`'s ETag is the record's after it.
    pub(crate) async fn store_chunk(
        &self,
        loaded: &mut Loaded,
        receiving: &mut Receiving,
        layout: &ChunkLayout,
        body: BoxStream<'static, io::Result<Bytes>>,
        checkpointed: bool,
    ) -> Result<StoredChunk, ResumableError> {
        let head = self
            .engine
            .read_head(
                body,
                HeadRequest {
                    want: layout.room,
                    front: layout.carried,
                    cut_at: Some(layout.cut_at),
                },
            )
            .await;
        if !layout.cuts_a_part(head.len) || head.error.is_some() {
            return Ok(StoredChunk {
                parts: Vec::new(),
                leftover: head.chunks,
                _leftover_memory: Some(head.memory),
                consumed_carried: false,
                failure: head.error,
                part_error: None,
            });
        }
        let upload_id = match &receiving.multipart_id {
            Some(upload_id) => upload_id.clone(),
            None => {
                let upload_id = self.start_multipart(loaded, receiving).await?;
                receiving.multipart_id = Some(upload_id.clone());
                upload_id
            }
        };
        let id = loaded.record.id().to_owned();
        let mut front = self.read_carried(&id, receiving).await?;
        front.extend(head.chunks);
        let (parts_stored, landed) = tokio::sync::watch::channel(Vec::new());
        let mut checkpoints = Checkpoints::new(
            self,
            loaded,
            receiving,
            layout.first_part,
            layout.offset - layout.carried,
            layout.length,
        );
        let request = AppendRequest {
            key: loaded.record.key.clone(),
            upload_id,
            first_part: layout.first_part,
            carried: front,
            part_size: layout.part_size,
            last: false,
            remaining: layout.remaining,
            carried_memory: Some(head.memory),
            parts_stored: checkpointed.then_some(parts_stored),
        };
        let appending = self.engine.append_parts(
            request,
            UploadSource::Stream {
                stream: head.rest,
                length: None,
            },
        );
        let (mut appended, ()) = tokio::join!(appending, checkpoints.follow(landed));
        // The commit writes over the last checkpoint.
        loaded.etag = checkpoints.etag().to_owned();
        let (failure, part_error) = match appended.error.take() {
            Some(TransferError::Source(io)) => (Some(io), None),
            Some(other) => (None, Some(other)),
            None => (None, None),
        };
        Ok(StoredChunk {
            parts: std::mem::take(&mut appended.parts),
            leftover: std::mem::take(&mut appended.leftover),
            _leftover_memory: appended.leftover_memory.take(),
            consumed_carried: true,
            failure,
            part_error,
        })
    }

    /// Step 3: what the request comes to. Refused whole (nothing committed)
    /// when the body ran past its maximum or missed its Upload-Checksum; the
    /// object completed when every byte is in; else the new carried bytes
    /// written first, then the record that names them. A body that broke off
    /// keeps what came and answers its error.
    pub(crate) async fn commit_chunk(
        &self,
        mut loaded: Loaded,
        mut receiving: Receiving,
        mut plan: PatchPlan,
        layout: ChunkLayout,
        stored: StoredChunk,
        ending: ChunkEnding,
    ) -> Result<Written, ResumableError> {
        let ChunkEnding {
            check,
            feed,
            completes,
            kind,
        } = ending;
        if stored.part_error.as_ref().is_some_and(is_no_such_upload) {
            // The multipart upload is gone: completed by a request whose record
            // update was lost (then the object is there), or aborted.
            if let Some(written) = self.recover_completed(&mut loaded, kind).await? {
                return Ok(written);
            }
        }
        let kept = stored.kept();
        let StoredChunk {
            parts,
            leftover,
            consumed_carried,
            failure,
            part_error,
            ..
        } = stored;
        // What went wrong, and whether the progress made may be kept.
        let (error, keep) = match (failure, part_error) {
            (Some(io), _) if is_overflow(&io) => (Some(self.beyond(&plan).into()), false),
            (Some(io), _) => (Some(ResumableError::Body(io)), true),
            (None, Some(transfer)) => (Some(ResumableError::Transfer(transfer)), true),
            (None, None) => (None, true),
        };
        let (error, keep) = match (check.required(), error) {
            (true, Some(error)) => (Some(error), false),
            (true, None) if !check.matches() => (Some(TusError::ChecksumMismatch.into()), false),
            (_, error) => (error, keep),
        };
        if !keep {
            return Err(error.expect("only a failure discards progress"));
        }
        // The first part cut holds every carried byte: when it was not stored,
        // nothing moved and the carried segments stay as they are.
        if consumed_carried && parts.is_empty() {
            return match error {
                Some(error) => Err(error),
                None => Ok(Written::unchanged(loaded.record)),
            };
        }
        let offset = layout.offset;
        let new_offset = layout.offset_after(kept, consumed_carried);
        // A completing body that ended (not broke off) fixes the length where
        // it ended; one that ends short of a length already fixed is refused,
        // its bytes after the last part recorded midway not kept (parts
        // stored and not recorded are overwritten by the next ones).
        if completes && error.is_none() {
            match plan.length {
                None => plan.length = Some(new_offset),
                Some(length) if length != new_offset => {
                    return Err(TusError::InconsistentLength {
                        length,
                        reached: new_offset,
                    }
                    .into())
                }
                Some(_) => {}
            }
        }
        let length_set = loaded.record.upload.length != plan.length;
        // The hash of the committed bytes: every body byte hashed must be one
        // committed (a failed part loses the bytes after the stored ones, and
        // with them the hash's place: the upload then cannot be checked).
        let digested = match (&feed, &loaded.record.digest) {
            (Some(feed), _) if new_offset > offset => {
                let (running, hashed) = feed.taken();
                if hashed != new_offset - offset {
                    let cause = "the digest's hash lost its place after a failed part";
                    return Err(self.restart(&mut loaded, cause).await);
                }
                Some(running)
            }
            // Nothing new: the hash of the bytes committed before.
            (_, Some(digesting)) => Some(digesting.running().map_err(ResumableError::Corrupt)?),
            _ => None,
        };
        // Every byte is in (a body that failed after its last byte does not
        // matter): the object is completed before anything says so, once its
        // digest, when one was given, is the one given (also when the request
        // that completes it brings no byte).
        if plan.length == Some(new_offset) {
            if let (Some(digesting), Some(running)) = (&loaded.record.digest, &digested) {
                if !digesting.matches(running) {
                    return Err(self.discard_mismatched(&loaded.record).await);
                }
            }
            return self
                .finish(loaded, receiving, parts, leftover, consumed_carried, kind)
                .await;
        }
        if new_offset == offset && !length_set {
            return match error {
                Some(error) => Err(error),
                None => Ok(Written::unchanged(loaded.record)),
            };
        }

        // Commit: the new carried bytes first, then the record that names them.
        let id = loaded.record.id().to_owned();
        let mut retired = if consumed_carried {
            receiving.tail = Bytes::new();
            std::mem::take(&mut receiving.segments)
        } else {
            Vec::new()
        };
        receiving
            .parts
            .extend(parts.iter().map(StoredPart::from_uploaded));
        let leftover_len = leftover.iter().map(|b| b.len()).sum::<usize>();
        if receiving.tail.len() + leftover_len <= TAIL_BYTES {
            let mut tail = BytesMut::with_capacity(receiving.tail.len() + leftover_len);
            tail.extend_from_slice(&receiving.tail);
            leftover.iter().for_each(|b| tail.extend_from_slice(b));
            receiving.tail = tail.freeze();
        } else {
            // The tail goes first into the segment: carried bytes stay in order.
            let mut bytes = Vec::with_capacity(leftover.len() + 1);
            bytes.extend((!receiving.tail.is_empty()).then(|| std::mem::take(&mut receiving.tail)));
            bytes.extend(leftover);
            let segment = Segment::new(
                receiving.next_segment,
                (bytes.iter().map(|b| b.len()).sum::<usize>()) as u64,
            );
            // On failure the parts stored stay valid but unrecorded; the client resends.
            self.records.write_segment(&id, &segment, bytes).await?;
            receiving.segments.push(segment);
            receiving.next_segment += 1;
        }
        if receiving.segments.len() > MAX_SEGMENTS {
            retired.extend(self.merge_segments(&id, &mut receiving).await?);
        }
        let record = &mut loaded.record;
        if let (Some(digesting), Some(running)) = (&mut record.digest, &digested) {
            digesting.commit(running);
        }
        record.upload.length = plan.length;
        record.upload.offset = new_offset;
        record.upload.extend(self.clock.now(), self.config.expiry);
        record.phase = Phase::Receiving(receiving);
        loaded.etag = self.records.replace(record, &loaded.etag).await?;
        self.records.remember_written(&loaded);
        self.records.delete_segments(&id, &retired).await;
        tracing::debug!(upload_id = %id, offset = new_offset, "chunk committed");
        match error {
            Some(error) => Err(error),
            None => Ok(Written::unchanged(loaded.record)),
        }
    }
}

/// How a chunk is judged once read: its Upload-Checksum, the upload's
/// running digest, whether it completes the upload, and the kind of upload
/// its completion announces.
pub(crate) struct ChunkEnding {
    pub check: ChunkCheck,
    pub feed: Option<Feed>,
    pub completes: bool,
    pub kind: UploadKind,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn receiving(parts: usize, tail: usize) -> Receiving {
        Receiving {
            multipart_id: (parts > 0).then(|| "m".to_owned()),
            parts: (1..=parts as u32)
                .map(|number| StoredPart {
                    number,
                    etag: format!("e{number}"),
                    size: 16 * MIB,
                    checksum: None,
                })
                .collect(),
            tail: Bytes::from(vec![0; tail]),
            ..Receiving::default()
        }
    }

    /// (case, parts stored, carried, length, head, cut)
    type CutCase = (&'static str, usize, usize, Option<u64>, u64, bool);

    /// Planning, as a table.
    #[test]
    fn a_part_is_cut_when_the_head_fills_it_or_reaches_the_minimum() {
        let cases: [CutCase; 6] = [
            ("a full part", 0, 0, Some(64 * MIB), 16 * MIB, true),
            (
                "5 MiB, length known, parts to spare",
                0,
                0,
                Some(64 * MIB),
                5 * MIB,
                true,
            ),
            ("5 MiB, length unknown", 0, 0, None, 5 * MIB, true),
            (
                "short of the minimum",
                0,
                0,
                Some(64 * MIB),
                5 * MIB - 1,
                false,
            ),
            (
                "carried bytes make the minimum",
                1,
                4096,
                Some(64 * MIB),
                5 * MIB - 4096,
                true,
            ),
            ("nothing", 2, 0, None, 0, false),
        ];
        for (case, parts, tail, length, head, cut) in cases {
            let receiving = receiving(parts, tail);
            let offset = parts as u64 * 16 * MIB + tail as u64;
            let layout = ChunkLayout::of(&receiving, offset, length, 16 * MIB);
            assert_eq!(layout.first_part, parts as u32 + 1, "{case}");
            assert_eq!(layout.carried, tail as u64, "{case}");
            assert_eq!(layout.room, 16 * MIB - tail as u64, "{case}");
            assert_eq!(layout.cuts_a_part(head), cut, "{case}");
        }
    }

    #[test]
    fn the_new_offset_counts_from_the_first_carried_byte_once_they_are_consumed() {
        let layout = ChunkLayout::of(&receiving(1, 100), 16 * MIB + 100, None, 16 * MIB);
        assert_eq!(layout.offset_after(16 * MIB, true), 32 * MIB);
        assert_eq!(layout.offset_after(50, false), 16 * MIB + 150);
    }

    // The storing and committing steps against the memory store, on a paused clock.

    use std::sync::Arc;

    use futures::StreamExt as _;
    use sluice_store::ObjectStore;
    use sluice_testkit::{test_data, MemoryStore};
    use sluice_tus::Metadata;
    use sluice_upload::{Engine, EngineConfig};

    use crate::{NewUpload, Protocol, ResumableConfig, TokioClock};

    /// The gateway's defaults (docs/CONFIG.md), as the unit tests assume them.
    pub(crate) fn gateway_defaults() -> ResumableConfig {
        ResumableConfig {
            expiry: std::time::Duration::from_secs(24 * 3600),
            lock_lease: std::time::Duration::from_secs(6),
            max_size: limits::MAX_OBJECT_SIZE,
            part_size: 16 * MIB,
            threshold: 16 * MIB,
            max_partials: 1000,
        }
    }

    async fn fresh() -> (MemoryStore, Resumable, Loaded) {
        fresh_of(40 * MIB).await
    }

    pub(crate) async fn fresh_of(length: u64) -> (MemoryStore, Resumable, Loaded) {
        let memory = MemoryStore::new();
        let engine = Engine::new(Arc::new(memory.clone()), EngineConfig::default()).unwrap();
        let resumable = Resumable::new(engine, gateway_defaults())
            .with_clock(Arc::new(TokioClock::now_on_tokio()));
        let id = create_tus(&resumable, None, length).await;
        let loaded = resumable.records.load(&id).await.unwrap();
        (memory, resumable, loaded)
    }

    /// A new tus upload of `length` bytes at `key` (`objects/ID` when none);
    /// answers its id.
    pub(crate) async fn create_tus(
        resumable: &Resumable,
        key: Option<&str>,
        length: u64,
    ) -> String {
        let id = crate::new_id();
        let upload = NewUpload {
            key: key.map_or_else(|| format!("objects/{id}"), str::to_string),
            id: id.clone(),
            length: Some(length),
            metadata: Metadata::default(),
            partial: false,
            content_type: None,
            owner: None,
            protocol: Protocol::Tus,
            digest: None,
        };
        resumable.create(upload, None).await.unwrap();
        id
    }

    fn body(bytes: &[u8]) -> BoxStream<'static, io::Result<Bytes>> {
        let pieces: Vec<io::Result<Bytes>> = bytes
            .chunks(MIB as usize)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        futures::stream::iter(pieces).boxed()
    }

    fn plan(length: u64) -> PatchPlan {
        PatchPlan {
            length: Some(length),
            max_body: length,
        }
    }

    fn ending(kind: UploadKind) -> ChunkEnding {
        let (check, _) = ChunkCheck::new(None, futures::stream::empty().boxed());
        ChunkEnding {
            check,
            feed: None,
            completes: false,
            kind,
        }
    }

    /// Storing: a head short of S3's minimum is carried, nothing stored; a
    /// body past a part starts the multipart upload (recorded first), stores
    /// the full parts and records them as they land, and leaves the rest.
    #[tokio::test(start_paused = true)]
    async fn storing_carries_a_short_head_and_stores_and_records_full_parts() {
        let data = test_data(20 * MIB as usize, 5);
        let cases: [(&str, usize, usize, bool); 2] = [
            ("short", MIB as usize, 0, false),
            ("a part and more", 20 * MIB as usize, 1, true),
        ];
        for (case, len, parts, consumed) in cases {
            let (memory, resumable, mut loaded) = fresh().await;
            let mut receiving = Receiving::default();
            let layout = ChunkLayout::of(&receiving, 0, Some(40 * MIB), 16 * MIB);
            let stored = resumable
                .store_chunk(
                    &mut loaded,
                    &mut receiving,
                    &layout,
                    body(&data[..len]),
                    true,
                )
                .await
                .unwrap();
            assert_eq!(stored.parts.len(), parts, "{case}");
            assert_eq!(stored.consumed_carried, consumed, "{case}");
            assert_eq!(stored.kept(), len as u64, "{case}");
            assert!(
                stored.failure.is_none() && stored.part_error.is_none(),
                "{case}"
            );
            assert_eq!(memory.open_uploads(), parts, "{case}");
            // Recorded midway: the part, before any commit.
            let status = resumable.status(loaded.record.id()).await.unwrap();
            assert_eq!(status.upload.offset, parts as u64 * 16 * MIB, "{case}");
            assert_eq!(status.multipart_id().is_some(), consumed, "{case}");
        }
    }

    /// A body that brings every byte: its parts are stored, but no checkpoint
    /// names the last one (the record says "all bytes in" only once the
    /// commit has made the object).
    #[tokio::test(start_paused = true)]
    async fn no_checkpoint_names_the_last_byte() {
        let data = test_data(32 * MIB as usize, 7);
        let (memory, resumable, mut loaded) = fresh_of(32 * MIB).await;
        let mut receiving = Receiving::default();
        let layout = ChunkLayout::of(&receiving, 0, Some(32 * MIB), 16 * MIB);
        let stored = resumable
            .store_chunk(&mut loaded, &mut receiving, &layout, body(&data), true)
            .await
            .unwrap();
        assert_eq!(stored.parts.len(), 2);
        assert_eq!(memory.open_uploads(), 1);
        let status = resumable.status(loaded.record.id()).await.unwrap();
        assert_eq!(
            status.upload.offset,
            16 * MIB,
            "only the first part recorded"
        );
        let written = resumable
            .commit_chunk(
                loaded,
                receiving,
                plan(32 * MIB),
                layout,
                stored,
                ending(UploadKind::TusPatch),
            )
            .await
            .unwrap();
        assert!(written.finished.is_some());
        assert_eq!(memory.open_uploads(), 0);
    }

    /// Committing: what was stored becomes the record (the part, the rest
    /// carried in a segment); a body that ran past its maximum is refused
    /// whole and changes nothing.
    #[tokio::test(start_paused = true)]
    async fn committing_records_what_was_stored_or_refuses_an_overflow_whole() {
        let data = test_data(20 * MIB as usize, 6);
        for overflow in [false, true] {
            let (memory, resumable, mut loaded) = fresh().await;
            let mut receiving = Receiving::default();
            let layout = ChunkLayout::of(&receiving, 0, Some(40 * MIB), 16 * MIB);
            let mut stored = resumable
                .store_chunk(&mut loaded, &mut receiving, &layout, body(&data), true)
                .await
                .unwrap();
            if overflow {
                stored.failure = Some(io::Error::other(crate::write::Overflow));
            }
            let before = resumable.status(loaded.record.id()).await.unwrap();
            let id = loaded.record.id().to_owned();
            let written = resumable
                .commit_chunk(
                    loaded,
                    receiving,
                    plan(40 * MIB),
                    layout,
                    stored,
                    ending(UploadKind::TusPatch),
                )
                .await;
            let after = resumable.status(&id).await.unwrap();
            match overflow {
                true => {
                    assert!(
                        matches!(
                            written,
                            Err(ResumableError::Protocol(TusError::BeyondLength { .. }))
                        ),
                        "{written:?}"
                    );
                    assert_eq!(after, before, "nothing more committed");
                }
                false => {
                    let written = written.unwrap();
                    assert_eq!(written.record.upload.offset, 20 * MIB);
                    assert_eq!(after.upload.offset, 20 * MIB);
                    let Phase::Receiving(receiving) = &after.phase else {
                        panic!("{:?}", after.phase)
                    };
                    assert_eq!(receiving.parts.len(), 1);
                    assert_eq!(receiving.carried(), 4 * MIB);
                    assert_eq!(receiving.segments.len(), 1, "4 MiB is no tail");
                    let page = memory
                        .list_objects(&crate::record::upload_prefix(&id), None, 100)
                        .await
                        .unwrap();
                    assert!(page.objects.iter().any(|o| o.key.contains("/seg-")));
                }
            }
        }
    }
}
