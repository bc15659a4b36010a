//! Identity partitions: a stream's key template names its partition columns
//! in `NAME=` directories (`orders/tenant={field:tenant}/{uuid}`); the table
//! sluice makes is partitioned by `identity(NAME)` for each, in that order,
//! and each data file's partition tuple is what its directories say, typed
//! as its source column (string, long, int or boolean). The columns stay in
//! the files too, so a reader that does not project partition values reads
//! them all the same. A table partitioned otherwise (another transform,
//! other columns, or none where the template makes directories) is refused
//! by name.

use std::collections::BTreeMap;

use apache_avro::types::Value as Avro;
use serde_json::{json, Value};

use crate::metadata::TableMetadata;
use crate::schema::{Schema, Type};

/// The first partition field id, as Iceberg numbers them.
pub const FIRST_FIELD_ID: i32 = 1000;

/// One identity partition field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionField {
    pub source_id: i32,
    pub field_id: i32,
    pub name: String,
    /// The source column's primitive type.
    pub source_type: String,
}

/// A table's default partition spec, as sluice writes to it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionSpec {
    pub spec_id: i32,
    pub fields: Vec<PartitionField>,
}

/// Source types an identity partition of sluice's may have.
const TYPES: [&str; 4] = ["string", "long", "int", "boolean"];

impl PartitionSpec {
    /// Identity partitions on `columns` (in order) of `schema`.
    pub fn identity(columns: &[String], schema: &Schema) -> Result<PartitionSpec, String> {
        let mut fields = Vec::new();
        for (n, name) in columns.iter().enumerate() {
            let Some(column) = schema.fields.iter().find(|f| &f.name == name) else {
                return Err(format!(
                    "the key template partitions by `{name}`, and no record brought that field"
                ));
            };
            let source_type = match &column.kind {
                Type::Primitive(t) if TYPES.contains(&t.as_str()) => t.clone(),
                other => {
                    return Err(format!(
                        "partition column `{name}` is of type {other:?}; sluice partitions by \
                         string, long, int and boolean columns only"
                    ))
                }
            };
            fields.push(PartitionField {
                source_id: column.id,
                field_id: FIRST_FIELD_ID + n as i32,
                name: name.clone(),
                source_type,
            });
        }
        Ok(PartitionSpec { spec_id: 0, fields })
    }

    /// `metadata`'s default spec, which must be identity partitions (on
    /// exactly `columns`, the key template's, when given); why not, when it
    /// is not.
    pub fn of_table(
        metadata: &TableMetadata,
        columns: Option<&[String]>,
    ) -> Result<PartitionSpec, String> {
        let spec = metadata
            .partition_specs
            .iter()
            .find(|s| s["spec-id"].as_i64() == Some(metadata.default_spec_id as i64))
            .ok_or_else(|| {
                format!(
                    "its default partition spec {} is missing",
                    metadata.default_spec_id
                )
            })?;
        let listed = spec["fields"].as_array().cloned().unwrap_or_default();
        if listed.is_empty() {
            // Unpartitioned (every commit of most tables asks): no schema
            // to read.
            return match columns.filter(|c| !c.is_empty()) {
                Some(columns) => Err(format!(
                    "it is partitioned by []; the key template's NAME= directories make {columns:?}"
                )),
                None => Ok(PartitionSpec {
                    spec_id: metadata.default_spec_id,
                    fields: Vec::new(),
                }),
            };
        }
        let schema = metadata.current_schema().map_err(|e| e.to_string())?;
        let mut fields = Vec::new();
        for field in &listed {
            let source_id = field["source-id"].as_i64().unwrap_or(-1) as i32;
            let transform = field["transform"].as_str().unwrap_or("");
            let source = schema.fields.iter().find(|f| f.id == source_id);
            let (Some(source), "identity") = (source, transform) else {
                return Err(format!(
                    "it is partitioned by {field}, and sluice writes identity partitions of \
                     top-level columns only"
                ));
            };
            let Type::Primitive(source_type) = &source.kind else {
                return Err(format!(
                    "it is partitioned by the nested column `{}`",
                    source.name
                ));
            };
            fields.push(PartitionField {
                source_id,
                field_id: field["field-id"].as_i64().unwrap_or(0) as i32,
                name: field["name"].as_str().unwrap_or(&source.name).to_owned(),
                source_type: source_type.clone(),
            });
        }
        let sources: Vec<&str> = fields
            .iter()
            .map(|f| {
                schema
                    .fields
                    .iter()
                    .find(|s| s.id == f.source_id)
                    .map_or("", |s| s.name.as_str())
            })
            .collect();
        if let Some(columns) = columns.filter(|c| *c != sources.as_slice()) {
            return Err(format!(
                "it is partitioned by {sources:?}; the key template's NAME= directories make {columns:?}"
            ));
        }
        if let Some(field) = fields
            .iter()
            .find(|f| !TYPES.contains(&f.source_type.as_str()))
        {
            return Err(format!(
                "partition column `{}` is of type {}; sluice partitions by string, long, int and \
                 boolean columns only",
                field.name, field.source_type
            ));
        }
        Ok(PartitionSpec {
            spec_id: metadata.default_spec_id,
            fields,
        })
    }

    /// `metadata` (a new table's) partitioned by this spec, its only one.
    pub fn install(&self, metadata: &mut TableMetadata) {
        metadata.partition_specs = vec![json!({"spec-id": 0, "fields": self.fields_json()})];
        metadata.default_spec_id = 0;
        metadata.last_partition_id = self
            .fields
            .iter()
            .map(|f| f.field_id)
            .max()
            .unwrap_or(FIRST_FIELD_ID - 1);
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The spec's fields as the metadata and a manifest's header have them.
    pub fn fields_json(&self) -> Value {
        Value::Array(
            self.fields
                .iter()
                .map(|f| {
                    json!({
                        "source-id": f.source_id,
                        "field-id": f.field_id,
                        "name": f.name,
                        "transform": "identity",
                    })
                })
                .collect(),
        )
    }

    /// The Avro fields of a manifest entry's `partition` record.
    pub fn avro_fields(&self) -> Value {
        Value::Array(
            self.fields
                .iter()
                .map(|f| {
                    json!({
                        "name": f.name,
                        "type": ["null", avro_type(&f.source_type)],
                        "default": null,
                        "field-id": f.field_id,
                    })
                })
                .collect(),
        )
    }

    /// The partition tuple of a file whose directories name `values`
    /// (see `TableLayout::partition_values`).
    pub fn tuple(
        &self,
        values: &BTreeMap<String, Option<String>>,
    ) -> Result<Vec<(String, Avro)>, String> {
        self.fields
            .iter()
            .map(|f| {
                let value = match values.get(&f.name).cloned().flatten() {
                    None => Avro::Union(0, Box::new(Avro::Null)),
                    Some(text) => {
                        let typed = match f.source_type.as_str() {
                            "string" => Some(Avro::String(text.clone())),
                            "long" => text.parse().ok().map(Avro::Long),
                            "int" => text.parse().ok().map(Avro::Int),
                            "boolean" => text.parse().ok().map(Avro::Boolean),
                            _ => None,
                        };
                        let typed = typed.ok_or_else(|| {
                            format!(
                                "partition directory {}={text} is no {} value",
                                f.name, f.source_type
                            )
                        })?;
                        Avro::Union(1, Box::new(typed))
                    }
                };
                Ok((f.name.clone(), value))
            })
            .collect()
    }
}

fn avro_type(iceberg: &str) -> &'static str {
    match iceberg {
        "long" => "long",
        "int" => "int",
        "boolean" => "boolean",
        _ => "string",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::from_arrow(&arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("id", arrow_schema::DataType::Int64, true),
            arrow_schema::Field::new("tenant", arrow_schema::DataType::Utf8, true),
            arrow_schema::Field::new("score", arrow_schema::DataType::Float64, true),
        ]))
        .unwrap()
        .0
    }

    /// (case, columns, the spec's (source, field id) or the refusal)
    #[test]
    fn identity_specs_are_made_of_the_template_s_columns() {
        type Case = (
            &'static str,
            Vec<&'static str>,
            Result<Vec<(i32, i32)>, &'static str>,
        );
        let cases: Vec<Case> = vec![
            ("none", vec![], Ok(vec![])),
            ("a string", vec!["tenant"], Ok(vec![(2, 1000)])),
            ("two", vec!["tenant", "id"], Ok(vec![(2, 1000), (1, 1001)])),
            (
                "a double",
                vec!["score"],
                Err("string, long, int and boolean"),
            ),
            ("a missing field", vec!["region"], Err("no record brought")),
        ];
        for (case, columns, want) in cases {
            let columns: Vec<String> = columns.into_iter().map(str::to_owned).collect();
            let got = PartitionSpec::identity(&columns, &schema()).map(|s| {
                s.fields
                    .iter()
                    .map(|f| (f.source_id, f.field_id))
                    .collect::<Vec<_>>()
            });
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{case}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{case}: {got}"),
                (got, want) => panic!("{case}: {got:?}, wanted {want:?}"),
            }
        }
    }

    /// (case, directory value, the tuple's value or the refusal)
    #[test]
    fn tuples_are_typed_as_their_columns() {
        let spec = PartitionSpec::identity(&["id".to_owned()], &schema()).unwrap();
        let cases: Vec<(&str, Option<&str>, Result<Avro, &str>)> = vec![
            (
                "a long",
                Some("42"),
                Ok(Avro::Union(1, Box::new(Avro::Long(42)))),
            ),
            ("null", None, Ok(Avro::Union(0, Box::new(Avro::Null)))),
            ("not a long", Some("x"), Err("is no long value")),
        ];
        for (case, value, want) in cases {
            let values = BTreeMap::from([("id".to_owned(), value.map(str::to_owned))]);
            match (spec.tuple(&values), want) {
                (Ok(got), Ok(want)) => assert_eq!(got[0].1, want, "{case}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{case}: {got}"),
                (got, want) => panic!("{case}: {got:?}, wanted {want:?}"),
            }
        }
    }
}
