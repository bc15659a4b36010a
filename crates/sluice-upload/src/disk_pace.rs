//! How a download's file-system work (writing a chunk, making a small file)
//! runs from its async task: right there on the worker while the disk keeps
//! up, as Go runs it on its goroutine's thread; handed over once it does not.
//!
//! That work takes tens of microseconds when the page cache takes it at once.
//! Handing the worker over for each piece ([`tokio::task::block_in_place`]:
//! a thread woken, the scheduler moved to it and back) cost more than the
//! work: 20 x 256 MiB took 1.17x s5cmd's CPU written batch by batch that way,
//! 0.82x chunk by chunk here; 10,000 small files 1.03x through the blocking
//! pool, 0.85x here (bench/results/2026-11-30/download-direct-writes-ab.txt,
//! small-file-writes-here-ab.txt). When the kernel holds writes back
//! (dirty-page throttling, a slow or network file system) a piece takes
//! milliseconds, and the worker's other tasks would wait with it: once one
//! piece takes longer than [`SLOW`], every piece is handed over for
//! [`SLOW_FOR`], then tried here again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A piece of work slower than this is the disk's pace showing. Under
/// memory pressure (a page cache that fills the memory, pages reclaimed for
/// each write) writes of 5-15 ms come every second or so: handed over from
/// then on, chunk by chunk, a download took twice the CPU. Dirty-page
/// throttling pauses a writer for tens to hundreds of milliseconds.
pub(crate) const SLOW: Duration = Duration::from_millis(50);

/// How long work is handed over after a slow piece.
pub(crate) const SLOW_FOR: Duration = Duration::from_secs(1);

/// The engine's judgement of its disk, shared by all its downloads.
#[derive(Debug)]
pub(crate) struct DiskPace {
    /// When this pace was made: the clock `slow_until` counts from.
    epoch: Instant,
    /// Nanoseconds after `epoch` until which work is handed over (0: never).
    slow_until: AtomicU64,
    slow_for: Duration,
}

impl Default for DiskPace {
    fn default() -> Self {
        DiskPace::new(SLOW_FOR)
    }
}

impl DiskPace {
    fn new(slow_for: Duration) -> Self {
        DiskPace {
            epoch: Instant::now(),
            slow_until: AtomicU64::new(0),
            slow_for,
        }
    }

    /// Runs `work` (blocking file-system calls) here, or hands the worker
    /// over first while the disk is slow.
    pub(crate) fn run<T>(&self, work: impl FnOnce() -> T) -> T {
        if self.slow() {
            return handing_over(work);
        }
        let started = Instant::now();
        let done = work();
        let took = started.elapsed();
        if took > SLOW {
            let until = (started + took + self.slow_for).duration_since(self.epoch);
            self.slow_until
                .fetch_max(until.as_nanos() as u64, Ordering::Relaxed);
            tracing::debug!(
                took_ms = took.as_millis() as u64,
                "a file write was slow: file work is handed over for a while"
            );
        }
        done
    }

    /// Whether work is handed over now.
    pub(crate) fn slow(&self) -> bool {
        let now = self.epoch.elapsed().as_nanos() as u64;
        now < self.slow_until.load(Ordering::Relaxed)
    }
}

/// Runs work that may block for long on this thread: on a multi-threaded
/// runtime the worker hands its other tasks over first; on a current-thread
/// runtime (tests, embedders) it simply runs. (Not to be called from a
/// `LocalSet`, where tokio forbids `block_in_place`: transfers run in spawned
/// tasks.)
fn handing_over<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_piece_hands_work_over_for_a_while_then_it_runs_here_again() {
        let pace = DiskPace::new(Duration::from_secs(1));
        let fast = || 1;
        let slow = || {
            std::thread::sleep(SLOW * 2);
            2
        };
        // (work, slow afterwards)
        assert_eq!(pace.run(fast), 1);
        assert!(!pace.slow(), "fast work");
        assert_eq!(pace.run(slow), 2);
        assert!(pace.slow(), "right after slow work");
        // Handed over, it still runs and answers.
        assert_eq!(pace.run(fast), 1);
        assert!(pace.slow(), "still within the window");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(!pace.slow(), "after the window");
        assert_eq!(pace.run(fast), 1);
        assert!(!pace.slow());
    }

    #[test]
    fn work_runs_on_a_current_thread_runtime_and_outside_any() {
        let pace = DiskPace::new(Duration::from_secs(60));
        pace.run(|| std::thread::sleep(SLOW * 2));
        assert!(pace.slow());
        assert_eq!(pace.run(|| 3), 3, "outside a runtime");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(runtime.block_on(async { pace.run(|| 4) }), 4);
    }
}
