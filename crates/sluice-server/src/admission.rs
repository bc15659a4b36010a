//! Admission control: a cap on uploads streaming at once and a bounded queue in
//! front of it. A request that finds the queue full, or waits past the deadline,
//! is answered 503 with Retry-After: never a reset connection or a hung request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::metrics::Metrics;

#[derive(Debug, Clone)]
pub struct Admission {
    slots: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
    queue_length: usize,
    queue_timeout: Duration,
    retry_after: u64,
    metrics: Metrics,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Admission {
    pub fn new(
        max_uploads: usize,
        queue_length: usize,
        queue_timeout: Duration,
        retry_after: u64,
        metrics: Metrics,
    ) -> Self {
        Admission {
            slots: Arc::new(Semaphore::new(max_uploads)),
            waiting: Arc::default(),
            queue_length,
            queue_timeout,
            retry_after,
            metrics,
        }
    }

    /// A slot for one upload, held until the permit drops.
    pub async fn admit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Ok(permit) = self.slots.clone().try_acquire_owned() {
            return Ok(permit);
        }
        if self.slots.is_closed() {
            return Err(ApiError::ShuttingDown {
                retry_after: self.retry_after,
            });
        }
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.queue_length {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            self.metrics.rejected();
            return Err(ApiError::Overloaded {
                retry_after: self.retry_after,
            });
        }
        self.metrics.queue_changed(1);
        let result =
            tokio::time::timeout(self.queue_timeout, self.slots.clone().acquire_owned()).await;
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        self.metrics.queue_changed(-1);
        match result {
            Ok(Ok(permit)) => Ok(permit),
            Ok(Err(_)) => Err(ApiError::ShuttingDown {
                retry_after: self.retry_after,
            }),
            Err(_) => {
                self.metrics.rejected();
                Err(ApiError::Overloaded {
                    retry_after: self.retry_after,
                })
            }
        }
    }

    /// Refuses new uploads from now on (shutdown).
    pub fn close(&self) {
        self.slots.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn full_queue_and_deadline_answer_overloaded() {
        let admission = Admission::new(1, 1, Duration::from_secs(5), 2, Metrics::new());
        let first = admission.admit().await.unwrap();
        let queued = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.admit().await })
        };
        tokio::task::yield_now().await;
        // The queue holds one: the next is refused at once.
        assert!(matches!(
            admission.admit().await,
            Err(ApiError::Overloaded { retry_after: 2 })
        ));
        // The queued one times out after the deadline.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(matches!(
            queued.await.unwrap(),
            Err(ApiError::Overloaded { .. })
        ));
        drop(first);
        let again = admission.admit().await.unwrap();
        drop(again);
        admission.close();
        assert!(matches!(
            admission.admit().await,
            Err(ApiError::ShuttingDown { .. })
        ));
    }
}
