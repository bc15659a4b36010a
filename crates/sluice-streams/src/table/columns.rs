//! A stream's schema ([`Shape`]) as a Delta table's columns (a JSON struct
//! type), and back: the table's schema is where a stream's learned schema is
//! kept, so that every writer (a restarted one, another gateway, a replaying
//! Kafka member) judges records as the others did. Types map one to one:
//! boolean, long, double, string, array and struct, and from a table's schema
//! (never inferred) timestamp, timestamp_ntz, date, decimal and maps with
//! string keys; columns of other types (binary, maps with other keys, …) are
//! kept in the table and left out of sluice's files.

use serde_json::{json, Value};
use sluice_delta::schema::field;

use crate::table::schema::Shape;

/// The Delta type of `shape`; None while it has no type (only nulls).
pub fn delta_type(shape: &Shape) -> Option<Value> {
    Some(match shape {
        Shape::Null => return None,
        Shape::Bool => json!("boolean"),
        Shape::Int => json!("long"),
        Shape::Float => json!("double"),
        Shape::Text => json!("string"),
        Shape::Timestamp => json!("timestamp"),
        Shape::TimestampNtz => json!("timestamp_ntz"),
        Shape::Date => json!("date"),
        Shape::Decimal(precision, scale) => json!(format!("decimal({precision},{scale})")),
        Shape::Map(value) => json!({
            "type": "map",
            "keyType": "string",
            "valueType": delta_type(value)?,
            "valueContainsNull": true,
        }),
        Shape::List(item) => json!({
            "type": "array",
            "elementType": delta_type(item)?,
            "containsNull": true,
        }),
        Shape::Struct(fields) => {
            let fields: Vec<Value> = fields
                .iter()
                .filter_map(|(name, shape)| Some(field(name, delta_type(shape)?)))
                .collect();
            if fields.is_empty() {
                return None;
            }
            json!({"type": "struct", "fields": fields})
        }
    })
}

/// The shape a Delta type holds, when sluice writes that type.
pub fn shape_of(data_type: &Value) -> Option<Shape> {
    match data_type {
        Value::String(name) => match name.as_str() {
            "boolean" => Some(Shape::Bool),
            "long" => Some(Shape::Int),
            "double" => Some(Shape::Float),
            "string" => Some(Shape::Text),
            "timestamp" => Some(Shape::Timestamp),
            "timestamp_ntz" => Some(Shape::TimestampNtz),
            "date" => Some(Shape::Date),
            decimal => Shape::decimal(decimal),
        },
        Value::Object(map) => match map.get("type").and_then(Value::as_str) {
            Some("map") if map.get("keyType") == Some(&json!("string")) => {
                Some(Shape::Map(Box::new(shape_of(map.get("valueType")?)?)))
            }
            Some("array") => Some(Shape::List(Box::new(shape_of(map.get("elementType")?)?))),
            Some("struct") => Some(Shape::Struct(struct_fields(data_type)?)),
            _ => None,
        },
        _ => None,
    }
}

/// A struct type's fields that sluice can write, as shapes.
pub fn struct_fields(data_type: &Value) -> Option<Vec<(String, Shape)>> {
    let fields = data_type.get("fields")?.as_array()?;
    Some(
        fields
            .iter()
            .filter_map(|f| {
                let name = f.get("name")?.as_str()?;
                Some((name.to_string(), shape_of(f.get("type")?)?))
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_delta::schema::merge_into;

    fn shape(fields: &[(&str, Shape)]) -> Shape {
        Shape::Struct(
            fields
                .iter()
                .map(|(n, s)| (n.to_string(), s.clone()))
                .collect(),
        )
    }

    #[test]
    fn shapes_round_trip_through_delta_types() {
        let cases = [
            shape(&[("a", Shape::Int), ("b", Shape::Text)]),
            shape(&[
                ("l", Shape::List(Box::new(Shape::Float))),
                ("o", shape(&[("x", Shape::Bool)])),
            ]),
        ];
        for case in cases {
            let delta = delta_type(&case).unwrap();
            assert_eq!(shape_of(&delta), Some(case.clone()), "{delta}");
        }
        // Nulls have no type yet; other writers' types are not sluice's.
        assert_eq!(delta_type(&shape(&[("n", Shape::Null)])), None);
        assert_eq!(shape_of(&json!("binary")), None);
        let foreign = json!({"type":"struct","fields":[
            {"name":"t","type":"binary","nullable":true,"metadata":{}},
            {"name":"a","type":"long","nullable":true,"metadata":{}}]});
        assert_eq!(shape_of(&foreign), Some(shape(&[("a", Shape::Int)])));
    }

    #[test]
    fn merging_widens_or_names_the_conflict() {
        type Case<'a> = (&'a str, Shape, Shape, Result<&'a [&'a str], &'a str>);
        let cases: Vec<Case> = vec![
            (
                "a new field is appended",
                shape(&[("a", Shape::Int)]),
                shape(&[("b", Shape::Text)]),
                Ok(&["a", "b"]),
            ),
            (
                "the same field changes nothing",
                shape(&[("a", Shape::Int)]),
                shape(&[("a", Shape::Int)]),
                Ok(&["a"]),
            ),
            (
                "nested fields merge",
                shape(&[("o", shape(&[("x", Shape::Int)]))]),
                shape(&[("o", shape(&[("y", Shape::Bool)]))]),
                Ok(&["o"]),
            ),
            (
                "a type conflict names the field",
                shape(&[("o", shape(&[("x", Shape::Int)]))]),
                shape(&[("o", shape(&[("x", Shape::Text)]))]),
                Err("field `o.x` is long in the table and string in the records"),
            ),
        ];
        for (name, table, ours, want) in cases {
            let mut table = delta_type(&table).unwrap();
            let got = merge_into(&mut table, &delta_type(&ours).unwrap(), "");
            match want {
                Ok(fields) => {
                    got.unwrap();
                    let names: Vec<&str> = table["fields"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|f| f["name"].as_str().unwrap())
                        .collect();
                    assert_eq!(names, fields, "{name}");
                }
                Err(message) => assert_eq!(got.unwrap_err(), message, "{name}"),
            }
        }
        let mut nested = delta_type(&shape(&[("o", shape(&[("x", Shape::Int)]))])).unwrap();
        merge_into(
            &mut nested,
            &delta_type(&shape(&[("o", shape(&[("y", Shape::Bool)]))])).unwrap(),
            "",
        )
        .unwrap();
        assert_eq!(
            shape_of(&nested),
            Some(shape(&[(
                "o",
                shape(&[("x", Shape::Int), ("y", Shape::Bool)])
            )]))
        );
    }
}
