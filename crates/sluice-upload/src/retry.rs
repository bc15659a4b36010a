//! One retry loop for every store request the engine makes: transient failures
//! (throttling, 5xx, timeouts, resets) are retried with exponential backoff and
//! full jitter, a bounded number of times; anything else fails at once.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use sluice_store::StoreError;

use crate::config::RetryPolicy;
use crate::error::TransferError;

/// Counters of what the retry loop saw, for metrics.
#[derive(Debug, Default)]
pub struct RetryStats {
    /// Requests sent again after a transient failure.
    pub retries: AtomicU64,
    /// Answers that were 503 SlowDown.
    pub throttled: AtomicU64,
}

impl RetryPolicy {
    /// The sleep before retry `retry` (1 for the first retry).
    pub fn backoff(&self, retry: u32) -> Duration {
        let exponential = self
            .base_delay
            .saturating_mul(1u32 << (retry.saturating_sub(1)).min(20));
        let cap = exponential.min(self.max_delay);
        let millis = rand::rng().random_range(0..=cap.as_millis() as u64);
        Duration::from_millis(millis)
    }
}

/// Runs `request` until it succeeds, fails permanently, or the attempts run out.
pub(crate) async fn with_retries<T, F, Fut>(
    policy: &RetryPolicy,
    stats: &RetryStats,
    operation: &'static str,
    mut request: F,
) -> Result<T, TransferError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut attempt = 1;
    loop {
        match request().await {
            Ok(value) => return Ok(value),
            Err(error) => {
                if matches!(error, StoreError::Throttled) {
                    stats.throttled.fetch_add(1, Ordering::Relaxed);
                }
                if !error.is_transient() || attempt >= policy.max_attempts {
                    return Err(TransferError::Store {
                        operation,
                        source: error,
                    });
                }
                let delay = policy.backoff(attempt);
                tracing::warn!(operation, attempt, delay_ms = delay.as_millis() as u64, error = %sluice_store::error_chain(&error), "transient failure, retrying");
                stats.retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        }
    }

    #[test]
    fn backoff_is_bounded_by_the_exponential_cap() {
        let p = policy(10);
        for retry in 1..=12 {
            let cap = (100u64 << (retry - 1)).min(2000);
            for _ in 0..50 {
                assert!(p.backoff(retry).as_millis() as u64 <= cap, "retry {retry}");
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_table() {
        let transient = || StoreError::Throttled;
        let permanent = || StoreError::AccessDenied("no".into());
        // (failures before success, failure kind transient?, max attempts, expected calls, ok?)
        let cases = [
            (0, true, 3, 1, true),
            (2, true, 3, 3, true),
            (5, true, 3, 3, false),
            (5, false, 3, 1, false),
        ];
        for (failures, is_transient, max, expected_calls, ok) in cases {
            let calls = AtomicU32::new(0);
            let stats = RetryStats::default();
            let result = with_retries(&policy(max), &stats, "test", || {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < failures {
                        Err(if is_transient {
                            transient()
                        } else {
                            permanent()
                        })
                    } else {
                        Ok(())
                    }
                }
            })
            .await;
            assert_eq!(
                calls.load(Ordering::SeqCst),
                expected_calls,
                "case {failures}/{is_transient}/{max}"
            );
            assert_eq!(result.is_ok(), ok);
            assert_eq!(
                stats.retries.load(Ordering::SeqCst),
                (expected_calls - 1) as u64
            );
        }
    }
}
