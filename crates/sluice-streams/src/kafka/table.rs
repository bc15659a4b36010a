//! Kafka into a table (Delta or Iceberg), exactly once: the table, not the consumer group,
//! says where each partition resumes. Each partition has an application
//! transaction in the table (`sluice-<group>-<topic>-<partition>`) whose
//! version is the partition's next offset, committed with the files that
//! hold the records before it. On assignment the rebalance callback reads
//! those versions and starts each partition there; every commit then names
//! the version it follows, so an owner that lost the partition (a revoked
//! member still running) finds the table moved, is fenced, and its files
//! never join. The group's offsets are committed after the table's, as a hint
//! for lag monitors only. A file stored by a run killed before its commit is
//! an orphan: the replay writes its records again under a new key, and
//! `sluice tables vacuum` removes the orphan.

use std::collections::HashMap;
use std::sync::Mutex;

use rdkafka::{Offset, TopicPartitionList};

use crate::table::stream_table::{CommitError, StreamTable};

/// Where the assigned partitions resume, as the table says.
pub(super) struct TableOffsets {
    table: StreamTable,
    /// `sluice-<group>-<topic>-`.
    app_prefix: String,
    runtime: tokio::runtime::Handle,
    /// Per partition, the table's version when it was last assigned here.
    assigned: Mutex<HashMap<i32, Result<Option<i64>, CommitError>>>,
}

impl TableOffsets {
    pub(super) fn new(
        table: StreamTable,
        group: &str,
        topic: &str,
        runtime: tokio::runtime::Handle,
    ) -> TableOffsets {
        TableOffsets {
            table,
            app_prefix: format!("sluice-{group}-{topic}-"),
            runtime,
            assigned: Mutex::new(HashMap::new()),
        }
    }

    pub(super) fn table(&self) -> &StreamTable {
        &self.table
    }

    /// The application transaction of `partition`.
    pub(super) fn app_id(&self, partition: i32) -> String {
        format!("{}{partition}", self.app_prefix)
    }

    /// In the rebalance callback (on the poller's blocking thread): reads the
    /// table and starts each newly assigned partition at its version.
    pub(super) fn on_assign(&self, topic: &str, list: &TopicPartitionList) {
        let versions = self.runtime.block_on(self.table.txn_versions());
        let mut assigned = self.lock();
        for mut element in list.elements_for_topic(topic) {
            let partition = element.partition();
            let mut found = match &versions {
                Ok(versions) => Ok(versions.get(&self.app_id(partition)).copied()),
                Err(e) => Err(e.clone()),
            };
            if let Ok(Some(next)) = found {
                if let Err(e) = element.set_offset(Offset::Offset(next)) {
                    // Started elsewhere, its commits would not follow the
                    // table's: the run stops at its first message.
                    found = Err(CommitError::Position {
                        partition,
                        reason: format!("cannot start at offset {next}: {e}"),
                    });
                }
            }
            tracing::info!(partition, table_offset = ?found.as_ref().ok(), "partition assigned; resuming where the table says");
            assigned.insert(partition, found);
        }
    }

    /// The table's version for `partition` when it was assigned (what its
    /// first commit here must follow); the table is read when the
    /// assignment did not.
    pub(super) async fn taken_up(&self, partition: i32) -> Result<Option<i64>, CommitError> {
        let known = self.lock().get(&partition).cloned();
        match known {
            Some(found) => found,
            None => self.table.txn_version(&self.app_id(partition)).await,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, Result<Option<i64>, CommitError>>> {
        self.assigned.lock().unwrap_or_else(|e| e.into_inner())
    }
}
