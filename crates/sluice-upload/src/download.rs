//! Downloads: large objects are fetched as parallel ranged GETs. Into a file, each
//! range is written at its offset as it arrives (to a temporary file renamed into
//! place at the end); into a writer such as standard output, ranges are fetched
//! ahead in parallel and written in order, within the memory budget. The data is
//! checksummed on the way and checked against the store's full-object checksum.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use sluice_store::*;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::config::MIB;
use crate::disk_pace::DiskPace;
use crate::error::TransferError;
use crate::progress::{ProgressFn, Tracker};
use crate::retry::Kind;
use crate::tuning::TransferSlot;
use crate::{Engine, EngineInner};

/// The most a store's body hands over in one chunk: the S3 transport reads
/// 128 KiB at a time, reqwest's (Azure, GCS) at most hyper's 408 KiB, the
/// directory store 256 KiB.
const BODY_CHUNK_MOST: usize = 512 * 1024;

/// What a range writing into a file reserves from the budget: the chunk
/// being written. Each chunk is written as it comes and dropped before the
/// next is read, so the body's reader fills the same buffer again (still in
/// the core's cache, its pages already mapped). Gathering 256 KiB for one
/// vectored write, as before, took 1.15x s5cmd's CPU for 0.84x its rate,
/// against 0.82x and 1.04x chunk by chunk
/// (bench/results/2026-11-30/download-direct-writes-ab.txt).
const RANGE_WRITE_RESERVE: u64 = BODY_CHUNK_MOST as u64;

/// A finished download.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DownloadOutcome {
    pub key: String,
    pub size: u64,
    pub etag: String,
    /// Checksum of the bytes received.
    pub checksum: Option<Checksum>,
    /// True when the store had a full-object checksum and it matched.
    pub verified: bool,
    /// Ranged requests made (1 for a plain GET).
    pub ranges: u32,
    pub last_modified: std::time::SystemTime,
    /// The object's user metadata (`x-amz-meta-*`).
    pub metadata: Metadata,
}

/// Which downloaded bytes are hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hashing {
    /// All of them, with the store's algorithm, else the engine's: the caller
    /// reports the checksum.
    Always,
    /// Only those the store holds a checksum of, to verify them.
    ToVerify,
}

impl Hashing {
    /// The algorithm to hash `meta`'s bytes with, if any.
    fn algorithm(
        self,
        meta: &ObjectMeta,
        engine: Option<ChecksumAlgorithm>,
    ) -> Option<ChecksumAlgorithm> {
        let stored = meta.checksum.map(|c| c.algorithm);
        match self {
            Hashing::Always => stored.or(engine),
            Hashing::ToVerify => stored,
        }
    }
}

/// Where received bytes go.
enum Sink {
    /// Positioned writes into a file.
    File(Arc<std::fs::File>),
    /// Kept in memory for an in-order writer.
    Memory(Vec<Bytes>),
}

impl Engine {
    /// Downloads `key` into the file at `path`, replacing it only once complete
    /// (written beside it, flushed when `flush_downloads` asks, and renamed
    /// into place). The outcome's checksum is the store's algorithm's, else
    /// the engine's: reported even when the store holds none to verify.
    pub async fn download_to_path(
        &self,
        key: &str,
        path: &Path,
        progress: Option<ProgressFn>,
    ) -> Result<DownloadOutcome, TransferError> {
        self.download_hashed_to_path(key, path, progress, Hashing::Always)
            .await
    }

    /// [`Engine::download_to_path`], hashing the bytes as `hashing` says.
    async fn download_hashed_to_path(
        &self,
        key: &str,
        path: &Path,
        progress: Option<ProgressFn>,
        hashing: Hashing,
    ) -> Result<DownloadOutcome, TransferError> {
        let inner = &self.inner;
        let meta = self.head(key).await?;
        let ranges = plan_ranges(
            meta.size,
            file_range_size(meta.size, inner.config.part_size),
        );
        let multi = ranges.len() > 1;
        // The staging file travels with the blocking work and back: dropped
        // with it, wherever, it is removed (this future may be dropped while
        // the work runs on).
        let (staging, size) = (TempFile::beside(path)?, meta.size);
        let (staging, file) = blocking(move || {
            let file = std::fs::File::create(&staging.path)?;
            if multi {
                // Sized up front: ranges land out of order.
                file.set_len(size)?;
            }
            Ok((staging, Arc::new(file)))
        })
        .await?;
        let tracker = Tracker::new(Some(meta.size), progress);
        let algorithm = hashing.algorithm(&meta, inner.config.checksum);
        // The file's ranges run in a task of their own (aborted when this
        // future is dropped): a write handed over while the disk is slow
        // ([`DiskPace`]) holds up this file's ranges, whose writes the kernel
        // serialises on the file's inode lock anyway, and not the files
        // beside it. (A task per
        // range made those writes contend for the lock: 0.86x s5cmd's rate
        // against 0.93x, bench/results/2026-11-30/download-range-tasks-ab.txt.)
        let (engine, file_ranges, file_meta) = (self.inner.clone(), ranges.clone(), meta.clone());
        let (sink_file, file_tracker) = (file.clone(), tracker.clone());
        let concurrency = inner.config.concurrency;
        let fetches = file_ranges.into_iter().map(move |(start, end)| {
            let (engine, meta, tracker) = (engine.clone(), file_meta.clone(), file_tracker.clone());
            let sink = Sink::File(sink_file.clone());
            async move {
                let slot = engine.tuner.slot().await;
                let _reservation = engine.budget.reserve(RANGE_WRITE_RESERVE).await;
                fetch_range(
                    &engine, &meta, start, end, multi, algorithm, sink, &tracker, None, slot,
                )
                .await
            }
        });
        let fetched = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
            futures::stream::iter(fetches)
                .buffered(concurrency)
                .try_collect::<Vec<(Option<Checksum>, Sink)>>(),
        ));
        let results = fetched
            .await
            .map_err(|e| TransferError::Destination(io::Error::other(e)))??;
        let checksum = combine(results.iter().map(|(c, _)| *c), &ranges);
        drop(results);
        let verified = verify(&meta, checksum)?;
        // Flushed before the rename only when `flush_downloads` asks: as with
        // cp, rsync and the S3 tools, a download is done once the page cache
        // has it. A flush holds it to the disk's pace (20 files of 256 MiB:
        // 12 s, most of it in fsync, against 8-10 s without).
        let flush = inner.config.flush_downloads;
        let (dest, wanted) = (path.to_path_buf(), Wanted::new());
        let still_wanted = wanted.flag();
        blocking(move || {
            if flush {
                file.sync_all()?;
            }
            drop(file);
            // Dropped during the flush (interrupted): not placed, and the
            // staging file goes with this closure.
            if !still_wanted.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(io::ErrorKind::Interrupted.into());
            }
            staging.persist(&dest)
        })
        .await?;
        drop(wanted);
        Ok(DownloadOutcome {
            key: key.to_string(),
            size: meta.size,
            etag: meta.etag,
            checksum,
            verified,
            ranges: ranges.len() as u32,
            last_modified: meta.last_modified,
            metadata: meta.metadata,
        })
    }

    /// Downloads a listed object into the file at `path`, creating missing
    /// parent directories, and sets the file's modification time to what
    /// `modified` reads from the object's answer (when it says one).
    ///
    /// An object no larger than one part is fetched with one GET and no HEAD
    /// (the listing's ETag guards against a change; the answer carries the
    /// checksum and metadata) into memory, then written, stamped (flushed
    /// when `flush_downloads` asks) and renamed into place in one go, where
    /// the caller runs while the disk keeps up
    /// ([`DiskPace::for_small_files`]). Larger objects go as
    /// [`Engine::download_to_path`].
    pub async fn download_listed_to_path(
        &self,
        listed: &ObjectSummary,
        path: &Path,
        progress: Option<ProgressFn>,
        modified: &(dyn Fn(&ObjectMeta) -> Option<std::time::SystemTime> + Sync),
    ) -> Result<DownloadOutcome, TransferError> {
        let inner = &self.inner;
        if listed.size > inner.config.part_size || listed.etag.is_empty() {
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent)
                    .await
                    .map_err(TransferError::Destination)?;
            }
            // Nobody reads the checksum of a listed file: bytes are hashed
            // only to be verified (5 GiB from another tool, without a stored
            // checksum, cost 0.3 CPU-s more hashed).
            let outcome = self
                .download_hashed_to_path(&listed.key, path, progress, Hashing::ToVerify)
                .await?;
            let stamp = modified(&ObjectMeta {
                key: outcome.key.clone(),
                size: outcome.size,
                etag: outcome.etag.clone(),
                last_modified: outcome.last_modified,
                content_type: None,
                metadata: outcome.metadata.clone(),
                settings: Default::default(),
                checksum: None,
            });
            if let Some(time) = stamp {
                let path = path.to_path_buf();
                blocking(move || {
                    std::fs::File::options()
                        .write(true)
                        .open(&path)?
                        .set_modified(time)
                })
                .await?;
            }
            return Ok(outcome);
        }
        crate::config::validate_key(&listed.key)?;
        let listed_meta = ObjectMeta {
            key: listed.key.clone(),
            size: listed.size,
            etag: listed.etag.clone(),
            last_modified: listed.last_modified,
            content_type: None,
            metadata: Metadata::new(),
            settings: Default::default(),
            checksum: None,
        };
        let tracker = Tracker::new(Some(listed.size), progress);
        let slot = inner.tuner.slot().await;
        let _reservation = inner.budget.reserve(listed.size).await;
        let answered = std::sync::Mutex::new(None);
        // The store's algorithm is known only from the answer: hash with the
        // engine's, and compare when the store's is the same.
        let (checksum, sink) = fetch_range(
            inner,
            &listed_meta,
            0,
            listed.size,
            false,
            inner.config.checksum,
            Sink::Memory(Vec::new()),
            &tracker,
            Some(&answered),
            slot,
        )
        .await?;
        let meta = answered
            .into_inner()
            .expect("meta lock")
            .unwrap_or(listed_meta);
        let verified = verify(&meta, checksum)?;
        let Sink::Memory(chunks) = sink else {
            unreachable!("a memory sink was given")
        };
        let (dest, stamp) = (path.to_path_buf(), modified(&meta));
        let staging = TempFile::beside(&dest)?;
        let flush = inner.config.flush_downloads;
        // Made here while the disk keeps up (0.85x s5cmd's CPU for 10,000
        // small files, against 1.03x through the blocking pool); on the pool
        // while it does not, and always with a flush, the disk's pace by
        // design (see DiskPace::for_small_files).
        let make = move || {
            let mut file = match std::fs::File::create(&staging.path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    // The first file of its directory: make the directory.
                    if let Some(parent) = dest.parent() {
                        std::fs::create_dir_all(parent)?;
                    }
                    std::fs::File::create(&staging.path)?
                }
                file => file?,
            };
            for chunk in &chunks {
                io::Write::write_all(&mut file, chunk)?;
            }
            if let Some(time) = stamp {
                file.set_modified(time)?;
            }
            if flush {
                file.sync_all()?;
            }
            drop(file);
            staging.persist(&dest)
        };
        if flush {
            blocking(make).await?;
        } else {
            inner
                .small_files_pace
                .here_or_pooled(make)
                .await
                .and_then(|made| made)
                .map_err(TransferError::Destination)?;
        }
        Ok(DownloadOutcome {
            key: listed.key.clone(),
            size: listed.size,
            etag: meta.etag,
            checksum,
            verified,
            ranges: 1,
            last_modified: meta.last_modified,
            metadata: meta.metadata,
        })
    }

    /// Downloads `key` into `writer` in order (standard output, a socket).
    pub async fn download_to_writer<W>(
        &self,
        key: &str,
        mut writer: W,
        progress: Option<ProgressFn>,
    ) -> Result<DownloadOutcome, TransferError>
    where
        W: AsyncWrite + Unpin + Send,
    {
        let inner = &self.inner;
        let meta = self.head(key).await?;
        let tracker = Tracker::new(Some(meta.size), progress);
        let ranges = plan_ranges(meta.size, inner.config.part_size);
        let algorithm = meta.checksum.map(|c| c.algorithm).or(inner.config.checksum);
        let multi = ranges.len() > 1;
        // A transfer slot, then memory, are taken in range order before each
        // fetch starts, so the range the writer waits for never waits for
        // memory held by ranges behind it (and, as everywhere in the engine,
        // nothing holding memory waits for a slot).
        let fetches = futures::stream::iter(ranges.clone())
            .then(|(start, end)| async move {
                let slot = inner.tuner.slot().await;
                (start, end, slot, inner.budget.reserve(end - start).await)
            })
            .map(|(start, end, slot, reservation)| {
                let (tracker, meta) = (tracker.clone(), &meta);
                async move {
                    let result = fetch_range(
                        inner,
                        meta,
                        start,
                        end,
                        multi,
                        algorithm,
                        Sink::Memory(Vec::new()),
                        &tracker,
                        None,
                        slot,
                    )
                    .await;
                    result.map(|r| (r, reservation))
                }
            })
            .buffered(inner.config.concurrency);
        futures::pin_mut!(fetches);
        let mut sums = Vec::with_capacity(ranges.len());
        while let Some(result) = fetches.next().await {
            let ((sum, sink), _reservation) = result?;
            if let Sink::Memory(chunks) = sink {
                for chunk in chunks {
                    writer
                        .write_all(&chunk)
                        .await
                        .map_err(TransferError::Destination)?;
                }
            }
            sums.push(sum);
        }
        writer.flush().await.map_err(TransferError::Destination)?;
        let checksum = combine(sums.into_iter(), &ranges);
        let verified = verify(&meta, checksum)?;
        Ok(DownloadOutcome {
            key: key.to_string(),
            size: meta.size,
            etag: meta.etag.clone(),
            checksum,
            verified,
            ranges: ranges.len() as u32,
            last_modified: meta.last_modified,
            metadata: meta.metadata.clone(),
        })
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta, TransferError> {
        crate::config::validate_key(key)?;
        let inner = &self.inner;
        inner
            .with_retries(Kind::Transfer, "HeadObject", key, || {
                inner.store.head_object(key)
            })
            .await
    }
}

/// Largest range a download into a file asks for.
const FILE_RANGE_MAX: u64 = 32 * MIB;

/// Ranges a file download asks for together, when the object is big enough.
const FILE_RANGES_AT_ONCE: u64 = 8;

/// The range size for a download into a file: the part size, grown with the
/// object up to [`FILE_RANGE_MAX`] while the object still splits into
/// [`FILE_RANGES_AT_ONCE`] ranges. Each range there holds only a chunk of
/// memory, and every request costs both sides: 32 MiB ranges took a fifth
/// less client and MinIO CPU than 8 MiB ones for 256 MiB objects. (Into a
/// writer, a range is held in memory whole, so it stays at the part size.)
fn file_range_size(size: u64, part_size: u64) -> u64 {
    size.div_ceil(FILE_RANGES_AT_ONCE)
        .min(FILE_RANGE_MAX)
        .max(part_size)
}

/// `[start, end)` ranges of `part_size` covering `size` bytes (one for small objects).
fn plan_ranges(size: u64, part_size: u64) -> Vec<(u64, u64)> {
    if size <= part_size {
        return vec![(0, size)];
    }
    (0..size.div_ceil(part_size))
        .map(|i| (i * part_size, ((i + 1) * part_size).min(size)))
        .collect()
}

fn combine(
    sums: impl Iterator<Item = Option<Checksum>>,
    ranges: &[(u64, u64)],
) -> Option<Checksum> {
    Checksum::combine_in_order(
        sums.zip(ranges)
            .map(|(sum, (start, end))| (sum, end - start)),
    )
}

fn verify(meta: &ObjectMeta, actual: Option<Checksum>) -> Result<bool, TransferError> {
    match (meta.checksum, actual) {
        (Some(expected), Some(actual)) if expected.algorithm == actual.algorithm => {
            if expected == actual {
                Ok(true)
            } else {
                Err(TransferError::ChecksumMismatch {
                    expected: expected.to_string(),
                    actual: actual.to_string(),
                })
            }
        }
        _ => Ok(false),
    }
}

/// Fetches `[start, end)` into `sink`, resuming after transient failures from
/// where the data stopped, holding `slot` among the transfers in flight until
/// every byte is in. Returns the range's checksum.
#[allow(clippy::too_many_arguments)]
async fn fetch_range(
    inner: &EngineInner,
    meta: &ObjectMeta,
    start: u64,
    end: u64,
    ranged: bool,
    algorithm: Option<ChecksumAlgorithm>,
    sink: Sink,
    tracker: &Tracker,
    answered: Option<&std::sync::Mutex<Option<ObjectMeta>>>,
    slot: TransferSlot,
) -> Result<(Option<Checksum>, Sink), TransferError> {
    let mut writer = RangeWriter::new(
        sink,
        algorithm.map(Hasher::new),
        start,
        tracker,
        &inner.writes_pace,
    );
    // One attempt is the request and the body it streams: an interrupted body is
    // resumed from the byte written, through the same retries and budget as uploads.
    let mut attempts = inner.attempts(Kind::Transfer, "GetObject", &meta.key);
    loop {
        let pos = writer.written;
        let range = ranged
            .then(|| ByteRange::new(pos, end))
            .or((pos > 0).then(|| ByteRange::new(pos, end)));
        let mut turn = attempts.begin().await?;
        let result = async {
            let output = inner
                .store
                .get_object(&meta.key, range)
                .await
                .map_err(Attempt::Store)?;
            // The body is ours to read: slot and permit go back (a failure while
            // reading still counts as a retry against the budget).
            turn.answered();
            if output.meta.etag != meta.etag {
                return Err(Attempt::Other(TransferError::ObjectChanged));
            }
            if let Some(answered) = answered {
                *answered.lock().expect("meta lock") = Some(output.meta.clone());
            }
            let mut body = output.body;
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(Attempt::Store)?;
                if writer.written + chunk.len() as u64 > end {
                    return Err(Attempt::Other(TransferError::ObjectChanged));
                }
                // Taken (and dropped) before the next chunk is read.
                writer.push(chunk).map_err(Attempt::Other)?;
            }
            if writer.written < end {
                return Err(Attempt::Store(StoreError::transport(format!(
                    "the body ended at byte {} of {end}",
                    writer.written
                ))));
            }
            Ok(())
        }
        .await;
        // A failed attempt resumes after what was written.
        match result {
            Ok(()) => {
                attempts.succeeded(turn);
                break;
            }
            Err(Attempt::Store(error)) => {
                tracing::debug!(key = %meta.key, pos = writer.written, error = %sluice_store::error_chain(&error), "download interrupted");
                attempts.failed(turn, error).await?;
            }
            Err(Attempt::Other(error)) => return Err(error),
        }
    }
    slot.finish(end - start);
    tracker.advance(0, true);
    Ok((writer.hasher.map(|h| h.finish()), writer.sink))
}

/// How one download attempt failed: at the store (retried), or otherwise.
enum Attempt {
    Store(StoreError),
    Other(TransferError),
}

/// Hashes and stores a range's chunks in order. Into a file, a chunk is
/// hashed and written by the thread that received it, while it is still in
/// that core's cache: handed to the blocking pool, the copy into the page
/// cache ran on another core (56 % of a 20 x 256 MiB download's samples;
/// written here, 0.84x the CPU, bench/results/2026-11-30/download-write-here-ab.txt).
/// The write runs on the async worker itself while the disk keeps up
/// ([`DiskPace::for_writes`]); once it does not, the worker is handed over
/// first, and as each file's ranges run in a task of their own, a write the
/// kernel holds back then holds up only its file. Into memory, a chunk is
/// kept.
struct RangeWriter<'t> {
    sink: Sink,
    hasher: Option<Hasher>,
    /// Where the bytes written (and hashed) so far end: a resumed request
    /// starts here.
    written: u64,
    tracker: &'t Tracker,
    pace: &'t DiskPace,
}

impl<'t> RangeWriter<'t> {
    fn new(
        sink: Sink,
        hasher: Option<Hasher>,
        start: u64,
        tracker: &'t Tracker,
        pace: &'t DiskPace,
    ) -> Self {
        RangeWriter {
            sink,
            hasher,
            written: start,
            tracker,
            pace,
        }
    }

    /// Takes `chunk`, which follows every byte taken so far: hashed, then
    /// written.
    fn push(&mut self, chunk: Bytes) -> Result<(), TransferError> {
        use std::os::unix::fs::FileExt;
        let len = chunk.len() as u64;
        if let Some(h) = self.hasher.as_mut() {
            h.update(&chunk);
        }
        match &mut self.sink {
            Sink::File(file) => {
                let pos = self.written;
                self.pace
                    .run(|| file.write_all_at(&chunk, pos))
                    .map_err(TransferError::Destination)?;
            }
            Sink::Memory(chunks) => chunks.push(chunk),
        }
        self.written += len;
        self.tracker.advance(len, false);
        Ok(())
    }
}

/// Runs filesystem work (a create, an fsync, a rename) on the blocking pool:
/// work that may take long (a flush), or that [`DiskPace`] finds slow here,
/// would stall every transfer sharing the thread.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> Result<T, TransferError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| TransferError::Destination(io::Error::other(e)))?
        .map_err(TransferError::Destination)
}

/// Cleared when the future holding it is dropped: blocking work it started
/// runs on, and asks this before a step that cannot be taken back.
struct Wanted(Arc<std::sync::atomic::AtomicBool>);

impl Wanted {
    fn new() -> Wanted {
        Wanted(Arc::new(std::sync::atomic::AtomicBool::new(true)))
    }

    fn flag(&self) -> Arc<std::sync::atomic::AtomicBool> {
        self.0.clone()
    }
}

impl Drop for Wanted {
    fn drop(&mut self) {
        self.0.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A temporary file beside the destination, removed unless persisted.
struct TempFile {
    path: PathBuf,
    persisted: bool,
}

impl TempFile {
    fn beside(dest: &Path) -> Result<TempFile, TransferError> {
        let name = dest.file_name().ok_or_else(|| {
            TransferError::Destination(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the destination has no file name",
            ))
        })?;
        // Unique within the process too (two downloads of names equal on a
        // case-insensitive filesystem), and short enough for any name.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        static PROCESS: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
        let process = PROCESS.get_or_init(std::process::id);
        let suffix = format!(".sluice-{process}-{n}.tmp");
        let mut temp_name = std::ffi::OsString::from(".");
        if name.len() + suffix.len() < 255 {
            temp_name.push(name);
        }
        temp_name.push(suffix);
        Ok(TempFile {
            path: dest.with_file_name(temp_name),
            persisted: false,
        })
    }

    fn persist(mut self, dest: &Path) -> io::Result<()> {
        std::fs::rename(&self.path, dest)?;
        self.persisted = true;
        Ok(())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.persisted {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cover_the_object() {
        let cases = [
            (0, 8, vec![(0, 0)]),
            (8, 8, vec![(0, 8)]),
            (9, 8, vec![(0, 8), (8, 9)]),
            (24, 8, vec![(0, 8), (8, 16), (16, 24)]),
        ];
        for (size, part, expected) in cases {
            assert_eq!(plan_ranges(size, part), expected, "{size}/{part}");
        }
    }

    #[test]
    fn bytes_are_hashed_to_be_reported_or_verified() {
        let meta = |stored: Option<ChecksumAlgorithm>| ObjectMeta {
            key: "k".into(),
            size: 1,
            etag: String::new(),
            last_modified: std::time::SystemTime::UNIX_EPOCH,
            content_type: None,
            metadata: Metadata::new(),
            settings: Default::default(),
            checksum: stored.map(|a| a.checksum(b"x")),
        };
        let (crc32c, crc64) = (
            Some(ChecksumAlgorithm::Crc32c),
            Some(ChecksumAlgorithm::Crc64nvme),
        );
        // (hashing, the store's algorithm, the engine's, hashed with)
        let cases = [
            (Hashing::Always, crc64, crc32c, crc64),
            (Hashing::Always, None, crc32c, crc32c),
            (Hashing::Always, None, None, None),
            (Hashing::ToVerify, crc64, crc32c, crc64),
            (Hashing::ToVerify, None, crc32c, None),
        ];
        for (hashing, stored, engine, expected) in cases {
            assert_eq!(
                hashing.algorithm(&meta(stored), engine),
                expected,
                "{hashing:?} {stored:?} {engine:?}"
            );
        }
    }

    #[test]
    fn file_ranges_grow_with_the_object_up_to_the_cap() {
        let cases = [
            // (object size, part size, range size)
            (0, 8 * MIB, 8 * MIB),
            (8 * MIB, 8 * MIB, 8 * MIB),
            (64 * MIB, 8 * MIB, 8 * MIB),
            (128 * MIB, 8 * MIB, 16 * MIB),
            (256 * MIB, 8 * MIB, 32 * MIB),
            (4096 * MIB, 8 * MIB, 32 * MIB),
            (4096 * MIB, 64 * MIB, 64 * MIB),
        ];
        for (size, part, expected) in cases {
            assert_eq!(file_range_size(size, part), expected, "{size}/{part}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn chunks_land_at_their_offsets_written_here_or_handed_over() {
        for hand_over in [false, true] {
            let file = Arc::new(tempfile::tempfile().unwrap());
            let tracker = Tracker::new(None, None);
            let pace = DiskPace::for_writes();
            if hand_over {
                pace.run(|| std::thread::sleep(std::time::Duration::from_millis(60)));
                assert!(pace.slow());
            }
            let mut writer = RangeWriter::new(Sink::File(file.clone()), None, 3, &tracker, &pace);
            for chunk in ["ab", "", "cde", "f"] {
                writer.push(Bytes::from_static(chunk.as_bytes())).unwrap();
            }
            assert_eq!(writer.written, 9);
            let mut written = Vec::new();
            io::Read::read_to_end(&mut &*file, &mut written).unwrap();
            assert_eq!(written, b"\0\0\0abcdef", "hand_over: {hand_over}");
        }
    }
}
