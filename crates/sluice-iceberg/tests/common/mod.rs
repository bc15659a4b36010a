//! What the Iceberg tests share: the table's layout and columns, Parquet
//! files stored as a stream stores them, and the Python readers that are not
//! sluice's.
#![allow(dead_code)]

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema};
use sluice_iceberg::{NewFile, TableLayout, Transaction};

pub fn layout() -> TableLayout {
    TableLayout {
        location: "events".into(),
        partition_columns: Vec::new(),
    }
}

pub fn columns() -> ArrowSchema {
    ArrowSchema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
    ])
}

pub fn step(app_id: &str, after: Option<i64>, version: i64) -> Transaction {
    Transaction::new(app_id, after, version)
}

/// A Parquet file of `batch` under the table's data directory at `root`
/// (a directory store's), with the table's field ids or without them (as a
/// stream stores it).
pub fn parquet_file(
    root: &std::path::Path,
    name: &str,
    schema: &sluice_iceberg::schema::Schema,
    with_ids: bool,
    batch: Vec<(&str, ArrayRef)>,
) -> NewFile {
    let mut arrow = schema.to_arrow();
    if !with_ids {
        arrow = ArrowSchema::new(
            arrow
                .fields()
                .iter()
                .map(|f| f.as_ref().clone().with_metadata(Default::default()))
                .collect::<Vec<_>>(),
        );
    }
    let arrow = Arc::new(arrow);
    let columns: Vec<ArrayRef> = arrow
        .fields()
        .iter()
        .map(|f| {
            batch
                .iter()
                .find(|(n, _)| *n == f.name())
                .map(|(_, a)| a.clone())
                .unwrap_or_else(|| arrow_array::new_null_array(f.data_type(), batch[0].1.len()))
        })
        .collect();
    let records = columns[0].len() as u64;
    let batch = RecordBatch::try_new(arrow.clone(), columns).unwrap();
    let mut out = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut out, arrow, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    let key = format!("events/data/{name}.parquet");
    let path = root.join(&key);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &out).unwrap();
    NewFile {
        key,
        size: out.len() as u64,
        records,
        announce_as: None,
        footer: None,
    }
}

/// The Python readers (scripts/test.sh installs them), or None when the
/// test may go without them.
pub fn readers() -> Option<(String, String)> {
    match (
        std::env::var("SLUICE_TEST_CLIENTS"),
        std::env::var("SLUICE_TEST_PYTHON"),
    ) {
        (Ok(clients), Ok(python)) => Some((clients, python)),
        _ => {
            assert!(
                std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() != Ok("1"),
                "the Python readers are not installed (SLUICE_TEST_CLIENTS, SLUICE_TEST_PYTHON)"
            );
            None
        }
    }
}

/// What pyiceberg and DuckDB read of the table at `root` (a directory
/// store's) as metadata version `version` has it, counting `key` (see
/// tests/clients/iceberg_read.py); None without the readers.
pub fn read_back(root: &std::path::Path, version: u64, key: &str) -> Option<serde_json::Value> {
    let (clients, python) = readers()?;
    let metadata = root.join(format!("events/metadata/v{version}.metadata.json"));
    let output = std::process::Command::new(python)
        .arg(format!("{clients}/iceberg_read.py"))
        .arg(format!("file://{}", metadata.display()))
        .arg(key)
        .arg("--count")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(serde_json::from_slice(&output.stdout).unwrap())
}
