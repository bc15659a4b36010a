//! Manifests and manifest lists (format version 2), Avro object container
//! files whose schemas carry the spec's field ids: a manifest lists data
//! files (sluice writes one per commit, of the files it adds); a snapshot's
//! manifest list names every manifest of the table as of that snapshot (the
//! previous snapshot's, read back whoever wrote them, and the new one).
//! Deflate-compressed, as Iceberg's Java writer does by default.

use std::collections::HashMap;

use apache_avro::types::Value as Avro;
use apache_avro::{Codec, Reader, Schema as AvroSchema, Writer};

use crate::partition::PartitionSpec;
use crate::schema::Schema;

/// A manifest entry's status: the file was added by the entry's snapshot.
const ADDED: i32 = 1;

/// A data file a manifest lists.
#[derive(Debug, Clone, PartialEq)]
pub struct DataFile {
    /// Its full location (`s3://bucket/table/data/…`, or the table's own
    /// scheme).
    pub path: String,
    pub records: i64,
    pub size: i64,
    /// Its partition tuple, as the manifest's Avro has it (empty:
    /// unpartitioned).
    pub partition: Vec<(String, Avro)>,
}

/// One manifest of a manifest list (`manifest_file` in the spec).
#[derive(Debug, Clone, PartialEq)]
pub struct ManifestFile {
    pub path: String,
    pub length: i64,
    pub partition_spec_id: i32,
    /// 0: data files, 1: delete files.
    pub content: i32,
    pub sequence_number: i64,
    pub min_sequence_number: i64,
    pub added_snapshot_id: i64,
    pub added_files: i32,
    pub existing_files: i32,
    pub deleted_files: i32,
    pub added_rows: i64,
    pub existing_rows: i64,
    pub deleted_rows: i64,
    /// The partition fields' summaries, as written (None: not given).
    pub partitions: Option<Avro>,
    pub key_metadata: Option<Vec<u8>>,
}

const MANIFEST_ENTRY: &str = r#"{"type": "record", "name": "manifest_entry", "fields": [
  {"name": "status", "type": "int", "field-id": 0},
  {"name": "snapshot_id", "type": ["null", "long"], "default": null, "field-id": 1},
  {"name": "sequence_number", "type": ["null", "long"], "default": null, "field-id": 3},
  {"name": "file_sequence_number", "type": ["null", "long"], "default": null, "field-id": 4},
  {"name": "data_file", "field-id": 2, "type": {"type": "record", "name": "r2", "fields": [
    {"name": "content", "type": "int", "field-id": 134},
    {"name": "file_path", "type": "string", "field-id": 100},
    {"name": "file_format", "type": "string", "field-id": 101},
    {"name": "partition", "field-id": 102, "type": {"type": "record", "name": "r102", "fields": []}},
    {"name": "record_count", "type": "long", "field-id": 103},
    {"name": "file_size_in_bytes", "type": "long", "field-id": 104}
  ]}}
]}"#;

const MANIFEST_FILE: &str = r#"{"type": "record", "name": "manifest_file", "fields": [
  {"name": "manifest_path", "type": "string", "field-id": 500},
  {"name": "manifest_length", "type": "long", "field-id": 501},
  {"name": "partition_spec_id", "type": "int", "field-id": 502},
  {"name": "content", "type": "int", "field-id": 517},
  {"name": "sequence_number", "type": "long", "field-id": 515},
  {"name": "min_sequence_number", "type": "long", "field-id": 516},
  {"name": "added_snapshot_id", "type": "long", "field-id": 503},
  {"name": "added_files_count", "type": "int", "field-id": 504},
  {"name": "existing_files_count", "type": "int", "field-id": 505},
  {"name": "deleted_files_count", "type": "int", "field-id": 506},
  {"name": "added_rows_count", "type": "long", "field-id": 512},
  {"name": "existing_rows_count", "type": "long", "field-id": 513},
  {"name": "deleted_rows_count", "type": "long", "field-id": 514},
  {"name": "partitions", "default": null, "field-id": 507, "type": ["null",
    {"type": "array", "element-id": 508, "items": {"type": "record", "name": "r508", "fields": [
      {"name": "contains_null", "type": "boolean", "field-id": 509},
      {"name": "contains_nan", "type": ["null", "boolean"], "default": null, "field-id": 518},
      {"name": "lower_bound", "type": ["null", "bytes"], "default": null, "field-id": 510},
      {"name": "upper_bound", "type": ["null", "bytes"], "default": null, "field-id": 511}
    ]}}]},
  {"name": "key_metadata", "type": ["null", "bytes"], "default": null, "field-id": 519}
]}"#;

/// Why a manifest or manifest list could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ManifestError(pub String);

fn avro_error(error: apache_avro::Error) -> ManifestError {
    ManifestError(error.to_string())
}

fn writer<'a>(
    schema: &'a AvroSchema,
    metadata: &[(&str, String)],
) -> Result<Writer<'a, Vec<u8>>, ManifestError> {
    let mut writer = Writer::with_codec(schema, Vec::new(), Codec::Deflate(Default::default()));
    for (key, value) in metadata {
        writer
            .add_user_metadata((*key).to_owned(), value.as_bytes())
            .map_err(avro_error)?;
    }
    Ok(writer)
}

fn long(n: i64) -> Avro {
    Avro::Long(n)
}

fn some(index_and_value: Avro) -> Avro {
    Avro::Union(1, Box::new(index_and_value))
}

/// A manifest of `files`, all added by snapshot `snapshot_id` (their
/// sequence numbers inherited from the manifest list's entry), in a table of
/// `schema` partitioned by `spec`.
pub fn write_manifest(
    files: &[DataFile],
    snapshot_id: i64,
    schema: &Schema,
    spec: &PartitionSpec,
) -> Result<Vec<u8>, ManifestError> {
    let mut entry: serde_json::Value =
        serde_json::from_str(MANIFEST_ENTRY).expect("the manifest entry's schema is JSON");
    entry["fields"][4]["type"]["fields"][3]["type"]["fields"] = spec.avro_fields();
    let avro = AvroSchema::parse_str(&entry.to_string()).map_err(avro_error)?;
    let metadata = [
        ("schema", schema.to_json().to_string()),
        ("schema-id", schema.schema_id.to_string()),
        ("partition-spec", spec.fields_json().to_string()),
        ("partition-spec-id", spec.spec_id.to_string()),
        ("format-version", "2".to_owned()),
        ("content", "data".to_owned()),
    ];
    let mut writer = writer(&avro, &metadata)?;
    for file in files {
        let data_file = Avro::Record(vec![
            ("content".into(), Avro::Int(0)),
            ("file_path".into(), Avro::String(file.path.clone())),
            ("file_format".into(), Avro::String("PARQUET".into())),
            ("partition".into(), Avro::Record(file.partition.clone())),
            ("record_count".into(), long(file.records)),
            ("file_size_in_bytes".into(), long(file.size)),
        ]);
        let entry = Avro::Record(vec![
            ("status".into(), Avro::Int(ADDED)),
            ("snapshot_id".into(), some(long(snapshot_id))),
            // Inherited from the manifest list (the commit's sequence number).
            (
                "sequence_number".into(),
                Avro::Union(0, Box::new(Avro::Null)),
            ),
            (
                "file_sequence_number".into(),
                Avro::Union(0, Box::new(Avro::Null)),
            ),
            ("data_file".into(), data_file),
        ]);
        writer.append_value_ref(&entry).map_err(avro_error)?;
    }
    writer.into_inner().map_err(avro_error)
}

/// The manifest list of snapshot `snapshot_id` (after `parent`, at
/// `sequence_number`): `manifests`, in order.
pub fn write_manifest_list(
    manifests: &[ManifestFile],
    snapshot_id: i64,
    parent: Option<i64>,
    sequence_number: i64,
) -> Result<Vec<u8>, ManifestError> {
    let avro = AvroSchema::parse_str(MANIFEST_FILE).map_err(avro_error)?;
    let metadata = [
        ("snapshot-id", snapshot_id.to_string()),
        (
            "parent-snapshot-id",
            parent.map_or("null".to_owned(), |p| p.to_string()),
        ),
        ("sequence-number", sequence_number.to_string()),
        ("format-version", "2".to_owned()),
    ];
    let mut writer = writer(&avro, &metadata)?;
    for m in manifests {
        let optional_bytes = |b: &Option<Vec<u8>>| match b {
            Some(bytes) => some(Avro::Bytes(bytes.clone())),
            None => Avro::Union(0, Box::new(Avro::Null)),
        };
        let record = Avro::Record(vec![
            ("manifest_path".into(), Avro::String(m.path.clone())),
            ("manifest_length".into(), long(m.length)),
            ("partition_spec_id".into(), Avro::Int(m.partition_spec_id)),
            ("content".into(), Avro::Int(m.content)),
            ("sequence_number".into(), long(m.sequence_number)),
            ("min_sequence_number".into(), long(m.min_sequence_number)),
            ("added_snapshot_id".into(), long(m.added_snapshot_id)),
            ("added_files_count".into(), Avro::Int(m.added_files)),
            ("existing_files_count".into(), Avro::Int(m.existing_files)),
            ("deleted_files_count".into(), Avro::Int(m.deleted_files)),
            ("added_rows_count".into(), long(m.added_rows)),
            ("existing_rows_count".into(), long(m.existing_rows)),
            ("deleted_rows_count".into(), long(m.deleted_rows)),
            (
                "partitions".into(),
                match &m.partitions {
                    Some(list) => some(list.clone()),
                    None => Avro::Union(0, Box::new(Avro::Null)),
                },
            ),
            ("key_metadata".into(), optional_bytes(&m.key_metadata)),
        ]);
        writer.append_value_ref(&record).map_err(avro_error)?;
    }
    writer.into_inner().map_err(avro_error)
}

/// The manifests a manifest list names, whoever wrote it (format version 1
/// lists get version 2's defaults: data content, sequence number 0).
pub fn read_manifest_list(bytes: &[u8]) -> Result<Vec<ManifestFile>, ManifestError> {
    let reader = Reader::new(bytes).map_err(avro_error)?;
    let mut out = Vec::new();
    for record in reader {
        let Avro::Record(fields) = record.map_err(avro_error)? else {
            return Err(ManifestError(
                "a manifest list entry is not a record".into(),
            ));
        };
        let fields: HashMap<String, Avro> = fields.into_iter().collect();
        let get = |name: &str| fields.get(name).map(unwrap_union);
        let long = |name: &str| match get(name) {
            Some(Avro::Long(n)) => Some(*n),
            Some(Avro::Int(n)) => Some(i64::from(*n)),
            _ => None,
        };
        let int = |name: &str| long(name).map(|n| n as i32);
        let path = match get("manifest_path") {
            Some(Avro::String(path)) => path.clone(),
            _ => {
                return Err(ManifestError(
                    "a manifest list entry has no manifest_path".into(),
                ))
            }
        };
        out.push(ManifestFile {
            path,
            length: long("manifest_length").unwrap_or(0),
            partition_spec_id: int("partition_spec_id").unwrap_or(0),
            content: int("content").unwrap_or(0),
            sequence_number: long("sequence_number").unwrap_or(0),
            min_sequence_number: long("min_sequence_number").unwrap_or(0),
            added_snapshot_id: long("added_snapshot_id").unwrap_or(0),
            added_files: int("added_files_count")
                .or_else(|| int("added_data_files_count"))
                .unwrap_or(0),
            existing_files: int("existing_files_count")
                .or_else(|| int("existing_data_files_count"))
                .unwrap_or(0),
            deleted_files: int("deleted_files_count")
                .or_else(|| int("deleted_data_files_count"))
                .unwrap_or(0),
            added_rows: long("added_rows_count").unwrap_or(0),
            existing_rows: long("existing_rows_count").unwrap_or(0),
            deleted_rows: long("deleted_rows_count").unwrap_or(0),
            partitions: match get("partitions") {
                Some(Avro::Null) | None => None,
                Some(list) => Some(list.clone()),
            },
            key_metadata: match get("key_metadata") {
                Some(Avro::Bytes(b)) => Some(b.clone()),
                _ => None,
            },
        });
    }
    Ok(out)
}

/// The data files a manifest lists as live (added or existing), for tests
/// and upkeep.
pub fn read_manifest_paths(bytes: &[u8]) -> Result<Vec<String>, ManifestError> {
    Ok(read_live_files(bytes)?
        .into_iter()
        .map(|f| f.path)
        .collect())
}

/// The data files a manifest lists as live (added or existing), with their
/// record counts and sizes.
pub fn read_live_files(bytes: &[u8]) -> Result<Vec<DataFile>, ManifestError> {
    let reader = Reader::new(bytes).map_err(avro_error)?;
    let mut out = Vec::new();
    for record in reader {
        let Avro::Record(fields) = record.map_err(avro_error)? else {
            continue;
        };
        let fields: HashMap<String, Avro> = fields.into_iter().collect();
        if matches!(fields.get("status").map(unwrap_union), Some(Avro::Int(2))) {
            continue;
        }
        if let Some(Avro::Record(file)) = fields.get("data_file").map(unwrap_union) {
            let field = |name: &str| file.iter().find(|(n, _)| n == name).map(|(_, v)| v);
            if let Some(Avro::String(path)) = field("file_path") {
                let long = |name: &str| match field(name) {
                    Some(Avro::Long(n)) => *n,
                    _ => 0,
                };
                let partition = match field("partition").map(unwrap_union) {
                    Some(Avro::Record(values)) => values.clone(),
                    _ => Vec::new(),
                };
                out.push(DataFile {
                    path: path.clone(),
                    records: long("record_count"),
                    size: long("file_size_in_bytes"),
                    partition,
                });
            }
        }
    }
    Ok(out)
}

/// What merging manifests made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The new manifest.
    pub bytes: Vec<u8>,
    /// Its live entries (all existing now) and their rows.
    pub files: i32,
    pub rows: i64,
    /// The entries it marks deleted (the removed files it found), their
    /// rows and bytes.
    pub deleted: Vec<String>,
    pub deleted_rows: i64,
    pub deleted_bytes: i64,
    /// The lowest data sequence number among its entries.
    pub min_sequence_number: i64,
}

/// Files a merge marks deleted, by the snapshot that removes them.
#[derive(Debug, Clone, Copy)]
pub struct Removal<'a> {
    pub paths: &'a std::collections::HashSet<String>,
    pub snapshot_id: i64,
}

/// The Avro schema a manifest was written with, as its header has it (two
/// manifests with the same one merge).
pub fn writer_schema(bytes: &[u8]) -> Result<String, ManifestError> {
    let reader = Reader::new(bytes).map_err(avro_error)?;
    Ok(reader.writer_schema().canonical_form())
}

/// `manifests` (each with its manifest list entry, all written with one
/// Avro schema) as one manifest: every live entry (added or existing) is an
/// existing one now, with the snapshot id and sequence numbers it inherited
/// from its manifest's list entry written into it; deleted entries go (their
/// deletion is history the merged manifest's snapshots no longer need). The
/// header is the newest manifest's (the table's schema and spec as of it).
/// Nothing of another writer's entries is lost: the records are copied as
/// they were read, but for those fields. The live entries of `removal`'s
/// files are kept as deleted ones, of its snapshot (a rewrite's).
pub fn merge_manifests(
    manifests: &[(ManifestFile, Vec<u8>)],
    removal: Option<Removal<'_>>,
) -> Result<Merged, ManifestError> {
    let Some((_, newest)) = manifests.last() else {
        return Err(ManifestError("no manifest to merge".into()));
    };
    let header = Reader::new(&newest[..]).map_err(avro_error)?;
    let schema = header.writer_schema().clone();
    let metadata: Vec<(String, String)> = header
        .user_metadata()
        .iter()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(v).into_owned()))
        .collect();
    let metadata: Vec<(&str, String)> = metadata
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let mut writer = writer(&schema, &metadata)?;
    let mut merged = Merged {
        bytes: Vec::new(),
        files: 0,
        rows: 0,
        deleted: Vec::new(),
        deleted_rows: 0,
        deleted_bytes: 0,
        min_sequence_number: i64::MAX,
    };
    for (list_entry, bytes) in manifests {
        for record in Reader::new(&bytes[..]).map_err(avro_error)? {
            let Avro::Record(mut fields) = record.map_err(avro_error)? else {
                return Err(ManifestError("a manifest entry is not a record".into()));
            };
            let status = fields
                .iter()
                .find(|(name, _)| name == "status")
                .map(|(_, v)| unwrap_union(v).clone());
            if matches!(status, Some(Avro::Int(2))) {
                continue;
            }
            let file = fields
                .iter()
                .find(|(name, _)| name == "data_file")
                .and_then(|(_, v)| match unwrap_union(v) {
                    Avro::Record(file) => Some(file),
                    _ => None,
                });
            let file_field = |name: &str| {
                file.and_then(|f| f.iter().find(|(n, _)| n == name))
                    .map(|(_, v)| v)
            };
            let long_of = |name: &str| match file_field(name) {
                Some(Avro::Long(n)) => *n,
                _ => 0,
            };
            let (records, bytes) = (long_of("record_count"), long_of("file_size_in_bytes"));
            let removed_by = match (removal, file_field("file_path")) {
                (Some(removal), Some(Avro::String(path))) if removal.paths.contains(path) => {
                    merged.deleted.push(path.clone());
                    Some(removal.snapshot_id)
                }
                _ => None,
            };
            let mut sequence = list_entry.sequence_number;
            for (name, value) in fields.iter_mut() {
                match name.as_str() {
                    "status" => *value = Avro::Int(if removed_by.is_some() { 2 } else { 0 }),
                    "snapshot_id" => match removed_by {
                        Some(id) => *value = some(long(id)),
                        None if matches!(unwrap_union(value), Avro::Null) => {
                            *value = some(long(list_entry.added_snapshot_id));
                        }
                        None => {}
                    },
                    "sequence_number" => match unwrap_union(value) {
                        Avro::Long(n) => sequence = *n,
                        _ => *value = some(long(list_entry.sequence_number)),
                    },
                    "file_sequence_number" if matches!(unwrap_union(value), Avro::Null) => {
                        *value = some(long(list_entry.sequence_number));
                    }
                    _ => {}
                }
            }
            if removed_by.is_some() {
                merged.deleted_rows += records;
                merged.deleted_bytes += bytes;
            } else {
                merged.files += 1;
                merged.rows += records;
            }
            merged.min_sequence_number = merged.min_sequence_number.min(sequence);
            writer
                .append_value_ref(&Avro::Record(fields))
                .map_err(avro_error)?;
        }
    }
    merged.bytes = writer.into_inner().map_err(avro_error)?;
    if merged.min_sequence_number == i64::MAX {
        merged.min_sequence_number = 0;
    }
    Ok(merged)
}

fn unwrap_union(value: &Avro) -> &Avro {
    match value {
        Avro::Union(_, inner) => inner,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A manifest and a manifest list read back as written; the list's
    /// header names its snapshot.
    #[test]
    fn manifests_and_lists_read_back() {
        let (schema, _) =
            Schema::from_arrow(&arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "id",
                arrow_schema::DataType::Int64,
                false,
            )]))
            .unwrap();
        let files = [
            DataFile {
                path: "file:///t/data/a.parquet".into(),
                records: 10,
                size: 100,
                partition: Vec::new(),
            },
            DataFile {
                path: "file:///t/data/b.parquet".into(),
                records: 5,
                size: 50,
                partition: Vec::new(),
            },
        ];
        let manifest = write_manifest(&files, 7, &schema, &PartitionSpec::default()).unwrap();
        assert_eq!(
            read_manifest_paths(&manifest).unwrap(),
            ["file:///t/data/a.parquet", "file:///t/data/b.parquet"]
        );
        let entry = ManifestFile {
            path: "file:///t/metadata/m.avro".into(),
            length: manifest.len() as i64,
            partition_spec_id: 0,
            content: 0,
            sequence_number: 3,
            min_sequence_number: 3,
            added_snapshot_id: 7,
            added_files: 2,
            existing_files: 0,
            deleted_files: 0,
            added_rows: 15,
            existing_rows: 0,
            deleted_rows: 0,
            partitions: None,
            key_metadata: None,
        };
        let list = write_manifest_list(std::slice::from_ref(&entry), 7, Some(6), 3).unwrap();
        assert_eq!(read_manifest_list(&list).unwrap(), [entry]);
        let reader = Reader::new(&list[..]).unwrap();
        assert_eq!(reader.user_metadata()["snapshot-id"], b"7");
    }
}
