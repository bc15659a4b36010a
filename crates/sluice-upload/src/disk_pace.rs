//! How the engine's file-system work (writing a chunk, making a small file,
//! reading one to upload) runs from async code: right there while the disk
//! keeps up, as Go runs it on its goroutine's thread; elsewhere once it does
//! not.
//!
//! That work takes tens of microseconds when the page cache takes it at once.
//! Handing the worker over for each piece ([`tokio::task::block_in_place`]:
//! a thread woken, the scheduler moved to it and back) cost more than the
//! work: 20 x 256 MiB took 1.17x s5cmd's CPU written batch by batch that way,
//! 0.82x chunk by chunk here; 10,000 small files 1.03x through the blocking
//! pool, 0.85x here (bench/results/2026-11-30/download-direct-writes-ab.txt,
//! small-file-writes-here-ab.txt). When the kernel holds writes back
//! (dirty-page throttling) or the file system is remote, pieces take
//! milliseconds and whatever shares the thread waits with them. A [`DiskPace`]
//! counts the time its late pieces took in each second: past its limit, work
//! goes elsewhere for [`SLOW_FOR`], then is tried here again.
//!
//! Three paces judge three kinds of work: a download's chunk writes
//! ([`DiskPace::for_writes`]), small downloaded files made and files to upload
//! stat'ed and, when small, read whole (each [`DiskPace::for_small_files`], a
//! pace of its own: the disk read from need not be the one written to).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long work goes elsewhere once the disk was judged slow.
const SLOW_FOR: Duration = Duration::from_secs(1);

/// The span late pieces are counted over.
const WINDOW: Duration = Duration::from_secs(1);

/// The engine's judgement of its disk for one kind of work.
#[derive(Debug)]
pub(crate) struct DiskPace {
    /// A piece slower than this is late.
    late: Duration,
    /// Late pieces taking more than this in all within one [`WINDOW`]: slow.
    late_most: Duration,
    /// When this pace was made: the clock the fields below count from.
    epoch: Instant,
    /// Nanoseconds after `epoch` until which work goes elsewhere (0: never).
    slow_until: AtomicU64,
    /// When the current window started, and the late pieces' time in it.
    window_start: AtomicU64,
    late_in_window: AtomicU64,
}

impl DiskPace {
    /// For chunks written into the page cache by a range's task on an async
    /// worker. Under memory pressure (pages reclaimed for each write) a write
    /// of 5-15 ms comes about once a second, and handing every chunk over
    /// from then on took twice the CPU; dirty-page throttling pauses a writer
    /// for tens to hundreds of milliseconds, a remote file system for each
    /// write: late pieces of more than 50 ms in a second.
    pub(crate) fn for_writes() -> DiskPace {
        DiskPace::new(Duration::from_millis(5), Duration::from_millis(50))
    }

    /// For small files made (created, written, stamped, renamed) where the
    /// many-file commands run their jobs: one thread for all of them, so a
    /// file made here holds up every other job. On a local disk that takes
    /// well under a millisecond, and a busy machine's preemptions make a few
    /// take milliseconds (judged file by file past 2 ms, a loaded 2-core
    /// machine sent most files to the pool, and the gain was gone); on a
    /// remote file system every file takes milliseconds. Late files of more
    /// than 50 ms in a second send the next second's files to the blocking
    /// pool, where they are made side by side.
    pub(crate) fn for_small_files() -> DiskPace {
        DiskPace::new(Duration::from_millis(5), Duration::from_millis(50))
    }

    fn new(late: Duration, late_most: Duration) -> DiskPace {
        DiskPace {
            late,
            late_most,
            epoch: Instant::now(),
            slow_until: AtomicU64::new(0),
            window_start: AtomicU64::new(0),
            late_in_window: AtomicU64::new(0),
        }
    }

    /// Whether work goes elsewhere now.
    pub(crate) fn slow(&self) -> bool {
        self.now() < self.slow_until.load(Ordering::Relaxed)
    }

    /// Runs `work` (blocking file-system calls) on this thread, or, while
    /// the disk is slow, hands the async worker's other tasks over first.
    pub(crate) fn run<T>(&self, work: impl FnOnce() -> T) -> T {
        if self.slow() {
            handing_over(work)
        } else {
            self.timed(work)
        }
    }

    /// Runs `work` here, timed, while the disk keeps up; on the blocking pool,
    /// side by side with other such work, while it does not. For work that
    /// blocks the one task many jobs share (a small file made or read, a
    /// stat): there a hand-over as in [`DiskPace::run`] would stop them all.
    pub(crate) async fn here_or_pooled<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<T> {
        if self.slow() {
            tokio::task::spawn_blocking(work)
                .await
                .map_err(std::io::Error::other)
        } else {
            Ok(self.timed(work))
        }
    }

    /// Runs `work` here and judges the disk by the time it took.
    pub(crate) fn timed<T>(&self, work: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let done = work();
        self.took(started.elapsed());
        done
    }

    fn took(&self, took: Duration) {
        if took <= self.late {
            return;
        }
        let now = self.now();
        let took_ns = took.as_nanos() as u64;
        let start = self.window_start.load(Ordering::Relaxed);
        let late = if now.saturating_sub(start) > WINDOW.as_nanos() as u64 {
            // A new window (two pieces starting one at once: one count lost).
            self.window_start.store(now, Ordering::Relaxed);
            self.late_in_window.store(took_ns, Ordering::Relaxed);
            took_ns
        } else {
            self.late_in_window.fetch_add(took_ns, Ordering::Relaxed) + took_ns
        };
        if late > self.late_most.as_nanos() as u64 {
            self.slow_until
                .fetch_max(now + SLOW_FOR.as_nanos() as u64, Ordering::Relaxed);
            tracing::debug!(
                took_ms = took.as_millis() as u64,
                late_ms = late / 1_000_000,
                "file work is late: it goes elsewhere for a while"
            );
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// Runs work that may block for long on this thread: on a worker of a
/// multi-threaded runtime the worker hands its other tasks over first;
/// elsewhere (a current-thread runtime, a `block_on` thread) it simply runs.
/// (Not to be called from a `LocalSet`, where tokio forbids
/// `block_in_place`: a file's ranges run in a spawned task.)
fn handing_over<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeping(ms: u64) -> impl FnOnce() -> u64 {
        move || {
            std::thread::sleep(Duration::from_millis(ms));
            ms
        }
    }

    #[test]
    fn late_pieces_add_up_within_a_window_before_the_disk_is_slow() {
        // (pieces in ms, one after another; slow afterwards)
        // Sleeps only ever take longer than asked: the cases that must stay
        // on time leave room for a loaded machine.
        let cases: [(&str, &[u64], bool); 5] = [
            ("on time", &[0, 1, 0], false),
            ("one late piece under the limit", &[20], false),
            ("late pieces adding up past it", &[40, 40, 40], true),
            ("one piece past it", &[150], true),
            ("on-time pieces never add up", &[1; 12], false),
        ];
        for (name, pieces, slow) in cases {
            let pace = DiskPace::new(Duration::from_millis(5), Duration::from_millis(100));
            for &ms in pieces {
                assert_eq!(pace.run(sleeping(ms)), ms, "{name}");
            }
            assert_eq!(pace.slow(), slow, "{name}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_disk_hands_work_over_for_a_while_then_it_runs_here_again() {
        let pace = DiskPace::new(Duration::from_millis(20), Duration::ZERO);
        assert_eq!(pace.run(sleeping(0)), 0);
        assert!(!pace.slow(), "on time");
        assert_eq!(pace.run(sleeping(25)), 25);
        assert!(pace.slow(), "right after a late piece");
        // Handed over, it still runs and answers.
        assert_eq!(pace.run(sleeping(0)), 0);
        assert!(pace.slow(), "still within the spell");
        tokio::time::sleep(SLOW_FOR + Duration::from_millis(100)).await;
        assert!(!pace.slow(), "after the spell");
    }

    #[tokio::test]
    async fn pooled_work_runs_here_until_the_disk_is_slow_then_on_the_pool() {
        let pace = DiskPace::new(Duration::from_millis(5), Duration::from_millis(50));
        let here = std::thread::current().id();
        let thread = || std::thread::current().id();
        assert_eq!(pace.here_or_pooled(thread).await.unwrap(), here, "on time");
        pace.here_or_pooled(sleeping(60)).await.unwrap();
        assert!(pace.slow(), "after a piece past the limit");
        assert_ne!(pace.here_or_pooled(thread).await.unwrap(), here, "slow");
    }

    #[test]
    fn work_runs_on_a_current_thread_runtime_and_outside_any() {
        let pace = DiskPace::for_small_files();
        pace.run(sleeping(60));
        assert!(pace.slow());
        assert_eq!(pace.run(|| 3), 3, "outside a runtime");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(runtime.block_on(async { pace.run(|| 4) }), 4);
    }
}
