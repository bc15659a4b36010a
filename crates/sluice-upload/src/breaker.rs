//! The store's circuit breaker, and what it knows of the store's health.
//!
//! It opens (the store counts as down) when
//! - a request stalled while the whole store showed no sign of life for the
//!   stall deadline (every request in flight stalled: the store is gone, not
//!   slow; see sluice-store's `vitals`), at once;
//! - the store failed `failures` times in a row (no answer, a stall, or a 5xx
//!   other than throttling) with nothing succeeding in between;
//! - a check finds the bucket missing or the credentials refused.
//!
//! While it is open, store requests stop going out and fail at once with
//! [`StoreError::Unavailable`] (a gateway answers 503 with `Retry-After`
//! instead of after stall timeouts and retries), and one probe every
//! `probe_interval` (given `probe_timeout` to answer) asks whether the store
//! is back; an answer that finds the bucket closes the breaker, and whoever
//! waits for that (aborts of uploads that failed during the outage) goes on.
//!
//! A check is one short listing under `_sluice/probe`: unlike a `HEAD`, its
//! answer tells a missing bucket and refused credentials apart. A gateway
//! calls [`Breaker::check_now`] at start-up and runs [`Breaker::spawn_heartbeat`]:
//! when no store request was answered for a `heartbeat`, a check goes out, so a
//! store that dies while the gateway is idle is noticed within a heartbeat and
//! a stall deadline. What it knows is [`Breaker::down`], which readiness reports
//! without asking the store.
//!
//! Throttling (503 SlowDown) never counts: that store is alive and the adaptive
//! limiter slows down for it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sluice_store::{ObjectStore, StoreError};
use tokio::sync::watch;
use tokio::time::Instant;

/// The prefix checks list; whether anything is there does not matter.
const PROBE_KEY: &str = sluice_store::reserved_key!("probe");

/// When the breaker opens and how it probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Store failures in a row (with no success between them) that open it.
    pub failures: u32,
    /// Time between probes while open; also the `Retry-After` clients are given.
    pub probe_interval: Duration,
    /// A probe without an answer after this long failed.
    pub probe_timeout: Duration,
    /// With no store request answered for this long, a heartbeat check goes out.
    pub heartbeat: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures: 3,
            probe_interval: Duration::from_secs(1),
            probe_timeout: Duration::from_secs(1),
            heartbeat: Duration::from_secs(2),
        }
    }
}

/// Why the store counts as down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownReason {
    /// No answer: refused, reset, stalled, or 5xx answers.
    Unreachable,
    /// The store answers that the bucket does not exist.
    BucketMissing,
    /// The store refuses the credentials (or denies listing the bucket).
    CredentialsRefused,
}

impl DownReason {
    /// The stable name readiness and logs give it.
    pub fn code(self) -> &'static str {
        match self {
            DownReason::Unreachable => "store_unreachable",
            DownReason::BucketMissing => "bucket_missing",
            DownReason::CredentialsRefused => "credentials_refused",
        }
    }

    /// What the answer (or its absence) to a check says; `None`: the store is there.
    pub fn of_check(result: &Result<(), StoreError>) -> Option<DownReason> {
        match result {
            Ok(()) => None,
            Err(StoreError::NoSuchBucket { .. }) => Some(DownReason::BucketMissing),
            // A denied listing is an answer: credentials allowed to write but
            // not to list (a least-privilege policy) still store uploads.
            Err(StoreError::InvalidCredentials(_) | StoreError::NoCredentials(_)) => {
                Some(DownReason::CredentialsRefused)
            }
            Err(e) if counts_as_down(e) => Some(DownReason::Unreachable),
            Err(_) => None,
        }
    }
}

/// The store counts as down: why, and the error that said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Down {
    pub reason: DownReason,
    pub detail: String,
}

impl Down {
    /// What a check's result says, when it says the store is down.
    fn of_check(result: &Result<(), StoreError>) -> Option<Down> {
        let reason = DownReason::of_check(result)?;
        Some(Down {
            reason,
            detail: result
                .as_ref()
                .err()
                .map(|e| sluice_store::error_chain(e))
                .unwrap_or_default(),
        })
    }
}

/// See the module documentation. Shared by the engine's retry loop and its users.
#[derive(Debug)]
pub struct Breaker {
    config: BreakerConfig,
    store: Arc<dyn ObjectStore>,
    in_a_row: AtomicU32,
    /// `Some` while open; watched by those waiting for the store to return.
    open: watch::Sender<Option<Down>>,
    probing: AtomicBool,
    checking: AtomicBool,
    opened_total: AtomicU64,
    start: Instant,
    /// Milliseconds after `start` of the last answer from the store.
    last_answer_ms: AtomicU64,
}

impl Breaker {
    pub(crate) fn new(config: BreakerConfig, store: Arc<dyn ObjectStore>) -> Arc<Breaker> {
        Arc::new(Breaker {
            config,
            store,
            in_a_row: AtomicU32::new(0),
            open: watch::Sender::new(None),
            probing: AtomicBool::new(false),
            checking: AtomicBool::new(false),
            opened_total: AtomicU64::new(0),
            start: Instant::now(),
            last_answer_ms: AtomicU64::new(0),
        })
    }

    /// Whether store requests are refused now.
    pub fn is_open(&self) -> bool {
        self.open.borrow().is_some()
    }

    /// Why the store counts as down, while it does.
    pub fn down(&self) -> Option<Down> {
        self.open.borrow().clone()
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

    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }

    /// A store request got an answer that is not a failure of the store.
    pub(crate) fn answered(&self) {
        self.in_a_row.store(0, Ordering::Relaxed);
        self.last_answer_ms
            .fetch_max(self.now_ms(), Ordering::Relaxed);
    }

    /// A store request failed with `error`.
    pub(crate) fn failed(self: &Arc<Self>, error: &StoreError) {
        match error {
            // Its own refusal says nothing new.
            StoreError::Unavailable { .. } => {}
            StoreError::Stalled {
                store_silent: true, ..
            } => self.open(Down {
                reason: DownReason::Unreachable,
                detail: sluice_store::error_chain(error),
            }),
            // Answers about the bucket or the credentials: a check says which.
            StoreError::NoSuchBucket { .. }
            | StoreError::InvalidCredentials(_)
            | StoreError::NoCredentials(_) => {
                self.answered();
                self.check_soon();
            }
            error if counts_as_down(error) => {
                let in_a_row = self.in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                if in_a_row >= self.config.failures {
                    self.open(Down {
                        reason: DownReason::Unreachable,
                        detail: sluice_store::error_chain(error),
                    });
                }
            }
            _ => self.answered(),
        }
    }

    /// One check of the store: a listing of one key under `_sluice/probe`,
    /// given `probe_timeout` at most (the store's own stall deadline, which
    /// grows with the waits it sees, usually ends it sooner).
    async fn check(&self) -> Result<(), StoreError> {
        let listing = self.store.list_objects(PROBE_KEY, None, 1);
        match tokio::time::timeout(self.config.probe_timeout, listing).await {
            Ok(result) => result.map(|_| ()),
            Err(_) => Err(StoreError::Stalled {
                after: self.config.probe_timeout,
                store_silent: true,
            }),
        }
    }

    /// Checks the store now and opens or closes on what the answer says; the
    /// verdict, for a start-up log line.
    pub async fn check_now(self: &Arc<Self>) -> Option<Down> {
        let verdict = Down::of_check(&self.check().await);
        match &verdict {
            None => {
                self.answered();
                self.close();
            }
            Some(down) => self.open(down.clone()),
        }
        verdict
    }

    /// Starts one check in the background unless one is running.
    fn check_soon(self: &Arc<Self>) {
        if self.checking.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            self.checking.store(false, Ordering::Release);
            return;
        };
        let breaker = self.clone();
        handle.spawn(async move {
            breaker.heartbeat_check().await;
            breaker.checking.store(false, Ordering::Release);
        });
    }

    /// A check while closed: a missing bucket or refused credentials open the
    /// breaker; no answer counts as a failure like any request's.
    async fn heartbeat_check(self: &Arc<Self>) {
        let result = self.check().await;
        match (Down::of_check(&result), result) {
            (None, _) => self.answered(),
            (Some(down), Err(error)) if down.reason == DownReason::Unreachable => {
                self.failed(&error)
            }
            (Some(down), _) => self.open(down),
        }
    }

    /// Checks the store whenever no request was answered for a heartbeat, until
    /// the breaker (the engine) is dropped.
    pub fn spawn_heartbeat(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak: Weak<Breaker> = Arc::downgrade(self);
        let every = self.config.heartbeat;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let Some(breaker) = weak.upgrade() else {
                    return;
                };
                let quiet = breaker
                    .now_ms()
                    .saturating_sub(breaker.last_answer_ms.load(Ordering::Relaxed));
                if breaker.is_open() || quiet < every.as_millis() as u64 {
                    continue;
                }
                if breaker.checking.swap(true, Ordering::AcqRel) {
                    continue;
                }
                breaker.heartbeat_check().await;
                breaker.checking.store(false, Ordering::Release);
            }
        })
    }

    fn close(&self) {
        self.in_a_row.store(0, Ordering::Relaxed);
        if self.open.send_replace(None).is_some() {
            tracing::info!("the store answers again: store requests resume");
        }
    }

    fn open(self: &Arc<Self>, down: Down) {
        let reason = down.reason;
        let detail = down.detail.clone();
        let mut newly = false;
        self.open.send_if_modified(|current| match current {
            None => {
                *current = Some(down.clone());
                newly = true;
                true
            }
            Some(_) => false,
        });
        if !newly {
            self.still_down(&down);
            return;
        }
        self.opened_total.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            reason = reason.code(),
            error = %detail,
            "the store counts as down: refusing store requests until a probe finds it"
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
                self.open.send_replace(None);
            }
        }
    }

    /// While open, takes `down` as the reason (logged when it changed).
    fn still_down(&self, down: &Down) {
        self.open.send_if_modified(|current| match current {
            Some(current) if current.reason != down.reason => {
                tracing::warn!(reason = down.reason.code(), error = %down.detail, "the store is still down, for another reason");
                *current = down.clone();
                true
            }
            _ => false,
        });
    }

    async fn probe_until_answered(self: Arc<Self>) {
        loop {
            tokio::time::sleep(self.config.probe_interval).await;
            match Down::of_check(&self.check().await) {
                None => {
                    self.answered();
                    self.probing.store(false, Ordering::Release);
                    self.close();
                    return;
                }
                Some(down) => {
                    self.still_down(&down);
                }
            }
        }
    }

    /// Waits until the breaker opens (at once if it is open).
    pub async fn wait_open(&self) {
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|open| open.is_some()).await;
    }

    /// Waits until the breaker is closed (at once if it is).
    pub async fn wait_closed(&self) {
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|open| open.is_none()).await;
    }
}

/// Failures that say the store is not there: no answer, a stall, a 5xx that is
/// not throttling.
fn counts_as_down(error: &StoreError) -> bool {
    match error {
        StoreError::Transport { .. } | StoreError::Stalled { .. } => true,
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
        StoreError::transport("connection refused")
    }

    #[tokio::test]
    async fn opens_after_failures_in_a_row_and_closes_on_an_answer() {
        let config = BreakerConfig {
            failures: 3,
            probe_interval: Duration::from_millis(20),
            probe_timeout: Duration::from_millis(50),
            ..BreakerConfig::default()
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
                    store_silent: false,
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
            ..BreakerConfig::default()
        };
        let store = FaultyStore::new(Arc::new(MemoryStore::new())).inject(
            Op::List,
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
            store.attempts(Op::List, None),
            6,
            "five failed probes, one answered"
        );
    }

    fn quick() -> BreakerConfig {
        BreakerConfig {
            failures: 3,
            probe_interval: Duration::from_millis(20),
            probe_timeout: Duration::from_millis(50),
            heartbeat: Duration::from_millis(50),
        }
    }

    #[tokio::test]
    async fn a_check_tells_the_reasons_apart() {
        // (fault of the check's listing, verdict)
        let cases = [
            (None, None),
            (Some(Fault::ServerError), Some(DownReason::Unreachable)),
            (Some(Fault::NoSuchBucket), Some(DownReason::BucketMissing)),
            (
                Some(Fault::BadCredentials),
                Some(DownReason::CredentialsRefused),
            ),
            // Allowed to write but not to list: an answer, the store is there.
            (Some(Fault::Denied), None),
            (Some(Fault::Throttle), None),
        ];
        for (fault, want) in cases {
            let mut store = FaultyStore::new(Arc::new(MemoryStore::new()));
            if let Some(fault) = fault {
                store = store.inject(Op::List, None, Some(1), fault);
            }
            let breaker = Breaker::new(quick(), Arc::new(store));
            let verdict = breaker.check_now().await.map(|down| down.reason);
            assert_eq!(verdict, want, "{fault:?}");
            assert_eq!(breaker.is_open(), want.is_some(), "{fault:?}");
            if want.is_some() {
                // The next probe lists a bucket that is there: closed again.
                tokio::time::timeout(Duration::from_secs(2), breaker.wait_closed())
                    .await
                    .expect("closed by a probe");
            }
        }
    }

    #[tokio::test]
    async fn a_stall_while_the_whole_store_is_silent_opens_at_once() {
        let breaker = Breaker::new(quick(), Arc::new(MemoryStore::new()));
        let stall = |store_silent| StoreError::Stalled {
            after: Duration::from_secs(5),
            store_silent,
        };
        breaker.failed(&stall(false));
        assert!(!breaker.is_open(), "another request was making progress");
        breaker.failed(&stall(true));
        assert_eq!(breaker.down().unwrap().reason, DownReason::Unreachable);
    }

    #[tokio::test(start_paused = true)]
    async fn the_heartbeat_checks_only_a_quiet_store() {
        let store = FaultyStore::new(Arc::new(MemoryStore::new()));
        let breaker = Breaker::new(quick(), Arc::new(store.clone()));
        let _heartbeat = breaker.spawn_heartbeat();
        // Answers every 10 ms: no check goes out.
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            breaker.answered();
        }
        assert_eq!(store.attempts(Op::List, None), 0);
        // Quiet, and the bucket is gone: the next heartbeat finds out.
        let store = store.inject(Op::List, None, None, Fault::NoSuchBucket);
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(store.attempts(Op::List, None) >= 1);
        assert_eq!(
            breaker.down().map(|d| d.reason),
            Some(DownReason::BucketMissing)
        );
    }
}
