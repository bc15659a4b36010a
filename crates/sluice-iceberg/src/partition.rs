//! Partitions from a stream's key template: each `NAME=` directory is one
//! partition field of the table sluice makes, in order.
//! - `NAME={field:NAME}`: `identity(NAME)`, the directory's value typed as
//!   its source column (string, long, int or boolean).
//! - `NAME={yyyy}-{mm}-{dd}` and `NAME={yyyy}-{mm}-{dd}-{hh}` with the
//!   stream's `time_field` TS: `day(TS)` and `hour(TS)` of a timestamp
//!   column, the directory's value written as Iceberg writes these
//!   transforms' paths (`2026-11-29`, `2026-11-29-10`; UTC).
//!
//! Source columns stay in the files, so a reader that does not project
//! partition values reads them all the same. A table partitioned otherwise
//! (another transform, other columns or names, or none where the template
//! makes directories) is refused by name.

use std::collections::BTreeMap;

use apache_avro::types::Value as Avro;
use serde_json::{json, Value};

use crate::metadata::TableMetadata;
use crate::schema::{Schema, Type};

/// The first partition field id, as Iceberg numbers them.
pub const FIRST_FIELD_ID: i32 = 1000;

/// How a partition's value comes from its source column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    Identity,
    /// Days since 1970-01-01 of a timestamp.
    Day,
    /// Hours since 1970-01-01 00:00 of a timestamp.
    Hour,
}

impl Transform {
    pub fn name(self) -> &'static str {
        match self {
            Transform::Identity => "identity",
            Transform::Day => "day",
            Transform::Hour => "hour",
        }
    }

    fn parse(name: &str) -> Option<Transform> {
        [Transform::Identity, Transform::Day, Transform::Hour]
            .into_iter()
            .find(|t| t.name() == name)
    }

    /// Source types it takes from sluice.
    fn sources(self) -> &'static [&'static str] {
        match self {
            Transform::Identity => &["string", "long", "int", "boolean"],
            Transform::Day | Transform::Hour => &["timestamptz", "timestamp"],
        }
    }

    fn refusal(self, name: &str, source_type: &str) -> String {
        match self {
            Transform::Identity => format!(
                "partition column `{name}` is of type {source_type}; sluice partitions by \
                 string, long, int and boolean columns only"
            ),
            time => format!(
                "{}({name}) needs a timestamp column, and `{name}` is of type {source_type}",
                time.name()
            ),
        }
    }
}

/// A partition the key template declares: its `NAME=` directory, the
/// column its value is of and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeclaredPartition {
    /// The directory's name, the partition field's.
    pub name: String,
    pub source: String,
    pub transform: Transform,
}

impl DeclaredPartition {
    /// `NAME={field:NAME}`.
    pub fn identity(column: &str) -> DeclaredPartition {
        DeclaredPartition {
            name: column.to_owned(),
            source: column.to_owned(),
            transform: Transform::Identity,
        }
    }

    fn describe(&self) -> String {
        match self.transform {
            Transform::Identity => self.source.clone(),
            t => format!("{}={}({})", self.name, t.name(), self.source),
        }
    }
}

/// One partition field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionField {
    pub source_id: i32,
    pub field_id: i32,
    pub name: String,
    pub transform: Transform,
    /// The source column's primitive type.
    pub source_type: String,
}

/// A table's default partition spec, as sluice writes to it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionSpec {
    pub spec_id: i32,
    pub fields: Vec<PartitionField>,
}

impl PartitionSpec {
    /// The spec of `declared` partitions (in order) of `schema`.
    pub fn declared(
        declared: &[DeclaredPartition],
        schema: &Schema,
    ) -> Result<PartitionSpec, String> {
        let mut fields = Vec::new();
        for (n, partition) in declared.iter().enumerate() {
            let name = &partition.source;
            let Some(column) = schema.fields.iter().find(|f| &f.name == name) else {
                return Err(format!(
                    "the key template partitions by `{name}`, and no record brought that field"
                ));
            };
            let source_type = match &column.kind {
                Type::Primitive(t) if partition.transform.sources().contains(&t.as_str()) => {
                    t.clone()
                }
                other => return Err(partition.transform.refusal(name, &format!("{other:?}"))),
            };
            fields.push(PartitionField {
                source_id: column.id,
                field_id: FIRST_FIELD_ID + n as i32,
                name: partition.name.clone(),
                transform: partition.transform,
                source_type,
            });
        }
        Ok(PartitionSpec { spec_id: 0, fields })
    }

    /// Identity partitions on `columns` (in order) of `schema`.
    pub fn identity(columns: &[String], schema: &Schema) -> Result<PartitionSpec, String> {
        let declared: Vec<DeclaredPartition> = columns
            .iter()
            .map(|c| DeclaredPartition::identity(c))
            .collect();
        Self::declared(&declared, schema)
    }

    /// `metadata`'s default spec, which must be partitions sluice writes
    /// (exactly `declared`, the key template's, when given); why not, when
    /// it is not.
    pub fn of_table(
        metadata: &TableMetadata,
        declared: Option<&[DeclaredPartition]>,
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
        let made = |partitions: &[DeclaredPartition]| -> Vec<String> {
            partitions.iter().map(DeclaredPartition::describe).collect()
        };
        if listed.is_empty() {
            // Unpartitioned (every commit of most tables asks): no schema
            // to read.
            return match declared.filter(|c| !c.is_empty()) {
                Some(declared) => Err(format!(
                    "it is partitioned by []; the key template's NAME= directories make {:?}",
                    made(declared)
                )),
                None => Ok(PartitionSpec {
                    spec_id: metadata.default_spec_id,
                    fields: Vec::new(),
                }),
            };
        }
        let schema = metadata.current_schema().map_err(|e| e.to_string())?;
        let mut fields = Vec::new();
        let mut found = Vec::new();
        for field in &listed {
            let source_id = field["source-id"].as_i64().unwrap_or(-1) as i32;
            let source = schema.fields.iter().find(|f| f.id == source_id);
            let transform = field["transform"].as_str().and_then(Transform::parse);
            let (Some(source), Some(transform)) = (source, transform) else {
                return Err(format!(
                    "it is partitioned by {field}, and sluice writes identity, day and hour \
                     partitions of top-level columns only"
                ));
            };
            let Type::Primitive(source_type) = &source.kind else {
                return Err(format!(
                    "it is partitioned by the nested column `{}`",
                    source.name
                ));
            };
            let name = field["name"].as_str().unwrap_or(&source.name).to_owned();
            found.push(DeclaredPartition {
                name: name.clone(),
                source: source.name.clone(),
                transform,
            });
            fields.push(PartitionField {
                source_id,
                field_id: field["field-id"].as_i64().unwrap_or(0) as i32,
                name,
                transform,
                source_type: source_type.clone(),
            });
        }
        if let Some(declared) = declared.filter(|d| *d != found.as_slice()) {
            return Err(format!(
                "it is partitioned by {:?}; the key template's NAME= directories make {:?}",
                made(&found),
                made(declared)
            ));
        }
        if let Some(field) = fields
            .iter()
            .find(|f| !f.transform.sources().contains(&f.source_type.as_str()))
        {
            let source = &found[fields.iter().position(|f| f == field).unwrap_or(0)].source;
            return Err(field.transform.refusal(source, &field.source_type));
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
                        "transform": f.transform.name(),
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
                        "type": ["null", avro_type(f)],
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
                        let typed = match (f.transform, f.source_type.as_str()) {
                            (Transform::Day, _) => day_number(&text).map(Avro::Date),
                            (Transform::Hour, _) => hour_number(&text).map(Avro::Int),
                            (_, "string") => Some(Avro::String(text.clone())),
                            (_, "long") => text.parse().ok().map(Avro::Long),
                            (_, "int") => text.parse().ok().map(Avro::Int),
                            (_, "boolean") => text.parse().ok().map(Avro::Boolean),
                            _ => None,
                        };
                        let typed = typed.ok_or_else(|| {
                            let what = match f.transform {
                                Transform::Identity => format!("{} value", f.source_type),
                                Transform::Day => "day (YYYY-MM-DD)".to_owned(),
                                Transform::Hour => "hour (YYYY-MM-DD-HH)".to_owned(),
                            };
                            format!("partition directory {}={text} is no {what}", f.name)
                        })?;
                        Avro::Union(1, Box::new(typed))
                    }
                };
                Ok((f.name.clone(), value))
            })
            .collect()
    }
}

/// A partition value's Avro type, as Iceberg's writers give it: a day is a
/// date, an hour an int, an identity value its column's type.
fn avro_type(field: &PartitionField) -> Value {
    match (field.transform, field.source_type.as_str()) {
        (Transform::Day, _) => json!({"type": "int", "logicalType": "date"}),
        (Transform::Hour, _) | (_, "int") => json!("int"),
        (_, "long") => json!("long"),
        (_, "boolean") => json!("boolean"),
        _ => json!("string"),
    }
}

/// Days since 1970-01-01 of `YYYY-MM-DD`.
fn day_number(text: &str) -> Option<i32> {
    let bytes = text.as_bytes();
    if text.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i64> {
        let part = &text[range];
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())?
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        _ => return None,
    };
    if !(1..=days_in_month).contains(&day) {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    i32::try_from(era * 146_097 + day_of_era - 719_468).ok()
}

/// Hours since 1970-01-01 00:00 of `YYYY-MM-DD-HH`.
fn hour_number(text: &str) -> Option<i32> {
    let (day, hour) = (text.get(..10)?, text.get(10..)?);
    let hour: i32 = hour
        .strip_prefix('-')
        .filter(|h| h.len() == 2)?
        .parse()
        .ok()?;
    (0..24)
        .contains(&hour)
        .then(|| day_number(day)?.checked_mul(24)?.checked_add(hour))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::from_arrow(&arrow_schema::Schema::new(vec![
            arrow_schema::Field::new("id", arrow_schema::DataType::Int64, true),
            arrow_schema::Field::new("tenant", arrow_schema::DataType::Utf8, true),
            arrow_schema::Field::new("score", arrow_schema::DataType::Float64, true),
            arrow_schema::Field::new(
                "ts",
                arrow_schema::DataType::Timestamp(
                    arrow_schema::TimeUnit::Microsecond,
                    Some("+00:00".into()),
                ),
                true,
            ),
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

    /// (case, the declared partition, its spec field's (source, transform)
    /// or the refusal)
    #[test]
    fn time_partitions_are_of_timestamp_columns() {
        let time = |name: &str, source: &str, transform| DeclaredPartition {
            name: name.to_owned(),
            source: source.to_owned(),
            transform,
        };
        let cases = vec![
            (
                "a day",
                time("ts_day", "ts", Transform::Day),
                Ok((4, "day")),
            ),
            (
                "an hour",
                time("ts_hour", "ts", Transform::Hour),
                Ok((4, "hour")),
            ),
            (
                "a day of a string",
                time("d", "tenant", Transform::Day),
                Err("day(tenant) needs a timestamp column"),
            ),
            (
                "a missing field",
                time("d", "when", Transform::Hour),
                Err("no record brought"),
            ),
        ];
        for (case, declared, want) in cases {
            let got = PartitionSpec::declared(std::slice::from_ref(&declared), &schema());
            match (got, want) {
                (Ok(spec), Ok((source, transform))) => {
                    let field = &spec.fields[0];
                    assert_eq!(
                        (field.source_id, field.transform.name(), field.name.as_str()),
                        (source, transform, declared.name.as_str()),
                        "{case}"
                    );
                    let json = spec.fields_json();
                    assert_eq!(json[0]["transform"], transform, "{case}");
                }
                (Err(got), Err(want)) => assert!(got.contains(want), "{case}: {got}"),
                (got, want) => panic!("{case}: {got:?}, wanted {want:?}"),
            }
        }
    }

    /// (case, transform, directory value, the tuple's value or the refusal)
    #[test]
    fn time_tuples_count_days_and_hours_since_1970() {
        let cases: Vec<(&str, Transform, &str, Result<Avro, &str>)> = vec![
            ("the epoch", Transform::Day, "1970-01-01", Ok(Avro::Date(0))),
            (
                "a day",
                Transform::Day,
                "2026-11-29",
                Ok(Avro::Date(20_786)),
            ),
            (
                "a leap day",
                Transform::Day,
                "2024-02-29",
                Ok(Avro::Date(19_782)),
            ),
            (
                "before 1970",
                Transform::Day,
                "1969-12-31",
                Ok(Avro::Date(-1)),
            ),
            (
                "no such day",
                Transform::Day,
                "2026-02-29",
                Err("is no day"),
            ),
            ("not a day", Transform::Day, "2026-11-2x", Err("is no day")),
            (
                "an hour",
                Transform::Hour,
                "2026-11-29-10",
                Ok(Avro::Int(498_874)),
            ),
            (
                "midnight",
                Transform::Hour,
                "1970-01-01-00",
                Ok(Avro::Int(0)),
            ),
            (
                "hour 24",
                Transform::Hour,
                "2026-11-29-24",
                Err("is no hour"),
            ),
            (
                "a day for an hour",
                Transform::Hour,
                "2026-11-29",
                Err("is no hour"),
            ),
        ];
        for (case, transform, value, want) in cases {
            let declared = DeclaredPartition {
                name: "at".to_owned(),
                source: "ts".to_owned(),
                transform,
            };
            let spec = PartitionSpec::declared(&[declared], &schema()).unwrap();
            let values = BTreeMap::from([("at".to_owned(), Some(value.to_owned()))]);
            match (spec.tuple(&values), want) {
                (Ok(got), Ok(want)) => {
                    assert_eq!(got[0].1, Avro::Union(1, Box::new(want)), "{case}")
                }
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
