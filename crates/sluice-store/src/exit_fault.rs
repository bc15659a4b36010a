//! A fault for crash tests: a store that ends the process (exit status 137,
//! SIGKILL's) right after its N-th write lands, before anything else of the
//! operation happens: no store request, no answer, no clean-up of its own
//! (`std::process::exit`: only buffered standard output is flushed). A test walks N from 1 up to the writes an operation makes,
//! and so kills it between every two of its store writes, the window a
//! SIGKILL from outside hits only by luck. The binary wraps its store in it
//! when `SLUICE_FAULT_EXIT_AFTER_STORE_WRITES` is set; nothing else does.
//!
//! Writes are what changes what the store holds: a put, a copy, a multipart
//! upload's completion or abort, a delete.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use crate::{
    ByteRange, CompleteMultipartRequest, CopyObjectRequest, CopyPartRequest,
    CreateMultipartRequest, DeleteFailure, DirectoryPage, GetOutput, ListPage, MultipartUploadInfo,
    ObjectMeta, ObjectStore, PutOutput, PutRequest, StoreError, UploadPartRequest, UploadedPart,
};

/// `inner`, ending the process after write number `at`.
#[derive(Debug)]
pub struct ExitAfterWrites {
    inner: Arc<dyn ObjectStore>,
    at: u64,
    writes: AtomicU64,
}

impl ExitAfterWrites {
    pub fn new(inner: Arc<dyn ObjectStore>, at: u64) -> ExitAfterWrites {
        ExitAfterWrites {
            inner,
            at,
            writes: AtomicU64::new(0),
        }
    }

    /// Counts a write that landed (`what` on `key`), ending the process at
    /// the set one.
    fn landed<T>(
        &self,
        result: Result<T, StoreError>,
        what: &str,
        key: &str,
    ) -> Result<T, StoreError> {
        if result.is_ok() {
            let writes = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
            if writes == self.at {
                eprintln!(
                    "SLUICE_FAULT_EXIT_AFTER_STORE_WRITES: exiting after store write {writes} ({what} {key})"
                );
                std::process::exit(137);
            }
        }
        result
    }
}

#[async_trait]
impl ObjectStore for ExitAfterWrites {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn copy_object_limit(&self) -> u64 {
        self.inner.copy_object_limit()
    }

    async fn put_object(&self, request: PutRequest) -> Result<PutOutput, StoreError> {
        let key = request.key.clone();
        self.landed(self.inner.put_object(request).await, "put", &key)
    }

    async fn get_object(
        &self,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<GetOutput, StoreError> {
        self.inner.get_object(key, range).await
    }

    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.inner.head_object(key).await
    }

    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        self.landed(self.inner.delete_object(key).await, "delete", key)
    }

    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.inner.list_objects(prefix, cursor, limit).await
    }

    async fn list_directory(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DirectoryPage, StoreError> {
        self.inner.list_directory(prefix, cursor, limit).await
    }

    async fn delete_objects(&self, keys: &[String]) -> Result<Vec<DeleteFailure>, StoreError> {
        let first = keys.first().cloned().unwrap_or_default();
        self.landed(self.inner.delete_objects(keys).await, "delete", &first)
    }

    async fn copy_object(&self, request: CopyObjectRequest) -> Result<PutOutput, StoreError> {
        let key = request.key.clone();
        self.landed(self.inner.copy_object(request).await, "copy", &key)
    }

    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        self.inner.create_multipart_upload(request).await
    }

    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError> {
        self.inner.upload_part(request).await
    }

    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        self.inner.upload_part_copy(request).await
    }

    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        let key = request.key.clone();
        self.landed(
            self.inner.complete_multipart_upload(request).await,
            "complete",
            &key,
        )
    }

    async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.landed(
            self.inner.abort_multipart_upload(key, upload_id).await,
            "abort",
            key,
        )
    }

    async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        self.inner.list_parts(key, upload_id).await
    }

    async fn check_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.inner.check_upload(key, upload_id).await
    }

    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        self.inner.list_multipart_uploads(prefix).await
    }

    async fn check_key(&self, key: &str) -> Result<(), StoreError> {
        self.inner.check_key(key).await
    }

    async fn install_abort_lifecycle(&self, days: u32) -> Result<(), StoreError> {
        self.inner.install_abort_lifecycle(days).await
    }
}
