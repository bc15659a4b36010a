//! Adaptive concurrency and pacing per key prefix. Each prefix (a key's first
//! path segment, or the whole bucket for keys without one) has two controls:
//!
//! - A limit on store requests in flight (AIMD). A throttled answer halves it,
//!   once per round: answers to requests sent before the last decrease do not
//!   cut it again. Each success adds `increase / limit`, about `increase` per
//!   round trip.
//! - A pace: requests per second, off until the store throttles the prefix.
//!   S3 caps requests per second per prefix, and when round trips are short a
//!   concurrency limit of one can still send faster than the cap (measured: with
//!   loopback round trips the limit sat at 3 and a quarter of the requests were
//!   throttled). On throttling, at most once a second, the pace is set to
//!   `PACE_CUT` of the successes of the last second (what the store just
//!   allowed), or of the current pace when that is higher; it then grows by
//!   `PACE_GROWTH` of the measured rate per second, so it probes just above the
//!   store's rate about once a second and settles near it. After
//!   `PACE_RELEASE` without throttling it is switched off again.
//!
//! Prefixes the store does not throttle keep the full limit and no pace.
//! Requests over the limit or the pace wait their turn; they never fail for want
//! of a slot.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The pace after throttling, as a share of the successes of the last second.
const PACE_CUT: f64 = 0.9;
/// The pace's growth per second, as a share of the rate measured at the last cut.
const PACE_GROWTH: f64 = 0.1;
/// The shortest time between two cuts of the pace: the window the successes are
/// counted over, so that one burst of throttled answers cuts once.
const PACE_CUT_INTERVAL: Duration = Duration::from_secs(1);
/// The pace is switched off after this long without throttling.
const PACE_RELEASE: Duration = Duration::from_secs(30);
/// Successes are counted in this many buckets over the last second.
const WINDOW_BUCKETS: usize = 10;
const BUCKET: Duration = Duration::from_millis(100);
/// A prefix's successes say nothing about the store's rate before this: in the
/// first moments throttled answers (quick) outnumber the successes (slow) that
/// have come back.
const MEASURE_AFTER: Duration = Duration::from_millis(250);
/// Prefixes remembered before idle ones are forgotten.
const SWEEP_AT_LEAST: usize = 1024;

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
    /// The floor of a prefix's pace, in requests per second. Default 10.
    pub min_rate: f64,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        AdaptiveConfig {
            enabled: true,
            min: 1,
            max: 512,
            decrease: 0.5,
            increase: 0.5,
            min_rate: 10.0,
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

/// One prefix's limits, as metrics show them.
#[derive(Debug, Clone, PartialEq)]
pub struct PrefixLimit {
    pub prefix: String,
    /// Requests in flight allowed.
    pub limit: f64,
    pub in_flight: usize,
    /// Requests per second allowed; `None` while the prefix is not paced.
    pub rate: Option<f64>,
}

#[derive(Debug)]
struct State {
    limit: f64,
    in_flight: usize,
    last_decrease: Instant,
    successes: RecentSuccesses,
    pace: Option<Pace>,
}

/// A prefix's pace: one request every `1 / rate` seconds.
#[derive(Debug, Clone, Copy)]
struct Pace {
    rate: f64,
    /// Successes per second measured at the last cut: the scale of the growth.
    measured: f64,
    next_send: Instant,
    last_cut: Instant,
    last_growth: Instant,
}

/// Successes of about the last second, in buckets of 100 ms.
#[derive(Debug)]
struct RecentSuccesses {
    origin: Instant,
    newest: u64,
    buckets: [u32; WINDOW_BUCKETS],
}

impl RecentSuccesses {
    fn new(origin: Instant) -> Self {
        RecentSuccesses {
            origin,
            newest: 0,
            buckets: [0; WINDOW_BUCKETS],
        }
    }

    /// Moves the window to `now`, clearing buckets that fell out; returns the
    /// current bucket.
    fn advance(&mut self, now: Instant) -> usize {
        let tick =
            (now.saturating_duration_since(self.origin).as_millis() / BUCKET.as_millis()) as u64;
        if tick > self.newest {
            let stale = (tick - self.newest).min(WINDOW_BUCKETS as u64);
            for t in tick + 1 - stale..=tick {
                self.buckets[(t % WINDOW_BUCKETS as u64) as usize] = 0;
            }
            self.newest = tick;
        }
        (self.newest % WINDOW_BUCKETS as u64) as usize
    }

    fn is_empty(&mut self, now: Instant) -> bool {
        self.advance(now);
        self.buckets.iter().all(|&b| b == 0)
    }

    fn record(&mut self, now: Instant) {
        let bucket = self.advance(now);
        self.buckets[bucket] += 1;
    }

    /// Whether the window has counted long enough to say a rate.
    fn can_measure(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.origin) >= MEASURE_AFTER
    }

    /// Successes per second over the window, or over the time since the prefix
    /// was first seen when that is shorter.
    fn per_second(&mut self, now: Instant) -> f64 {
        self.advance(now);
        let total: u32 = self.buckets.iter().sum();
        let span = now
            .saturating_duration_since(self.origin)
            .clamp(MEASURE_AFTER, BUCKET * WINDOW_BUCKETS as u32);
        f64::from(total) / span.as_secs_f64()
    }
}

impl State {
    /// Nothing learnt: the full limit, no pace, nothing in flight.
    fn at_rest(&self, max: usize) -> bool {
        self.in_flight == 0 && self.limit >= max as f64 && self.pace.is_none()
    }
}

#[derive(Debug)]
struct Entry {
    state: Mutex<State>,
    freed: Notify,
    /// Paced requests take turns here (first come, first served), so that only
    /// the first waits for the next send time, read when it is due: a cut
    /// applies from the next request on, not after a queue booked at the old
    /// rate.
    pacer: tokio::sync::Mutex<()>,
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
    entries: Mutex<Entries>,
}

/// The prefixes seen; those at rest with no recent success are forgotten when
/// the map has doubled since the last sweep (and holds at least `SWEEP_AT_LEAST`).
#[derive(Debug, Default)]
struct Entries {
    by_prefix: HashMap<String, Arc<Entry>>,
    sweep_at: usize,
}

/// A prefix found with a free slot (see [`AdaptiveLimits::ready`]).
pub(crate) struct Ready {
    prefix: String,
    entry: Arc<Entry>,
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

    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry of `prefix`, created at rest when new.
    fn entry(&self, prefix: &str) -> Arc<Entry> {
        let mut entries = self.entries();
        if let Some(entry) = entries.by_prefix.get(prefix) {
            return entry.clone();
        }
        let now = Instant::now();
        if entries.by_prefix.len() >= entries.sweep_at.max(SWEEP_AT_LEAST) {
            let max = self.config.max;
            entries.by_prefix.retain(|_, entry| {
                let mut state = entry.state();
                !(state.at_rest(max) && state.successes.is_empty(now))
            });
            entries.sweep_at = 2 * entries.by_prefix.len();
        }
        let entry = Arc::new(Entry {
            state: Mutex::new(State {
                limit: self.config.max as f64,
                in_flight: 0,
                last_decrease: now,
                successes: RecentSuccesses::new(now),
                pace: None,
            }),
            freed: Notify::new(),
            pacer: tokio::sync::Mutex::new(()),
        });
        entries.by_prefix.insert(prefix.to_owned(), entry.clone());
        entry
    }

    /// Waits for the turn of `key`'s prefix under its pace, then for a slot.
    #[cfg(test)]
    pub(crate) async fn acquire(&self, key: &str) -> Permit<'_> {
        loop {
            let ready = self.ready(key).await;
            if let Some(permit) = self.try_take(ready) {
                return permit;
            }
        }
    }

    /// Waits for the turn of `key`'s prefix under its pace, then until the prefix
    /// has a free slot, without taking it: [`AdaptiveLimits::try_take`] does, so
    /// that a caller can wait for something else in between (the engine-wide
    /// slot) without counting as in flight.
    pub(crate) async fn ready(&self, key: &str) -> Ready {
        let prefix = prefix_of(key).to_owned();
        let entry = self.entry(&prefix);
        if entry.state().pace.is_some() {
            let _turn = entry.pacer.lock().await;
            loop {
                let due = {
                    let mut state = entry.state();
                    let Some(pace) = state.pace.as_mut() else {
                        break;
                    };
                    let now = Instant::now();
                    if pace.next_send <= now {
                        // From the time due, not the time woken: timers wake a
                        // little late, and at 2 ms intervals that would add up.
                        let interval = Duration::from_secs_f64(1.0 / pace.rate);
                        let due = if now - pace.next_send > interval {
                            now
                        } else {
                            pace.next_send
                        };
                        pace.next_send = due + interval;
                        break;
                    }
                    pace.next_send
                };
                tokio::time::sleep_until(due).await;
            }
        }
        loop {
            let waiter = entry.clone();
            let freed = waiter.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let free = {
                let state = entry.state();
                state.in_flight < self.slots(state.limit)
            };
            if free {
                return Ready { prefix, entry };
            }
            freed.await;
        }
    }

    /// Takes a slot of the prefix `ready` found free; None when another request
    /// took it meanwhile (wait with [`AdaptiveLimits::ready`] again).
    pub(crate) fn try_take(&self, ready: Ready) -> Option<Permit<'_>> {
        let Ready { prefix, entry } = ready;
        let mut state = entry.state();
        if state.in_flight >= self.slots(state.limit) {
            return None;
        }
        state.in_flight += 1;
        // Pass the turn on if more slots are free.
        if state.in_flight < self.slots(state.limit) {
            entry.freed.notify_one();
        }
        drop(state);
        Some(Permit {
            limits: self,
            prefix,
            entry,
            sent: Instant::now(),
            outcome: Outcome::Other,
        })
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
        let now = Instant::now();
        let mut state = permit.entry.state();
        state.in_flight -= 1;
        match permit.outcome {
            Outcome::Success => {
                state.limit = (state.limit + config.increase / state.limit).min(config.max as f64);
                state.successes.record(now);
                let state = &mut *state;
                if let Some(pace) = &mut state.pace {
                    if now.saturating_duration_since(pace.last_cut) >= PACE_RELEASE {
                        tracing::info!(prefix = %permit.prefix, "no throttling for a while: pacing off");
                        state.pace = None;
                    } else {
                        let elapsed = now
                            .saturating_duration_since(pace.last_growth)
                            .min(PACE_CUT_INTERVAL);
                        // Not grown past twice what the store took lately: a pace
                        // that grew while demand was low would otherwise need
                        // many cuts once demand returns.
                        let ceiling = (2.0 * state.successes.per_second(now)).max(pace.rate);
                        pace.rate = (pace.rate
                            + pace.measured * PACE_GROWTH * elapsed.as_secs_f64())
                        .min(ceiling.max(self.config.min_rate));
                        pace.last_growth = now;
                    }
                }
            }
            Outcome::Throttled => {
                if permit.sent >= state.last_decrease {
                    let before = state.limit;
                    state.limit = (state.limit * config.decrease).max(config.min.max(1) as f64);
                    state.last_decrease = now;
                    tracing::info!(prefix = %permit.prefix, from = before, to = state.limit, "store throttled: concurrency limit lowered");
                }
                if config.enabled {
                    self.cut_pace(&mut state, &permit.prefix, now);
                }
            }
            Outcome::Other => {}
        }
        drop(state);
        permit.entry.freed.notify_one();
    }

    /// Paces the prefix at `PACE_CUT` of its successes of the last second (or of
    /// its pace, when higher), unless the pace was cut less than
    /// `PACE_CUT_INTERVAL` ago or the prefix is younger than `MEASURE_AFTER`.
    fn cut_pace(&self, state: &mut State, prefix: &str, now: Instant) {
        let cut_lately = state
            .pace
            .is_some_and(|pace| now.saturating_duration_since(pace.last_cut) < PACE_CUT_INTERVAL);
        // Before MEASURE_AFTER the concurrency limit answers alone.
        if cut_lately || !state.successes.can_measure(now) {
            return;
        }
        // Successes lag the pace while it grows: cutting from them alone would
        // ratchet a prefix throttled now and then (not capped) down and down.
        let measured = state.successes.per_second(now).max(self.config.min_rate);
        let current = state.pace.map_or(measured, |pace| pace.rate.max(measured));
        let rate = (current * PACE_CUT).max(self.config.min_rate);
        let next_send = state.pace.map_or(now, |pace| pace.next_send);
        tracing::info!(prefix, rate, "store throttled: requests paced");
        state.pace = Some(Pace {
            rate,
            measured,
            next_send,
            last_cut: now,
            last_growth: now,
        });
    }

    /// The prefixes with a limit below the maximum, a pace or requests in flight.
    pub(crate) fn snapshot(&self) -> Vec<PrefixLimit> {
        let entries = self.entries();
        let mut limits: Vec<PrefixLimit> = entries
            .by_prefix
            .iter()
            .filter_map(|(prefix, entry)| {
                let state = entry.state();
                (!state.at_rest(self.config.max)).then(|| PrefixLimit {
                    prefix: prefix.clone(),
                    limit: state.limit,
                    in_flight: state.in_flight,
                    rate: state.pace.map(|pace| pace.rate),
                })
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

    fn snapshot_of(limits: &AdaptiveLimits, prefix: &str) -> Option<PrefixLimit> {
        limits.snapshot().into_iter().find(|l| l.prefix == prefix)
    }

    fn limit_of(limits: &AdaptiveLimits, prefix: &str) -> Option<f64> {
        snapshot_of(limits, prefix).map(|l| l.limit)
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

    fn rate_of(limits: &AdaptiveLimits, prefix: &str) -> Option<f64> {
        snapshot_of(limits, prefix).and_then(|l| l.rate)
    }

    /// `count` successes of prefix `p`, one every `every`.
    async fn succeed(limits: &AdaptiveLimits, count: usize, every: Duration) {
        for _ in 0..count {
            tokio::time::sleep(every).await;
            limits.acquire("p/k").await.finish(Outcome::Success);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn throttling_paces_the_prefix_at_the_rate_the_store_allowed() {
        let limits = limits(64);
        // 200 successes a second, then a throttled answer.
        succeed(&limits, 400, Duration::from_millis(5)).await;
        assert_eq!(rate_of(&limits, "p"), None, "no pace before throttling");
        limits.acquire("p/k").await.finish(Outcome::Throttled);
        let rate = rate_of(&limits, "p").unwrap();
        assert!((170.0..=190.0).contains(&rate), "0.9 x 200/s: {rate}");
        // More throttled answers within the second do not cut again.
        limits.acquire("p/k").await.finish(Outcome::Throttled);
        assert_eq!(rate_of(&limits, "p"), Some(rate));
        // Requests are now spaced about 1/rate apart (the pace grows meanwhile).
        let cut = Instant::now();
        succeed(&limits, 90, Duration::ZERO).await;
        let took = cut.elapsed().as_secs_f64();
        assert!((85.0 / rate..=91.0 / rate).contains(&took), "{took}");
        // Successes as fast as the pace allows grow it by a tenth of the
        // measured rate per second.
        succeed(&limits, 200, Duration::ZERO).await;
        let grown = rate_of(&limits, "p").unwrap();
        let expected = rate + 0.1 * 200.0 * cut.elapsed().as_secs_f64();
        assert!(
            (grown - expected).abs() < 3.0,
            "{rate} -> {grown}, not {expected}"
        );
        // Successes well under the pace (10/s for 5 s) grow it only while the
        // last second still counts the fast ones: by 20/s at most, not 100/s.
        succeed(&limits, 50, Duration::from_millis(100)).await;
        let held = rate_of(&limits, "p").unwrap();
        assert!(held <= grown + 22.0, "{grown} -> {held}");
        // Unthrottled for PACE_RELEASE: the pace is switched off.
        tokio::time::sleep(PACE_RELEASE).await;
        limits.acquire("p/k").await.finish(Outcome::Success);
        assert_eq!(rate_of(&limits, "p"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_queued_at_one_pace_follow_a_cut_at_once() {
        let limits = Arc::new(limits(512));
        succeed(&limits, 400, Duration::from_millis(5)).await;
        limits.acquire("p/k").await.finish(Outcome::Throttled);
        let rate = rate_of(&limits, "p").unwrap();
        // A request in flight whose throttled answer comes later.
        let late_answer = limits.acquire("p/k").await;
        // 400 requests queue at once; after a second, the pace is cut.
        let sent = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..400)
            .map(|_| {
                let (limits, sent) = (limits.clone(), sent.clone());
                tokio::spawn(async move {
                    limits.acquire("p/k").await.finish(Outcome::Other);
                    sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                })
            })
            .collect();
        let start = Instant::now();
        while sent.load(std::sync::atomic::Ordering::SeqCst) < 100 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let first_half = start.elapsed().as_secs_f64();
        assert!(
            (0.5..0.6).contains(&first_half),
            "100 at {rate}/s: {first_half}"
        );
        tokio::time::sleep(PACE_CUT_INTERVAL).await;
        late_answer.finish(Outcome::Throttled);
        let cut = rate_of(&limits, "p").unwrap();
        assert!(cut < rate, "{rate} -> {cut}");
        let before = sent.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let in_half_a_second = sent.load(std::sync::atomic::Ordering::SeqCst) - before;
        assert!(
            (in_half_a_second as f64 - cut / 2.0).abs() <= 2.0,
            "{in_half_a_second} sent at {cut}/s"
        );
        for task in tasks {
            task.await.unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_pace_never_drops_below_the_minimum_rate() {
        let limits = limits(64);
        // Throttled at once: the first moments are the concurrency limit's alone.
        limits.acquire("p/k").await.finish(Outcome::Throttled);
        assert_eq!(rate_of(&limits, "p"), None);
        // Throttled again later, nothing having succeeded: the floor applies.
        tokio::time::sleep(MEASURE_AFTER).await;
        limits.acquire("p/k").await.finish(Outcome::Throttled);
        assert_eq!(rate_of(&limits, "p"), Some(10.0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_cut_every_second_holds_the_rate_it_measures() {
        // One throttled answer per second while 100 requests a second succeed:
        // the pace settles near 100/s rather than spiralling down.
        let limits = limits(64);
        succeed(&limits, 100, Duration::from_millis(10)).await;
        for _ in 0..10 {
            limits.acquire("p/k").await.finish(Outcome::Throttled);
            succeed(&limits, 100, Duration::from_millis(10)).await;
        }
        let rate = rate_of(&limits, "p").unwrap();
        assert!((85.0..=115.0).contains(&rate), "{rate}");
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
        drop(held);
        assert_eq!(rate_of(&limits, "p"), None, "never paced");
    }
}
