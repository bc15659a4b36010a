//! The engine-wide limit on transfers in flight: parts, single PUTs and
//! ranged GETs, whichever upload, download or file they belong to. A
//! transfer takes a [`TransferSlot`] before its bytes are read and gives it
//! back once the store has them (or once they are all received). A slot is
//! taken before the memory the bytes need, never while memory is held (the
//! one exception: a stream turning multipart already holds its first pieces,
//! its own memory, when it asks for their slots), so transfers waiting for
//! slots and for memory cannot wait on each other in a circle.
//!
//! The limit is fixed, or found by hill climbing on the measured throughput
//! (the AWS CRT's target-throughput idea, without asking the user for a
//! number):
//!
//! - Throughput is measured over windows of at least [`MIN_WINDOW`] and at
//!   least as many finished transfers as the limit (one round).
//! - A window counts only when a transfer had to wait for a slot: otherwise
//!   the limit is not what held the transfers back (a small or nearly
//!   finished job, a slow disk) and says nothing about a higher one.
//! - From the starting limit, each counted window raises it by [`STEP`] as
//!   long as the rate grew by at least [`GAIN`] over the best so far. When it
//!   does not, the limit goes back to the best one and stays there for
//!   [`HOLD_WINDOWS`] windows (their rates refresh the best one's, so a link
//!   that got faster or slower is seen), then probes again.
//! - A throttled or transiently failed request halves the limit (at most once
//!   a window), which is then held and measured afresh before probing.
//!
//! A transfer too short to finish one window never moves the limit: small and
//! loopback transfers run at the starting limit, as they did with a fixed one.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The shortest window a rate is measured over.
const MIN_WINDOW: Duration = Duration::from_millis(500);
/// The factor a probe raises the limit by.
const STEP: f64 = 1.5;
/// The rate a probe must reach, over the best so far, to be kept.
const GAIN: f64 = 1.05;
/// Windows at the best limit between two probes.
const HOLD_WINDOWS: u32 = 6;

/// The bounds of the limit on transfers in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TuningConfig {
    /// Where the limit starts.
    pub initial: usize,
    /// The floor backing off never goes below.
    pub min: usize,
    /// The ceiling probing never goes above.
    pub max: usize,
}

impl TuningConfig {
    /// Always `limit` transfers in flight at most.
    pub const fn fixed(limit: usize) -> TuningConfig {
        TuningConfig {
            initial: limit,
            min: limit,
            max: limit,
        }
    }

    /// The command line's default: from 32, between 2 and 64. It started at 8
    /// (the old fixed default) and climbed from there; for small files on a
    /// short round trip it stopped at 12-18 (a probe gaining 3 %, under
    /// [`GAIN`]), and 10,000 x 10 KiB downloads ran 1.08x s5cmd's rate against
    /// 1.26x from 32 (bench/results/2026-12-02/tuner-start-ab.txt). Big
    /// transfers are bounded by the memory budget before the limit.
    pub const fn adaptive() -> TuningConfig {
        TuningConfig {
            initial: 32,
            min: 2,
            max: 64,
        }
    }

    /// The limit moves (min < max).
    pub fn is_adaptive(&self) -> bool {
        self.min < self.max
    }

    pub(crate) fn validate(&self) -> Result<(), &'static str> {
        if self.min == 0 || self.min > self.initial || self.initial > self.max || self.max > 1024 {
            return Err("the limits must satisfy 1 <= min <= initial <= max <= 1024");
        }
        Ok(())
    }
}

/// What a probe is doing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// The first window at the current limit: it becomes the best.
    Measure,
    /// The limit was raised above the best; the next window says if it pays.
    Probe,
    /// At the best limit for this many more windows.
    Hold(u32),
}

#[derive(Debug, Clone, Copy)]
struct Best {
    limit: usize,
    /// Bytes per second.
    rate: f64,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    bytes: u64,
    finished: usize,
    /// A transfer waited for a slot in this window.
    waited: bool,
}

impl Window {
    fn new(now: Instant) -> Window {
        Window {
            started: now,
            bytes: 0,
            finished: 0,
            waited: false,
        }
    }
}

#[derive(Debug)]
struct State {
    limit: usize,
    in_flight: usize,
    window: Window,
    best: Option<Best>,
    phase: Phase,
    last_backoff: Option<Instant>,
}

/// The limit and the transfers holding it (see the module header).
#[derive(Debug)]
pub(crate) struct Tuner {
    config: Option<TuningConfig>,
    state: Mutex<State>,
    freed: Notify,
}

impl Tuner {
    /// `None`: no limit (every transfer gets a slot at once; the per-upload
    /// `concurrency` alone bounds parts).
    pub(crate) fn new(config: Option<TuningConfig>) -> Arc<Tuner> {
        let now = Instant::now();
        Arc::new(Tuner {
            config,
            state: Mutex::new(State {
                limit: config.map_or(usize::MAX, |c| c.initial),
                in_flight: 0,
                window: Window::new(now),
                best: None,
                phase: Phase::Measure,
                last_backoff: None,
            }),
            freed: Notify::new(),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("tuner lock")
    }

    /// The current limit; `None` without one.
    pub(crate) fn limit(&self) -> Option<usize> {
        self.config.map(|_| self.state().limit)
    }

    /// Waits for a slot under the limit.
    pub(crate) async fn slot(self: &Arc<Self>) -> TransferSlot {
        if self.config.is_none() {
            return TransferSlot::unlimited();
        }
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            {
                let mut state = self.state();
                if state.in_flight < state.limit {
                    state.in_flight += 1;
                    // Pass the turn on while slots are free.
                    if state.in_flight < state.limit {
                        self.freed.notify_one();
                    }
                    return TransferSlot {
                        tuner: Some(self.clone()),
                        finished: None,
                    };
                }
                state.window.waited = true;
            }
            freed.await;
        }
    }

    /// A request was throttled or failed transiently: halves the limit, at
    /// most once a window.
    pub(crate) fn back_off(&self) {
        let Some(config) = self.config.filter(TuningConfig::is_adaptive) else {
            return;
        };
        let now = Instant::now();
        let mut state = self.state();
        if state
            .last_backoff
            .is_some_and(|last| now.saturating_duration_since(last) < MIN_WINDOW)
        {
            return;
        }
        let before = state.limit;
        state.limit = (state.limit / 2).max(config.min);
        state.last_backoff = Some(now);
        state.best = Some(Best {
            limit: state.limit,
            rate: 0.0,
        });
        state.phase = Phase::Hold(HOLD_WINDOWS);
        state.window = Window::new(now);
        tracing::debug!(
            from = before,
            to = state.limit,
            "transfers in flight lowered after a throttled or failed request"
        );
    }

    fn release(&self, finished: Option<u64>) {
        let mut state = self.state();
        state.in_flight -= 1;
        if let (Some(bytes), Some(config)) = (finished, self.config) {
            state.window.bytes += bytes;
            state.window.finished += 1;
            if config.is_adaptive() {
                self.evaluate(&mut state, config, Instant::now());
            }
        }
        drop(state);
        self.freed.notify_one();
    }

    /// Closes the window when it is long enough and moves the limit.
    fn evaluate(&self, state: &mut State, config: TuningConfig, now: Instant) {
        let elapsed = now.saturating_duration_since(state.window.started);
        if elapsed < MIN_WINDOW || state.window.finished < state.limit {
            return;
        }
        let rate = state.window.bytes as f64 / elapsed.as_secs_f64();
        let waited = state.window.waited;
        state.window = Window::new(now);
        if !waited {
            return;
        }
        let before = state.limit;
        let raise = |state: &mut State| {
            if state.limit >= config.max {
                state.phase = Phase::Hold(HOLD_WINDOWS);
            } else {
                state.limit = ((state.limit as f64 * STEP).ceil() as usize).min(config.max);
                state.phase = Phase::Probe;
            }
        };
        match (state.phase, state.best) {
            (Phase::Probe, Some(best)) if rate < best.rate * GAIN => {
                state.limit = best.limit;
                state.phase = Phase::Hold(HOLD_WINDOWS);
            }
            (Phase::Hold(left), Some(best)) if left > 0 && best.limit == state.limit => {
                state.best = Some(Best {
                    limit: best.limit,
                    rate,
                });
                state.phase = Phase::Hold(left - 1);
            }
            _ => {
                state.best = Some(Best {
                    limit: state.limit,
                    rate,
                });
                raise(state);
            }
        }
        if state.limit != before {
            tracing::debug!(
                from = before,
                to = state.limit,
                rate_mib_s = rate / (1024.0 * 1024.0),
                "transfers in flight"
            );
            // Raised: wake the waiters (each passes the turn on).
            self.freed.notify_one();
        }
    }
}

/// A place among the transfers in flight. Dropped without
/// [`TransferSlot::finish`], the transfer failed or was cancelled and counts
/// for no throughput.
#[derive(Debug)]
pub(crate) struct TransferSlot {
    tuner: Option<Arc<Tuner>>,
    finished: Option<u64>,
}

impl TransferSlot {
    /// A slot of no limit.
    pub(crate) fn unlimited() -> TransferSlot {
        TransferSlot {
            tuner: None,
            finished: None,
        }
    }

    /// The transfer moved `bytes` and ended well.
    pub(crate) fn finish(mut self, bytes: u64) {
        self.finished = Some(bytes);
    }
}

impl Drop for TransferSlot {
    fn drop(&mut self) {
        if let Some(tuner) = self.tuner.take() {
            tuner.release(self.finished);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A link of `bandwidth` bytes/s with `round_trip` of latency per request:
    /// a transfer of `size` bytes with `n` in flight takes
    /// `round_trip + n × size / bandwidth`. `workers` transfers are wanted at
    /// once. Returns the limit after `seconds` of simulated time.
    async fn run_link(
        tuner: &Arc<Tuner>,
        workers: usize,
        size: u64,
        bandwidth: f64,
        round_trip: Duration,
        seconds: u64,
    ) -> usize {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let tasks: Vec<_> = (0..workers)
            .map(|_| {
                let (tuner, in_flight) = (tuner.clone(), in_flight.clone());
                tokio::spawn(async move {
                    while Instant::now() < deadline {
                        let slot = tuner.slot().await;
                        let n = in_flight.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                        let time = round_trip.as_secs_f64() + n as f64 * size as f64 / bandwidth;
                        tokio::time::sleep(Duration::from_secs_f64(time)).await;
                        in_flight.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                        slot.finish(size);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        tuner.limit().unwrap()
    }

    const MIB: u64 = 1024 * 1024;

    #[tokio::test(start_paused = true)]
    async fn the_limit_settles_where_the_rate_stops_growing() {
        struct Case {
            what: &'static str,
            round_trip_ms: u64,
            workers: usize,
            expect: std::ops::RangeInclusive<usize>,
        }
        // 100 MiB/s, 1 MiB transfers: the rate is n / (rtt + n × 10 ms).
        let cases = [
            // Latency dominates: more in flight keeps paying, up to the ceiling.
            Case {
                what: "long round trips",
                round_trip_ms: 400,
                workers: 200,
                expect: 40..=64,
            },
            // No latency: the starting 32 already fill the link; a probe
            // finds nothing.
            Case {
                what: "no latency",
                round_trip_ms: 0,
                workers: 200,
                expect: 32..=48,
            },
            // Fewer transfers wanted than the limit: it never binds, never moves.
            Case {
                what: "little demand",
                round_trip_ms: 400,
                workers: 4,
                expect: 32..=32,
            },
        ];
        for case in cases {
            let tuner = Tuner::new(Some(TuningConfig::adaptive()));
            let limit = run_link(
                &tuner,
                case.workers,
                MIB,
                100.0 * MIB as f64,
                Duration::from_millis(case.round_trip_ms),
                60,
            )
            .await;
            assert!(
                case.expect.contains(&limit),
                "{}: limit {limit}, expected {:?}",
                case.what,
                case.expect
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_fixed_limit_never_moves_and_bounds_the_transfers() {
        let tuner = Tuner::new(Some(TuningConfig::fixed(3)));
        let held: Vec<_> = futures::future::join_all((0..3).map(|_| tuner.slot())).await;
        let fourth = tuner.slot();
        tokio::pin!(fourth);
        assert!(
            futures::poll!(fourth.as_mut()).is_pending(),
            "a fourth slot must wait"
        );
        drop(held);
        let _slot = fourth.await;
        let limit = run_link(
            &tuner,
            50,
            MIB,
            100.0 * MIB as f64,
            Duration::from_millis(400),
            20,
        )
        .await;
        assert_eq!(limit, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn backing_off_halves_once_a_window_down_to_the_floor() {
        let tuner = Tuner::new(Some(TuningConfig {
            initial: 16,
            min: 3,
            max: 64,
        }));
        let cases = [(0u64, 8usize), (100, 8), (600, 4), (1200, 3), (1800, 3)];
        let start = Instant::now();
        for (at_ms, expect) in cases {
            tokio::time::sleep_until(start + Duration::from_millis(at_ms)).await;
            tuner.back_off();
            assert_eq!(tuner.limit(), Some(expect), "backing off at {at_ms} ms");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn no_limit_gives_slots_at_once() {
        let tuner = Tuner::new(None);
        let slots: Vec<_> = futures::future::join_all((0..10_000).map(|_| tuner.slot())).await;
        assert_eq!(slots.len(), 10_000);
        assert_eq!(tuner.limit(), None);
        tuner.back_off();
    }
}
