//! How a stream with a table starts: the table is read (nothing is created
//! yet; the first commit makes it), its schema becomes where the stream's
//! starts, its owner's rules on rows become the stream's required fields,
//! and a table sluice must not append to refuses the stream, naming why.
//! Delta Lake and Iceberg tables each have their reading here; what follows
//! (declared columns, the writer) is the same for both.

use std::sync::Arc;

use sluice_upload::Engine;

use crate::config::{StreamConfig, TableFormat};
use crate::error::StreamConfigError;
use crate::table::delta::mapping::ColumnMapping;
use crate::table::delta::{DeltaTable, TableLayout};
use crate::table::schema::{Required, Shape};
use crate::table::sink::TableSink;
use crate::table::stream_table::StreamTable;

/// A stream's table as read at start: its writer, the fields its schema
/// already holds (where the stream's schema starts), and those every record
/// must give (its NOT NULL columns).
pub(crate) struct OpenedTable {
    pub sink: Arc<TableSink>,
    pub known: Vec<(String, Shape)>,
    pub required: Required,
}

/// What one format's reading found.
struct Found {
    table: StreamTable,
    known: Vec<(String, Shape)>,
    required: Required,
    column_mapping: Option<ColumnMapping>,
}

/// Reads the table of stream `name` (configured by `config`, which has one).
pub(crate) async fn open(
    name: &str,
    config: &StreamConfig,
    engine: &Engine,
) -> Result<OpenedTable, StreamConfigError> {
    let location = config
        .table_location
        .clone()
        .unwrap_or_else(|| name.to_string());
    let keys = config.key_template.replace("{stream}", name);
    if !keys.starts_with(&format!("{location}/")) {
        return Err(StreamConfigError {
            key: "key_template",
            reason: format!(
                "{:?} must put files under the table's location {location:?}/",
                config.key_template
            ),
        });
    }
    let layout = TableLayout::from_template(&location, &keys);
    let store: Arc<dyn sluice_store::ObjectStore> = Arc::new(engine.retrying_store());
    let listener = Arc::new(crate::table::announce::EngineListener::new(engine.clone()));
    let refuse = |format: &str, reason: String| StreamConfigError {
        key: "table",
        reason: format!("the {format} table at {location}: {reason}"),
    };
    // The timestamp column an Iceberg table's day or hour partitions are of.
    let mut time_source: Option<(String, &str)> = None;
    let mut found = match config.table {
        TableFormat::Delta => {
            let table = DeltaTable::new(store, layout).listened_by(listener);
            read_delta(table)
                .await
                .map_err(|reason| refuse("Delta", reason))?
        }
        TableFormat::Iceberg => {
            let partitioning = super::iceberg_partitions::declared(
                &keys,
                &layout.partition_columns,
                config.time_field.as_deref(),
            )
            .map_err(|reason| StreamConfigError {
                key: "key_template",
                reason,
            })?;
            time_source = partitioning
                .iter()
                .find(|p| p.transform != sluice_iceberg::partition::Transform::Identity)
                .map(|p| (p.source.clone(), p.transform.name()));
            let root_uri = store.describe();
            let table = sluice_iceberg::IcebergTable::new(store, layout, &root_uri)
                .with_partitioning(partitioning)
                .listened_by(listener);
            read_iceberg(table)
                .await
                .map_err(|reason| refuse("Iceberg", reason))?
        }
        TableFormat::None => unreachable!("a stream without a table has none to open"),
    };
    let format = found.table.format();
    let apart = found.table.columns_apart().to_vec();
    found.known.retain(|(field, _)| !apart.contains(field));
    for (field, kind) in &config.schema {
        let declared = Shape::declared(kind).expect("validated");
        match found.known.iter().find(|(k, _)| k == field) {
            Some((_, shape)) if *shape != declared => {
                return Err(StreamConfigError {
                    key: "schema",
                    reason: format!(
                        "{field} = {kind:?}, but the {format} table at {location} holds it as another type"
                    ),
                })
            }
            Some(_) => {}
            None => found.known.push((field.clone(), declared)),
        }
    }
    if let Some((source, transform)) = &time_source {
        let timestamp = found.known.iter().any(|(field, shape)| {
            field == source && matches!(shape, Shape::Timestamp | Shape::TimestampNtz)
        });
        if !timestamp {
            return Err(StreamConfigError {
                key: "time_field",
                reason: format!(
                    "the key template partitions the Iceberg table at {location} by \
                     {transform}({source}), so `{source}` must be a timestamp column: declare it \
                     (schema.{source} = \"timestamp\"), or use a table whose `{source}` is one"
                ),
            });
        }
    }
    if let Some(mapping) = &found.column_mapping {
        let columns = crate::table::schema::arrow_schema_of(found.known.clone());
        if let Some(field) = mapping.unmapped(&columns) {
            return Err(refuse(
                format,
                format!(
                    "it maps its columns (delta.columnMapping.mode = {}), and sluice cannot \
                     write column `{field}` under it (a list of structs, or a declared column \
                     the table does not have)",
                    mapping.mode()
                ),
            ));
        }
    }
    let sink = TableSink::new(found.table, name).with_column_mapping(found.column_mapping);
    Ok(OpenedTable {
        sink: Arc::new(sink),
        known: found.known,
        required: found.required,
    })
}

/// A Delta table: its protocol, partition columns, column mapping, schema
/// and rules.
async fn read_delta(table: DeltaTable) -> Result<Found, String> {
    let snapshot = table.snapshot().await.map_err(|e| e.to_string())?;
    if let Some(reason) = snapshot.refusal() {
        return Err(reason);
    }
    let partition_columns = table.layout().partition_columns.clone();
    if let Some(metadata) = &snapshot.metadata {
        if metadata.partition_columns != partition_columns {
            return Err(format!(
                "it is partitioned by {:?}; the key template makes {:?}",
                metadata.partition_columns, partition_columns
            ));
        }
    }
    let column_mapping = snapshot.column_mapping()?;
    let table_schema = snapshot.schema();
    let known: Vec<(String, Shape)> = table_schema
        .as_ref()
        .and_then(crate::table::columns::struct_fields)
        .unwrap_or_default();
    let mut required = match &table_schema {
        Some(schema) => crate::table::rules::table_rules(schema, &known, &partition_columns)?,
        None => Required::default(),
    };
    if let Some(mapping) = &column_mapping {
        required = required.closed(
            format!(
                "the Delta table at {} maps its columns (delta.columnMapping.mode = {}), and \
                 sluice adds no column to such a table (nor writes one of a type it does not \
                 know)",
                table.layout().location,
                mapping.mode()
            ),
            partition_columns,
        );
    }
    Ok(Found {
        table: StreamTable::Delta(Arc::new(table)),
        known,
        required,
        column_mapping,
    })
}

/// An Iceberg table: its format version, partitioning, schema and rules.
async fn read_iceberg(table: sluice_iceberg::IcebergTable) -> Result<Found, String> {
    let (known, required) = match table.latest().await.map_err(|e| e.to_string())? {
        Some((_, metadata)) => {
            table.check(&metadata).map_err(|e| e.to_string())?;
            let schema = metadata.current_schema().map_err(|e| e.to_string())?;
            (
                crate::table::iceberg_columns::struct_fields(&schema.fields),
                // Partition columns are in the files: required ones are
                // required fields.
                crate::table::iceberg_columns::table_rules(&schema, &[])?,
            )
        }
        None => (Vec::new(), Required::default()),
    };
    Ok(Found {
        table: StreamTable::Iceberg(Arc::new(table)),
        known,
        required,
        column_mapping: None,
    })
}
