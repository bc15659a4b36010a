//! Server-side copies: an object copied inside a store, or between buckets of
//! one S3 service, without its bytes passing through the engine. Up to 5 GiB
//! it is one CopyObject; above, a multipart upload of UploadPartCopy ranges
//! sent concurrently, aborted on any failure or when the copy is dropped. A
//! multipart copy inside one bucket takes the source's content type and
//! metadata (S3 copies none across UploadPartCopy); from another bucket it
//! takes none.
//!
//! Stores that cannot copy answer [`StoreError::Unsupported`]; the caller then
//! streams the object through (a download written into an upload's reader).

use futures::stream::{self, StreamExt, TryStreamExt};
use sluice_store::limits::{MAX_PARTS, MAX_PART_SIZE, MAX_PUT_SIZE};
use sluice_store::*;

use crate::config::MIB;
use crate::error::TransferError;
use crate::retry::Kind;
use crate::upload::{AbortGuard, UploadOutcome};
use crate::Engine;

/// Parts of a multipart copy are at least this large: no byte passes through
/// the engine, so fewer, larger requests are cheaper.
const COPY_PART_SIZE: u64 = 512 * MIB;

/// What to copy where.
#[derive(Debug, Clone)]
pub struct CopyRequest {
    /// The source's bucket when it is another bucket of the same service.
    pub source_bucket: Option<String>,
    pub source_key: String,
    /// The source's size (from a listing or a HEAD): it decides between one
    /// CopyObject and a multipart copy.
    pub size: u64,
    pub key: String,
}

impl Engine {
    /// Copies `request.source_key` to `request.key` inside the store.
    pub async fn copy(&self, request: CopyRequest) -> Result<UploadOutcome, TransferError> {
        crate::config::validate_key(&request.key)?;
        if request.size <= MAX_PUT_SIZE {
            let inner = &self.inner;
            let output = inner
                .with_retries(Kind::Transfer, "CopyObject", &request.key, || {
                    inner.store.copy_object(CopyObjectRequest {
                        key: request.key.clone(),
                        source_key: request.source_key.clone(),
                        source_bucket: request.source_bucket.clone(),
                    })
                })
                .await?;
            return Ok(UploadOutcome {
                key: request.key,
                size: request.size,
                etag: output.etag,
                checksum: output.checksum,
                parts: 0,
            });
        }
        self.copy_multipart(request).await
    }

    async fn copy_multipart(&self, request: CopyRequest) -> Result<UploadOutcome, TransferError> {
        let inner = &self.inner;
        let part_size = copy_part_size(request.size);
        // Copied parts carry no metadata: the new upload takes the source's
        // content type and metadata (readable only in the store's own bucket).
        let mut create = CreateMultipartRequest::new(request.key.clone());
        if request.source_bucket.is_none() {
            let source = inner
                .with_retries(Kind::Transfer, "HeadObject", &request.source_key, || {
                    inner.store.head_object(&request.source_key)
                })
                .await?;
            create.content_type = source.content_type;
            create.metadata = source.metadata;
        }
        let upload_id = inner
            .with_retries(
                Kind::Transfer,
                "CreateMultipartUpload",
                &request.key,
                || inner.store.create_multipart_upload(create.clone()),
            )
            .await?;
        let mut guard = AbortGuard::new(inner.clone(), request.key.clone(), upload_id.clone());
        let count = request.size.div_ceil(part_size) as u32;
        let copied: Result<Vec<UploadedPart>, TransferError> = stream::iter(1..=count)
            .map(|number| {
                let start = u64::from(number - 1) * part_size;
                let end = (start + part_size).min(request.size);
                let part = CopyPartRequest {
                    key: request.key.clone(),
                    upload_id: upload_id.clone(),
                    part_number: number,
                    source_key: request.source_key.clone(),
                    source_bucket: request.source_bucket.clone(),
                    source_range: Some(ByteRange::new(start, end)),
                };
                async move {
                    inner
                        .with_retries(Kind::Transfer, "UploadPartCopy", &part.key, || {
                            inner.store.upload_part_copy(part.clone())
                        })
                        .await
                }
            })
            .buffer_unordered(
                // No bytes pass here to measure: as many as the limit allows now.
                inner
                    .tuner
                    .limit()
                    .map_or(inner.config.concurrency, |limit| {
                        limit.min(inner.config.concurrency)
                    }),
            )
            .try_collect()
            .await;
        let mut parts = match copied {
            Ok(parts) => parts,
            Err(error) => {
                guard.abort_now().await;
                return Err(error);
            }
        };
        parts.sort_by_key(|p| p.part_number);
        let completed = inner
            .with_retries(
                Kind::Transfer,
                "CompleteMultipartUpload",
                &request.key,
                || {
                    inner
                        .store
                        .complete_multipart_upload(CompleteMultipartRequest {
                            key: request.key.clone(),
                            upload_id: upload_id.clone(),
                            parts: parts.clone(),
                            checksum: None,
                            condition: None,
                        })
                },
            )
            .await;
        match completed {
            Ok(output) => {
                guard.disarm();
                Ok(UploadOutcome {
                    key: request.key,
                    size: request.size,
                    etag: output.etag,
                    checksum: output.checksum,
                    parts: count,
                })
            }
            Err(error) => {
                guard.abort_now().await;
                Err(error)
            }
        }
    }
}

/// The part size of a multipart copy: [`COPY_PART_SIZE`], or more when the
/// object would otherwise need over 10,000 parts.
fn copy_part_size(size: u64) -> u64 {
    COPY_PART_SIZE
        .max(size.div_ceil(u64::from(MAX_PARTS)))
        .min(MAX_PART_SIZE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_parts_fit_s3_limits() {
        let cases = [
            (6 * 1024 * MIB, COPY_PART_SIZE),
            (5 * 1024 * 1024 * MIB, 5 * 1024 * 1024 * MIB / 10_000 + 1),
        ];
        for (size, expected) in cases {
            let part = copy_part_size(size);
            assert_eq!(part, expected, "{size}");
            assert!(size.div_ceil(part) <= u64::from(MAX_PARTS), "{size}");
        }
    }
}
