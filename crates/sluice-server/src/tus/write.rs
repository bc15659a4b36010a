//! Moving the bytes of a resumable upload: appending one request's body at the
//! upload's offset (parts cut by the engine, the rest carried in a segment object),
//! committing the progress to the record, and finishing the object once all bytes
//! are in. Runs under the upload's lock.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use sluice_store::StoreError;
use sluice_tus::checksum::ChunkHasher;
use sluice_tus::upload::PatchPlan;
use sluice_tus::{TusError, UploadChecksum};
use sluice_upload::{AppendRequest, TransferError, UploadRequest, UploadSource};

use super::record::{Loaded, RecordError, Segment, StoredPart};
use super::Tus;
use crate::body::BodyError;
use crate::error::{from_transfer, ApiError};

impl From<RecordError> for ApiError {
    fn from(error: RecordError) -> Self {
        match error {
            RecordError::NotFound => ApiError::Tus(TusError::NotFound),
            RecordError::Conflict => ApiError::Conflict(
                "the upload changed during this request; ask for its offset and retry".into(),
            ),
            RecordError::Corrupt(reason) => ApiError::Internal(reason),
            RecordError::Store(e) => ApiError::from(e),
        }
    }
}

/// The checksum extension for one request body: hashes the body as it streams and
/// says afterwards whether it matched `Upload-Checksum` (no header: always).
pub(super) struct ChunkCheck {
    expected: Option<UploadChecksum>,
    hasher: Option<Arc<Mutex<ChunkHasher>>>,
}

impl ChunkCheck {
    /// Wraps `body` so that it is hashed as it is read.
    pub(super) fn new(
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
    pub(super) fn required(&self) -> bool {
        self.expected.is_some()
    }

    /// Whether the bytes read so far match.
    pub(super) fn matches(&self) -> bool {
        match (&self.expected, &self.hasher) {
            (Some(expected), Some(h)) => expected.matches(h.lock().expect("hasher").clone()),
            _ => true,
        }
    }
}

/// Appends `body` (already limited to `plan.max_body` bytes) at the record's
/// offset and commits whatever was stored, even when the body broke off midway
/// (that is what makes the upload resumable). A chunk with an Upload-Checksum is
/// all or nothing. Returns the committed record, or the error to answer with.
pub async fn write_chunk(
    tus: &Tus,
    mut loaded: Loaded,
    body: BoxStream<'static, io::Result<Bytes>>,
    plan: PatchPlan,
    checksum: Option<UploadChecksum>,
) -> (Loaded, Option<ApiError>) {
    let record = &mut loaded.record;
    if record.upload.length.is_none() && plan.length.is_some() {
        record.upload.length = plan.length;
    }
    if record.multipart_id.is_none() {
        let request = UploadRequest {
            key: record.key.clone(),
            content_type: record.content_type.clone(),
            ..UploadRequest::default()
        };
        match tus.engine.create_multipart(&request).await {
            Ok(id) => record.multipart_id = Some(id),
            Err(e) => return (loaded, Some(from_transfer(e))),
        }
        // Recorded before any part exists, so that expiry can always abort it.
        match tus.records.replace(&loaded.record, &loaded.etag).await {
            Ok(etag) => loaded.etag = etag,
            Err(e) => {
                // Unrecorded, nobody would ever abort it: do it now.
                if let Some(id) = loaded.record.multipart_id.take() {
                    if let Err(error) = tus.engine.abort_multipart(&loaded.record.key, &id).await {
                        tracing::warn!(key = %loaded.record.key, upload_id = %id, error = %sluice_store::error_chain(&error), "could not abort an unrecorded multipart upload; the janitor will");
                    }
                }
                return (loaded, Some(e.into()));
            }
        }
    }
    let record = &loaded.record;
    let carried = match tus.records.read_segments(record).await {
        Ok(carried) => carried,
        Err(e) => return (loaded, Some(e.into())),
    };
    let carried_len = record.carried();
    let (check, body) = ChunkCheck::new(checksum, body);
    let request = AppendRequest {
        key: record.key.clone(),
        upload_id: record.multipart_id.clone().expect("created above"),
        first_part: record.parts.len() as u32 + 1,
        carried,
        part_size: tus.part_size(record.upload.length),
        last: false,
    };
    let appended = tus
        .engine
        .append_parts(
            request,
            UploadSource::Stream {
                stream: body,
                length: None,
            },
        )
        .await;

    // What went wrong, and whether the progress made may be kept.
    let mut appended = appended;
    let (error, keep) = match appended.error.take() {
        None => (None, true),
        Some(TransferError::Source(io)) => match BodyError::find(&io) {
            Some(BodyError::TooLarge { .. }) => (
                Some(ApiError::Tus(TusError::BeyondLength {
                    length: record.upload.length.unwrap_or(tus.max_size),
                })),
                false,
            ),
            Some(other) => (Some(ApiError::from(other)), true),
            None => (
                Some(ApiError::BadRequest(
                    "the request body could not be read".into(),
                )),
                true,
            ),
        },
        Some(other) => (Some(from_transfer(other)), true),
    };
    let (error, keep) = match (check.required(), error) {
        (true, Some(error)) => (Some(error), false),
        (true, None) if !check.matches() => {
            (Some(ApiError::Tus(TusError::ChecksumMismatch)), false)
        }
        (_, error) => (error, keep),
    };
    let offset = record.upload.offset;
    let new_offset = offset - carried_len + appended.kept();
    if !keep || new_offset <= offset {
        return (loaded, error);
    }

    // Commit: the new carried bytes first, then the record that names them.
    let record = &mut loaded.record;
    let fresh = new_offset - offset;
    let new_segment = if appended.parts.is_empty() {
        tail(&appended.leftover, fresh)
    } else {
        appended.leftover.clone()
    };
    let consumed = if appended.parts.is_empty() {
        Vec::new()
    } else {
        std::mem::take(&mut record.segments)
    };
    if !new_segment.is_empty() {
        let number = record.next_segment;
        let len = new_segment.iter().map(|b| b.len() as u64).sum();
        if let Err(e) = tus
            .records
            .write_segment(&record.upload.id, number, new_segment)
            .await
        {
            // The parts stored stay valid but unrecorded; the client resends from the old offset.
            record.segments.extend(consumed);
            return (loaded, Some(ApiError::from(e)));
        }
        record.segments.push(Segment { number, len });
        record.next_segment += 1;
    }
    record
        .parts
        .extend(appended.parts.iter().map(StoredPart::from_uploaded));
    record.upload.offset = new_offset;
    record.upload.extend(SystemTime::now(), tus.expiry);
    match tus.records.replace(record, &loaded.etag).await {
        Ok(etag) => loaded.etag = etag,
        Err(e) => return (loaded, Some(e.into())),
    }
    tus.records
        .delete_segments(&loaded.record.upload.id, &consumed)
        .await;
    tracing::debug!(upload_id = %loaded.record.upload.id, offset = new_offset, parts = loaded.record.parts.len(), "chunk committed");
    (loaded, error)
}

/// The last `n` bytes of `chunks`.
fn tail(chunks: &[Bytes], n: u64) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut left = n as usize;
    for chunk in chunks.iter().rev() {
        if left == 0 {
            break;
        }
        let take = left.min(chunk.len());
        out.push(chunk.slice(chunk.len() - take..));
        left -= take;
    }
    out.reverse();
    out
}

/// Turns a record whose bytes are all in into the object: the carried bytes become
/// the last part, the multipart upload is completed, the record says so. Safe to
/// repeat after a crash at any step.
pub async fn finish(tus: &Tus, mut loaded: Loaded) -> Result<Loaded, ApiError> {
    let record = &loaded.record;
    if record.is_finished() || !record.upload.is_complete() {
        return Ok(loaded);
    }
    let length = record
        .upload
        .length
        .expect("complete uploads have a length");
    let upload_id = record
        .multipart_id
        .clone()
        .ok_or_else(|| ApiError::Internal("a complete upload without a multipart upload".into()))?;
    let carried = tus.records.read_segments(record).await?;
    let mut parts: Vec<_> = record.parts.iter().map(StoredPart::to_uploaded).collect();
    if !carried.is_empty() {
        let request = AppendRequest {
            key: record.key.clone(),
            upload_id: upload_id.clone(),
            first_part: parts.len() as u32 + 1,
            carried,
            part_size: tus.part_size(Some(length)),
            last: true,
        };
        let empty = futures::stream::empty::<io::Result<Bytes>>().boxed();
        let appended = tus
            .engine
            .append_parts(
                request,
                UploadSource::Stream {
                    stream: empty,
                    length: Some(0),
                },
            )
            .await;
        if let Some(error) = appended.error {
            return Err(from_transfer(error));
        }
        parts.extend(appended.parts);
    }
    let etag = match tus
        .engine
        .complete_multipart(&record.key, &upload_id, parts, length)
        .await
    {
        Ok(outcome) => outcome.etag,
        // Completed by an earlier attempt whose record update was lost.
        Err(TransferError::Store {
            source: StoreError::NoSuchUpload { .. },
            ..
        }) => {
            let meta = tus.store.head_object(&record.key).await?;
            if meta.size != length {
                return Err(ApiError::Internal(format!(
                    "upload {} lost its multipart upload",
                    record.upload.id
                )));
            }
            meta.etag
        }
        Err(e) => return Err(from_transfer(e)),
    };
    let record = &mut loaded.record;
    record.finished_etag = Some(etag);
    record.parts.clear();
    let segments = std::mem::take(&mut record.segments);
    loaded.etag = tus.records.replace(record, &loaded.etag).await?;
    tus.records
        .delete_segments(&loaded.record.upload.id, &segments)
        .await;
    tracing::info!(upload_id = %loaded.record.upload.id, key = %loaded.record.key, size = length, "resumable upload finished");
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_table() {
        let chunks = [Bytes::from_static(b"abc"), Bytes::from_static(b"defg")];
        let cases: [(u64, &[u8]); 5] = [
            (0, b""),
            (2, b"fg"),
            (4, b"defg"),
            (5, b"cdefg"),
            (7, b"abcdefg"),
        ];
        for (n, expected) in cases {
            let got: Vec<u8> = tail(&chunks, n).concat();
            assert_eq!(got, expected, "{n}");
        }
    }
}
