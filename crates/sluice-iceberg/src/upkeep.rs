//! Snapshot expiry: snapshots older than a retention are dropped from the
//! table's metadata (through the one commit loop, so a writer committing
//! meanwhile loses nothing), keeping the main branch's newest few and every
//! snapshot a branch or tag points at; then the manifest lists of the dropped
//! snapshots, their manifests no kept snapshot reads, and the data files only
//! those manifests named are deleted: time travel to a dropped snapshot ends,
//! the table as any kept snapshot has it stays whole. The newest snapshot
//! sluice made (whose summary holds its writers' transactions) stays with
//! the history after it, whatever its age.
//!
//! Orphan-file removal: data files and manifests under the table's root
//! that no snapshot of the table reads (a writer's that lost its commit, a
//! compaction refused), deleted once older than a retention, so that a file
//! stored for a commit still being made is never one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::metadata::TableMetadata;
use crate::{Change, Committed, IcebergTable, TableError};
pub use sluice_table::upkeep::VacuumReport;

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
    // The newest snapshot sluice made, and the history after it: the
    // transactions of every writer are read there (a Kafka partition's
    // offset, a writer's last batch); without it they would start over.
    let mut after_sluice = Vec::new();
    for snapshot in metadata.ancestry() {
        after_sluice.push(snapshot.snapshot_id);
        if snapshot.summary.contains_key(crate::TRANSACTIONS) {
            kept.extend(after_sluice.drain(..));
            break;
        }
    }
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

/// The table properties that say how long snapshots are kept, and how many
/// of the main branch at least, with Iceberg's defaults (5 days, 1).
const MAX_SNAPSHOT_AGE_MS: (&str, i64) = ("history.expire.max-snapshot-age-ms", 432_000_000);
const MIN_SNAPSHOTS_TO_KEEP: (&str, i64) = ("history.expire.min-snapshots-to-keep", 1);

/// How often a writer expires snapshots on its own: every this many
/// versions it made.
pub const EXPIRE_EVERY: u64 = 100;

impl IcebergTable {
    /// After this writer made `version`: every [`EXPIRE_EVERY`] versions,
    /// snapshots past the table's `history.expire.max-snapshot-age-ms` go
    /// (keeping `history.expire.min-snapshots-to-keep`), off the commit's
    /// way, so that a table committed to every second keeps its metadata
    /// small without anyone's upkeep.
    pub fn after_commit(self: &Arc<Self>, version: u64) {
        if version == 0 || version % EXPIRE_EVERY != 0 {
            return;
        }
        let table = self.clone();
        tokio::spawn(async move {
            match table.expire(None, None).await {
                Ok(report) if report.snapshots_dropped > 0 => tracing::info!(
                    table = %table.layout().location,
                    dropped = report.snapshots_dropped,
                    files_deleted = report.files_deleted,
                    "snapshots past the table's retention expired"
                ),
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(%error, "snapshots not expired (the next writer's turn will)")
                }
            }
        });
    }

    /// [`IcebergTable::expire_snapshots`] with the table's own retention
    /// where `retain` or `keep_last` is not given: its
    /// `history.expire.max-snapshot-age-ms` and
    /// `history.expire.min-snapshots-to-keep` (Iceberg's defaults without
    /// them: 5 days, 1).
    pub async fn expire(
        &self,
        retain: Option<Duration>,
        keep_last: Option<usize>,
    ) -> Result<ExpiryReport, TableError> {
        let Some((_, metadata)) = self.latest().await? else {
            return Ok(ExpiryReport::default());
        };
        let property = |(name, default): (&str, i64)| {
            metadata
                .properties
                .get(name)
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(default)
                .max(0)
        };
        let retain =
            retain.unwrap_or_else(|| Duration::from_millis(property(MAX_SNAPSHOT_AGE_MS) as u64));
        let keep = keep_last.unwrap_or_else(|| property(MIN_SNAPSHOTS_TO_KEEP) as usize);
        self.expire_snapshots(retain, keep.max(1)).await
    }

    /// Drops the snapshots older than `retain` (keeping the main branch's
    /// newest `keep_last` and every ref's) and deletes what only they read.
    pub async fn expire_snapshots(
        &self,
        retain: Duration,
        keep_last: usize,
    ) -> Result<ExpiryReport, TableError> {
        let older_than_ms = self.now_ms() - retain.as_millis() as i64;
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
            // A file outside the store (another writer's) is not sluice's
            // to delete.
            let Ok(key) = self.key_of(&location) else {
                continue;
            };
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

impl IcebergTable {
    /// Deletes the data files (`*.parquet` outside `metadata/`) and manifests (`metadata/*.avro`)
    /// under the table's root that no snapshot of the latest metadata reads
    /// and that are older than `retain` (nothing in a dry run). Metadata
    /// versions, the version hint and hidden files (`_`, `.`) are never
    /// touched. Refused when the table names a file outside the store's
    /// root (its location written another way): that file could not be
    /// told from an orphan.
    pub async fn remove_orphans(
        &self,
        retain: Duration,
        dry_run: bool,
    ) -> Result<VacuumReport, TableError> {
        let root = format!("{}/", self.layout.location);
        // Listed first: a file stored after the listing is not seen, and one
        // committed before the metadata is read below is referenced.
        let listed = sluice_store::list_all(self.store.as_ref(), &root)
            .await
            .map_err(|e| self.store_error(e))?;
        let mut report = VacuumReport::default();
        let Some((_, metadata)) = self.latest().await? else {
            return Ok(report);
        };
        let mut referenced = BTreeSet::new();
        let mut manifests = BTreeSet::new();
        let key = |location: &str| {
            self.key_of(location).map_err(|_| TableError::Upkeep {
                root: self.layout.location.clone(),
                reason: format!(
                    "the table names {location}, which is not under {}; orphan-file removal \
                     cannot tell the table's files from orphans, and removes none",
                    self.root_uri
                ),
            })
        };
        for snapshot in &metadata.snapshots {
            referenced.insert(key(&snapshot.manifest_list)?);
            for m in self.manifests_of(&snapshot.manifest_list).await? {
                if manifests.insert(m.path.clone()) {
                    referenced.insert(key(&m.path)?);
                    for file in self.files_of(&m.path).await? {
                        referenced.insert(key(&file)?);
                    }
                }
            }
        }
        let cutoff = std::time::SystemTime::now() - retain;
        for object in listed {
            let rest = &object.key[root.len()..];
            // Data files, and manifests and lists; not statistics files
            // (`metadata/*.parquet`, `*.puffin`), which the metadata names
            // apart from the snapshots.
            let in_metadata = rest.starts_with("metadata/");
            let candidate = !rest
                .split('/')
                .any(|s| s.starts_with('_') || s.starts_with('.'))
                && (!in_metadata && rest.ends_with(".parquet")
                    || in_metadata && rest.ends_with(".avro"));
            if !candidate {
                report.not_data += usize::from(!rest.starts_with("metadata/"));
            } else if referenced.contains(&object.key) {
                report.referenced += 1;
            } else if object.last_modified > cutoff {
                report.kept_young += 1;
            } else {
                report.deleted.push(object.key);
            }
        }
        if !dry_run {
            for key in &report.deleted {
                self.store
                    .delete_object(key)
                    .await
                    .map_err(|e| self.store_error(e))?;
            }
            tracing::info!(table = %self.layout.location, deleted = report.deleted.len(), "orphan files removed");
        }
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::metadata::Snapshot;

    /// A main branch of snapshots 1..=n, one a day, `by_sluice` of them with
    /// sluice's transactions in their summaries.
    fn history(n: i64, by_sluice: &[i64]) -> TableMetadata {
        let (schema, last) = crate::schema::Schema::from_arrow(&arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("id", arrow_schema::DataType::Int64, true),
        ]))
        .unwrap();
        let mut metadata = TableMetadata::new("memory://t", &schema, last, 0);
        for id in 1..=n {
            let mut summary = BTreeMap::from([("operation".to_owned(), "append".to_owned())]);
            if by_sluice.contains(&id) {
                summary.insert(crate::TRANSACTIONS.to_owned(), format!("{{\"w\":{id}}}"));
            }
            metadata.snapshots.push(Snapshot {
                snapshot_id: id,
                parent_snapshot_id: (id > 1).then_some(id - 1),
                sequence_number: id,
                timestamp_ms: id * 86_400_000,
                manifest_list: format!("memory://t/metadata/snap-{id}.avro"),
                summary,
                schema_id: Some(0),
                other: Default::default(),
            });
        }
        metadata.current_snapshot_id = Some(n);
        metadata
    }

    /// (case, snapshots, sluice's, kept by age from, keep_last, kept)
    #[test]
    fn expiry_keeps_the_snapshot_that_holds_sluice_s_transactions() {
        type Case = (
            &'static str,
            i64,
            &'static [i64],
            i64,
            usize,
            &'static [i64],
        );
        let cases: [Case; 4] = [
            ("no sluice snapshot", 6, &[], 5, 1, &[5, 6]),
            ("sluice's is among the young", 6, &[2, 5], 5, 1, &[5, 6]),
            (
                "sluice's is old: it and what follows stay",
                6,
                &[2],
                5,
                1,
                &[2, 3, 4, 5, 6],
            ),
            (
                "the newest of sluice's only",
                8,
                &[2, 4],
                8,
                1,
                &[4, 5, 6, 7, 8],
            ),
        ];
        for (case, n, by_sluice, young_from, keep_last, kept) in cases {
            let metadata = history(n, by_sluice);
            let after =
                expired(metadata, young_from * 86_400_000, keep_last, 0).expect("something goes");
            let ids: Vec<i64> = after.snapshots.iter().map(|s| s.snapshot_id).collect();
            assert_eq!(ids, kept, "{case}");
        }
    }
}
