//! An Iceberg table's schema as a stream's ([`Shape`]s), and the rules its
//! owner set on rows that sluice keeps: the table's schema is where a
//! stream's learned schema is kept (as for Delta, see [`super::columns`]),
//! so that every writer judges records as the others did. Types map one to
//! one: boolean, long, double, string, timestamptz, timestamp, date,
//! decimal(P, S), list, struct and maps with string keys; columns of other
//! types (int, float, binary, uuid, time, fixed, …) are kept in the table and
//! left out of sluice's files. A required column becomes a required field
//! of the stream; one sluice cannot give a value refuses the stream.

use sluice_iceberg::schema::{Field, Schema, Type};

use crate::table::schema::{Required, Shape};

/// The shape a column of `kind` holds, when sluice writes that type.
pub fn shape_of(kind: &Type) -> Option<Shape> {
    match kind {
        Type::Primitive(name) => match name.as_str() {
            "boolean" => Some(Shape::Bool),
            "long" => Some(Shape::Int),
            "double" => Some(Shape::Float),
            "string" => Some(Shape::Text),
            "timestamptz" => Some(Shape::Timestamp),
            "timestamp" => Some(Shape::TimestampNtz),
            "date" => Some(Shape::Date),
            decimal => Shape::decimal(&decimal.replace(' ', "")),
        },
        Type::Struct(fields) => Some(Shape::Struct(struct_fields(fields))),
        Type::List { element, .. } => Some(Shape::List(Box::new(shape_of(element)?))),
        Type::Map { key, value, .. } if **key == Type::Primitive("string".into()) => {
            Some(Shape::Map(Box::new(shape_of(value)?)))
        }
        Type::Map { .. } => None,
    }
}

/// The fields sluice can write, as shapes.
pub fn struct_fields(fields: &[Field]) -> Vec<(String, Shape)> {
    fields
        .iter()
        .filter_map(|f| Some((f.name.clone(), shape_of(&f.kind)?)))
        .collect()
}

/// The table's required columns as the stream's required fields (a nested
/// one where its parents are structs); a rule sluice cannot keep refuses,
/// naming the column: a required column of a type sluice does not write (its
/// files would leave it out), and a list or map that allows no null inside
/// (sluice does not check inside collections).
pub fn table_rules(schema: &Schema, partition_columns: &[String]) -> Result<Required, String> {
    let mut paths = Vec::new();
    collect(&schema.fields, &mut Vec::new(), &mut paths)?;
    Ok(Required::of_table(paths, partition_columns))
}

fn collect(
    fields: &[Field],
    parent: &mut Vec<String>,
    paths: &mut Vec<Vec<String>>,
) -> Result<(), String> {
    for field in fields {
        parent.push(field.name.clone());
        let dotted = parent.join(".");
        match &field.kind {
            Type::List {
                element_required: true,
                ..
            }
            | Type::Map {
                value_required: true,
                ..
            } => {
                return Err(format!(
                    "`{dotted}` allows no nulls inside a list or map, which sluice does not \
                     check; it does not append to such a table"
                ))
            }
            _ => {}
        }
        if field.required {
            if shape_of(&field.kind).is_none() {
                return Err(format!(
                    "column `{dotted}` is required and of a type sluice does not write ({}); \
                     its files would leave it out",
                    field.kind.to_json()
                ));
            }
            paths.push(parent.clone());
        }
        match &field.kind {
            Type::Struct(inner) => collect(inner, parent, paths)?,
            Type::List { element, .. } => inside_collection(element, &dotted)?,
            Type::Map { value, .. } => inside_collection(value, &dotted)?,
            Type::Primitive(_) => {}
        }
        parent.pop();
    }
    Ok(())
}

/// Refuses a required field inside a list or map (at `dotted`): sluice does
/// not check inside collections.
fn inside_collection(kind: &Type, dotted: &str) -> Result<(), String> {
    let fields = match kind {
        Type::Struct(fields) => fields,
        Type::List { element, .. } => return inside_collection(element, dotted),
        Type::Map { value, .. } => return inside_collection(value, dotted),
        Type::Primitive(_) => return Ok(()),
    };
    for field in fields {
        let path = format!("{dotted}[].{}", field.name);
        if field.required {
            return Err(format!(
                "`{path}` allows no nulls inside a list or map, which sluice does not check; \
                 it does not append to such a table"
            ));
        }
        inside_collection(&field.kind, &path)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema(fields: serde_json::Value) -> Schema {
        Schema::from_json(&json!({"type": "struct", "schema-id": 0, "fields": fields})).unwrap()
    }

    #[test]
    fn iceberg_types_become_the_shapes_sluice_writes() {
        let table = schema(json!([
            {"id": 1, "name": "b", "required": false, "type": "boolean"},
            {"id": 2, "name": "n", "required": false, "type": "long"},
            {"id": 3, "name": "x", "required": false, "type": "double"},
            {"id": 4, "name": "s", "required": false, "type": "string"},
            {"id": 5, "name": "at", "required": false, "type": "timestamptz"},
            {"id": 6, "name": "wall", "required": false, "type": "timestamp"},
            {"id": 7, "name": "d", "required": false, "type": "date"},
            {"id": 8, "name": "price", "required": false, "type": "decimal(10, 2)"},
            {"id": 9, "name": "tags", "required": false, "type":
                {"type": "list", "element-id": 13, "element-required": false, "element": "string"}},
            {"id": 10, "name": "attrs", "required": false, "type":
                {"type": "map", "key-id": 14, "key": "string", "value-id": 15,
                 "value-required": false, "value": "long"}},
            {"id": 11, "name": "small", "required": false, "type": "int"},
            {"id": 12, "name": "raw", "required": false, "type": "binary"},
        ]));
        let names: Vec<(String, Shape)> = struct_fields(&table.fields);
        assert_eq!(
            names,
            [
                ("b".to_string(), Shape::Bool),
                ("n".into(), Shape::Int),
                ("x".into(), Shape::Float),
                ("s".into(), Shape::Text),
                ("at".into(), Shape::Timestamp),
                ("wall".into(), Shape::TimestampNtz),
                ("d".into(), Shape::Date),
                ("price".into(), Shape::Decimal(10, 2)),
                ("tags".into(), Shape::List(Box::new(Shape::Text))),
                ("attrs".into(), Shape::Map(Box::new(Shape::Int))),
            ],
            "int and binary columns are another writer's: kept, left out of sluice's files"
        );
    }

    #[test]
    fn required_columns_are_kept_or_the_stream_refused_naming_them() {
        let user = json!({"id": 2, "name": "user", "required": false, "type": {"type": "struct",
            "fields": [{"id": 3, "name": "name", "required": true, "type": "string"}]}});
        let cases = [
            (
                json!([{"id": 1, "name": "id", "required": true, "type": "long"}, user]),
                Ok(vec!["id", "user.name"]),
            ),
            (
                json!([{"id": 1, "name": "raw", "required": true, "type": "binary"}]),
                Err("`raw` is required"),
            ),
            (
                json!([{"id": 1, "name": "tags", "required": false, "type": {"type": "list",
                    "element-id": 2, "element-required": true, "element": "string"}}]),
                Err("`tags` allows no nulls"),
            ),
            (
                json!([{"id": 1, "name": "l", "required": false, "type": {"type": "list",
                    "element-id": 2, "element-required": false, "element": {"type": "struct",
                    "fields": [{"id": 3, "name": "z", "required": true, "type": "long"}]}}}]),
                Err("`l[].z` allows no nulls"),
            ),
        ];
        for (fields, expected) in cases {
            let got = table_rules(&schema(fields.clone()), &[]);
            match (got, expected) {
                (Ok(required), Ok(paths)) => {
                    let dotted: Vec<String> =
                        required.paths().iter().map(|p| p.join(".")).collect();
                    assert_eq!(dotted, paths, "{fields}");
                }
                (Err(reason), Err(names)) => assert!(reason.contains(names), "{reason}"),
                (got, _) => panic!("{fields}: {got:?}"),
            }
        }
    }
}
