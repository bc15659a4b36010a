//! One retry loop for every store request the engine makes. Transient failures
//! (throttling, 5xx, timeouts, stalls, resets) are retried with exponential
//! backoff and full jitter, waiting at least what a `Retry-After` asked for,
//! a bounded number of times; anything else fails at once.
//!
//! Retries draw on a process-wide [`RetryBudget`] (a token bucket, as the AWS
//! SDKs keep): each retry costs tokens, each success returns one. A store that
//! keeps failing empties it, and from then on requests fail at their first error
//! instead of multiplying the load with retries. Every attempt also holds a slot
//! of its key's prefix in the adaptive limiter (see [`crate::adaptive`]).
//! Clean-up requests (aborts) retry longer and draw nothing from the budget.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;
use sluice_store::StoreError;

use crate::adaptive::Outcome;
use crate::error::TransferError;
use crate::EngineInner;

/// Exponential backoff with full jitter: before retry `n` (from 1) the engine
/// sleeps a random time in `[0, min(max_delay, base_delay × 2^(n-1))]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included. 1 disables retries.
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 6,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(10),
        }
    }
}

/// Counters of what the retry loop saw, for metrics.
#[derive(Debug, Default)]
pub struct RetryStats {
    /// Requests sent again after a transient failure.
    pub retries: AtomicU64,
    /// Answers that were 503 SlowDown.
    pub throttled: AtomicU64,
    /// Requests cancelled for making no progress.
    pub stalls: AtomicU64,
    /// Transient failures not retried because the retry budget was empty.
    pub budget_exhausted: AtomicU64,
}

/// Sizes of the retry budget's token bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryBudgetConfig {
    /// Tokens when full. Default 500.
    pub capacity: u32,
    /// Tokens a retry after an answered failure (503, 500) costs. Default 5.
    pub retry_cost: u32,
    /// Tokens a retry after a timeout, stall or lost connection costs. Default 10.
    pub timeout_cost: u32,
}

impl Default for RetryBudgetConfig {
    fn default() -> Self {
        RetryBudgetConfig {
            capacity: 500,
            retry_cost: 5,
            timeout_cost: 10,
        }
    }
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct RetryBudget {
    config: RetryBudgetConfig,
    tokens: Mutex<u32>,
}

impl RetryBudget {
    pub(crate) fn new(config: RetryBudgetConfig) -> Self {
        RetryBudget {
            config,
            tokens: Mutex::new(config.capacity),
        }
    }

    fn tokens(&self) -> std::sync::MutexGuard<'_, u32> {
        self.tokens.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the cost of retrying after `error`; false when the budget cannot pay.
    fn withdraw(&self, error: &StoreError) -> bool {
        let cost = match error {
            StoreError::Transport { .. } | StoreError::Stalled { .. } => self.config.timeout_cost,
            _ => self.config.retry_cost,
        };
        let mut tokens = self.tokens();
        if *tokens >= cost {
            *tokens -= cost;
            true
        } else {
            false
        }
    }

    fn deposit(&self) {
        let mut tokens = self.tokens();
        *tokens = (*tokens + 1).min(self.config.capacity);
    }

    pub(crate) fn available(&self) -> u32 {
        *self.tokens()
    }
}

impl RetryPolicy {
    /// The patience of clean-up requests (aborts): enough to outlast an outage
    /// of a few tens of seconds.
    pub const CLEANUP: RetryPolicy = RetryPolicy {
        max_attempts: 12,
        base_delay: Duration::from_millis(200),
        max_delay: Duration::from_secs(10),
    };

    /// The sleep before retry `retry` (1 for the first retry).
    pub fn backoff(&self, retry: u32) -> Duration {
        let exponential = self
            .base_delay
            .saturating_mul(1u32 << (retry.saturating_sub(1)).min(20));
        let cap = exponential.min(self.max_delay);
        let millis = rand::rng().random_range(0..=cap.as_millis() as u64);
        Duration::from_millis(millis)
    }

    /// The sleep before retry `retry` after `error`: the jittered backoff, or
    /// the store's `Retry-After` when longer (up to `max_delay`).
    pub fn delay_after(&self, retry: u32, error: &StoreError) -> Duration {
        let backoff = self.backoff(retry);
        match error.retry_after() {
            Some(asked) => backoff.max(asked.min(self.max_delay)),
            None => backoff,
        }
    }
}

/// Whether a request draws on the retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Uploads, downloads, completions: the engine's policy and the budget.
    Transfer,
    /// Aborts: [`RetryPolicy::CLEANUP`], outside the budget.
    Cleanup,
}

/// The attempts of one operation under the engine's retry policy and budget:
/// [`EngineInner::with_retries`] for a single request, or driven by hand where
/// one attempt is more than a request (a ranged GET and the body it streams).
pub(crate) struct Attempts<'a> {
    inner: &'a EngineInner,
    kind: Kind,
    operation: &'static str,
    key: &'a str,
    attempt: u32,
}

/// What an attempt holds while it runs: the engine-wide slot and its prefix's
/// adaptive permit, until the store answered (see [`Turn::answered`]).
pub(crate) struct Turn<'a> {
    slot: Option<tokio::sync::SemaphorePermit<'a>>,
    permit: Option<crate::adaptive::Permit<'a>>,
}

impl<'a> Turn<'a> {
    /// The store answered and what follows is the caller's (reading a body it
    /// streams): the slot and the permit go back now, as a success.
    pub(crate) fn answered(&mut self) {
        if let Some(permit) = self.permit.take() {
            permit.finish(Outcome::Success);
        }
        self.slot = None;
    }
}

impl<'a> Attempts<'a> {
    /// Waits for the next attempt's turn: the prefix's pace and a free slot of
    /// it, then the engine-wide slot, then takes the prefix's slot. So the
    /// adaptive limiter counts only requests really at the store, and no
    /// engine-wide slot waits on a throttled prefix.
    /// Refused at once while the store's circuit breaker is open.
    pub(crate) async fn begin(&self) -> Result<Turn<'a>, TransferError> {
        if let Some(breaker) = self.inner.breaker.as_ref().filter(|b| b.is_open()) {
            return Err(TransferError::Store {
                operation: self.operation,
                source: breaker.refusal(),
            });
        }
        let limits = &self.inner.limits;
        loop {
            let ready = limits.ready(self.key).await;
            let slot = match &self.inner.store_slots {
                Some(slots) => Some(slots.acquire().await.expect("never closed")),
                None => None,
            };
            if let Some(permit) = limits.try_take(ready) {
                return Ok(Turn {
                    slot,
                    permit: Some(permit),
                });
            }
        }
    }

    /// The attempt succeeded.
    pub(crate) fn succeeded(&self, turn: Turn<'a>) {
        if let Some(permit) = turn.permit {
            permit.finish(Outcome::Success);
        }
        if let Some(breaker) = &self.inner.breaker {
            breaker.answered();
        }
        self.inner.retry_budget.deposit();
    }

    /// The attempt failed with `error`: Ok after the backoff when another attempt
    /// may follow, otherwise the error to fail with.
    pub(crate) async fn failed(
        &mut self,
        turn: Turn<'a>,
        error: StoreError,
    ) -> Result<(), TransferError> {
        let Turn { slot, permit } = turn;
        if let Some(permit) = permit {
            permit.finish(match error {
                StoreError::Throttled { .. } => Outcome::Throttled,
                _ => Outcome::Other,
            });
        }
        drop(slot); // not held through the backoff
        let (inner, operation, attempt) = (self.inner, self.operation, self.attempt);
        let stats = &inner.stats;
        match error {
            StoreError::Throttled { .. } => {
                stats.throttled.fetch_add(1, Ordering::Relaxed);
            }
            StoreError::Stalled { .. } => {
                stats.stalls.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        let policy = match self.kind {
            Kind::Transfer => &inner.config.retry,
            Kind::Cleanup => &RetryPolicy::CLEANUP,
        };
        let fail = |source| TransferError::Store { operation, source };
        if let Some(breaker) = &inner.breaker {
            breaker.failed(&error);
            if breaker.is_open() {
                return Err(fail(error)); // no retries into a store that is down
            }
        }
        if self.kind == Kind::Transfer && error.is_transient() {
            inner.tuner.back_off();
        }
        if !error.is_transient() || attempt >= policy.max_attempts {
            return Err(fail(error));
        }
        if self.kind == Kind::Transfer && !inner.retry_budget.withdraw(&error) {
            stats.budget_exhausted.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(operation, attempt, error = %sluice_store::error_chain(&error), "retry budget exhausted, not retrying");
            return Err(fail(error));
        }
        let delay = policy.delay_after(attempt, &error);
        // Counted in the metrics; under throttling a log line each would flood.
        tracing::debug!(operation, attempt, delay_ms = delay.as_millis() as u64, error = %sluice_store::error_chain(&error), "transient failure, retrying");
        stats.retries.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(delay).await;
        self.attempt += 1;
        Ok(())
    }
}

/// What becomes of a request in flight when the breaker opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InFlight {
    StopWhenDown,
    RunToAnswer,
}

impl EngineInner {
    /// The attempts of `operation` on `key`.
    pub(crate) fn attempts<'a>(
        &'a self,
        kind: Kind,
        operation: &'static str,
        key: &'a str,
    ) -> Attempts<'a> {
        Attempts {
            inner: self,
            kind,
            operation,
            key,
            attempt: 1,
        }
    }

    /// Runs `request` (a store request about `key`) until it succeeds, fails
    /// permanently, or the attempts or the budget run out. A request in flight
    /// when the store comes to count as down stops there: it would only wait out
    /// its stall timeout.
    pub(crate) async fn with_retries<T, F, Fut>(
        &self,
        kind: Kind,
        operation: &'static str,
        key: &str,
        request: F,
    ) -> Result<T, TransferError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        self.run_attempts(kind, operation, key, InFlight::StopWhenDown, request)
            .await
    }

    /// Runs `request` as [`Self::with_retries`] does, with `in_flight` saying
    /// what becomes of a request in flight when the breaker opens: a completion
    /// (see `ending`) runs to its answer.
    pub(crate) async fn run_attempts<T, F, Fut>(
        &self,
        kind: Kind,
        operation: &'static str,
        key: &str,
        in_flight: InFlight,
        mut request: F,
    ) -> Result<T, TransferError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut attempts = self.attempts(kind, operation, key);
        loop {
            let turn = attempts.begin().await?;
            let breaker = self
                .breaker
                .as_ref()
                .filter(|_| in_flight == InFlight::StopWhenDown);
            let result = match breaker {
                Some(breaker) => tokio::select! {
                    biased;
                    result = request() => result,
                    _ = breaker.wait_open() => Err(breaker.refusal()),
                },
                None => request().await,
            };
            match result {
                Ok(value) => {
                    attempts.succeeded(turn);
                    return Ok(value);
                }
                Err(error) => attempts.failed(turn, error).await?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, EngineConfig};
    use std::sync::atomic::AtomicU32;
    use std::sync::Arc;

    fn policy(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        }
    }

    fn engine(max_attempts: u32, budget: RetryBudgetConfig) -> Engine {
        let store = Arc::new(sluice_testkit::MemoryStore::new());
        Engine::new(
            store,
            EngineConfig {
                retry: policy(max_attempts),
                retry_budget: budget,
                ..EngineConfig::default()
            },
        )
        .unwrap()
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

    #[test]
    fn retry_after_is_a_floor_up_to_the_maximum_delay() {
        let p = policy(10);
        let asked = |secs: f64| StoreError::Throttled {
            retry_after: Some(Duration::from_secs_f64(secs)),
        };
        for _ in 0..50 {
            assert!(p.delay_after(1, &asked(1.0)) >= Duration::from_secs(1));
            assert_eq!(p.delay_after(1, &asked(60.0)), Duration::from_secs(2));
            assert!(
                p.delay_after(1, &StoreError::Throttled { retry_after: None })
                    <= Duration::from_millis(100)
            );
        }
    }

    async fn run(
        engine: &Engine,
        kind: Kind,
        failures: u32,
        error: fn() -> StoreError,
    ) -> (u32, bool) {
        let calls = AtomicU32::new(0);
        let result = engine
            .inner
            .with_retries(kind, "test", "p/k", || {
                let n = calls.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < failures {
                        Err(error())
                    } else {
                        Ok(())
                    }
                }
            })
            .await;
        (calls.load(Ordering::SeqCst), result.is_ok())
    }

    #[tokio::test(start_paused = true)]
    async fn outcomes_table() {
        let transient = || StoreError::Throttled { retry_after: None };
        let permanent = || StoreError::AccessDenied("no".into());
        // (failures before success, error, max attempts, expected calls, ok?)
        type Case = (u32, fn() -> StoreError, u32, u32, bool);
        let cases: [Case; 4] = [
            (0, transient, 3, 1, true),
            (2, transient, 3, 3, true),
            (5, transient, 3, 3, false),
            (5, permanent, 3, 1, false),
        ];
        for (failures, error, max, expected_calls, ok) in cases {
            let engine = engine(max, RetryBudgetConfig::default());
            let (calls, succeeded) = run(&engine, Kind::Transfer, failures, error).await;
            assert_eq!(calls, expected_calls, "case {failures}/{max}");
            assert_eq!(succeeded, ok);
            assert_eq!(
                engine.stats().retries.load(Ordering::SeqCst),
                (expected_calls - 1) as u64
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_budget_stops_retries_until_successes_refill_it() {
        // Room for two retries at 5 tokens each.
        let budget = RetryBudgetConfig {
            capacity: 10,
            retry_cost: 5,
            timeout_cost: 10,
        };
        let engine = engine(10, budget);
        let throttled = || StoreError::Throttled { retry_after: None };
        assert_eq!(
            run(&engine, Kind::Transfer, 100, throttled).await,
            (3, false)
        );
        assert_eq!(engine.inner.retry_budget.available(), 0);
        assert_eq!(engine.stats().budget_exhausted.load(Ordering::SeqCst), 1);
        // Clean-up requests still retry (the budget is not theirs).
        let reset = || StoreError::transport("reset");
        assert_eq!(run(&engine, Kind::Cleanup, 3, reset).await, (4, true));
        // Five successes buy one retry again.
        for _ in 0..5 {
            assert_eq!(run(&engine, Kind::Transfer, 0, throttled).await, (1, true));
        }
        assert_eq!(run(&engine, Kind::Transfer, 1, throttled).await, (2, true));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_waits_for_retry_after() {
        let engine = engine(3, RetryBudgetConfig::default());
        let asked = || StoreError::Throttled {
            retry_after: Some(Duration::from_millis(1500)),
        };
        let before = tokio::time::Instant::now();
        assert_eq!(run(&engine, Kind::Transfer, 1, asked).await, (2, true));
        assert!(before.elapsed() >= Duration::from_millis(1500));
    }
}
