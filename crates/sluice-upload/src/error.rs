//! The engine's errors: configuration refused before any request, and failures
//! of a transfer, each worded for the person who ran it.

use std::io;

use sluice_store::StoreError;

/// A setting or input refused before the first request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("part size {0} bytes is outside S3's limits (5 MiB to 5 GiB)")]
    PartSize(u64),
    #[error("threshold {0} bytes is above S3's 5 GiB limit for a single PUT")]
    Threshold(u64),
    #[error("concurrency {0} is outside 1..=1024")]
    Concurrency(usize),
    #[error("memory limit {limit} bytes is too small: it must hold the threshold plus one part ({needed} bytes)")]
    MemoryLimit { limit: u64, needed: u64 },
    #[error("retry attempts {0} is outside 1..=100")]
    RetryAttempts(u32),
    #[error("transfers in flight: {0}")]
    Tuning(&'static str),
    #[error("adaptive concurrency: {0}")]
    Adaptive(&'static str),
    #[error("the key is empty")]
    EmptyKey,
    #[error("the key is {0} bytes long; S3 allows at most 1024")]
    KeyTooLong(usize),
    #[error("{0} bytes is more than S3's maximum object size (5 TiB)")]
    ObjectTooLarge(u64),
    #[error("the memory share of one upload ({share} bytes) must hold the threshold plus one part ({needed} bytes) and fit in the memory limit ({limit} bytes)")]
    MemoryShare { share: u64, needed: u64, limit: u64 },
    #[error("an object of {size} bytes needs parts of {part} bytes, more than one upload may hold in memory ({budget} bytes); raise the memory limit")]
    PartExceedsBudget { size: u64, part: u64, budget: u64 },
}

/// Why an upload or download failed.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The store refused or failed a request (after retries, if it was transient).
    #[error("{operation} failed")]
    Store {
        operation: &'static str,
        #[source]
        source: StoreError,
    },
    #[error("reading the source failed")]
    Source(#[source] io::Error),
    #[error("writing the destination failed")]
    Destination(#[source] io::Error),
    #[error("the source ended after {actual} bytes but {expected} were announced")]
    SourceShort { expected: u64, actual: u64 },
    #[error("the source holds more than the {expected} bytes announced")]
    SourceLong { expected: u64 },
    #[error("the stream is larger than this configuration allows ({0} bytes); raise the part size or the memory limit")]
    StreamTooLarge(u64),
    #[error("the object changed while it was being downloaded")]
    ObjectChanged,
    /// The source of a multipart copy is no longer the version listed.
    #[error("the source object changed since it was listed; nothing was stored")]
    CopySourceChanged,
    /// The file being uploaded was written, resized or replaced while read:
    /// nothing was stored (see `file_stamp`).
    #[error("the file {0} while it was being uploaded; nothing was stored")]
    SourceChanged(String),
    #[error("checksum mismatch: the store says {expected}, the data read gives {actual}")]
    ChecksumMismatch { expected: String, actual: String },
    #[error("the transfer was cancelled")]
    Cancelled,
    /// A part's task ended without an answer (it panicked): a bug, not the store.
    #[error("a part task failed: {0}")]
    PartTask(String),
}

impl TransferError {
    pub(crate) fn store(operation: &'static str) -> impl FnOnce(StoreError) -> TransferError {
        move |source| TransferError::Store { operation, source }
    }

    /// The store error underneath, if any.
    pub fn store_error(&self) -> Option<&StoreError> {
        match self {
            TransferError::Store { source, .. } => Some(source),
            _ => None,
        }
    }
}
