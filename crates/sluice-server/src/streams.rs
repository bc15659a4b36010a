//! Record streams at the gateway: one [`RecordStream`] per `[streams.NAME]`,
//! all on the gateway's engine (its memory budget and store handle) and one CPU
//! pool. Every stored batch ends at the one completion point as a
//! `stream_batch` completion (metrics, log, `upload.completed` event) before
//! its requests are acknowledged. On shutdown the streams flush at once, so
//! that waiting requests are answered within the grace period.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_streams::{CpuPool, OnStored, RecordStream, StatsSnapshot, StoredBatch};
use sluice_upload::Engine;

use crate::completion::{Completion, CompletionPoint, UploadKind};
use crate::config::ConfigError;

/// The gateway's streams, by name.
#[derive(Clone, Default)]
pub struct Streams {
    by_name: Arc<BTreeMap<String, RecordStream>>,
}

impl Streams {
    pub fn new(
        configs: &BTreeMap<String, sluice_streams::StreamConfig>,
        engine: &Engine,
        completion: &CompletionPoint,
    ) -> Result<Streams, ConfigError> {
        let pool = CpuPool::per_core();
        let completion = completion.clone();
        let on_stored: OnStored = Arc::new(move |batch: Arc<StoredBatch>| {
            let completion = completion.clone();
            Box::pin(async move {
                if let Err(e) = completion.complete(&completed(&batch)).await {
                    // The records are stored: the batch stands, its event is lost.
                    tracing::error!(key = %batch.key, error = %e, "batch stored, its event not recorded");
                }
            })
        });
        // One share for every stream's records: half the budget together.
        let memory = sluice_streams::records_memory(engine.budget());
        let mut by_name = BTreeMap::new();
        for (name, config) in configs {
            let stream = RecordStream::new(
                name,
                config.clone(),
                engine.clone(),
                memory.clone(),
                pool.clone(),
                Some(on_stored.clone()),
            )
            .map_err(|e| ConfigError {
                key: "streams",
                reason: format!("[streams.{name}]: {e}"),
            })?;
            by_name.insert(name.clone(), stream);
        }
        Ok(Streams {
            by_name: Arc::new(by_name),
        })
    }

    pub fn get(&self, name: &str) -> Option<&RecordStream> {
        self.by_name.get(name)
    }

    /// Each stream's counters.
    pub fn stats(&self) -> Vec<(String, Arc<sluice_streams::StreamStats>)> {
        self.by_name
            .iter()
            .map(|(name, stream)| (name.clone(), stream.stats().clone()))
            .collect()
    }

    /// Each stream's counters now.
    pub fn snapshots(&self) -> Vec<(String, StatsSnapshot)> {
        self.by_name
            .iter()
            .map(|(name, stream)| (name.clone(), stream.stats().snapshot()))
            .collect()
    }

    /// Flushes every open batch (shutdown begins: answer the waiting requests).
    pub fn flush_all(&self) {
        self.by_name.values().for_each(RecordStream::flush);
    }

    /// Takes no more records and waits for every batch to be stored or failed.
    pub async fn close_all(&self) {
        futures::future::join_all(self.by_name.values().map(RecordStream::close)).await;
    }
}

/// A stored batch as a completion.
fn completed(batch: &StoredBatch) -> Completion {
    let mut completion = Completion::new(UploadKind::StreamBatch, &batch.outcome);
    completion.content_type = Some(batch.compression.content_type(batch.dead_letter).into());
    let metadata = &mut completion.metadata;
    metadata.insert("stream".into(), batch.stream.clone());
    metadata.insert("records".into(), batch.records.to_string());
    metadata.insert("record_bytes".into(), batch.record_bytes.to_string());
    metadata.insert("first_offset".into(), batch.first_offset.to_string());
    metadata.insert("last_offset".into(), batch.last_offset.to_string());
    if batch.dead_letter {
        metadata.insert("dead_letter".into(), "true".into());
    }
    completion
}
