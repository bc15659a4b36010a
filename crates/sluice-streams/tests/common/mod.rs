//! What the Delta tests share: one table (`events`, one `long` column) and
//! files to add to it, and the table as a fresh reader sees it.

use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::json;
use sluice_store::ObjectStore;
use sluice_streams::table::delta::{DeltaTable, NewFile, Snapshot, TableLayout};

pub fn layout() -> TableLayout {
    TableLayout {
        location: "events".into(),
        partition_columns: Vec::new(),
    }
}

pub fn schema() -> serde_json::Value {
    json!({"type": "struct", "fields": [
        {"name": "n", "type": "long", "nullable": true, "metadata": {}}]})
}

pub fn file(name: &str) -> NewFile {
    NewFile {
        key: format!("events/{name}.parquet"),
        size: 100,
        records: 10,
        announce_as: None,
        footer: None,
    }
}

/// The table's files (their keys) and the rest of it, read afresh.
pub async fn table_files(store: Arc<dyn ObjectStore>) -> (BTreeSet<String>, Snapshot) {
    let snapshot = DeltaTable::new(store, layout())
        .read_with_files()
        .await
        .unwrap();
    let files = snapshot
        .files
        .as_ref()
        .unwrap()
        .keys()
        .map(|path| format!("events/{path}"))
        .collect();
    (files, snapshot)
}
