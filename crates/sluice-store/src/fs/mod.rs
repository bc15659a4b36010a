//! The local-directory store, the embedded default that needs no server.
//!
//! Objects are plain files under the root, so `ls` shows what was stored. The
//! store's own bookkeeping lives under `ROOT/.sluice/`: `tmp/` for staging files,
//! `sidecars/` for metadata (content type, metadata, checksum; see [`sidecar`])
//! and `uploads/` for multipart uploads in progress. Every write goes to a staging
//! file first and becomes visible by rename, only once complete and verified; a
//! crash leaves at most a staging file, which the next open removes, or an unused
//! sidecar. Files and the directories they are renamed into are synced.
//!
//! Keys are resolved without following symbolic links ([`tree`]); a key a
//! directory tree cannot hold next to another (`a` and `a/b`) is a
//! [`StoreError::KeyConflict`], a name the filesystem cannot hold an
//! [`StoreError::InvalidKey`].
//!
//! Conditional writes are atomic within one process (a lock per key stripe);
//! several processes writing one directory get last-writer-wins without conditions.

mod multipart;
mod paths;
mod sidecar;
mod tree;

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
pub use paths::INTERNAL_DIR;
use paths::{key_to_relative, relative_to_key};
use sidecar::Sidecar;
use tree::ObjectTree;

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
    tree: ObjectTree,
    tmp: PathBuf,
    sidecars: PathBuf,
    /// Sidecars as stores before 2026-11 kept them, at `meta/KEY.json`: read when
    /// an object has no sidecar named by its identity, removed with the object.
    legacy_meta: PathBuf,
    uploads: PathBuf,
    fsync: bool,
    stripes: Vec<Mutex<()>>,
    /// Whether `.sluice/` and its directories exist: made by the first write,
    /// so that reading a plain directory of files leaves no trace in it.
    bookkeeping_made: std::sync::atomic::AtomicBool,
}

impl FsStore {
    /// Opens (creating if needed) a store rooted at `config.root`.
    pub fn open(config: FsConfig) -> Result<FsStore, StoreError> {
        let root = config.root;
        let internal = root.join(INTERNAL_DIR);
        let (tmp, sidecars, uploads) = (
            internal.join("tmp"),
            internal.join("sidecars"),
            internal.join("uploads"),
        );
        fs::create_dir_all(&root)?;
        let inner = Inner {
            tree: ObjectTree::open(&root, config.fsync)?,
            legacy_meta: internal.join("meta"),
            tmp,
            sidecars,
            uploads,
            root,
            fsync: config.fsync,
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            bookkeeping_made: std::sync::atomic::AtomicBool::new(false),
        };
        remove_stale_staging(&inner.tmp);
        Ok(FsStore {
            inner: Arc::new(inner),
        })
    }

    /// Opens a store at `config.root` and makes its bookkeeping now rather
    /// than at the first write (`sluice mb DIR`), so that the directory is
    /// found as a store (it holds `.sluice/`) before anything is in it.
    pub fn create(config: FsConfig) -> Result<FsStore, StoreError> {
        let store = FsStore::open(config)?;
        store.inner.make_bookkeeping()?;
        Ok(store)
    }

    pub fn root(&self) -> &Path {
        &self.inner.root
    }
}

impl Inner {
    /// Where a store before 2026-11 kept the sidecar of `key`.
    fn legacy_sidecar_path(&self, key: &str) -> Option<PathBuf> {
        let mut path = self.legacy_meta.join(key_to_relative(key).ok()?);
        let mut name = path.file_name()?.to_os_string();
        name.push(".json");
        path.set_file_name(name);
        Some(path)
    }

    fn stripe(&self, key: &str) -> &Mutex<()> {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.hash(&mut hasher);
        &self.stripes[hasher.finish() as usize % STRIPES]
    }

    /// A path for a new staging file (making the bookkeeping directories on
    /// the store's first write).
    fn new_staging_path(&self) -> Result<PathBuf, StoreError> {
        self.make_bookkeeping()?;
        Ok(self.tmp.join(uuid::Uuid::new_v4().simple().to_string()))
    }

    /// Makes `.sluice/tmp`, `sidecars` and `uploads` unless already made.
    fn make_bookkeeping(&self) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        if self.bookkeeping_made.load(Ordering::Acquire) {
            return Ok(());
        }
        for dir in [&self.tmp, &self.sidecars, &self.uploads] {
            fs::create_dir_all(dir)?;
        }
        self.bookkeeping_made.store(true, Ordering::Release);
        Ok(())
    }

    /// Writes `body` to a new staging file in `dir`, verifying `expected` and
    /// computing a checksum of `algorithm`. The file is removed on any error.
    fn stage(
        &self,
        staging: &Path,
        source: BodySource<'_>,
        expected: Option<Checksum>,
        algorithm: Option<ChecksumAlgorithm>,
    ) -> Result<Option<Checksum>, StoreError> {
        let result = write_body(
            staging,
            source,
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
        // A key the tree cannot hold is refused before its body is staged.
        self.tree.check_room(&request.key)?;
        refuse_bucket_only(&request.settings)?;
        let staging = self.new_staging_path()?;
        let checksum = self.stage(
            &staging,
            BodySource::Body(&request.body),
            request.checksum,
            None,
        )?;
        let mut sidecar = Sidecar {
            content_type: request.content_type,
            metadata: request.metadata,
            settings: request.settings,
            ..Sidecar::default()
        };
        sidecar.set_checksum(checksum);
        let etag = self.commit(&request.key, &staging, sidecar, request.condition.as_ref())?;
        Ok(PutOutput { etag, checksum })
    }

    /// Makes a staged file visible at `key` with its sidecar, checking `condition`
    /// under the key's lock: the sidecar (named by the staged file's identity)
    /// first, then the data by rename, then the replaced file's sidecar goes.
    fn commit(
        &self,
        key: &str,
        staging: &Path,
        sidecar: Sidecar,
        condition: Option<&WriteCondition>,
    ) -> Result<String, StoreError> {
        let _guard = self.stripe(key).lock().unwrap_or_else(|p| p.into_inner());
        let result = (|| {
            check_condition(self.tree.object_metadata(key)?.as_ref(), condition)?;
            let (etag, sidecar_path) =
                sidecar::write_for(&self.tmp, &self.sidecars, staging, sidecar, self.fsync)?;
            match self.tree.rename_into(staging, key) {
                Ok(replaced) => {
                    if let Some(old) = replaced {
                        sidecar::remove_for(&self.sidecars, &sidecar::etag_of(&old));
                    }
                    self.remove_legacy_sidecar(key);
                    Ok(etag)
                }
                Err(e) => {
                    let _ = fs::remove_file(sidecar_path);
                    Err(e)
                }
            }
        })();
        if result.is_err() {
            let _ = fs::remove_file(staging);
        }
        result
    }

    fn remove_legacy_sidecar(&self, key: &str) {
        if let Some(path) = self.legacy_sidecar_path(key) {
            if fs::remove_file(&path).is_ok() {
                remove_empty_parents(&path, &self.legacy_meta);
            }
        }
    }

    fn meta_blocking(&self, key: &str, file: &File) -> Result<ObjectMeta, StoreError> {
        let stat = file.metadata()?;
        if !stat.is_file() {
            return Err(StoreError::NoSuchKey {
                key: key.to_string(),
            });
        }
        let etag = sidecar::etag_of(&stat);
        let legacy = self.legacy_sidecar_path(key);
        let sidecar = sidecar::read(&self.sidecars, legacy.as_deref(), &etag);
        Ok(ObjectMeta {
            key: key.to_string(),
            size: stat.len(),
            checksum: sidecar.checksum(),
            etag,
            last_modified: stat.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            content_type: sidecar.content_type,
            metadata: sidecar.metadata,
            settings: sidecar.settings,
        })
    }

    fn open_object(&self, key: &str) -> Result<(File, ObjectMeta), StoreError> {
        let file = self.tree.open_object(key)?;
        let meta = self.meta_blocking(key, &file)?;
        Ok((file, meta))
    }

    fn delete_blocking(&self, key: &str) -> Result<(), StoreError> {
        let _guard = self.stripe(key).lock().unwrap_or_else(|p| p.into_inner());
        if let Some(removed) = self.tree.remove(key)? {
            sidecar::remove_for(&self.sidecars, &sidecar::etag_of(&removed));
            self.remove_legacy_sidecar(key);
        }
        Ok(())
    }

    fn list_blocking(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        // One key past the page tells whether there is a next one.
        let mut keys = Vec::new();
        let mut walk = Walk {
            prefix,
            cursor,
            wanted: limit + 1,
            keys: &mut keys,
        };
        walk.dir(&self.root, Path::new(""))?;
        let mut page = ListPage::default();
        for key in keys {
            if page.objects.len() == limit {
                page.next_cursor = page.objects.last().map(|o| o.key.clone());
                break;
            }
            let Ok(stat) = fs::symlink_metadata(self.root.join(&key)) else {
                continue;
            };
            if !stat.is_file() {
                continue;
            }
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

/// What a staging file is written from.
enum BodySource<'a> {
    Body(&'a Body),
    /// `len` bytes from the start of an open file (a part copied from an object).
    Open(File, u64),
}

/// Copies `source` into a new file at `path`, hashing as it goes.
fn write_body(
    path: &Path,
    source: BodySource<'_>,
    algorithm: Option<ChecksumAlgorithm>,
    fsync: bool,
) -> Result<Option<Checksum>, StoreError> {
    let mut out = File::create(path)?;
    let mut hasher = algorithm.map(Hasher::new);
    let body = match source {
        BodySource::Body(body) => body,
        BodySource::Open(mut input, len) => {
            copy_exactly(&mut input, len, &mut out, hasher.as_mut())?;
            if fsync {
                out.sync_data()?;
            }
            return Ok(hasher.map(|h| h.finish()));
        }
    };
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
            copy_exactly(&mut input, *len, &mut out, hasher.as_mut())?;
        }
    }
    if fsync {
        out.sync_data()?;
    }
    Ok(hasher.map(|h| h.finish()))
}

/// Copies exactly `len` bytes of `input` into `out`, hashing them.
fn copy_exactly(
    input: &mut File,
    len: u64,
    out: &mut File,
    mut hasher: Option<&mut Hasher>,
) -> Result<(), StoreError> {
    let mut remaining = len;
    let mut buf = vec![0u8; CHUNK.min(len as usize).max(1)];
    while remaining > 0 {
        let want = buf.len().min(remaining as usize);
        let n = input.read(&mut buf[..want]).map_err(StoreError::Body)?;
        if n == 0 {
            return Err(StoreError::LengthMismatch {
                expected: len,
                actual: len - remaining,
            });
        }
        if let Some(h) = hasher.as_mut() {
            h.update(&buf[..n]);
        }
        out.write_all(&buf[..n])?;
        remaining -= n as u64;
    }
    Ok(())
}

/// Checks `condition` against the object now at the key (`current`).
fn check_condition(
    current: Option<&fs::Metadata>,
    condition: Option<&WriteCondition>,
) -> Result<(), StoreError> {
    let current = current.map(sidecar::etag_of);
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

/// A storage class, ACL or encryption asked of a directory store, which has
/// none: refused rather than dropped.
fn refuse_bucket_only(settings: &ObjectSettings) -> Result<(), StoreError> {
    match settings.bucket_only() {
        Some(_) => Err(StoreError::Unsupported(
            "a directory store keeps no storage class, ACL or server-side encryption",
        )),
        None => Ok(()),
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
/// A walk of the tree in key order, for one page of a listing: directories
/// whose keys all come at or before the cursor, or outside the prefix, are not
/// entered, and the walk stops once it has `wanted` keys, so a page costs the
/// directories on its way rather than the whole tree.
struct Walk<'a> {
    prefix: &'a str,
    cursor: Option<&'a str>,
    wanted: usize,
    keys: &'a mut Vec<String>,
}

impl Walk<'_> {
    fn dir(&mut self, dir: &Path, relative: &Path) -> Result<(), StoreError> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        // (what the entry sorts as: its key, with a `/` after a directory's, so
        // that `a/…` comes after `a.txt` as keys do; its relative path; dir?)
        let mut listed = Vec::new();
        for entry in entries {
            let entry = entry?;
            let rel = relative.join(entry.file_name());
            let Some(key) = relative_to_key(&rel) else {
                continue;
            };
            // A store's bookkeeping, this one's or a store's nested in it
            // (`sluice put f ./store/sub/f` before stores were found by
            // their `.sluice/`), is never an object.
            if entry.file_name() == INTERNAL_DIR {
                continue;
            }
            let file_type = entry.file_type()?;
            if file_type.is_dir() {
                listed.push((format!("{key}/"), rel, true));
            } else if file_type.is_file() {
                listed.push((key, rel, false));
            }
        }
        listed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (key, rel, is_dir) in listed {
            if self.keys.len() >= self.wanted {
                break;
            }
            if is_dir {
                let under_prefix = key.starts_with(self.prefix) || self.prefix.starts_with(&key);
                // Every key under `key` (ending in `/`) starts with it: all come
                // at or before a cursor past `key` that does not start with it.
                let all_seen = self
                    .cursor
                    .is_some_and(|c| c > key.as_str() && !c.starts_with(&key));
                if under_prefix && !all_seen {
                    self.dir(&dir.join(rel.file_name().unwrap_or_default()), &rel)?;
                }
            } else if key.starts_with(self.prefix) && self.cursor.is_none_or(|c| key.as_str() > c) {
                self.keys.push(key);
            }
        }
        Ok(())
    }
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

    async fn check_key(&self, key: &str) -> Result<(), StoreError> {
        let inner = self.inner.clone();
        let key = key.to_string();
        blocking(move || inner.tree.check_room(&key)).await
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A crash after a new generation's sidecar is written but before its data
    /// is renamed into place: the visible object keeps its own metadata.
    #[test]
    fn a_crash_between_sidecar_and_rename_keeps_the_visible_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(FsConfig::new(dir.path())).unwrap();
        let inner = &store.inner;
        let mut first = PutRequest::new("k", Bytes::from_static(b"first"));
        first.content_type = Some("text/first".into());
        inner.put_blocking(first).unwrap();

        let staging = inner.new_staging_path().unwrap();
        fs::write(&staging, b"second").unwrap();
        let second = Sidecar {
            content_type: Some("text/second".into()),
            ..Sidecar::default()
        };
        sidecar::write_for(&inner.tmp, &inner.sidecars, &staging, second, true).unwrap();
        // ...crash here: the data rename never happens.

        let (_, meta) = inner.open_object("k").unwrap();
        assert_eq!(meta.content_type.as_deref(), Some("text/first"));
        assert_eq!(meta.size, 5);
    }
}
