//! Multipart uploads that outlive one request (resumable uploads). The caller keeps
//! the state between calls (upload id, parts so far, bytes carried over that were
//! too few for a part) wherever it likes; the engine creates the upload, appends
//! parts cut from a stream, and completes or aborts it. Appending never aborts: a
//! failed call reports the parts it did store so the caller can keep them.
//! Creating an upload (here for both kinds of multipart upload) cleans up after
//! an attempt whose answer was lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use std::io;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use sluice_store::*;
use tokio::io::AsyncReadExt;

use crate::error::TransferError;
use crate::parts::PartPipeline;
use crate::progress::Tracker;
use crate::retry::Kind;
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

/// One call's worth of appending.
#[derive(Debug, Clone)]
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
                        checksum_algorithm: self.config.checksum,
                    });
                    let answer_lost = &answer_lost;
                    async move {
                        let result = create.await;
                        if let Err(StoreError::Transport(_) | StoreError::Stalled { .. }) = &result
                        {
                            answer_lost.store(true, Ordering::Relaxed);
                        }
                        result
                    }
                },
            )
            .await?;
        if answer_lost.load(Ordering::Relaxed) {
            self.abort_lost_creations(&request.key, &upload_id, started)
                .await;
        }
        Ok(upload_id)
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
                    error: Some(TransferError::Source(error)),
                }
            }
        };
        let mut buffered: u64 = buffer.iter().map(|b| b.len() as u64).sum();
        let mut number = request.first_part;
        let mut read = 0u64;
        let mut parts = PartPipeline::new(
            self.inner.clone(),
            &request.key,
            &request.upload_id,
            Tracker::new(None, None),
        );
        let mut error = None;
        let mut part_failed = false;
        loop {
            if !parts.wait_for_slot().await {
                part_failed = true;
                break;
            }
            let want = part_size.saturating_sub(buffered);
            let reservation = self.inner.budget.reserve(part_size).await;
            let mut chunk = self.inner.budget.buffer(want as usize);
            let filled = reader.fill(chunk.as_vec_mut(), want as usize).await;
            read += chunk.len() as u64;
            buffered += chunk.len() as u64;
            if !chunk.is_empty() {
                buffer.push(chunk.freeze());
            }
            if let Err(e) = filled {
                error = Some(TransferError::Source(e));
                break;
            }
            if buffered < part_size {
                break; // the stream ended
            }
            buffered = 0;
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
            let reservation = self.inner.budget.reserve(buffered).await;
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
            error: error.or(failed_part),
        }
    }

    /// Completes a multipart upload from all its parts (any order); `size` is the
    /// object's length, used to recognise a completion whose answer was lost.
    pub async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<UploadedPart>,
        size: u64,
    ) -> Result<UploadOutcome, TransferError> {
        crate::upload::complete_parts(&self.inner, key, upload_id, parts, size, None).await
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
    /// a failed or dropped upload's guard does.
    pub async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<(), TransferError> {
        self.inner.abort_upload(key, upload_id).await
    }
}
