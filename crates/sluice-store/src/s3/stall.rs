//! Stall detection for S3 requests. A request that makes no progress for the
//! stall timeout (the connection takes no body bytes and no answer arrives) is
//! cancelled: its future is dropped, and with it the connection, so the engine's
//! retry goes out on a fresh one. Progress is what a body reports as the
//! connection pulls its frames; requests without a body only wait for the answer.
//! How long "no progress" may last is the store's current deadline
//! ([`Vitals`]), which every answer and every frame taken feeds.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use futures::{stream, StreamExt};

use super::vitals::Vitals;
use crate::error::StoreError;

/// Bytes handed to the connection per frame; progress is seen at this grain.
const FRAME: usize = 256 * 1024;

/// When a request last made progress, and its longest wait for it.
#[derive(Debug)]
pub(super) struct Progress {
    start: Instant,
    last_nanos: AtomicU64,
    longest_wait_nanos: AtomicU64,
    vitals: Option<Arc<Vitals>>,
}

impl Progress {
    fn new(vitals: Option<Arc<Vitals>>) -> Arc<Progress> {
        Arc::new(Progress {
            start: Instant::now(),
            last_nanos: AtomicU64::new(0),
            longest_wait_nanos: AtomicU64::new(0),
            vitals,
        })
    }

    fn touch(&self) {
        let nanos = self.start.elapsed().as_nanos() as u64;
        let last = self.last_nanos.fetch_max(nanos, Ordering::Relaxed);
        self.longest_wait_nanos
            .fetch_max(nanos.saturating_sub(last), Ordering::Relaxed);
        if let Some(vitals) = &self.vitals {
            vitals.alive();
        }
    }

    fn longest_wait(&self) -> Duration {
        Duration::from_nanos(self.longest_wait_nanos.load(Ordering::Relaxed))
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

/// A store's stall detection; `vitals: None` disables it.
#[derive(Debug, Clone)]
pub(super) struct StallGuard {
    pub vitals: Option<Arc<Vitals>>,
}

/// The outcome of a watched request: its own error, or a stall.
pub(super) enum Watched<E> {
    Failed(E),
    Stalled { after: Duration, store_silent: bool },
}

/// Whether a failed request got an answer from the store (a sign of life) or
/// none (refused, reset, timed out).
pub(super) trait Answered {
    fn is_answer(&self) -> bool;
}

impl<E, R> Answered for aws_sdk_s3::error::SdkError<E, R> {
    fn is_answer(&self) -> bool {
        matches!(self, aws_sdk_s3::error::SdkError::ServiceError(_))
    }
}

impl StallGuard {
    /// A progress tracker for one request's body.
    pub(super) fn progress(&self) -> Arc<Progress> {
        Progress::new(self.vitals.clone())
    }

    /// The deadline for a request starting now; `None` when not watched.
    pub(super) fn deadline(&self) -> Option<Duration> {
        self.vitals.as_ref().map(|v| v.deadline())
    }

    /// Runs `request` until it finishes or makes no progress for the store's
    /// deadline. Without a `progress` (no body) the clock runs from the start.
    pub(super) async fn watch<T, E: Answered>(
        &self,
        progress: Option<Arc<Progress>>,
        request: impl Future<Output = Result<T, E>>,
    ) -> Result<T, Watched<E>> {
        let Some(vitals) = &self.vitals else {
            return request.await.map_err(Watched::Failed);
        };
        let deadline = vitals.deadline();
        let progress = progress.unwrap_or_else(|| self.progress());
        tokio::pin!(request);
        loop {
            let idle = progress.idle();
            if idle >= deadline {
                vitals.stalled(deadline);
                return Err(Watched::Stalled {
                    after: deadline,
                    store_silent: vitals.silent_for() >= deadline,
                });
            }
            tokio::select! {
                result = &mut request => {
                    if result.as_ref().err().is_none_or(Answered::is_answer) {
                        progress.touch();
                        vitals.answered(progress.longest_wait());
                    }
                    return result.map_err(Watched::Failed);
                }
                _ = tokio::time::sleep(deadline - idle) => {}
            }
        }
    }

    /// Marks a sign of life outside a watched request (a downloaded chunk).
    pub(super) fn alive(&self) {
        if let Some(vitals) = &self.vitals {
            vitals.alive();
        }
    }

    /// The stall error for a request cancelled after `after` without progress.
    pub(super) fn stalled(&self, after: Duration) -> StoreError {
        let store_silent = self
            .vitals
            .as_ref()
            .is_some_and(|v| v.silent_for() >= after);
        if let Some(vitals) = &self.vitals {
            vitals.stalled(after);
        }
        Watched::<std::convert::Infallible>::Stalled {
            after,
            store_silent,
        }
        .into_store_error(|never| match never {})
    }
}

/// `.watched(&guard)` on a request future without a body: the answer must
/// arrive within the store's deadline.
pub(super) trait WatchAnswer<T, E: Answered>: Future<Output = Result<T, E>> + Sized {
    fn watched(self, guard: &StallGuard) -> impl Future<Output = Result<T, Watched<E>>> {
        guard.watch(None, self)
    }
}

impl<T, E: Answered, F: Future<Output = Result<T, E>>> WatchAnswer<T, E> for F {}

impl<E> Watched<E> {
    /// Maps the request's own error with `map`; a stall becomes `StoreError::Stalled`.
    pub(super) fn into_store_error(self, map: impl FnOnce(E) -> StoreError) -> StoreError {
        match self {
            Watched::Failed(e) => map(e),
            Watched::Stalled {
                after,
                store_silent,
            } => {
                tracing::warn!(
                    after_ms = after.as_millis() as u64,
                    store_silent,
                    "store request stalled, cancelled"
                );
                StoreError::Stalled {
                    after,
                    store_silent,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(ms: u64) -> StallGuard {
        let timeout = Duration::from_millis(ms);
        StallGuard {
            vitals: Some(Arc::new(Vitals::new(timeout, timeout))),
        }
    }

    /// A request error that is not an answer (a reset connection).
    #[derive(Debug)]
    struct Reset;

    impl Answered for Reset {
        fn is_answer(&self) -> bool {
            false
        }
    }

    impl Answered for () {
        fn is_answer(&self) -> bool {
            true
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_request_is_cancelled_after_the_timeout() {
        let started = tokio::time::Instant::now();
        let result: Result<(), Watched<()>> = guard(500)
            .watch(None, std::future::pending::<Result<(), ()>>())
            .await;
        assert!(matches!(
            result,
            Err(Watched::Stalled {
                store_silent: true,
                ..
            })
        ));
        assert_eq!(started.elapsed(), Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn progress_keeps_a_slow_request_alive() {
        let guard = guard(500);
        let progress = guard.progress();
        let ticker = progress.clone();
        // Ten steps of 300 ms each, touching progress: 3 s in all, never 500 ms idle.
        let request = async move {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(300)).await;
                ticker.touch();
            }
            Ok::<_, ()>(7)
        };
        let result = guard.watch(Some(progress), request).await;
        assert!(matches!(result, Ok(7)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_while_another_request_progresses_is_not_silence() {
        let guard = guard(500);
        let busy = guard.progress();
        let ticker = busy.clone();
        // Another request takes a frame every 100 ms while this one hears nothing.
        let other = async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                ticker.touch();
            }
        };
        let silent = guard.watch(None, std::future::pending::<Result<(), Reset>>());
        let result = tokio::select! {
            result = silent => result,
            _ = other => unreachable!(),
        };
        assert!(matches!(
            result,
            Err(Watched::Stalled {
                store_silent: false,
                ..
            })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_request_is_no_sign_of_life_an_answer_is() {
        let guard = guard(500);
        tokio::time::sleep(Duration::from_millis(400)).await;
        // (what the request ends with, store silent afterwards for)
        let refused = guard.watch(None, async { Err::<(), _>(Reset) }).await;
        assert!(matches!(refused, Err(Watched::Failed(Reset))));
        assert_eq!(
            guard.vitals.as_ref().unwrap().silent_for(),
            Duration::from_millis(400)
        );
        let answered = guard.watch(None, async { Err::<(), _>(()) }).await;
        assert!(matches!(answered, Err(Watched::Failed(()))));
        assert_eq!(guard.vitals.as_ref().unwrap().silent_for(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn no_timeout_means_no_watch() {
        let request = async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ()>(())
        };
        let result = StallGuard { vitals: None }.watch(None, request).await;
        assert!(result.is_ok());
    }
}
