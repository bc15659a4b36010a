//! Per-stage counters of one stream, read by the gateway's `/metrics` and by
//! `sluice ingest`'s summary: records and bytes in, parse and compression time,
//! batches stored (their records and bytes, so the mean fill), flush time,
//! failed batches, partitions open and flushed early for room, and (for a
//! Kafka source) the consumer lag.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crate::stream::StoredBatch;

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
    /// (high watermark less committed offset, summed); 0 for other sources.
    pub consumer_lag: u64,
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

    pub(crate) fn stored(&self, batch: &StoredBatch) {
        self.batches.fetch_add(1, Relaxed);
        self.batch_records.fetch_add(batch.records, Relaxed);
        self.batch_record_bytes
            .fetch_add(batch.record_bytes, Relaxed);
        self.batch_stored_bytes
            .fetch_add(batch.outcome.size, Relaxed);
        self.flush_nanos
            .fetch_add(batch.flush_time.as_nanos() as u64, Relaxed);
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
            consumer_lag: self.consumer_lag.load(Relaxed),
        }
    }
}
