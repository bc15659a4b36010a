//! Admission control: a cap on uploads streaming at once, shared fairly, and a
//! bounded queue in front of it. A request that finds the queue full, or waits
//! past the deadline, is answered 503 with Retry-After: never a reset connection
//! or a hung request. While the store counts as down (the engine's circuit
//! breaker is open), uploads are refused at once the same way, before any byte
//! is read.
//!
//! Fairness. Every upload names its [`Party`]: its tenant and, when the key is
//! known before the body, the store prefix of the key (its first segment, what
//! the store throttles by). No tenant and no prefix holds more than its cap of
//! the slots (`limits.max_uploads_per_tenant`, `limits.max_uploads_per_prefix`;
//! three quarters of them by default), so a busy tenant, or a throttled prefix
//! whose uploads last, never holds them all. A freed slot goes to the waiting
//! tenant with the fewest uploads running (the longest waiting among equals),
//! not to whoever queued first: a tenant with a thousand uploads queued does not
//! stand in front of one with a single upload.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_upload::Breaker;
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::metrics::Metrics;

/// Waiters of one tenant looked at, past those whose prefix is at its cap,
/// before the tenant's turn passes (bounds the work of one release).
const SCAN_PER_TENANT: usize = 32;

/// Who an upload is for, as admission groups it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Party {
    pub tenant: String,
    /// The store prefix of the key, when the key is known before the body.
    pub prefix: Option<String>,
}

impl Party {
    /// An upload to `key` (the prefix is its first segment; keys without `/`
    /// share the bucket's, the empty one).
    pub fn for_key(tenant: String, key: &str) -> Party {
        let prefix = key.split_once('/').map_or("", |(first, _)| first);
        Party {
            tenant,
            prefix: Some(prefix.to_string()),
        }
    }

    /// An upload whose key is not known yet.
    pub fn tenant_only(tenant: String) -> Party {
        Party {
            tenant,
            prefix: None,
        }
    }
}

/// The caps admission enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdmissionLimits {
    pub max_uploads: usize,
    pub per_tenant: usize,
    pub per_prefix: usize,
    pub queue_length: usize,
    pub queue_timeout: Duration,
    pub retry_after: u64,
}

#[derive(Debug, Clone)]
pub struct Admission {
    shared: Arc<Shared>,
    breaker: Option<Arc<Breaker>>,
}

#[derive(Debug)]
struct Shared {
    limits: AdmissionLimits,
    metrics: Metrics,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    running: usize,
    by_tenant: HashMap<Arc<str>, usize>,
    by_prefix: HashMap<Arc<str>, usize>,
    /// Waiters by tenant, each tenant's in arrival order.
    waiting: HashMap<Arc<str>, VecDeque<Waiter>>,
    queued: usize,
    /// Waiters given a slot that have not taken it yet.
    granted: HashSet<u64>,
    next_id: u64,
    closed: bool,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    prefix: Option<Arc<str>>,
    wake: oneshot::Sender<()>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

/// A slot for one upload, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    shared: Arc<Shared>,
    tenant: Arc<str>,
    prefix: Option<Arc<str>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.give_back(&self.tenant, self.prefix.as_ref());
    }
}

impl Admission {
    pub fn new(limits: AdmissionLimits, metrics: Metrics) -> Self {
        Admission {
            shared: Arc::new(Shared {
                limits,
                metrics,
                state: Mutex::default(),
            }),
            breaker: None,
        }
    }

    /// Refuses uploads while `breaker` is open.
    pub fn with_breaker(mut self, breaker: Option<Arc<Breaker>>) -> Self {
        self.breaker = breaker;
        self
    }

    /// A slot for one upload of `party`, held until the [`Slot`] drops.
    pub async fn admit(&self, party: &Party) -> Result<Slot, ApiError> {
        let shared = &self.shared;
        let limits = shared.limits;
        if let Some(breaker) = self.breaker.as_ref().filter(|b| b.is_open()) {
            shared.metrics.rejected();
            return Err(ApiError::Store(breaker.refusal()));
        }
        let tenant: Arc<str> = party.tenant.as_str().into();
        let prefix: Option<Arc<str>> = party.prefix.as_deref().map(Into::into);
        let slot = || Slot {
            shared: shared.clone(),
            tenant: tenant.clone(),
            prefix: prefix.clone(),
        };
        let overloaded = || {
            shared.metrics.rejected();
            ApiError::Overloaded {
                retry_after: limits.retry_after,
            }
        };
        let (id, granted) = {
            let mut state = shared.lock();
            if state.closed {
                return Err(ApiError::ShuttingDown {
                    retry_after: limits.retry_after,
                });
            }
            // Nobody who fits waits while a slot is free (every release hands
            // out what it can), so taking a free slot jumps no queue.
            if state.fits(&limits, &tenant, prefix.as_ref()) {
                state.take(&tenant, prefix.as_ref());
                return Ok(slot());
            }
            if state.queued >= limits.queue_length {
                return Err(overloaded());
            }
            let id = state.next_id;
            state.next_id += 1;
            let (wake, granted) = oneshot::channel();
            state
                .waiting
                .entry(tenant.clone())
                .or_default()
                .push_back(Waiter {
                    id,
                    prefix: prefix.clone(),
                    wake,
                });
            state.queued += 1;
            shared.metrics.queue_changed(1);
            (id, granted)
        };
        let mut ticket = Ticket {
            shared,
            id,
            tenant: &tenant,
            prefix: prefix.as_ref(),
            settled: false,
        };
        let woken = tokio::time::timeout(limits.queue_timeout, granted).await;
        let mut state = shared.lock();
        ticket.settled = true;
        if state.granted.remove(&id) {
            return Ok(slot());
        }
        match woken {
            // Woken without a grant: the queue was closed (shutdown).
            Ok(_) => Err(ApiError::ShuttingDown {
                retry_after: limits.retry_after,
            }),
            Err(_) => {
                state.forget(id, &tenant, &shared.metrics);
                Err(overloaded())
            }
        }
    }

    /// Requests waiting in the queue now.
    pub fn waiting(&self) -> usize {
        self.shared.lock().queued
    }

    /// Refuses new uploads from now on, and those waiting (shutdown).
    pub fn close(&self) {
        let mut state = self.shared.lock();
        state.closed = true;
        let dropped = std::mem::take(&mut state.waiting);
        self.shared.metrics.queue_changed(-(state.queued as i64));
        state.queued = 0;
        drop(dropped);
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn give_back(&self, tenant: &Arc<str>, prefix: Option<&Arc<str>>) {
        let mut state = self.lock();
        state.give_back(tenant, prefix);
        state.hand_out(&self.limits, &self.metrics);
    }
}

impl State {
    fn fits(&self, limits: &AdmissionLimits, tenant: &Arc<str>, prefix: Option<&Arc<str>>) -> bool {
        self.running < limits.max_uploads
            && count(&self.by_tenant, Some(tenant)) < limits.per_tenant
            && count(&self.by_prefix, prefix) < limits.per_prefix
    }

    fn take(&mut self, tenant: &Arc<str>, prefix: Option<&Arc<str>>) {
        self.running += 1;
        *self.by_tenant.entry(tenant.clone()).or_default() += 1;
        if let Some(prefix) = prefix {
            *self.by_prefix.entry(prefix.clone()).or_default() += 1;
        }
    }

    fn give_back(&mut self, tenant: &Arc<str>, prefix: Option<&Arc<str>>) {
        self.running -= 1;
        decrement(&mut self.by_tenant, tenant);
        if let Some(prefix) = prefix {
            decrement(&mut self.by_prefix, prefix);
        }
    }

    /// Gives free slots to waiters: each time to the tenant with the fewest
    /// uploads running among those with a waiter that fits.
    fn hand_out(&mut self, limits: &AdmissionLimits, metrics: &Metrics) {
        while self.running < limits.max_uploads {
            let mut best: Option<(usize, u64, Arc<str>, usize)> = None;
            for (tenant, queue) in &self.waiting {
                let running = count(&self.by_tenant, Some(tenant));
                if running >= limits.per_tenant {
                    continue;
                }
                let Some((index, waiter)) = queue
                    .iter()
                    .take(SCAN_PER_TENANT)
                    .enumerate()
                    .find(|(_, w)| count(&self.by_prefix, w.prefix.as_ref()) < limits.per_prefix)
                else {
                    continue;
                };
                let better = best
                    .as_ref()
                    .is_none_or(|(r, id, _, _)| (running, waiter.id) < (*r, *id));
                if better {
                    best = Some((running, waiter.id, tenant.clone(), index));
                }
            }
            let Some((_, _, tenant, index)) = best else {
                return;
            };
            let queue = self.waiting.get_mut(&tenant).expect("found above");
            let waiter = queue.remove(index).expect("found above");
            if queue.is_empty() {
                self.waiting.remove(&tenant);
            }
            self.queued -= 1;
            metrics.queue_changed(-1);
            self.take(&tenant, waiter.prefix.as_ref());
            self.granted.insert(waiter.id);
            let _ = waiter.wake.send(());
        }
    }

    /// Takes waiter `id` of `tenant` out of the queue, if it is there.
    fn forget(&mut self, id: u64, tenant: &Arc<str>, metrics: &Metrics) {
        let Some(queue) = self.waiting.get_mut(tenant) else {
            return;
        };
        if let Some(index) = queue.iter().position(|w| w.id == id) {
            queue.remove(index);
            self.queued -= 1;
            metrics.queue_changed(-1);
        }
        if queue.is_empty() {
            self.waiting.remove(tenant);
        }
    }
}

fn count(map: &HashMap<Arc<str>, usize>, key: Option<&Arc<str>>) -> usize {
    key.and_then(|k| map.get(k)).copied().unwrap_or(0)
}

fn decrement(map: &mut HashMap<Arc<str>, usize>, key: &Arc<str>) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

/// A place in the queue, given back when the waiter gets a slot, gives up, or
/// is dropped while it waits (its client went away): cancel-safe by
/// construction. A slot granted to a waiter dropped before it took it goes to
/// the next one.
struct Ticket<'a> {
    shared: &'a Arc<Shared>,
    id: u64,
    tenant: &'a Arc<str>,
    prefix: Option<&'a Arc<str>>,
    settled: bool,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let shared = self.shared;
        let mut state = shared.lock();
        if state.granted.remove(&self.id) {
            state.give_back(self.tenant, self.prefix);
            state.hand_out(&shared.limits, &shared.metrics);
        } else {
            state.forget(self.id, self.tenant, &shared.metrics);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(
        max_uploads: usize,
        per_group: usize,
        queue_length: usize,
        queue_timeout_s: u64,
    ) -> Admission {
        Admission::new(
            AdmissionLimits {
                max_uploads,
                per_tenant: per_group,
                per_prefix: per_group,
                queue_length,
                queue_timeout: Duration::from_secs(queue_timeout_s),
                retry_after: 2,
            },
            Metrics::new(),
        )
    }

    fn put(tenant: &str, key: &str) -> Party {
        Party::for_key(tenant.into(), key)
    }

    fn spawn_admit(
        admission: &Admission,
        party: Party,
    ) -> tokio::task::JoinHandle<Result<Slot, ApiError>> {
        let admission = admission.clone();
        tokio::spawn(async move { admission.admit(&party).await })
    }

    #[tokio::test(start_paused = true)]
    async fn full_queue_and_deadline_answer_overloaded() {
        let admission = admission(1, 1, 1, 5);
        let first = admission.admit(&put("t", "a")).await.unwrap();
        let queued = spawn_admit(&admission, put("t", "b"));
        tokio::task::yield_now().await;
        // The queue holds one: the next is refused at once.
        assert!(matches!(
            admission.admit(&put("u", "c")).await,
            Err(ApiError::Overloaded { retry_after: 2 })
        ));
        // The queued one times out after the deadline.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(matches!(
            queued.await.unwrap(),
            Err(ApiError::Overloaded { .. })
        ));
        assert_eq!(admission.waiting(), 0);
        drop(first);
        let again = admission.admit(&put("t", "a")).await.unwrap();
        let waiting = spawn_admit(&admission, put("t", "b"));
        tokio::task::yield_now().await;
        admission.close();
        assert!(matches!(
            waiting.await.unwrap(),
            Err(ApiError::ShuttingDown { .. })
        ));
        drop(again);
        assert!(matches!(
            admission.admit(&put("t", "a")).await,
            Err(ApiError::ShuttingDown { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_dropped_in_the_queue_gives_its_place_back() {
        let admission = admission(1, 1, 2, 60);
        let held = admission.admit(&put("t", "a")).await.unwrap();
        // Clients that go away while they wait: their request futures are dropped.
        for _ in 0..5 {
            let waiter = spawn_admit(&admission, put("t", "a"));
            tokio::task::yield_now().await;
            assert_eq!(admission.waiting(), 1);
            waiter.abort();
            let _ = waiter.await;
            assert_eq!(admission.waiting(), 0, "the dropped waiter kept its place");
        }
        // The queue still takes waiters, and they get the slot when it frees.
        let queued = spawn_admit(&admission, put("t", "a"));
        tokio::task::yield_now().await;
        drop(held);
        assert!(queued.await.unwrap().is_ok());
        assert_eq!(admission.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_granted_to_a_waiter_that_left_goes_to_the_next() {
        let admission = admission(1, 1, 4, 60);
        let held = admission.admit(&put("t", "a")).await.unwrap();
        let gone = spawn_admit(&admission, put("t", "a"));
        tokio::task::yield_now().await;
        let next = spawn_admit(&admission, put("t", "a"));
        tokio::task::yield_now().await;
        assert_eq!(admission.waiting(), 2);
        // The slot is handed to `gone`, whose client leaves before taking it.
        drop(held);
        gone.abort();
        let _ = gone.await;
        assert!(next.await.unwrap().is_ok(), "the slot was lost");
    }

    /// (slots, cap per tenant and per prefix, what is running, what then asks,
    /// whether it is admitted at once).
    #[tokio::test(start_paused = true)]
    async fn caps_per_tenant_and_prefix_table() {
        let cases: Vec<(usize, usize, Vec<Party>, Party, bool)> = vec![
            // A busy tenant stops at its cap; another tenant gets in.
            (
                4,
                3,
                vec![
                    put("busy", "busy/1"),
                    put("busy", "busy/2"),
                    put("busy", "busy/3"),
                ],
                put("busy", "busy/4"),
                false,
            ),
            (
                4,
                3,
                vec![
                    put("busy", "busy/1"),
                    put("busy", "busy/2"),
                    put("busy", "busy/3"),
                ],
                put("calm", "calm/1"),
                true,
            ),
            // A throttled prefix stops at its cap whoever uploads to it.
            (
                4,
                2,
                vec![put("a", "slow/1"), put("b", "slow/2")],
                put("c", "slow/3"),
                false,
            ),
            (
                4,
                2,
                vec![put("a", "slow/1"), put("b", "slow/2")],
                put("c", "fast/1"),
                true,
            ),
            // Keys without a '/' share the bucket's prefix.
            (
                4,
                2,
                vec![put("a", "x"), put("b", "y")],
                put("c", "z"),
                false,
            ),
            // A party without a prefix counts against its tenant only.
            (
                4,
                2,
                vec![put("a", "slow/1"), put("b", "slow/2")],
                Party::tenant_only("c".into()),
                true,
            ),
            // Caps equal to the slots change nothing.
            (2, 2, vec![put("a", "p/1")], put("a", "p/2"), true),
        ];
        for (index, (slots, cap, running, asking, admitted)) in cases.into_iter().enumerate() {
            let admission = admission(slots, cap, 8, 1);
            let mut held = Vec::new();
            for party in &running {
                held.push(admission.admit(party).await.unwrap());
            }
            let got =
                tokio::time::timeout(Duration::from_millis(10), admission.admit(&asking)).await;
            assert_eq!(
                matches!(got, Ok(Ok(_))),
                admitted,
                "case {index}: {asking:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_freed_slot_goes_to_the_tenant_with_fewest_running() {
        let admission = admission(2, 2, 100, 60);
        let mut busy = vec![
            admission.admit(&put("busy", "busy/0")).await.unwrap(),
            admission.admit(&put("busy", "busy/1")).await.unwrap(),
        ];
        // The busy tenant queues many before the calm one queues one.
        let mut busy_waiters = Vec::new();
        for i in 0..20 {
            busy_waiters.push(spawn_admit(&admission, put("busy", &format!("busy/w{i}"))));
            tokio::task::yield_now().await;
        }
        let calm = spawn_admit(&admission, put("calm", "calm/1"));
        tokio::task::yield_now().await;
        assert_eq!(admission.waiting(), 21);
        drop(busy.pop());
        let calm_slot = calm.await.unwrap().expect("the calm tenant goes first");
        assert_eq!(admission.waiting(), 20);
        // Then the busy tenant's waiters, oldest first.
        drop(busy.pop());
        let first = busy_waiters.remove(0);
        let _slot = first.await.unwrap().unwrap();
        drop(calm_slot);
        let second = busy_waiters.remove(0);
        assert!(second.await.unwrap().is_ok());
        for waiter in busy_waiters {
            waiter.abort();
        }
    }
}
