//! Checkpoints: the table's state at one version (protocol, metadata,
//! transactions, data files, recent tombstones) as one Parquet file,
//! `_delta_log/000…N.checkpoint.parquet`, named by `_delta_log/_last_checkpoint`,
//! so that a reader starts there instead of at version 0 — what keeps a table
//! committed to every second for a month fast to open. Written every
//! `delta.checkpointInterval` versions (the table's property, whoever set it;
//! [`DEFAULT_INTERVAL`] without one) by the writer that made that version
//! (and by `sluice tables checkpoint`); read when a writer opens the table.
//!
//! Both ways go through JSON: actions are written as the log's own JSON lines
//! and decoded into the checkpoint schema by arrow-json (maps, lists and
//! structs included), and a checkpoint is read back by writing its rows as
//! JSON lines and parsing them as a commit's. Columns other writers add
//! (`stats_parsed`, …) are read past.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use bytes::Bytes;

use super::log::{self, Action};

/// Versions between checkpoints when the table sets no
/// `delta.checkpointInterval` (delta-rs's default too).
pub const DEFAULT_INTERVAL: u64 = 100;

/// The table property that sets the versions between checkpoints.
pub const INTERVAL_PROPERTY: &str = "delta.checkpointInterval";

/// The versions between checkpoints that a table's `configuration` asks
/// for: its `delta.checkpointInterval` when it is a positive number, else
/// [`DEFAULT_INTERVAL`].
pub fn interval(configuration: &std::collections::BTreeMap<String, Option<String>>) -> u64 {
    configuration
        .get(INTERVAL_PROPERTY)
        .and_then(|v| v.as_deref()?.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_INTERVAL)
}

/// The name of checkpoint `version` (a single part).
pub fn checkpoint_name(version: u64) -> String {
    format!("{version:020}.checkpoint.parquet")
}

/// The name of a V2 checkpoint of `version` (feature `v2Checkpoint`): JSON,
/// named by a fresh UUID, so that two writers never overwrite each other's.
pub fn v2_checkpoint_name(version: u64) -> String {
    format!("{version:020}.checkpoint.{}.json", uuid::Uuid::new_v4())
}

/// Whether checkpoint file `name` is a V2 one named by its UUID
/// (`N.checkpoint.<uuid>.json` or `.parquet`).
pub fn is_uuid_named(name: &str) -> bool {
    name.get(20..)
        .and_then(|rest| rest.strip_prefix(".checkpoint."))
        .and_then(|rest| {
            rest.strip_suffix(".json")
                .or_else(|| rest.strip_suffix(".parquet"))
        })
        .is_some_and(|middle| uuid::Uuid::parse_str(middle).is_ok())
}

/// The names of the parts of a checkpoint of `parts` parts.
pub fn part_names(version: u64, parts: Option<u64>) -> Vec<String> {
    match parts {
        None | Some(0) | Some(1) => vec![checkpoint_name(version)],
        Some(parts) => (1..=parts)
            .map(|part| format!("{version:020}.checkpoint.{part:010}.{parts:010}.parquet"))
            .collect(),
    }
}

/// `_last_checkpoint`: which checkpoint is the latest.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct LastCheckpoint {
    pub version: u64,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parts: Option<u64>,
    /// The V2 checkpoint's file, when it is one.
    #[serde(
        default,
        rename = "v2Checkpoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub v2_checkpoint: Option<V2Checkpoint>,
}

/// Where `_last_checkpoint` says a V2 checkpoint is.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct V2Checkpoint {
    pub path: String,
    pub size_in_bytes: i64,
    pub modification_time: i64,
}

fn string_map() -> DataType {
    DataType::Map(
        Arc::new(Field::new(
            "key_value",
            DataType::Struct(Fields::from(vec![
                Field::new("key", DataType::Utf8, false),
                Field::new("value", DataType::Utf8, true),
            ])),
            false,
        )),
        false,
    )
}

fn string_list() -> DataType {
    DataType::List(Arc::new(Field::new("element", DataType::Utf8, true)))
}

fn fields(list: Vec<(&str, DataType)>) -> DataType {
    DataType::Struct(
        list.into_iter()
            .map(|(name, data_type)| Field::new(name, data_type, true))
            .collect(),
    )
}

fn deletion_vector() -> DataType {
    use DataType::{Int32, Int64, Utf8};
    fields(vec![
        ("storageType", Utf8),
        ("pathOrInlineDv", Utf8),
        ("offset", Int32),
        ("sizeInBytes", Int32),
        ("cardinality", Int64),
        ("maxRowIndex", Int64),
    ])
}

/// The columns of a checkpoint, as the Delta protocol lays them out.
pub fn checkpoint_schema() -> SchemaRef {
    use DataType::{Boolean, Int32, Int64, Utf8};
    Arc::new(Schema::new(vec![
        Field::new(
            "txn",
            fields(vec![
                ("appId", Utf8),
                ("version", Int64),
                ("lastUpdated", Int64),
            ]),
            true,
        ),
        Field::new(
            "add",
            fields(vec![
                ("path", Utf8),
                ("partitionValues", string_map()),
                ("size", Int64),
                ("modificationTime", Int64),
                ("dataChange", Boolean),
                ("stats", Utf8),
                ("tags", string_map()),
                ("deletionVector", deletion_vector()),
                ("baseRowId", Int64),
                ("defaultRowCommitVersion", Int64),
                ("clusteringProvider", Utf8),
            ]),
            true,
        ),
        Field::new(
            "remove",
            fields(vec![
                ("path", Utf8),
                ("deletionTimestamp", Int64),
                ("dataChange", Boolean),
                ("extendedFileMetadata", Boolean),
                ("partitionValues", string_map()),
                ("size", Int64),
                ("stats", Utf8),
                ("tags", string_map()),
                ("deletionVector", deletion_vector()),
                ("baseRowId", Int64),
                ("defaultRowCommitVersion", Int64),
            ]),
            true,
        ),
        Field::new(
            "domainMetadata",
            fields(vec![
                ("domain", Utf8),
                ("configuration", Utf8),
                ("removed", Boolean),
            ]),
            true,
        ),
        Field::new(
            "metaData",
            fields(vec![
                ("id", Utf8),
                ("name", Utf8),
                ("description", Utf8),
                (
                    "format",
                    fields(vec![("provider", Utf8), ("options", string_map())]),
                ),
                ("schemaString", Utf8),
                ("partitionColumns", string_list()),
                ("configuration", string_map()),
                ("createdTime", Int64),
            ]),
            true,
        ),
        Field::new(
            "protocol",
            fields(vec![
                ("minReaderVersion", Int32),
                ("minWriterVersion", Int32),
                ("readerFeatures", string_list()),
                ("writerFeatures", string_list()),
            ]),
            true,
        ),
    ]))
}

/// Actions in one part of a classic checkpoint, or in one sidecar of a V2
/// one: a table with more is checkpointed in several files, each built and
/// stored in turn (what a checkpoint holds in memory besides the snapshot).
pub const PART_ACTIONS: usize = 100_000;

/// Actions turned into JSON and decoded at a time.
const CHUNK_ACTIONS: usize = 4_096;

/// A checkpoint file holding `actions` (no commitInfo): one part of a
/// classic checkpoint, every kind of action in its columns.
pub fn write_checkpoint(actions: &[Action]) -> Result<Vec<u8>, String> {
    write_parquet(actions, checkpoint_schema())
}

/// A V2 checkpoint's sidecar holding `actions` (adds and removes only).
pub fn write_sidecar(actions: &[Action]) -> Result<Vec<u8>, String> {
    let full = checkpoint_schema();
    let fields: Vec<Field> = ["add", "remove"]
        .iter()
        .map(|name| {
            full.field_with_name(name)
                .expect("a checkpoint column")
                .clone()
        })
        .collect();
    write_parquet(actions, Arc::new(Schema::new(fields)))
}

/// The name of sidecar `part` of `parts` of the V2 checkpoint at `version`
/// (under `_delta_log/_sidecars/`), as Spark names them.
pub fn sidecar_name(version: u64, part: usize, parts: usize) -> String {
    format!(
        "{version:020}.checkpoint.{part:010}.{parts:010}.{}.parquet",
        uuid::Uuid::new_v4()
    )
}

/// `actions` as a zstd Parquet file of `schema`'s columns, decoded through
/// their JSON a chunk at a time (the whole table is never JSON at once).
fn write_parquet(actions: &[Action], schema: SchemaRef) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let properties = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .build();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(&mut out, schema.clone(), Some(properties))
            .map_err(|e| e.to_string())?;
    for chunk in actions.chunks(CHUNK_ACTIONS) {
        let lines = log::write_commit(chunk);
        sluice_table::rewrite::decode_into(&mut writer, &schema, &lines, CHUNK_ACTIONS)?;
    }
    writer.close().map_err(|e| e.to_string())?;
    Ok(out)
}

/// The actions a checkpoint file or a V2 checkpoint's sidecar (any
/// writer's) holds: JSON lines when `name` ends `.json`, else Parquet.
pub fn read_checkpoint_file(name: &str, bytes: Bytes) -> Result<Vec<Action>, String> {
    match name.ends_with(".json") {
        true => log::parse_commit(&bytes),
        false => read_checkpoint(bytes),
    }
}

/// The actions a Parquet checkpoint file (any writer's) holds.
pub fn read_checkpoint(bytes: Bytes) -> Result<Vec<Action>, String> {
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| e.to_string())?
        .build()
        .map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    for batch in reader {
        let batch: RecordBatch = batch.map_err(|e| e.to_string())?;
        lines.extend(sluice_table::rewrite::to_lines(&batch)?);
    }
    log::parse_commit(&lines)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::log::{
        Add, DeletionVector, DomainMetadata, Format, MetaData, Protocol, Remove, Txn,
    };

    #[test]
    fn a_checkpoint_reads_back_as_the_actions_written() {
        let actions = vec![
            Action::Protocol(Protocol::written()),
            Action::MetaData(MetaData {
                id: "id-1".into(),
                name: None,
                description: None,
                format: Format {
                    provider: "parquet".into(),
                    options: BTreeMap::new(),
                },
                schema_string: r#"{"type":"struct","fields":[]}"#.into(),
                partition_columns: vec!["day".into()],
                created_time: Some(7),
                configuration: BTreeMap::from([("delta.appendOnly".into(), Some("true".into()))]),
            }),
            Action::Txn(Txn {
                app_id: "sluice-g-t-0".into(),
                version: 42,
                last_updated: Some(9),
            }),
            Action::Add(Add {
                path: "day=2026-11-27/a.parquet".into(),
                partition_values: BTreeMap::from([("day".into(), Some("2026-11-27".into()))]),
                size: 100,
                modification_time: 5,
                data_change: true,
                stats: Some(r#"{"numRecords":3}"#.into()),
                // What newer tables' adds carry, kept through a checkpoint.
                tags: Some(BTreeMap::from([(
                    "INSERTION_TIME".into(),
                    Some("1".into()),
                )])),
                deletion_vector: Some(Box::new(DeletionVector {
                    storage_type: "u".into(),
                    path_or_inline_dv: "ab^-aqEH.-t@S}K{vb[*k^".into(),
                    offset: Some(4),
                    size_in_bytes: 40,
                    cardinality: 1,
                    max_row_index: None,
                })),
                base_row_id: Some(10),
                default_row_commit_version: Some(3),
                clustering_provider: None,
            }),
            Action::DomainMetadata(DomainMetadata {
                domain: "delta.rowTracking".into(),
                configuration: r#"{"rowIdHighWaterMark":12}"#.into(),
                removed: false,
            }),
            Action::Add(Add {
                path: "day=__HIVE_DEFAULT_PARTITION__/b.parquet".into(),
                partition_values: BTreeMap::from([("day".into(), None)]),
                size: 200,
                modification_time: 6,
                data_change: true,
                stats: None,
                ..Add::default()
            }),
            Action::Remove(Remove {
                path: "day=2026-11-26/c.parquet".into(),
                deletion_timestamp: Some(8),
                data_change: false,
                extended_file_metadata: Some(true),
                partition_values: Some(BTreeMap::from([("day".into(), Some("2026-11-26".into()))])),
                size: Some(300),
                ..Remove::default()
            }),
        ];
        let file = write_checkpoint(&actions).unwrap();
        let back = read_checkpoint(Bytes::from(file)).unwrap();
        // A null partition value reads back absent: the same to a reader.
        let mut want = actions;
        if let Action::Add(add) = &mut want[5] {
            add.partition_values.clear();
        }
        assert_eq!(back, want);
    }

    #[test]
    fn part_names_follow_the_protocol() {
        assert_eq!(
            part_names(10, None),
            ["00000000000000000010.checkpoint.parquet"]
        );
        assert_eq!(
            part_names(10, Some(2)),
            [
                "00000000000000000010.checkpoint.0000000001.0000000002.parquet",
                "00000000000000000010.checkpoint.0000000002.0000000002.parquet"
            ]
        );
    }
}
