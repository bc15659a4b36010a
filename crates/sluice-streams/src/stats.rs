//! Per-stage counters of one stream, read by the gateway's `/metrics` and by
//! `sluice ingest`'s summary: records and bytes in, parse and compression time,
//! batches stored (their records and bytes, so the mean fill), flush time,
//! failed batches, partitions open and flushed early for room, and (for a
//! Kafka source) the consumer lag.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The stream counters rendered at scrape time: (metric, type, help, value).
type StreamLine = (
    &'static str,
    &'static str,
    &'static str,
    fn(&StatsSnapshot) -> Option<f64>,
);

/// Every per-stream figure, as Prometheus metrics (docs/METRICS.md).
const STREAM_LINES: &[StreamLine] = &[
    (
        "sluice_stream_records_total",
        "counter",
        "Records taken into batches",
        |s| Some(s.records_in as f64),
    ),
    (
        "sluice_stream_record_bytes_total",
        "counter",
        "Bytes of records taken, before compression",
        |s| Some(s.bytes_in as f64),
    ),
    (
        "sluice_stream_rejected_records_total",
        "counter",
        "Invalid records (refused with their request, or dead-lettered)",
        |s| Some(s.rejected as f64),
    ),
    (
        "sluice_stream_parse_seconds_total",
        "counter",
        "CPU time spent decoding and checking records",
        |s| Some(s.parse_seconds),
    ),
    (
        "sluice_stream_compress_seconds_total",
        "counter",
        "CPU time spent compressing batches",
        |s| Some(s.compress_seconds),
    ),
    (
        "sluice_stream_batches_total",
        "counter",
        "Batches stored as objects",
        |s| Some(s.batches as f64),
    ),
    (
        "sluice_stream_batch_records_total",
        "counter",
        "Records in stored batches (divide by batches for the mean fill)",
        |s| Some(s.batch_records as f64),
    ),
    (
        "sluice_stream_batch_record_bytes_total",
        "counter",
        "Record bytes in stored batches, before compression",
        |s| Some(s.batch_record_bytes as f64),
    ),
    (
        "sluice_stream_stored_bytes_total",
        "counter",
        "Bytes of stored batch objects, after compression",
        |s| Some(s.batch_stored_bytes as f64),
    ),
    (
        "sluice_stream_flush_seconds_total",
        "counter",
        "Sum over stored batches of the time from flush to stored object",
        |s| Some(s.flush_seconds),
    ),
    (
        "sluice_stream_failed_batches_total",
        "counter",
        "Batches the store did not take (their requests got 503)",
        |s| Some(s.failed as f64),
    ),
    (
        "sluice_stream_evicted_batches_total",
        "counter",
        "Batches flushed early to make room under max_open_partitions",
        |s| Some(s.evicted as f64),
    ),
    (
        "sluice_stream_open_partitions",
        "gauge",
        "Batches open now",
        |s| Some(s.open_partitions as f64),
    ),
    (
        "sluice_stream_consumer_lag",
        "gauge",
        "Kafka source: messages in its partitions not yet stored and committed",
        |s| s.consumer_lag.map(|lag| lag as f64),
    ),
];

/// The Prometheus text-format lines (HELP, TYPE and one sample per stream)
/// of every stream figure; a figure no stream has (consumer lag without a
/// Kafka source) is left out.
pub fn prometheus_lines(snapshots: &[(&str, StatsSnapshot)]) -> String {
    use std::fmt::Write;
    let mut lines = String::new();
    for (name, kind, help, value) in STREAM_LINES {
        let samples: Vec<(&str, f64)> = snapshots
            .iter()
            .filter_map(|(stream, snapshot)| value(snapshot).map(|v| (*stream, v)))
            .collect();
        if samples.is_empty() {
            continue;
        }
        let family = name.strip_suffix("_total").unwrap_or(name);
        let _ = writeln!(lines, "# HELP {family} {help}.\n# TYPE {family} {kind}");
        for (stream, value) in samples {
            let _ = writeln!(lines, "{name}{{stream=\"{stream}\"}} {value}");
        }
    }
    lines
}

#[derive(Debug, Default)]
pub struct StreamStats {
    records_in: AtomicU64,
    bytes_in: AtomicU64,
    rejected: AtomicU64,
    parse_nanos: AtomicU64,
    compress_nanos: AtomicU64,
    batches: AtomicU64,
    batch_records: AtomicU64,
    batch_record_bytes: AtomicU64,
    batch_stored_bytes: AtomicU64,
    flush_nanos: AtomicU64,
    failed: AtomicU64,
    evicted: AtomicU64,
    open_partitions: AtomicU64,
    consumer_lag: AtomicU64,
    /// Whether a Kafka source has set the lag (other sources have none).
    has_consumer_lag: AtomicBool,
}

/// A copy of the counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StatsSnapshot {
    pub records_in: u64,
    pub bytes_in: u64,
    /// Invalid records (refused or dead-lettered).
    pub rejected: u64,
    pub parse_seconds: f64,
    pub compress_seconds: f64,
    pub batches: u64,
    pub batch_records: u64,
    pub batch_record_bytes: u64,
    pub batch_stored_bytes: u64,
    /// Sum over batches of flush → stored.
    pub flush_seconds: f64,
    pub failed: u64,
    /// Batches flushed early to make room for another partition.
    pub evicted: u64,
    pub open_partitions: u64,
    /// Kafka source: messages in its partitions not yet stored and committed
    /// (high watermark less committed offset, summed); None for other sources.
    pub consumer_lag: Option<u64>,
}

impl StreamStats {
    pub(crate) fn accepted(&self, records: u64, bytes: u64, dead_letter: bool) {
        if !dead_letter {
            self.records_in.fetch_add(records, Relaxed);
            self.bytes_in.fetch_add(bytes, Relaxed);
        }
    }

    /// Counts invalid records.
    pub fn rejected(&self, records: u64) {
        self.rejected.fetch_add(records, Relaxed);
    }

    /// Counts time spent parsing and checking records.
    pub fn parsed(&self, took: Duration) {
        self.parse_nanos.fetch_add(took.as_nanos() as u64, Relaxed);
    }

    pub(crate) fn compressed(&self, took: Duration) {
        self.compress_nanos
            .fetch_add(took.as_nanos() as u64, Relaxed);
    }

    /// A batch stored: its records, their bytes, the object's bytes, and the
    /// time from its flush to the object being stored.
    pub(crate) fn stored(
        &self,
        records: u64,
        record_bytes: u64,
        stored_bytes: u64,
        took: Duration,
    ) {
        self.batches.fetch_add(1, Relaxed);
        self.batch_records.fetch_add(records, Relaxed);
        self.batch_record_bytes.fetch_add(record_bytes, Relaxed);
        self.batch_stored_bytes.fetch_add(stored_bytes, Relaxed);
        self.flush_nanos.fetch_add(took.as_nanos() as u64, Relaxed);
    }

    pub(crate) fn failed(&self) {
        self.failed.fetch_add(1, Relaxed);
    }

    pub(crate) fn evicted(&self) {
        self.evicted.fetch_add(1, Relaxed);
    }

    pub(crate) fn set_open_partitions(&self, open: usize) {
        self.open_partitions.store(open as u64, Relaxed);
    }

    /// Sets the consumer lag (the Kafka source, from librdkafka's statistics).
    pub fn set_consumer_lag(&self, lag: u64) {
        self.consumer_lag.store(lag, Relaxed);
        self.has_consumer_lag.store(true, Relaxed);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let seconds = |n: &AtomicU64| n.load(Relaxed) as f64 / 1e9;
        StatsSnapshot {
            records_in: self.records_in.load(Relaxed),
            bytes_in: self.bytes_in.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            parse_seconds: seconds(&self.parse_nanos),
            compress_seconds: seconds(&self.compress_nanos),
            batches: self.batches.load(Relaxed),
            batch_records: self.batch_records.load(Relaxed),
            batch_record_bytes: self.batch_record_bytes.load(Relaxed),
            batch_stored_bytes: self.batch_stored_bytes.load(Relaxed),
            flush_seconds: seconds(&self.flush_nanos),
            failed: self.failed.load(Relaxed),
            evicted: self.evicted.load(Relaxed),
            open_partitions: self.open_partitions.load(Relaxed),
            consumer_lag: self
                .has_consumer_lag
                .load(Relaxed)
                .then(|| self.consumer_lag.load(Relaxed)),
        }
    }
}
