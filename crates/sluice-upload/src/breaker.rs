//! The store's circuit breaker. Once the store has failed `failures` times in a
//! row (no answer, a stall, or a 5xx other than throttling) with nothing
//! succeeding in between, the breaker opens: store requests stop going out and
//! fail at once with [`StoreError::Unavailable`] (a gateway answers 503 with
//! `Retry-After` in milliseconds instead of after stall timeouts and retries).
//! While it is open, one probe every `probe_interval` (a HEAD of a key that
//! need not exist, given `probe_timeout` to answer) asks whether the store is
//! back; any answer closes the breaker, and whoever waits for that (aborts of
//! uploads that failed during the outage) goes on.
//!
//! Throttling (503 SlowDown) never counts: that store is alive and the adaptive
//! limiter slows down for it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_store::{ObjectStore, StoreError};
use tokio::sync::watch;

/// The key probes ask for; whether it exists does not matter.
const PROBE_KEY: &str = "_sluice/probe";

/// When the breaker opens and how it probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Store failures in a row (with no success between them) that open it.
    pub failures: u32,
    /// Time between probes while open; also the `Retry-After` clients are given.
    pub probe_interval: Duration,
    /// A probe without an answer after this long failed.
    pub probe_timeout: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: 3,
            probe_interval: Duration::from_secs(1),
            probe_timeout: Duration::from_secs(1),
        }
    }
}

/// See the module documentation. Shared by the engine's retry loop and its users.
#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    store: Arc<dyn ObjectStore>,
    in_a_row: AtomicU32,
    /// True while open; watched by those waiting for the store to return.
    open: watch::Sender<bool>,
    probing: AtomicBool,
    opened_total: AtomicU64,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig, store: Arc<dyn ObjectStore>) -> Arc<Breaker> {
        Arc::new(Breaker {
            config,
            store,
            in_a_row: AtomicU32::new(0),
            open: watch::Sender::new(false),
            probing: AtomicBool::new(false),
            opened_total: AtomicU64::new(0),
        })
    }

    /// Whether store requests are refused now.
    pub fn is_open(&self) -> bool {
        *self.open.borrow()
    }

    /// The error requests get while it is open.
    pub fn refusal(&self) -> StoreError {
        StoreError::Unavailable {
            retry_after: self.config.probe_interval,
        }
    }

    /// How long clients are asked to wait while it is open.
    pub fn retry_after(&self) -> Duration {
        self.config.probe_interval
    }

    /// Times it opened since the start.
    pub fn opened_total(&self) -> u64 {
        self.opened_total.load(Ordering::Relaxed)
    }

    /// A store request got an answer that is not a failure of the store.
    pub(crate) fn answered(&self) {
        self.in_a_row.store(0, Ordering::Relaxed);
    }

    /// A store request failed with `error`.
    pub(crate) fn failed(self: &Arc<Self>, error: &StoreError) {
        if matches!(error, StoreError::Unavailable { .. }) {
            return; // its own refusal says nothing new
        }
        if !counts_as_down(error) {
            self.answered();
            return;
        }
        let in_a_row = self.in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
        if in_a_row >= self.config.failures && !self.is_open() {
            self.open();
        }
    }

    fn open(self: &Arc<Self>) {
        if self.open.send_replace(true) {
            return; // already open
        }
        self.opened_total.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            failures = self.config.failures,
            "the store keeps failing: refusing store requests until a probe gets an answer"
        );
        if self.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let breaker = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move { breaker.probe_until_answered().await });
            }
            Err(_) => {
                // No runtime to probe from: stay closed rather than open forever.
                self.probing.store(false, Ordering::Release);
                self.open.send_replace(false);
            }
        }
    }

    async fn probe_until_answered(self: Arc<Self>) {
        loop {
            tokio::time::sleep(self.config.probe_interval).await;
            let probe = self.store.head_object(PROBE_KEY);
            let answered = match tokio::time::timeout(self.config.probe_timeout, probe).await {
                Ok(Ok(_)) => true,
                Ok(Err(error)) => !counts_as_down(&error),
                Err(_) => false,
            };
            if answered {
                self.in_a_row.store(0, Ordering::Relaxed);
                self.probing.store(false, Ordering::Release);
                self.open.send_replace(false);
                tracing::info!("the store answers again: store requests resume");
                return;
            }
        }
    }

    /// Waits until the breaker opens (at once if it is open).
    pub async fn wait_open(&self) {
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|open| *open).await;
    }

    /// Waits until the breaker is closed (at once if it is).
    pub async fn wait_closed(&self) {
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|open| !*open).await;
    }
}

/// Failures that say the store is not there: no answer, a stall, a 5xx that is
/// not throttling.
fn counts_as_down(error: &StoreError) -> bool {
    match error {
        StoreError::Transport(_) | StoreError::Stalled { .. } => true,
        StoreError::Service { status, code, .. } => *status >= 500 && code != "SlowDown",
        StoreError::Io(_) => error.is_transient(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};

    fn reset() -> StoreError {
        StoreError::Transport("connection refused".into())
    }

    #[tokio::test]
    async fn opens_after_failures_in_a_row_and_closes_on_an_answer() {
        let config = BreakerConfig {
            failures: 3,
            probe_interval: Duration::from_millis(20),
            probe_timeout: Duration::from_millis(50),
        };
        let breaker = Breaker::new(config, Arc::new(MemoryStore::new()));
        // (error, open after it)
        let cases = [
            (reset(), false),
            (reset(), false),
            (StoreError::Throttled { retry_after: None }, false), // alive: the count restarts
            (reset(), false),
            (
                StoreError::Stalled {
                    after: Duration::from_secs(30),
                },
                false,
            ),
            (reset(), true),
        ];
        for (i, (error, open)) in cases.into_iter().enumerate() {
            breaker.failed(&error);
            assert_eq!(breaker.is_open(), open, "after failure {i}: {error}");
        }
        assert_eq!(breaker.opened_total(), 1);
        tokio::time::timeout(Duration::from_secs(2), breaker.wait_closed())
            .await
            .expect("the first probe answers (the object is missing: an answer)");
        assert!(!breaker.is_open());
    }

    #[tokio::test]
    async fn stays_open_while_probes_get_no_answer() {
        let config = BreakerConfig {
            failures: 1,
            probe_interval: Duration::from_millis(20),
            probe_timeout: Duration::from_millis(50),
        };
        let store = FaultyStore::new(Arc::new(MemoryStore::new())).inject(
            Op::Head,
            None,
            Some(5),
            Fault::ServerError,
        );
        let breaker = Breaker::new(config, Arc::new(store.clone()));
        breaker.failed(&reset());
        assert!(breaker.is_open());
        tokio::time::timeout(Duration::from_secs(2), breaker.wait_closed())
            .await
            .expect("closed once the store answers");
        assert_eq!(
            store.attempts(Op::Head, None),
            6,
            "five failed probes, one answered"
        );
    }
}
