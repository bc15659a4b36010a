//! Compaction of an Iceberg table, so that one fed every second stays fast
//! to read: small data files bin-packed into larger ones and the table's
//! data manifests merged, committed as one `replace` snapshot that changes
//! no row.
//!
//! The rewritten files are read by column name into the current schema and
//! written with its field ids; a file whose columns carry other names than
//! the current schema gives their ids (a column renamed since) is left as
//! it is. The commit goes through the one commit loop: made again on the
//! latest metadata after a lost race, it is refused when another writer
//! removed one of its files meanwhile (the files it wrote are deleted), and
//! an append that lands first is kept (its manifest is merged, its files
//! untouched). Tables with delete files (row-level deletes of other
//! engines) are refused: a rewrite would have to apply them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use sluice_store::PutRequest;
pub use sluice_table::upkeep::{CompactOptions, CompactReport};

use crate::manifest::{self, DataFile, ManifestFile, Removal};
use crate::metadata::{Snapshot, TableMetadata};
use crate::{Change, Committed, IcebergTable, TableError, Totals};

/// A manifest list's entry and the manifest's bytes.
type ReadManifest = (ManifestFile, Vec<u8>);

/// The Parquet field id in an Arrow field's metadata.
const FIELD_ID: &str = "PARQUET:field_id";

impl IcebergTable {
    /// Bin-packs the current snapshot's small data files into files of about
    /// `options.target_bytes` and merges its data manifests, in one commit.
    pub async fn compact(&self, options: CompactOptions) -> Result<CompactReport, TableError> {
        let mut report = CompactReport::default();
        let Some((_, metadata)) = self.latest().await? else {
            return Ok(report);
        };
        self.check_upkeep(&metadata)?;
        let Some(snapshot) = metadata.current_snapshot() else {
            return Ok(report);
        };
        let manifests = self.manifest_list(&snapshot.manifest_list).await?;
        self.refuse_deletes(&manifests)?;
        // Per partition (of the default spec), the small files, oldest first
        // (the list names the newest manifest first).
        let mut partitions: BTreeMap<String, Vec<DataFile>> = BTreeMap::new();
        for m in manifests.iter().rev() {
            let key = self.key_of(&m.path)?;
            let bytes = self.read(&key).await?;
            let files = manifest::read_live_files(&bytes).map_err(|e| self.malformed(&key, e))?;
            report.files_before += files.len();
            if m.partition_spec_id != metadata.default_spec_id {
                continue;
            }
            for file in files {
                if (file.size as u64) < options.target_bytes && file.path.ends_with(".parquet") {
                    let partition = format!("{:?}", file.partition);
                    partitions.entry(partition).or_default().push(file);
                }
            }
        }
        report.files_after = report.files_before;
        let schema = self.schema_of(&metadata)?;
        let columns = Arc::new(schema.to_arrow());
        let mut removed = HashSet::new();
        let mut added = Vec::new();
        let bins: Vec<Vec<DataFile>> = partitions
            .into_values()
            .flat_map(|small| sluice_table::upkeep::pack(small, |f| f.size as u64, &options))
            .collect();
        let rewritten = async {
            for bin in bins {
                if let Some((file, rewritten)) = self.rewrite(&bin, &columns).await? {
                    added.push(file);
                    removed.extend(rewritten);
                }
            }
            Ok::<_, TableError>(())
        }
        .await;
        let committing = rewritten.is_ok();
        let result = match rewritten {
            Ok(()) => {
                self.commit(Change::Rewrite {
                    removed: &removed,
                    added: &added,
                })
                .await
            }
            Err(error) => Err(error),
        };
        let outcome = match result {
            Ok(outcome) => outcome,
            Err(error) => {
                // What it wrote is nobody's when no commit was made or the
                // commit was refused (each attempt that could have landed is
                // read back before a refusal); after a store error, a
                // version may hold them: orphan-file removal takes them if
                // none does.
                if !committing || !matches!(error, TableError::Store { .. }) {
                    for file in &added {
                        if let Ok(key) = self.key_of(&file.path) {
                            let _ = self.store.delete_object(&key).await;
                        }
                    }
                }
                return Err(error);
            }
        };
        let (Committed::Version(version), Some(after)) = (outcome.committed, outcome.after) else {
            report.manifests = Some((manifests.len(), manifests.len()));
            return Ok(report);
        };
        let manifests_after = match after.current_snapshot() {
            Some(s) => self.manifest_list(&s.manifest_list).await?.len(),
            None => 0,
        };
        report.manifests = Some((manifests.len(), manifests_after));
        report.removed = removed.len();
        report.added = added.len();
        report.files_after = report.files_before - removed.len() + added.len();
        report.version = Some(version);
        tracing::info!(table = %self.layout.location, version, removed = report.removed, added = report.added, manifests_before = manifests.len(), manifests_after, "compacted");
        Ok(report)
    }

    /// Refuses a table sluice cannot compact (another format version, a
    /// partition transform sluice does not write); its partition spec.
    pub(crate) fn check_upkeep(
        &self,
        metadata: &TableMetadata,
    ) -> Result<crate::partition::PartitionSpec, TableError> {
        if metadata.format_version != crate::metadata::FORMAT_VERSION {
            return Err(TableError::FormatVersion {
                root: self.layout.location.clone(),
                version: metadata.format_version,
            });
        }
        self.spec_of(metadata, None)
    }

    fn refuse_deletes(&self, manifests: &[ManifestFile]) -> Result<(), TableError> {
        if manifests.iter().any(|m| m.content != 0) {
            return Err(TableError::Upkeep {
                root: self.layout.location.clone(),
                reason: "the table has delete files (row-level deletes another engine made), \
                         and a rewrite would have to apply them; sluice does not compact such a \
                         table"
                    .into(),
            });
        }
        Ok(())
    }

    /// The rows of the files of `bin` that read by name into `columns`, as
    /// one new file under `data/`; None when fewer than two do.
    async fn rewrite(
        &self,
        bin: &[DataFile],
        columns: &Arc<ArrowSchema>,
    ) -> Result<Option<(DataFile, Vec<String>)>, TableError> {
        let mut parts = Vec::with_capacity(bin.len());
        let mut paths = Vec::with_capacity(bin.len());
        let mut records = 0;
        for file in bin {
            let key = self.key_of(&file.path)?;
            let bytes = self.read(&key).await?;
            let readable = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                bytes.clone(),
            )
            .map(|reader| reads_by_name(reader.schema().fields(), columns.fields()))
            .map_err(|e| self.malformed(&key, e))?;
            if !readable {
                tracing::info!(file = %file.path, "left as it is: its columns are named otherwise than the table's now");
                continue;
            }
            records += file.records;
            parts.push(bytes);
            paths.push(file.path.clone());
        }
        if parts.len() < 2 {
            return Ok(None);
        }
        let name = format!("data/compacted-{}.parquet", uuid::Uuid::new_v4().simple());
        let key = format!("{}/{name}", self.layout.location);
        let schema = columns.clone();
        let merged = tokio::task::spawn_blocking(move || {
            sluice_table::rewrite::merge_parquet(parts, Some(schema))
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|merged| merged)
        .map_err(|reason| self.malformed(&key, format!("compacting: {reason}")))?;
        if merged.records as i64 != records {
            return Err(self.malformed(
                &key,
                format!(
                    "compacting read {} rows where the manifests count {records}",
                    merged.records
                ),
            ));
        }
        let size = merged.bytes.len() as i64;
        let mut put = PutRequest::new(&key, merged.bytes);
        put.content_type = Some(sluice_table::PARQUET_CONTENT_TYPE.into());
        self.store
            .put_object(put)
            .await
            .map_err(|e| self.store_error(e))?;
        Ok(Some((
            DataFile {
                path: format!("{}/{name}", self.location()),
                records,
                size,
                partition: bin[0].partition.clone(),
            },
            paths,
        )))
    }

    /// The metadata after `metadata` (version `version`) with a `replace`
    /// snapshot: `removed` out, `added` in, the data manifests of one spec
    /// and Avro schema merged; its manifests stored first. None when there
    /// is nothing to do.
    pub(crate) async fn rewritten(
        &self,
        metadata: TableMetadata,
        removed: &HashSet<String>,
        added: &[DataFile],
        version: u64,
    ) -> Result<Option<(TableMetadata, Vec<String>)>, TableError> {
        let mut written = Vec::new();
        match self
            .rewritten_into(metadata, removed, added, version, &mut written)
            .await
        {
            Ok(next) => Ok(next.map(|next| (next, written))),
            Err(error) => {
                self.forget(&written).await;
                Err(error)
            }
        }
    }

    /// [`IcebergTable::rewritten`], the keys it stores pushed to `written`.
    async fn rewritten_into(
        &self,
        mut metadata: TableMetadata,
        removed: &HashSet<String>,
        added: &[DataFile],
        version: u64,
        written: &mut Vec<String>,
    ) -> Result<Option<TableMetadata>, TableError> {
        // Its files are still there (a compaction that took longer than
        // orphan-file removal's retention could have lost them).
        for file in added {
            let key = self.key_of(&file.path)?;
            if let Err(error) = self.store.head_object(&key).await {
                return Err(match error.is_not_found() {
                    true => TableError::Upkeep {
                        root: self.layout.location.clone(),
                        reason: format!(
                            "the file compaction wrote, {key}, is gone; nothing was changed"
                        ),
                    },
                    false => self.store_error(error),
                });
            }
        }
        let Some(parent) = metadata.current_snapshot().cloned() else {
            return match removed.is_empty() {
                true => Ok(None),
                false => Err(self.gone(removed.len())),
            };
        };
        let manifests = crate::live_manifests(self.manifest_list(&parent.manifest_list).await?);
        self.refuse_deletes(&manifests)?;
        let now = self.now_ms();
        let snapshot_id = crate::new_snapshot_id();
        let sequence_number = metadata.last_sequence_number + 1;
        let mut groups: BTreeMap<(i32, String), Vec<ReadManifest>> = BTreeMap::new();
        for m in manifests {
            let key = self.key_of(&m.path)?;
            let bytes = self.read(&key).await?;
            let schema = manifest::writer_schema(&bytes).map_err(|e| self.malformed(&key, e))?;
            groups
                .entry((m.partition_spec_id, schema))
                .or_default()
                .push((m, bytes.to_vec()));
        }
        let removal = Removal {
            paths: removed,
            snapshot_id,
        };
        let mut list = Vec::new();
        let mut totals = Totals::default();
        let mut found = 0;
        for ((spec_id, _), mut group) in groups {
            let holds_removed = || {
                group.iter().any(|(_, bytes)| {
                    // One that does not read is merged, and says so there.
                    manifest::read_manifest_paths(bytes)
                        .map_or(true, |paths| paths.iter().any(|p| removed.contains(p)))
                })
            };
            if group.len() < 2 && !holds_removed() {
                list.extend(group.into_iter().map(|(m, _)| m));
                continue;
            }
            group.sort_by_key(|(m, _)| m.sequence_number);
            let merged = manifest::merge_manifests(&group, Some(removal))
                .map_err(|e| self.malformed("a merged manifest", e))?;
            found += merged.deleted.len();
            totals.deleted_files += merged.deleted.len() as i64;
            totals.deleted_rows += merged.deleted_rows;
            totals.deleted_size += merged.deleted_bytes;
            let name = format!("{}-m1.avro", uuid::Uuid::new_v4());
            let key = format!("{}{name}", self.metadata_prefix);
            let length = merged.bytes.len() as i64;
            self.put(&key, merged.bytes, false)
                .await
                .map_err(|e| self.store_error(e))?;
            written.push(key);
            list.push(ManifestFile {
                path: format!("{}/metadata/{name}", self.location()),
                length,
                partition_spec_id: spec_id,
                content: 0,
                sequence_number,
                min_sequence_number: merged.min_sequence_number,
                added_snapshot_id: snapshot_id,
                added_files: 0,
                existing_files: merged.files,
                deleted_files: merged.deleted.len() as i32,
                added_rows: 0,
                existing_rows: merged.rows,
                deleted_rows: merged.deleted_rows,
                partitions: None,
                key_metadata: None,
            });
        }
        if found != removed.len() {
            return Err(self.gone(removed.len().abs_diff(found)));
        }
        if written.is_empty() && added.is_empty() {
            return Ok(None);
        }
        let schema = self.schema_of(&metadata)?;
        if !added.is_empty() {
            let spec = self.check_upkeep(&metadata)?;
            let bytes = manifest::write_manifest(added, snapshot_id, &schema, &spec)
                .map_err(|e| self.malformed("a new manifest", e))?;
            let name = format!("{}-m0.avro", uuid::Uuid::new_v4());
            let key = format!("{}{name}", self.metadata_prefix);
            let length = bytes.len() as i64;
            self.put(&key, bytes, false)
                .await
                .map_err(|e| self.store_error(e))?;
            written.push(key);
            totals.added_files = added.len() as i64;
            totals.added_rows = added.iter().map(|f| f.records).sum();
            totals.added_size = added.iter().map(|f| f.size).sum();
            list.insert(
                0,
                ManifestFile {
                    path: format!("{}/metadata/{name}", self.location()),
                    length,
                    partition_spec_id: metadata.default_spec_id,
                    content: 0,
                    sequence_number,
                    min_sequence_number: sequence_number,
                    added_snapshot_id: snapshot_id,
                    added_files: added.len() as i32,
                    existing_files: 0,
                    deleted_files: 0,
                    added_rows: totals.added_rows,
                    existing_rows: 0,
                    deleted_rows: 0,
                    partitions: None,
                    key_metadata: None,
                },
            );
        }
        let bytes = manifest::write_manifest_list(
            &list,
            snapshot_id,
            Some(parent.snapshot_id),
            sequence_number,
        )
        .map_err(|e| self.malformed("a new manifest list", e))?;
        let name = format!("snap-{snapshot_id}-1-{}.avro", uuid::Uuid::new_v4());
        let key = format!("{}{name}", self.metadata_prefix);
        self.put(&key, bytes, false)
            .await
            .map_err(|e| self.store_error(e))?;
        written.push(key);
        let mut summary = crate::summary("replace", Some(&parent), totals);
        // The writers' transactions, as they were: the snapshot is sluice's
        // newest, and expiry may drop those before it.
        for name in [crate::TRANSACTIONS, crate::KEYS] {
            if let Some(value) = metadata
                .ancestry()
                .find(|s| s.summary.contains_key(crate::TRANSACTIONS))
                .and_then(|s| s.summary.get(name))
            {
                summary.insert(name.to_owned(), value.clone());
            }
        }
        let snapshot = Snapshot {
            snapshot_id,
            parent_snapshot_id: Some(parent.snapshot_id),
            sequence_number,
            timestamp_ms: now,
            manifest_list: format!("{}/metadata/{name}", self.location()),
            summary,
            schema_id: Some(schema.schema_id),
            other: Default::default(),
        };
        self.push_snapshot(&mut metadata, snapshot, version);
        Ok(Some(metadata))
    }

    fn gone(&self, files: usize) -> TableError {
        TableError::Upkeep {
            root: self.layout.location.clone(),
            reason: format!(
                "{files} of the files compaction rewrote are no longer in the table (another \
                 writer removed them first); nothing was changed"
            ),
        }
    }

    /// Deletes what a commit attempt that will not be made stored.
    async fn forget(&self, keys: &[String]) {
        for key in keys {
            if let Err(error) = self.store.delete_object(key).await {
                tracing::debug!(%key, error = %sluice_store::error_chain(&error), "could not remove an unused manifest; orphan-file removal will");
            }
        }
    }
}

/// Whether a file of columns `file` reads by name into `table`'s: each of
/// its columns (nested ones too) is one of the table's, and where it carries
/// a field id, it is that column's.
fn reads_by_name(file: &arrow_schema::Fields, table: &arrow_schema::Fields) -> bool {
    file.iter().all(|f| {
        let Some(t) = table.iter().find(|t| t.name() == f.name()) else {
            return false;
        };
        let id = |field: &Field| field.metadata().get(FIELD_ID).cloned();
        if let (Some(a), Some(b)) = (id(f), id(t)) {
            if a != b {
                return false;
            }
        }
        match (f.data_type(), t.data_type()) {
            (DataType::Struct(a), DataType::Struct(b)) => reads_by_name(a, b),
            (DataType::List(a), DataType::List(b))
            | (DataType::LargeList(a), DataType::List(b))
            | (DataType::Map(a, _), DataType::Map(b, _)) => {
                reads_by_name(&[a.clone()].into(), &[b.clone()].into())
                    || a.data_type() == b.data_type()
            }
            _ => true,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, id: Option<i32>, data_type: DataType) -> Field {
        let field = Field::new(name, data_type, true);
        match id {
            Some(id) => field.with_metadata([(FIELD_ID.to_owned(), id.to_string())].into()),
            None => field,
        }
    }

    /// (case, the file's columns, whether they read into the table's)
    #[test]
    fn files_read_by_name_when_names_and_ids_agree() {
        let table: arrow_schema::Fields = vec![
            field("id", Some(1), DataType::Int64),
            field(
                "user",
                Some(2),
                DataType::Struct(vec![field("name", Some(3), DataType::Utf8)].into()),
            ),
        ]
        .into();
        let cases: Vec<(&str, Vec<Field>, bool)> = vec![
            (
                "no ids, names known",
                vec![field("id", None, DataType::Int64)],
                true,
            ),
            (
                "ids agree",
                vec![field("id", Some(1), DataType::Int64)],
                true,
            ),
            (
                "a renamed column",
                vec![field("ident", Some(1), DataType::Int64)],
                false,
            ),
            (
                "an id of another column",
                vec![field("id", Some(2), DataType::Int64)],
                false,
            ),
            (
                "a nested field renamed since",
                vec![field(
                    "user",
                    Some(2),
                    DataType::Struct(vec![field("nick", Some(3), DataType::Utf8)].into()),
                )],
                false,
            ),
        ];
        for (case, file, expected) in cases {
            assert_eq!(reads_by_name(&file.into(), &table), expected, "{case}");
        }
    }
}
