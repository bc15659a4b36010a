//! A Delta table's schema (`schemaString`, a JSON struct type) as sluice
//! reads and widens it: fields merged in (a field of another type is a
//! conflict), and the rules another writer put in it (NOT NULL fields,
//! column invariants, no nulls inside lists and maps).

use serde_json::{json, Map, Value};

/// One struct field: nullable, no metadata.
pub fn field(name: &str, data_type: Value) -> Value {
    json!({"name": name, "type": data_type, "nullable": true, "metadata": {}})
}

/// `name` under `path` (dotted; at the top when `path` is empty).
pub fn dotted(path: &str, name: &str) -> String {
    match path {
        "" => name.to_owned(),
        path => format!("{path}.{name}"),
    }
}

/// The fields of struct type `data_type` (none when it is no struct), each
/// with its name (empty when it has none).
pub fn named_fields(data_type: &Value) -> impl Iterator<Item = (&str, &Value)> {
    data_type
        .get("fields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|field| {
            let name = field
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            (name, field)
        })
}

/// Merges the fields of `ours` (a struct type) into `table`'s, in place:
/// new fields are appended (nested ones too); a field both have must have
/// the same type. Whether `table` changed.
pub fn merge_into(table: &mut Value, ours: &Value, path: &str) -> Result<bool, String> {
    let (Some(table_fields), Some(our_fields)) = (
        table.get_mut("fields").and_then(Value::as_array_mut),
        ours.get("fields").and_then(Value::as_array),
    ) else {
        return Err(format!("`{path}` is not a struct in both schemas"));
    };
    let mut changed = false;
    for our in our_fields {
        let name = our.get("name").and_then(Value::as_str).unwrap_or_default();
        let our_type = our.get("type").unwrap_or(&Value::Null);
        let dotted = dotted(path, name);
        let theirs = table_fields
            .iter_mut()
            .find(|f| f.get("name").and_then(Value::as_str) == Some(name));
        match theirs {
            None => {
                table_fields.push(our.clone());
                changed = true;
            }
            Some(their) => {
                let their_type = their.get_mut("type").expect("a field has a type");
                changed |= merge_types(their_type, our_type, &dotted)?;
            }
        }
    }
    Ok(changed)
}

fn merge_types(table: &mut Value, ours: &Value, path: &str) -> Result<bool, String> {
    if table == ours {
        return Ok(false);
    }
    let kind = |v: &Value| v.get("type").and_then(Value::as_str).map(str::to_string);
    match (kind(table).as_deref(), kind(ours).as_deref()) {
        (Some("struct"), Some("struct")) => merge_into(table, ours, path),
        (Some("array"), Some("array")) => {
            let theirs = table.get_mut("elementType").expect("an array has elements");
            merge_types(theirs, &ours["elementType"], &format!("{path}[]"))
        }
        _ => Err(format!(
            "field `{path}` is {} in the table and {} in the records",
            describe(table),
            describe(ours)
        )),
    }
}

fn describe(data_type: &Value) -> String {
    match data_type {
        Value::String(name) => name.clone(),
        other => other
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string(),
    }
}

/// The fields a row must give a value, as paths (`["o", "x"]`): the
/// struct fields the table declares `"nullable": false`, at any depth of
/// structs (a nested one binds when its parent struct is there).
pub fn required_paths(data_type: &Value) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    collect_fields(data_type, &mut Vec::new(), &mut |path, field| {
        if field.get("nullable").and_then(Value::as_bool) == Some(false) {
            paths.push(path.to_vec());
        }
    });
    paths
}

/// Where the table allows no null inside a list or map (`containsNull` or
/// `valueContainsNull` false, or a NOT NULL field of a struct inside one),
/// as dotted paths (`l[]`, `m{}`, `l[].z`): rules sluice does not check.
pub fn no_nulls_inside_collections(data_type: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk_collections(data_type, "", false, &mut found);
    found
}

fn walk_collections(data_type: &Value, path: &str, inside: bool, found: &mut Vec<String>) {
    match data_type.get("type").and_then(Value::as_str) {
        Some("struct") => {
            for (name, field) in named_fields(data_type) {
                let at = dotted(path, name);
                if inside && field.get("nullable").and_then(Value::as_bool) == Some(false) {
                    found.push(at.clone());
                }
                if let Some(inner) = field.get("type") {
                    walk_collections(inner, &at, inside, found);
                }
            }
        }
        Some("array") => {
            let at = format!("{path}[]");
            if data_type.get("containsNull").and_then(Value::as_bool) == Some(false) {
                found.push(at.clone());
            }
            if let Some(inner) = data_type.get("elementType") {
                walk_collections(inner, &at, true, found);
            }
        }
        Some("map") => {
            let at = format!("{path}{{}}");
            if data_type.get("valueContainsNull").and_then(Value::as_bool) == Some(false) {
                found.push(at.clone());
            }
            for part in ["keyType", "valueType"] {
                if let Some(inner) = data_type.get(part) {
                    walk_collections(inner, &at, true, found);
                }
            }
        }
        _ => {}
    }
}

/// The fields with a column invariant (`delta.invariants` in their
/// metadata, a SQL expression), as dotted paths with the expression.
pub fn invariants(data_type: &Value) -> Vec<(String, String)> {
    let mut found = Vec::new();
    collect_fields(data_type, &mut Vec::new(), &mut |path, field| {
        if let Some(invariant) = field.pointer("/metadata/delta.invariants") {
            let expression = invariant
                .as_str()
                .and_then(|text| serde_json::from_str::<Value>(text).ok())
                .and_then(|v| v.pointer("/expression/expression").cloned())
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| invariant.to_string());
            found.push((path.join("."), expression));
        }
    });
    found
}

/// Calls `each` with every struct field under `data_type` (through structs,
/// not arrays) and its path.
fn collect_fields(
    data_type: &Value,
    path: &mut Vec<String>,
    each: &mut dyn FnMut(&[String], &Value),
) {
    let Some(fields) = data_type.get("fields").and_then(Value::as_array) else {
        return;
    };
    for field in fields {
        let Some(name) = field.get("name").and_then(Value::as_str) else {
            continue;
        };
        path.push(name.to_owned());
        each(path, field);
        if let Some(inner) = field.get("type").filter(|t| t.is_object()) {
            collect_fields(inner, path, each);
        }
        path.pop();
    }
}

/// An empty struct type, to merge a first schema into.
pub fn empty_struct() -> Value {
    Value::Object(Map::from_iter([
        ("type".to_string(), json!("struct")),
        ("fields".to_string(), json!([])),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules another writer put in a table's schema: NOT NULL fields
    /// (at any depth of structs, not through arrays) and column invariants.
    #[test]
    fn required_fields_and_invariants_are_read_from_the_schema() {
        let invariant = r#"{"expression":{"expression":"n > 0"}}"#;
        let schema = json!({"type": "struct", "fields": [
            {"name": "id", "type": "long", "nullable": false, "metadata": {}},
            {"name": "n", "type": "long", "nullable": true,
             "metadata": {"delta.invariants": invariant}},
            {"name": "o", "type": {"type": "struct", "fields": [
                {"name": "x", "type": "string", "nullable": false, "metadata": {}},
                {"name": "y", "type": "string", "nullable": true, "metadata": {}}]},
             "nullable": true, "metadata": {}},
            {"name": "l", "type": {"type": "array", "elementType": {"type": "struct",
                "fields": [{"name": "z", "type": "long", "nullable": false, "metadata": {}}]},
                "containsNull": true}, "nullable": true, "metadata": {}},
        ]});
        assert_eq!(
            required_paths(&schema),
            vec![
                vec!["id".to_string()],
                vec!["o".to_string(), "x".to_string()]
            ]
        );
        assert_eq!(
            invariants(&schema),
            vec![("n".to_string(), "n > 0".to_string())]
        );
    }
}
