//! Compression of batches, frame by frame, on a CPU pool. Each frame (about
//! [`FRAME_BYTES`] of records) becomes an independent zstd frame or gzip member;
//! their concatenation is one valid `.zst` or `.gz` file, so the frames of one
//! batch compress in parallel and are written in order.

use std::io::{self, Write};
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::Semaphore;

use crate::config::Compression;

/// Records gathered before a frame is compressed.
pub const FRAME_BYTES: usize = 1 << 20;

/// Room past [`FRAME_BYTES`] a frame buffer starts with, for the record that
/// ends the frame (a larger one makes the buffer grow).
pub const FRAME_SLACK: usize = 64 << 10;

/// A pool of CPU work: at most `width` jobs run at once, on blocking threads, so
/// that parsing and compression never stall the I/O tasks.
#[derive(Clone)]
pub struct CpuPool {
    slots: Arc<Semaphore>,
}

impl CpuPool {
    pub fn new(width: usize) -> CpuPool {
        CpuPool {
            slots: Arc::new(Semaphore::new(width.max(1))),
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
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

/// Compresses one frame. zstd compresses it in one call with a context kept
/// per thread: the streaming encoder copied every byte into its own window
/// first and set up a fresh context (tables and all) for every frame.
pub fn compress_frame(compression: Compression, level: i32, frame: &[u8]) -> io::Result<Bytes> {
    match compression {
        Compression::None => Ok(Bytes::copy_from_slice(frame)),
        Compression::Zstd => ZSTD_CONTEXT.with(|context| {
            let mut context = context.borrow_mut();
            let (compressor, scratch) = match &mut *context {
                Some((at, compressor, scratch)) if *at == level => (compressor, scratch),
                slot => {
                    let mut compressor = zstd::bulk::Compressor::new(level)?;
                    compressor.include_checksum(true)?;
                    let (_, compressor, scratch) = slot.insert((level, compressor, Vec::new()));
                    (compressor, scratch)
                }
            };
            scratch.clear();
            scratch.reserve(zstd::zstd_safe::compress_bound(frame.len()));
            compressor.compress_to_buffer(frame, scratch)?;
            // Copied out at its size: the scratch is as large as the input.
            let compressed = Bytes::copy_from_slice(scratch);
            if scratch.capacity() > 2 * FRAME_BYTES {
                // A frame of one huge record: its scratch is not kept.
                *scratch = Vec::new();
            }
            Ok(compressed)
        }),
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

thread_local! {
    /// A compression thread's zstd context, its level and its output scratch.
    static ZSTD_CONTEXT: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>, Vec<u8>)>> =
        const { std::cell::RefCell::new(None) };
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
