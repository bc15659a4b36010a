//! Admission control: a cap on uploads streaming at once and a bounded queue in
//! front of it. A request that finds the queue full, or waits past the deadline,
//! is answered 503 with Retry-After: never a reset connection or a hung request.
//! While the store counts as down (the engine's circuit breaker is open), uploads
//! are refused at once the same way, before any byte is read.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_upload::Breaker;
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
    breaker: Option<Arc<Breaker>>,
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
            breaker: None,
        }
    }

    /// Refuses uploads while `breaker` is open.
    pub fn with_breaker(mut self, breaker: Option<Arc<Breaker>>) -> Self {
        self.breaker = breaker;
        self
    }

    /// A slot for one upload, held until the permit drops.
    pub async fn admit(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        if let Some(breaker) = self.breaker.as_ref().filter(|b| b.is_open()) {
            self.metrics.rejected();
            return Err(ApiError::Store(breaker.refusal()));
        }
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
        let _place = QueuePlace {
            waiting: &self.waiting,
            metrics: &self.metrics,
        };
        self.metrics.queue_changed(1);
        let result =
            tokio::time::timeout(self.queue_timeout, self.slots.clone().acquire_owned()).await;
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

    /// Requests waiting in the queue now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::SeqCst)
    }

    /// Refuses new uploads from now on (shutdown).
    pub fn close(&self) {
        self.slots.close();
    }
}

/// A place in the queue, given back when the waiter gets a slot, gives up, or is
/// dropped while it waits (its client went away): cancel-safe by construction.
struct QueuePlace<'a> {
    waiting: &'a AtomicUsize,
    metrics: &'a Metrics,
}

impl Drop for QueuePlace<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        self.metrics.queue_changed(-1);
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

    #[tokio::test(start_paused = true)]
    async fn a_waiter_dropped_in_the_queue_gives_its_place_back() {
        let admission = Admission::new(1, 2, Duration::from_secs(60), 1, Metrics::new());
        let held = admission.admit().await.unwrap();
        // Clients that go away while they wait: their request futures are dropped.
        for _ in 0..5 {
            let waiter = {
                let admission = admission.clone();
                tokio::spawn(async move { admission.admit().await })
            };
            tokio::task::yield_now().await;
            assert_eq!(admission.waiting(), 1);
            waiter.abort();
            let _ = waiter.await;
            assert_eq!(admission.waiting(), 0, "the dropped waiter kept its place");
        }
        // The queue still takes waiters, and they get the slot when it frees.
        let queued = {
            let admission = admission.clone();
            tokio::spawn(async move { admission.admit().await })
        };
        tokio::task::yield_now().await;
        drop(held);
        assert!(queued.await.unwrap().is_ok());
        assert_eq!(admission.waiting(), 0);
    }
}
