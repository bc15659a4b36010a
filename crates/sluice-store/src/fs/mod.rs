//! The local-directory store, the embedded default that needs no server.
//!
//! Objects are plain files under the root, so `ls` shows what was stored. The
//! store's own bookkeeping lives under `ROOT/.sluice/`: `tmp/` for staging files,
//! `meta/` for sidecars (content type, metadata, checksum) and `uploads/` for
//! multipart uploads in progress. Every write goes to a staging file first and
//! becomes visible by rename, only once complete and verified; a crash leaves at
//! most a staging file, which the next open removes.
//!
//! Conditional writes are atomic within one process (a lock per key stripe);
//! several processes writing one directory get last-writer-wins without conditions.

mod multipart;
mod paths;
mod sidecar;

use std::fs::{self, File};
use std::hash::{Hash, Hasher as _};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::stream;

use crate::checksum::{Checksum, ChecksumAlgorithm, Hasher};
use crate::error::StoreError;
use crate::types::*;
use crate::ObjectStore;
use paths::{key_to_relative, relative_to_key, INTERNAL_DIR};
use sidecar::Sidecar;

/// Size of the reads that stream a file's contents.
const CHUNK: usize = 256 * 1024;
/// Staging files older than this are crash leftovers and removed when opening.
const STALE_STAGING_AGE: Duration = Duration::from_secs(3600);
/// Number of lock stripes for commits.
const STRIPES: usize = 64;

/// How to open a directory store.
#[derive(Debug, Clone)]
pub struct FsConfig {
    pub root: PathBuf,
    /// `fsync` data before making it visible, so that a power loss cannot leave a
    /// visible but empty object. On by default.
    pub fsync: bool,
}

impl FsConfig {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FsConfig {
            root: root.into(),
            fsync: true,
        }
    }
}

/// A store in a local directory.
#[derive(Debug, Clone)]
pub struct FsStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    tmp: PathBuf,
    meta: PathBuf,
    uploads: PathBuf,
    fsync: bool,
    stripes: Vec<Mutex<()>>,
}

impl FsStore {
    /// Opens (creating if needed) a store rooted at `config.root`.
    pub fn open(config: FsConfig) -> Result<FsStore, StoreError> {
        let root = config.root;
        let internal = root.join(INTERNAL_DIR);
        let inner = Inner {
            tmp: internal.join("tmp"),
            meta: internal.join("meta"),
            uploads: internal.join("uploads"),
            root,
            fsync: config.fsync,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        };
        for dir in [&inner.root, &inner.tmp, &inner.meta, &inner.uploads] {
            fs::create_dir_all(dir)?;
        }
        remove_stale_staging(&inner.tmp);
        Ok(FsStore {
            inner: Arc::new(inner),
        })
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }
}

impl Inner {
    fn data_path(&self, key: &str) -> Result<PathBuf, StoreError> {
        Ok(self.root.join(key_to_relative(key)?))
    }

    fn sidecar_path(&self, key: &str) -> Result<PathBuf, StoreError> {
        let mut path = self.meta.join(key_to_relative(key)?);
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".json");
        path.set_file_name(name);
        Ok(path)
    }

    fn stripe(&self, key: &str) -> &Mutex<()> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        &self.stripes[hasher.finish() as usize % STRIPES]
    }

    fn new_staging_path(&self) -> PathBuf {
        self.tmp.join(uuid::Uuid::new_v4().simple().to_string())
    }

    /// Writes `body` to a new staging file in `dir`, verifying `expected` and
    /// computing a checksum of `algorithm`. The file is removed on any error.
    fn stage(
        &self,
        staging: &Path,
        body: &Body,
        expected: Option<Checksum>,
        algorithm: Option<ChecksumAlgorithm>,
    ) -> Result<Option<Checksum>, StoreError> {
        let result = write_body(
            staging,
            body,
            algorithm.or(expected.map(|c| c.algorithm)),
            self.fsync,
        );
        let computed = match result {
            Ok(sum) => sum,
            Err(e) => {
                let _ = fs::remove_file(staging);
                return Err(e);
            }
        };
        if let (Some(expected), Some(actual)) = (expected, computed) {
            if expected != actual {
                let _ = fs::remove_file(staging);
                return Err(StoreError::ChecksumMismatch {
                    algorithm: expected.algorithm.name(),
                });
            }
        }
        Ok(computed)
    }

    fn put_blocking(&self, request: PutRequest) -> Result<PutOutput, StoreError> {
        let data_path = self.data_path(&request.key)?;
        let sidecar_path = self.sidecar_path(&request.key)?;
        let staging = self.new_staging_path();
        let checksum = self.stage(&staging, &request.body, request.checksum, None)?;
        let mut sidecar = Sidecar {
            content_type: request.content_type,
            metadata: request.metadata,
            ..Sidecar::default()
        };
        sidecar.set_checksum(checksum);
        let etag = self.commit(
            &request.key,
            &staging,
            &data_path,
            &sidecar_path,
            sidecar,
            request.condition.as_ref(),
        )?;
        Ok(PutOutput { etag, checksum })
    }

    /// Makes a staged file visible at `key`, checking `condition` under the key's lock.
    fn commit(
        &self,
        key: &str,
        staging: &Path,
        data_path: &Path,
        sidecar_path: &Path,
        sidecar: Sidecar,
        condition: Option<&WriteCondition>,
    ) -> Result<String, StoreError> {
        let _guard = self.stripe(key).lock().unwrap_or_else(|p| p.into_inner());
        let result = check_condition(data_path, condition).and_then(|()| {
            sidecar::commit(&self.tmp, staging, data_path, sidecar_path, sidecar)
                .map_err(|e| map_dir_conflict(e, key))
        });
        if result.is_err() {
            let _ = fs::remove_file(staging);
        }
        result
    }

    fn meta_blocking(&self, key: &str, file: &File) -> Result<ObjectMeta, StoreError> {
        let stat = file.metadata()?;
        if !stat.is_file() {
            return Err(StoreError::NoSuchKey {
                key: key.to_string(),
            });
        }
        let etag = sidecar::etag_of(&stat);
        let sidecar = sidecar::read(&self.sidecar_path(key)?, &etag);
        Ok(ObjectMeta {
            key: key.to_string(),
            size: stat.len(),
            checksum: sidecar.checksum(),
            etag,
            last_modified: stat.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            content_type: sidecar.content_type,
            metadata: sidecar.metadata,
        })
    }

    fn open_object(&self, key: &str) -> Result<(File, ObjectMeta), StoreError> {
        let path = self.data_path(key)?;
        let file = File::open(&path).map_err(|e| not_found_as(e, key))?;
        let meta = self.meta_blocking(key, &file)?;
        Ok((file, meta))
    }

    fn delete_blocking(&self, key: &str) -> Result<(), StoreError> {
        let data_path = self.data_path(key)?;
        let sidecar_path = self.sidecar_path(key)?;
        let _guard = self.stripe(key).lock().unwrap_or_else(|p| p.into_inner());
        match fs::symlink_metadata(&data_path) {
            Ok(m) if m.is_dir() => return Ok(()),
            Ok(_) => remove_if_exists(&data_path)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        remove_if_exists(&sidecar_path)?;
        remove_empty_parents(&data_path, &self.root);
        remove_empty_parents(&sidecar_path, &self.meta);
        Ok(())
    }

    fn list_blocking(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let mut keys = Vec::new();
        walk(&self.root, Path::new(""), prefix, &mut keys)?;
        keys.sort();
        let mut page = ListPage::default();
        for key in keys
            .into_iter()
            .filter(|k| cursor.is_none_or(|c| k.as_str() > c))
        {
            if page.objects.len() == limit {
                page.next_cursor = page.objects.last().map(|o| o.key.clone());
                break;
            }
            let Ok(stat) = fs::metadata(self.root.join(&key)) else {
                continue;
            };
            page.objects.push(ObjectSummary {
                size: stat.len(),
                etag: sidecar::etag_of(&stat),
                last_modified: stat.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                key,
            });
        }
        Ok(page)
    }
}

/// Runs blocking filesystem work off the async runtime.
async fn blocking<T, F>(work: F) -> Result<T, StoreError>
where
    F: FnOnce() -> Result<T, StoreError> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| StoreError::Io(io::Error::other(e)))?
}

/// Copies `body` into a new file at `path`, hashing as it goes.
fn write_body(
    path: &Path,
    body: &Body,
    algorithm: Option<ChecksumAlgorithm>,
    fsync: bool,
) -> Result<Option<Checksum>, StoreError> {
    let mut out = File::create(path)?;
    let mut hasher = algorithm.map(Hasher::new);
    match body {
        Body::Bytes(bytes) => {
            if let Some(h) = hasher.as_mut() {
                h.update(bytes);
            }
            out.write_all(bytes)?;
        }
        Body::Chunks(chunks) => {
            for bytes in chunks.iter() {
                if let Some(h) = hasher.as_mut() {
                    h.update(bytes);
                }
                out.write_all(bytes)?;
            }
        }
        Body::File {
            path: source,
            offset,
            len,
        } => {
            let mut input = File::open(source).map_err(StoreError::Body)?;
            input
                .seek(SeekFrom::Start(*offset))
                .map_err(StoreError::Body)?;
            let mut remaining = *len;
            let mut buf = vec![0u8; CHUNK.min(*len as usize).max(1)];
            while remaining > 0 {
                let want = buf.len().min(remaining as usize);
                let n = input.read(&mut buf[..want]).map_err(StoreError::Body)?;
                if n == 0 {
                    return Err(StoreError::LengthMismatch {
                        expected: *len,
                        actual: len - remaining,
                    });
                }
                if let Some(h) = hasher.as_mut() {
                    h.update(&buf[..n]);
                }
                out.write_all(&buf[..n])?;
                remaining -= n as u64;
            }
        }
    }
    if fsync {
        out.sync_data()?;
    }
    Ok(hasher.map(|h| h.finish()))
}

fn check_condition(data_path: &Path, condition: Option<&WriteCondition>) -> Result<(), StoreError> {
    let current = match fs::metadata(data_path) {
        Ok(m) if m.is_file() => Some(sidecar::etag_of(&m)),
        Ok(_) => None,
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e.into()),
    };
    match (condition, current) {
        (None, _) => Ok(()),
        (Some(WriteCondition::IfNoneMatch), None) => Ok(()),
        (Some(WriteCondition::IfMatch(expected)), Some(etag)) if etag_eq(expected, &etag) => Ok(()),
        _ => Err(StoreError::PreconditionFailed),
    }
}

/// ETags compare without their quotes, as clients are lax about them.
fn etag_eq(a: &str, b: &str) -> bool {
    a.trim_matches('"') == b.trim_matches('"')
}

/// A key whose path crosses an existing object (`a` exists and `a/b` is written,
/// or the reverse) cannot be stored in a directory tree.
fn map_dir_conflict(error: io::Error, key: &str) -> StoreError {
    match error.kind() {
        io::ErrorKind::NotADirectory | io::ErrorKind::IsADirectory | io::ErrorKind::AlreadyExists
        | io::ErrorKind::DirectoryNotEmpty => StoreError::InvalidKey {
            key: key.to_string(),
            reason: "the key conflicts with an existing object (one key is a directory prefix of the other)",
        },
        _ => StoreError::Io(error),
    }
}

fn not_found_as(error: io::Error, key: &str) -> StoreError {
    match error.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory | io::ErrorKind::IsADirectory => {
            StoreError::NoSuchKey {
                key: key.to_string(),
            }
        }
        _ => StoreError::Io(error),
    }
}

fn remove_if_exists(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Removes now-empty directories between `path` and `stop` (exclusive).
fn remove_empty_parents(path: &Path, stop: &Path) {
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d == stop || !d.starts_with(stop) || fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
}

fn remove_stale_staging(tmp: &Path) {
    let Ok(entries) = fs::read_dir(tmp) else {
        return;
    };
    let now = SystemTime::now();
    for entry in entries.flatten() {
        let stale = entry
            .metadata()
            .and_then(|m| m.modified())
            .map(|t| now.duration_since(t).unwrap_or_default() > STALE_STAGING_AGE)
            .unwrap_or(false);
        if stale {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Collects keys under `dir` (relative path `relative`) that start with `prefix`,
/// descending only into directories that can hold such keys.
fn walk(
    dir: &Path,
    relative: &Path,
    prefix: &str,
    keys: &mut Vec<String>,
) -> Result<(), StoreError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        let rel = relative.join(entry.file_name());
        let Some(key) = relative_to_key(&rel) else {
            continue;
        };
        if relative.as_os_str().is_empty() && key == INTERNAL_DIR {
            continue;
        }
        let file_type = entry.file_type()?;
        if file_type.is_dir() {
            let dir_key = format!("{key}/");
            if dir_key.starts_with(prefix) || prefix.starts_with(&dir_key) {
                walk(&entry.path(), &rel, prefix, keys)?;
            }
        } else if file_type.is_file() && key.starts_with(prefix) {
            keys.push(key);
        }
    }
    Ok(())
}

/// Streams `[start, end)` of an open file.
fn file_stream(file: File, start: u64, end: u64) -> ByteStream {
    let state = (Some(file), start);
    Box::pin(stream::unfold(state, move |(file, pos)| async move {
        let file = file?;
        if pos >= end {
            return None;
        }
        let want = CHUNK.min((end - pos) as usize);
        let read = tokio::task::spawn_blocking(move || {
            let mut buf = BytesMut::zeroed(want);
            let result = std::os::unix::fs::FileExt::read_at(&file, &mut buf, pos);
            (file, buf, result)
        })
        .await;
        match read {
            Ok((file, mut buf, Ok(n))) if n > 0 => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), (Some(file), pos + n as u64)))
            }
            Ok((_, _, Ok(_))) => Some((
                Err(StoreError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "object shrank while being read",
                ))),
                (None, end),
            )),
            Ok((_, _, Err(e))) => Some((Err(StoreError::Io(e)), (None, end))),
            Err(e) => Some((Err(StoreError::Io(io::Error::other(e))), (None, end))),
        }
    }))
}

#[async_trait]
impl ObjectStore for FsStore {
    fn describe(&self) -> String {
        format!("file://{}", self.inner.root.display())
    }

    async fn put_object(&self, request: PutRequest) -> Result<PutOutput, StoreError> {
        let inner = self.inner.clone();
        blocking(move || inner.put_blocking(request)).await
    }

    async fn get_object(
        &self,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<GetOutput, StoreError> {
        let inner = self.inner.clone();
        let key = key.to_string();
        let (file, meta) = blocking(move || inner.open_object(&key)).await?;
        let (start, end) = match range {
            None => (0, meta.size),
            Some(r) => r.resolve(meta.size).ok_or(StoreError::InvalidRange)?,
        };
        Ok(GetOutput {
            body: file_stream(file, start, end),
            range: (start, end),
            meta,
        })
    }

    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        let inner = self.inner.clone();
        let key = key.to_string();
        blocking(move || inner.open_object(&key).map(|(_, meta)| meta)).await
    }

    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        let inner = self.inner.clone();
        let key = key.to_string();
        blocking(move || inner.delete_blocking(&key)).await
    }

    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        let inner = self.inner.clone();
        let prefix = prefix.to_string();
        let cursor = cursor.map(str::to_string);
        blocking(move || inner.list_blocking(&prefix, cursor.as_deref(), limit.max(1))).await
    }

    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        let inner = self.inner.clone();
        blocking(move || inner.create_upload_blocking(request)).await
    }

    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError> {
        let inner = self.inner.clone();
        blocking(move || inner.upload_part_blocking(request)).await
    }

    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        let inner = self.inner.clone();
        blocking(move || inner.copy_part_blocking(request)).await
    }

    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        let inner = self.inner.clone();
        blocking(move || inner.complete_blocking(request)).await
    }

    async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        let inner = self.inner.clone();
        let (key, upload_id) = (key.to_string(), upload_id.to_string());
        blocking(move || inner.abort_blocking(&key, &upload_id)).await
    }

    async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        let inner = self.inner.clone();
        let (key, upload_id) = (key.to_string(), upload_id.to_string());
        blocking(move || inner.list_parts_blocking(&key, &upload_id)).await
    }

    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        let inner = self.inner.clone();
        let prefix = prefix.to_string();
        blocking(move || inner.list_uploads_blocking(&prefix)).await
    }
}
