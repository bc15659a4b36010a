//! Moving the bytes of a resumable upload: creating an upload (a small one sent
//! whole, or an empty one, becomes its object at once), appending one request's
//! body at the upload's offset, and finishing the object in the request that
//! brings its last byte.
//!
//! A body is read up to what completes the next part. A part is cut when the
//! body fills it, or when the carried bytes and the body reach S3's 5 MiB
//! minimum (so a client sending 5 MiB chunks costs one part per PATCH), while
//! the parts left still fit in S3's 10,000. Otherwise the body's bytes are
//! carried and nothing else is read: appended to the record's tail while it
//! stays within [`TAIL_BYTES`] (a tiny PATCH then costs the lock and the record
//! write: three store requests, four when the record must be read, see
//! `Held` in lib.rs), else written with the tail as a new segment object
//! (segments are merged into one once there are [`MAX_SEGMENTS`]). When a part
//! can be cut, the carried segments are read (within the memory budget) and the
//! engine stores parts from "carried + body"; the multipart upload is started
//! then, and recorded before its first part, so that expiry can always abort it.
//!
//! Appending one body is `chunk`'s: planning, storing parts, committing.
//!
//! Progress is committed even when the body breaks off midway (that is what makes
//! the upload resumable), and while a long body is still arriving, as each part
//! lands (see `checkpoint`), so that a crash keeps what reached the bucket; a
//! chunk with an Upload-Checksum is all or nothing.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{self, BoxStream, StreamExt};
use sluice_store::UploadedPart;
use sluice_tus::checksum::ChunkHasher;
use sluice_tus::headers::PatchRequest;
use sluice_tus::upload::PatchPlan;
use sluice_tus::{Concat, Metadata, TusError, Upload, UploadChecksum};
use sluice_upload::{
    AppendRequest, HeadRequest, Making, TransferError, UploadKind, UploadOutcome, UploadRequest,
    UploadSource,
};

use crate::digest::Running;
use crate::error::ResumableError;
use crate::record::{
    upload_prefix, Finished, Loaded, Phase, Protocol, Receiving, Segment, StoredPart,
};
use crate::{Contention, Digesting, Resumable, UploadRecord, WantedDigest};

/// The length a request fixes: the one it names (tus's and the draft's
/// Upload-Length), or, for a completing body of known size, the offset where
/// that body ends; refused when the two disagree.
fn fixed_length(
    offset: u64,
    named: Option<u64>,
    chunk: Option<&Chunk>,
) -> Result<Option<u64>, TusError> {
    let ends_at = chunk
        .filter(|c| c.completes)
        .and_then(|c| c.declared)
        .map(|declared| offset.saturating_add(declared));
    match (named, ends_at) {
        (Some(length), Some(reached)) if length != reached => {
            Err(TusError::InconsistentLength { length, reached })
        }
        (named, ends_at) => Ok(named.or(ends_at)),
    }
}

/// Whether `chunks`, the whole upload, hash to its digest (true without one).
fn digest_matches(digest: Option<&Digesting>, chunks: &[Bytes]) -> Result<bool, ResumableError> {
    let Some(digesting) = digest else {
        return Ok(true);
    };
    let mut running: Running = digesting.running().map_err(ResumableError::Corrupt)?;
    chunks.iter().for_each(|c| running.update(c));
    Ok(digesting.matches(&running))
}

/// Segment objects an upload may have before they are merged into one.
pub const MAX_SEGMENTS: usize = 16;

/// A new upload, as the gateway names it.
#[derive(Debug, Clone)]
pub struct NewUpload {
    pub id: String,
    /// The object it becomes (ignored for a partial upload, whose bytes stay hidden).
    pub key: String,
    /// None while deferred.
    pub length: Option<u64>,
    pub metadata: Metadata,
    /// A partial upload of a later concatenation.
    pub partial: bool,
    pub content_type: Option<String>,
    pub owner: Option<String>,
    pub protocol: Protocol,
    /// The digest the whole upload must have (the draft's Repr-Digest).
    pub digest: Option<WantedDigest>,
}

/// One request's body.
pub struct Chunk {
    pub body: BoxStream<'static, io::Result<Bytes>>,
    /// Content-Length, when the request sent one.
    pub declared: Option<u64>,
    pub checksum: Option<UploadChecksum>,
    /// The body ends the upload: its length is the offset where the body
    /// ends (the draft's `Upload-Complete: ?1`; tus says so by Upload-Length).
    /// A body that breaks off ends nothing: what came is kept.
    pub completes: bool,
}

/// Why a body ended early: a newer request for its upload took over.
#[derive(Debug, thiserror::Error)]
#[error("a newer request for this upload took over; what arrived is kept")]
pub struct Superseded;

impl Chunk {
    /// The same chunk, its body broken off with [`Superseded`] once `let_go`
    /// is set (what arrived before is committed, as for a client gone).
    fn until_let_go(self, let_go: tokio::sync::watch::Receiver<bool>) -> Chunk {
        let body = stream::unfold(
            (self.body, let_go, false),
            |(mut body, mut let_go, ended)| async move {
                if ended {
                    return None;
                }
                let asked = async {
                    if let_go.wait_for(|asked| *asked).await.is_err() {
                        // The lock is gone with its holder: nobody can ask.
                        std::future::pending::<()>().await;
                    }
                };
                tokio::select! {
                    biased;
                    () = asked => Some((Err(io::Error::other(Superseded)), (body, let_go, true))),
                    next = body.next() => next.map(|item| (item, (body, let_go, false))),
                }
            },
        )
        .boxed();
        Chunk { body, ..self }
    }

    pub fn empty() -> Chunk {
        Chunk {
            body: stream::empty().boxed(),
            declared: Some(0),
            checksum: None,
            completes: false,
        }
    }
}

/// The upload after a request.
#[derive(Debug, Clone)]
pub struct Written {
    pub record: UploadRecord,
    /// Set when this request completed the object.
    pub finished: Option<UploadOutcome>,
}

impl Written {
    pub(crate) fn unchanged(record: UploadRecord) -> Written {
        Written {
            record,
            finished: None,
        }
    }
}

/// Times [`Resumable::abort_unless_recorded_later`] tries to read the record
/// once the store answers, before it leaves the multipart upload to the janitor.
const UNKNOWN_WRITE_LOOKS: u32 = 5;

/// True when a record write that failed with `error` certainly changed
/// nothing: refused for good. Not a 412: after a lost answer, the retrying
/// store reports its own landed write as one when it cannot read it back;
/// and a transient failure (or the breaker's refusal after one) may follow
/// an attempt that landed.
fn write_surely_failed(error: &ResumableError) -> bool {
    let refused_for_good = |e: &sluice_store::StoreError| {
        !e.is_transient() && !matches!(e, sluice_store::StoreError::PreconditionFailed)
    };
    match error {
        ResumableError::Store(error) => refused_for_good(error),
        ResumableError::Transfer(error) => error.store_error().is_some_and(refused_for_good),
        _ => false,
    }
}

impl Resumable {
    /// Creates an upload, with the first bytes when `chunk` carries some. An
    /// upload of length 0, or one sent whole at or under the threshold, becomes its
    /// object with one PutObject. A body longer than the upload creates nothing.
    /// When the body fails midway the upload still exists at the offset reached.
    pub async fn create(
        &self,
        new: NewUpload,
        chunk: Option<Chunk>,
    ) -> Result<Written, ResumableError> {
        let length = fixed_length(0, new.length, chunk.as_ref())?;
        let key = if new.partial {
            // A partial upload's bytes stay hidden until a final upload uses them.
            format!("{}partial", upload_prefix(&new.id))
        } else {
            // A key the store cannot hold is refused now, not after every byte.
            self.store.check_key(&new.key).await?;
            new.key
        };
        let concat = if new.partial {
            Concat::Partial
        } else {
            Concat::None
        };
        let upload = Upload::new(
            new.id.clone(),
            length,
            new.metadata,
            concat,
            self.clock.now(),
            self.config.expiry,
        );
        let mut record = UploadRecord {
            upload,
            key,
            content_type: new.content_type,
            owner: new.owner,
            protocol: new.protocol,
            digest: new.digest.as_ref().map(Digesting::new),
            phase: Phase::Created,
        };
        if let (Some(chunk), Some(length)) = (&chunk, length) {
            if chunk.declared.is_some_and(|n| n > length) {
                return Err(TusError::BeyondLength { length }.into());
            }
        }
        let whole_and_small = chunk.as_ref().is_some_and(|c| c.declared == length)
            && length.is_some_and(|l| l <= self.config.threshold);
        if length == Some(0) || whole_and_small {
            let length = length.expect("checked");
            return self
                .create_whole(record, chunk.unwrap_or_else(Chunk::empty), length)
                .await;
        }
        let etag = self.records.create(&record).await?;
        self.lock_hints.created(&new.id);
        let Some(chunk) = chunk else {
            return Ok(Written::unchanged(record));
        };
        let id = new.id;
        let patch = PatchRequest {
            offset: 0,
            body_length: chunk.declared,
            length,
            checksum: chunk.checksum.clone(),
        };
        let written = self
            .locked_with(&id, Contention::Refuse, |held| async {
                let plan =
                    record
                        .upload
                        .check_patch(&patch, self.clock.now(), self.config.max_size)?;
                let loaded = Loaded {
                    record: record.clone(),
                    etag,
                };
                let chunk = chunk.until_let_go(held.let_go);
                self.write_chunk(loaded, plan, chunk, record.protocol.creation_kind())
                    .await
            })
            .await;
        match written {
            Ok(written) => Ok(written),
            // The request itself was wrong: the upload it created goes again,
            // its multipart upload (if a part was cut) with it.
            Err(error @ ResumableError::Protocol(_)) => {
                match self.records.load(&id).await {
                    Ok(current) => self.remove(&current.record).await?,
                    // Removed already (a body whose digest did not match).
                    Err(gone) if gone.is_not_found() => {}
                    Err(other) => return Err(other),
                }
                Err(error)
            }
            Err(error) => {
                tracing::info!(upload_id = %id, error = %sluice_store::error_chain(&error), "creation-with-upload ended early; the client can resume");
                record = self.records.load(&id).await?.record;
                Ok(Written::unchanged(record))
            }
        }
    }

    /// An upload whose bytes all come with its creation (at most the threshold):
    /// read whole within the memory budget and checked against its
    /// Upload-Checksum before anything is written, then one PutObject and the
    /// record. A body that breaks off leaves an upload at offset 0 to resume.
    async fn create_whole(
        &self,
        mut record: UploadRecord,
        chunk: Chunk,
        length: u64,
    ) -> Result<Written, ResumableError> {
        let (check, body) = ChunkCheck::new(chunk.checksum, limited(chunk.body, length + 1));
        // Memory is taken at the first byte, for the whole body (one PUT).
        let head = self
            .engine
            .read_head(
                body,
                HeadRequest {
                    want: length + 1,
                    front: 0,
                    cut_at: None,
                },
            )
            .await;
        let reservation = head.memory;
        match head.error {
            Some(e) if is_overflow(&e) => return Err(TusError::BeyondLength { length }.into()),
            _ if head.len > length => return Err(TusError::BeyondLength { length }.into()),
            // Every byte is in (a failure after the last one does not matter).
            _ if head.len == length && !check.matches() => {
                return Err(TusError::ChecksumMismatch.into())
            }
            _ if head.len == length && !digest_matches(record.digest.as_ref(), &head.chunks)? => {
                let algorithm = record.digest.as_ref().map_or("", |d| d.algorithm.name());
                return Err(TusError::DigestMismatch { algorithm }.into());
            }
            _ if head.len == length => {}
            error => {
                // Cut short: nothing is stored, the client resumes from 0.
                let error = error.map(|e| sluice_store::error_chain(&e).to_string());
                tracing::info!(upload_id = %record.id(), error = error.as_deref().unwrap_or("the body ended early"), "creation-with-upload stored nothing; the client can resume from 0");
                self.records.create(&record).await?;
                return Ok(Written::unchanged(record));
            }
        }
        // The engine reserves what it buffers; no reservation is held while it waits.
        drop(reservation);
        let request = UploadRequest {
            key: record.key.clone(),
            content_type: record.content_type.clone(),
            origin: record.origin(record.protocol.creation_kind()),
            ..UploadRequest::default()
        };
        let source = UploadSource::Stream {
            stream: stream::iter(head.chunks.into_iter().map(Ok)).boxed(),
            length: Some(length),
        };
        let outcome = self.engine.upload(request, source).await?;
        record.upload.offset = length;
        record.phase = Phase::Finished(Finished {
            etag: outcome.etag.clone(),
            checksum: outcome.checksum,
        });
        self.records.create(&record).await?;
        Ok(Written {
            record,
            finished: Some(outcome),
        })
    }

    /// Appends `chunk` to upload `id` as `patch` describes, under the upload's lock.
    /// A request of one protocol never continues an upload of the other.
    pub async fn write(
        &self,
        id: &str,
        protocol: Protocol,
        patch: &PatchRequest,
        chunk: Chunk,
    ) -> Result<Written, ResumableError> {
        self.locked_with(id, Contention::of(protocol), |held| async move {
            let chunk = chunk.until_let_go(held.let_go);
            let loaded = match held.record {
                Some(loaded) => loaded,
                None => self.records.load(id).await?,
            };
            loaded.record.check_protocol(protocol)?;
            if held.holder_died {
                self.abort_strays(&loaded.record).await;
            }
            if loaded.record.is_invalid() {
                return Err(TusError::Gone.into());
            }
            // A body declared to end past the upload's known length, at the
            // upload's offset (one at another offset is only a stale client).
            let upload = &loaded.record.upload;
            let declared_past = upload.length.is_some_and(|length| {
                patch.offset == upload.offset
                    && chunk
                        .declared
                        .is_some_and(|n| upload.offset.saturating_add(n) > length)
            });
            let written = async {
                let patch = PatchRequest {
                    length: fixed_length(patch.offset, patch.length, Some(&chunk))?,
                    ..patch.clone()
                };
                let plan = loaded.record.upload.check_patch(
                    &patch,
                    self.clock.now(),
                    self.config.max_size,
                )?;
                if chunk.declared.is_some_and(|n| n > plan.max_body) {
                    return Err(self.beyond(&plan).into());
                }
                self.write_chunk(loaded, plan, chunk, protocol.append_kind())
                    .await
            }
            .await;
            let overran = match &written {
                Err(ResumableError::Protocol(TusError::BeyondLength { .. })) => true,
                Err(ResumableError::Protocol(_)) => declared_past,
                _ => false,
            };
            if overran && protocol == Protocol::IetfDraft {
                self.invalidate(id).await?;
            }
            written
        })
        .await
    }

    /// An upload of the IETF draft that an append tried to run past its known
    /// length (draft -11 §4.4.2: the request is rejected *and* the upload
    /// marked invalid). The record says so first (every later request is
    /// answered 410 until it expires); then its multipart upload is aborted
    /// and its carried bytes deleted (a crash in between leaves the multipart
    /// upload to the janitor: no record names it any more).
    async fn invalidate(&self, id: &str) -> Result<(), ResumableError> {
        let mut loaded = self.records.load(id).await?;
        let before = std::mem::replace(&mut loaded.record.phase, Phase::Invalid);
        loaded.etag = self.records.replace(&loaded.record, &loaded.etag).await?;
        self.records.remember_written(&loaded);
        tracing::info!(upload_id = %id, key = %loaded.record.key, "an append ran past the upload's length; the upload is invalid");
        if let Phase::Receiving(receiving) = before {
            if let Some(upload_id) = &receiving.multipart_id {
                if let Err(error) = self
                    .engine
                    .abort_multipart(&loaded.record.key, upload_id)
                    .await
                {
                    tracing::warn!(key = %loaded.record.key, %upload_id, error = %sluice_store::error_chain(&error), "could not abort an invalid upload's multipart upload; the janitor will");
                }
            }
            self.records.delete_segments(id, &receiving.segments).await;
        }
        Ok(())
    }

    pub(crate) fn beyond(&self, plan: &PatchPlan) -> TusError {
        match plan.length {
            Some(length) => TusError::BeyondLength { length },
            None => TusError::TooLarge {
                max: self.config.max_size,
            },
        }
    }

    /// Finishes an upload whose bytes are all in but whose object is missing
    /// (a record from before phases existed): the janitor's way out for it.
    pub(crate) async fn finish_stuck(&self, id: &str) -> Result<Written, ResumableError> {
        self.locked(id, async {
            let loaded = self.records.load(id).await?;
            let plan = PatchPlan {
                length: loaded.record.upload.length,
                max_body: 0,
            };
            self.write_chunk(loaded, plan, Chunk::empty(), UploadKind::TusRecovered)
                .await
        })
        .await
    }

    /// On a multipart upload found gone, the upload as [`Self::recover_completed`]
    /// finds it. On one the store can no longer complete (InvalidPart, with no
    /// object made), the upload begins again ([`Self::restart`]). Otherwise
    /// `error`.
    async fn recover_or(
        &self,
        loaded: &mut Loaded,
        error: TransferError,
        kind: UploadKind,
    ) -> Result<Written, ResumableError> {
        let broken = is_invalid_part(&error);
        if is_no_such_upload(&error) || broken {
            if let Some(written) = self.recover_completed(loaded, kind).await? {
                return Ok(written);
            }
        }
        if broken {
            let cause = sluice_store::error_chain(&error).to_string();
            return Err(self.restart(loaded, &cause).await);
        }
        Err(error.into())
    }

    /// An upload whose multipart upload the store can no longer complete
    /// (MinIO keeps one that answers InvalidPart to every completion when a
    /// completion stopped midway, as a gateway killed then leaves it, and
    /// makes no object): its parts cannot become the object, so the upload
    /// goes back to offset 0 and the multipart upload is aborted. The client,
    /// answered 409, asks for the offset and sends the bytes again, instead
    /// of meeting the same failure on every request until the upload expires.
    /// An upload of the IETF draft cannot go back (its offset must never
    /// decrease, and a server that lost state deactivates the upload): it is
    /// removed instead, answered 410, and its client starts a new one. The
    /// error to answer (or the one met on the way).
    pub(crate) async fn restart(&self, loaded: &mut Loaded, cause: &str) -> ResumableError {
        if loaded.record.protocol == Protocol::IetfDraft {
            tracing::warn!(upload_id = %loaded.record.id(), key = %loaded.record.key, error = %cause, "this upload cannot go on; removed");
            return match self.remove(&loaded.record).await {
                Ok(()) => TusError::Gone.into(),
                Err(error) => error,
            };
        }
        match self.restart_from_zero(loaded, cause).await {
            Ok(()) => ResumableError::Conflict,
            Err(error) => error,
        }
    }

    async fn restart_from_zero(
        &self,
        loaded: &mut Loaded,
        cause: &str,
    ) -> Result<(), ResumableError> {
        let Phase::Receiving(receiving) = &loaded.record.phase else {
            return Ok(());
        };
        let (multipart_id, segments) = (receiving.multipart_id.clone(), receiving.segments.clone());
        let record = &mut loaded.record;
        record.upload.offset = 0;
        record.phase = Phase::Created;
        if let Some(digesting) = &mut record.digest {
            digesting.restart();
        }
        loaded.etag = self.records.replace(record, &loaded.etag).await?;
        self.records.delete_segments(record.id(), &segments).await;
        if let Some(upload_id) = multipart_id {
            if let Err(abort) = self.engine.abort_multipart(&record.key, &upload_id).await {
                tracing::warn!(key = %record.key, %upload_id, error = %sluice_store::error_chain(&abort), "could not abort a multipart upload the store cannot complete; the janitor will");
            }
        }
        tracing::warn!(upload_id = %record.id(), key = %record.key, error = %cause, "this upload starts again from offset 0");
        Ok(())
    }

    /// An upload whose bytes are all in but do not hash to the digest its
    /// client gave: it becomes no object, and is removed (its multipart upload
    /// aborted), as the draft says a failed digest makes a failed upload.
    pub(crate) async fn discard_mismatched(&self, record: &UploadRecord) -> ResumableError {
        let algorithm = record.digest.as_ref().map_or("", |d| d.algorithm.name());
        tracing::warn!(upload_id = %record.id(), key = %record.key, algorithm, "the upload's bytes do not match its digest; discarded");
        if let Err(error) = self.remove(record).await {
            return error;
        }
        TusError::DigestMismatch { algorithm }.into()
    }

    /// An upload whose multipart upload is gone although its record says it
    /// receives: a request completed the object and was stopped (client gone,
    /// store outage) before its record said so. When the object is there with the
    /// upload's length, written since the upload began, the upload is finished
    /// now (and this request reports the completion the stopped one could not).
    pub(crate) async fn recover_completed(
        &self,
        loaded: &mut Loaded,
        kind: UploadKind,
    ) -> Result<Option<Written>, ResumableError> {
        let record = &loaded.record;
        let Some(length) = record.upload.length else {
            return Ok(None);
        };
        let began = std::time::UNIX_EPOCH + std::time::Duration::from_secs(record.upload.created);
        let meta = match self.store.head_object(&record.key).await {
            Ok(meta) => meta,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if meta.size != length || meta.last_modified < began {
            return Ok(None);
        }
        let (segments, multipart_id) = match &record.phase {
            Phase::Receiving(receiving) => {
                (receiving.segments.clone(), receiving.multipart_id.clone())
            }
            _ => (Vec::new(), None),
        };
        let origin = record.origin(kind);
        let record = &mut loaded.record;
        record.upload.offset = length;
        record.phase = Phase::Finished(Finished {
            etag: meta.etag.clone(),
            checksum: meta.checksum,
        });
        loaded.etag = self.records.replace(record, &loaded.etag).await?;
        self.records.delete_segments(record.id(), &segments).await;
        tracing::info!(upload_id = %record.id(), key = %record.key, "found the object of an upload completed by an interrupted request");
        let outcome = UploadOutcome {
            key: record.key.clone(),
            size: length,
            etag: meta.etag,
            checksum: meta.checksum,
            parts: 0,
        };
        // The interrupted request wrote its intent before completing: this
        // announces the same completion (its event, once).
        if let (Some(origin), Some(upload_id)) = (origin, multipart_id) {
            self.engine
                .announce_found(&origin, &outcome, Making::Multipart { upload_id })
                .await;
        }
        Ok(Some(Written {
            record: loaded.record.clone(),
            finished: Some(outcome),
        }))
    }

    /// The carried bytes of an upload, in order: each segment read into a buffer
    /// of the memory budget's pool (the caller holds the reservation), then the
    /// record's tail.
    pub(crate) async fn read_carried(
        &self,
        id: &str,
        receiving: &Receiving,
    ) -> Result<Vec<Bytes>, ResumableError> {
        let mut out = self.read_segments(id, &receiving.segments).await?;
        out.extend((!receiving.tail.is_empty()).then(|| receiving.tail.clone()));
        Ok(out)
    }

    /// The bytes of `segments`, in order (see [`Self::read_carried`]).
    async fn read_segments(
        &self,
        id: &str,
        segments: &[Segment],
    ) -> Result<Vec<Bytes>, ResumableError> {
        let mut out = Vec::with_capacity(segments.len());
        for segment in segments {
            let output = self
                .store
                .get_object(&crate::record::segment_key(id, segment), None)
                .await?;
            let body = output.body.map(|r| r.map_err(io::Error::other)).boxed();
            let read = self.engine.read_up_to(body, segment.len + 1).await;
            if let Some(error) = read.error {
                return Err(sluice_store::StoreError::Body(error).into());
            }
            if read.bytes.len() as u64 != segment.len {
                return Err(ResumableError::Corrupt(format!(
                    "segment {} of {id} holds {} bytes, not {}",
                    segment.number,
                    read.bytes.len(),
                    segment.len
                )));
            }
            out.push(read.bytes);
        }
        Ok(out)
    }

    /// Starts the upload's multipart upload and records it before any part exists.
    pub(crate) async fn start_multipart(
        &self,
        loaded: &mut Loaded,
        receiving: &Receiving,
    ) -> Result<String, ResumableError> {
        let request = UploadRequest {
            key: loaded.record.key.clone(),
            content_type: loaded.record.content_type.clone(),
            ..UploadRequest::default()
        };
        let upload_id = self.engine.create_multipart(&request).await?;
        let mut record = loaded.record.clone();
        record.phase = Phase::Receiving(Receiving {
            multipart_id: Some(upload_id.clone()),
            ..receiving.clone()
        });
        match self.records.replace(&record, &loaded.etag).await {
            Ok(etag) => {
                loaded.etag = etag;
                loaded.record = record;
                Ok(upload_id)
            }
            Err(error) if write_surely_failed(&error) => {
                // Unrecorded, nobody would ever abort it: do it now.
                if let Err(abort) = self.engine.abort_multipart(&record.key, &upload_id).await {
                    tracing::warn!(key = %record.key, %upload_id, error = %sluice_store::error_chain(&abort), "could not abort an unrecorded multipart upload; the janitor will");
                }
                Err(error)
            }
            Err(error) => {
                self.abort_unless_recorded_later(
                    record.id().to_owned(),
                    record.key.clone(),
                    upload_id,
                );
                Err(error)
            }
        }
    }

    /// After a record write whose end nobody knows (the store failed or went
    /// down: the write may have landed): once the store answers, the record is
    /// read, and `upload_id` aborted unless the record names it. Aborting at
    /// once would break an upload whose record holds it; leaving it would leave
    /// it to the janitor's day-old sweep. In the background; a process that
    /// stops first leaves it to the janitor.
    fn abort_unless_recorded_later(&self, id: String, key: String, upload_id: String) {
        let (engine, records) = (self.engine.clone(), self.records.clone());
        self.engine.spawn_background(async move {
            for _ in 0..UNKNOWN_WRITE_LOOKS {
                if !engine.store_answers().await {
                    break;
                }
                let recorded = match records.load(&id).await {
                    Ok(loaded) => loaded.record.multipart_id() == Some(upload_id.as_str()),
                    Err(ResumableError::Protocol(TusError::NotFound)) => false,
                    Err(error) => {
                        tracing::debug!(upload_id = %id, error = %sluice_store::error_chain(&error), "the record does not read yet");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                if recorded {
                    tracing::info!(upload_id = %id, %key, multipart_id = %upload_id, "a record write whose answer was lost had landed: its multipart upload stays");
                    return;
                }
                match engine.abort_multipart(&key, &upload_id).await {
                    Ok(_) => tracing::info!(upload_id = %id, %key, multipart_id = %upload_id, "aborted a multipart upload its record did not take"),
                    Err(error) => tracing::warn!(upload_id = %id, %key, multipart_id = %upload_id, error = %sluice_store::error_chain(&error), "could not abort an unrecorded multipart upload; the janitor will"),
                }
                return;
            }
            tracing::warn!(upload_id = %id, %key, multipart_id = %upload_id, "could not tell whether the record took this multipart upload; the janitor will");
        });
    }

    /// Merges every segment into one (the tail stays in the record); returns the
    /// segments it replaced.
    pub(crate) async fn merge_segments(
        &self,
        id: &str,
        receiving: &mut Receiving,
    ) -> Result<Vec<Segment>, ResumableError> {
        let in_segments = receiving.segments.iter().map(|s| s.len).sum();
        let _reservation = self.engine.budget().reserve(in_segments).await;
        let bytes = self.read_segments(id, &receiving.segments).await?;
        let merged = Segment::new(receiving.next_segment, in_segments);
        self.records.write_segment(id, &merged, bytes).await?;
        receiving.next_segment += 1;
        Ok(std::mem::replace(&mut receiving.segments, vec![merged]))
    }

    /// Completes the object from the parts stored before, the parts this request
    /// stored, and the bytes after them (with the carried segments when this
    /// request did not use them yet); then records it finished. Nothing is recorded
    /// when a step fails: the client sends the last chunk again.
    pub(crate) async fn finish(
        &self,
        mut loaded: Loaded,
        receiving: Receiving,
        stored: Vec<UploadedPart>,
        leftover: Vec<Bytes>,
        consumed_carried: bool,
        kind: UploadKind,
    ) -> Result<Written, ResumableError> {
        let id = loaded.record.id().to_owned();
        let origin = loaded.record.origin(kind);
        let record = &loaded.record;
        let length = record.upload.offset
            - if consumed_carried {
                receiving.carried()
            } else {
                0
            }
            + stored.iter().map(|p| p.size).sum::<u64>()
            + leftover.iter().map(|b| b.len() as u64).sum::<u64>();
        let mut tail = if consumed_carried {
            Vec::new()
        } else {
            // Counted while read; the engine reserves the part they go into.
            let _reservation = self.engine.budget().reserve(receiving.carried()).await;
            self.read_carried(&id, &receiving).await?
        };
        tail.extend(leftover);
        let outcome = match &receiving.multipart_id {
            None => {
                let request = UploadRequest {
                    key: record.key.clone(),
                    content_type: record.content_type.clone(),
                    origin,
                    ..UploadRequest::default()
                };
                let stream = stream::iter(tail.into_iter().map(Ok)).boxed();
                self.engine
                    .upload(
                        request,
                        UploadSource::Stream {
                            stream,
                            length: Some(length),
                        },
                    )
                    .await?
            }
            Some(upload_id) => {
                let mut parts: Vec<UploadedPart> = receiving
                    .parts
                    .iter()
                    .map(StoredPart::to_uploaded)
                    .collect();
                parts.extend(stored);
                if !tail.is_empty() {
                    let request = AppendRequest {
                        key: record.key.clone(),
                        upload_id: upload_id.clone(),
                        first_part: parts.len() as u32 + 1,
                        carried: tail,
                        part_size: self.part_size(Some(length)),
                        last: true,
                        remaining: None,
                        carried_memory: None,
                        parts_stored: None,
                    };
                    let empty = UploadSource::Stream {
                        stream: stream::empty().boxed(),
                        length: Some(0),
                    };
                    let appended = self.engine.append_parts(request, empty).await;
                    if let Some(error) = appended.error {
                        return self.recover_or(&mut loaded, error, kind).await;
                    }
                    parts.extend(appended.parts);
                }
                match self
                    .engine
                    .complete_multipart(&record.key, upload_id, parts, length, origin)
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(error) => return self.recover_or(&mut loaded, error, kind).await,
                }
            }
        };
        let record = &mut loaded.record;
        record.upload.length = Some(length);
        record.upload.offset = length;
        record.phase = Phase::Finished(Finished {
            etag: outcome.etag.clone(),
            checksum: outcome.checksum,
        });
        self.records.replace(record, &loaded.etag).await?;
        self.records.delete_segments(&id, &receiving.segments).await;
        tracing::info!(upload_id = %id, key = %loaded.record.key, size = length, "resumable upload finished");
        Ok(Written {
            record: loaded.record,
            finished: Some(outcome),
        })
    }
}

/// A completion the store refused with InvalidPart (not a part refused on
/// its way in, nor the engine's own check of a part's checksum).
fn is_invalid_part(error: &TransferError) -> bool {
    matches!(
        error,
        TransferError::Store {
            operation: "CompleteMultipartUpload",
            source: sluice_store::StoreError::InvalidPart(_),
        }
    )
}

pub(crate) fn is_no_such_upload(error: &TransferError) -> bool {
    matches!(
        error,
        TransferError::Store {
            source: sluice_store::StoreError::NoSuchUpload { .. },
            ..
        }
    )
}

/// A body that ran past what the request may carry.
#[derive(Debug, thiserror::Error)]
#[error("the body runs past what the upload may still take")]
pub(crate) struct Overflow;

pub(crate) fn is_overflow(error: &io::Error) -> bool {
    error.get_ref().is_some_and(|inner| inner.is::<Overflow>())
}

/// `body`, failing with [`Overflow`] once more than `max` bytes arrive, and
/// ending after its first error.
pub(crate) fn limited(
    body: BoxStream<'static, io::Result<Bytes>>,
    max: u64,
) -> BoxStream<'static, io::Result<Bytes>> {
    body.scan((0u64, false), move |(seen, done), item| {
        if *done {
            return futures::future::ready(None);
        }
        let item = match item {
            Ok(bytes) => {
                *seen += bytes.len() as u64;
                if *seen > max {
                    *done = true;
                    Err(io::Error::other(Overflow))
                } else {
                    Ok(bytes)
                }
            }
            Err(error) => {
                *done = true;
                Err(error)
            }
        };
        futures::future::ready(Some(item))
    })
    .boxed()
}

/// The checksum extension for one request body: hashes the body as it streams and
/// says afterwards whether it matched `Upload-Checksum` (no header: always).
pub(crate) struct ChunkCheck {
    expected: Option<UploadChecksum>,
    hasher: Option<Arc<Mutex<ChunkHasher>>>,
}

impl ChunkCheck {
    /// Wraps `body` so that it is hashed as it is read.
    pub(crate) fn new(
        expected: Option<UploadChecksum>,
        body: BoxStream<'static, io::Result<Bytes>>,
    ) -> (ChunkCheck, BoxStream<'static, io::Result<Bytes>>) {
        let hasher = expected.as_ref().map(|c| Arc::new(Mutex::new(c.hasher())));
        let body = match &hasher {
            Some(h) => {
                let h = h.clone();
                body.map(move |item| {
                    if let Ok(bytes) = &item {
                        h.lock().expect("hasher").update(bytes);
                    }
                    item
                })
                .boxed()
            }
            None => body,
        };
        (ChunkCheck { expected, hasher }, body)
    }

    /// Whether the chunk must be all or nothing (a checksum was sent).
    pub(crate) fn required(&self) -> bool {
        self.expected.is_some()
    }

    /// Whether the bytes read so far match.
    pub(crate) fn matches(&self) -> bool {
        match (&self.expected, &self.hasher) {
            (Some(expected), Some(h)) => expected.matches(h.lock().expect("hasher").clone()),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PATCH of `data[from..to]` at offset `from`, in one piece, without
    /// a checksum.
    fn patch_of(data: &Bytes, from: usize, to: usize, completes: bool) -> (PatchRequest, Chunk) {
        let body = data.slice(from..to);
        let request = PatchRequest {
            offset: from as u64,
            body_length: Some(body.len() as u64),
            length: None,
            checksum: None,
        };
        let chunk = Chunk {
            body: stream::iter([Ok(body.clone())]).boxed(),
            declared: Some(body.len() as u64),
            checksum: None,
            completes,
        };
        (request, chunk)
    }

    #[tokio::test]
    async fn limited_fails_past_its_maximum_and_then_ends() {
        let chunks = [Bytes::from_static(b"abc"), Bytes::from_static(b"de")];
        let cases: [(u64, &[bool]); 3] = [(5, &[true, true]), (4, &[true, false]), (2, &[false])];
        for (max, expected) in cases {
            let body = stream::iter(chunks.clone().map(Ok)).boxed();
            let got: Vec<bool> = limited(body, max).map(|item| item.is_ok()).collect().await;
            assert_eq!(got, expected, "max {max}");
        }
    }

    /// Seam bug: a gateway killed mid-completion leaves MinIO with a
    /// multipart upload that answers InvalidPart to every completion and no
    /// object; every later last PATCH of the tus upload then answered 502 until
    /// the upload expired. Now the upload starts again from offset 0 (the
    /// client is answered 409 and asks for the offset), its multipart upload
    /// aborted, and the bytes sent again make the object.
    #[tokio::test]
    async fn an_upload_the_store_cannot_complete_starts_again_from_zero() {
        use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};
        const MIB: usize = 1 << 20;
        let memory = MemoryStore::new();
        let faulty = FaultyStore::new(Arc::new(memory.clone())).inject(
            Op::Complete,
            None,
            Some(1),
            Fault::InvalidPart,
        );
        let engine =
            sluice_upload::Engine::new(Arc::new(faulty), sluice_upload::EngineConfig::default())
                .unwrap();
        let resumable = Resumable::new(
            engine,
            crate::ResumableConfig {
                part_size: 5 * MIB as u64,
                threshold: MIB as u64,
                ..crate::chunk::tests::gateway_defaults()
            },
        );
        let data: Bytes = (0..6 * MIB)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>()
            .into();
        let id =
            crate::chunk::tests::create_tus(&resumable, Some("restarted.bin"), data.len() as u64)
                .await;
        let patch = |from: usize, to: usize| patch_of(&data, from, to, false);
        let send = |from: usize, to: usize| {
            let (request, chunk) = patch(from, to);
            let resumable = &resumable;
            let id = &id;
            async move { resumable.write(id, Protocol::Tus, &request, chunk).await }
        };
        send(0, 5 * MIB).await.unwrap();
        assert_eq!(memory.open_uploads(), 1);
        let refused = send(5 * MIB, 6 * MIB).await.unwrap_err();
        assert!(matches!(refused, ResumableError::Conflict), "{refused:?}");
        let status = resumable.status(&id).await.unwrap();
        assert_eq!(status.upload.offset, 0);
        assert_eq!(memory.open_uploads(), 0, "the broken upload is aborted");
        assert!(memory.object("restarted.bin").is_none());
        // The client sends every byte again.
        send(0, 5 * MIB).await.unwrap();
        let finished = send(5 * MIB, 6 * MIB).await.unwrap();
        assert!(finished.finished.is_some());
        assert_eq!(memory.object("restarted.bin").as_deref(), Some(&data[..]));
        assert_eq!(memory.open_uploads(), 0);
    }

    #[tokio::test]
    async fn head_stops_at_room_and_keeps_the_rest() {
        let engine = sluice_upload::Engine::new(
            std::sync::Arc::new(sluice_testkit::MemoryStore::new()),
            sluice_upload::EngineConfig::default(),
        )
        .unwrap();
        let body = || {
            stream::iter([Bytes::from_static(b"abcd"), Bytes::from_static(b"efgh")].map(Ok)).boxed()
        };
        // (room, the head's bytes, the rest of the body)
        type Case = (u64, &'static [u8], &'static [u8]);
        let cases: [Case; 4] = [
            (2, b"ab", b"cdefgh"),
            (4, b"abcd", b"efgh"),
            (6, b"abcdef", b"gh"),
            (20, b"abcdefgh", b""),
        ];
        for (room, chunks, rest) in cases {
            let request = HeadRequest {
                want: room,
                front: 0,
                cut_at: Some(sluice_store::limits::MIN_PART_SIZE),
            };
            let head = engine.read_head(body(), request).await;
            assert_eq!(head.chunks.concat(), chunks, "room {room}");
            assert_eq!(head.len, chunks.len() as u64);
            assert_eq!(head.memory.bytes(), head.len.div_ceil(1024) * 1024);
            let tail: Vec<Bytes> = head.rest.map(|c| c.unwrap()).collect().await;
            assert_eq!(tail.concat(), rest, "room {room}");
        }
    }

    /// A chaos run saw one tus upload of 6.1 MB, sent in one PATCH, fail once
    /// with a store error and then fail every time it was sent again. Here a
    /// single fault hits each store request of that PATCH in turn; the client
    /// then asks for the offset and sends the rest again, as tus clients do,
    /// and the object must come out whole within a few tries. In memory, and
    /// on MinIO (whose answers to parts and completions sent again are its
    /// own).
    #[tokio::test(start_paused = true)]
    async fn one_failed_request_of_a_patch_does_not_stop_the_retries_in_memory() {
        let memory = sluice_testkit::MemoryStore::new();
        let read = memory.clone();
        one_failed_request_of_a_patch(Arc::new(memory), move |key| {
            let read = read.clone();
            async move { read.object(&key).map(|b| b.to_vec()) }
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_failed_request_of_a_patch_does_not_stop_the_retries_on_minio() {
        let Some(store) = sluice_testkit::minio::store("resumable-one-fault").await else {
            return;
        };
        let store: Arc<dyn sluice_store::ObjectStore> = Arc::new(store);
        let read = store.clone();
        one_failed_request_of_a_patch(store, move |key| {
            let read = read.clone();
            async move {
                let got = read.get_object(&key, None).await.ok()?;
                let chunks: Vec<Bytes> = got.body.map(|c| c.unwrap()).collect().await;
                Some(chunks.concat())
            }
        })
        .await;
    }

    async fn one_failed_request_of_a_patch<F, R>(store: Arc<dyn sluice_store::ObjectStore>, read: F)
    where
        F: Fn(String) -> R,
        R: std::future::Future<Output = Option<Vec<u8>>>,
    {
        use sluice_testkit::{Fault, FaultyStore, Op};
        let ops = [
            Op::Put,
            Op::Get,
            Op::Head,
            Op::Create,
            Op::UploadPart,
            Op::Complete,
            Op::List,
        ];
        let faults = [
            Fault::Denied,
            Fault::ServerError,
            Fault::AnswerLost,
            Fault::LandsThenRefused,
        ];
        let data: Bytes = (0..6_132_791u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect::<Vec<u8>>()
            .into();
        let mut case = 0;
        for op in ops {
            for fault in faults {
                for nth in 1..=2u32 {
                    case += 1;
                    let key = format!("once-{case}.bin");
                    let faulty = FaultyStore::new(store.clone());
                    let engine = sluice_upload::Engine::new(
                        Arc::new(faulty.clone()),
                        sluice_upload::EngineConfig::default(),
                    )
                    .unwrap();
                    // On tokio's paused time: a client waits out a lock's
                    // lease (a 423's Retry-After) at once.
                    let resumable = Resumable::new(engine, crate::chunk::tests::gateway_defaults())
                        .with_clock(Arc::new(crate::TokioClock::now_on_tokio()));
                    let id =
                        crate::chunk::tests::create_tus(&resumable, Some(&key), data.len() as u64)
                            .await;
                    // The fault hits the nth request of this kind from here on.
                    faulty.inject_nth(op, nth, fault);
                    let mut done = false;
                    let mut said = Vec::new();
                    for _try in 0..4 {
                        let offset = match resumable.status(&id).await {
                            Ok(record) => record.upload.offset as usize,
                            Err(e) => {
                                said.push(format!("HEAD: {e}"));
                                continue;
                            }
                        };
                        let (request, chunk) = patch_of(&data, offset, data.len(), true);
                        let mut wait = std::time::Duration::from_millis(200);
                        match resumable.write(&id, Protocol::Tus, &request, chunk).await {
                            // Finished now, or found finished (an answer lost
                            // after it was): the offset is the length.
                            Ok(written) if written.record.upload.offset == data.len() as u64 => {
                                done = true;
                                break;
                            }
                            Ok(_) => said.push(format!("PATCH at {offset}: not finished")),
                            Err(e) => {
                                // As tus clients do: a 423 is retried when it
                                // says (a lock whose release was lost lapses).
                                if let ResumableError::Locked { retry_after } = &e {
                                    wait = *retry_after;
                                }
                                said.push(format!("PATCH at {offset}: {e}"));
                            }
                        }
                        tokio::time::sleep(wait).await;
                    }
                    assert!(done, "{fault:?} on {op:?} #{nth}: never finished: {said:?}");
                    assert!(
                        read(key.clone()).await.as_deref() == Some(&data[..]),
                        "{fault:?} on {op:?} #{nth}: the object differs"
                    );
                }
            }
        }
    }
}
