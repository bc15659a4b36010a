//! Adaptive concurrency per key prefix (AIMD). Each prefix (a key's first path
//! segment, or the whole bucket for keys without one) has a limit on store
//! requests in flight. A throttled answer halves it, once per round: answers to
//! requests sent before the last decrease do not cut it again. Each success adds
//! `increase / limit`, about `increase` per round trip. Under sustained
//! throttling the limit settles near what the store allows for that prefix;
//! prefixes the store does not throttle keep the full limit.
//!
//! Requests over the limit wait their turn; they never fail for want of a slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::Notify;

/// Bounds and rates of the limiter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    /// Off: every prefix always has `max` slots.
    pub enabled: bool,
    /// The floor the limit never drops below (at least 1).
    pub min: usize,
    /// The ceiling, and the limit of a prefix never throttled.
    pub max: usize,
    /// The factor applied on throttling, in (0, 1). Default 0.5.
    pub decrease: f64,
    /// Slots added per round trip of successes. Default 0.5.
    pub increase: f64,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            enabled: true,
            min: 1,
            max: 512,
            decrease: 0.5,
            increase: 0.5,
        }
    }
}

/// How a request ended, as the limiter sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success,
    Throttled,
    /// Any other failure: no signal about the store's rate.
    Other,
}

/// One prefix's limit, as metrics show it.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixLimit {
    pub prefix: String,
    pub limit: f64,
    pub in_flight: usize,
}

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: usize,
    last_decrease: Instant,
}

#[derive(Debug)]
struct Entry {
    state: Mutex<State>,
    freed: Notify,
}

impl Entry {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct AdaptiveLimits {
    config: AdaptiveConfig,
    entries: Mutex<HashMap<String, Arc<Entry>>>,
}

/// A slot of one prefix, held for one request; report its outcome with
/// [`Permit::finish`] (dropping it counts as [`Outcome::Other`]).
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    limits: &'a AdaptiveLimits,
    prefix: String,
    entry: Arc<Entry>,
    sent: Instant,
    outcome: Outcome,
}

/// The part of `key` the store partitions by: its first path segment.
pub(crate) fn prefix_of(key: &str) -> &str {
    key.split_once('/').map_or("", |(first, _)| first)
}

impl AdaptiveLimits {
    pub(crate) fn new(config: AdaptiveConfig) -> Self {
        AdaptiveLimits {
            config,
            entries: Mutex::default(),
        }
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Arc<Entry>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a slot of `key`'s prefix.
    pub(crate) async fn acquire(&self, key: &str) -> Permit<'_> {
        let prefix = prefix_of(key).to_owned();
        let entry = self
            .entries()
            .entry(prefix.clone())
            .or_insert_with(|| {
                Arc::new(Entry {
                    state: Mutex::new(State {
                        limit: self.config.max as f64,
                        in_flight: 0,
                        last_decrease: Instant::now(),
                    }),
                    freed: Notify::new(),
                })
            })
            .clone();
        loop {
            let waiter = entry.clone();
            let freed = waiter.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut state = entry.state();
                if state.in_flight < self.slots(state.limit) {
                    state.in_flight += 1;
                    // Pass the turn on if more slots are free.
                    if state.in_flight < self.slots(state.limit) {
                        entry.freed.notify_one();
                    }
                    drop(state);
                    return Permit {
                        limits: self,
                        prefix,
                        entry,
                        sent: Instant::now(),
                        outcome: Outcome::Other,
                    };
                }
            }
            freed.await;
        }
    }

    fn slots(&self, limit: f64) -> usize {
        if self.config.enabled {
            (limit.floor() as usize).max(self.config.min.max(1))
        } else {
            self.config.max
        }
    }

    fn release(&self, permit: &Permit<'_>) {
        let config = &self.config;
        let mut state = permit.entry.state();
        state.in_flight -= 1;
        match permit.outcome {
            Outcome::Success => {
                state.limit = (state.limit + config.increase / state.limit).min(config.max as f64);
            }
            Outcome::Throttled if permit.sent >= state.last_decrease => {
                let before = state.limit;
                state.limit = (state.limit * config.decrease).max(config.min.max(1) as f64);
                state.last_decrease = Instant::now();
                tracing::info!(prefix = %permit.prefix, from = before, to = state.limit, "store throttled: concurrency limit lowered");
            }
            _ => {}
        }
        let idle_at_max = state.in_flight == 0 && state.limit >= config.max as f64;
        drop(state);
        permit.entry.freed.notify_one();
        if idle_at_max {
            // Nothing to remember about this prefix: keep the map small.
            let mut entries = self.entries();
            if let Some(current) = entries.get(&permit.prefix) {
                let state = current.state();
                if Arc::ptr_eq(current, &permit.entry)
                    && state.in_flight == 0
                    && state.limit >= config.max as f64
                {
                    drop(state);
                    entries.remove(&permit.prefix);
                }
            }
        }
    }

    /// The prefixes with a limit below the maximum or requests in flight.
    pub(crate) fn snapshot(&self) -> Vec<PrefixLimit> {
        let entries = self.entries();
        let mut limits: Vec<PrefixLimit> = entries
            .iter()
            .map(|(prefix, entry)| {
                let state = entry.state();
                PrefixLimit {
                    prefix: prefix.clone(),
                    limit: state.limit,
                    in_flight: state.in_flight,
                }
            })
            .collect();
        limits.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        limits
    }
}

impl Permit<'_> {
    pub(crate) fn finish(mut self, outcome: Outcome) {
        self.outcome = outcome;
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.limits.release(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(max: usize) -> AdaptiveLimits {
        AdaptiveLimits::new(AdaptiveConfig {
            max,
            ..AdaptiveConfig::default()
        })
    }

    fn limit_of(limits: &AdaptiveLimits, prefix: &str) -> Option<f64> {
        limits
            .snapshot()
            .into_iter()
            .find(|l| l.prefix == prefix)
            .map(|l| l.limit)
    }

    #[test]
    fn prefixes() {
        let cases = [
            ("a/b/c", "a"),
            ("tenant-1/2026/x", "tenant-1"),
            ("plain", ""),
            ("/lead", ""),
        ];
        for (key, prefix) in cases {
            assert_eq!(prefix_of(key), prefix, "{key}");
        }
    }

    #[tokio::test]
    async fn throttling_halves_once_per_round_and_successes_grow_it_back() {
        let limits = limits(64);
        // Four requests in flight, all throttled: one decrease, not four.
        let permits: Vec<_> =
            futures::future::join_all((0..4).map(|_| limits.acquire("p/k"))).await;
        for permit in permits {
            permit.finish(Outcome::Throttled);
        }
        assert_eq!(limit_of(&limits, "p"), Some(32.0));
        // A request sent after the decrease cuts again.
        limits.acquire("p/k").await.finish(Outcome::Throttled);
        assert_eq!(limit_of(&limits, "p"), Some(16.0));
        // Successes add increase/limit each: 0.5 per 16 at this size.
        for _ in 0..32 {
            limits.acquire("p/k").await.finish(Outcome::Success);
        }
        let grown = limit_of(&limits, "p").unwrap();
        assert!((16.9..17.1).contains(&grown), "{grown}");
        // Other prefixes are untouched (and not remembered while idle at the maximum).
        limits.acquire("q/k").await.finish(Outcome::Success);
        assert_eq!(limit_of(&limits, "q"), None);
    }

    #[tokio::test]
    async fn the_limit_never_drops_below_the_floor() {
        let limits = limits(4);
        for _ in 0..10 {
            limits.acquire("k").await.finish(Outcome::Throttled);
        }
        assert_eq!(limit_of(&limits, ""), Some(1.0));
    }

    #[tokio::test(start_paused = true)]
    async fn requests_over_the_limit_wait_for_a_slot() {
        let limits = Arc::new(limits(2));
        let first = limits.acquire("p/1").await;
        let second = limits.acquire("p/2").await;
        let waiting = {
            let limits = limits.clone();
            tokio::spawn(async move {
                let _permit = limits.acquire("p/3").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(first);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("woken when a slot frees")
            .unwrap();
        drop(second);
    }

    #[tokio::test]
    async fn disabled_keeps_the_maximum() {
        let limits = AdaptiveLimits::new(AdaptiveConfig {
            enabled: false,
            max: 3,
            ..AdaptiveConfig::default()
        });
        let permit = limits.acquire("p/k").await;
        permit.finish(Outcome::Throttled);
        let held: Vec<_> = futures::future::join_all((0..3).map(|_| limits.acquire("p/k"))).await;
        assert_eq!(held.len(), 3);
    }
}
