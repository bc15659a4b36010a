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

/// Compresses one frame made of `pieces`.
pub fn compress_frame(compression: Compression, level: i32, pieces: &[Bytes]) -> io::Result<Bytes> {
    let size: usize = pieces.iter().map(Bytes::len).sum();
    match compression {
        Compression::None => {
            let mut out = Vec::with_capacity(size);
            pieces.iter().for_each(|p| out.extend_from_slice(p));
            Ok(out.into())
        }
        Compression::Zstd => {
            let mut encoder = zstd::stream::Encoder::new(Vec::with_capacity(size / 4), level)?;
            encoder.include_checksum(true)?;
            encoder.set_pledged_src_size(Some(size as u64))?;
            for piece in pieces {
                encoder.write_all(piece)?;
            }
            Ok(encoder.finish()?.into())
        }
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(size / 4),
                flate2::Compression::new(level as u32),
            );
            for piece in pieces {
                encoder.write_all(piece)?;
            }
            Ok(encoder.finish()?.into())
        }
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
        let frames: Vec<Vec<Bytes>> = vec![
            vec![
                Bytes::from_static(b"{\"a\":1}\n"),
                Bytes::from_static(b"2\n"),
            ],
            vec![],
            vec![Bytes::from(vec![b'7'; 100_000]), Bytes::from_static(b"\n")],
        ];
        let plain: Vec<u8> = frames.iter().flatten().flat_map(|b| b.to_vec()).collect();
        for (compression, level) in [
            (Compression::Zstd, 3),
            (Compression::Zstd, 19),
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
