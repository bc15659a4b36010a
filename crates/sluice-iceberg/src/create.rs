//! A new table as a catalog client asks for it, made into the updates of the
//! commit that creates it (so that a create and a staged create's commit
//! take the one path): fresh field ids for its schema, assigned as Iceberg's
//! `TypeUtil.assignFreshIds` does (a struct's fields first, in order, then
//! what each holds), with its partition spec and sort order following the
//! columns to their new ids; partition fields numbered from 1000.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use crate::metadata::FORMAT_VERSION;

/// What a client asks a new table to be (the REST spec's
/// `CreateTableRequest`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct CreateTable {
    pub name: String,
    #[serde(default)]
    pub location: Option<String>,
    pub schema: Value,
    #[serde(default)]
    pub partition_spec: Option<Value>,
    #[serde(default)]
    pub write_order: Option<Value>,
    #[serde(default)]
    pub stage_create: bool,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

/// The updates that make `request`'s table at `location`.
pub(crate) fn updates(request: &CreateTable, location: &str) -> Result<Vec<Value>, String> {
    let mut ids = HashMap::new();
    let mut next = 0;
    let mut schema = request.schema.clone();
    if schema["type"] != "struct" || !schema["fields"].is_array() {
        return Err("a table's schema is a struct with fields".into());
    }
    fresh_struct(&mut schema, &mut next, &mut ids);
    schema["schema-id"] = json!(0);
    let spec = match &request.partition_spec {
        Some(spec) => fresh_spec(spec, &ids)?,
        None => json!({"spec-id": 0, "fields": []}),
    };
    let order = match &request.write_order {
        Some(order) => fresh_order(order, &ids)?,
        None => json!({"order-id": 0, "fields": []}),
    };
    // `format-version` is a request, not a property (as Iceberg has it).
    let mut properties = request.properties.clone();
    let version = match properties.remove("format-version") {
        Some(text) => text
            .parse::<i64>()
            .ok()
            .filter(|v| (1..=crate::updates::MAX_FORMAT_VERSION).contains(v))
            .ok_or_else(|| format!("Unsupported format version: {text}"))?,
        None => FORMAT_VERSION,
    };
    let mut updates = vec![
        json!({"action": "assign-uuid", "uuid": uuid::Uuid::new_v4().to_string()}),
        json!({"action": "upgrade-format-version", "format-version": version}),
        json!({"action": "add-schema", "schema": schema, "last-column-id": next}),
        json!({"action": "set-current-schema", "schema-id": -1}),
        json!({"action": "add-spec", "spec": spec}),
        json!({"action": "set-default-spec", "spec-id": -1}),
        json!({"action": "add-sort-order", "sort-order": order}),
        json!({"action": "set-default-sort-order", "sort-order-id": -1}),
        json!({"action": "set-location", "location": location}),
    ];
    if !properties.is_empty() {
        updates.push(json!({"action": "set-properties", "updates": properties}));
    }
    Ok(updates)
}

fn take(next: &mut i64) -> i64 {
    *next += 1;
    *next
}

/// New ids for a struct's fields (all of them first), then inside each.
fn fresh_struct(value: &mut Value, next: &mut i64, ids: &mut HashMap<i64, i64>) {
    let Some(fields) = value["fields"].as_array_mut() else {
        return;
    };
    for field in fields.iter_mut() {
        let id = take(next);
        if let Some(old) = field["id"].as_i64() {
            ids.insert(old, id);
        }
        field["id"] = json!(id);
    }
    for field in fields.iter_mut() {
        fresh_type(&mut field["type"], next, ids);
    }
}

fn fresh_type(kind: &mut Value, next: &mut i64, ids: &mut HashMap<i64, i64>) {
    match kind["type"].as_str() {
        Some("struct") => fresh_struct(kind, next, ids),
        Some("list") => {
            let id = take(next);
            if let Some(old) = kind["element-id"].as_i64() {
                ids.insert(old, id);
            }
            kind["element-id"] = json!(id);
            fresh_type(&mut kind["element"], next, ids);
        }
        Some("map") => {
            for name in ["key-id", "value-id"] {
                let id = take(next);
                if let Some(old) = kind[name].as_i64() {
                    ids.insert(old, id);
                }
                kind[name] = json!(id);
            }
            fresh_type(&mut kind["key"], next, ids);
            fresh_type(&mut kind["value"], next, ids);
        }
        _ => {}
    }
}

fn source(field: &Value, ids: &HashMap<i64, i64>, what: &str) -> Result<i64, String> {
    let old = field["source-id"]
        .as_i64()
        .ok_or_else(|| format!("a {what} field needs a source-id: {field}"))?;
    ids.get(&old)
        .copied()
        .ok_or_else(|| format!("a {what} field's source-id {old} is no column of the schema"))
}

fn fresh_spec(spec: &Value, ids: &HashMap<i64, i64>) -> Result<Value, String> {
    let mut fields = Vec::new();
    for (i, field) in spec["fields"].as_array().into_iter().flatten().enumerate() {
        let mut field = field.clone();
        field["source-id"] = json!(source(&field, ids, "partition")?);
        field["field-id"] = json!(1000 + i as i64);
        fields.push(field);
    }
    Ok(json!({"spec-id": 0, "fields": fields}))
}

fn fresh_order(order: &Value, ids: &HashMap<i64, i64>) -> Result<Value, String> {
    let mut fields = Vec::new();
    for field in order["fields"].as_array().into_iter().flatten() {
        let mut field = field.clone();
        field["source-id"] = json!(source(&field, ids, "sort")?);
        fields.push(field);
    }
    let id = if fields.is_empty() { 0 } else { 1 };
    Ok(json!({"order-id": id, "fields": fields}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_ids_number_a_struct_s_fields_before_what_they_hold() {
        let request: CreateTable = serde_json::from_value(json!({
            "name": "t",
            "schema": {"type": "struct", "schema-id": 7, "fields": [
                {"id": 10, "name": "point", "required": false, "type": {"type": "struct",
                    "fields": [{"id": 11, "name": "x", "required": true, "type": "double"}]}},
                {"id": 20, "name": "tags", "required": false, "type": {"type": "list",
                    "element-id": 21, "element-required": false, "element": "string"}},
                {"id": 30, "name": "day", "required": true, "type": "date"}]},
            "partition-spec": {"spec-id": 3, "fields": [
                {"source-id": 30, "field-id": 5, "name": "day_day", "transform": "day"}]},
            "write-order": {"order-id": 4, "fields": [
                {"source-id": 11, "transform": "identity", "direction": "asc",
                 "null-order": "nulls-first"}]},
        }))
        .unwrap();
        let updates = updates(&request, "s3://b/ns/t").unwrap();
        let schema = &updates[2]["schema"];
        let ids: Vec<i64> = schema["fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["id"].as_i64().unwrap())
            .collect();
        assert_eq!(ids, [1, 2, 3], "top-level fields first");
        assert_eq!(schema["fields"][0]["type"]["fields"][0]["id"], 4);
        assert_eq!(schema["fields"][1]["type"]["element-id"], 5);
        assert_eq!(updates[2]["last-column-id"], 5);
        assert_eq!(updates[4]["spec"]["fields"][0]["source-id"], 3);
        assert_eq!(updates[4]["spec"]["fields"][0]["field-id"], 1000);
        assert_eq!(updates[6]["sort-order"]["fields"][0]["source-id"], 4);
        assert_eq!(updates[6]["sort-order"]["order-id"], 1);
    }
}
