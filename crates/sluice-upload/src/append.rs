//! Multipart uploads that outlive one request (resumable uploads). The caller keeps
//! the state between calls (upload id, parts so far, bytes carried over that were
//! too few for a part) wherever it likes; the engine creates the upload, appends
//! parts cut from a stream, and completes or aborts it. Appending never aborts: a
//! failed call reports the parts it did store so the caller can keep them.
//! Creating an upload (here for both kinds of multipart upload) cleans up after
//! an attempt whose answer was lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use std::io;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use sluice_store::*;
use tokio::io::AsyncReadExt;

use crate::announce::Origin;
use crate::budget::{MemoryShare, Reservation};
use crate::error::TransferError;
use crate::filling::{cut_floor, PieceEnd, PieceRules};
use crate::parts::PartPipeline;
use crate::progress::Tracker;
use crate::retry::Kind;
use crate::source::PartReader;
use crate::upload::Aborted;
use crate::{Engine, EngineInner, UploadOutcome, UploadRequest, UploadSource};

/// Aborts its multipart upload when dropped armed; see [`Engine::abort_on_drop`].
pub struct MultipartGuard(crate::upload::AbortGuard);

impl MultipartGuard {
    /// The upload completed: nothing to abort.
    pub fn disarm(mut self) {
        self.0.disarm();
    }

    /// Aborts now and waits for it.
    pub async fn abort(mut self) {
        self.0.abort_now().await;
    }
}

/// What [`Engine::read_up_to`] read.
pub struct ReadUpTo {
    pub bytes: Bytes,
    /// The stream after those bytes.
    pub rest: BoxStream<'static, io::Result<Bytes>>,
    /// Why reading stopped before `max`, when the stream failed.
    pub error: Option<io::Error>,
}

/// Parts' bytes as one body.
fn chunks_body(chunks: Vec<Bytes>) -> Body {
    match chunks.len() {
        1 => Body::Bytes(chunks.into_iter().next().expect("one chunk")),
        _ => Body::Chunks(chunks.into()),
    }
}

/// Memory held for bytes a caller keeps between engine calls (a body's head,
/// then the part it opens), with the share of the upload it belongs to.
#[derive(Debug)]
pub struct HeldMemory {
    share: MemoryShare,
    reservation: Reservation,
}

impl HeldMemory {
    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.reservation.bytes()
    }
}

/// What to read with [`Engine::read_head`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadRequest {
    /// Bytes to read at most.
    pub want: u64,
    /// Bytes the caller will put in front of the head (carried from earlier
    /// requests, not in memory yet): reserved with the head's first bytes.
    pub front: u64,
    /// `Some(n)`: the head may stop short when memory is short, once front and
    /// head hold `n` bytes (at least S3's minimum part size), to be sent as a part.
    /// `None`: the head is read whole (its memory is taken at its first byte).
    pub cut_at: Option<u64>,
}

/// The first bytes of a body, read by [`Engine::read_head`].
pub struct BodyHead {
    pub chunks: Vec<Bytes>,
    pub len: u64,
    /// Memory was short: the head stopped before `want` and the body goes on.
    pub cut: bool,
    /// Why reading stopped early, when the body failed.
    pub error: Option<io::Error>,
    /// The body after the head.
    pub rest: BoxStream<'static, io::Result<Bytes>>,
    /// The memory holding the head and its front.
    pub memory: HeldMemory,
}

/// One call's worth of appending.
#[derive(Debug)]
pub struct AppendRequest {
    pub key: String,
    pub upload_id: String,
    /// The number of the first part this call stores.
    pub first_part: u32,
    /// Bytes from earlier calls that go in front of the stream (fewer than a part).
    pub carried: Vec<Bytes>,
    /// Where parts are cut (at least [`limits::MIN_PART_SIZE`]).
    pub part_size: u64,
    /// The stream ends the object: its last bytes are stored as a (possibly short)
    /// last part instead of being carried.
    pub last: bool,
    /// Bytes from the first carried byte to the end of the object, when its
    /// length is known: parts are cut short (when memory is short) only while
    /// the rest still fits in S3's 10,000 parts of `part_size`.
    pub remaining: Option<u64>,
    /// The memory holding the carried bytes, if the caller has it.
    pub carried_memory: Option<HeldMemory>,
    /// Told of each part as the store takes it (in the order they land, which
    /// need not be their numbers'), so that the caller can record progress
    /// while the call still runs: what a crash then costs is the parts not yet
    /// recorded, not the whole call.
    pub parts_stored: Option<crate::parts::PartsStored>,
}

/// What one call stored.
#[derive(Debug)]
pub struct Appended {
    /// Parts stored, numbered on from `first_part` without gaps.
    pub parts: Vec<UploadedPart>,
    /// The bytes after the last part (the carried bytes too when no part was
    /// stored), fewer than [`limits::MIN_PART_SIZE`], for the next call. Empty
    /// after a failed part: the bytes after the stored parts are then lost and
    /// must be sent again.
    pub leftover: Vec<Bytes>,
    /// Bytes read from the stream.
    pub read: u64,
    /// The memory holding the leftover, to keep until it is stored.
    pub leftover_memory: Option<HeldMemory>,
    /// Why the call ended early, if it did (the stream failed or a part could not be stored).
    pub error: Option<TransferError>,
}

impl Appended {
    /// Bytes the parts and the leftover hold.
    pub fn kept(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum::<u64>()
            + self.leftover.iter().map(|b| b.len() as u64).sum::<u64>()
    }
}

/// After the store is back, how long until a lost creation is looked for again
/// (and five times that, a last time).
const LOST_CREATION_RECHECK: Duration = Duration::from_secs(5);

impl EngineInner {
    /// CreateMultipartUpload, retried. When an attempt may have reached the store
    /// but its answer was lost (a reset or a stall), that attempt may have created
    /// an upload nobody knows the id of: once the create succeeds, uploads of the
    /// same key started since, other than ours and still without parts, are aborted.
    pub(crate) async fn create_upload(
        &self,
        request: &UploadRequest,
    ) -> Result<String, TransferError> {
        let started = SystemTime::now();
        let answer_lost = AtomicBool::new(false);
        let upload_id = self
            .with_retries(
                Kind::Transfer,
                "CreateMultipartUpload",
                &request.key,
                || {
                    let create = self.store.create_multipart_upload(CreateMultipartRequest {
                        key: request.key.clone(),
                        content_type: request.content_type.clone(),
                        metadata: request.metadata.clone(),
                        settings: request.settings.clone(),
                        checksum_algorithm: self.config.checksum,
                    });
                    let answer_lost = &answer_lost;
                    async move {
                        let result = create.await;
                        if let Err(StoreError::Transport { .. } | StoreError::Stalled { .. }) =
                            &result
                        {
                            answer_lost.store(true, Ordering::Relaxed);
                        }
                        result
                    }
                },
            )
            .await;
        let upload_id = match upload_id {
            Ok(upload_id) => upload_id,
            Err(error) => {
                // A request the breaker cut off may have reached the store too.
                let cut_off = matches!(error.store_error(), Some(StoreError::Unavailable { .. }));
                if answer_lost.load(Ordering::Relaxed) || cut_off {
                    self.clean_up_lost_creations_later(&request.key, started);
                }
                return Err(error);
            }
        };
        if answer_lost.load(Ordering::Relaxed) {
            self.abort_lost_creations(&request.key, &upload_id, started)
                .await;
        }
        Ok(upload_id)
    }

    /// A creation failed after an attempt whose answer was lost (the store may
    /// still carry it out, as a frozen server does once it runs again): once the
    /// store answers, the uploads of the key started since are aborted, in the
    /// background. Only with a circuit breaker to say when the store is back.
    fn clean_up_lost_creations_later(&self, key: &str, since: SystemTime) {
        let (Some(breaker), Some(inner)) = (self.breaker.clone(), self.myself.upgrade()) else {
            return;
        };
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let key = key.to_owned();
        let cleanup = async move {
            tokio::select! {
                _ = breaker.wait_closed() => {}
                _ = inner.stopping.cancelled() => return,
            }
            // A store that held requests while it was down (a frozen server)
            // carries them out once it runs again, the creation among them,
            // perhaps only after a backlog: look a few times.
            for wait in [
                breaker.retry_after(),
                LOST_CREATION_RECHECK,
                5 * LOST_CREATION_RECHECK,
            ] {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = inner.stopping.cancelled() => return,
                }
                inner.abort_lost_creations(&key, "", since).await;
            }
        };
        self.background.spawn_on(cleanup, &handle);
    }

    async fn abort_lost_creations(&self, key: &str, ours: &str, since: SystemTime) {
        // Clocks of store and gateway may differ a little.
        let since = since - Duration::from_secs(60);
        let uploads = match self
            .with_retries(Kind::Cleanup, "ListMultipartUploads", key, || {
                self.store.list_multipart_uploads(key)
            })
            .await
        {
            Ok(uploads) => uploads,
            Err(error) => {
                tracing::warn!(%key, error = %sluice_store::error_chain(&error), "could not look for uploads a lost answer created; the janitor will");
                return;
            }
        };
        for upload in uploads {
            let recent = upload.initiated.is_some_and(|t| t >= since);
            if upload.key != key || upload.upload_id == ours || !recent {
                continue;
            }
            let parts = self
                .with_retries(Kind::Cleanup, "ListParts", key, || {
                    self.store.list_parts(key, &upload.upload_id)
                })
                .await;
            if !matches!(parts, Ok(parts) if parts.is_empty()) {
                continue;
            }
            match self
                .with_retries(Kind::Cleanup, "AbortMultipartUpload", key, || {
                    self.store.abort_multipart_upload(key, &upload.upload_id)
                })
                .await
            {
                Ok(()) => {
                    tracing::info!(%key, upload_id = %upload.upload_id, "aborted an upload created by an attempt whose answer was lost")
                }
                Err(error) => {
                    tracing::warn!(%key, upload_id = %upload.upload_id, error = %sluice_store::error_chain(&error), "could not abort an upload a lost answer created; the janitor will")
                }
            }
        }
    }
}

impl Engine {
    /// Starts a multipart upload for `request.key` and returns its id.
    pub async fn create_multipart(&self, request: &UploadRequest) -> Result<String, TransferError> {
        crate::validate_key(&request.key)?;
        self.inner.create_upload(request).await
    }

    /// Reads `source` after `request.carried`, stores each full part through the
    /// part pipeline (concurrently, within the memory budget) and returns what was
    /// stored and what is left over. Never aborts the upload: the caller owns it.
    pub async fn append_parts(&self, request: AppendRequest, source: UploadSource) -> Appended {
        let part_size = request.part_size.max(limits::MIN_PART_SIZE);
        let (share, mut held) = match request.carried_memory {
            Some(memory) => (memory.share, memory.reservation),
            None => {
                let share = self.upload_share();
                let nothing = share.nothing();
                (share, nothing)
            }
        };
        let mut buffer: Vec<Bytes> = request
            .carried
            .into_iter()
            .filter(|b| !b.is_empty())
            .collect();
        let mut reader = match source.into_part_reader() {
            Ok((reader, _)) => reader,
            Err(error) => {
                return Appended {
                    parts: Vec::new(),
                    leftover: buffer,
                    read: 0,
                    leftover_memory: Some(HeldMemory {
                        share,
                        reservation: held,
                    }),
                    error: Some(TransferError::Source(error)),
                }
            }
        };
        let mut buffered: u64 = buffer.iter().map(|b| b.len() as u64).sum();
        let mut number = request.first_part;
        let mut read = 0u64;
        let mut submitted = 0u64;
        let mut parts = PartPipeline::new(
            self.inner.clone(),
            &request.key,
            &request.upload_id,
            Tracker::new(None, None),
        );
        if let Some(stored) = request.parts_stored {
            parts.report_to(stored);
        }
        let mut error = None;
        let mut part_failed = false;
        loop {
            if !parts.wait_for_slot().await {
                part_failed = true;
                break;
            }
            let want = part_size.saturating_sub(buffered);
            let mut rules = PieceRules::part(want).after(buffered);
            if buffered >= limits::MIN_PART_SIZE {
                // What is buffered is a part already: send it rather than wait.
                rules = rules.without_waiting();
            }
            if let Some(remaining) = request.remaining {
                rules =
                    rules.cut_no_earlier_than(cut_floor(remaining - submitted, number, part_size));
            }
            let held_now = std::mem::replace(&mut held, share.nothing());
            let piece = reader.read_piece(&share, rules, held_now).await;
            read += piece.len;
            buffered += piece.len;
            buffer.extend(piece.chunks);
            held = piece.reservation;
            if let Some(e) = piece.error {
                error = Some(TransferError::Source(e));
                break;
            }
            if piece.end == PieceEnd::SourceEnded {
                break;
            }
            submitted += buffered;
            buffered = 0;
            let reservation = std::mem::replace(&mut held, share.nothing());
            parts.submit(
                number,
                chunks_body(std::mem::take(&mut buffer)),
                reservation,
            );
            number += 1;
        }
        // What is buffered becomes one more part when it may: always at the end of the
        // object, and whenever it reaches the minimum part size, also when the stream
        // failed (what arrived is kept). Not after a failed part: nothing follows it.
        let last = request.last && error.is_none();
        if !part_failed && buffered > 0 && (last || buffered >= limits::MIN_PART_SIZE) {
            if held.bytes() < buffered {
                // Carried bytes the caller brought without their memory.
                held.absorb(share.reserve(buffered - held.bytes()).await);
            }
            let reservation = std::mem::replace(&mut held, share.nothing());
            parts.submit(
                number,
                chunks_body(std::mem::take(&mut buffer)),
                reservation,
            );
        }
        let (parts, failed_part) = parts.finish(false).await;
        let leftover = match failed_part {
            Some(_) => Vec::new(),
            None => buffer,
        };
        Appended {
            parts,
            leftover,
            read,
            leftover_memory: Some(HeldMemory {
                share,
                reservation: held,
            }),
            error: error.or(failed_part),
        }
    }

    /// A share of the memory budget for one upload (or one request of a
    /// resumable upload), as the configuration sizes it.
    pub fn upload_share(&self) -> MemoryShare {
        self.inner.budget.share(self.inner.config.memory_share())
    }

    /// Reads the head of `body` into memory reserved as its bytes arrive (nothing
    /// before the first one), under a share of its own that an
    /// [`AppendRequest::carried_memory`] then carries on.
    pub async fn read_head(
        &self,
        body: BoxStream<'static, io::Result<Bytes>>,
        request: HeadRequest,
    ) -> BodyHead {
        let share = self.upload_share();
        let rules = match request.cut_at {
            Some(at) => PieceRules::part(request.want)
                .after(request.front)
                .cut_no_earlier_than(at),
            None => PieceRules::whole(request.want).after(request.front),
        };
        let mut stream = tokio_util::io::StreamReader::new(body);
        let piece = {
            let mut reader = PartReader::Async(Box::new(&mut stream));
            reader.read_piece(&share, rules, share.nothing()).await
        };
        // A body that ended (or failed) is not polled again.
        let rest = match piece.end {
            PieceEnd::SourceEnded => futures::stream::empty().boxed(),
            _ => {
                let (body, chunk) = stream.into_inner_with_chunk();
                futures::stream::iter(chunk.map(Ok)).chain(body).boxed()
            }
        };
        BodyHead {
            chunks: piece.chunks,
            len: piece.len,
            cut: piece.end == PieceEnd::Cut,
            error: piece.error,
            rest,
            memory: HeldMemory {
                share,
                reservation: piece.reservation,
            },
        }
    }

    /// Completes a multipart upload from all its parts (any order); `size` is the
    /// object's length, used to recognise a completion whose answer was lost.
    /// With an `origin`, the object is announced (see `announce`).
    pub async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<UploadedPart>,
        size: u64,
        origin: Option<Arc<Origin>>,
    ) -> Result<UploadOutcome, TransferError> {
        crate::upload::complete_parts(
            &self.inner,
            key,
            upload_id,
            parts,
            size,
            None,
            origin.as_ref(),
        )
        .await
    }

    /// Reads up to `max` bytes of `stream` into one buffer from the memory
    /// budget's pool (buffers of 1 MiB and more are reused, so bytes kept a while,
    /// such as a resumable upload's carried bytes, cost no fresh pages). Returns
    /// the bytes, the rest of the stream, and the error that stopped it early if
    /// any. The caller holds a reservation for `max`.
    pub async fn read_up_to(
        &self,
        stream: BoxStream<'static, io::Result<Bytes>>,
        max: u64,
    ) -> ReadUpTo {
        let mut reader = tokio_util::io::StreamReader::new(stream);
        let mut buf = self.inner.budget.buffer(max as usize);
        let mut error = None;
        let mut ended = false;
        {
            let vec = buf.as_vec_mut();
            while (vec.len() as u64) < max {
                let want = max - vec.len() as u64;
                match (&mut reader).take(want).read_buf(vec).await {
                    Ok(0) => {
                        ended = true;
                        break;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        error = Some(e);
                        ended = true;
                        break;
                    }
                }
            }
        }
        // A stream that ended (or failed) is not polled again.
        let rest = match ended {
            true => futures::stream::empty().boxed(),
            false => {
                let (stream, chunk) = reader.into_inner_with_chunk();
                futures::stream::iter(chunk.map(Ok)).chain(stream).boxed()
            }
        };
        ReadUpTo {
            bytes: buf.freeze(),
            rest,
            error,
        }
    }

    /// A guard that aborts multipart upload `upload_id` when dropped (in the
    /// background, tracked like the aborts of dropped uploads) unless
    /// [`MultipartGuard::disarm`]ed: for callers that drive a multipart upload
    /// themselves within one request.
    pub fn abort_on_drop(&self, key: &str, upload_id: &str) -> MultipartGuard {
        MultipartGuard(crate::upload::AbortGuard::new(
            self.inner.clone(),
            key.to_owned(),
            upload_id.to_owned(),
        ))
    }

    /// Aborts a multipart upload (a missing one counts as aborted), the same way
    /// a failed or dropped upload's guard does: while the store is down, the
    /// abort waits for its return in the background ([`Aborted::WhenTheStoreIsBack`]).
    pub async fn abort_multipart(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Aborted, TransferError> {
        crate::upload::abort_or_hand_over(self.inner.clone(), key.to_owned(), upload_id.to_owned())
            .await
    }
}
