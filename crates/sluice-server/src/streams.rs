//! Record streams at the gateway: one [`RecordStream`] per `[streams.NAME]`,
//! all on the gateway's engine (its memory budget and store handle) and one CPU
//! pool. Every stored batch is announced by the engine to the completion point
//! as a `stream_batch` (metrics, log, `upload.completed` event with the batch's
//! totals) before its requests are acknowledged. On shutdown the streams flush
//! at once, so that waiting requests are answered within the grace period.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_streams::{CpuPool, RecordStream, StatsSnapshot};
use sluice_upload::Engine;

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
    ) -> Result<Streams, ConfigError> {
        let pool = CpuPool::per_core();
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
                None,
            )
            .map_err(|e| ConfigError::new("streams", format!("[streams.{name}]: {e}")))?;
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
