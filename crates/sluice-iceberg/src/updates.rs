//! A REST catalog commit's requirements and updates (the Iceberg REST
//! catalog spec's `TableRequirement` and `TableUpdate`), applied to a table's
//! metadata as Iceberg's own `TableMetadata.Builder` applies them: checked
//! first against the metadata a commit is made on (every requirement must
//! hold, or the commit fails: another writer moved the table), then each
//! update in order. I/O-free; the commit loop in the crate's root writes the
//! result as the next version, and a writer that lost the version checks the
//! requirements again on the winner's metadata.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::metadata::{Snapshot, TableMetadata, MAIN};

/// The highest format version a catalog client may create or upgrade to
/// (sluice's own writers append to version 2 only).
pub const MAX_FORMAT_VERSION: i64 = 3;

/// Format version 3's row lineage: the next row id the table assigns.
const NEXT_ROW_ID: &str = "next-row-id";

/// A condition the table must meet for a commit to apply.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Requirement {
    /// The table does not exist yet.
    AssertCreate,
    AssertTableUuid {
        uuid: String,
    },
    /// The ref points at this snapshot (none: the ref does not exist).
    AssertRefSnapshotId {
        #[serde(rename = "ref")]
        name: String,
        #[serde(rename = "snapshot-id")]
        snapshot_id: Option<i64>,
    },
    AssertLastAssignedFieldId {
        #[serde(rename = "last-assigned-field-id")]
        last_assigned_field_id: i32,
    },
    AssertCurrentSchemaId {
        #[serde(rename = "current-schema-id")]
        current_schema_id: i32,
    },
    AssertLastAssignedPartitionId {
        #[serde(rename = "last-assigned-partition-id")]
        last_assigned_partition_id: i32,
    },
    AssertDefaultSpecId {
        #[serde(rename = "default-spec-id")]
        default_spec_id: i32,
    },
    AssertDefaultSortOrderId {
        #[serde(rename = "default-sort-order-id")]
        default_sort_order_id: i32,
    },
}

/// Why a commit did not apply (the messages are Iceberg's own, which
/// clients match on).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// A requirement does not hold: the table moved (409, retry on top).
    #[error("Requirement failed: {0}")]
    Requirement(String),
    /// An update that cannot apply to this table (400).
    #[error("{0}")]
    Invalid(String),
}

impl Requirement {
    /// Whether it holds for `metadata` (None: no table).
    pub fn check(&self, metadata: Option<&TableMetadata>) -> Result<(), UpdateError> {
        let failed = |what: String| Err(UpdateError::Requirement(what));
        let Some(m) = metadata else {
            return match self {
                Requirement::AssertCreate => Ok(()),
                _ => failed("the table does not exist".into()),
            };
        };
        match self {
            Requirement::AssertCreate => failed("table already exists".into()),
            Requirement::AssertTableUuid { uuid } if *uuid != m.table_uuid => failed(format!(
                "UUID does not match: expected {} != {uuid}",
                m.table_uuid
            )),
            Requirement::AssertRefSnapshotId { name, snapshot_id } => {
                let reference = m.refs.get(name);
                let kind = reference
                    .and_then(|r| r["type"].as_str())
                    .unwrap_or("branch");
                let found = reference.and_then(|r| r["snapshot-id"].as_i64());
                match (found, snapshot_id) {
                    (found, expected) if found == *expected => Ok(()),
                    (None, Some(expected)) => failed(format!(
                        "branch or tag {name} is missing, expected {expected}"
                    )),
                    (Some(_), None) => failed(format!("{kind} {name} was created concurrently")),
                    (Some(found), Some(expected)) => failed(format!(
                        "{kind} {name} has changed: expected id {expected} != {found}"
                    )),
                    (None, None) => Ok(()),
                }
            }
            Requirement::AssertLastAssignedFieldId {
                last_assigned_field_id: id,
            } if *id != m.last_column_id => failed(format!(
                "last assigned field id changed: expected id {id} != {}",
                m.last_column_id
            )),
            Requirement::AssertCurrentSchemaId {
                current_schema_id: id,
            } if *id != m.current_schema_id => failed(format!(
                "current schema changed: expected id {id} != {}",
                m.current_schema_id
            )),
            Requirement::AssertLastAssignedPartitionId {
                last_assigned_partition_id: id,
            } if *id != m.last_partition_id => failed(format!(
                "last assigned partition id changed: expected id {id} != {}",
                m.last_partition_id
            )),
            Requirement::AssertDefaultSpecId {
                default_spec_id: id,
            } if *id != m.default_spec_id => failed(format!(
                "default partition spec changed: expected id {id} != {}",
                m.default_spec_id
            )),
            Requirement::AssertDefaultSortOrderId {
                default_sort_order_id: id,
            } if *id != m.default_sort_order_id => failed(format!(
                "default sort order changed: expected id {id} != {}",
                m.default_sort_order_id
            )),
            _ => Ok(()),
        }
    }
}

/// The metadata a table being created starts from: no schema, spec, sort
/// order or snapshot yet (the creating commit's updates add them).
pub fn empty_metadata(location: &str, now_ms: i64) -> TableMetadata {
    TableMetadata {
        // Raised by the creating commit's `upgrade-format-version`.
        format_version: 1,
        table_uuid: uuid::Uuid::new_v4().to_string(),
        location: location.to_owned(),
        last_sequence_number: 0,
        last_updated_ms: now_ms,
        last_column_id: 0,
        schemas: Vec::new(),
        current_schema_id: -1,
        partition_specs: Vec::new(),
        default_spec_id: -1,
        last_partition_id: 999,
        properties: BTreeMap::new(),
        current_snapshot_id: None,
        snapshots: Vec::new(),
        snapshot_log: Vec::new(),
        metadata_log: Vec::new(),
        sort_orders: Vec::new(),
        default_sort_order_id: -1,
        refs: BTreeMap::new(),
        other: Default::default(),
    }
}

/// What "the last one added" (`-1`) refers to while updates apply.
#[derive(Default)]
struct LastAdded {
    schema: Option<i32>,
    spec: Option<i32>,
    sort_order: Option<i32>,
}

/// Applies `updates` in order to `metadata` (at `now_ms`), then checks that
/// the result is a whole table.
pub fn apply(
    metadata: &mut TableMetadata,
    updates: &[Value],
    now_ms: i64,
) -> Result<(), UpdateError> {
    let mut last = LastAdded::default();
    for update in updates {
        apply_one(metadata, update, &mut last)?;
    }
    if metadata.schemas.is_empty() || schema_index(metadata, metadata.current_schema_id).is_none() {
        return Err(UpdateError::Invalid(
            "the table has no current schema".into(),
        ));
    }
    if metadata.partition_specs.is_empty() {
        metadata.partition_specs = vec![json!({"spec-id": 0, "fields": []})];
        metadata.default_spec_id = 0;
    }
    if metadata.sort_orders.is_empty() {
        metadata.sort_orders = vec![json!({"order-id": 0, "fields": []})];
        metadata.default_sort_order_id = 0;
    }
    metadata.last_updated_ms = now_ms.max(metadata.last_updated_ms);
    Ok(())
}

fn invalid<T>(what: impl Into<String>) -> Result<T, UpdateError> {
    Err(UpdateError::Invalid(what.into()))
}

fn int(update: &Value, name: &str) -> Result<i64, UpdateError> {
    update[name]
        .as_i64()
        .ok_or_else(|| UpdateError::Invalid(format!("{} needs {name}", update["action"])))
}

/// The ids an update lists under `name`.
fn ids(update: &Value, name: &str) -> Vec<i64> {
    update[name]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_i64)
        .collect()
}

/// The id `update` sets under `name` (`-1`: the one `last` added), which
/// must be among `items` (`schema-id`, `spec-id`; a sort order's `order-id`).
fn chosen(
    update: &Value,
    name: &str,
    last: Option<i32>,
    items: &[Value],
    what: &str,
) -> Result<i32, UpdateError> {
    let mut id = int(update, name)? as i32;
    if id == -1 {
        id = last.ok_or_else(|| {
            UpdateError::Invalid(format!("Cannot set last added {what}: none has been added"))
        })?;
    }
    let key = if name == "sort-order-id" {
        "order-id"
    } else {
        name
    };
    if !items.iter().any(|i| i[key].as_i64() == Some(i64::from(id))) {
        return invalid(format!("Cannot set current {what} to unknown {what}: {id}"));
    }
    Ok(id)
}

fn schema_index(metadata: &TableMetadata, id: i32) -> Option<usize> {
    metadata
        .schemas
        .iter()
        .position(|s| s["schema-id"].as_i64() == Some(i64::from(id)))
}

/// The highest `name` among `items` (-1 for none).
fn highest(items: &[Value], name: &str) -> i64 {
    items
        .iter()
        .filter_map(|i| i[name].as_i64())
        .max()
        .unwrap_or(-1)
}

/// `value` without its `name` member (an id), to compare content.
fn without(value: &Value, name: &str) -> Value {
    let mut value = value.clone();
    if let Some(map) = value.as_object_mut() {
        map.remove(name);
    }
    value
}

/// Adds `item` to `items` under id `name`, reusing one with the same content;
/// the id it has. `fresh` is the id a new one gets.
fn add_or_reuse(items: &mut Vec<Value>, item: &Value, name: &str, fresh: i64) -> i64 {
    let content = without(item, name);
    if let Some(found) = items.iter().find(|i| without(i, name) == content) {
        return found[name].as_i64().unwrap_or(fresh);
    }
    let mut item = item.clone();
    item[name] = json!(fresh);
    items.push(item);
    fresh
}

fn apply_one(
    m: &mut TableMetadata,
    update: &Value,
    last: &mut LastAdded,
) -> Result<(), UpdateError> {
    let action = update["action"].as_str().unwrap_or_default();
    match action {
        "assign-uuid" => {
            let uuid = update["uuid"].as_str().unwrap_or_default();
            if uuid.is_empty() {
                return invalid("assign-uuid needs a uuid");
            }
            m.table_uuid = uuid.to_owned();
        }
        "upgrade-format-version" => {
            let version = int(update, "format-version")?;
            if version < m.format_version {
                return invalid(format!(
                    "Cannot downgrade v{} table to v{version}",
                    m.format_version
                ));
            }
            if version > MAX_FORMAT_VERSION {
                return invalid(format!(
                    "Cannot upgrade table to unsupported format version: v{version} (supported: v{MAX_FORMAT_VERSION})"
                ));
            }
            if version >= 3 && m.format_version < 3 {
                m.other.entry(NEXT_ROW_ID.to_owned()).or_insert(json!(0));
            }
            m.format_version = version;
        }
        "add-schema" => {
            let schema = &update["schema"];
            let parsed = crate::schema::Schema::from_json(schema)
                .map_err(|e| UpdateError::Invalid(e.to_string()))?;
            // `last-column-id` is deprecated: the highest id seen wins.
            let given = update["last-column-id"].as_i64().unwrap_or(0) as i32;
            let fresh = highest(&m.schemas, "schema-id") + 1;
            let id = add_or_reuse(&mut m.schemas, schema, "schema-id", fresh);
            m.last_column_id = m.last_column_id.max(given).max(parsed.highest_id());
            last.schema = Some(id as i32);
        }
        "set-current-schema" => {
            m.current_schema_id = chosen(update, "schema-id", last.schema, &m.schemas, "schema")?;
        }
        "add-spec" | "add-partition-spec" => {
            let spec = &update["spec"];
            let fresh = highest(&m.partition_specs, "spec-id") + 1;
            let id = add_or_reuse(&mut m.partition_specs, spec, "spec-id", fresh);
            let highest_field = spec["fields"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f["field-id"].as_i64())
                .max()
                .unwrap_or(999) as i32;
            m.last_partition_id = m.last_partition_id.max(highest_field);
            last.spec = Some(id as i32);
        }
        "set-default-spec" => {
            m.default_spec_id = chosen(
                update,
                "spec-id",
                last.spec,
                &m.partition_specs,
                "partition spec",
            )?;
        }
        "add-sort-order" => {
            let order = &update["sort-order"];
            let unsorted = order["fields"].as_array().is_none_or(|f| f.is_empty());
            let fresh = if unsorted {
                0
            } else {
                highest(&m.sort_orders, "order-id").max(0) + 1
            };
            let id = add_or_reuse(&mut m.sort_orders, order, "order-id", fresh);
            last.sort_order = Some(id as i32);
        }
        "set-default-sort-order" => {
            m.default_sort_order_id = chosen(
                update,
                "sort-order-id",
                last.sort_order,
                &m.sort_orders,
                "sort order",
            )?;
        }
        "add-snapshot" => {
            let snapshot: Snapshot = serde_json::from_value(update["snapshot"].clone())
                .map_err(|e| UpdateError::Invalid(format!("add-snapshot: {e}")))?;
            if let Some(key) = snapshot.summary.keys().find(|k| k.starts_with("sluice.")) {
                return invalid(format!(
                    "a snapshot's summary may not carry {key}: sluice's streams keep their \
                     positions there"
                ));
            }
            if m.snapshots
                .iter()
                .any(|s| s.snapshot_id == snapshot.snapshot_id)
            {
                return invalid(format!(
                    "Snapshot already exists for id: {}",
                    snapshot.snapshot_id
                ));
            }
            if snapshot.sequence_number <= m.last_sequence_number
                && snapshot.parent_snapshot_id.is_some()
            {
                return invalid(format!(
                    "Cannot add snapshot with sequence number {} older than last sequence number {}",
                    snapshot.sequence_number, m.last_sequence_number
                ));
            }
            if m.format_version >= 3 {
                let next_row_id = m
                    .other
                    .get(NEXT_ROW_ID)
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                let Some(first_row_id) = snapshot.other.get("first-row-id").and_then(Value::as_i64)
                else {
                    return invalid("Cannot add a snapshot: first-row-id is null");
                };
                if first_row_id < next_row_id {
                    return invalid(format!(
                        "Cannot add a snapshot, first-row-id is behind table next-row-id: {first_row_id} < {next_row_id}"
                    ));
                }
                let added = snapshot
                    .other
                    .get("added-rows")
                    .and_then(Value::as_i64)
                    .unwrap_or(0);
                m.other
                    .insert(NEXT_ROW_ID.to_owned(), json!(next_row_id + added));
            }
            m.last_sequence_number = m.last_sequence_number.max(snapshot.sequence_number);
            m.last_updated_ms = m.last_updated_ms.max(snapshot.timestamp_ms);
            m.snapshots.push(snapshot);
        }
        "set-snapshot-ref" => {
            let name = update["ref-name"].as_str().unwrap_or_default();
            let snapshot_id = int(update, "snapshot-id")?;
            let Some(snapshot) = m.snapshots.iter().find(|s| s.snapshot_id == snapshot_id) else {
                return invalid(format!(
                    "Cannot set {name} to unknown snapshot: {snapshot_id}"
                ));
            };
            let timestamp = snapshot.timestamp_ms;
            let mut reference = json!({
                "snapshot-id": snapshot_id,
                "type": update["type"].as_str().unwrap_or("branch"),
            });
            for field in [
                "max-ref-age-ms",
                "max-snapshot-age-ms",
                "min-snapshots-to-keep",
            ] {
                if !update[field].is_null() {
                    reference[field] = update[field].clone();
                }
            }
            m.refs.insert(name.to_owned(), reference);
            if name == MAIN {
                m.current_snapshot_id = Some(snapshot_id);
                m.snapshot_log
                    .push(json!({"timestamp-ms": timestamp, "snapshot-id": snapshot_id}));
            }
        }
        "remove-snapshots" => {
            let ids = ids(update, "snapshot-ids");
            // The newest snapshot sluice made holds where its streams are
            // (each Kafka partition's offset, each writer's last batch),
            // found through the main branch's history after it: without
            // them the streams would start over and append again.
            let mut needed = Vec::new();
            for snapshot in m.ancestry() {
                needed.push(snapshot.snapshot_id);
                if snapshot.summary.contains_key(crate::TRANSACTIONS) {
                    break;
                }
            }
            let sluice_made = m
                .ancestry()
                .any(|s| s.summary.contains_key(crate::TRANSACTIONS));
            if let Some(held) = needed
                .iter()
                .copied()
                .find(|id| sluice_made && ids.contains(id))
            {
                return invalid(format!(
                    "snapshot {held} is the newest sluice made or comes after it on the main \
                     branch: readers find the positions of sluice's streams ({}) through it; \
                     expire only snapshots older than the newest sluice made",
                    crate::TRANSACTIONS
                ));
            }
            m.snapshots.retain(|s| !ids.contains(&s.snapshot_id));
            m.refs.retain(|_, r| {
                r["snapshot-id"]
                    .as_i64()
                    .is_none_or(|id| !ids.contains(&id))
            });
            if m.current_snapshot_id.is_some_and(|id| ids.contains(&id)) {
                m.current_snapshot_id = None;
            }
            m.snapshot_log.retain(|e| {
                e["snapshot-id"]
                    .as_i64()
                    .is_none_or(|id| !ids.contains(&id))
            });
        }
        "remove-snapshot-ref" => {
            let name = update["ref-name"].as_str().unwrap_or_default();
            m.refs.remove(name);
            if name == MAIN {
                m.current_snapshot_id = None;
            }
        }
        "set-location" => match update["location"].as_str() {
            Some(location) => m.location = location.trim_end_matches('/').to_owned(),
            None => return invalid("set-location needs a location"),
        },
        "set-properties" => {
            let Some(updates) = update["updates"].as_object() else {
                return invalid("set-properties needs updates");
            };
            for (key, value) in updates {
                let value = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                m.properties.insert(key.clone(), value);
            }
        }
        "remove-properties" => {
            for key in update["removals"].as_array().into_iter().flatten() {
                if let Some(key) = key.as_str() {
                    m.properties.remove(key);
                }
            }
        }
        "set-statistics" | "set-partition-statistics" => {
            let (list, member) = if action == "set-statistics" {
                ("statistics", "statistics")
            } else {
                ("partition-statistics", "partition-statistics")
            };
            let file = update[member].clone();
            let snapshot_id = file["snapshot-id"].as_i64();
            let entries = m.other.entry(list.to_owned()).or_insert_with(|| json!([]));
            if let Some(entries) = entries.as_array_mut() {
                entries.retain(|e| e["snapshot-id"].as_i64() != snapshot_id);
                entries.push(file);
            }
        }
        "remove-statistics" | "remove-partition-statistics" => {
            let list = if action == "remove-statistics" {
                "statistics"
            } else {
                "partition-statistics"
            };
            let snapshot_id = int(update, "snapshot-id")?;
            if let Some(entries) = m.other.get_mut(list).and_then(Value::as_array_mut) {
                entries.retain(|e| e["snapshot-id"].as_i64() != Some(snapshot_id));
            }
        }
        "remove-partition-specs" => {
            let ids = ids(update, "spec-ids");
            if ids.contains(&i64::from(m.default_spec_id)) {
                return invalid("Cannot remove the default partition spec");
            }
            m.partition_specs
                .retain(|s| s["spec-id"].as_i64().is_none_or(|id| !ids.contains(&id)));
        }
        "remove-schemas" => {
            let ids = ids(update, "schema-ids");
            if ids.contains(&i64::from(m.current_schema_id)) {
                return invalid("Cannot remove the current schema");
            }
            m.schemas
                .retain(|s| s["schema-id"].as_i64().is_none_or(|id| !ids.contains(&id)));
        }
        other => {
            return invalid(format!(
                "sluice's catalog does not apply table update {other:?}"
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn created() -> TableMetadata {
        let mut m = empty_metadata("s3://b/ns/t", 1);
        let updates = vec![
            json!({"action": "assign-uuid", "uuid": "2cc52516-5e73-41f2-b139-545d41a4e151"}),
            json!({"action": "upgrade-format-version", "format-version": 2}),
            json!({"action": "add-schema", "last-column-id": 2, "schema": {"type": "struct",
                "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long"},
                {"id": 2, "name": "data", "required": false, "type": "string"}]}}),
            json!({"action": "set-current-schema", "schema-id": -1}),
            json!({"action": "add-spec", "spec": {"spec-id": 0, "fields": []}}),
            json!({"action": "set-default-spec", "spec-id": -1}),
            json!({"action": "add-sort-order", "sort-order": {"order-id": 0, "fields": []}}),
            json!({"action": "set-default-sort-order", "sort-order-id": -1}),
            json!({"action": "set-properties", "updates": {"owner": "rck"}}),
        ];
        apply(&mut m, &updates, 2).unwrap();
        m
    }

    #[test]
    fn a_create_s_updates_make_a_whole_table() {
        let m = created();
        assert_eq!(m.table_uuid, "2cc52516-5e73-41f2-b139-545d41a4e151");
        assert_eq!(m.current_schema_id, 0);
        assert_eq!(m.last_column_id, 2);
        assert_eq!(m.default_spec_id, 0);
        assert_eq!(m.default_sort_order_id, 0);
        assert_eq!(m.properties["owner"], "rck");
        assert_eq!(m.current_schema().unwrap().fields.len(), 2);
    }

    #[test]
    fn snapshots_and_refs_move_the_main_branch() {
        let mut m = created();
        let snapshot = |id: i64, parent: Option<i64>, seq: i64| {
            json!({"action": "add-snapshot", "snapshot": {"snapshot-id": id,
                "parent-snapshot-id": parent, "sequence-number": seq, "timestamp-ms": 10 + seq,
                "manifest-list": format!("s3://b/ns/t/metadata/snap-{id}.avro"),
                "summary": {"operation": "append"}, "schema-id": 0}})
        };
        let main = |id: i64| {
            json!({"action": "set-snapshot-ref", "ref-name": "main",
            "type": "branch", "snapshot-id": id})
        };
        apply(&mut m, &[snapshot(7, None, 1), main(7)], 20).unwrap();
        assert_eq!(m.current_snapshot_id, Some(7));
        assert_eq!(m.last_sequence_number, 1);
        // A stale sequence number is refused, naming it.
        let stale = apply(&mut m.clone(), &[snapshot(8, Some(7), 1)], 21).unwrap_err();
        assert!(stale.to_string().contains("sequence number 1"), "{stale}");
        apply(
            &mut m,
            &[
                snapshot(8, Some(7), 2),
                main(8),
                json!({"action": "remove-snapshots", "snapshot-ids": [7]}),
            ],
            22,
        )
        .unwrap();
        let ids: Vec<i64> = m.snapshots.iter().map(|s| s.snapshot_id).collect();
        assert_eq!(ids, [8]);
        assert_eq!(m.refs["main"]["snapshot-id"], 8);
    }

    /// A client's expiry may not drop the snapshot that holds sluice's
    /// streams' positions, nor the history after it; nor may a client's
    /// snapshot carry sluice's keys.
    #[test]
    fn sluice_s_positions_stay_whatever_a_client_expires() {
        let mut m = created();
        let add = |id: i64, parent: Option<i64>, seq: i64, sluice: bool| {
            let mut summary = json!({"operation": "append"});
            if sluice {
                summary[crate::TRANSACTIONS] = json!("{\"w\":1}");
            }
            vec![
                json!({"action": "add-snapshot", "snapshot": {"snapshot-id": id,
                    "parent-snapshot-id": parent, "sequence-number": seq, "timestamp-ms": seq,
                    "manifest-list": "s3://b/l.avro", "summary": summary, "schema-id": 0}}),
                json!({"action": "set-snapshot-ref", "ref-name": "main", "type": "branch",
                    "snapshot-id": id}),
            ]
        };
        let forged = apply(&mut m.clone(), &add(1, None, 1, true), 5).unwrap_err();
        assert!(
            forged.to_string().contains("sluice.transactions"),
            "{forged}"
        );
        // As sluice's own commit would have it.
        let mut sluice_made = add(1, None, 1, false);
        sluice_made[0]["snapshot"]["summary"][crate::TRANSACTIONS] = json!("{}");
        m.snapshots
            .push(serde_json::from_value(sluice_made[0]["snapshot"].clone()).unwrap());
        apply(&mut m, &sluice_made[1..], 5).unwrap();
        apply(&mut m, &add(2, Some(1), 2, false), 6).unwrap();
        apply(&mut m, &add(3, Some(2), 3, false), 7).unwrap();
        let remove = |ids: &[i64]| json!({"action": "remove-snapshots", "snapshot-ids": ids});
        for held in [1, 2] {
            let refused = apply(&mut m.clone(), &[remove(&[held])], 8).unwrap_err();
            assert!(
                refused
                    .to_string()
                    .contains("positions of sluice's streams"),
                "{refused}"
            );
        }
    }

    /// (case, requirement, holds on the created table)
    #[test]
    fn requirements_hold_or_name_what_moved() {
        let m = created();
        let cases = [
            ("create", json!({"type": "assert-create"}), false),
            (
                "uuid",
                json!({"type": "assert-table-uuid", "uuid": m.table_uuid}),
                true,
            ),
            (
                "other uuid",
                json!({"type": "assert-table-uuid", "uuid": "x"}),
                false,
            ),
            (
                "no main yet",
                json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": null}),
                true,
            ),
            (
                "main moved",
                json!({"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 3}),
                false,
            ),
            (
                "field id",
                json!({"type": "assert-last-assigned-field-id", "last-assigned-field-id": 2}),
                true,
            ),
            (
                "stale field id",
                json!({"type": "assert-last-assigned-field-id", "last-assigned-field-id": 1}),
                false,
            ),
            (
                "schema",
                json!({"type": "assert-current-schema-id", "current-schema-id": 0}),
                true,
            ),
            (
                "spec",
                json!({"type": "assert-default-spec-id", "default-spec-id": 1}),
                false,
            ),
            (
                "order",
                json!({"type": "assert-default-sort-order-id", "default-sort-order-id": 0}),
                true,
            ),
            (
                "partition id",
                json!({"type": "assert-last-assigned-partition-id", "last-assigned-partition-id": 999}),
                true,
            ),
        ];
        for (case, requirement, holds) in cases {
            let requirement: Requirement = serde_json::from_value(requirement).unwrap();
            assert_eq!(requirement.check(Some(&m)).is_ok(), holds, "{case}");
        }
        let create: Requirement = serde_json::from_value(json!({"type": "assert-create"})).unwrap();
        assert!(create.check(None).is_ok());
    }
}
