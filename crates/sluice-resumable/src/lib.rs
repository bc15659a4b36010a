//! sluice-resumable owns the state of resumable uploads, on `ObjectStore` and the
//! transfer engine, and nothing of HTTP: each upload's record in the store
//! ([`record`]), one writer at a time through a leased lock made of conditional
//! writes ([`lock`]), creation and chunk writes that move the bytes through the
//! engine ([`write`]; one request's body planned, stored and committed in
//! `chunk`), progress recorded while a long request still sends
//! (`checkpoint`), what a dead writer left unrecorded (`strays`), concatenation ([`concat`]), and the expiry sweep and
//! janitor pass ([`sweep`], [`janitor`]). Nothing is kept on local disk or in
//! memory between requests, so any gateway instance serves any request.
//!
//! The protocol's rules (what a PATCH may carry, headers) come from `sluice-tus`;
//! the gateway parses requests with it, calls [`Resumable`], and turns a
//! [`Written::finished`] upload into its completion record.

mod checkpoint;
mod chunk;
pub mod clock;
pub mod concat;
pub mod digest;
mod error;
pub mod janitor;
pub mod lock;
pub mod record;
mod strays;
pub mod sweep;
pub mod write;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sluice_store::{limits, ObjectStore};
use sluice_upload::Engine;

pub use clock::{Clock, SystemClock, TokioClock};
pub use digest::{DigestAlgorithm, Digesting, WantedDigest};
pub use error::ResumableError;
pub use lock::{LockError, LockHints, UploadLock};
pub use record::{new_id, valid_id, Phase, Protocol, UploadRecord, STATE_PREFIX};
pub use write::{Chunk, NewUpload, Superseded, Written};

use record::Loaded;

/// How resumable uploads behave. It has no defaults of its own: the gateway
/// builds it from its settings' definitions (`ServerConfig::resumable_config`,
/// docs/CONFIG.md), and so does every command that sweeps uploads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumableConfig {
    /// An unfinished upload idle this long expires.
    pub expiry: Duration,
    /// A writer's lock lapses this long after its last renewal (renewed every third of it).
    pub lock_lease: Duration,
    /// Largest upload accepted.
    pub max_size: u64,
    /// Where parts are cut (at least S3's 5 MiB minimum).
    pub part_size: u64,
    /// Uploads sent whole with their creation at or under this size are one PUT.
    pub threshold: u64,
    /// Most partial uploads one concatenation may join.
    pub max_partials: usize,
}

/// Resumable uploads on one engine (and its store). Cheap to clone.
#[derive(Clone)]
pub struct Resumable {
    engine: Engine,
    store: Arc<dyn ObjectStore>,
    records: record::RecordStore,
    lock_hints: Arc<LockHints>,
    config: Arc<ResumableConfig>,
    /// Expiry and lock leases are measured on it.
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Resumable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumable")
            .field("store", &self.store)
            .field("config", &self.config)
            .finish()
    }
}

impl Resumable {
    /// State is read and written through the engine's store, with its retries.
    /// Uploads are limited to what parts one upload may hold in memory can make
    /// (the engine's memory share × 10,000), whatever `config.max_size` says.
    pub fn new(engine: Engine, mut config: ResumableConfig) -> Resumable {
        let largest_part = engine.upload_share().capacity() & !((1 << 20) - 1);
        config.max_size = config
            .max_size
            .min(largest_part.saturating_mul(limits::MAX_PARTS as u64));
        let store: Arc<dyn ObjectStore> = Arc::new(engine.retrying_store());
        Resumable {
            records: record::RecordStore::new(store.clone()),
            store,
            engine,
            lock_hints: Arc::default(),
            config: Arc::new(config),
            clock: Arc::new(SystemClock),
        }
    }

    /// The same uploads, measured on `clock` (tests: a [`TokioClock`] on
    /// paused time).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Resumable {
        self.clock = clock;
        self
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn config(&self) -> &ResumableConfig {
        &self.config
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Parts big enough for a known length to fit in 10,000 (a deferred length
    /// gets the configured size: 10,000 of them is the limit then).
    pub fn part_size(&self, length: Option<u64>) -> u64 {
        let needed = length.map_or(0, |l| l.div_ceil(limits::MAX_PARTS as u64));
        self.config.part_size.max(needed).max(limits::MIN_PART_SIZE)
    }

    /// The record of upload `id`, as HEAD reports it: 404 for ids that are not
    /// uploads, 410 once an unfinished upload expired. Never changes anything.
    pub async fn status(&self, id: &str) -> Result<UploadRecord, ResumableError> {
        let loaded = self.records.load(id).await?;
        if loaded.record.upload.is_expired(self.clock.now()) || loaded.record.is_invalid() {
            return Err(sluice_tus::TusError::Gone.into());
        }
        Ok(loaded.record)
    }

    /// Runs `work` holding upload `id`'s lock, renewing its lease meanwhile. The id
    /// is checked before any lock object is written; when another request holds
    /// the lock or it is lost midway, [`ResumableError::Locked`]. Dropping the
    /// returned future releases the lock at once.
    pub(crate) async fn locked<T>(
        &self,
        id: &str,
        work: impl Future<Output = Result<T, ResumableError>>,
    ) -> Result<T, ResumableError> {
        self.locked_with(id, Contention::Refuse, |_| work).await
    }

    /// How long a request that ends an older one waits for it to let go: a
    /// lease (a dead holder's lock lapses by then) and a second.
    fn patience(&self) -> Duration {
        self.config.lock_lease + Duration::from_secs(1)
    }

    /// The record of upload `id` once no request is writing to it: a request
    /// still writing is asked to let go and commit first (the draft's rule for
    /// offset retrieval, so the offset answered is the one the next append
    /// must name). After [`Self::patience`], the record as it is.
    pub async fn settled_status(&self, id: &str) -> Result<UploadRecord, ResumableError> {
        if !valid_id(id) {
            return Err(ResumableError::not_found());
        }
        let settled = UploadLock::settle(
            self.store.clone(),
            self.lock_hints.clone(),
            id,
            self.clock.clone(),
            self.patience(),
        )
        .await
        .map_err(lock_error)?;
        if !settled {
            tracing::info!(
                upload_id = id,
                "an older request did not let go in time; answering the offset stored"
            );
        }
        self.status(id).await
    }

    /// [`Self::locked`], handing `work` the record as this process last wrote
    /// it when the lock proves nobody wrote it since (see [`Held`]).
    pub(crate) async fn locked_with<T, F>(
        &self,
        id: &str,
        contention: Contention,
        work: impl FnOnce(Held) -> F,
    ) -> Result<T, ResumableError>
    where
        F: Future<Output = Result<T, ResumableError>>,
    {
        if !valid_id(id) {
            return Err(ResumableError::not_found());
        }
        let (store, hints, lease, clock) = (
            self.store.clone(),
            self.lock_hints.clone(),
            self.config.lock_lease,
            self.clock.clone(),
        );
        let mut lock = match contention {
            Contention::Refuse => UploadLock::acquire(store, hints, id, lease, clock).await,
            Contention::TakeOver => {
                UploadLock::acquire_taking_over(store, hints, id, lease, clock, self.patience())
                    .await
            }
        }
        .map_err(lock_error)?;
        // Taken out whatever happens: this tenure may change the record.
        let written = self.records.written_here(id);
        let held = Held {
            record: written.filter(|_| lock.hinted()),
            let_go: lock.let_go(),
            holder_died: lock.follows_a_lapsed_lease(),
        };
        let result = tokio::select! {
            result = work(held) => result,
            lost = lock.keep_alive() => {
                tracing::warn!(upload_id = id, error = %lost, "upload lock lost mid-request; the request was stopped");
                return Err(lock_error(lost));
            }
        };
        lock.release().await;
        result
    }

    /// Removes upload `id`: its multipart upload, its object when finished (tus's
    /// termination frees the uploaded data), and every state object.
    /// `before_removal` runs first, under the lock, with the record as it is
    /// (the gateway records the upload's termination there: when that fails,
    /// nothing is removed and the client's retry finds the upload still there).
    pub async fn terminate<F>(
        &self,
        id: &str,
        before_removal: impl FnOnce(UploadRecord) -> F,
    ) -> Result<UploadRecord, ResumableError>
    where
        F: Future<Output = Result<(), sluice_store::StoreError>>,
    {
        self.locked(id, async {
            let loaded = self.records.load(id).await?;
            before_removal(loaded.record.clone()).await?;
            self.remove(&loaded.record).await?;
            tracing::info!(upload_id = %id, key = %loaded.record.key, "upload terminated");
            Ok(loaded.record)
        })
        .await
    }

    /// Ends upload `id` as the IETF draft cancels one, ending a request still
    /// writing it first: an unfinished upload's multipart upload and state are
    /// removed; a finished upload's state only (the draft's cancellation ends
    /// the upload, not the object it made, which `DELETE /v1/objects` removes).
    /// `before_removal` as for [`Self::terminate`].
    pub async fn cancel<F>(
        &self,
        id: &str,
        before_removal: impl FnOnce(UploadRecord) -> F,
    ) -> Result<UploadRecord, ResumableError>
    where
        F: Future<Output = Result<(), sluice_store::StoreError>>,
    {
        self.locked_with(id, Contention::TakeOver, |_| async {
            let loaded = self.records.load(id).await?;
            before_removal(loaded.record.clone()).await?;
            match loaded.record.phase {
                Phase::Finished(_) => self.records.delete_all(id).await?,
                _ => self.remove(&loaded.record).await?,
            }
            tracing::info!(upload_id = %id, key = %loaded.record.key, "upload cancelled");
            Ok(loaded.record)
        })
        .await
    }

    async fn remove(&self, record: &UploadRecord) -> Result<(), ResumableError> {
        match &record.phase {
            Phase::Receiving(receiving) => {
                if let Some(upload_id) = &receiving.multipart_id {
                    self.engine
                        .abort_multipart(&record.key, upload_id)
                        .await
                        .map_err(ResumableError::Transfer)?;
                }
            }
            Phase::Finished(_) => self.store.delete_object(&record.key).await?,
            Phase::Created | Phase::Invalid => {}
        }
        self.abort_strays(record).await;
        self.records.delete_all(record.id()).await?;
        Ok(())
    }
}

/// What a request does when another holds the upload it wants.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contention {
    /// It is refused at once ([`ResumableError::Locked`]): tus's way.
    Refuse,
    /// It ends the older request and goes on once that one committed: the
    /// IETF draft's way (see [`lock`]).
    TakeOver,
}

impl Contention {
    /// The way of `protocol`.
    pub fn of(protocol: Protocol) -> Contention {
        match protocol {
            Protocol::Tus => Contention::Refuse,
            Protocol::IetfDraft => Contention::TakeOver,
        }
    }
}

/// What a lock holder knows on taking the lock.
#[derive(Debug)]
pub(crate) struct Held {
    /// The record (with its ETag) as this process last wrote it, when the lock
    /// was taken with this process's own hint: then nobody has held the lock,
    /// and so nobody has written the record, since. Reading it again would
    /// cost a store request per PATCH for nothing.
    pub record: Option<Loaded>,
    /// Set when a newer request asks this one to let go (see [`Contention`]).
    pub let_go: tokio::sync::watch::Receiver<bool>,
    /// The lock's last holder never released it (see `strays`).
    pub holder_died: bool,
}

fn lock_error(error: LockError) -> ResumableError {
    match error {
        LockError::Held { retry_after } => ResumableError::Locked { retry_after },
        LockError::Store(e) => ResumableError::Store(e),
    }
}
