//! Counting a run: every upload's ending by status or error kind, success latencies
//! in an HDR histogram (microseconds, 3 significant digits, up to one hour), and a
//! per-second timeline; then the [`Summary`] that reports and JSON are made from.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::upload::{Attempt, Ending};

/// The `schema` field of the JSON summary; bumped when a field changes meaning.
pub const SCHEMA: &str = "sluice-bench/1";
const MAX_LATENCY_US: u64 = 3_600_000_000;

/// One second of the run, by the second in which uploads ended.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Second {
    /// Seconds since the start.
    pub second: u64,
    /// Uploads that ended in 2xx.
    pub succeeded: u64,
    /// Uploads that ended in another status or without an answer.
    pub failed: u64,
    /// 503 answers retried by the client during uploads that ended in this second.
    pub retried_503: u64,
    /// Uploads started (open model: arrivals that found room).
    pub started: u64,
    /// Mean and largest latency of the successes.
    pub mean_latency_s: f64,
    pub max_latency_s: f64,
    /// Successful bytes per second.
    pub mib_per_s: f64,
}

/// Latency of successful uploads, in seconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

/// The result of a run (serialised as the documented JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub schema: &'static str,
    /// Filled in by the runner.
    pub target: serde_json::Value,
    pub model: serde_json::Value,
    /// The object size, or the largest of a range.
    pub object_size: u64,
    /// The smallest size of a log-uniform range (absent for a fixed size).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_object_size: Option<u64>,
    pub started_at: String,
    /// From the start to the last ending.
    pub wall_s: f64,
    /// Uploads begun (retries of one upload count once).
    pub uploads: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Open model: arrivals not started because max in flight was reached.
    pub not_started: u64,
    /// Endings: `"201"`, `"503"`, `"error:connect"`, `"error:timeout"`, `"error:transport"`.
    pub endings: BTreeMap<String, u64>,
    /// 503 answers the client retried after Retry-After, and uploads that then succeeded.
    pub retried_503: u64,
    pub succeeded_after_retry: u64,
    pub uploads_per_s: f64,
    pub mib_per_s: f64,
    pub latency_s: Latency,
    /// The latency distribution of successes: `[percentile, seconds]` pairs from 0 to 100.
    pub latency_distribution: Vec<[f64; 2]>,
    pub timeline: Vec<Second>,
}

/// Accumulates endings while a run goes.
pub struct Recorder {
    histogram: Histogram<u64>,
    endings: BTreeMap<String, u64>,
    timeline: Vec<Second>,
    latency_sums: Vec<f64>,
    succeeded: u64,
    failed: u64,
    not_started: u64,
    retried_503: u64,
    succeeded_after_retry: u64,
    bytes: u64,
    last_ending: Duration,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            histogram: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid bounds"),
            endings: BTreeMap::new(),
            timeline: Vec::new(),
            latency_sums: Vec::new(),
            succeeded: 0,
            failed: 0,
            not_started: 0,
            retried_503: 0,
            succeeded_after_retry: 0,
            bytes: 0,
            last_ending: Duration::ZERO,
        }
    }

    fn second(&mut self, at: Duration) -> usize {
        let index = at.as_secs() as usize;
        while self.timeline.len() <= index {
            let second = self.timeline.len() as u64;
            self.timeline.push(Second {
                second,
                ..Second::default()
            });
            self.latency_sums.push(0.0);
        }
        index
    }

    /// An upload began `at` after the start.
    pub fn started(&mut self, at: Duration) {
        let i = self.second(at);
        self.timeline[i].started += 1;
    }

    /// An arrival found no room (open model).
    pub fn not_started(&mut self) {
        self.not_started += 1;
    }

    /// An upload ended `at` after the start.
    pub fn ended(&mut self, at: Duration, attempt: &Attempt) {
        self.last_ending = self.last_ending.max(at);
        let i = self.second(at);
        let key = match attempt.ending {
            Ending::Status(status) => status.as_u16().to_string(),
            Ending::UnavailableWithoutRetryAfter => "503:no-retry-after".to_string(),
            Ending::Failed(error) => format!("error:{}", error.kind()),
            Ending::Store(kind) => format!("error:store:{kind}"),
        };
        *self.endings.entry(key).or_default() += 1;
        self.retried_503 += u64::from(attempt.retried_503);
        self.timeline[i].retried_503 += u64::from(attempt.retried_503);
        if attempt.succeeded() {
            self.succeeded += 1;
            self.bytes += attempt.bytes;
            if attempt.retried_503 > 0 {
                self.succeeded_after_retry += 1;
            }
            let micros = (attempt.latency.as_micros() as u64).clamp(1, MAX_LATENCY_US);
            self.histogram.saturating_record(micros);
            let second = &mut self.timeline[i];
            second.succeeded += 1;
            second.mib_per_s += attempt.bytes as f64 / (1 << 20) as f64;
            let seconds = attempt.latency.as_secs_f64();
            second.max_latency_s = second.max_latency_s.max(seconds);
            self.latency_sums[i] += seconds;
        } else {
            self.failed += 1;
            self.timeline[i].failed += 1;
        }
    }

    /// Uploads ended so far: (succeeded, failed).
    pub fn counts(&self) -> (u64, u64) {
        (self.succeeded, self.failed)
    }

    /// The latency percentiles of the successes so far.
    pub fn latency(&self) -> Latency {
        let h = &self.histogram;
        if h.is_empty() {
            return Latency::default();
        }
        let seconds = |micros: u64| micros as f64 / 1e6;
        Latency {
            p50: seconds(h.value_at_quantile(0.50)),
            p90: seconds(h.value_at_quantile(0.90)),
            p99: seconds(h.value_at_quantile(0.99)),
            max: seconds(h.max()),
            mean: h.mean() / 1e6,
        }
    }

    /// Percentile → seconds, at percentiles that resolve the tail.
    fn distribution(&self) -> Vec<[f64; 2]> {
        if self.histogram.is_empty() {
            return Vec::new();
        }
        const PERCENTILES: [f64; 16] = [
            0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 95.0, 97.5, 99.0, 99.5,
            99.9, 100.0,
        ];
        PERCENTILES
            .iter()
            .map(|&p| [p, self.histogram.value_at_quantile(p / 100.0) as f64 / 1e6])
            .collect()
    }

    /// The summary; `target` and `model` describe the run.
    pub fn summary(
        &self,
        target: serde_json::Value,
        model: serde_json::Value,
        object_size: u64,
        started_at: String,
    ) -> Summary {
        let wall = self.last_ending.as_secs_f64();
        let per_second = |n: f64| if wall > 0.0 { n / wall } else { 0.0 };
        let mut timeline = self.timeline.clone();
        for (second, sum) in timeline.iter_mut().zip(&self.latency_sums) {
            if second.succeeded > 0 {
                second.mean_latency_s = sum / second.succeeded as f64;
            }
        }
        Summary {
            schema: SCHEMA,
            target,
            model,
            object_size,
            min_object_size: None,
            started_at,
            wall_s: wall,
            uploads: self.succeeded + self.failed,
            succeeded: self.succeeded,
            failed: self.failed,
            not_started: self.not_started,
            endings: self.endings.clone(),
            retried_503: self.retried_503,
            succeeded_after_retry: self.succeeded_after_retry,
            uploads_per_s: per_second(self.succeeded as f64),
            mib_per_s: per_second(self.bytes as f64 / (1 << 20) as f64),
            latency_s: self.latency(),
            latency_distribution: self.distribution(),
            timeline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ExchangeError;
    use http::StatusCode;

    fn ok(ms: u64) -> Attempt {
        Attempt {
            ending: Ending::Status(StatusCode::CREATED),
            latency: Duration::from_millis(ms),
            retried_503: 0,
            bytes: 1 << 20,
        }
    }

    #[test]
    fn percentiles_of_one_to_a_thousand_ms() {
        let mut r = Recorder::new();
        for ms in 1..=1000 {
            r.ended(Duration::from_millis(ms), &ok(ms));
        }
        let l = r.latency();
        // (value, expected, HDR's relative precision at 3 significant digits)
        let cases = [
            (l.p50, 0.500),
            (l.p90, 0.900),
            (l.p99, 0.990),
            (l.max, 1.000),
            (l.mean, 0.5005),
        ];
        for (got, expected) in cases {
            assert!(
                (got - expected).abs() <= expected * 0.001,
                "{got} vs {expected}"
            );
        }
    }

    #[test]
    fn endings_timeline_and_rates() {
        let mut r = Recorder::new();
        let secs = Duration::from_secs;
        r.started(secs(0));
        r.started(secs(0));
        r.started(secs(1));
        r.started(secs(1));
        r.ended(Duration::from_millis(500), &ok(500));
        let mut retried = ok(1500);
        retried.retried_503 = 2;
        r.ended(Duration::from_millis(1500), &retried);
        r.ended(
            Duration::from_millis(1600),
            &Attempt {
                ending: Ending::Status(StatusCode::SERVICE_UNAVAILABLE),
                latency: secs(1),
                retried_503: 0,
                bytes: 1 << 20,
            },
        );
        r.ended(
            secs(2),
            &Attempt {
                ending: Ending::Failed(ExchangeError::Transport),
                latency: secs(1),
                retried_503: 0,
                bytes: 1 << 20,
            },
        );
        r.not_started();
        let s = r.summary(
            serde_json::Value::Null,
            serde_json::Value::Null,
            1 << 20,
            String::new(),
        );
        assert_eq!(
            (s.uploads, s.succeeded, s.failed, s.not_started),
            (4, 2, 2, 1)
        );
        let endings: Vec<(&str, u64)> = s.endings.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(endings, [("201", 2), ("503", 1), ("error:transport", 1)]);
        assert_eq!((s.retried_503, s.succeeded_after_retry), (2, 1));
        assert_eq!(s.wall_s, 2.0);
        assert_eq!(s.uploads_per_s, 1.0);
        assert_eq!(s.mib_per_s, 1.0);
        let per_second: Vec<(u64, u64, u64)> = s
            .timeline
            .iter()
            .map(|t| (t.started, t.succeeded, t.failed))
            .collect();
        assert_eq!(per_second, [(2, 1, 0), (2, 1, 1), (0, 0, 1)]);
        assert_eq!(s.timeline[1].mean_latency_s, 1.5);
        assert_eq!(s.timeline[1].retried_503, 2);
    }

    #[test]
    fn empty_run_has_zero_rates() {
        let s = Recorder::new().summary(
            serde_json::Value::Null,
            serde_json::Value::Null,
            0,
            String::new(),
        );
        assert_eq!((s.uploads, s.uploads_per_s, s.latency_s.p99), (0, 0.0, 0.0));
    }
}
