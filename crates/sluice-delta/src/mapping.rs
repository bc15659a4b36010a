//! Column mapping (`delta.columnMapping.mode` = `name` or `id`): a column's
//! name in the table (logical) is not its name in the data files (physical,
//! `delta.columnMapping.physicalName`), and in `id` mode readers find it by
//! its Parquet field id (`delta.columnMapping.id`). sluice's files are
//! decoded from the records under the logical names and stored under the
//! physical ones with their field ids; partition values and statistics are
//! keyed by physical names too.
//!
//! sluice adds no column to such a table (a new one needs an id and a
//! physical name agreed with every other writer): a record that brings one
//! is refused by name. A list of structs (whose fields have physical names
//! of their own) is not written either: a stream over a table with one is
//! refused at its start, naming the column.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{make_array, Array, RecordBatch};
use arrow_data::ArrayData;
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};
use serde_json::Value;

use super::features::COLUMN_MAPPING_MODE;
use super::log::MetaData;

const PHYSICAL_NAME: &str = "delta.columnMapping.physicalName";
const FIELD_ID: &str = "delta.columnMapping.id";

/// One column's physical name and id, and its fields' when it is a struct.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mapped {
    physical: String,
    id: Option<i64>,
    fields: HashMap<String, Mapped>,
}

/// A table's column mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMapping {
    /// Logical top-level name → its mapping.
    columns: HashMap<String, Mapped>,
    mode: String,
}

impl ColumnMapping {
    /// The mapping of a table whose mode is `name` or `id`; None for a
    /// table that maps nothing.
    pub fn of(metadata: &MetaData) -> Result<Option<ColumnMapping>, String> {
        let mode = metadata
            .configuration
            .get(COLUMN_MAPPING_MODE)
            .cloned()
            .flatten();
        let mode = match mode.as_deref() {
            None | Some("none") => return Ok(None),
            Some(mode) => mode.to_string(),
        };
        let schema: Value = serde_json::from_str(&metadata.schema_string)
            .map_err(|e| format!("its schema does not read: {e}"))?;
        Ok(Some(ColumnMapping {
            columns: mapped_fields(&schema, "")?,
            mode,
        }))
    }

    /// The mode (`name` or `id`), for messages.
    pub fn mode(&self) -> &str {
        &self.mode
    }

    /// The physical name of top-level column `logical`.
    pub fn physical_name(&self, logical: &str) -> Option<&str> {
        self.columns.get(logical).map(|m| m.physical.as_str())
    }

    /// The physical path of the column at logical path `path` (a struct's
    /// fields followed as far as they are mapped).
    pub fn physical_path(&self, path: &[&str]) -> Option<Vec<String>> {
        let mut level = &self.columns;
        let mut out = Vec::with_capacity(path.len());
        for name in path {
            let mapped = level.get(*name)?;
            out.push(mapped.physical.clone());
            level = &mapped.fields;
        }
        Some(out)
    }

    /// The schema files are stored under: `logical`'s fields renamed to their
    /// physical names and given their field ids. A field the table does not
    /// map is an error naming it.
    pub fn physical_schema(&self, logical: &Schema) -> Result<SchemaRef, String> {
        let fields = physical_fields(logical.fields(), &self.columns, "")?;
        Ok(Arc::new(Schema::new(fields)))
    }

    /// The first field of `logical` (dotted) the table does not have.
    pub fn unmapped(&self, logical: &Schema) -> Option<String> {
        self.physical_schema(logical).err()
    }
}

/// The mappings of the fields of struct type `schema`.
fn mapped_fields(schema: &Value, prefix: &str) -> Result<HashMap<String, Mapped>, String> {
    let mut out = HashMap::new();
    for (name, field) in crate::schema::named_fields(schema) {
        let dotted = crate::schema::dotted(prefix, name);
        let metadata = field.get("metadata");
        let physical = metadata
            .and_then(|m| m.get(PHYSICAL_NAME))
            .and_then(Value::as_str)
            .ok_or_else(|| format!("column `{dotted}` has no {PHYSICAL_NAME}"))?;
        let id = metadata
            .and_then(|m| m.get(FIELD_ID))
            .and_then(Value::as_i64);
        let fields = match field.get("type") {
            Some(inner @ Value::Object(_))
                if inner.get("type").and_then(Value::as_str) == Some("struct") =>
            {
                mapped_fields(inner, &dotted)?
            }
            _ => HashMap::new(),
        };
        out.insert(
            name.to_string(),
            Mapped {
                physical: physical.to_string(),
                id,
                fields,
            },
        );
    }
    Ok(out)
}

fn physical_fields(
    fields: &Fields,
    mapped: &HashMap<String, Mapped>,
    prefix: &str,
) -> Result<Vec<Field>, String> {
    fields
        .iter()
        .map(|field| {
            let dotted = crate::schema::dotted(prefix, field.name());
            let Some(column) = mapped.get(field.name()) else {
                return Err(dotted);
            };
            let data_type = match field.data_type() {
                DataType::Struct(inner) => {
                    DataType::Struct(physical_fields(inner, &column.fields, &dotted)?.into())
                }
                // The fields of a struct inside a list have physical names
                // too, which sluice does not map: such a column is not written.
                DataType::List(item) | DataType::LargeList(item)
                    if matches!(item.data_type(), DataType::Struct(_) | DataType::List(_)) =>
                {
                    return Err(format!("{dotted}[]"));
                }
                other => other.clone(),
            };
            let mut metadata = field.metadata().clone();
            if let Some(id) = column.id {
                metadata.insert(
                    parquet::arrow::PARQUET_FIELD_ID_META_KEY.to_string(),
                    id.to_string(),
                );
            }
            Ok(
                Field::new(&column.physical, data_type, field.is_nullable())
                    .with_metadata(metadata),
            )
        })
        .collect()
}

/// `batch`, decoded under the logical names, under the physical schema
/// `physical` (the same columns, renamed: no data is copied).
pub fn to_physical(batch: RecordBatch, physical: &SchemaRef) -> Result<RecordBatch, String> {
    let columns = batch
        .columns()
        .iter()
        .zip(physical.fields())
        .map(|(column, field)| retyped(column.to_data(), field.data_type()).map(make_array))
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(physical.clone(), columns).map_err(|e| e.to_string())
}

/// `data` with its type (field names and metadata) replaced by `to`, which
/// has the same layout; nested the same way down.
fn retyped(data: ArrayData, to: &DataType) -> Result<ArrayData, String> {
    let children: Vec<ArrayData> = match to {
        DataType::Struct(fields) => data
            .child_data()
            .iter()
            .zip(fields.iter())
            .map(|(child, field)| retyped(child.clone(), field.data_type()))
            .collect::<Result<_, _>>()?,
        DataType::List(item) | DataType::LargeList(item) => data
            .child_data()
            .iter()
            .map(|child| retyped(child.clone(), item.data_type()))
            .collect::<Result<_, _>>()?,
        _ => return Ok(data),
    };
    data.into_builder()
        .data_type(to.clone())
        .child_data(children)
        .build()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn spark_table() -> MetaData {
        // As Spark 4.2 with Delta 4.4 writes it (trimmed).
        let schema = r#"{"type":"struct","fields":[
            {"name":"id","type":"long","nullable":false,"metadata":{"delta.columnMapping.id":1,"delta.columnMapping.physicalName":"col-c510"}},
            {"name":"s","type":{"type":"struct","fields":[
                {"name":"x","type":"string","nullable":true,"metadata":{"delta.columnMapping.id":3,"delta.columnMapping.physicalName":"col-aa"}}]},
             "nullable":true,"metadata":{"delta.columnMapping.id":2,"delta.columnMapping.physicalName":"col-31d8"}},
            {"name":"tenant","type":"string","nullable":true,"metadata":{"delta.columnMapping.id":4,"delta.columnMapping.physicalName":"col-6561"}}]}"#;
        MetaData {
            configuration: BTreeMap::from([(COLUMN_MAPPING_MODE.into(), Some("id".into()))]),
            ..MetaData::new(schema.into(), vec!["tenant".into()])
        }
    }

    #[test]
    fn files_take_the_physical_names_and_field_ids() {
        let mapping = ColumnMapping::of(&spark_table()).unwrap().unwrap();
        assert_eq!(mapping.physical_name("tenant"), Some("col-6561"));
        assert_eq!(
            mapping.physical_path(&["s", "x"]),
            Some(vec!["col-31d8".to_string(), "col-aa".to_string()])
        );
        let inner = Fields::from(vec![Field::new("x", DataType::Utf8, true)]);
        let logical = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("s", DataType::Struct(inner.clone()), true),
        ]);
        let physical = mapping.physical_schema(&logical).unwrap();
        let names: Vec<&str> = physical
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        assert_eq!(names, ["col-c510", "col-31d8"]);
        assert_eq!(
            physical.field(1).metadata()[parquet::arrow::PARQUET_FIELD_ID_META_KEY],
            "2"
        );
        let DataType::Struct(fields) = physical.field(1).data_type() else {
            panic!("a struct")
        };
        assert_eq!(fields[0].name(), "col-aa");

        let mut decoder = arrow_json::ReaderBuilder::new(Arc::new(logical.clone()))
            .build_decoder()
            .unwrap();
        decoder
            .decode(br#"{"id":1,"s":{"x":"a"}} {"id":2}"#)
            .unwrap();
        let batch = decoder.flush().unwrap().unwrap();
        let stored = to_physical(batch, &physical).unwrap();
        assert_eq!(stored.num_rows(), 2);
        assert_eq!(stored.schema(), physical);

        let unknown = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new(
                "s",
                DataType::Struct(Fields::from(vec![Field::new("y", DataType::Utf8, true)])),
                true,
            ),
        ]);
        assert_eq!(mapping.unmapped(&unknown).as_deref(), Some("s.y"));
        // A list of structs: its fields' physical names are not mapped, so
        // the column is not written (named).
        let listed = Schema::new(vec![Field::new(
            "id",
            DataType::List(Arc::new(Field::new("item", DataType::Struct(inner), true))),
            true,
        )]);
        assert_eq!(mapping.unmapped(&listed).as_deref(), Some("id[]"));
    }

    #[test]
    fn a_table_that_maps_nothing_has_no_mapping() {
        let mut table = spark_table();
        table.configuration.clear();
        assert_eq!(ColumnMapping::of(&table).unwrap(), None);
        table
            .configuration
            .insert(COLUMN_MAPPING_MODE.into(), Some("none".into()));
        assert_eq!(ColumnMapping::of(&table).unwrap(), None);
    }
}
