//! An in-memory `ObjectStore` for unit tests. It follows S3's rules (minimum part
//! size, sorted part list, checksums verified) and measures what it is sent: calls
//! per operation and the peak number of body bytes inside write requests at once,
//! which is how engine tests check the memory budget from the outside.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use sluice_store::limits::MIN_PART_SIZE;
use sluice_store::*;

#[derive(Debug, Clone)]
struct StoredObject {
    data: Bytes,
    meta: ObjectMeta,
}

#[derive(Debug)]
struct Upload {
    key: String,
    content_type: Option<String>,
    metadata: Metadata,
    settings: ObjectSettings,
    algorithm: Option<ChecksumAlgorithm>,
    parts: BTreeMap<u32, (Bytes, UploadedPart)>,
    initiated: std::time::SystemTime,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, StoredObject>,
    uploads: HashMap<String, Upload>,
    calls: HashMap<&'static str, u64>,
    next_id: u64,
}

/// See the module documentation.
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    state: Arc<Mutex<State>>,
    in_flight: Arc<AtomicU64>,
    peak_in_flight: Arc<AtomicU64>,
    latency: Option<Duration>,
    /// Other buckets of the same service, by name: part copies read from them.
    buckets: Arc<BTreeMap<String, MemoryStore>>,
    /// Milliseconds the store's clock is ahead of the wall clock (see
    /// [`MemoryStore::advance_clock`]).
    clock_ahead_ms: Arc<AtomicU64>,
    /// What [`ObjectStore::copy_object_limit`] answers; `None`: S3's.
    copy_object_limit: Option<u64>,
}

/// Counts body bytes inside a request while it lives.
struct InFlight<'a> {
    store: &'a MemoryStore,
    bytes: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.store.in_flight.fetch_sub(self.bytes, Ordering::SeqCst);
    }
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the store's clock (the time it gives the objects written from
    /// now on) `by` ahead: days of writes simulated in a test's seconds.
    pub fn advance_clock(&self, by: Duration) {
        self.clock_ahead_ms
            .fetch_add(by.as_millis() as u64, Ordering::SeqCst);
    }

    /// The store's time now.
    pub fn now(&self) -> SystemTime {
        SystemTime::now() + Duration::from_millis(self.clock_ahead_ms.load(Ordering::SeqCst))
    }

    /// Every request takes `latency` (virtual time under `tokio::time::pause`).
    pub fn with_latency(mut self, latency: Duration) -> Self {
        self.latency = Some(latency);
        self
    }

    /// Copies objects up to `limit` bytes in one request, as Azure and GCS
    /// copy any size where S3 stops at 5 GiB.
    pub fn with_copy_object_limit(mut self, limit: u64) -> Self {
        self.copy_object_limit = Some(limit);
        self
    }

    /// `other` as the bucket `name` of the same service: part copies that
    /// name it as their source bucket read from it. (Set up before cloning:
    /// clones taken earlier do not see it.)
    pub fn with_bucket(mut self, name: &str, other: MemoryStore) -> Self {
        Arc::make_mut(&mut self.buckets).insert(name.to_string(), other);
        self
    }

    /// This store, or its other bucket `name` (see [`MemoryStore::with_bucket`]).
    fn bucket(&self, name: Option<&str>) -> Result<&MemoryStore, StoreError> {
        match name {
            None => Ok(self),
            Some(name) => self
                .buckets
                .get(name)
                .ok_or_else(|| StoreError::NoSuchBucket {
                    bucket: name.to_string(),
                }),
        }
    }

    /// Most body bytes that were inside write requests at one time.
    pub fn peak_in_flight_bytes(&self) -> u64 {
        self.peak_in_flight.load(Ordering::SeqCst)
    }

    /// How many times an operation was called (`"upload_part"`, `"abort"`, ...).
    pub fn calls(&self, op: &str) -> u64 {
        self.lock().calls.get(op).copied().unwrap_or(0)
    }

    /// The bytes of an object, if it exists.
    pub fn object(&self, key: &str) -> Option<Bytes> {
        self.lock().objects.get(key).map(|o| o.data.clone())
    }

    /// The keys of the objects under `prefix`, in order.
    pub fn keys_under(&self, prefix: &str) -> Vec<String> {
        self.lock()
            .objects
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect()
    }

    /// Number of multipart uploads neither completed nor aborted.
    pub fn open_uploads(&self) -> usize {
        self.lock().uploads.len()
    }

    /// Number of parts held by open uploads.
    pub fn stored_parts(&self) -> usize {
        self.lock().uploads.values().map(|u| u.parts.len()).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn enter(&self, op: &'static str, body_bytes: u64) -> InFlight<'_> {
        *self.lock().calls.entry(op).or_insert(0) += 1;
        let now = self.in_flight.fetch_add(body_bytes, Ordering::SeqCst) + body_bytes;
        self.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        let guard = InFlight {
            store: self,
            bytes: body_bytes,
        };
        if let Some(latency) = self.latency {
            tokio::time::sleep(latency).await;
        }
        guard
    }
}

fn read_body(body: &Body) -> Result<Bytes, StoreError> {
    match body {
        Body::Bytes(b) => Ok(b.clone()),
        Body::Chunks(chunks) => Ok(Bytes::from(chunks.concat())),
        Body::File { path, offset, len } => {
            use std::io::{Read, Seek, SeekFrom};
            let mut file = std::fs::File::open(path).map_err(StoreError::Body)?;
            file.seek(SeekFrom::Start(*offset))
                .map_err(StoreError::Body)?;
            let mut buf = vec![0u8; *len as usize];
            file.read_exact(&mut buf).map_err(StoreError::Body)?;
            Ok(Bytes::from(buf))
        }
    }
}

fn verify(data: &[u8], expected: Option<Checksum>) -> Result<(), StoreError> {
    match expected {
        Some(sum) if sum.algorithm.checksum(data) != sum => Err(StoreError::ChecksumMismatch {
            algorithm: sum.algorithm.name(),
        }),
        _ => Ok(()),
    }
}

fn check_key(key: &str) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > limits::MAX_KEY_LEN {
        return Err(StoreError::InvalidKey {
            key: key.into(),
            reason: "length must be 1..=1024 bytes",
        });
    }
    Ok(())
}

#[async_trait]
impl ObjectStore for MemoryStore {
    fn describe(&self) -> String {
        "memory://".into()
    }

    fn copy_object_limit(&self) -> u64 {
        self.copy_object_limit
            .unwrap_or(sluice_store::limits::MAX_PUT_SIZE)
    }

    async fn put_object(&self, request: PutRequest) -> Result<PutOutput, StoreError> {
        let _in = self.enter("put", request.body.len()).await;
        check_key(&request.key)?;
        let data = read_body(&request.body)?;
        verify(&data, request.checksum)?;
        let mut state = self.lock();
        let current = state.objects.get(&request.key).map(|o| o.meta.etag.clone());
        match (&request.condition, current) {
            (Some(WriteCondition::IfNoneMatch), Some(_)) => {
                return Err(StoreError::PreconditionFailed)
            }
            (Some(WriteCondition::IfMatch(want)), Some(etag)) if *want != etag => {
                return Err(StoreError::PreconditionFailed)
            }
            (Some(WriteCondition::IfMatch(_)), None) => return Err(StoreError::PreconditionFailed),
            _ => {}
        }
        state.next_id += 1;
        let etag = format!("\"m{}\"", state.next_id);
        let meta = ObjectMeta {
            key: request.key.clone(),
            size: data.len() as u64,
            etag: etag.clone(),
            last_modified: self.now(),
            content_type: request.content_type,
            metadata: request.metadata,
            settings: request.settings,
            checksum: request.checksum,
        };
        state
            .objects
            .insert(request.key, StoredObject { data, meta });
        Ok(PutOutput {
            etag,
            checksum: request.checksum,
        })
    }

    async fn get_object(
        &self,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<GetOutput, StoreError> {
        let _in = self.enter("get", 0).await;
        let object = self
            .lock()
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| StoreError::NoSuchKey { key: key.into() })?;
        let (start, end) = match range {
            None => (0, object.meta.size),
            Some(r) => r
                .resolve(object.meta.size)
                .ok_or(StoreError::InvalidRange)?,
        };
        let body = object.data.slice(start as usize..end as usize);
        Ok(GetOutput {
            meta: object.meta,
            range: (start, end),
            body: Box::pin(futures::stream::iter([Ok(body)])),
        })
    }

    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        let _in = self.enter("head", 0).await;
        self.lock()
            .objects
            .get(key)
            .map(|o| o.meta.clone())
            .ok_or_else(|| StoreError::NoSuchKey { key: key.into() })
    }

    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        let _in = self.enter("delete", 0).await;
        self.lock().objects.remove(key);
        Ok(())
    }

    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let _in = self.enter("list", 0).await;
        let state = self.lock();
        let mut page = ListPage::default();
        for (key, object) in state.objects.range(prefix.to_string()..) {
            if !key.starts_with(prefix) {
                break;
            }
            if cursor.is_some_and(|c| key.as_str() <= c) {
                continue;
            }
            if page.objects.len() == limit.max(1) {
                page.next_cursor = page.objects.last().map(|o| o.key.clone());
                break;
            }
            page.objects.push(ObjectSummary {
                key: key.clone(),
                size: object.meta.size,
                etag: object.meta.etag.clone(),
                last_modified: object.meta.last_modified,
            });
        }
        Ok(page)
    }

    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        let _in = self.enter("create", 0).await;
        check_key(&request.key)?;
        let mut state = self.lock();
        state.next_id += 1;
        let id = format!("upload-{}", state.next_id);
        state.uploads.insert(
            id.clone(),
            Upload {
                key: request.key,
                content_type: request.content_type,
                metadata: request.metadata,
                settings: request.settings,
                algorithm: request.checksum_algorithm,
                parts: BTreeMap::new(),
                initiated: std::time::SystemTime::now(),
            },
        );
        Ok(id)
    }

    async fn copy_object(&self, request: CopyObjectRequest) -> Result<PutOutput, StoreError> {
        *self.lock().calls.entry("copy_object").or_insert(0) += 1;
        check_key(&request.key)?;
        let source = self.bucket(request.source_bucket.as_deref())?;
        let copied = source
            .lock()
            .objects
            .get(&request.source_key)
            .cloned()
            .ok_or_else(|| StoreError::NoSuchKey {
                key: request.source_key.clone(),
            })?;
        let mut state = self.lock();
        state.next_id += 1;
        let etag = format!("\"m{}\"", state.next_id);
        // As CopyObject: the headers, metadata and checksum travel, the
        // placement is the copy's own.
        let meta = ObjectMeta {
            key: request.key.clone(),
            etag: etag.clone(),
            last_modified: self.now(),
            settings: ObjectSettings {
                storage_class: request.placement.storage_class,
                acl: request.placement.acl,
                encryption: request.placement.encryption,
                ..copied.meta.settings
            },
            ..copied.meta
        };
        let checksum = meta.checksum;
        state.objects.insert(
            request.key,
            StoredObject {
                data: copied.data,
                meta,
            },
        );
        Ok(PutOutput { etag, checksum })
    }

    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        *self.lock().calls.entry("upload_part_copy").or_insert(0) += 1;
        // In memory a copy shares the source's bytes: nothing is buffered anew.
        let source = self.bucket(request.source_bucket.as_deref())?;
        let (mut data, etag) = source
            .lock()
            .objects
            .get(&request.source_key)
            .map(|o| (o.data.clone(), o.meta.etag.clone()))
            .ok_or_else(|| StoreError::NoSuchKey {
                key: request.source_key.clone(),
            })?;
        if request
            .source_if_match
            .as_ref()
            .is_some_and(|want| want.trim_matches('"') != etag.trim_matches('"'))
        {
            return Err(StoreError::PreconditionFailed);
        }
        if let Some(range) = request.source_range {
            let whole = data.len() as u64;
            let (start, end) = range
                .resolve(whole)
                .filter(|_| range.end.is_none_or(|end| end <= whole))
                .ok_or_else(|| {
                    StoreError::InvalidPart(format!("copy range {range:?} is outside the source"))
                })?;
            data = data.slice(start as usize..end as usize);
        }
        self.upload_part(UploadPartRequest {
            key: request.key,
            upload_id: request.upload_id,
            part_number: request.part_number,
            body: Body::Bytes(data),
            checksum: PartChecksum::None,
        })
        .await
    }

    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError> {
        let _in = self.enter("upload_part", request.body.len()).await;
        let data = read_body(&request.body)?;
        verify(&data, request.checksum.known())?;
        let mut state = self.lock();
        state.next_id += 1;
        let etag = format!("\"p{}\"", state.next_id);
        let upload = state
            .uploads
            .get_mut(&request.upload_id)
            .filter(|u| u.key == request.key)
            .ok_or_else(|| StoreError::NoSuchUpload {
                upload_id: request.upload_id.clone(),
            })?;
        let checksum = request
            .checksum
            .algorithm()
            .or(upload.algorithm)
            .map(|a| a.checksum(&data));
        let part = UploadedPart {
            part_number: request.part_number,
            etag,
            size: data.len() as u64,
            checksum,
        };
        upload
            .parts
            .insert(request.part_number, (data, part.clone()));
        Ok(part)
    }

    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        let _in = self.enter("complete", 0).await;
        let mut state = self.lock();
        let upload = state
            .uploads
            .get(&request.upload_id)
            .filter(|u| u.key == request.key)
            .ok_or_else(|| StoreError::NoSuchUpload {
                upload_id: request.upload_id.clone(),
            })?;
        if request.parts.is_empty()
            || request
                .parts
                .windows(2)
                .any(|w| w[0].part_number >= w[1].part_number)
        {
            return Err(StoreError::InvalidPart(
                "parts must be listed in ascending order".into(),
            ));
        }
        let mut data = Vec::new();
        for (index, wanted) in request.parts.iter().enumerate() {
            let (bytes, part) = upload
                .parts
                .get(&wanted.part_number)
                .filter(|(_, p)| p.etag == wanted.etag)
                .ok_or_else(|| {
                    StoreError::InvalidPart(format!("part {} unknown", wanted.part_number))
                })?;
            if index + 1 < request.parts.len() && part.size < MIN_PART_SIZE {
                return Err(StoreError::EntityTooSmall);
            }
            data.extend_from_slice(bytes);
        }
        let checksum = upload.algorithm.map(|a| a.checksum(&data));
        if let (Some(expected), Some(actual)) = (request.checksum, checksum) {
            if expected != actual {
                return Err(StoreError::ChecksumMismatch {
                    algorithm: expected.algorithm.name(),
                });
            }
        }
        let exists = state.objects.get(&upload.key).map(|o| o.meta.etag.clone());
        match (&request.condition, exists) {
            (None, _) | (Some(WriteCondition::IfNoneMatch), None) => {}
            (Some(WriteCondition::IfMatch(expected)), Some(etag)) if *expected == etag => {}
            _ => return Err(StoreError::PreconditionFailed),
        }
        let upload = state
            .uploads
            .remove(&request.upload_id)
            .expect("checked above");
        state.next_id += 1;
        let etag = format!("\"m{}-{}\"", state.next_id, request.parts.len());
        let meta = ObjectMeta {
            key: upload.key.clone(),
            size: data.len() as u64,
            etag: etag.clone(),
            last_modified: self.now(),
            content_type: upload.content_type,
            metadata: upload.metadata,
            settings: upload.settings,
            checksum,
        };
        state.objects.insert(
            upload.key,
            StoredObject {
                data: Bytes::from(data),
                meta,
            },
        );
        Ok(PutOutput { etag, checksum })
    }

    async fn abort_multipart_upload(&self, _key: &str, upload_id: &str) -> Result<(), StoreError> {
        let _in = self.enter("abort", 0).await;
        match self.lock().uploads.remove(upload_id) {
            Some(_) => Ok(()),
            None => Err(StoreError::NoSuchUpload {
                upload_id: upload_id.into(),
            }),
        }
    }

    async fn list_parts(
        &self,
        _key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        let _in = self.enter("list_parts", 0).await;
        let state = self.lock();
        let upload = state
            .uploads
            .get(upload_id)
            .ok_or_else(|| StoreError::NoSuchUpload {
                upload_id: upload_id.into(),
            })?;
        Ok(upload.parts.values().map(|(_, p)| p.clone()).collect())
    }

    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        let _in = self.enter("list_uploads", 0).await;
        let mut uploads: Vec<_> = self
            .lock()
            .uploads
            .iter()
            .filter(|(_, u)| u.key.starts_with(prefix))
            .map(|(id, u)| MultipartUploadInfo {
                key: u.key.clone(),
                upload_id: id.clone(),
                initiated: Some(u.initiated),
            })
            .collect();
        uploads.sort_by(|a, b| a.key.cmp(&b.key).then(a.upload_id.cmp(&b.upload_id)));
        Ok(uploads)
    }
}
