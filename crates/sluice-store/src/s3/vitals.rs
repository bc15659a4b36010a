//! What the store's recent answers say about it: when it last showed life (an
//! answer, or a body frame taken by the connection) and how long requests wait
//! for it. From the waits comes the stall deadline: three times the slowest
//! wait of the last [`WINDOW`] requests (the 99th percentile), never under the
//! floor nor over the ceiling. A store that answers in 20 ms gets the floor
//! (5 s by default); one with 2 s hiccups gets 6 s or more, so a slow but
//! living store is not taken for a dead one.
//!
//! A request that stalls counts as a wait of the deadline it hit, so after a
//! stall the deadline grows (three times it, up to the ceiling): a store whose
//! answers jump from milliseconds to seconds gets the time it now needs, and
//! the window forgets the stall after [`WINDOW`] more requests.
//!
//! A request that stalls while the whole store has been silent for the
//! deadline (no request in flight made progress or got an answer) reports
//! that: the store is not slow, it is gone, and the breaker opens at once
//! instead of after three stalls in a row.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Waits remembered for the deadline.
pub const WINDOW: usize = 256;

/// How many waits between two recomputations of the deadline.
const RECOMPUTE_EVERY: u64 = 16;

/// The deadline is this many times the slow end of recent waits.
const MARGIN: u32 = 3;

/// The default floor: the shortest deadline however fast the store answers.
pub const DEFAULT_FLOOR: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub(crate) struct Vitals {
    start: Instant,
    floor: Duration,
    ceiling: Duration,
    /// Nanoseconds since `start` at the last sign of life.
    last_life: AtomicU64,
    /// The current deadline, in nanoseconds.
    deadline: AtomicU64,
    observed: AtomicU64,
    waits: Mutex<VecDeque<Duration>>,
}

impl Vitals {
    /// `ceiling` caps the deadline (the configured stall timeout); a floor over
    /// it is lowered to it.
    pub(crate) fn new(floor: Duration, ceiling: Duration) -> Vitals {
        let floor = floor.min(ceiling);
        Vitals {
            start: Instant::now(),
            floor,
            ceiling,
            last_life: AtomicU64::new(0),
            deadline: AtomicU64::new(floor.as_nanos() as u64),
            observed: AtomicU64::new(0),
            waits: Mutex::new(VecDeque::with_capacity(WINDOW)),
        }
    }

    fn now_nanos(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// The store did something: answered, or took a body frame.
    pub(crate) fn alive(&self) {
        self.last_life
            .fetch_max(self.now_nanos(), Ordering::Relaxed);
    }

    /// How long the store has shown no life at all.
    pub(crate) fn silent_for(&self) -> Duration {
        let last = self.last_life.load(Ordering::Relaxed);
        Duration::from_nanos(self.now_nanos().saturating_sub(last))
    }

    /// How long a request may go without progress now.
    pub(crate) fn deadline(&self) -> Duration {
        Duration::from_nanos(self.deadline.load(Ordering::Relaxed))
    }

    /// A request got its answer; `wait` is the longest it went without
    /// progress (the time to its answer after its last body frame, or between
    /// frames).
    pub(crate) fn answered(&self, wait: Duration) {
        self.alive();
        self.record(wait);
    }

    /// A request was cancelled after `after` without progress.
    pub(crate) fn stalled(&self, after: Duration) {
        self.record(after);
    }

    fn record(&self, wait: Duration) {
        let mut waits = self.waits.lock().expect("vitals lock");
        if waits.len() == WINDOW {
            waits.pop_front();
        }
        waits.push_back(wait);
        let n = self.observed.fetch_add(1, Ordering::Relaxed) + 1;
        if n % RECOMPUTE_EVERY == 0 || n < RECOMPUTE_EVERY {
            let deadline = self.derive(&waits);
            self.deadline
                .store(deadline.as_nanos() as u64, Ordering::Relaxed);
        }
    }

    fn derive(&self, waits: &VecDeque<Duration>) -> Duration {
        let mut sorted: Vec<Duration> = waits.iter().copied().collect();
        sorted.sort_unstable();
        let slow = match sorted.len() {
            0 => Duration::ZERO,
            n => sorted[(n * 99 / 100).min(n - 1)],
        };
        (slow * MARGIN).clamp(self.floor, self.ceiling)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_deadline_follows_the_slow_end_of_recent_waits() {
        // (waits observed, deadline after them)
        let cases: Vec<(&str, Vec<Duration>, Duration)> = vec![
            ("nothing seen yet", vec![], 5000 * MS),
            ("a fast store gets the floor", vec![20 * MS; 300], 5000 * MS),
            (
                "2 s hiccups on a fifth of requests",
                (0..300)
                    .map(|i| if i % 5 == 0 { 2100 * MS } else { 20 * MS })
                    .collect(),
                6300 * MS,
            ),
            (
                "one outlier in a window is not the 99th percentile",
                (0..256)
                    .map(|i| if i == 7 { 9000 * MS } else { 20 * MS })
                    .collect(),
                5000 * MS,
            ),
            (
                "never over the ceiling",
                vec![60_000 * MS; 300],
                30_000 * MS,
            ),
        ];
        for (what, waits, want) in cases {
            let vitals = Vitals::new(5000 * MS, 30_000 * MS);
            for wait in waits {
                vitals.answered(wait);
            }
            assert_eq!(vitals.deadline(), want, "{what}");
        }
    }

    #[test]
    fn after_stalls_the_deadline_grows_then_forgets() {
        let vitals = Vitals::new(5000 * MS, 30_000 * MS);
        for _ in 0..100 {
            vitals.answered(20 * MS);
        }
        // A few stalls in a window of fast answers: the 99th percentile is one.
        for _ in 0..4 {
            vitals.stalled(5000 * MS);
        }
        for _ in 0..12 {
            vitals.answered(20 * MS); // up to the next recomputation
        }
        assert_eq!(vitals.deadline(), 15_000 * MS);
        for _ in 0..WINDOW {
            vitals.answered(20 * MS);
        }
        assert_eq!(vitals.deadline(), 5000 * MS);
    }

    #[test]
    fn a_floor_over_the_ceiling_is_the_ceiling() {
        let vitals = Vitals::new(5000 * MS, 700 * MS);
        assert_eq!(vitals.deadline(), 700 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn silence_is_counted_from_the_last_sign_of_life() {
        let vitals = Vitals::new(5000 * MS, 30_000 * MS);
        tokio::time::sleep(2000 * MS).await;
        vitals.alive();
        tokio::time::sleep(700 * MS).await;
        assert_eq!(vitals.silent_for(), 700 * MS);
    }
}
