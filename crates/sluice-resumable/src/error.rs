//! What a resumable-upload operation can fail with. Protocol refusals carry the
//! `TusError` the protocol layer defined; everything else says which part of the
//! machinery failed. No HTTP here: the gateway maps these once, in its
//! conversions module.

use std::time::Duration;

use sluice_store::StoreError;
use sluice_tus::TusError;
use sluice_upload::TransferError;

#[derive(Debug, thiserror::Error)]
pub enum ResumableError {
    /// The request broke a rule of the protocol (offset, length, checksum, ...).
    #[error(transparent)]
    Protocol(#[from] TusError),
    /// Another request holds the upload; its lease ends in about `retry_after`.
    #[error("another request is writing to this upload")]
    Locked { retry_after: Duration },
    /// The upload's record changed under this request (another writer, or a lock lost).
    #[error("the upload changed during this request; ask for its offset and retry")]
    Conflict,
    /// The request body failed (client gone, idle); what arrived before is kept.
    #[error("the request body could not be read")]
    Body(#[source] std::io::Error),
    /// The stored state contradicts itself (an unreadable record, a missing segment).
    #[error("the upload's stored state is inconsistent: {0}")]
    Corrupt(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Transfer(TransferError),
}

impl From<TransferError> for ResumableError {
    fn from(error: TransferError) -> Self {
        match error {
            TransferError::Source(io) => ResumableError::Body(io),
            other => ResumableError::Transfer(other),
        }
    }
}

impl ResumableError {
    pub fn not_found() -> Self {
        ResumableError::Protocol(TusError::NotFound)
    }

    /// Whether the upload does not exist (or is not the caller's to see).
    pub fn is_not_found(&self) -> bool {
        matches!(self, ResumableError::Protocol(TusError::NotFound))
    }
}
