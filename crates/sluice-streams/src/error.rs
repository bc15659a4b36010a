//! The errors of record streams: configuration refused at start-up, records
//! refused as input, and batches the store did not take.

use std::sync::Arc;

use sluice_upload::TransferError;

/// A stream setting that cannot work, naming the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stream setting `{key}`: {reason}")]
pub struct StreamConfigError {
    pub key: &'static str,
    pub reason: String,
}

/// One record that is not a JSON value (or is too large), by its 1-based line
/// (NDJSON) or element (JSON array) number.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{place} {number}: {reason}")]
pub struct BadRecord {
    /// "line" or "element".
    pub place: &'static str,
    pub number: u64,
    pub reason: String,
}

/// Why records were not accepted, or not stored.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StreamError {
    /// A body that cannot be read as records (bad compression, not a JSON
    /// array, too large once decoded).
    #[error("{0}")]
    BadInput(String),
    /// Invalid records and no dead letter to put them in; nothing was stored.
    #[error("{first} ({count} invalid record(s) in all)")]
    BadRecords { first: BadRecord, count: u64 },
    /// The batch holding the records was not stored (the store failed or
    /// refused); the records are not acknowledged.
    #[error("the batch was not stored: {0}")]
    NotStored(Arc<TransferError>),
    /// The batch was stored but not committed to the stream's table: its
    /// records are not acknowledged (the file is an orphan, for vacuum).
    #[error("the batch was stored but not added to its table: {0}")]
    NotCommitted(Arc<crate::table::stream_table::CommitError>),
    /// The stream is closing and takes no more records.
    #[error("the stream is closing")]
    Closed,
    /// No memory to decode the body now; retry later.
    #[error("the memory budget is full; retry later")]
    Busy,
}
