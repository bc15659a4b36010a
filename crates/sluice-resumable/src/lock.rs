//! One writer per upload at a time, across gateway instances, built on the store's
//! conditional writes alone. The lock is an object (`_sluice/tus/{id}/lock`)
//! naming its holder and when its lease ends. It is taken with If-None-Match when
//! absent, or with If-Match on the ETag read when its lease has ended; renewed
//! with If-Match on the holder's own ETag while its request runs; and released by
//! writing an ended lease, again with If-Match on the holder's ETag, so a release
//! can never undo the next holder's lock. A holder dropped midway (client gone,
//! shutdown) releases at once from `Drop`. A release that meets a passing fault
//! (throttling, the store counted as down) is tried again in the background
//! until it lands or the lease has ended by itself; a crashed gateway's lock
//! lapses when its lease ends.
//!
//! A request that may end an older one (the IETF draft's rule: a new request
//! on an upload ends the one still running, rather than wait for it) takes
//! the lock with [`UploadLock::acquire_taking_over`]: it asks the holder to
//! let go and takes the lock as soon as it does, within a bounded time. A
//! holder in this process is told at once; one in another gateway finds the
//! request in the lock object (`let_go_asked`, written with If-Match, so its
//! next renewal fails and it reads why) at its next renewal, a third of a
//! lease later. Either way the holder's work sees [`UploadLock::let_go`],
//! stops reading its body, commits what came and releases. A holder that
//! died lets go when its lease ends.
//!
//! [`LockHints`] remember what this process last knew of each lock object (absent
//! for an upload it just created, or the ETag of the ended lease it wrote), so a
//! request that follows another on the same gateway takes the lock with one
//! conditional write instead of a read and a write. A stale hint only fails that
//! write, and the lock is then read as without a hint.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_store::{Body, ObjectStore, PutRequest, StoreError, WriteCondition};

use crate::clock::{ms_after, Clock};
use crate::record::STATE_PREFIX;

fn lock_key(id: &str) -> String {
    format!("{STATE_PREFIX}{id}/lock")
}

#[derive(Debug, Serialize, Deserialize)]
struct LockBody {
    holder: String,
    /// When the lease ends, in milliseconds since the Unix epoch (0: released).
    until_ms: u64,
    /// On an ended lease, the holder that ended it. Stores whose ETag is the
    /// MD5 of the content (S3, MinIO) would otherwise give every ended lease
    /// the same ETag, and a hint would match after other gateways had held
    /// and released the lock in between.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    ended_by: String,
    /// A newer request asks the holder to let go.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    let_go_asked: bool,
}

/// What this process last knew of upload locks, by lock key. Bounded: when full,
/// it forgets everything (a forgotten hint costs one read).
#[derive(Debug, Default)]
pub struct LockHints {
    known: Mutex<HashMap<String, Known>>,
    /// The locks held in this process, by lock key: the holder and how to
    /// ask it to let go.
    held: Mutex<HashMap<String, (String, LetGo)>>,
}

/// How a holder is asked to let go: a flag its work watches.
pub type LetGo = Arc<tokio::sync::watch::Sender<bool>>;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Known {
    /// No lock object exists: the upload was created here and never locked.
    Absent,
    /// The lock object is the ended lease with this ETag.
    Ended(String),
}

impl LockHints {
    /// Most hints kept (each about a hundred bytes).
    const CAPACITY: usize = 4096;

    /// Upload `id` was just created here: it has no lock object yet.
    pub fn created(&self, id: &str) {
        self.remember(lock_key(id), Known::Absent);
    }

    fn remember(&self, key: String, known: Known) {
        let mut map = self.known.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= Self::CAPACITY && !map.contains_key(&key) {
            map.clear();
        }
        map.insert(key, known);
    }

    fn hold(&self, key: &str, holder: &str, let_go: LetGo) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.insert(key.to_owned(), (holder.to_owned(), let_go));
    }

    fn unhold(&self, key: &str, holder: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.get(key).is_some_and(|(h, _)| h == holder) {
            held.remove(key);
        }
    }

    /// Asks the holder of `key` in this process, if any, to let go.
    fn ask_local(&self, key: &str) -> bool {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match held.get(key) {
            Some((_, let_go)) => {
                let_go.send_replace(true);
                true
            }
            None => false,
        }
    }

    /// The hint for `key`, forgotten as it is used: whatever happens next makes it stale.
    fn take(&self, key: &str) -> Option<Known> {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key)
    }
}

/// Why the lock was not had.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another request holds it; its lease ends in about `retry_after`.
    #[error("another request holds the upload")]
    Held { retry_after: Duration },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A held lock. Release it with [`UploadLock::release`]; dropped unreleased, it is
/// released in the background.
#[derive(Debug)]
pub struct UploadLock {
    store: Arc<dyn ObjectStore>,
    hints: Arc<LockHints>,
    key: String,
    holder: String,
    etag: String,
    lease: Duration,
    released: bool,
    /// Taken with this process's hint (see [`UploadLock::hinted`]).
    hinted: bool,
    /// Taken from a lease that ran out (see [`UploadLock::follows_a_lapsed_lease`]).
    lapsed: bool,
    /// What lease ends are measured on.
    clock: Arc<dyn Clock>,
    /// Set when a newer request asks this holder to let go.
    let_go: LetGo,
}

impl UploadLock {
    /// Takes the lock of upload `id` (a valid id: the caller checks), or fails at
    /// once with [`LockError::Held`].
    pub async fn acquire(
        store: Arc<dyn ObjectStore>,
        hints: Arc<LockHints>,
        id: &str,
        lease: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<UploadLock, LockError> {
        let key = lock_key(id);
        let holder = uuid::Uuid::new_v4().simple().to_string();
        let taken = |etag: String,
                     store: Arc<dyn ObjectStore>,
                     key: String,
                     holder: String,
                     hinted: bool,
                     lapsed: bool| {
            let let_go: LetGo = Arc::new(tokio::sync::watch::channel(false).0);
            hints.hold(&key, &holder, let_go.clone());
            UploadLock {
                store,
                hints: hints.clone(),
                key,
                holder,
                etag,
                lease,
                released: false,
                hinted,
                lapsed,
                clock: clock.clone(),
                let_go,
            }
        };
        if let Some(known) = hints.take(&key) {
            let condition = match known {
                Known::Absent => WriteCondition::IfNoneMatch,
                Known::Ended(etag) => WriteCondition::IfMatch(etag),
            };
            match put(
                &store,
                &key,
                &holder,
                ms_after(clock.as_ref(), lease),
                condition,
            )
            .await
            {
                Ok(etag) => {
                    tracing::debug!(upload_id = id, hinted = true, "upload lock taken");
                    return Ok(taken(etag, store, key, holder, true, false));
                }
                // The hint was stale: read the lock as without one.
                Err(StoreError::PreconditionFailed) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        // Two rounds: another request may create the lock between our read and our write.
        for _ in 0..2 {
            // A lease that ended by itself (an ended one says 0): its holder
            // never released it.
            let (condition, lapsed) = match read(&store, &key).await {
                Err(e) if e.is_not_found() => (WriteCondition::IfNoneMatch, false),
                Err(e) => return Err(e.into()),
                Ok((body, etag)) => {
                    let until = body.as_ref().map_or(0, |b| b.until_ms);
                    let now = clock.now_ms();
                    if until > now {
                        return Err(LockError::Held {
                            retry_after: Duration::from_millis(until - now),
                        });
                    }
                    (WriteCondition::IfMatch(etag), until > 0)
                }
            };
            let took_over = matches!(condition, WriteCondition::IfMatch(_));
            match put(
                &store,
                &key,
                &holder,
                ms_after(clock.as_ref(), lease),
                condition,
            )
            .await
            {
                Ok(etag) => {
                    tracing::debug!(upload_id = id, took_over, lapsed, "upload lock taken");
                    return Ok(taken(etag, store, key, holder, false, lapsed));
                }
                Err(StoreError::PreconditionFailed) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(LockError::Held {
            retry_after: Duration::from_secs(1),
        })
    }

    /// Takes the lock of upload `id`, asking a holder to let go (see the module
    /// documentation) and waiting up to `patience` for it to do so; then
    /// [`LockError::Held`].
    pub async fn acquire_taking_over(
        store: Arc<dyn ObjectStore>,
        hints: Arc<LockHints>,
        id: &str,
        lease: Duration,
        clock: Arc<dyn Clock>,
        patience: Duration,
    ) -> Result<UploadLock, LockError> {
        let deadline = tokio::time::Instant::now() + patience;
        let mut pause = TAKEOVER_POLL_FIRST;
        loop {
            let attempt =
                UploadLock::acquire(store.clone(), hints.clone(), id, lease, clock.clone()).await;
            let retry_after = match attempt {
                Err(LockError::Held { retry_after }) => retry_after,
                other => return other,
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(LockError::Held { retry_after });
            }
            // Asked each round: the holder may have changed (another newer
            // request took the lock first); a holder already asked is not
            // written to again.
            let asked = ask_to_let_go(&store, &hints, &lock_key(id), clock.as_ref()).await?;
            tracing::debug!(upload_id = id, asked, "asked the upload's holder to let go");
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(TAKEOVER_POLL_MOST);
        }
    }

    /// Waits until upload `id`'s lock is free (asking a holder to let go, as
    /// [`Self::acquire_taking_over`] does), for up to `patience`; whether it is.
    /// Takes nothing: an answer that only reads (the draft's offset) then
    /// reports what the holder committed.
    pub async fn settle(
        store: Arc<dyn ObjectStore>,
        hints: Arc<LockHints>,
        id: &str,
        clock: Arc<dyn Clock>,
        patience: Duration,
    ) -> Result<bool, LockError> {
        let key = lock_key(id);
        let deadline = tokio::time::Instant::now() + patience;
        let mut pause = TAKEOVER_POLL_FIRST;
        loop {
            let held = match read(&store, &key).await {
                Err(e) if e.is_not_found() => false,
                Err(e) => return Err(e.into()),
                Ok((body, _)) => body.is_some_and(|b| b.until_ms > clock.now_ms()),
            };
            let now = tokio::time::Instant::now();
            if !held {
                return Ok(true);
            }
            if now >= deadline {
                return Ok(false);
            }
            ask_to_let_go(&store, &hints, &key, clock.as_ref()).await?;
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(TAKEOVER_POLL_MOST);
        }
    }

    /// Set once a newer request asks this holder to let go: the work it
    /// protects should stop taking bytes, commit and end.
    pub fn let_go(&self) -> tokio::sync::watch::Receiver<bool> {
        self.let_go.subscribe()
    }

    /// Whether the lock was taken with this process's hint: the lock object was
    /// still what this process left (absent after creating the upload, or the
    /// ended lease it wrote), so nobody has held the lock since.
    pub fn hinted(&self) -> bool {
        self.hinted
    }

    /// Whether the lock was taken from a lease that ran out rather than one
    /// its holder ended: that holder died (a killed gateway, a lost machine)
    /// or lost the store mid-request, and may have left work half-done in
    /// the store that no record names.
    pub fn follows_a_lapsed_lease(&self) -> bool {
        self.lapsed
    }

    /// Keeps the lease renewed; returns only when a renewal fails, or is not
    /// confirmed before the lease it renews would end (the lock was taken over,
    /// or may be: the store is slow or unreachable), so run it beside the work it
    /// protects and stop the work when it returns.
    pub async fn keep_alive(&mut self) -> LockError {
        let mut confirmed = tokio::time::Instant::now();
        let mut renew_now = false;
        loop {
            if !renew_now {
                tokio::time::sleep(self.lease / 3).await;
            }
            renew_now = false;
            // With a margin for clocks that differ between gateways.
            let deadline = confirmed + self.lease.mul_f64(0.8);
            let sent = tokio::time::Instant::now();
            let renewal = put(
                &self.store,
                &self.key,
                &self.holder,
                ms_after(self.clock.as_ref(), self.lease),
                WriteCondition::IfMatch(self.etag.clone()),
            );
            match tokio::time::timeout_at(deadline, renewal).await {
                Ok(Ok(etag)) => {
                    self.etag = etag;
                    confirmed = sent;
                }
                // Still ours, with a newer request asking for it: the work is
                // told to let go, and the lease kept while it commits.
                Ok(Err(StoreError::PreconditionFailed)) => match read(&self.store, &self.key).await
                {
                    Ok((Some(body), etag)) if body.holder == self.holder => {
                        if body.let_go_asked {
                            tracing::debug!(key = %self.key, "a newer request asks this one to let go");
                            self.let_go.send_replace(true);
                        }
                        self.etag = etag;
                        renew_now = true;
                    }
                    // A passing fault while reading why: tried again on the
                    // next round, until the lease would have ended.
                    Err(e) if e.is_transient() => {}
                    _ => {
                        return LockError::Held {
                            retry_after: self.lease,
                        }
                    }
                },
                Err(_) => {
                    return LockError::Held {
                        retry_after: self.lease,
                    }
                }
                Ok(Err(e)) => return LockError::Store(e),
            }
        }
    }

    /// Gives the lock up (its lease ends now). A release that meets a passing
    /// fault (throttling, the store counted as down) goes on in the background,
    /// so the request's answer does not wait for the store to recover.
    ///
    /// The release runs in a task of its own, so a request dropped while
    /// it waits (client gone, shutdown) does not leave the lock held.
    pub async fn release(mut self) {
        self.released = true;
        self.hints.unhold(&self.key, &self.holder);
        let (first_done, first) = tokio::sync::oneshot::channel();
        tokio::spawn(self.take_release().until_done(Some(first_done)));
        let _ = first.await;
    }

    /// The release of this lock, taking what it needs from the holder.
    fn take_release(&mut self) -> Release {
        Release {
            store: self.store.clone(),
            hints: self.hints.clone(),
            key: std::mem::take(&mut self.key),
            holder: std::mem::take(&mut self.holder),
            etag: std::mem::take(&mut self.etag),
            // The lease ends by itself at most this long after its last renewal.
            moot_at: tokio::time::Instant::now() + self.lease,
        }
    }
}

impl Drop for UploadLock {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.hints.unhold(&self.key, &self.holder);
        let release = self.take_release();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(release.until_done(None));
            }
            Err(_) => tracing::warn!("an upload lock dropped outside a runtime lapses by itself"),
        }
    }
}

/// The pause before a release is tried again after a passing fault, doubling
/// up to [`RELEASE_PAUSE_MOST`].
const RELEASE_PAUSE_FIRST: Duration = Duration::from_millis(100);
const RELEASE_PAUSE_MOST: Duration = Duration::from_secs(1);

/// Ending the lease of the lock at `key` if `holder` still holds it.
struct Release {
    store: Arc<dyn ObjectStore>,
    hints: Arc<LockHints>,
    key: String,
    holder: String,
    /// The lock's ETag as last seen.
    etag: String,
    /// When the lease will have ended by itself: trying after that is pointless.
    moot_at: tokio::time::Instant,
}

impl Release {
    /// One attempt: the ended lease is written with If-Match on the ETag last
    /// seen. When that ETag is stale (a renewal whose answer never arrived
    /// landed anyway), the lock is read again: still ours, it is released on
    /// the ETag read; another holder's, it is left alone. The ended lease's
    /// ETag becomes the hint for the next holder here. Fails only with a fault
    /// worth trying again; any other is logged (the lease ends by itself).
    async fn attempt(&mut self) -> Result<(), StoreError> {
        let ended = LockBody {
            holder: String::new(),
            until_ms: 0,
            ended_by: self.holder.clone(),
            let_go_asked: false,
        };
        let json: bytes::Bytes = serde_json::to_vec(&ended)
            .expect("a lock body serialises")
            .into();
        for _ in 0..2 {
            let mut request = PutRequest::new(self.key.clone(), Body::Bytes(json.clone()));
            request.condition = Some(WriteCondition::IfMatch(self.etag.clone()));
            match self.store.put_object(request).await {
                Ok(output) => {
                    self.hints
                        .remember(self.key.clone(), Known::Ended(output.etag));
                    return Ok(());
                }
                // Deleted with the upload's state: nothing left to release.
                Err(e) if e.is_not_found() => return Ok(()),
                Err(StoreError::PreconditionFailed) => match read(&self.store, &self.key).await {
                    Ok((Some(body), current)) if body.holder == self.holder => self.etag = current,
                    Err(e) if e.is_transient() => return Err(e),
                    // Taken over, released or gone: not ours to release.
                    _ => return Ok(()),
                },
                Err(e) if e.is_transient() => return Err(e),
                Err(error) => {
                    tracing::warn!(key = %self.key, error = %sluice_store::error_chain(&error), "could not release an upload lock; its lease ends by itself");
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Attempts until one lands, or the lease has ended by itself; tells
    /// `first_done` when the first attempt is over (landed or not), so a
    /// caller waits for no more than that.
    async fn until_done(mut self, first_done: Option<tokio::sync::oneshot::Sender<()>>) {
        let first = self.attempt().await;
        if let Some(first_done) = first_done {
            let _ = first_done.send(());
        }
        if let Err(error) = first {
            self.retry(error).await;
        }
    }

    async fn retry(mut self, mut error: StoreError) {
        let mut pause = RELEASE_PAUSE_FIRST;
        loop {
            // A wait the store asked for (throttling, the breaker) is kept.
            let wait = error.retry_after().map_or(pause, |asked| asked.max(pause));
            let next = tokio::time::Instant::now() + wait;
            if next >= self.moot_at {
                tracing::warn!(key = %self.key, error = %sluice_store::error_chain(&error), "could not release an upload lock; its lease ends by itself");
                return;
            }
            tracing::debug!(key = %self.key, error = %sluice_store::error_chain(&error), ?wait, "upload lock release failed; trying again");
            tokio::time::sleep_until(next).await;
            match self.attempt().await {
                Ok(()) => return,
                Err(e) => error = e,
            }
            pause = (pause * 2).min(RELEASE_PAUSE_MOST);
        }
    }
}

/// How often a request waiting for a holder to let go looks at the lock:
/// after 50 ms, doubling up to 400 ms (a wait of the whole patience, 7 s by
/// default, costs about twenty reads).
const TAKEOVER_POLL_FIRST: Duration = Duration::from_millis(50);
const TAKEOVER_POLL_MOST: Duration = Duration::from_millis(400);

/// Asks the holder of the lock at `key` to let go: at once when it is in this
/// process, else through the lock object (If-Match, so a renewal in between
/// only makes the caller ask again). Whether the holder was asked.
async fn ask_to_let_go(
    store: &Arc<dyn ObjectStore>,
    hints: &LockHints,
    key: &str,
    clock: &dyn Clock,
) -> Result<bool, StoreError> {
    if hints.ask_local(key) {
        return Ok(true);
    }
    let (body, etag) = match read(store, key).await {
        Ok(read) => read,
        Err(e) if e.is_not_found() => return Ok(false),
        Err(e) => return Err(e),
    };
    let Some(mut body) = body.filter(|b| b.until_ms > clock.now_ms()) else {
        return Ok(false);
    };
    if body.let_go_asked {
        return Ok(true);
    }
    body.let_go_asked = true;
    let json = serde_json::to_vec(&body).expect("a lock body serialises");
    let mut request = PutRequest::new(key, Body::Bytes(json.into()));
    request.condition = Some(WriteCondition::IfMatch(etag));
    match store.put_object(request).await {
        Ok(_) => Ok(true),
        Err(StoreError::PreconditionFailed) => Ok(false),
        Err(e) => Err(e),
    }
}

async fn put(
    store: &Arc<dyn ObjectStore>,
    key: &str,
    holder: &str,
    until_ms: u64,
    condition: WriteCondition,
) -> Result<String, StoreError> {
    let body = LockBody {
        holder: holder.to_owned(),
        until_ms,
        ended_by: String::new(),
        let_go_asked: false,
    };
    let json = serde_json::to_vec(&body).expect("a lock body serialises");
    let mut request = PutRequest::new(key, Body::Bytes(json.into()));
    request.condition = Some(condition);
    store.put_object(request).await.map(|output| output.etag)
}

/// The lock's body (None when unreadable: treated as ended) and ETag.
async fn read(
    store: &Arc<dyn ObjectStore>,
    key: &str,
) -> Result<(Option<LockBody>, String), StoreError> {
    let (bytes, etag) = crate::record::read_object(store.as_ref(), key).await?;
    Ok((serde_json::from_slice(&bytes).ok(), etag))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_testkit::MemoryStore;

    fn store() -> Arc<dyn ObjectStore> {
        Arc::new(MemoryStore::new())
    }

    /// One test's wall clock, on tokio's paused time: sleeps take no real time.
    fn clock() -> Arc<dyn Clock> {
        Arc::new(crate::clock::TokioClock::now_on_tokio())
    }

    const ID: &str = "0123456789abcdef0123456789abcdef";

    /// A gateway that knows nothing of the lock yet.
    fn unhinted() -> Arc<LockHints> {
        Arc::new(LockHints::default())
    }

    /// Lock requests of each kind the store saw: (reads, writes).
    fn requests(store: &MemoryStore) -> (u64, u64) {
        (store.calls("get"), store.calls("put"))
    }
    const LONG: Duration = Duration::from_secs(30);

    fn held(result: Result<UploadLock, LockError>) -> Duration {
        match result {
            Err(LockError::Held { retry_after }) => retry_after,
            other => panic!("expected Held, got {other:?}"),
        }
    }

    /// CI finding: on stores whose ETag is the MD5 of the content (MinIO, S3)
    /// every ended lease had the same ETag, so gateway B's hint still matched
    /// after gateway A had held and released the lock, and B took A's record
    /// for its own last one (PATCH answered 409). Ended leases now differ.
    #[tokio::test(start_paused = true)]
    async fn each_ended_lease_is_unlike_every_other() {
        let clock = clock();
        let store = store();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 {
            let lock = UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
                .await
                .unwrap();
            lock.release().await;
            let (body, _) = read(&store, &lock_key(ID)).await.unwrap();
            let body = body.expect("an ended lease");
            assert_eq!(body.until_ms, 0);
            assert!(seen.insert(body.ended_by), "an ended lease repeated");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_holder_at_a_time_and_release_frees_it() {
        let clock = clock();
        let store = store();
        let first = UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
            .await
            .unwrap();
        let wait =
            held(UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone()).await);
        assert!(wait > Duration::from_secs(25) && wait <= LONG, "{wait:?}");
        first.release().await;
        UploadLock::acquire(store, unhinted(), ID, LONG, clock.clone())
            .await
            .unwrap();
    }

    /// The next holder learns whether the last one ended its lease or died
    /// with it (its work may be half-done in the store).
    #[tokio::test(start_paused = true)]
    async fn the_next_holder_knows_whether_the_last_one_died() {
        let clock = clock();
        let cases = [
            ("never locked", None),
            ("released", Some(false)),
            ("died", Some(true)),
        ];
        for (case, last_died) in cases {
            let store = store();
            match last_died {
                None => {}
                Some(died) => {
                    let last =
                        UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
                            .await
                            .unwrap();
                    if died {
                        std::mem::forget(last); // a killed gateway releases nothing
                        tokio::time::advance(LONG + Duration::from_secs(1)).await;
                    } else {
                        last.release().await;
                    }
                }
            }
            let next = UploadLock::acquire(store, unhinted(), ID, LONG, clock.clone())
                .await
                .unwrap();
            assert_eq!(
                next.follows_a_lapsed_lease(),
                last_died == Some(true),
                "{case}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_holder_releases_at_once() {
        let clock = clock();
        let store = store();
        let holder = UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
            .await
            .unwrap();
        drop(holder); // a request future dropped midway
        let mut taken = None;
        for _ in 0..100 {
            match UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone()).await {
                Ok(lock) => {
                    taken = Some(lock);
                    break;
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        assert!(
            taken.is_some(),
            "the dropped holder's lock was not released"
        );
    }

    /// CI finding (chaos test): a PATCH ended while the store was counted as
    /// down, so its release failed at once, and the lock stayed held for the
    /// whole lease: the client's next PATCHes were answered 423 until it gave
    /// up. A release that fails on a passing fault is tried again until it
    /// lands or the lease would have ended anyway.
    #[tokio::test(start_paused = true)]
    async fn a_release_that_meets_a_passing_fault_is_tried_again() {
        let clock = clock();
        use sluice_testkit::{Fault, FaultyStore, Op};
        for (how, failures) in [
            ("released", 1),
            ("released", 3),
            ("dropped", 1),
            ("dropped", 3),
        ] {
            let faulty = FaultyStore::new(store());
            let store: Arc<dyn ObjectStore> = Arc::new(faulty.clone());
            let holder = UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
                .await
                .unwrap();
            let _ = faulty
                .clone()
                .inject(Op::Put, None, Some(failures), Fault::Throttle);
            let started = tokio::time::Instant::now();
            match how {
                "released" => holder.release().await,
                _ => drop(holder),
            }
            let mut taken = false;
            while started.elapsed() < Duration::from_secs(10) {
                if UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
                    .await
                    .is_ok()
                {
                    taken = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            assert!(
                taken,
                "{how} with {failures} failed release(s): still held after 10 s"
            );
            assert_eq!(
                faulty.attempts(Op::Put, None),
                2 + failures + 1,
                "{how} {failures}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_that_keeps_failing_gives_up_when_the_lease_has_ended() {
        let clock = clock();
        use sluice_testkit::{Fault, FaultyStore, Op};
        let faulty = FaultyStore::new(store());
        let store: Arc<dyn ObjectStore> = Arc::new(faulty.clone());
        let lease = Duration::from_millis(500);
        let holder = UploadLock::acquire(store.clone(), unhinted(), ID, lease, clock.clone())
            .await
            .unwrap();
        let _ = faulty.clone().inject(Op::Put, None, None, Fault::Throttle);
        holder.release().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let tried = faulty.attempts(Op::Put, None);
        assert!(
            tried >= 3,
            "the release was tried {tried} times (acquire included)"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            faulty.attempts(Op::Put, None),
            tried,
            "still trying after the lease ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_release_never_frees_the_next_holders_lock() {
        let clock = clock();
        let store = store();
        let mut stale = UploadLock::acquire(
            store.clone(),
            unhinted(),
            ID,
            Duration::from_millis(200),
            clock.clone(),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(250)).await;
        let _next = UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
            .await
            .unwrap();
        // The old holder learns it lost the lock, and its release changes nothing.
        assert!(matches!(stale.keep_alive().await, LockError::Held { .. }));
        stale.release().await;
        held(UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone()).await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_after_an_unseen_renewal_still_releases() {
        let clock = clock();
        let store = store();
        let mut holder = UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
            .await
            .unwrap();
        // A renewal landed but its answer was never seen: the ETag held is stale.
        let stale = holder.etag.clone();
        put(
            &store,
            &holder.key,
            &holder.holder,
            ms_after(clock.as_ref(), LONG),
            WriteCondition::IfMatch(stale.clone()),
        )
        .await
        .unwrap();
        holder.etag = stale;
        holder.release().await;
        UploadLock::acquire(store, unhinted(), ID, LONG, clock.clone())
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_hinted_lock_is_taken_with_one_write() {
        let clock = clock();
        let memory = Arc::new(MemoryStore::new());
        let store: Arc<dyn ObjectStore> = memory.clone();
        let hints = unhinted();
        // (what the gateway knows, reads and writes the next acquire costs)
        let cases = [("just created", 0, 1), ("released here", 0, 1)];
        hints.created(ID);
        for (case, reads, writes) in cases {
            let before = requests(&memory);
            let lock = UploadLock::acquire(store.clone(), hints.clone(), ID, LONG, clock.clone())
                .await
                .unwrap();
            let after = requests(&memory);
            assert_eq!(
                (after.0 - before.0, after.1 - before.1),
                (reads, writes),
                "{case}"
            );
            lock.release().await;
        }
        // Without a hint, the lock is read first.
        let before = requests(&memory);
        let lock = UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
            .await
            .unwrap();
        let after = requests(&memory);
        assert_eq!((after.0 - before.0, after.1 - before.1), (1, 1));
        lock.release().await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_hint_never_takes_a_held_lock() {
        let clock = clock();
        let store = store();
        let (here, there) = (unhinted(), unhinted());
        // Created here, but another gateway took the lock first.
        here.created(ID);
        let other = UploadLock::acquire(store.clone(), there.clone(), ID, LONG, clock.clone())
            .await
            .unwrap();
        held(UploadLock::acquire(store.clone(), here.clone(), ID, LONG, clock.clone()).await);
        other.release().await;
        // Released here, then taken by the other gateway: the hint is stale.
        UploadLock::acquire(store.clone(), here.clone(), ID, LONG, clock.clone())
            .await
            .unwrap()
            .release()
            .await;
        let other = UploadLock::acquire(store.clone(), there.clone(), ID, LONG, clock.clone())
            .await
            .unwrap();
        held(UploadLock::acquire(store.clone(), here.clone(), ID, LONG, clock.clone()).await);
        // Once it is released again, the read finds the ended lease.
        other.release().await;
        UploadLock::acquire(store, here, ID, LONG, clock.clone())
            .await
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewed_lock_is_not_taken_over() {
        let clock = clock();
        let store = store();
        let mut holder = UploadLock::acquire(
            store.clone(),
            unhinted(),
            ID,
            Duration::from_millis(300),
            clock.clone(),
        )
        .await
        .unwrap();
        let renewing = tokio::spawn(async move { holder.keep_alive().await });
        tokio::time::sleep(Duration::from_millis(700)).await;
        held(
            UploadLock::acquire(
                store.clone(),
                unhinted(),
                ID,
                Duration::from_secs(1),
                clock.clone(),
            )
            .await,
        );
        renewing.abort();
    }

    /// A holder as a request runs one: renewing its lease, and, when `obeys`,
    /// releasing once asked to let go (after its work commits, here 50 ms).
    /// Ends with whether it was asked.
    fn run_holder(mut lock: UploadLock, obeys: bool) -> tokio::task::JoinHandle<bool> {
        tokio::spawn(async move {
            let mut let_go = lock.let_go();
            let asked = async {
                let _ = let_go.wait_for(|asked| *asked).await;
            };
            tokio::select! {
                () = asked, if obeys => {}
                lost = lock.keep_alive() => panic!("the holder lost its lock: {lost}"),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            let was_asked = *lock.let_go().borrow();
            lock.release().await;
            was_asked
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_newer_request_takes_over_within_a_bounded_time() {
        const LEASE: Duration = Duration::from_secs(6);
        const PATIENCE: Duration = Duration::from_secs(7);
        struct Case {
            name: &'static str,
            /// The holder is in the newcomer's process.
            same_process: bool,
            /// The holder runs (renews, lets go when asked); else it died.
            alive: bool,
            obeys: bool,
            /// The newcomer has the lock within this long, or is refused.
            within: Option<Duration>,
        }
        #[rustfmt::skip]
        let cases = [
            Case { name: "holder in the same process", same_process: true, alive: true, obeys: true, within: Some(Duration::from_millis(200)) },
            Case { name: "holder in another gateway", same_process: false, alive: true, obeys: true, within: Some(LEASE / 3 + Duration::from_millis(500)) },
            Case { name: "holder died (its gateway was killed)", same_process: false, alive: false, obeys: true, within: Some(LEASE + Duration::from_millis(500)) },
            Case { name: "holder that never lets go", same_process: false, alive: true, obeys: false, within: None },
        ];
        for case in cases {
            let clock = clock();
            let store = store();
            let holder_hints = unhinted();
            let newcomer_hints = match case.same_process {
                true => holder_hints.clone(),
                false => unhinted(),
            };
            let lock = UploadLock::acquire(store.clone(), holder_hints, ID, LEASE, clock.clone())
                .await
                .unwrap();
            let holder = match case.alive {
                true => Some(run_holder(lock, case.obeys)),
                false => {
                    std::mem::forget(lock); // a killed gateway releases nothing
                    None
                }
            };
            let started = tokio::time::Instant::now();
            let taken = UploadLock::acquire_taking_over(
                store.clone(),
                newcomer_hints,
                ID,
                LEASE,
                clock.clone(),
                PATIENCE,
            )
            .await;
            let took = started.elapsed();
            match case.within {
                Some(within) => {
                    let lock = taken.unwrap_or_else(|e| panic!("{}: {e}", case.name));
                    assert!(took <= within, "{}: took {took:?}", case.name);
                    if let Some(holder) = holder {
                        assert!(
                            holder.await.unwrap(),
                            "{}: the holder was not asked",
                            case.name
                        );
                    }
                    lock.release().await;
                }
                None => {
                    held(taken);
                    assert!(took >= PATIENCE, "{}: gave up after {took:?}", case.name);
                    holder.unwrap().abort();
                }
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn two_newer_requests_both_get_their_turn() {
        // A holder, then two newer requests at once from two gateways: the
        // first to take the lock is asked in turn by the second, which must
        // not wait out its patience on the holder it asked first.
        const LEASE: Duration = Duration::from_secs(6);
        let clock = clock();
        let store = store();
        let lock = UploadLock::acquire(store.clone(), unhinted(), ID, LEASE, clock.clone())
            .await
            .unwrap();
        let first = run_holder(lock, true);
        let newcomer = |store: Arc<dyn ObjectStore>, clock: Arc<dyn Clock>| {
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                let lock = UploadLock::acquire_taking_over(
                    store,
                    unhinted(),
                    ID,
                    LEASE,
                    clock,
                    LEASE + Duration::from_secs(1),
                )
                .await
                .expect("a newer request gets the lock");
                let took = started.elapsed();
                // As a request runs: renewing, letting go when asked, or
                // ending by itself after 3 s.
                let mut lock = lock;
                let mut let_go = lock.let_go();
                tokio::select! {
                    _ = let_go.wait_for(|asked| *asked) => {}
                    lost = lock.keep_alive() => panic!("lost: {lost}"),
                    () = tokio::time::sleep(Duration::from_secs(3)) => {}
                }
                lock.release().await;
                took
            })
        };
        let a = newcomer(store.clone(), clock.clone());
        let b = newcomer(store.clone(), clock.clone());
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        assert!(first.await.unwrap());
        let (sooner, later) = (a.min(b), a.max(b));
        assert!(
            sooner <= LEASE / 3 + Duration::from_millis(500),
            "{sooner:?}"
        );
        assert!(
            later <= 2 * (LEASE / 3) + Duration::from_secs(1),
            "{later:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn settling_waits_for_the_holder_to_let_go_and_takes_nothing() {
        let clock = clock();
        let store = store();
        let lock = UploadLock::acquire(store.clone(), unhinted(), ID, LONG, clock.clone())
            .await
            .unwrap();
        let holder = run_holder(lock, true);
        let settled = UploadLock::settle(store.clone(), unhinted(), ID, clock.clone(), LONG)
            .await
            .unwrap();
        assert!(settled);
        assert!(holder.await.unwrap(), "the holder was asked");
        // Nothing was taken: a plain request gets the lock at once.
        UploadLock::acquire(store, unhinted(), ID, LONG, clock)
            .await
            .unwrap()
            .release()
            .await;
    }
}
