//! The Delta Lake transaction log's actions, as they are spelled in a commit
//! file (`_delta_log/00000000000000000042.json`, one action per line) — the
//! part of the Delta protocol that appending writers and their readers need:
//! `protocol`, `metaData`, `add`, `remove`, `txn` (application transactions,
//! the exactly-once marker), `commitInfo`, `domainMetadata` (row tracking's
//! high-water mark, clustering, other engines' domains), and the V2
//! checkpoint's `checkpointMetadata` and `sidecar`. The fields of an add or
//! remove that newer tables carry (deletion vectors, row ids, tags) are kept
//! as they were read, so that a checkpoint or a compaction never drops them;
//! actions of no use to an appending writer (`cdc`) are read past.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The reader and writer versions a table needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Protocol {
    pub min_reader_version: i32,
    pub min_writer_version: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reader_features: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer_features: Option<Vec<String>>,
}

impl Protocol {
    /// What sluice writes: plain Parquet files and application transactions
    /// (writer version 2, which every Delta reader reads).
    pub fn written() -> Protocol {
        Protocol {
            min_reader_version: 1,
            min_writer_version: 2,
            reader_features: None,
            writer_features: None,
        }
    }
}

/// The table's description: its id, schema and partition columns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MetaData {
    pub id: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub format: Format,
    /// The schema as a JSON document (a Delta struct type).
    pub schema_string: String,
    #[serde(default)]
    pub partition_columns: Vec<String>,
    #[serde(default)]
    pub created_time: Option<i64>,
    #[serde(default)]
    pub configuration: BTreeMap<String, Option<String>>,
}

impl MetaData {
    /// A new table's description: a fresh id, Parquet files, `schema_string`
    /// and `partition_columns`, no properties.
    pub fn new(schema_string: String, partition_columns: Vec<String>) -> MetaData {
        MetaData {
            id: uuid::Uuid::new_v4().to_string(),
            name: None,
            description: None,
            format: Format {
                provider: "parquet".into(),
                options: BTreeMap::new(),
            },
            schema_string,
            partition_columns,
            created_time: None,
            configuration: BTreeMap::new(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Format {
    pub provider: String,
    #[serde(default)]
    pub options: BTreeMap<String, String>,
}

/// A data file joining the table.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Add {
    /// Relative to the table's root, percent-encoded (a URI reference).
    pub path: String,
    #[serde(default)]
    pub partition_values: BTreeMap<String, Option<String>>,
    pub size: i64,
    pub modification_time: i64,
    pub data_change: bool,
    /// A JSON document: `numRecords`, and what else the writer computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, Option<String>>>,
    /// The rows of the file deleted since (`deletionVectors`); sluice's own
    /// files have none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_vector: Option<Box<DeletionVector>>,
    /// The row id of the file's first row (`rowTracking`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_row_id: Option<i64>,
    /// The version that first committed the file's rows (`rowTracking`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_row_commit_version: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clustering_provider: Option<String>,
}

impl Add {
    /// The remove that takes this file out of the table at `at` without
    /// changing data (compaction), keeping what the add carried (its
    /// deletion vector and row ids: the file is `(path, deletion vector)`).
    pub fn removed_without_data_change(&self, at: i64) -> Remove {
        Remove {
            path: self.path.clone(),
            deletion_timestamp: Some(at),
            data_change: false,
            extended_file_metadata: Some(true),
            partition_values: Some(self.partition_values.clone()),
            size: Some(self.size),
            stats: self.stats.clone(),
            tags: self.tags.clone(),
            deletion_vector: self.deletion_vector.clone(),
            base_row_id: self.base_row_id,
            default_row_commit_version: self.default_row_commit_version,
        }
    }
}

/// Where the deleted rows of a data file are recorded (a deletion vector).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeletionVector {
    pub storage_type: String,
    pub path_or_inline_dv: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<i32>,
    pub size_in_bytes: i32,
    pub cardinality: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_row_index: Option<i64>,
}

/// A data file leaving the table (compaction, or another writer's delete).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Remove {
    pub path: String,
    #[serde(default)]
    pub deletion_timestamp: Option<i64>,
    pub data_change: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_file_metadata: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_values: Option<BTreeMap<String, Option<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, Option<String>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_vector: Option<Box<DeletionVector>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_row_id: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_row_commit_version: Option<i64>,
}

/// Configuration of one named domain of the table (`domainMetadata`):
/// row tracking's high-water mark (`delta.rowTracking`), clustering
/// columns, or any engine's own. `removed` ends a domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainMetadata {
    pub domain: String,
    /// A JSON document, kept as text.
    pub configuration: String,
    #[serde(default)]
    pub removed: bool,
}

/// A V2 checkpoint's own description: the version it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub version: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, Option<String>>>,
}

/// A file of a V2 checkpoint's add and remove actions
/// (`_delta_log/_sidecars/…`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sidecar {
    pub path: String,
    pub size_in_bytes: i64,
    pub modification_time: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<BTreeMap<String, Option<String>>>,
}

/// An application transaction: the latest `version` an application (a
/// writer, a Kafka partition) committed, kept by the table with the data it
/// came with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Txn {
    pub app_id: String,
    pub version: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_updated: Option<i64>,
}

/// One line of a commit file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Action {
    #[serde(rename = "commitInfo")]
    CommitInfo(serde_json::Value),
    #[serde(rename = "protocol")]
    Protocol(Protocol),
    #[serde(rename = "metaData")]
    MetaData(MetaData),
    #[serde(rename = "txn")]
    Txn(Txn),
    #[serde(rename = "add")]
    Add(Add),
    #[serde(rename = "remove")]
    Remove(Remove),
    #[serde(rename = "domainMetadata")]
    DomainMetadata(DomainMetadata),
    #[serde(rename = "checkpointMetadata")]
    CheckpointMetadata(CheckpointMetadata),
    #[serde(rename = "sidecar")]
    Sidecar(Sidecar),
}

/// A line as read: one of the actions above, or one this writer leaves alone
/// (`cdc`, …).
#[derive(Debug, Default, Deserialize)]
struct Line {
    #[serde(rename = "commitInfo")]
    commit_info: Option<serde_json::Value>,
    protocol: Option<Protocol>,
    #[serde(rename = "metaData")]
    meta_data: Option<MetaData>,
    txn: Option<Txn>,
    add: Option<Add>,
    remove: Option<Remove>,
    #[serde(rename = "domainMetadata")]
    domain_metadata: Option<DomainMetadata>,
    #[serde(rename = "checkpointMetadata")]
    checkpoint_metadata: Option<CheckpointMetadata>,
    sidecar: Option<Sidecar>,
}

/// The actions of one commit file.
pub fn parse_commit(bytes: &[u8]) -> Result<Vec<Action>, String> {
    let mut actions = Vec::new();
    for (number, line) in bytes.split(|&b| b == b'\n').enumerate() {
        parse_line(line, number + 1, &mut actions)?;
    }
    Ok(actions)
}

/// Line `number` of a commit file (blank: nothing), its actions put into `into`.
pub fn parse_line(line: &[u8], number: usize, into: &mut Vec<Action>) -> Result<(), String> {
    if line.trim_ascii().is_empty() {
        return Ok(());
    }
    let line: Line = serde_json::from_slice(line).map_err(|e| format!("line {number}: {e}"))?;
    into.extend(
        [
            line.commit_info.map(Action::CommitInfo),
            line.protocol.map(Action::Protocol),
            line.meta_data.map(Action::MetaData),
            line.txn.map(Action::Txn),
            line.add.map(Action::Add),
            line.remove.map(Action::Remove),
            line.domain_metadata.map(Action::DomainMetadata),
            line.checkpoint_metadata.map(Action::CheckpointMetadata),
            line.sidecar.map(Action::Sidecar),
        ]
        .into_iter()
        .flatten(),
    );
    Ok(())
}

/// A commit file's bytes.
pub fn write_commit(actions: &[Action]) -> Vec<u8> {
    let mut out = Vec::new();
    for action in actions {
        serde_json::to_writer(&mut out, action).expect("actions serialize");
        out.push(b'\n');
    }
    out
}

/// The key of commit `version` under the log's prefix.
pub fn commit_name(version: u64) -> String {
    format!("{version:020}.json")
}

/// The version a log file name holds, and whether it is a commit (`….json`)
/// rather than a checkpoint.
pub fn version_of(name: &str) -> Option<(u64, bool)> {
    let digits = name.get(..20)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let version = digits.parse().ok()?;
    match &name[20..] {
        ".json" => Some((version, true)),
        rest if rest.starts_with(".checkpoint")
            && (rest.ends_with(".parquet") || rest.ends_with(".json")) =>
        {
            Some((version, false))
        }
        _ => None,
    }
}

/// What names one logical file of the table: its path, and its deletion
/// vector's id when it has one (the protocol's `(path, dvId)`: a file given a
/// deletion vector is another logical file under the same path).
pub fn file_id(path: &str, deletion_vector: Option<&DeletionVector>) -> String {
    match deletion_vector {
        None => path.to_string(),
        Some(dv) => format!(
            "{path}\u{0}{}{}{}",
            dv.storage_type,
            dv.path_or_inline_dv,
            dv.offset.map(|o| format!("@{o}")).unwrap_or_default()
        ),
    }
}

/// A table-relative path as a URI reference: what Delta keeps in `add.path`.
/// Keys are already limited to safe characters; the rest are escaped.
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => out.push(b as char),
            b'-' | b'_' | b'.' | b'~' | b'/' | b'=' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')'
            | b'*' | b'+' | b',' | b';' | b'@' | b':' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The inverse of [`encode_path`] (and of other writers' escaping).
pub use sluice_table::percent_decode as decode_path;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_commit_of_another_writer_reads_with_what_sluice_needs() {
        // Written by the Python deltalake package 1.6.0.
        let commit = br#"{"commitInfo":{"timestamp":1795801454175,"operation":"WRITE","operationParameters":{"mode":"ErrorIfExists","partitionBy":"[\"d\"]"},"engineInfo":"delta-rs:py-1.6.0","clientVersion":"delta-rs.py-1.6.0"}}
{"protocol":{"minReaderVersion":1,"minWriterVersion":2}}
{"metaData":{"id":"6d6e3883-cd32-4760-b4e0-619ea303b2fc","name":null,"description":null,"format":{"provider":"parquet","options":{}},"schemaString":"{\"type\":\"struct\",\"fields\":[{\"name\":\"a\",\"type\":\"long\",\"nullable\":true,\"metadata\":{}}]}","partitionColumns":["d"],"createdTime":1795801454172,"configuration":{}}}
{"add":{"path":"d=2026-11-27/part-00000-ac2f.snappy.parquet","partitionValues":{"d":"2026-11-27"},"size":738,"modificationTime":1795801454175,"dataChange":true,"stats":"{\"numRecords\":2}","tags":null,"baseRowId":null,"defaultRowCommitVersion":null,"clusteringProvider":null}}
{"domainMetadata":{"domain":"x","configuration":"{}","removed":false}}
"#;
        let actions = parse_commit(commit).unwrap();
        let kinds: Vec<&str> = actions
            .iter()
            .map(|a| match a {
                Action::CommitInfo(_) => "commitInfo",
                Action::Protocol(_) => "protocol",
                Action::MetaData(_) => "metaData",
                Action::Txn(_) => "txn",
                Action::Add(_) => "add",
                Action::Remove(_) => "remove",
                Action::DomainMetadata(_) => "domainMetadata",
                Action::CheckpointMetadata(_) => "checkpointMetadata",
                Action::Sidecar(_) => "sidecar",
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "commitInfo",
                "protocol",
                "metaData",
                "add",
                "domainMetadata"
            ]
        );
        let again = parse_commit(&write_commit(&actions)).unwrap();
        assert_eq!(again, actions);
    }

    #[test]
    fn log_names() {
        let cases = [
            ("00000000000000000000.json", Some((0, true))),
            ("00000000000000000042.json", Some((42, true))),
            (
                "00000000000000000100.checkpoint.parquet",
                Some((100, false)),
            ),
            (
                "00000000000000000100.checkpoint.0000000001.0000000002.parquet",
                Some((100, false)),
            ),
            (
                "00000000000000000003.checkpoint.0e8193d8-c93f-4ef5-aa67-9c01d46f603f.json",
                Some((3, false)),
            ),
            ("00000000000000000042.crc", None),
            ("_last_checkpoint", None),
            ("0000000000000000004.json", None),
        ];
        for (name, want) in cases {
            assert_eq!(version_of(name), want, "{name}");
        }
        assert_eq!(commit_name(7), "00000000000000000007.json");
    }

    #[test]
    fn paths_escape_and_come_back() {
        let cases = [
            ("d=2026-11-27/a.parquet", "d=2026-11-27/a.parquet"),
            ("t=a b/c%.parquet", "t=a%20b/c%25.parquet"),
            ("é/x", "%C3%A9/x"),
        ];
        for (path, encoded) in cases {
            assert_eq!(encode_path(path), encoded);
            assert_eq!(decode_path(encoded), path);
        }
    }
}
