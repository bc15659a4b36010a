//! Stall detection for S3 requests. A request that makes no progress for the
//! stall timeout (the connection takes no body bytes and no answer arrives) is
//! cancelled: its future is dropped, and with it the connection, so the engine's
//! retry goes out on a fresh one. Progress is what a body reports as the
//! connection pulls its frames; requests without a body only wait for the answer.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use futures::{stream, StreamExt};

use crate::error::StoreError;

/// Bytes handed to the connection per frame; progress is seen at this grain.
const FRAME: usize = 256 * 1024;

/// When a request last made progress.
#[derive(Debug)]
pub(super) struct Progress {
    start: Instant,
    last_nanos: AtomicU64,
}

impl Progress {
    pub(super) fn new() -> Arc<Progress> {
        Arc::new(Progress {
            start: Instant::now(),
            last_nanos: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let nanos = self.start.elapsed().as_nanos() as u64;
        self.last_nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    fn idle(&self) -> Duration {
        let last = Duration::from_nanos(self.last_nanos.load(Ordering::Relaxed));
        self.start.elapsed().saturating_sub(last)
    }
}

/// A retryable body over `chunks` that reports progress each time the connection
/// takes a frame.
pub(super) fn tracked_body(chunks: Arc<[Bytes]>, progress: Arc<Progress>) -> SdkBody {
    SdkBody::retryable(move || {
        let mut frames = Vec::new();
        for chunk in chunks.iter() {
            let mut offset = 0;
            while offset < chunk.len() {
                let end = (offset + FRAME).min(chunk.len());
                frames.push(chunk.slice(offset..end));
                offset = end;
            }
        }
        let progress = progress.clone();
        let frames = stream::iter(frames).map(move |bytes| {
            progress.touch();
            Ok::<_, std::convert::Infallible>(http_body::Frame::data(bytes))
        });
        SdkBody::from_body_1_x(http_body_util::StreamBody::new(frames))
    })
}

/// The stall timeout of a store; `None` disables detection.
#[derive(Debug, Clone, Copy)]
pub(super) struct StallGuard {
    pub timeout: Option<Duration>,
}

/// The outcome of a watched request: its own error, or a stall.
pub(super) enum Watched<E> {
    Failed(E),
    Stalled(Duration),
}

impl StallGuard {
    /// Runs `request` until it finishes or makes no progress for the timeout.
    /// Without a `progress` (no body) the clock runs from the start.
    pub(super) async fn watch<T, E>(
        self,
        progress: Option<Arc<Progress>>,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<T, Watched<E>> {
        let Some(timeout) = self.timeout else {
            return request.await.map_err(Watched::Failed);
        };
        let progress = progress.unwrap_or_else(Progress::new);
        tokio::pin!(request);
        loop {
            let idle = progress.idle();
            if idle >= timeout {
                return Err(Watched::Stalled(timeout));
            }
            tokio::select! {
                result = &mut request => return result.map_err(Watched::Failed),
                _ = tokio::time::sleep(timeout - idle) => {}
            }
        }
    }
}

/// `.watched(guard)` on a request future without a body: the answer must
/// arrive within the stall timeout.
pub(super) trait WatchAnswer<T, E>: Future<Output = Result<T, E>> + Sized {
    fn watched(self, guard: StallGuard) -> impl Future<Output = Result<T, Watched<E>>> {
        guard.watch(None, self)
    }
}

impl<T, E, F: Future<Output = Result<T, E>>> WatchAnswer<T, E> for F {}

impl<E> Watched<E> {
    /// Maps the request's own error with `map`; a stall becomes `StoreError::Stalled`.
    pub(super) fn into_store_error(self, map: impl FnOnce(E) -> StoreError) -> StoreError {
        match self {
            Watched::Failed(e) => map(e),
            Watched::Stalled(after) => {
                tracing::warn!(
                    after_ms = after.as_millis() as u64,
                    "store request stalled, cancelled"
                );
                StoreError::Stalled { after }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(ms: u64) -> StallGuard {
        StallGuard {
            timeout: Some(Duration::from_millis(ms)),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_request_is_cancelled_after_the_timeout() {
        let started = tokio::time::Instant::now();
        let result: Result<(), Watched<()>> = guard(500)
            .watch(None, std::future::pending::<Result<(), ()>>())
            .await;
        assert!(matches!(result, Err(Watched::Stalled(_))));
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_keeps_a_slow_request_alive() {
        let progress = Progress::new();
        let ticker = progress.clone();
        // Ten steps of 300 ms each, touching progress: 3 s in all, never 500 ms idle.
        let request = async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                ticker.touch();
            }
            Ok::<_, ()>(7)
        };
        let result = guard(500).watch(Some(progress), request).await;
        assert!(matches!(result, Ok(7)));
    }

    #[tokio::test(start_paused = true)]
    async fn no_timeout_means_no_watch() {
        let request = async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ()>(())
        };
        let result = StallGuard { timeout: None }.watch(None, request).await;
        assert!(result.is_ok());
    }
}
