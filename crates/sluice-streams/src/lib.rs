//! sluice-streams turns continuous records into well-sized, compressed,
//! partitioned objects: the record streams of `POST /v1/streams/{stream}` and
//! `sluice ingest`. A [`RecordStream`] keeps one open batch per partition of its
//! key template; records are checked as JSON ([`records`]), batched, compressed
//! frame by frame on a [`CpuPool`] ([`compress`]) and streamed into one object
//! per batch through the transfer engine, under its memory budget. A batch is
//! flushed on size, record count or age, and every caller whose records it holds
//! is acknowledged by the same flush (group commit, [`Ticket`]).
//!
//! It knows stores only through the engine, and nothing of HTTP.

pub mod compress;
mod config;
mod error;
pub mod ingest;
mod json_key;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod records;
mod stats;
mod stream;
pub mod table;
mod template;

pub use compress::CpuPool;
pub use config::{
    Compression, EmptyMessages, RecordFormat, RecordSource, StreamConfig, TableFormat,
};
pub use error::{BadRecord, StreamConfigError, StreamError};
pub use stats::{prometheus_lines, StatsSnapshot, StreamStats};
pub use stream::{
    records_memory, validate_stream_name, BatchResult, DeadMessage, OnStored, RecordStream,
    RequestKey, StoredBatch, Ticket,
};
pub use template::{PartitionKey, StreamKeyTemplate};
