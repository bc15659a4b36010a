//! Progress reports for callers (a progress bar, metrics): bytes and parts done.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// A snapshot of a transfer's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes the store has acknowledged (uploads) or written out (downloads).
    pub bytes_done: u64,
    /// Parts (or ranges) finished.
    pub parts_done: u32,
    /// Total size, when known.
    pub total_bytes: Option<u64>,
}

/// Receives progress reports; called from the engine's tasks, so keep it cheap.
pub type ProgressFn = Arc<dyn Fn(Progress) + Send + Sync>;

/// Accumulates progress across concurrent tasks and reports each step.
#[derive(Clone)]
pub(crate) struct Tracker {
    bytes: Arc<AtomicU64>,
    parts: Arc<AtomicU32>,
    total: Option<u64>,
    report: Option<ProgressFn>,
}

impl Tracker {
    pub(crate) fn new(total: Option<u64>, report: Option<ProgressFn>) -> Self {
        Tracker {
            bytes: Arc::default(),
            parts: Arc::default(),
            total,
            report,
        }
    }

    pub(crate) fn set_total(&mut self, total: u64) {
        self.total = Some(total);
    }

    /// Records `bytes` more done; `part` when a part or range finished with them.
    pub(crate) fn advance(&self, bytes: u64, part: bool) {
        let bytes_done = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let parts_done = if part {
            self.parts.fetch_add(1, Ordering::Relaxed) + 1
        } else {
            self.parts.load(Ordering::Relaxed)
        };
        if let Some(report) = &self.report {
            report(Progress {
                bytes_done,
                parts_done,
                total_bytes: self.total,
            });
        }
    }
}
