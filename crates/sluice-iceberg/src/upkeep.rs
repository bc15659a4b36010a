//! Snapshot expiry: snapshots older than a retention are dropped from the
//! table's metadata (through the one commit loop, so a writer committing
//! meanwhile loses nothing), keeping the main branch's newest few and every
//! snapshot a branch or tag points at; then the manifest lists of the dropped
//! snapshots, their manifests no kept snapshot reads, and the data files only
//! those manifests named are deleted: time travel to a dropped snapshot ends,
//! the table as any kept snapshot has it stays whole.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::metadata::TableMetadata;
use crate::{Change, Committed, IcebergTable, TableError};

/// What an expiry did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpiryReport {
    /// The metadata version that dropped them (None: nothing to drop).
    pub version: Option<u64>,
    pub snapshots_dropped: usize,
    /// Manifest lists, manifests and data files deleted.
    pub files_deleted: usize,
}

/// `metadata` without the snapshots older than `older_than_ms` (ms since
/// the epoch), but for the main branch's newest `keep_last` (at least its
/// current one) and every ref's; None when none goes.
pub(crate) fn expired(
    mut metadata: TableMetadata,
    older_than_ms: i64,
    keep_last: usize,
    now_ms: i64,
) -> Option<TableMetadata> {
    let mut kept: BTreeSet<i64> = metadata
        .ancestry()
        .take(keep_last.max(1))
        .map(|s| s.snapshot_id)
        .collect();
    kept.extend(
        metadata
            .refs
            .values()
            .filter_map(|r| r["snapshot-id"].as_i64()),
    );
    kept.extend(
        metadata
            .snapshots
            .iter()
            .filter(|s| s.timestamp_ms >= older_than_ms)
            .map(|s| s.snapshot_id),
    );
    let before = metadata.snapshots.len();
    metadata.snapshots.retain(|s| kept.contains(&s.snapshot_id));
    if metadata.snapshots.len() == before {
        return None;
    }
    metadata.snapshot_log.retain(|entry| {
        entry["snapshot-id"]
            .as_i64()
            .is_some_and(|id| kept.contains(&id))
    });
    metadata.last_updated_ms = now_ms;
    Some(metadata)
}

impl IcebergTable {
    /// Drops the snapshots older than `retain` (keeping the main branch's
    /// newest `keep_last` and every ref's) and deletes what only they read.
    pub async fn expire_snapshots(
        &self,
        retain: Duration,
        keep_last: usize,
    ) -> Result<ExpiryReport, TableError> {
        let older_than_ms = crate::now_ms() - retain.as_millis() as i64;
        let outcome = self
            .commit(Change::Expire {
                older_than_ms,
                keep_last,
            })
            .await?;
        let (Committed::Version(version), Some(before)) = (outcome.committed, outcome.before)
        else {
            return Ok(ExpiryReport::default());
        };
        let after: TableMetadata = {
            let key = self.metadata_key(version);
            let bytes = self.read(&key).await?;
            serde_json::from_slice(&bytes).map_err(|e| self.malformed(&key, e))?
        };
        let kept_ids: BTreeSet<i64> = after.snapshots.iter().map(|s| s.snapshot_id).collect();
        let dropped: Vec<_> = before
            .snapshots
            .iter()
            .filter(|s| !kept_ids.contains(&s.snapshot_id))
            .collect();
        // What the kept snapshots read (whoever made them).
        let mut kept_manifests = BTreeSet::new();
        for snapshot in &after.snapshots {
            for m in self.manifests_of(&snapshot.manifest_list).await? {
                kept_manifests.insert(m.path);
            }
        }
        let mut kept_files = BTreeSet::new();
        for path in &kept_manifests {
            kept_files.extend(self.files_of(path).await?);
        }
        let mut doomed = BTreeSet::new();
        for snapshot in &dropped {
            doomed.insert(snapshot.manifest_list.clone());
            for m in self.manifests_of(&snapshot.manifest_list).await? {
                if kept_manifests.contains(&m.path) {
                    continue;
                }
                for file in self.files_of(&m.path).await? {
                    if !kept_files.contains(&file) {
                        doomed.insert(file);
                    }
                }
                doomed.insert(m.path);
            }
        }
        let mut report = ExpiryReport {
            version: Some(version),
            snapshots_dropped: dropped.len(),
            files_deleted: 0,
        };
        for location in doomed {
            let key = self.key_of(&location)?;
            self.store
                .delete_object(&key)
                .await
                .map_err(|e| self.store_error(e))?;
            report.files_deleted += 1;
        }
        tracing::info!(table = %self.layout.location, version, dropped = report.snapshots_dropped, deleted = report.files_deleted, "snapshots expired");
        Ok(report)
    }
}
