//! Iceberg schemas: fields with ids, as table metadata holds them
//! (`{"type": "struct", "schema-id": 0, "fields": [...]}`), made from an
//! Arrow schema (a stream's columns) and merged into a table's current one:
//! a column the table has keeps its id, a new one gets the next id after the
//! table's `last-column-id`. A type change is refused, naming the column;
//! Iceberg's own promotions (int → long, float → double) are taken.
//!
//! Data files carry the ids too: [`Schema::to_arrow`] gives the Arrow schema
//! whose fields hold `PARQUET:field_id`, which the Parquet writer stores.

use std::collections::HashMap;

use arrow_schema::{DataType, Field as ArrowField, Fields, Schema as ArrowSchema, TimeUnit};
use serde_json::{json, Map, Value};

/// Where the Parquet writer finds a field's id in an Arrow field's metadata.
pub const PARQUET_FIELD_ID: &str = "PARQUET:field_id";

/// The table property that maps column names to field ids for data files
/// written without ids.
pub const NAME_MAPPING: &str = "schema.name-mapping.default";

/// A table's schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Schema {
    pub schema_id: i32,
    pub fields: Vec<Field>,
    /// What else the schema says (`identifier-field-ids`), kept as it was.
    pub other: Map<String, Value>,
}

/// One field of a struct (a column, at the top).
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub id: i32,
    pub name: String,
    pub required: bool,
    pub kind: Type,
    /// What else the field says (`doc`, `initial-default`, `write-default`),
    /// kept as it was.
    pub other: Map<String, Value>,
}

/// A field's type.
#[derive(Debug, Clone, PartialEq)]
pub enum Type {
    /// `boolean`, `int`, `long`, `float`, `double`, `decimal(P,S)`, `date`,
    /// `time`, `timestamp`, `timestamptz`, `string`, `uuid`, `binary`, …
    Primitive(String),
    Struct(Vec<Field>),
    List {
        element_id: i32,
        element_required: bool,
        element: Box<Type>,
    },
    Map {
        key_id: i32,
        key: Box<Type>,
        value_id: i32,
        value_required: bool,
        value: Box<Type>,
    },
}

/// Why a stream's columns do not fit a table's schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("column {column} is {table} in the table, and {stream} in the records")]
    TypeChange {
        column: String,
        table: String,
        stream: String,
    },
    #[error("column {column} is required in the table, and the records may leave it out")]
    Required { column: String },
    #[error("column {column} has Arrow type {kind}, which sluice does not write to Iceberg")]
    Unsupported { column: String, kind: String },
    #[error("the table's schema does not read: {0}")]
    Malformed(String),
}

impl Schema {
    /// As table metadata holds it.
    pub fn to_json(&self) -> Value {
        let mut out = self.other.clone();
        out.insert("type".into(), json!("struct"));
        out.insert("schema-id".into(), json!(self.schema_id));
        out.insert(
            "fields".into(),
            Value::Array(self.fields.iter().map(Field::to_json).collect()),
        );
        Value::Object(out)
    }

    /// From table metadata.
    pub fn from_json(value: &Value) -> Result<Schema, SchemaError> {
        Ok(Schema {
            schema_id: value["schema-id"].as_i64().unwrap_or(0) as i32,
            fields: fields_from_json(&value["fields"])?,
            other: others(value, &["type", "schema-id", "fields"]),
        })
    }

    /// The highest field id anywhere in it.
    pub fn highest_id(&self) -> i32 {
        fn of(kind: &Type) -> i32 {
            match kind {
                Type::Primitive(_) => 0,
                Type::Struct(fields) => fields
                    .iter()
                    .map(|f| f.id.max(of(&f.kind)))
                    .max()
                    .unwrap_or(0),
                Type::List {
                    element_id,
                    element,
                    ..
                } => (*element_id).max(of(element)),
                Type::Map {
                    key_id,
                    key,
                    value_id,
                    value,
                    ..
                } => (*key_id).max(*value_id).max(of(key)).max(of(value)),
            }
        }
        of(&Type::Struct(self.fields.clone()))
    }

    /// `arrow`'s columns merged into this schema: the same fields (ids kept)
    /// and new ones after them, numbered from `last_column_id` on (which is
    /// raised). None when nothing changes.
    pub fn merged(
        &self,
        arrow: &ArrowSchema,
        last_column_id: &mut i32,
    ) -> Result<Option<Schema>, SchemaError> {
        let fields = merge_fields(&self.fields, arrow.fields(), last_column_id, "")?;
        Ok((fields != self.fields).then(|| Schema {
            schema_id: self.schema_id + 1,
            fields,
            other: self.other.clone(),
        }))
    }

    /// A new table's schema from `arrow`, ids from 1 on; the last id given.
    pub fn from_arrow(arrow: &ArrowSchema) -> Result<(Schema, i32), SchemaError> {
        let mut last = 0;
        let fields = merge_fields(&[], arrow.fields(), &mut last, "")?;
        Ok((
            Schema {
                schema_id: 0,
                fields,
                other: Map::new(),
            },
            last,
        ))
    }

    /// The table property [`NAME_MAPPING`]'s value: each field's id by its
    /// name, nested fields included, so that readers find the columns of a
    /// data file that has no field ids.
    ///
    /// Names `previous` (the property's value before) gave each id are kept
    /// beside the current one: files written under a column's old name
    /// still read after another engine renamed it.
    pub fn name_mapping(&self, previous: Option<&str>) -> Value {
        let mut aliases: HashMap<i64, Vec<String>> = HashMap::new();
        if let Some(previous) = previous.and_then(|p| serde_json::from_str::<Value>(p).ok()) {
            collect(&previous, &mut aliases);
        }
        return Value::Array(
            self.fields
                .iter()
                .map(|f| mapped(f.id, &f.name, &f.kind, &aliases))
                .collect(),
        );

        fn collect(entries: &Value, into: &mut HashMap<i64, Vec<String>>) {
            for entry in entries.as_array().into_iter().flatten() {
                if let (Some(id), Some(names)) =
                    (entry["field-id"].as_i64(), entry["names"].as_array())
                {
                    into.entry(id)
                        .or_default()
                        .extend(names.iter().filter_map(|n| n.as_str().map(str::to_owned)));
                }
                collect(&entry["fields"], into);
            }
        }

        fn mapped(id: i32, name: &str, kind: &Type, aliases: &HashMap<i64, Vec<String>>) -> Value {
            let mut names = vec![name.to_owned()];
            for alias in aliases.get(&i64::from(id)).into_iter().flatten() {
                if !names.contains(alias) {
                    names.push(alias.clone());
                }
            }
            let fields = |fields: &[Field]| -> Value {
                Value::Array(
                    fields
                        .iter()
                        .map(|f| mapped(f.id, &f.name, &f.kind, aliases))
                        .collect(),
                )
            };
            let mut entry = json!({"field-id": id, "names": names});
            let nested = match kind {
                Type::Primitive(_) => None,
                Type::Struct(inner) => Some(fields(inner)),
                Type::List {
                    element_id,
                    element,
                    ..
                } => Some(json!([mapped(*element_id, "element", element, aliases)])),
                Type::Map {
                    key_id,
                    key,
                    value_id,
                    value,
                    ..
                } => Some(json!([
                    mapped(*key_id, "key", key, aliases),
                    mapped(*value_id, "value", value, aliases)
                ])),
            };
            if let Some(nested) = nested {
                entry["fields"] = nested;
            }
            entry
        }
    }

    /// The Arrow schema of a data file of this schema: every field with its
    /// id in [`PARQUET_FIELD_ID`].
    pub fn to_arrow(&self) -> ArrowSchema {
        ArrowSchema::new(self.fields.iter().map(Field::to_arrow).collect::<Vec<_>>())
    }
}

impl Field {
    fn to_json(&self) -> Value {
        let mut out = self.other.clone();
        out.insert("id".into(), json!(self.id));
        out.insert("name".into(), json!(self.name));
        out.insert("required".into(), json!(self.required));
        out.insert("type".into(), self.kind.to_json());
        Value::Object(out)
    }

    fn to_arrow(&self) -> ArrowField {
        with_id(
            ArrowField::new(&self.name, self.kind.to_arrow(), !self.required),
            self.id,
        )
    }
}

fn with_id(field: ArrowField, id: i32) -> ArrowField {
    field.with_metadata(HashMap::from([(
        PARQUET_FIELD_ID.to_owned(),
        id.to_string(),
    )]))
}

impl Type {
    /// The type as the table's metadata JSON has it.
    pub fn to_json(&self) -> Value {
        match self {
            Type::Primitive(name) => json!(name),
            Type::Struct(fields) => json!({
                "type": "struct",
                "fields": fields.iter().map(Field::to_json).collect::<Vec<_>>(),
            }),
            Type::List {
                element_id,
                element_required,
                element,
            } => json!({
                "type": "list",
                "element-id": element_id,
                "element-required": element_required,
                "element": element.to_json(),
            }),
            Type::Map {
                key_id,
                key,
                value_id,
                value_required,
                value,
            } => json!({
                "type": "map",
                "key-id": key_id,
                "key": key.to_json(),
                "value-id": value_id,
                "value-required": value_required,
                "value": value.to_json(),
            }),
        }
    }

    fn from_json(value: &Value) -> Result<Type, SchemaError> {
        let malformed = || SchemaError::Malformed(value.to_string());
        if let Some(name) = value.as_str() {
            return Ok(Type::Primitive(name.to_owned()));
        }
        let id = |name: &str| value[name].as_i64().map(|n| n as i32).ok_or_else(malformed);
        match value["type"].as_str() {
            Some("struct") => Ok(Type::Struct(fields_from_json(&value["fields"])?)),
            Some("list") => Ok(Type::List {
                element_id: id("element-id")?,
                element_required: value["element-required"].as_bool().unwrap_or(false),
                element: Box::new(Type::from_json(&value["element"])?),
            }),
            Some("map") => Ok(Type::Map {
                key_id: id("key-id")?,
                key: Box::new(Type::from_json(&value["key"])?),
                value_id: id("value-id")?,
                value_required: value["value-required"].as_bool().unwrap_or(false),
                value: Box::new(Type::from_json(&value["value"])?),
            }),
            _ => Err(malformed()),
        }
    }

    /// The name of the type, for messages.
    fn describe(&self) -> String {
        match self {
            Type::Primitive(name) => name.clone(),
            other => other.to_json()["type"].as_str().unwrap_or("?").to_owned(),
        }
    }

    fn to_arrow(&self) -> DataType {
        match self {
            Type::Primitive(name) => primitive_to_arrow(name),
            Type::Struct(fields) => {
                DataType::Struct(fields.iter().map(Field::to_arrow).collect::<Fields>())
            }
            Type::List {
                element_id,
                element_required,
                element,
            } => DataType::List(std::sync::Arc::new(with_id(
                ArrowField::new("element", element.to_arrow(), !element_required),
                *element_id,
            ))),
            Type::Map {
                key_id,
                key,
                value_id,
                value_required,
                value,
            } => {
                let entries = ArrowField::new(
                    "key_value",
                    DataType::Struct(Fields::from(vec![
                        with_id(ArrowField::new("key", key.to_arrow(), false), *key_id),
                        with_id(
                            ArrowField::new("value", value.to_arrow(), !value_required),
                            *value_id,
                        ),
                    ])),
                    false,
                );
                DataType::Map(std::sync::Arc::new(entries), false)
            }
        }
    }
}

fn fields_from_json(value: &Value) -> Result<Vec<Field>, SchemaError> {
    let fields = value
        .as_array()
        .ok_or_else(|| SchemaError::Malformed(value.to_string()))?;
    fields
        .iter()
        .map(|f| {
            Ok(Field {
                id: f["id"]
                    .as_i64()
                    .ok_or_else(|| SchemaError::Malformed(f.to_string()))?
                    as i32,
                name: f["name"].as_str().unwrap_or_default().to_owned(),
                required: f["required"].as_bool().unwrap_or(false),
                kind: Type::from_json(&f["type"])?,
                other: others(f, &["id", "name", "required", "type"]),
            })
        })
        .collect()
}

/// The members of object `value` other than `known`.
fn others(value: &Value, known: &[&str]) -> Map<String, Value> {
    value
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !known.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn primitive_to_arrow(name: &str) -> DataType {
    match name {
        "boolean" => DataType::Boolean,
        "int" => DataType::Int32,
        "long" => DataType::Int64,
        "float" => DataType::Float32,
        "double" => DataType::Float64,
        "date" => DataType::Date32,
        "time" => DataType::Time64(TimeUnit::Microsecond),
        "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, None),
        "timestamptz" => DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into())),
        "string" | "uuid" => DataType::Utf8,
        "binary" => DataType::Binary,
        decimal if decimal.starts_with("decimal(") => {
            let inner = decimal.trim_start_matches("decimal(").trim_end_matches(')');
            let (p, s) = inner.split_once(',').unwrap_or(("38", "0"));
            DataType::Decimal128(
                p.trim().parse().unwrap_or(38),
                s.trim().parse().unwrap_or(0),
            )
        }
        _ => DataType::Binary,
    }
}

/// The Iceberg type of an Arrow type; new nested fields get ids after `last`.
fn arrow_to_type(
    kind: &DataType,
    column: &str,
    last: &mut i32,
    existing: Option<&Type>,
) -> Result<Type, SchemaError> {
    let primitive = |name: &str| Ok(Type::Primitive(name.to_owned()));
    match kind {
        DataType::Boolean => primitive("boolean"),
        DataType::Int8 | DataType::Int16 | DataType::Int32 => primitive("int"),
        DataType::Int64 => primitive("long"),
        DataType::Float32 => primitive("float"),
        DataType::Float64 => primitive("double"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => primitive("string"),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => primitive("binary"),
        DataType::Date32 => primitive("date"),
        DataType::Timestamp(_, None) => primitive("timestamp"),
        DataType::Timestamp(_, Some(_)) => primitive("timestamptz"),
        DataType::Decimal128(p, s) => Ok(Type::Primitive(format!("decimal({p}, {s})"))),
        DataType::Struct(fields) => {
            let before = match existing {
                Some(Type::Struct(fields)) => fields.as_slice(),
                _ => &[],
            };
            Ok(Type::Struct(merge_fields(before, fields, last, column)?))
        }
        DataType::List(element) | DataType::LargeList(element) => {
            let (element_id, before) = match existing {
                Some(Type::List {
                    element_id,
                    element,
                    ..
                }) => (*element_id, Some(element.as_ref())),
                _ => (next(last), None),
            };
            Ok(Type::List {
                element_id,
                element_required: !element.is_nullable(),
                element: Box::new(arrow_to_type(element.data_type(), column, last, before)?),
            })
        }
        DataType::Map(entries, _) => {
            let DataType::Struct(kv) = entries.data_type() else {
                return Err(SchemaError::Unsupported {
                    column: column.to_owned(),
                    kind: kind.to_string(),
                });
            };
            let (key_id, value_id, key_before, value_before) = match existing {
                Some(Type::Map {
                    key_id,
                    key,
                    value_id,
                    value,
                    ..
                }) => (*key_id, *value_id, Some(key.as_ref()), Some(value.as_ref())),
                _ => (next(last), next(last), None, None),
            };
            Ok(Type::Map {
                key_id,
                key: Box::new(arrow_to_type(kv[0].data_type(), column, last, key_before)?),
                value_id,
                value_required: !kv[1].is_nullable(),
                value: Box::new(arrow_to_type(
                    kv[1].data_type(),
                    column,
                    last,
                    value_before,
                )?),
            })
        }
        other => Err(SchemaError::Unsupported {
            column: column.to_owned(),
            kind: other.to_string(),
        }),
    }
}

fn next(last: &mut i32) -> i32 {
    *last += 1;
    *last
}

/// Whether a table column of type `table` takes values of `stream`'s type:
/// the same, or one Iceberg promotes to it.
fn takes(table: &Type, stream: &Type) -> bool {
    match (table, stream) {
        (Type::Primitive(t), Type::Primitive(s)) => {
            t == s
                || matches!(
                    (t.as_str(), s.as_str()),
                    ("long", "int") | ("double", "float")
                )
        }
        (Type::Struct(_), Type::Struct(_))
        | (Type::List { .. }, Type::List { .. })
        | (Type::Map { .. }, Type::Map { .. }) => true,
        _ => false,
    }
}

/// `before`'s fields, each merged with the Arrow field of its name, then the
/// Arrow fields it does not have, as new fields.
fn merge_fields(
    before: &[Field],
    arrow: &Fields,
    last: &mut i32,
    parent: &str,
) -> Result<Vec<Field>, SchemaError> {
    let path = |name: &str| match parent {
        "" => name.to_owned(),
        parent => format!("{parent}.{name}"),
    };
    let mut out = Vec::with_capacity(before.len().max(arrow.len()));
    for field in before {
        let Some(theirs) = arrow.iter().find(|f| f.name() == &field.name) else {
            out.push(field.clone());
            continue;
        };
        let column = path(&field.name);
        if field.required && theirs.is_nullable() {
            return Err(SchemaError::Required { column });
        }
        let kind = arrow_to_type(theirs.data_type(), &column, last, Some(&field.kind))?;
        if !takes(&field.kind, &kind) {
            return Err(SchemaError::TypeChange {
                column,
                table: field.kind.describe(),
                stream: kind.describe(),
            });
        }
        let kind = match (&field.kind, kind) {
            (Type::Primitive(_), _) => field.kind.clone(),
            (_, merged) => merged,
        };
        out.push(Field {
            kind,
            ..field.clone()
        });
    }
    for theirs in arrow.iter() {
        if before.iter().any(|f| f.name == *theirs.name()) {
            continue;
        }
        let id = next(last);
        let column = path(theirs.name());
        out.push(Field {
            id,
            name: theirs.name().clone(),
            // A column added later cannot be required: older files lack it.
            required: before.is_empty() && parent.is_empty() && !theirs.is_nullable(),
            kind: arrow_to_type(theirs.data_type(), &column, last, None)?,
            other: Map::new(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn arrow(fields: Vec<ArrowField>) -> ArrowSchema {
        ArrowSchema::new(fields)
    }

    /// A new table numbers every field, nested ones included; a later merge
    /// keeps the ids, adds new columns after the last id, takes Iceberg's
    /// promotions and refuses other type changes by name.
    #[test]
    fn columns_keep_their_ids_and_new_ones_come_after() {
        let first = arrow(vec![
            ArrowField::new("id", DataType::Int64, false),
            ArrowField::new(
                "tags",
                DataType::List(Arc::new(ArrowField::new("item", DataType::Utf8, true))),
                true,
            ),
            ArrowField::new(
                "who",
                DataType::Struct(Fields::from(vec![ArrowField::new(
                    "name",
                    DataType::Utf8,
                    true,
                )])),
                true,
            ),
        ]);
        let (schema, last) = Schema::from_arrow(&first).unwrap();
        assert_eq!(last, 5);
        assert_eq!(schema.highest_id(), 5);
        assert_eq!(
            schema.to_json(),
            json!({"type": "struct", "schema-id": 0, "fields": [
                {"id": 1, "name": "id", "required": true, "type": "long"},
                {"id": 2, "name": "tags", "required": false, "type":
                    {"type": "list", "element-id": 3, "element-required": false, "element": "string"}},
                {"id": 4, "name": "who", "required": false, "type":
                    {"type": "struct", "fields": [{"id": 5, "name": "name", "required": false, "type": "string"}]}},
            ]})
        );
        assert_eq!(Schema::from_json(&schema.to_json()).unwrap(), schema);
        /// The merge: None for no change, the fields' names and ids, or an error.
        type Merge = Result<Option<Vec<(&'static str, i32)>>, SchemaError>;
        // (the stream's columns, the merge)
        let cases: Vec<(ArrowSchema, Merge)> = vec![
            (first.clone(), Ok(None)),
            (
                arrow(vec![ArrowField::new("id", DataType::Int32, false)]),
                Ok(None),
            ),
            (
                arrow(vec![
                    ArrowField::new("id", DataType::Int64, false),
                    ArrowField::new(
                        "at",
                        DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                        false,
                    ),
                ]),
                Ok(Some(vec![("id", 1), ("tags", 2), ("who", 4), ("at", 6)])),
            ),
            (
                arrow(vec![ArrowField::new("id", DataType::Utf8, false)]),
                Err(SchemaError::TypeChange {
                    column: "id".into(),
                    table: "long".into(),
                    stream: "string".into(),
                }),
            ),
            (
                arrow(vec![ArrowField::new("id", DataType::Int64, true)]),
                Err(SchemaError::Required {
                    column: "id".into(),
                }),
            ),
        ];
        for (stream, want) in cases {
            let mut raised = last;
            let got = schema.merged(&stream, &mut raised).map(|merged| {
                merged.map(|s| {
                    assert_eq!(s.schema_id, 1);
                    s.fields
                        .iter()
                        .map(|f| (f.name.clone(), f.id))
                        .collect::<Vec<_>>()
                })
            });
            let want = want.map(|w| {
                w.map(|fields| {
                    fields
                        .iter()
                        .map(|(n, id)| (n.to_string(), *id))
                        .collect::<Vec<_>>()
                })
            });
            assert_eq!(got, want, "{stream:?}");
        }
        // A data file's fields carry their ids.
        let file = schema.to_arrow();
        assert_eq!(file.field(0).metadata()[PARQUET_FIELD_ID], "1");
        let DataType::List(element) = file.field(1).data_type() else {
            panic!("{file:?}")
        };
        assert_eq!(element.metadata()[PARQUET_FIELD_ID], "3");
    }

    /// What another engine's schema says beyond sluice's model (a doc, a
    /// default, identifier fields) survives a merge; a name mapping keeps
    /// the names an earlier mapping gave an id (a rename's old name).
    #[test]
    fn a_merge_keeps_what_sluice_does_not_model() {
        let theirs = json!({"type": "struct", "schema-id": 3, "identifier-field-ids": [1],
            "fields": [{"id": 1, "name": "id", "required": true, "type": "long",
                "doc": "the key", "write-default": 0}]});
        let schema = Schema::from_json(&theirs).unwrap();
        let mut last = 1;
        let merged = schema
            .merged(
                &arrow(vec![
                    ArrowField::new("id", DataType::Int64, false),
                    ArrowField::new("note", DataType::Utf8, true),
                ]),
                &mut last,
            )
            .unwrap()
            .unwrap();
        let json = merged.to_json();
        assert_eq!(json["identifier-field-ids"], json!([1]));
        assert_eq!(json["fields"][0]["doc"], "the key");
        assert_eq!(json["fields"][0]["write-default"], 0);
        assert_eq!(json["fields"][1]["id"], 2);
        let before = r#"[{"field-id": 1, "names": ["key", "id"]}]"#;
        assert_eq!(
            merged.name_mapping(Some(before)),
            json!([{"field-id": 1, "names": ["id", "key"]}, {"field-id": 2, "names": ["note"]}])
        );
    }
}
