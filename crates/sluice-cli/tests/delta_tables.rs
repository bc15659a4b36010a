//! Delta tables that other programs made and own (Python `deltalake` here;
//! the table's rules are theirs): sluice opens, appends to, compacts and
//! checkpoints them with the built binary on a directory store, follows
//! their rules, and the other readers (`deltalake`, DuckDB) agree on the rows.

mod common;

use std::process::Command;

use common::tables::{ingest_into_table, tables};

/// Runs tests/clients/delta_create.py on `table` with `spec` (see there).
fn delta_create(readers: &(String, String), table: &std::path::Path, spec: serde_json::Value) {
    let created = Command::new(&readers.1)
        .arg(format!("{}/delta_create.py", readers.0))
        .arg(table)
        .arg(spec.to_string())
        .output()
        .unwrap();
    assert!(
        created.status.success(),
        "{spec}: {}",
        String::from_utf8_lossy(&created.stderr)
    );
}

/// Issue 48: once Spark had checkpointed a table (Snappy, its default), a
/// gateway streaming into it refused to start ("Disabled feature at compile
/// time: snap") and `sluice tables compact` failed over Spark's data files.
/// Every codec Spark, deltalake and DuckDB write, in data files and in the
/// checkpoint: sluice opens the table, appends, compacts, checkpoints, and
/// every reader sees every row.
#[test]
fn tables_in_every_parquet_codec_are_opened_compacted_and_checkpointed() {
    let Some(readers) = common::python_readers("delta-codecs") else {
        return;
    };
    // (the data files' codec, the checkpoint's as pyarrow names it)
    let codecs = [
        ("SNAPPY", "snappy"),
        ("GZIP", "gzip"),
        ("BROTLI", "brotli"),
        ("LZ4", "lz4"),
        ("ZSTD", "zstd"),
        ("UNCOMPRESSED", "none"),
    ];
    for (data, checkpoint) in codecs {
        let store = tempfile::tempdir().unwrap();
        let table = store.path().join("t");
        let rows = |from: u64| -> Vec<serde_json::Value> {
            (from..from + 50)
                .map(|id| serde_json::json!({"id": id, "name": format!("row {id}")}))
                .collect()
        };
        delta_create(
            &readers,
            &table,
            serde_json::json!({"rows": rows(0), "compression": data}),
        );
        delta_create(
            &readers,
            &table,
            serde_json::json!({
                "rows": rows(50),
                "compression": data,
                "checkpoint": true,
                "checkpoint_compression": checkpoint,
            }),
        );
        let ours: String = (100..110)
            .map(|id| format!("{{\"id\":{id},\"name\":\"ours {id}\"}}\n"))
            .collect();
        let appended = ingest_into_table(store.path(), "delta", &ours);
        assert_eq!(appended["records"], 10, "{data}: {appended}");
        let said = tables(store.path(), &["compact", "t", "--min-files", "2"]);
        assert!(said.contains("rewritten as 1"), "{data}: {said}");
        let said = tables(store.path(), &["checkpoint", "t"]);
        assert!(said.contains("checkpoint at version"), "{data}: {said}");
        let read = common::read_delta(&readers, None, table.to_str().unwrap(), "id", false);
        for reader in ["deltalake", "duckdb"] {
            assert_eq!(
                read[reader]["rows"], 110,
                "{data} {reader}: {}",
                read[reader]
            );
            assert_eq!(read[reader]["distinct"], 110, "{data} {reader}");
        }
    }
}

/// Issue 48: a table Python `deltalake` made with `id BIGINT NOT NULL` (and
/// `delta.appendOnly`): sluice took records without an `id` and wrote nulls
/// into it. The column's rule is its owner's: a record without the field, or
/// with null in it, goes to the dead letter, and no reader sees a null `id`.
#[test]
fn a_not_null_column_of_another_writer_s_table_takes_no_null() {
    let Some(readers) = common::python_readers("delta-not-null") else {
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    delta_create(
        &readers,
        &table,
        serde_json::json!({
            "rows": [{"id": 1, "name": "theirs"}],
            "schema": [
                {"name": "id", "type": "long", "nullable": false},
                {"name": "name", "type": "string", "nullable": true},
            ],
            "configuration": {"delta.appendOnly": "true"},
        }),
    );
    let input = concat!(
        "{\"id\":2,\"name\":\"ours\"}\n",
        "{\"name\":\"no id\"}\n",
        "{\"id\":null,\"name\":\"a null id\"}\n",
        "{\"id\":3}\n",
    );
    let appended = ingest_into_table(store.path(), "delta", input);
    assert_eq!(appended["records"], 2, "{appended}");
    assert_eq!(appended["dead_lettered"], 2, "{appended}");
    let read = common::read_delta(&readers, None, table.to_str().unwrap(), "id", true);
    for reader in ["deltalake", "duckdb"] {
        let ids: Vec<&serde_json::Value> = read[reader]["rows_by_key"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| &row["id"])
            .collect();
        assert_eq!(ids, [1, 2, 3], "{reader}: {}", read[reader]);
    }
}

/// Issue 48: a `?` in a partition value made the table unreadable to DuckDB
/// (sluice wrote the value raw into the key). Partition directories are now
/// escaped as Spark escapes them (`%3F`, `%23`, `%25`, `%2F`, …), a missing
/// value is Hive's default partition (null), and both readers see each row
/// with the value its record had.
#[test]
fn partition_values_are_escaped_as_spark_escapes_them() {
    let Some(readers) = common::python_readers("delta-partition-values") else {
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    let tenants = [
        Some("plain"),
        Some("h?q"),
        Some("a#b"),
        Some("100%"),
        Some("x/y"),
        Some("k=v:w"),
        Some("sp ace"),
        Some("é"),
        None,
    ];
    let input: String = tenants
        .iter()
        .enumerate()
        .map(|(id, tenant)| match tenant {
            Some(tenant) => format!("{}\n", serde_json::json!({"id": id, "tenant": tenant})),
            None => format!("{}\n", serde_json::json!({"id": id})),
        })
        .collect();
    let output = common::tables::fed(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["ingest", "--stream", "t", "--table", "delta", "--json"])
            .args([
                "--key-template",
                "t/tenant={field:tenant}/{uuid}",
                "--store",
            ])
            .arg(store.path()),
        input.as_bytes(),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read = common::read_delta(&readers, None, table.to_str().unwrap(), "id", true);
    for reader in ["deltalake", "duckdb"] {
        let rows = read[reader]["rows_by_key"].as_array().unwrap();
        let got: Vec<Option<&str>> = rows.iter().map(|row| row["tenant"].as_str()).collect();
        assert_eq!(got, tenants, "{reader}: {}", read[reader]);
    }
}

/// Runs tests/clients/delta_stats.py on `table`: its files' statistics
/// checked against the files by pyarrow.
fn checked_stats(readers: &(String, String), table: &std::path::Path) -> serde_json::Value {
    let checked = Command::new(&readers.1)
        .arg(format!("{}/delta_stats.py", readers.0))
        .arg(table)
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    serde_json::from_slice(&checked.stdout).unwrap()
}

/// Issue 48: `add.stats` held `numRecords` only, so no reader could skip a
/// file. Each file sluice writes (and each compaction makes) has minValues,
/// maxValues and nullCount that pyarrow finds true of the file (long strings
/// cut, nulls counted), for the columns the table asks for: the first 32 by
/// default, the first N of another owner's `delta.dataSkippingNumIndexedCols`.
#[test]
fn files_carry_statistics_a_reader_can_skip_by() {
    let Some(readers) = common::python_readers("delta-stats") else {
        return;
    };
    let input: String = (0..3_000)
        .map(|i| {
            let mut record = serde_json::json!({"id": i, "price": i as f64 * 0.5});
            if i % 11 != 0 {
                let long = if i % 7 == 0 {
                    "x".repeat(40)
                } else {
                    String::new()
                };
                record["name"] = format!("n{i:05}{long}").into();
            }
            if i % 5 == 0 {
                record["price"] = serde_json::Value::Null;
            }
            format!("{record}\n")
        })
        .collect();
    // (case, the owner's properties, the columns with statistics)
    let cases = [
        ("the default", None, vec!["id", "name", "price"]),
        ("the first column", Some("1"), vec!["id"]),
    ];
    for (case, indexed, columns) in cases {
        let store = tempfile::tempdir().unwrap();
        let table = store.path().join("t");
        if let Some(indexed) = indexed {
            delta_create(
                &readers,
                &table,
                serde_json::json!({
                    "rows": [{"id": -1, "price": 0.0, "name": "theirs"}],
                    "configuration": {"delta.dataSkippingNumIndexedCols": indexed},
                }),
            );
        }
        let output = common::tables::fed(
            Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["ingest", "--stream", "t", "--table", "delta"])
                .args(["--flush-records", "1000", "--store"])
                .arg(store.path()),
            input.as_bytes(),
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        for step in ["ingested", "compacted"] {
            if step == "compacted" {
                let said = tables(store.path(), &["compact", "t", "--min-files", "2"]);
                assert!(said.contains("rewritten as 1"), "{case}: {said}");
            }
            let checked = checked_stats(&readers, &table);
            assert_eq!(
                checked["problems"],
                serde_json::json!([]),
                "{case} {step}: {checked}"
            );
            let files = checked["files"].clone();
            let want: serde_json::Map<String, serde_json::Value> = columns
                .iter()
                .map(|c| (c.to_string(), files.clone()))
                .collect();
            assert_eq!(
                checked["with_stats"],
                serde_json::Value::Object(want),
                "{case} {step}: {checked}"
            );
        }
    }
}
