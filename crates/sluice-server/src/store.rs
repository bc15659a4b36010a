//! The gateway's meter on the store: every request the store really receives is
//! counted by operation and outcome, with its latency. It sits beneath the
//! engine (which caps, paces and retries), so that retries count one each.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use sluice_store::*;

use crate::metrics::Metrics;

#[derive(Debug)]
pub struct MeteredStore {
    inner: Arc<dyn ObjectStore>,
    metrics: Metrics,
}

impl MeteredStore {
    pub fn new(inner: Arc<dyn ObjectStore>, metrics: Metrics) -> Self {
        MeteredStore { inner, metrics }
    }

    async fn call<T, F>(&self, operation: &'static str, request: F) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, StoreError>>,
    {
        let started = Instant::now();
        let result = request.await;
        let status = match &result {
            Ok(_) => "ok",
            Err(e) => e.kind(),
        };
        self.metrics
            .store_request(operation, status, started.elapsed().as_secs_f64());
        result
    }
}

#[async_trait]
impl ObjectStore for MeteredStore {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn copy_object_limit(&self) -> u64 {
        self.inner.copy_object_limit()
    }
    async fn install_abort_lifecycle(&self, days: u32) -> Result<(), StoreError> {
        self.inner.install_abort_lifecycle(days).await
    }
    async fn check_key(&self, key: &str) -> Result<(), StoreError> {
        self.inner.check_key(key).await
    }
    async fn put_object(&self, request: PutRequest) -> Result<PutOutput, StoreError> {
        self.call("put_object", self.inner.put_object(request))
            .await
    }
    async fn get_object(
        &self,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<GetOutput, StoreError> {
        self.call("get_object", self.inner.get_object(key, range))
            .await
    }
    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.call("head_object", self.inner.head_object(key)).await
    }
    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        self.call("delete_object", self.inner.delete_object(key))
            .await
    }
    async fn list_directory(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DirectoryPage, StoreError> {
        self.call(
            "list_directory",
            self.inner.list_directory(prefix, cursor, limit),
        )
        .await
    }
    async fn delete_objects(&self, keys: &[String]) -> Result<Vec<DeleteFailure>, StoreError> {
        self.call("delete_objects", self.inner.delete_objects(keys))
            .await
    }
    async fn copy_object(&self, request: CopyObjectRequest) -> Result<PutOutput, StoreError> {
        self.call("copy_object", self.inner.copy_object(request))
            .await
    }
    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.call(
            "list_objects",
            self.inner.list_objects(prefix, cursor, limit),
        )
        .await
    }
    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        self.call(
            "create_multipart_upload",
            self.inner.create_multipart_upload(request),
        )
        .await
    }
    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError> {
        self.call("upload_part", self.inner.upload_part(request))
            .await
    }
    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        self.call("upload_part_copy", self.inner.upload_part_copy(request))
            .await
    }
    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        self.call(
            "complete_multipart_upload",
            self.inner.complete_multipart_upload(request),
        )
        .await
    }
    async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.call(
            "abort_multipart_upload",
            self.inner.abort_multipart_upload(key, upload_id),
        )
        .await
    }
    async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        self.call("list_parts", self.inner.list_parts(key, upload_id))
            .await
    }
    async fn check_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.call("check_upload", self.inner.check_upload(key, upload_id))
            .await
    }
    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        self.call(
            "list_multipart_uploads",
            self.inner.list_multipart_uploads(prefix),
        )
        .await
    }
}
