//! Pacing of small tus PATCHes. A PATCH costs the store three requests (take the
//! upload's lock, write its record, release the lock) whatever it carries, so a
//! client sending 1-byte PATCHes back to back turns a trickle of bytes into a
//! stream of store writes that crowds out everyone else's uploads. A PATCH that
//! stored fewer than `tus.small_patch_bytes` without finishing its upload spends
//! a token of its upload's bucket (`tus.small_patches_per_second`, with a burst
//! of twice that); once the bucket is empty its answer waits until the next
//! token is due, so the client's next PATCH comes no sooner. A PATCH answered
//! with an error counts as small (a body cut off midway keeps what arrived). The
//! wait holds no lock, admission slot or memory.
//!
//! Real tus clients send chunks of megabytes (tus-js-client and Uppy send the
//! whole file unless told otherwise) and never wait. The buckets live in each
//! gateway process: behind N gateways an upload may go N times as fast.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Longest an answer waits, however far a bucket is in debt.
const MAX_WAIT: Duration = Duration::from_secs(5);
/// Uploads whose buckets are kept; past that every bucket starts full again.
const MAX_UPLOADS: usize = 65_536;

/// The small-PATCH buckets of one gateway.
#[derive(Debug)]
pub struct SmallPatchPace {
    /// Tokens per second; 0 turns pacing off.
    rate: f64,
    burst: f64,
    /// PATCHes storing fewer bytes than this (and not finishing) are small.
    small_below: u64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl SmallPatchPace {
    pub fn new(per_second: f64, small_below: u64) -> SmallPatchPace {
        SmallPatchPace {
            rate: per_second,
            burst: (2.0 * per_second).max(1.0),
            small_below,
            buckets: Mutex::default(),
        }
    }

    /// How long the answer to a PATCH of upload `id` waits, given the bytes it
    /// stored and whether it finished the upload.
    pub fn wait(&self, id: &str, stored: u64, finished: bool) -> Duration {
        if self.rate <= 0.0 || finished || stored >= self.small_below {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= MAX_UPLOADS && !buckets.contains_key(id) {
            buckets.clear();
        }
        let bucket = buckets.entry(id.to_owned()).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let earned = now.duration_since(bucket.at).as_secs_f64() * self.rate;
        bucket.tokens = (bucket.tokens + earned).min(self.burst) - 1.0;
        bucket.at = now;
        if bucket.tokens >= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(-bucket.tokens / self.rate).min(MAX_WAIT)
    }

    /// Forgets upload `id` (finished or terminated).
    pub fn forget(&self, id: &str) {
        self.buckets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn small_patches_wait_once_their_burst_is_spent() {
        let pace = SmallPatchPace::new(4.0, 65_536);
        // (advance the clock, bytes stored, finished, expected wait)
        let steps: &[(Duration, u64, bool, Duration)] = &[
            // A burst of 8 small PATCHes goes through at once...
            (Duration::ZERO, 1, false, Duration::ZERO),
            (Duration::ZERO, 1, false, Duration::ZERO),
            (Duration::ZERO, 1, false, Duration::ZERO),
            (Duration::ZERO, 1, false, Duration::ZERO),
            (Duration::ZERO, 0, false, Duration::ZERO),
            (Duration::ZERO, 1, false, Duration::ZERO),
            (Duration::ZERO, 1, false, Duration::ZERO),
            (Duration::ZERO, 65_535, false, Duration::ZERO),
            // ...then each waits a quarter of a second,
            (Duration::ZERO, 1, false, 250 * MS),
            (250 * MS, 1, false, 250 * MS),
            // or less when it came later,
            (350 * MS, 1, false, 150 * MS),
            // never for a big chunk or the last one,
            (Duration::ZERO, 65_536, false, Duration::ZERO),
            (Duration::ZERO, 1, true, Duration::ZERO),
            // and a pause earns the burst back, no more.
            (Duration::from_secs(60), 1, false, Duration::ZERO),
        ];
        for (n, (advance, stored, finished, expected)) in steps.iter().enumerate() {
            tokio::time::advance(*advance).await;
            let wait = pace.wait("u", *stored, *finished);
            assert!(
                wait.abs_diff(*expected) < MS,
                "step {n}: waited {wait:?}, expected {expected:?}"
            );
        }
        for _ in 0..7 {
            assert_eq!(pace.wait("u", 1, false), Duration::ZERO);
        }
        assert!(pace.wait("u", 1, false) > Duration::ZERO);
        // Each upload has its own bucket; a forgotten one starts full.
        assert_eq!(pace.wait("other", 1, false), Duration::ZERO);
        pace.forget("u");
        assert_eq!(pace.wait("u", 1, false), Duration::ZERO);
    }

    #[test]
    fn a_rate_of_zero_never_waits() {
        let pace = SmallPatchPace::new(0.0, 65_536);
        for _ in 0..100 {
            assert_eq!(pace.wait("u", 1, false), Duration::ZERO);
        }
    }

    #[test]
    fn debt_waits_at_most_the_cap() {
        let pace = SmallPatchPace::new(0.01, 65_536);
        pace.wait("u", 1, false);
        assert_eq!(pace.wait("u", 1, false), MAX_WAIT);
    }
}
