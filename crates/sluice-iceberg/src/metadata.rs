//! Table metadata (format version 2), as the spec's JSON has it: what sluice
//! reads and writes is typed; everything else another writer put there
//! (statistics, other refs' details, fields of later spec versions) is kept
//! as it was, in `other`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::schema::Schema;

/// The format version sluice writes.
pub const FORMAT_VERSION: i64 = 2;

/// The main branch's name.
pub const MAIN: &str = "main";

/// One version of a table's metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct TableMetadata {
    pub format_version: i64,
    pub table_uuid: String,
    pub location: String,
    pub last_sequence_number: i64,
    pub last_updated_ms: i64,
    pub last_column_id: i32,
    pub schemas: Vec<Value>,
    pub current_schema_id: i32,
    pub partition_specs: Vec<Value>,
    pub default_spec_id: i32,
    pub last_partition_id: i32,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_snapshot_id: Option<i64>,
    #[serde(default)]
    pub snapshots: Vec<Snapshot>,
    #[serde(default)]
    pub snapshot_log: Vec<Value>,
    #[serde(default)]
    pub metadata_log: Vec<Value>,
    pub sort_orders: Vec<Value>,
    pub default_sort_order_id: i32,
    #[serde(default)]
    pub refs: BTreeMap<String, Value>,
    /// What sluice does not read, kept as it was.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// One snapshot: the table's files as of one commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Snapshot {
    pub snapshot_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_snapshot_id: Option<i64>,
    /// 0 in format version 1, whose snapshots have none.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sequence_number: i64,
    pub timestamp_ms: i64,
    pub manifest_list: String,
    pub summary: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_id: Option<i32>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

impl TableMetadata {
    /// A new table at `location` of `schema` (its highest field id
    /// `last_column_id`), unpartitioned, with no snapshot.
    pub fn new(location: &str, schema: &Schema, last_column_id: i32, now_ms: i64) -> Self {
        TableMetadata {
            format_version: FORMAT_VERSION,
            table_uuid: uuid::Uuid::new_v4().to_string(),
            location: location.to_owned(),
            last_sequence_number: 0,
            last_updated_ms: now_ms,
            last_column_id,
            schemas: vec![schema.to_json()],
            current_schema_id: schema.schema_id,
            partition_specs: vec![serde_json::json!({"spec-id": 0, "fields": []})],
            default_spec_id: 0,
            last_partition_id: 999,
            properties: BTreeMap::from([
                (
                    "write.parquet.compression-codec".to_owned(),
                    "zstd".to_owned(),
                ),
                (
                    crate::schema::NAME_MAPPING.to_owned(),
                    schema.name_mapping(None).to_string(),
                ),
            ]),
            current_snapshot_id: None,
            snapshots: Vec::new(),
            snapshot_log: Vec::new(),
            metadata_log: Vec::new(),
            sort_orders: vec![serde_json::json!({"order-id": 0, "fields": []})],
            default_sort_order_id: 0,
            refs: BTreeMap::new(),
            other: Map::new(),
        }
    }

    /// The current schema.
    pub fn current_schema(&self) -> Result<Schema, crate::schema::SchemaError> {
        let value = self
            .schemas
            .iter()
            .find(|s| s["schema-id"].as_i64() == Some(i64::from(self.current_schema_id)))
            .ok_or_else(|| {
                crate::schema::SchemaError::Malformed(format!(
                    "no schema {} among the table's schemas",
                    self.current_schema_id
                ))
            })?;
        Schema::from_json(value)
    }

    /// The snapshot the main branch is at.
    pub fn current_snapshot(&self) -> Option<&Snapshot> {
        let id = self.current_snapshot_id?;
        self.snapshots.iter().find(|s| s.snapshot_id == id)
    }

    /// The current snapshot and its ancestors, newest first (as far as the
    /// table still holds them).
    pub fn ancestry(&self) -> impl Iterator<Item = &Snapshot> {
        let mut next = self.current_snapshot();
        std::iter::from_fn(move || {
            let this = next?;
            next = this
                .parent_snapshot_id
                .and_then(|parent| self.snapshots.iter().find(|s| s.snapshot_id == parent));
            Some(this)
        })
    }

    /// Whether the default partition spec has fields.
    pub fn is_partitioned(&self) -> bool {
        self.partition_specs
            .iter()
            .find(|s| s["spec-id"].as_i64() == Some(i64::from(self.default_spec_id)))
            .and_then(|s| s["fields"].as_array())
            .is_some_and(|fields| !fields.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Metadata another writer made reads, and writes back with what sluice
    /// does not know kept (here: statistics, and a field of its own).
    #[test]
    fn fields_sluice_does_not_know_are_kept() {
        let theirs = serde_json::json!({
            "format-version": 2, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
            "location": "s3://bucket/t", "last-sequence-number": 1, "last-updated-ms": 5,
            "last-column-id": 1,
            "schemas": [{"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long"}]}],
            "current-schema-id": 0,
            "partition-specs": [{"spec-id": 0, "fields": []}], "default-spec-id": 0,
            "last-partition-id": 999, "properties": {"owner": "spark"},
            "current-snapshot-id": 7,
            "snapshots": [{"snapshot-id": 7, "sequence-number": 1, "timestamp-ms": 5,
                "manifest-list": "s3://bucket/t/metadata/snap-7.avro",
                "summary": {"operation": "append"}, "schema-id": 0, "first-row-id": 0}],
            "snapshot-log": [], "metadata-log": [],
            "sort-orders": [{"order-id": 0, "fields": []}], "default-sort-order-id": 0,
            "refs": {"main": {"snapshot-id": 7, "type": "branch"}},
            "statistics": [], "engine-notes": "kept",
        });
        let metadata: TableMetadata = serde_json::from_value(theirs.clone()).unwrap();
        assert_eq!(metadata.current_snapshot().unwrap().snapshot_id, 7);
        assert_eq!(metadata.current_schema().unwrap().fields[0].name, "id");
        assert_eq!(serde_json::to_value(&metadata).unwrap(), theirs);
    }
}
