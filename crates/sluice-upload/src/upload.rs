//! Uploads: one PUT at or under the threshold, otherwise a multipart upload whose
//! parts are read in order, under the memory budget, and sent concurrently. The
//! completion lists parts sorted by part number, and every multipart upload that
//! was started is aborted on any failure, or when the upload future is dropped
//! before its completion was sent (a completion already sent runs to its end,
//! see `ending`: the object is then made, as S3 does for a client that left).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use sluice_store::*;
use tracing::Instrument;

use crate::announce::{put_nonce, Announcement, Intent, Making, Origin};
use crate::budget::Reservation;
use crate::config::{validate_key, PartPlan, MIB};
use crate::error::{ConfigError, TransferError};
use crate::file_stamp::FileStamp;
use crate::filling::{cut_floor, Piece, PieceEnd, PieceRules};
pub use crate::outcome::UploadOutcome;
use crate::parts::PartPipeline;
use crate::progress::{ProgressFn, Tracker};
use crate::retry::{InFlight, Kind};
use crate::source::{PartReader, UploadSource};
use crate::tuning::TransferSlot;
use crate::{Engine, EngineInner};

/// Budget held per in-flight part of a file upload: the part streams from disk, so
/// only read buffers are in memory.
const FILE_PART_RESERVATION: u64 = MIB;
/// Buffers checksummed on a blocking thread rather than inline.
const INLINE_CHECKSUM_LIMIT: usize = 256 * 1024;

/// What to upload to, besides the bytes.
#[derive(Clone, Default)]
pub struct UploadRequest {
    pub key: String,
    pub content_type: Option<String>,
    pub metadata: Metadata,
    /// Headers, storage class, ACL and encryption of the object made.
    pub settings: ObjectSettings,
    pub progress: Option<ProgressFn>,
    /// `IfNoneMatch` refuses to overwrite, atomically: on the single PUT, or on
    /// the completion of a multipart upload (checked before the first part too,
    /// to fail early); the loser of a race gets `PreconditionFailed` and its
    /// multipart upload is aborted.
    pub condition: Option<WriteCondition>,
    /// Where the upload came from: the object it makes is announced (see
    /// `announce`); none for uploads nobody listens for.
    pub origin: Option<Arc<Origin>>,
}

impl UploadRequest {
    pub fn new(key: impl Into<String>) -> Self {
        UploadRequest {
            key: key.into(),
            ..Default::default()
        }
    }
}

impl Engine {
    /// Uploads `source` to `request.key`. Dropping the returned future aborts a
    /// multipart upload in progress (in the background; see
    /// [`Engine::finish_background`]), unless its completion was already sent.
    pub async fn upload(
        &self,
        request: UploadRequest,
        source: UploadSource,
    ) -> Result<UploadOutcome, TransferError> {
        validate_key(&request.key)?;
        let span = tracing::info_span!("upload", key = %request.key);
        async move {
            if request.condition == Some(WriteCondition::IfNoneMatch) {
                let inner = &self.inner;
                let existing = inner
                    .with_retries(Kind::Transfer, "HeadObject", &request.key, || {
                        inner.store.head_object(&request.key)
                    })
                    .await;
                match existing {
                    Ok(_) => {
                        return Err(TransferError::store("PUT")(StoreError::PreconditionFailed))
                    }
                    Err(TransferError::Store { source, .. }) if source.is_not_found() => {}
                    Err(e) => return Err(e),
                }
            }
            match source {
                UploadSource::File(path) => self.upload_file(request, path).await,
                other => {
                    let (reader, length) =
                        other.into_part_reader().map_err(TransferError::Source)?;
                    self.upload_stream(request, reader, length).await
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn upload_file(
        &self,
        request: UploadRequest,
        path: PathBuf,
    ) -> Result<UploadOutcome, TransferError> {
        // Stat'ed, and read when small, where the job runs while the disk
        // keeps up, as small downloads are made (10,000 x 10 KiB: 0.61x
        // s5cmd's CPU against 0.79x through the blocking pool,
        // bench/results/2026-12-02/upload-reads-here-ab.txt).
        let pace = &self.inner.small_reads_pace;
        let meta = {
            let path = path.clone();
            pace.here_or_pooled(move || std::fs::metadata(&path))
                .await
                .and_then(|meta| meta)
                .map_err(TransferError::Source)?
        };
        if !meta.is_file() {
            return Err(TransferError::Source(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            )));
        }
        let stamp = FileStamp::of(&meta);
        let length = stamp.len();
        let config = &self.inner.config;
        let tracker = Tracker::new(Some(length), request.progress.clone());
        if length <= config.threshold {
            // Read once into memory (checksummed there, then sent), rather than
            // read for the checksum and again for the request; read only once
            // its turn among the transfers in flight has come.
            let slot = self.inner.tuner.slot().await;
            let reservation = self.inner.budget.reserve(length).await;
            let bytes = pace
                .here_or_pooled(move || stamp.read_whole(&path))
                .await
                .map_err(TransferError::Source)??;
            return self
                .single_put(
                    &request,
                    Body::Bytes(Bytes::from(bytes)),
                    tracker,
                    slot,
                    reservation,
                )
                .await;
        }
        let plan = PartPlan::for_length(config, length)?;
        let mut upload = Multipart::start(&self.inner, &request, tracker).await?;
        let sent = async {
            let (mut offset, mut number) = (0u64, 1u32);
            while offset < length {
                let len = plan.size_of(number).min(length - offset);
                upload.wait_for_slot().await?;
                let reservation = self.inner.budget.reserve(FILE_PART_RESERVATION).await;
                let body = Body::File {
                    path: path.clone(),
                    offset,
                    len,
                };
                upload.submit(number, body, reservation);
                offset += len;
                number += 1;
            }
            Ok(())
        }
        .await;
        upload.finish(sent, length, Some((&stamp, &path))).await
    }

    /// A sequential source, known length or not, read piece by piece as its
    /// bytes arrive ([`crate::filling`]). Up to the threshold the pieces are kept
    /// until the source ends (then one PUT); past it, or when memory is short,
    /// they become the first parts of a multipart upload.
    async fn upload_stream(
        &self,
        request: UploadRequest,
        mut reader: PartReader<'_>,
        length: Option<u64>,
    ) -> Result<UploadOutcome, TransferError> {
        let inner = &self.inner;
        let config = &inner.config;
        let share = inner.budget.share(config.memory_share());
        let plan = match length {
            Some(length) => PartPlan::for_length(config, length)?,
            None => {
                let cap = limits::MAX_PART_SIZE.min(share.capacity());
                PartPlan::for_stream(config, cap)
            }
        };
        if plan.size_of(1) > share.capacity() {
            return Err(ConfigError::PartExceedsBudget {
                size: length.unwrap_or(0),
                part: plan.size_of(1),
                budget: share.capacity(),
            }
            .into());
        }
        let rules_for = |want: u64| match config.fixed_part_size {
            true => PieceRules::whole(want),
            false => PieceRules::part(want),
        };
        let mut tracker = Tracker::new(length, request.progress.clone());
        let mut total = 0u64;
        let mut ended = false;
        let mut first: Vec<Piece> = Vec::new();
        // Taken before any memory (the engine's order: a slot, then memory):
        // the single PUT's, or the first part's.
        let mut first_slot = Some(inner.tuner.slot().await);
        if length.is_none_or(|length| length <= config.threshold) {
            while total <= config.threshold {
                let want = match length {
                    Some(length) => config.part_size.min(length - total),
                    None => config.part_size,
                };
                if want == 0 {
                    ended = true;
                    break;
                }
                // Pieces kept so far wait for this one: it may not wait for memory.
                let rules = match first.is_empty() {
                    true => rules_for(want),
                    false => rules_for(want).without_waiting(),
                };
                let piece = reader.read_piece(&share, rules, share.nothing()).await;
                if let Some(error) = piece.error {
                    return Err(TransferError::Source(error));
                }
                total += piece.len;
                let end = piece.end;
                if piece.len > 0 {
                    first.push(piece);
                }
                match end {
                    PieceEnd::Full => {}
                    PieceEnd::SourceEnded => {
                        ended = true;
                        break;
                    }
                    PieceEnd::Cut | PieceEnd::Starved => break,
                }
            }
            if ended {
                if let Some(length) = length {
                    check_exact_end(&mut reader, length, total).await?;
                }
            }
            if ended && total <= config.threshold {
                let mut chunks: Vec<Bytes> = Vec::new();
                let mut held = share.nothing();
                for piece in first {
                    chunks.extend(piece.chunks);
                    held.absorb(piece.reservation);
                }
                let body = match chunks.len() {
                    0 => Body::Bytes(Bytes::new()),
                    1 => Body::Bytes(chunks.pop().expect("one chunk")),
                    _ => Body::Chunks(chunks.into()),
                };
                tracker.set_total(total);
                let slot = first_slot.take().expect("the first slot");
                return self.single_put(&request, body, tracker, slot, held).await;
            }
        }

        let mut upload = Multipart::start(inner, &request, tracker).await?;
        upload.parts.give_slot(first_slot.take());
        let sent = async {
            let mut number = 1u32;
            for piece in first {
                upload.wait_for_slot().await?;
                upload.submit(number, piece_body(piece.chunks), piece.reservation);
                number += 1;
            }
            while !ended {
                let want = match length {
                    Some(length) if total == length => {
                        return check_exact_end(&mut reader, length, total).await;
                    }
                    Some(length) => plan.size_of(number).min(length - total),
                    None => plan.size_of(number),
                };
                if number > limits::MAX_PARTS {
                    let more = reader.peek_end().await.map_err(TransferError::Source)?;
                    return match (more, length) {
                        (None, None) => Ok(()),
                        (None, Some(length)) => Err(TransferError::SourceShort {
                            expected: length,
                            actual: total,
                        }),
                        (Some(_), _) => Err(TransferError::StreamTooLarge(plan.capacity())),
                    };
                }
                upload.wait_for_slot().await?;
                let mut rules = rules_for(want);
                if let Some(length) = length {
                    // A part cut short must leave the rest room in the parts left.
                    rules = rules.cut_no_earlier_than(cut_floor(
                        length - total,
                        number,
                        plan.size_of(number),
                    ));
                }
                let piece = reader.read_piece(&share, rules, share.nothing()).await;
                if let Some(error) = piece.error {
                    return Err(TransferError::Source(error));
                }
                total += piece.len;
                ended = piece.end == PieceEnd::SourceEnded;
                if ended {
                    if let Some(length) = length.filter(|&length| total < length) {
                        return Err(TransferError::SourceShort {
                            expected: length,
                            actual: total,
                        });
                    }
                }
                if piece.len == 0 {
                    break;
                }
                upload.submit(number, piece_body(piece.chunks), piece.reservation);
                number += 1;
            }
            Ok(())
        }
        .await;
        upload.finish(sent, total, None).await
    }

    /// One PutObject of `body`, retried; `held` is the memory it is counted
    /// in, given back once the body is sent. An announced upload (one with an
    /// origin) writes its intent first and runs to its end in a task of its
    /// own, as a multipart completion does: its caller may go, its object is
    /// announced all the same.
    async fn single_put(
        &self,
        request: &UploadRequest,
        body: Body,
        tracker: Tracker,
        slot: TransferSlot,
        held: Reservation,
    ) -> Result<UploadOutcome, TransferError> {
        let inner = &self.inner;
        let size = body.len();
        let checksum = match inner.config.checksum {
            Some(algorithm) => Some(
                checksum_of(&body, algorithm)
                    .await
                    .map_err(TransferError::Source)?,
            ),
            None => None,
        };
        let announcement =
            Announcement::of(inner.announcer.get(), request.origin.as_ref(), |origin| {
                let making = Making::Put { nonce: put_nonce() };
                Intent::new(origin, &request.key, size, checksum, making)
            });
        let put = PutRequest {
            key: request.key.clone(),
            body,
            content_type: request.content_type.clone(),
            metadata: request.metadata.clone(),
            settings: request.settings.clone(),
            checksum,
            condition: request.condition.clone(),
        };
        let outcome = match announcement {
            None => put_with_retries(inner, put).await.0,
            Some(announcement) => {
                let put = {
                    let inner = inner.clone();
                    async move {
                        announcement
                            .intend()
                            .await
                            .map_err(TransferError::store("intent"))?;
                        let (put, ambiguous) = put_with_retries(&inner, put).await;
                        drop(held);
                        match &put {
                            Ok(outcome) => announcement.made(outcome).await,
                            Err(error) => announcement.failed(error, !ambiguous).await,
                        }
                        put
                    }
                    .in_current_span()
                };
                run_to_the_end(inner, put).await
            }
        }?;
        slot.finish(size);
        tracker.advance(size, false);
        Ok(outcome)
    }
}

/// PutObject of `put`, retried, as its outcome; and whether an attempt
/// ended without a definite answer (after which the object may be there
/// whatever the last attempt said).
async fn put_with_retries(
    inner: &EngineInner,
    put: PutRequest,
) -> (Result<UploadOutcome, TransferError>, bool) {
    let (key, size, checksum) = (put.key.clone(), put.body.len(), put.checksum);
    let ambiguous = std::sync::atomic::AtomicBool::new(false);
    let output = inner
        .with_retries(Kind::Transfer, "PUT", &key, || {
            let attempt = inner.store.put_object(put.clone());
            let ambiguous = &ambiguous;
            async move {
                let answer = attempt.await;
                if answer.as_ref().is_err_and(StoreError::is_transient) {
                    ambiguous.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                answer
            }
        })
        .await;
    let outcome = output.map(|output| UploadOutcome {
        key,
        size,
        etag: output.etag,
        checksum: output.checksum.or(checksum),
        parts: 0,
    });
    (outcome, ambiguous.into_inner())
}

/// Runs `work` in a task the engine tracks, which its caller going away does
/// not stop (see `ending`).
async fn run_to_the_end<T: Send + 'static>(
    inner: &Arc<EngineInner>,
    work: impl std::future::Future<Output = Result<T, TransferError>> + Send + 'static,
) -> Result<T, TransferError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => match inner.background.spawn_on(work, &handle).await {
            Ok(done) => done,
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(_) => Err(TransferError::Cancelled),
        },
        Err(_) => work.await,
    }
}

/// A piece's buffers as one body.
fn piece_body(mut chunks: Vec<Bytes>) -> Body {
    match chunks.len() {
        1 => Body::Bytes(chunks.pop().expect("one chunk")),
        _ => Body::Chunks(chunks.into()),
    }
}

/// After `read` bytes of a source announced as `length`: fails unless it ends here.
async fn check_exact_end(
    reader: &mut PartReader<'_>,
    length: u64,
    read: u64,
) -> Result<(), TransferError> {
    if read < length {
        return Err(TransferError::SourceShort {
            expected: length,
            actual: read,
        });
    }
    match reader.peek_end().await.map_err(TransferError::Source)? {
        None => Ok(()),
        Some(_) => Err(TransferError::SourceLong { expected: length }),
    }
}

/// The checksum of a body, computed off the async runtime when it is large.
pub(crate) async fn checksum_of(body: &Body, algorithm: ChecksumAlgorithm) -> io::Result<Checksum> {
    match body {
        Body::Bytes(bytes) if bytes.len() <= INLINE_CHECKSUM_LIMIT => Ok(algorithm.checksum(bytes)),
        Body::Bytes(bytes) => {
            let bytes = bytes.clone();
            tokio::task::spawn_blocking(move || algorithm.checksum(&bytes))
                .await
                .map_err(io::Error::other)
        }
        Body::Chunks(chunks) => {
            let chunks = chunks.clone();
            tokio::task::spawn_blocking(move || {
                let mut hasher = Hasher::new(algorithm);
                chunks.iter().for_each(|c| hasher.update(c));
                hasher.finish()
            })
            .await
            .map_err(io::Error::other)
        }
        Body::File { path, offset, len } => {
            let (path, offset, len) = (path.clone(), *offset, *len);
            tokio::task::spawn_blocking(move || file_checksum(&path, offset, len, algorithm))
                .await
                .map_err(io::Error::other)?
        }
    }
}

fn file_checksum(
    path: &Path,
    offset: u64,
    len: u64,
    algorithm: ChecksumAlgorithm,
) -> io::Result<Checksum> {
    use std::os::unix::fs::FileExt;
    thread_local! {
        static BUFFER: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0; MIB as usize]);
    }
    let file = std::fs::File::open(path)?;
    let mut hasher = Hasher::new(algorithm);
    BUFFER.with_borrow_mut(|buf| {
        let mut done = 0u64;
        while done < len {
            let want = buf.len().min((len - done) as usize);
            let n = file.read_at(&mut buf[..want], offset + done)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the file shrank during the upload",
                ));
            }
            hasher.update(&buf[..n]);
            done += n as u64;
        }
        Ok(hasher.finish())
    })
}

/// A multipart upload in progress within one call: its part pipeline, and the
/// guard that aborts it unless it completes.
struct Multipart<'a> {
    inner: &'a Arc<EngineInner>,
    key: String,
    parts: PartPipeline,
    guard: AbortGuard,
    /// Checked by the store as the object becomes visible.
    condition: Option<WriteCondition>,
    origin: Option<Arc<Origin>>,
}

impl<'a> Multipart<'a> {
    async fn start(
        inner: &'a Arc<EngineInner>,
        request: &UploadRequest,
        tracker: Tracker,
    ) -> Result<Self, TransferError> {
        let upload_id = inner.create_upload(request).await?;
        tracing::debug!(upload_id = %upload_id, "multipart upload started");
        Ok(Multipart {
            inner,
            key: request.key.clone(),
            guard: AbortGuard::new(inner.clone(), request.key.clone(), upload_id.clone()),
            parts: PartPipeline::new(inner.clone(), &request.key, &upload_id, tracker),
            condition: request.condition.clone(),
            origin: request.origin.clone(),
        })
    }

    /// Waits until fewer than `concurrency` parts are in flight; an error once a
    /// part failed (which one, [`Multipart::finish`] reports).
    async fn wait_for_slot(&mut self) -> Result<(), TransferError> {
        match self.parts.wait_for_slot().await {
            true => Ok(()),
            false => Err(TransferError::Cancelled),
        }
    }

    /// Starts uploading part `number`; `reservation` is held until it is stored.
    fn submit(&mut self, number: u32, body: Body, reservation: Reservation) {
        self.parts.submit(number, body, reservation);
    }

    /// Completes the upload when `sent` is Ok and every part is stored; otherwise
    /// stops the part tasks and aborts the upload. A failed part is the cause
    /// reported, whatever stopped the reading. A file read (`source`) that is
    /// no longer the version it was is not completed either.
    async fn finish(
        mut self,
        sent: Result<(), TransferError>,
        size: u64,
        source: Option<(&FileStamp, &Path)>,
    ) -> Result<UploadOutcome, TransferError> {
        let upload_id = self.parts.upload_id().to_owned();
        let (parts, failed_part) = self.parts.finish(sent.is_err()).await;
        let unchanged = match source {
            Some((stamp, path)) if failed_part.is_none() && sent.is_ok() => {
                stamp.check_path(path).await
            }
            _ => Ok(()),
        };
        let result = match (failed_part, sent.and(unchanged)) {
            (Some(error), _) | (None, Err(error)) => Err(error),
            (None, Ok(())) => {
                complete_parts(
                    self.inner,
                    &self.key,
                    &upload_id,
                    parts,
                    size,
                    self.condition.clone(),
                    self.origin.as_ref(),
                )
                .await
            }
        };
        match result {
            Ok(outcome) => {
                self.guard.disarm();
                Ok(outcome)
            }
            Err(error) => {
                self.guard.abort_now().await;
                Err(error)
            }
        }
    }
}

impl EngineInner {
    /// Stores part `number` of an upload, retried. A part in memory is
    /// checksummed here and the value sent in a header; a part streamed from a
    /// file is checksummed as it is sent (a trailer on S3), so the file is read
    /// only once. The part comes back with its size and checksum.
    pub(crate) async fn store_part(
        &self,
        key: &str,
        upload_id: &str,
        number: u32,
        body: Body,
    ) -> Result<UploadedPart, TransferError> {
        let checksum = match (self.config.checksum, &body) {
            (None, _) => PartChecksum::None,
            (Some(algorithm), Body::File { .. }) => PartChecksum::Streamed(algorithm),
            (Some(algorithm), _) => PartChecksum::Known(
                checksum_of(&body, algorithm)
                    .await
                    .map_err(TransferError::Source)?,
            ),
        };
        let size = body.len();
        let part = self
            .with_retries(Kind::Transfer, "UploadPart", key, || {
                self.store.upload_part(UploadPartRequest {
                    key: key.to_owned(),
                    upload_id: upload_id.to_owned(),
                    part_number: number,
                    body: body.clone(),
                    checksum,
                })
            })
            .await?;
        if checksum.algorithm().is_some() && part.checksum.is_none() {
            return Err(TransferError::Store {
                operation: "UploadPart",
                source: StoreError::InvalidPart(format!(
                    "the store reported no checksum for part {number}"
                )),
            });
        }
        Ok(UploadedPart {
            checksum: checksum.known().or(part.checksum),
            size,
            ..part
        })
    }
}

/// Completes a multipart upload from its parts (sorted here) with the full-object
/// checksum combined from theirs. A completion whose earlier answer was lost (in
/// this call or an earlier request) finds the upload gone and the object in place
/// with the right size and checksum: that is success. The completion runs to its
/// end even when the caller goes away (see `ending`).
pub(crate) async fn complete_parts(
    inner: &Arc<EngineInner>,
    key: &str,
    upload_id: &str,
    mut parts: Vec<UploadedPart>,
    size: u64,
    condition: Option<WriteCondition>,
    origin: Option<&Arc<Origin>>,
) -> Result<UploadOutcome, TransferError> {
    parts.sort_by_key(|p| p.part_number);
    let checksum = combine_checksums(&parts);
    let request = CompleteMultipartRequest {
        key: key.to_owned(),
        upload_id: upload_id.to_owned(),
        parts,
        checksum,
        condition,
    };
    let announcement = Announcement::of(inner.announcer.get(), origin, |origin| {
        let making = Making::Multipart {
            upload_id: upload_id.to_owned(),
        };
        Intent::new(origin, key, size, checksum, making)
    });
    let outcome = complete_to_the_end(inner, request, size, announcement).await?;
    tracing::debug!(parts = outcome.parts, size, "multipart upload completed");
    Ok(outcome)
}

/// CompleteMultipartUpload of `request` (`size` bytes), never cancelled
/// midway (see `ending`): it runs in a task of its own, after any other ending
/// request of this upload here, and is retried as [`complete_with_retries`]
/// says. An `announcement` writes its intent before and is made after, in
/// that same task.
pub(crate) async fn complete_to_the_end(
    inner: &Arc<EngineInner>,
    request: CompleteMultipartRequest,
    size: u64,
    announcement: Option<Announcement>,
) -> Result<UploadOutcome, TransferError> {
    let turn = inner.endings.lock(&request.upload_id).await;
    let completion = {
        let inner = inner.clone();
        async move {
            if let Some(announcement) = &announcement {
                announcement
                    .intend()
                    .await
                    .map_err(TransferError::store("intent"))?;
            }
            let (key, count, checksum) = (
                request.key.clone(),
                request.parts.len() as u32,
                request.checksum,
            );
            // The turn is held for the completion only, not its announcement.
            let completed = {
                let _turn = turn;
                complete_with_retries(&inner, request, size).await
            };
            let completed = match (completed, &announcement) {
                (Ok(completed), _) => completed,
                (Err(error), Some(announcement)) => {
                    // A refusal after which the object is not ours (see
                    // `complete_with_retries`): the intent comes to nothing.
                    announcement.failed(&error, true).await;
                    return Err(error);
                }
                (Err(error), None) => return Err(error),
            };
            let outcome = UploadOutcome {
                key,
                size,
                etag: completed.etag,
                checksum: completed.checksum.or(checksum),
                parts: count,
            };
            if let Some(announcement) = &announcement {
                announcement.made(&outcome).await;
            }
            Ok(outcome)
        }
        .in_current_span()
    };
    run_to_the_end(inner, completion).await
}

/// CompleteMultipartUpload of `request`, retried; see [`complete_parts`]. A
/// completion in flight runs to its answer even when the store comes to count
/// as down, and one whose earlier answer was lost is recognised by the object
/// it made (`size` bytes).
async fn complete_with_retries(
    inner: &EngineInner,
    request: CompleteMultipartRequest,
    size: u64,
) -> Result<PutOutput, TransferError> {
    let mut attempts = 0;
    inner
        .run_attempts(
            Kind::Transfer,
            "CompleteMultipartUpload",
            &request.key,
            InFlight::RunToAnswer,
            || {
                attempts += 1;
                let retried = attempts > 1;
                let request = request.clone();
                async move {
                    match inner.store.complete_multipart_upload(request.clone()).await {
                        // Completed already (by an attempt of this call or of an
                        // earlier request) whose answer was lost: the object is
                        // there with this size and, when both are known, checksum.
                        // A conditional completion retried after a lost answer
                        // meets the object that answer made: ours if it matches,
                        // and then our upload is gone.
                        Err(StoreError::NoSuchUpload { .. }) => {
                            completed_already(
                                inner,
                                &request,
                                size,
                                retried,
                                StoreError::NoSuchUpload {
                                    upload_id: request.upload_id.clone(),
                                },
                            )
                            .await
                        }
                        Err(StoreError::PreconditionFailed) if retried => {
                            let ours = completed_already(
                                inner,
                                &request,
                                size,
                                false,
                                StoreError::PreconditionFailed,
                            )
                            .await;
                            match ours {
                                Ok(output) => match inner
                                    .store
                                    .list_parts(&request.key, &request.upload_id)
                                    .await
                                {
                                    Err(StoreError::NoSuchUpload { .. }) => Ok(output),
                                    _ => Err(StoreError::PreconditionFailed),
                                },
                                Err(e) => Err(e),
                            }
                        }
                        other => other,
                    }
                }
            },
        )
        .await
}

/// When a completion's answer may have been lost: the object at the key, if it
/// is the one this completion makes (its size, and its checksum when both are
/// known; without checksums, only when `trust_size`). Otherwise `refusal`.
async fn completed_already(
    inner: &EngineInner,
    request: &CompleteMultipartRequest,
    size: u64,
    trust_size: bool,
    refusal: StoreError,
) -> Result<PutOutput, StoreError> {
    let meta = match inner.store.head_object(&request.key).await {
        Ok(meta) => meta,
        Err(e) if e.is_not_found() => return Err(refusal),
        Err(e) => return Err(e),
    };
    let same_checksum = match (meta.checksum, request.checksum) {
        (Some(stored), Some(ours)) => stored == ours,
        _ => trust_size,
    };
    if meta.size == size && same_checksum {
        Ok(PutOutput {
            etag: meta.etag,
            checksum: meta.checksum.or(request.checksum),
        })
    } else {
        Err(refusal)
    }
}

/// The checksum of the whole object from its parts' checksums, in order.
fn combine_checksums(parts: &[UploadedPart]) -> Option<Checksum> {
    Checksum::combine_in_order(parts.iter().map(|p| (p.checksum, p.size)))
}

/// Aborts a multipart upload unless disarmed: explicitly on failure, or from
/// `Drop` (on a background task the engine tracks) when the upload is cancelled.
pub(crate) struct AbortGuard {
    inner: Arc<EngineInner>,
    key: String,
    upload_id: String,
    armed: bool,
}

impl AbortGuard {
    pub(crate) fn new(inner: Arc<EngineInner>, key: String, upload_id: String) -> AbortGuard {
        AbortGuard {
            inner,
            key,
            upload_id,
            armed: true,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Aborts now and waits for it, unless the store is down: then the abort
    /// waits for the store's return in the background, and the caller goes on
    /// to answer its client.
    pub(crate) async fn abort_now(&mut self) {
        self.armed = false;
        let (inner, key, upload_id) =
            (self.inner.clone(), self.key.clone(), self.upload_id.clone());
        match abort_or_hand_over(inner, key.clone(), upload_id.clone()).await {
            Ok(Aborted::Now) => tracing::info!(%key, %upload_id, "multipart upload aborted"),
            Ok(Aborted::WhenTheStoreIsBack) => {}
            Err(error) => {
                tracing::error!(%key, %upload_id, error = %sluice_store::error_chain(&error), "could not abort the multipart upload; the janitor will");
            }
        }
    }
}

/// How an abort that did not fail went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aborted {
    /// The multipart upload is gone.
    Now,
    /// The store is down: the abort waits for its return in the background,
    /// tracked with the engine's other background work, until the process stops.
    WhenTheStoreIsBack,
}

/// Aborts `upload_id` now, unless the store is down (its breaker open, or the
/// abort failing as a store that is down fails): then it is handed to the
/// background (see [`Aborted::WhenTheStoreIsBack`]). Fails only for an abort
/// the store refused for good (what is left is the janitor's).
pub(crate) async fn abort_or_hand_over(
    inner: Arc<EngineInner>,
    key: String,
    upload_id: String,
) -> Result<Aborted, TransferError> {
    let store_down = inner.breaker.as_ref().is_some_and(|b| b.is_open());
    if !store_down {
        match inner.abort_upload(&key, &upload_id).await {
            Ok(()) => return Ok(Aborted::Now),
            Err(error) if !is_store_down(&inner, &error) => return Err(error),
            Err(_) => {}
        }
    }
    let abort = abort_upload(inner.clone(), key, upload_id);
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            inner.background.spawn_on(abort, &handle);
        }
        Err(_) => abort.await,
    }
    Ok(Aborted::WhenTheStoreIsBack)
}

impl Drop for AbortGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let abort = abort_upload(self.inner.clone(), self.key.clone(), self.upload_id.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            self.inner.background.spawn_on(abort, &handle);
        } else {
            tracing::error!(key = %self.key, upload_id = %self.upload_id, "upload dropped outside a runtime; multipart upload left for the janitor");
        }
    }
}

/// True when `error` may be the store being down, with a breaker to wait on.
fn is_store_down(inner: &EngineInner, error: &TransferError) -> bool {
    inner.breaker.is_some() && error.store_error().is_some_and(StoreError::is_transient)
}

/// Aborts a multipart upload. While the store is down (its breaker open, or
/// failing on), the abort waits for it to answer again and tries anew, until the
/// process stops; what is left then is the janitor's.
async fn abort_upload(inner: Arc<EngineInner>, key: String, upload_id: String) {
    loop {
        let error = match inner.abort_upload(&key, &upload_id).await {
            Ok(()) => {
                tracing::info!(%key, %upload_id, "multipart upload aborted");
                return;
            }
            Err(error) => error,
        };
        let Some(breaker) = inner
            .breaker
            .as_ref()
            .filter(|_| is_store_down(&inner, &error))
        else {
            tracing::error!(%key, %upload_id, error = %sluice_store::error_chain(&error), "could not abort the multipart upload; the janitor will");
            return;
        };
        tracing::warn!(%key, %upload_id, error = %sluice_store::error_chain(&error), "the store is down: the abort waits for it");
        if !inner.store_back(breaker).await {
            tracing::error!(%key, %upload_id, "stopping while the store is down; the janitor will abort the multipart upload");
            return;
        }
    }
}

impl EngineInner {
    /// The one abort path: AbortMultipartUpload, retried for longer than transfers
    /// and outside the retry budget; an upload already gone counts as aborted.
    pub(crate) async fn abort_upload(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<(), TransferError> {
        // After a completion of this upload still running here (see `ending`).
        let _turn = self.endings.lock(upload_id).await;
        match self
            .with_retries(Kind::Cleanup, "AbortMultipartUpload", key, || {
                self.store.abort_multipart_upload(key, upload_id)
            })
            .await
        {
            Err(TransferError::Store {
                source: StoreError::NoSuchUpload { .. },
                ..
            }) => Ok(()),
            other => other,
        }
    }
}
