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
    /// Streams with a table, opened by [`Streams::open_tables`] (reading a
    /// table takes the store).
    with_tables: Arc<BTreeMap<String, sluice_streams::StreamConfig>>,
    /// What the streams share: the CPU pool and the records' memory.
    shared: Option<(CpuPool, sluice_upload::MemoryShare)>,
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
        let mut with_tables = BTreeMap::new();
        for (name, config) in configs {
            if config.table != sluice_streams::TableFormat::None {
                config
                    .validate()
                    .map_err(|e| ConfigError::new("streams", format!("[streams.{name}]: {e}")))?;
                with_tables.insert(name.clone(), config.clone());
                continue;
            }
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
            with_tables: Arc::new(with_tables),
            shared: Some((pool, memory)),
        })
    }

    /// Opens the streams that have a table: each reads its table (its
    /// schema, whether it may append) before taking records.
    pub async fn open_tables(&mut self, engine: &Engine) -> Result<(), ConfigError> {
        let (pool, memory) = self.shared.clone().unwrap_or_else(|| {
            (
                CpuPool::per_core(),
                sluice_streams::records_memory(engine.budget()),
            )
        });
        let mut by_name = (*self.by_name).clone();
        for (name, config) in self.with_tables.iter() {
            let stream = RecordStream::open(
                name,
                config.clone(),
                engine.clone(),
                memory.clone(),
                pool.clone(),
                None,
            )
            .await
            .map_err(|e| ConfigError::new("streams", format!("[streams.{name}]: {e}")))?;
            by_name.insert(name.clone(), stream);
        }
        self.by_name = Arc::new(by_name);
        self.with_tables = Arc::default();
        Ok(())
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
