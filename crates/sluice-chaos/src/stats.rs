//! What the proxy saw and did, in total and per second since it started, for
//! `GET /_chaos/stats`. At most an hour of seconds is kept.

use std::collections::BTreeMap;

use serde::Serialize;
use tokio::time::Instant;

use crate::operation::Operation;

const MAX_SECONDS: usize = 3600;

/// What happened to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Forwarded; the store answered 2xx or 3xx.
    StoreOk,
    /// Forwarded; the store answered 4xx or 5xx.
    StoreError,
    /// Could not reach the store; the client's connection was reset.
    Unreachable,
    /// Refused by the per-prefix rate cap with SlowDown.
    RateLimited,
    Slowdown,
    InternalError,
    ResetRequest,
    ResetResponse,
    Stall,
}

/// Counters of one second, or of the whole run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub requests: u64,
    pub store_ok: u64,
    pub store_error: u64,
    pub unreachable: u64,
    pub rate_limited: u64,
    pub slowdown: u64,
    pub internal_error: u64,
    pub reset_request: u64,
    pub reset_response: u64,
    pub stall: u64,
}

impl Counts {
    fn add(&mut self, event: Event) {
        self.requests += 1;
        let field = match event {
            Event::StoreOk => &mut self.store_ok,
            Event::StoreError => &mut self.store_error,
            Event::Unreachable => &mut self.unreachable,
            Event::RateLimited => &mut self.rate_limited,
            Event::Slowdown => &mut self.slowdown,
            Event::InternalError => &mut self.internal_error,
            Event::ResetRequest => &mut self.reset_request,
            Event::ResetResponse => &mut self.reset_response,
            Event::Stall => &mut self.stall,
        };
        *field += 1;
    }

    /// Answers that told the client to slow down: SlowDown injected or from the cap.
    pub fn throttled(&self) -> u64 {
        self.rate_limited + self.slowdown
    }
}

/// One second of the timeline.
#[derive(Debug, Clone, Serialize)]
pub struct Second {
    /// Seconds since the proxy started (or the stats were reset).
    pub second: u64,
    #[serde(flatten)]
    pub counts: Counts,
}

/// The JSON document of `GET /_chaos/stats`.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub elapsed_seconds: f64,
    pub totals: Counts,
    pub by_operation: BTreeMap<&'static str, Counts>,
    pub seconds: Vec<Second>,
}

impl Report {
    /// Requests of one operation seen so far.
    pub fn requests_of(&self, operation: Operation) -> u64 {
        self.by_operation
            .get(operation.name())
            .map_or(0, |c| c.requests)
    }
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct Stats {
    started: Instant,
    totals: Counts,
    by_operation: BTreeMap<Operation, Counts>,
    /// Seconds from `first_second` on.
    seconds: Vec<Counts>,
    first_second: u64,
}

impl Stats {
    pub(crate) fn new() -> Self {
        Stats {
            started: Instant::now(),
            totals: Counts::default(),
            by_operation: BTreeMap::new(),
            seconds: Vec::new(),
            first_second: 0,
        }
    }

    pub(crate) fn record(&mut self, operation: Operation, event: Event) {
        self.totals.add(event);
        self.by_operation.entry(operation).or_default().add(event);
        let second = self.started.elapsed().as_secs();
        let index = (second - self.first_second) as usize;
        if index >= self.seconds.len() {
            self.seconds.resize(index + 1, Counts::default());
        }
        self.seconds[index].add(event);
        if self.seconds.len() > MAX_SECONDS {
            let drop = self.seconds.len() - MAX_SECONDS;
            self.seconds.drain(..drop);
            self.first_second += drop as u64;
        }
    }

    pub(crate) fn report(&self) -> Report {
        Report {
            elapsed_seconds: self.started.elapsed().as_secs_f64(),
            totals: self.totals.clone(),
            by_operation: self
                .by_operation
                .iter()
                .map(|(op, counts)| (op.name(), counts.clone()))
                .collect(),
            seconds: self
                .seconds
                .iter()
                .enumerate()
                .map(|(i, counts)| Second {
                    second: self.first_second + i as u64,
                    counts: counts.clone(),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn counts_per_second_and_per_operation() {
        let mut stats = Stats::new();
        stats.record(Operation::PutObject, Event::StoreOk);
        stats.record(Operation::PutObject, Event::RateLimited);
        tokio::time::advance(Duration::from_millis(2100)).await;
        stats.record(Operation::UploadPart, Event::Slowdown);
        let report = stats.report();
        assert_eq!(report.totals.requests, 3);
        assert_eq!(report.totals.throttled(), 2);
        assert_eq!(report.seconds.len(), 3);
        assert_eq!(report.seconds[0].counts.store_ok, 1);
        assert_eq!(report.seconds[1].counts.requests, 0);
        assert_eq!(report.seconds[2].counts.slowdown, 1);
        assert_eq!(report.by_operation["put-object"].requests, 2);
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["seconds"][2]["second"], 2);
        assert_eq!(json["seconds"][2]["slowdown"], 1);
    }
}
