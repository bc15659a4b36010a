//! sluice-upload is the transfer engine: it turns a byte stream of known or
//! unknown length into a single PUT or a multipart upload whose parts are sent
//! concurrently, with every buffered byte counted against one process-wide
//! [`MemoryBudget`]; and it downloads objects with parallel ranged GETs.
//!
//! Every part carries a CRC32C (or CRC64NVME) checksum the store verifies, and the
//! whole object's checksum is reported back. Transient store failures are retried
//! with full-jitter backoff ([`RetryPolicy`]) within a retry budget, and requests
//! per key prefix adapt to throttling ([`AdaptiveConfig`]); any failure, or dropping an upload,
//! aborts its multipart upload. Resumable uploads use the same parts machinery
//! across requests ([`Engine::append_parts`]), keeping their state elsewhere.
//!
//! The engine knows stores only through `sluice_store::ObjectStore`.

mod adaptive;
mod announce;
mod append;
mod breaker;
mod budget;
mod config;
mod copy;
mod disk_pace;
mod download;
mod ending;
mod error;
mod file_stamp;
mod filling;
mod janitor;
mod outcome;
mod parts;
mod progress;
mod resume;
mod retry;
mod retrying_store;
pub mod settings;
mod source;
mod tuning;
mod units;
mod upload;

use std::sync::Arc;

use sluice_store::ObjectStore;
use tokio_util::task::TaskTracker;

pub use adaptive::{AdaptiveConfig, PrefixLimit};
pub use announce::{Announcer, Intent, LateMetadata, Making, Origin, UploadKind};
pub use append::{
    AppendRequest, Appended, BodyHead, HeadRequest, HeldMemory, MultipartGuard, ReadUpTo,
};
pub use breaker::{Breaker, BreakerConfig, Down, DownReason};
pub use budget::{MemoryBudget, MemoryShare, Reservation};
pub use config::{validate_key, EngineConfig, RetryPolicy, MIB};
pub use copy::{CopyRequest, SourceBucket};
pub use download::DownloadOutcome;
pub use error::{ConfigError, TransferError};
pub use filling::cut_floor;
pub use janitor::{StaleUpload, StaleUploadFilter, StaleUploadReport};
pub use parts::PartsStored;
pub use progress::{Progress, ProgressFn};
pub use resume::ResumeOutcome;
pub use retry::{RetryBudgetConfig, RetryStats};
pub use retrying_store::RetryingStore;
pub use settings::{defaults, size_in, ChecksumSetting, EngineSettings, MAX_SETTING};
pub use source::UploadSource;
pub use tuning::TuningConfig;
pub use units::{format_size, parse_size};
pub use upload::{Aborted, UploadOutcome, UploadRequest};

/// The transfer engine for one store. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<EngineInner>,
}

pub(crate) struct EngineInner {
    store: Arc<dyn ObjectStore>,
    config: EngineConfig,
    budget: MemoryBudget,
    stats: RetryStats,
    retry_budget: retry::RetryBudget,
    limits: adaptive::AdaptiveLimits,
    /// The limit on transfers in flight (`EngineConfig::tuning`).
    tuner: Arc<tuning::Tuner>,
    /// The cap on store requests in flight in all (`EngineConfig::store_concurrency`).
    store_slots: Option<tokio::sync::Semaphore>,
    /// Work that outlives the caller that started it: aborts of dropped
    /// uploads, clean-ups after lost answers, completions (see `ending`).
    background: TaskTracker,
    /// One request ending a multipart upload at a time, per upload.
    endings: ending::EndingLocks,
    /// Refuses store requests while the store is down (`EngineConfig::breaker`).
    breaker: Option<Arc<Breaker>>,
    /// Cancelled when the process stops: aborts waiting for the store give up.
    stopping: tokio_util::sync::CancellationToken,
    /// The engine itself, for background clean-ups started from `&self`.
    myself: std::sync::Weak<EngineInner>,
    /// Hears of every object made for an upload with an origin (see `announce`).
    announcer: std::sync::OnceLock<Arc<dyn Announcer>>,
    /// Whether downloads' chunk writes run on the worker or hand it over.
    writes_pace: disk_pace::DiskPace,
    /// Whether small downloaded files are made where their job runs or on
    /// the blocking pool.
    small_files_pace: disk_pace::DiskPace,
    /// Whether files to upload are stat'ed, and small ones read, where their
    /// job runs or on the blocking pool (a pace of its own: the disk read
    /// from need not be the one written to).
    small_reads_pace: disk_pace::DiskPace,
}

impl Engine {
    /// An engine with a memory budget of its own (`config.memory_limit`).
    pub fn new(store: Arc<dyn ObjectStore>, config: EngineConfig) -> Result<Engine, ConfigError> {
        let budget = MemoryBudget::new(config.memory_limit);
        Engine::with_budget(store, config, budget)
    }

    /// An engine drawing on a budget shared with other engines of the process.
    pub fn with_budget(
        store: Arc<dyn ObjectStore>,
        config: EngineConfig,
        budget: MemoryBudget,
    ) -> Result<Engine, ConfigError> {
        config.validate()?;
        let retry_budget = retry::RetryBudget::new(config.retry_budget);
        let limits = adaptive::AdaptiveLimits::new(config.adaptive);
        let store_slots = config.store_concurrency.map(tokio::sync::Semaphore::new);
        let breaker = config
            .breaker
            .map(|breaker| Breaker::new(breaker, store.clone()));
        Ok(Engine {
            inner: Arc::new_cyclic(|myself| EngineInner {
                myself: myself.clone(),
                tuner: tuning::Tuner::new(config.tuning),
                store_slots,
                store,
                config,
                budget,
                stats: RetryStats::default(),
                retry_budget,
                limits,
                background: TaskTracker::new(),
                endings: ending::EndingLocks::new(),
                breaker,
                stopping: tokio_util::sync::CancellationToken::new(),
                announcer: std::sync::OnceLock::new(),
                writes_pace: disk_pace::DiskPace::for_writes(),
                small_files_pace: disk_pace::DiskPace::for_small_files(),
                small_reads_pace: disk_pace::DiskPace::for_small_files(),
            }),
        })
    }

    /// Sets the one announcer of the objects this engine (and every clone of
    /// it) makes for uploads with an origin; at start-up, once. False when one
    /// was set already.
    pub fn set_announcer(&self, announcer: Arc<dyn Announcer>) -> bool {
        self.inner.announcer.set(announcer).is_ok()
    }

    /// The announcer set with [`Engine::set_announcer`], for objects that
    /// come into being outside an upload (a table's file, once committed).
    pub fn announcer(&self) -> Option<&Arc<dyn Announcer>> {
        self.inner.announcer.get()
    }

    /// Announces an object found made by an earlier request or process
    /// (`making` says how), whose intent was written before it was made:
    /// see [`Announcer::found`].
    pub async fn announce_found(&self, origin: &Origin, outcome: &UploadOutcome, making: Making) {
        let Some(announcer) = self.inner.announcer.get() else {
            return;
        };
        let intent = Intent::new(origin, &outcome.key, outcome.size, outcome.checksum, making);
        announcer.found(&intent, outcome).await;
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    pub fn budget(&self) -> &MemoryBudget {
        &self.inner.budget
    }

    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.inner.store
    }

    /// The store's circuit breaker, when the configuration has one.
    pub fn breaker(&self) -> Option<&Arc<Breaker>> {
        self.inner.breaker.as_ref()
    }

    pub fn stats(&self) -> &RetryStats {
        &self.inner.stats
    }

    /// Tokens left in the retry budget.
    pub fn retry_budget_available(&self) -> u32 {
        self.inner.retry_budget.available()
    }

    /// The adaptive concurrency limit of every prefix the engine is tracking
    /// (those with requests in flight or a limit below the maximum).
    pub fn prefix_limits(&self) -> Vec<PrefixLimit> {
        self.inner.limits.snapshot()
    }

    /// Transfers (parts, single PUTs, ranged GETs) allowed in flight now;
    /// `None` when `EngineConfig::tuning` sets no limit.
    pub fn transfer_limit(&self) -> Option<usize> {
        self.inner.tuner.limit()
    }

    /// Runs `work` in the background, tracked with the work that outlived its
    /// callers ([`Engine::finish_background`] waits for it).
    pub fn spawn_background<F>(&self, work: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                self.inner.background.spawn_on(work, &handle);
            }
            Err(_) => tracing::error!("background work dropped outside a runtime"),
        }
    }

    /// Waits until the store answers again: at once unless its breaker is open,
    /// else until a probe found it and one `Retry-After` more. False when the
    /// engine stops first ([`Engine::finish_background`]).
    pub async fn store_answers(&self) -> bool {
        let Some(breaker) = self.inner.breaker.clone() else {
            return !self.inner.stopping.is_cancelled();
        };
        if !breaker.is_open() {
            return !self.inner.stopping.is_cancelled();
        }
        self.inner.store_back(&breaker).await
    }

    /// Waits for the work that outlived its callers to finish (aborts of dropped
    /// uploads, completions whose callers went away); call before exiting.
    pub async fn finish_background(&self) {
        self.inner.stopping.cancel();
        self.inner.background.close();
        self.inner.background.wait().await;
        self.inner.background.reopen();
    }
}

impl EngineInner {
    /// Waits until `breaker` is closed and one `Retry-After` more; false when
    /// the engine stops first.
    pub(crate) async fn store_back(&self, breaker: &Breaker) -> bool {
        let back = async {
            breaker.wait_closed().await;
            tokio::time::sleep(breaker.retry_after()).await;
        };
        tokio::select! {
            _ = back => true,
            _ = self.stopping.cancelled() => false,
        }
    }
}
