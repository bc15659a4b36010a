//! Server-side copies: an object copied inside a store, or between buckets of
//! one S3 service, without its bytes passing through the engine. Up to the
//! store's single-copy limit (5 GiB on S3; none on Azure and GCS) it is one
//! CopyObject; above, a multipart upload of UploadPartCopy ranges
//! sent concurrently, aborted on any failure or when the copy is dropped. A
//! multipart copy reads the source's HEAD (through the source bucket's own
//! store when it is another bucket) and gives the new object its content type
//! and metadata, which S3 does not carry across UploadPartCopy. Every part is
//! copied only from the source version the copy started from (its ETag,
//! `x-amz-copy-source-if-match`): a source overwritten mid-copy fails the
//! copy instead of mixing two versions.
//!
//! Stores that cannot copy answer [`StoreError::Unsupported`]; the caller then
//! streams the object through (a download written into an upload's reader).

use futures::stream::{self, StreamExt, TryStreamExt};
use sluice_store::limits::{MAX_PARTS, MAX_PART_SIZE};
use sluice_store::*;
use std::sync::Arc;

use crate::config::MIB;
use crate::error::TransferError;
use crate::retry::Kind;
use crate::upload::{complete_to_the_end, AbortGuard, UploadOutcome};
use crate::Engine;

/// Parts of a multipart copy are at least this large: no byte passes through
/// the engine, so fewer, larger requests are cheaper.
const COPY_PART_SIZE: u64 = 512 * MIB;

/// Another bucket of the engine's service, as the source of a copy.
#[derive(Debug, Clone)]
pub struct SourceBucket {
    pub name: String,
    /// A store of that bucket: a multipart copy reads the source's HEAD
    /// through it (the engine's own store sees only its bucket).
    pub store: Arc<dyn ObjectStore>,
}

/// What to copy where.
#[derive(Debug, Clone)]
pub struct CopyRequest {
    /// The source's bucket when it is another bucket of the same service.
    pub source_bucket: Option<SourceBucket>,
    pub source_key: String,
    /// The source's size (from a listing or a HEAD): it decides between one
    /// CopyObject and a multipart copy.
    pub size: u64,
    /// The source's ETag from the same listing, when known: a multipart copy
    /// copies only that version (a changed source fails it).
    pub source_etag: Option<String>,
    pub key: String,
    /// The copy's storage class, ACL and encryption; unset, the bucket's
    /// defaults (on both paths: its type, headers and metadata are the source's).
    pub placement: ObjectSettings,
}

impl Engine {
    /// Copies `request.source_key` to `request.key` inside the store.
    pub async fn copy(&self, request: CopyRequest) -> Result<UploadOutcome, TransferError> {
        crate::config::validate_key(&request.key)?;
        if request.size <= self.inner.store.copy_object_limit() {
            let inner = &self.inner;
            let output = inner
                .with_retries(Kind::Transfer, "CopyObject", &request.key, || {
                    inner.store.copy_object(CopyObjectRequest {
                        key: request.key.clone(),
                        source_key: request.source_key.clone(),
                        source_bucket: request.source_bucket.as_ref().map(|b| b.name.clone()),
                        placement: request.placement.clone(),
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
        // content type and metadata, and copies only the version HEAD saw.
        // (A HEAD of another bucket goes through this engine's retries and
        // breaker: both buckets are on one service.)
        let source_store = request
            .source_bucket
            .as_ref()
            .map_or(&inner.store, |bucket| &bucket.store);
        let source = inner
            .with_retries(Kind::Transfer, "HeadObject", &request.source_key, || {
                source_store.head_object(&request.source_key)
            })
            .await?;
        let listed = request.source_etag.as_deref();
        if source.size != request.size || listed.is_some_and(|etag| !same_etag(etag, &source.etag))
        {
            return Err(TransferError::CopySourceChanged);
        }
        let pinned = Some(source.etag);
        let mut create = CreateMultipartRequest::new(request.key.clone());
        create.content_type = source.content_type;
        create.metadata = source.metadata;
        // As CopyObject does: the headers travel, the placement is asked for.
        create.settings = ObjectSettings {
            storage_class: request.placement.storage_class.clone(),
            acl: request.placement.acl.clone(),
            encryption: request.placement.encryption.clone(),
            ..source.settings
        };
        let source_bucket = request.source_bucket.as_ref().map(|b| b.name.clone());
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
                    source_bucket: source_bucket.clone(),
                    source_range: Some(ByteRange::new(start, end)),
                    source_if_match: pinned.clone(),
                };
                async move {
                    inner
                        .with_retries(Kind::Transfer, "UploadPartCopy", &part.key, || {
                            inner.store.upload_part_copy(part.clone())
                        })
                        .await
                        .map_err(|error| match error.store_error() {
                            Some(StoreError::PreconditionFailed) => {
                                TransferError::CopySourceChanged
                            }
                            _ => error,
                        })
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
        let completion = CompleteMultipartRequest {
            key: request.key.clone(),
            upload_id: upload_id.clone(),
            parts,
            checksum: None,
            condition: None,
        };
        let completed = complete_to_the_end(inner, completion, request.size, None).await;
        match completed {
            Ok(outcome) => {
                guard.disarm();
                debug_assert_eq!(outcome.parts, count);
                Ok(outcome)
            }
            Err(error) => {
                guard.abort_now().await;
                Err(error)
            }
        }
    }
}

/// ETags compare without their quotes (some listings drop them).
fn same_etag(a: &str, b: &str) -> bool {
    a.trim_matches('"') == b.trim_matches('"')
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
    use crate::EngineConfig;
    use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};
    use std::sync::Arc;
    use std::time::Duration;

    const MAX_PUT_SIZE_ON_S3: u64 = sluice_store::limits::MAX_PUT_SIZE;

    /// A multipart copy (called directly: the real ones are over 5 GiB) copies
    /// only the version it started from.
    #[tokio::test]
    async fn a_multipart_copy_copies_one_version_of_its_source() {
        #[derive(Debug, Clone, Copy)]
        enum Change {
            None,
            BeforeTheCopy,
            DuringThePartCopy,
        }
        let cases = [
            (Change::None, true),
            (Change::BeforeTheCopy, false),
            (Change::DuringThePartCopy, false),
        ];
        for (change, copied) in cases {
            let memory = MemoryStore::new();
            let faulty = FaultyStore::new(Arc::new(memory.clone())).inject(
                Op::UploadPart,
                None,
                None,
                Fault::Delay(Duration::from_millis(200)),
            );
            let engine = Engine::new(Arc::new(faulty), EngineConfig::default()).unwrap();
            let first = memory
                .put_object(PutRequest::new("src", bytes::Bytes::from_static(b"first!")))
                .await
                .unwrap();
            let overwrite = || async {
                let second = bytes::Bytes::from_static(b"second");
                memory
                    .put_object(PutRequest::new("src", second))
                    .await
                    .unwrap();
            };
            if let Change::BeforeTheCopy = change {
                overwrite().await;
            }
            let copy = engine.copy_multipart(CopyRequest {
                source_bucket: None,
                source_key: "src".into(),
                size: 6,
                source_etag: Some(first.etag.clone()),
                key: "dst".into(),
                placement: Default::default(),
            });
            let during = async {
                if let Change::DuringThePartCopy = change {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    overwrite().await;
                }
            };
            let (result, ()) = tokio::join!(copy, during);
            match copied {
                true => {
                    assert_eq!(result.unwrap().parts, 1, "{change:?}");
                    assert_eq!(memory.object("dst").as_deref(), Some(&b"first!"[..]));
                }
                false => {
                    let error = result.expect_err("copied a changed source");
                    assert!(
                        matches!(error, TransferError::CopySourceChanged),
                        "{change:?}: {error:?}"
                    );
                    assert!(memory.object("dst").is_none(), "{change:?}");
                    assert_eq!(memory.open_uploads(), 0, "{change:?}");
                }
            }
        }
    }

    /// An object over 5 GiB is one copy on a store that copies any size in
    /// one request (Azure, GCS), and ranges copied as parts on one that
    /// stops at 5 GiB (S3).
    #[tokio::test]
    async fn a_copy_is_one_request_up_to_the_store_s_limit() {
        let six_gib = 6 * 1024 * MIB;
        // (the store's limit, copied in one request?)
        let cases = [(u64::MAX, true), (MAX_PUT_SIZE_ON_S3, false)];
        for (limit, one_request) in cases {
            let memory = MemoryStore::new().with_copy_object_limit(limit);
            // The listing's size stands in for a large object's.
            memory
                .put_object(PutRequest::new("src", bytes::Bytes::from_static(b"bytes")))
                .await
                .unwrap();
            let engine = Engine::new(Arc::new(memory.clone()), EngineConfig::default()).unwrap();
            let copied = engine
                .copy(CopyRequest {
                    source_bucket: None,
                    source_key: "src".into(),
                    size: six_gib,
                    source_etag: None,
                    key: "dst".into(),
                    placement: Default::default(),
                })
                .await;
            assert_eq!(
                memory.calls("copy_object"),
                u64::from(one_request),
                "{limit}"
            );
            match one_request {
                true => assert_eq!(copied.unwrap().parts, 0),
                // The multipart path reads the source's HEAD first, which
                // finds it is not the size listed: no part is copied.
                false => assert!(
                    matches!(copied, Err(TransferError::CopySourceChanged)),
                    "{copied:?}"
                ),
            }
        }
    }

    /// A multipart copy's completion in flight when the breaker opens (on
    /// another request's failure) runs to its answer, as an upload's does:
    /// cut off, it would leave the copy undone after every part was copied.
    #[tokio::test]
    async fn a_copy_completion_in_flight_runs_to_its_answer_when_the_breaker_opens() {
        let memory = MemoryStore::new();
        let source = memory
            .put_object(PutRequest::new("src", bytes::Bytes::from_static(b"copied")))
            .await
            .unwrap();
        let faulty = FaultyStore::new(Arc::new(memory.clone()))
            .inject(
                Op::Complete,
                None,
                Some(1),
                Fault::Delay(Duration::from_secs(2)),
            )
            .inject(Op::Put, None, None, Fault::ServerError);
        let engine = Engine::new(
            Arc::new(faulty),
            EngineConfig {
                breaker: Some(crate::BreakerConfig {
                    failures: 1,
                    probe_interval: Duration::from_millis(20),
                    probe_timeout: Duration::from_millis(50),
                    ..crate::BreakerConfig::default()
                }),
                ..EngineConfig::default()
            },
        )
        .unwrap();
        let copying = tokio::spawn({
            let engine = engine.clone();
            async move {
                engine
                    .copy_multipart(CopyRequest {
                        source_bucket: None,
                        source_key: "src".into(),
                        size: 6,
                        source_etag: Some(source.etag),
                        key: "dst".into(),
                        placement: Default::default(),
                    })
                    .await
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let small = bytes::Bytes::from_static(b"opens the breaker");
        let failed = engine
            .upload(
                crate::UploadRequest::new("other"),
                crate::UploadSource::Stream {
                    stream: futures::stream::iter([Ok(small.clone())]).boxed(),
                    length: Some(small.len() as u64),
                },
            )
            .await;
        assert!(failed.is_err());
        assert_eq!(engine.breaker().unwrap().opened_total(), 1);
        let copied = copying.await.unwrap();
        assert!(copied.is_ok(), "{copied:?}");
        assert_eq!(memory.object("dst").as_deref(), Some(&b"copied"[..]));
        assert_eq!(memory.open_uploads(), 0);
    }

    /// A multipart copy gives the new object the source's content type and
    /// metadata, which part copies do not carry, wherever the source lives.
    #[tokio::test]
    async fn a_multipart_copy_keeps_the_sources_content_type_and_metadata() {
        for other_bucket in [false, true] {
            let source = MemoryStore::new();
            let target = match other_bucket {
                true => MemoryStore::new().with_bucket("photos", source.clone()),
                false => source.clone(),
            };
            let mut put = PutRequest::new("src", bytes::Bytes::from_static(b"a photo"));
            put.content_type = Some("image/jpeg".into());
            put.metadata
                .insert("sluice-mtime".into(), "1700000000".into());
            put.settings.cache_control = Some("max-age=9".into());
            put.settings.storage_class = Some("GLACIER".into());
            let stored = source.put_object(put).await.unwrap();
            let engine = Engine::new(Arc::new(target.clone()), EngineConfig::default()).unwrap();
            let outcome = engine
                .copy_multipart(CopyRequest {
                    source_bucket: other_bucket.then(|| SourceBucket {
                        name: "photos".into(),
                        store: Arc::new(source.clone()),
                    }),
                    source_key: "src".into(),
                    size: 7,
                    source_etag: Some(stored.etag.clone()),
                    key: "dst".into(),
                    placement: ObjectSettings {
                        storage_class: Some("STANDARD_IA".into()),
                        ..ObjectSettings::default()
                    },
                })
                .await
                .unwrap();
            assert_eq!(outcome.parts, 1);
            let copied = target.head_object("dst").await.unwrap();
            // Headers travel with the copy; the placement is the one asked for.
            assert_eq!(copied.settings.cache_control.as_deref(), Some("max-age=9"));
            assert_eq!(
                copied.settings.storage_class.as_deref(),
                Some("STANDARD_IA")
            );
            assert_eq!(target.object("dst").as_deref(), Some(&b"a photo"[..]));
            assert_eq!(
                copied.content_type.as_deref(),
                Some("image/jpeg"),
                "{other_bucket}"
            );
            assert_eq!(
                copied.metadata.get("sluice-mtime").map(String::as_str),
                Some("1700000000"),
                "{other_bucket}"
            );
        }
    }

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
