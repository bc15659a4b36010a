//! The per-prefix write-rate cap: one token bucket per prefix, refilled at the
//! configured rate and holding at most a tenth of a second's worth (at least 1),
//! so bursts above the rate are answered with SlowDown almost at once, as S3 does.

use std::collections::HashMap;

use tokio::time::Instant;

/// Prefixes remembered at most; full buckets are forgotten first.
const MAX_PREFIXES: usize = 100_000;

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    refilled: Instant,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub(crate) struct RateLimiter {
    buckets: HashMap<String, Bucket>,
}

fn burst(rate: f64) -> f64 {
    (rate / 10.0).max(1.0)
}

impl RateLimiter {
    /// Takes a token from `prefix`'s bucket; false when it is empty.
    pub(crate) fn admit(&mut self, prefix: &str, rate: f64, now: Instant) -> bool {
        let capacity = burst(rate);
        if self.buckets.len() >= MAX_PREFIXES && !self.buckets.contains_key(prefix) {
            self.buckets.retain(|_, b| {
                b.tokens + now.duration_since(b.refilled).as_secs_f64() * rate < capacity
            });
        }
        let bucket = self.buckets.entry(prefix.to_string()).or_insert(Bucket {
            tokens: capacity,
            refilled: now,
        });
        let elapsed = now.duration_since(bucket.refilled).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * rate).min(capacity);
        bucket.refilled = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn admits_the_rate_per_prefix_and_no_more() {
        let mut limiter = RateLimiter::default();
        let start = Instant::now();
        // 10 seconds of 2,000 offered per second on one prefix, capped at 500/s.
        let mut admitted = 0;
        let mut other = 0;
        for i in 0..20_000u64 {
            let now = start + Duration::from_micros(i * 500);
            if limiter.admit("b/a", 500.0, now) {
                admitted += 1;
            }
            if i % 4 == 0 && limiter.admit("b/z", 500.0, now) {
                other += 1;
            }
        }
        // The burst (50) plus 500/s for 10 s.
        assert!((5000..=5051).contains(&admitted), "{admitted}");
        // A prefix offered exactly its rate is never refused.
        assert_eq!(other, 5000);
    }

    #[test]
    fn a_slow_rate_still_admits_one_at_a_time() {
        let mut limiter = RateLimiter::default();
        let start = Instant::now();
        assert!(limiter.admit("p", 2.0, start));
        assert!(!limiter.admit("p", 2.0, start));
        assert!(limiter.admit("p", 2.0, start + Duration::from_millis(500)));
    }
}
