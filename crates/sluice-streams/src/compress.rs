//! Compression of batches, frame by frame, on a CPU pool. Each frame (about
//! [`FRAME_BYTES`] of records) becomes an independent zstd frame or gzip member;
//! their concatenation is one valid `.zst` or `.gz` file, so the frames of one
//! batch compress in parallel and are written in order.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

/// How a batch's object is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    Zstd,
    Gzip,
    None,
}

impl Compression {
    /// The ending added to every object key.
    pub fn extension(self) -> &'static str {
        match self {
            Compression::Zstd => ".ndjson.zst",
            Compression::Gzip => ".ndjson.gz",
            Compression::None => ".ndjson",
        }
    }

    /// The stored object's type: the compressed file's, or NDJSON (a dead
    /// letter's uncompressed lines are not NDJSON).
    pub fn content_type(self, dead_letter: bool) -> &'static str {
        match self {
            Compression::Zstd => "application/zstd",
            Compression::Gzip => "application/gzip",
            Compression::None if dead_letter => "application/octet-stream",
            Compression::None => "application/x-ndjson",
        }
    }

    pub(crate) fn default_level(self) -> i32 {
        match self {
            Compression::Zstd => 3,
            Compression::Gzip => 6,
            Compression::None => 0,
        }
    }

    pub(crate) fn levels(self) -> std::ops::RangeInclusive<i32> {
        match self {
            Compression::Zstd => 1..=19,
            Compression::Gzip => 1..=9,
            Compression::None => 0..=0,
        }
    }
}

/// Records gathered before a frame is compressed.
pub const FRAME_BYTES: usize = 1 << 20;

/// Room past [`FRAME_BYTES`] a frame buffer starts with, for the record that
/// ends the frame (a larger one makes the buffer grow).
pub const FRAME_SLACK: usize = 64 << 10;

/// A pool of CPU work: at most `width` jobs run at once, on blocking threads, so
/// that parsing and compression never stall the I/O tasks. It keeps the zstd
/// contexts of finished compressions for the next ones (at most one per job
/// that can run at once).
#[derive(Clone)]
pub struct CpuPool {
    slots: Arc<Semaphore>,
    contexts: Arc<Mutex<Vec<ZstdContext>>>,
}

impl CpuPool {
    pub fn new(width: usize) -> CpuPool {
        CpuPool {
            slots: Arc::new(Semaphore::new(width.max(1))),
            contexts: Arc::default(),
        }
    }

    /// One job per core.
    pub fn per_core() -> CpuPool {
        CpuPool::new(std::thread::available_parallelism().map_or(2, |n| n.get()))
    }

    /// Runs `job` once a slot is free; a panic in it resumes here.
    pub async fn run<F, R>(&self, job: F) -> R
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let _slot = self.slots.acquire().await;
        match tokio::task::spawn_blocking(job).await {
            Ok(value) => value,
            Err(e) => match e.try_into_panic() {
                Ok(panic) => std::panic::resume_unwind(panic),
                // Only a runtime shutting down cancels a blocking task.
                Err(e) => panic!("a CPU pool job was cancelled: {e}"),
            },
        }
    }

    /// Compresses one frame as a job, and how long the compression took.
    pub async fn compress(
        &self,
        compression: Compression,
        level: i32,
        frame: Bytes,
    ) -> (io::Result<Bytes>, std::time::Duration) {
        let contexts = self.contexts.clone();
        self.run(move || {
            let started = std::time::Instant::now();
            let out = match compression {
                Compression::Zstd => {
                    let kept = contexts.lock().unwrap_or_else(|e| e.into_inner()).pop();
                    match kept.map_or_else(|| ZstdContext::new(level), Ok) {
                        Ok(mut context) => {
                            let out = context.compress(level, &frame);
                            contexts
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(context);
                            out
                        }
                        Err(e) => Err(e),
                    }
                }
                compression => compress_frame(compression, level, &frame),
            };
            (out, started.elapsed())
        })
        .await
    }
}

/// Compresses one frame with a context of its own (tests and tools; a stream
/// compresses through its pool, whose contexts are reused).
pub fn compress_frame(compression: Compression, level: i32, frame: &[u8]) -> io::Result<Bytes> {
    match compression {
        Compression::None => Ok(Bytes::copy_from_slice(frame)),
        Compression::Zstd => ZstdContext::new(level)?.compress(level, frame),
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(frame.len() / 4),
                flate2::Compression::new(level as u32),
            );
            encoder.write_all(frame)?;
            Ok(encoder.finish()?.into())
        }
    }
}

/// A zstd compression context and its output scratch. A frame is compressed in
/// one call: the streaming encoder copied every byte into its own window
/// first, and a context made per frame set up its tables every time.
struct ZstdContext {
    level: i32,
    compressor: zstd::bulk::Compressor<'static>,
    scratch: Vec<u8>,
}

impl ZstdContext {
    fn new(level: i32) -> io::Result<ZstdContext> {
        let mut compressor = zstd::bulk::Compressor::new(level)?;
        compressor.include_checksum(true)?;
        Ok(ZstdContext {
            level,
            compressor,
            scratch: Vec::new(),
        })
    }

    fn compress(&mut self, level: i32, frame: &[u8]) -> io::Result<Bytes> {
        if level != self.level {
            self.compressor.set_compression_level(level)?;
            self.level = level;
        }
        self.scratch.clear();
        self.scratch
            .reserve(zstd::zstd_safe::compress_bound(frame.len()));
        // Each call starts a new frame (its session is reset first).
        let written = self.compressor.compress_to_buffer(frame, &mut self.scratch);
        // Copied out at its size: the scratch is as large as the input.
        let compressed = written.map(|_| Bytes::copy_from_slice(&self.scratch));
        if self.scratch.capacity() > zstd::zstd_safe::compress_bound(FRAME_BYTES + FRAME_SLACK) {
            // A frame of one huge record: its scratch is not kept.
            self.scratch = Vec::new();
        }
        compressed
    }
}

/// Decompresses a whole object (every frame or member), for tests and tools.
pub fn decompress(compression: Compression, data: &[u8]) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut out = Vec::new();
    match compression {
        Compression::None => out.extend_from_slice(data),
        Compression::Zstd => {
            zstd::stream::Decoder::new(data)?.read_to_end(&mut out)?;
        }
        Compression::Gzip => {
            flate2::read::MultiGzDecoder::new(data).read_to_end(&mut out)?;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_concatenate_into_one_file() {
        let mut long = vec![b'7'; 100_000];
        long.push(b'\n');
        let frames: Vec<Vec<u8>> = vec![b"{\"a\":1}\n2\n".to_vec(), Vec::new(), long];
        let plain: Vec<u8> = frames.concat();
        // Level 3 again after 19: a thread's context follows the level asked for.
        for (compression, level) in [
            (Compression::Zstd, 3),
            (Compression::Zstd, 19),
            (Compression::Zstd, 3),
            (Compression::Gzip, 1),
            (Compression::None, 0),
        ] {
            let mut file = Vec::new();
            for frame in &frames {
                file.extend_from_slice(&compress_frame(compression, level, frame).unwrap());
            }
            assert_eq!(
                decompress(compression, &file).unwrap(),
                plain,
                "{compression:?}"
            );
            if compression != Compression::None {
                assert!(file.len() < plain.len() / 10, "{compression:?}");
            }
        }
    }

    #[tokio::test]
    async fn pooled_contexts_follow_the_level_and_keep_checksums() {
        let pool = CpuPool::new(1);
        let huge: Vec<u8> = (0..3 << 20).map(|i| b'a' + (i % 23) as u8).collect();
        let small = b"{\"a\":1}\n".to_vec();
        // One context serves every job: levels change under it, and a huge
        // frame's scratch does not stay.
        for (level, frame) in [
            (3, &huge),
            (19, &small),
            (3, &small),
            (1, &huge),
            (3, &small),
        ] {
            let (out, _) = pool
                .compress(Compression::Zstd, level, Bytes::from(frame.clone()))
                .await;
            let out = out.unwrap();
            assert_eq!(&decompress(Compression::Zstd, &out).unwrap(), frame);
            // Frame header descriptor (after the 4-byte magic): bit 2 is the
            // content checksum flag.
            assert_ne!(out[4] & 0x04, 0, "level {level}: no checksum");
        }
        let contexts = pool.contexts.lock().unwrap();
        assert_eq!(contexts.len(), 1);
        assert!(
            contexts[0].scratch.capacity()
                <= zstd::zstd_safe::compress_bound(FRAME_BYTES + FRAME_SLACK)
        );
    }

    #[tokio::test]
    async fn the_pool_runs_at_most_its_width() {
        let pool = CpuPool::new(2);
        let running = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let peak = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let jobs = (0..8).map(|_| {
            let (running, peak) = (running.clone(), peak.clone());
            pool.run(move || {
                use std::sync::atomic::Ordering::SeqCst;
                let now = running.fetch_add(1, SeqCst) + 1;
                peak.fetch_max(now, SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
                running.fetch_sub(1, SeqCst);
            })
        });
        futures::future::join_all(jobs).await;
        assert_eq!(peak.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
