//! The engine's store with the engine's retry loop around every request: for
//! callers that talk to the store directly (the resumable-upload state of the
//! gateway) and still want backoff, the retry budget and the adaptive limits.
//!
//! A conditional PUT whose answer was lost may have landed: its retry then
//! fails its own precondition. So after a lost answer, a `PreconditionFailed`
//! is checked by reading the object back; if it holds exactly the bytes written,
//! the write counts as done.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use sluice_store::*;

use crate::error::TransferError;
use crate::retry::Kind;
use crate::{Engine, EngineInner};

/// See the module documentation.
#[derive(Clone)]
pub struct RetryingStore {
    inner: Arc<EngineInner>,
}

impl std::fmt::Debug for RetryingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RetryingStore({})", self.inner.store.describe())
    }
}

impl Engine {
    /// The engine's store with retries around each request.
    pub fn retrying_store(&self) -> RetryingStore {
        RetryingStore {
            inner: self.inner.clone(),
        }
    }
}

fn store_error(error: TransferError) -> StoreError {
    match error {
        TransferError::Store { source, .. } => source,
        other => StoreError::Service {
            status: 0,
            code: "Engine".into(),
            message: other.to_string(),
        },
    }
}

impl RetryingStore {
    async fn call<T, F, Fut>(
        &self,
        kind: Kind,
        operation: &'static str,
        key: &str,
        request: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>>,
    {
        self.inner
            .with_retries(kind, operation, key, request)
            .await
            .map_err(store_error)
    }

    /// True when `key` holds exactly `body`; its ETag then.
    async fn holds(&self, key: &str, body: &Body) -> Option<String> {
        let expected: Vec<u8> = match body {
            Body::Bytes(bytes) => bytes.to_vec(),
            Body::Chunks(chunks) => chunks.concat(),
            Body::File { .. } => return None,
        };
        // The read back is retried too: request and body (a few times).
        for _ in 0..3 {
            let output = match self.get_object(key, None).await {
                Ok(output) => output,
                Err(_) => return None,
            };
            if let Ok(chunks) = output.body.try_collect::<Vec<Bytes>>().await {
                return (chunks.concat() == expected).then_some(output.meta.etag);
            }
        }
        None
    }
}

#[async_trait]
impl ObjectStore for RetryingStore {
    fn describe(&self) -> String {
        self.inner.store.describe()
    }
    fn copy_object_limit(&self) -> u64 {
        self.inner.store.copy_object_limit()
    }

    async fn put_object(&self, request: PutRequest) -> Result<PutOutput, StoreError> {
        let answer_lost = AtomicBool::new(false);
        let result = self
            .call(Kind::Transfer, "PutObject", &request.key, || {
                let put = self.inner.store.put_object(request.clone());
                let answer_lost = &answer_lost;
                async move {
                    let result = put.await;
                    if let Err(StoreError::Transport { .. } | StoreError::Stalled { .. }) = &result
                    {
                        answer_lost.store(true, Ordering::Relaxed);
                    }
                    result
                }
            })
            .await;
        match result {
            Err(StoreError::PreconditionFailed)
                if request.condition.is_some() && answer_lost.load(Ordering::Relaxed) =>
            {
                match self.holds(&request.key, &request.body).await {
                    Some(etag) => {
                        tracing::info!(key = %request.key, "a conditional write whose answer was lost had landed");
                        Ok(PutOutput {
                            etag,
                            checksum: request.checksum,
                        })
                    }
                    None => Err(StoreError::PreconditionFailed),
                }
            }
            other => other,
        }
    }

    async fn get_object(
        &self,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<GetOutput, StoreError> {
        self.call(Kind::Transfer, "GetObject", key, || {
            self.inner.store.get_object(key, range)
        })
        .await
    }

    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.call(Kind::Transfer, "HeadObject", key, || {
            self.inner.store.head_object(key)
        })
        .await
    }

    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        self.call(Kind::Cleanup, "DeleteObject", key, || {
            self.inner.store.delete_object(key)
        })
        .await
    }

    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.call(Kind::Transfer, "ListObjectsV2", prefix, || {
            self.inner.store.list_objects(prefix, cursor, limit)
        })
        .await
    }

    async fn list_directory(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DirectoryPage, StoreError> {
        self.call(Kind::Transfer, "ListObjectsV2", prefix, || {
            self.inner.store.list_directory(prefix, cursor, limit)
        })
        .await
    }

    async fn delete_objects(&self, keys: &[String]) -> Result<Vec<DeleteFailure>, StoreError> {
        let first = keys.first().map(String::as_str).unwrap_or_default();
        self.call(Kind::Transfer, "DeleteObjects", first, || {
            self.inner.store.delete_objects(keys)
        })
        .await
    }

    async fn copy_object(&self, request: CopyObjectRequest) -> Result<PutOutput, StoreError> {
        self.call(Kind::Transfer, "CopyObject", &request.key, || {
            self.inner.store.copy_object(request.clone())
        })
        .await
    }

    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        self.call(
            Kind::Transfer,
            "CreateMultipartUpload",
            &request.key,
            || self.inner.store.create_multipart_upload(request.clone()),
        )
        .await
    }

    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError> {
        self.call(Kind::Transfer, "UploadPart", &request.key, || {
            self.inner.store.upload_part(request.clone())
        })
        .await
    }

    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        self.call(Kind::Transfer, "UploadPartCopy", &request.key, || {
            self.inner.store.upload_part_copy(request.clone())
        })
        .await
    }

    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        self.call(
            Kind::Transfer,
            "CompleteMultipartUpload",
            &request.key,
            || self.inner.store.complete_multipart_upload(request.clone()),
        )
        .await
    }

    async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.call(Kind::Cleanup, "AbortMultipartUpload", key, || {
            self.inner.store.abort_multipart_upload(key, upload_id)
        })
        .await
    }

    async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        self.call(Kind::Transfer, "ListParts", key, || {
            self.inner.store.list_parts(key, upload_id)
        })
        .await
    }

    async fn check_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.call(Kind::Transfer, "ListParts", key, || {
            self.inner.store.check_upload(key, upload_id)
        })
        .await
    }

    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        self.call(Kind::Transfer, "ListMultipartUploads", prefix, || {
            self.inner.store.list_multipart_uploads(prefix)
        })
        .await
    }

    async fn install_abort_lifecycle(&self, days: u32) -> Result<(), StoreError> {
        self.inner.store.install_abort_lifecycle(days).await
    }

    async fn check_key(&self, key: &str) -> Result<(), StoreError> {
        self.inner.store.check_key(key).await
    }
}
