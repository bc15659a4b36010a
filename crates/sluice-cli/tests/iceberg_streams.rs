//! Record streams into Apache Iceberg tables (`table = "iceberg"`), read by
//! readers nobody here wrote (pyiceberg, DuckDB's iceberg extension): the
//! columns records bring, conflicts set aside, a table another engine holds
//! rules judged by its schema, and keyed input committed exactly once across
//! a SIGKILL and a death right after the commit.

mod common;

use std::process::Command;

use common::tables::{
    assert_read_back, changing_records, fed, ingest_into_table, keyed_ingest,
    keyed_input_loads_once_across_a_sigkill_and_a_death_after_its_commit, read_iceberg, walk,
};

fn lines(records: &[serde_json::Value]) -> String {
    records.iter().map(|r| format!("{r}\n")).collect()
}

#[test]
fn iceberg_tables_grow_columns_refuse_conflicts_and_read_in_pyiceberg_and_duckdb() {
    let Some(readers) = common::python_readers("iceberg-ingest") else {
        return;
    };
    const RECORDS: u64 = 30_000;
    const CONFLICT: u64 = 20_000;
    let mut records = changing_records(RECORDS, CONFLICT);
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    // 1. Fields that appear mid-stream become columns; the conflict goes to
    //    the dead letter and stops nothing else.
    let first = ingest_into_table(store.path(), "iceberg", &lines(&records));
    assert_eq!(first["records"], RECORDS - 1, "{first}");
    assert_eq!(first["dead_lettered"], 1, "{first}");
    records.remove(CONFLICT as usize);
    // 2. A second run reads the table's schema back: `price` is a double
    //    there, so a string in it is a conflict; a new column joins.
    let ours = vec![
        serde_json::json!({"id": 2_000_000, "origin": "sluice", "late": true}),
        serde_json::json!({"id": 2_000_001, "price": "free"}),
    ];
    let second = ingest_into_table(store.path(), "iceberg", &lines(&ours));
    assert_eq!(second["records"], 1, "{second}");
    assert_eq!(second["dead_lettered"], 1, "{second}");
    records.push(ours[0].clone());
    // Both readers read every row as it was written.
    let read = read_iceberg(&readers, &table, "id", false);
    assert_read_back(
        &read,
        &["pyiceberg", "duckdb"],
        "rows",
        &records,
        &["id", "tags", "where", "origin", "late"],
    );
    // Columns keep their ids as the table grows (the first run's first).
    let ids = &read["field_ids"];
    assert_eq!(ids["id"], 1, "{ids}");
    assert!(ids["late"].as_i64() > ids["where"].as_i64(), "{ids}");
}

/// Compaction, orphan-file removal (by `sluice tables vacuum` and by the
/// janitor) and snapshot expiry of an Iceberg table twenty ingests made keep
/// every row, in both readers; a Delta-only step is refused by name.
#[test]
fn iceberg_tables_compact_vacuum_and_expire_keep_every_row() {
    let Some(readers) = common::python_readers("iceberg-upkeep") else {
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    common::tables::upkeep_keeps_every_row(
        store.path(),
        "iceberg",
        // The twenty appends' snapshots go, with the files only they read.
        (
            &["expire", "t", "--retain", "0s"],
            "20 snapshots dropped",
            1,
        ),
        (&["checkpoint", "t"], "is an Iceberg table"),
        &|| {
            let read = read_iceberg(&readers, &table, "id", true);
            ["pyiceberg", "duckdb"]
                .map(|reader| (reader, read[reader].clone()))
                .to_vec()
        },
    );
}

#[test]
fn keyed_standard_input_loads_into_iceberg_once_across_a_sigkill_and_a_death_after_its_commit() {
    let Some(readers) = common::python_readers("iceberg-keyed-stdin") else {
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    const RECORDS: u64 = 100_000;
    assert_eq!(
        keyed_input_loads_once_across_a_sigkill_and_a_death_after_its_commit(
            store.path(),
            "iceberg",
            "metadata"
        ),
        RECORDS
    );
    // 4. Another key appends.
    let more: String = (RECORDS..RECORDS + 10)
        .map(|n| format!("{{\"id\":{n}}}\n"))
        .collect();
    let output = fed(
        &mut keyed_ingest(store.path(), "iceberg", "load-2"),
        more.as_bytes(),
    );
    assert!(output.status.success());
    let read = read_iceberg(&readers, &table, "id", true);
    for reader in ["pyiceberg", "duckdb"] {
        assert_eq!(read[reader]["rows"], RECORDS + 10, "{reader}: {read}");
        assert_eq!(read[reader]["distinct"], RECORDS + 10, "{reader}: {read}");
    }
}

/// A stream refuses, naming why, an Iceberg table it must not append to:
/// a partition directory that names no record field (a time transform), a
/// table partitioned otherwise than its key template, a required column of a type
/// sluice does not write, and a declared type the table holds otherwise.
#[test]
fn iceberg_tables_sluice_must_not_append_to_are_refused_by_name() {
    let store = tempfile::tempdir().unwrap();
    let ingest = |args: &[&str]| -> std::process::Output {
        fed(
            Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["ingest", "--stream", "t", "--table", "iceberg"])
                .args(args)
                .arg("--store")
                .arg(store.path()),
            b"{\"id\": 1}\n",
        )
    };
    let partitioned = ingest(&["--key-template", "{stream}/day={yyyy}-{mm}-{dd}/{uuid}"]);
    assert_eq!(partitioned.status.code(), Some(2));
    let message = String::from_utf8_lossy(&partitioned.stderr);
    assert!(message.contains("must be `day={field:day}`"), "{message}");
    // A table another engine made, with a required binary column.
    let metadata = store.path().join("t/metadata");
    std::fs::create_dir_all(&metadata).unwrap();
    let mut made = serde_json::json!({
        "format-version": 2,
        "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
        "location": format!("file://{}/t", store.path().display()),
        "last-sequence-number": 0,
        "last-updated-ms": 1_700_000_000_000i64,
        "last-column-id": 2,
        "current-schema-id": 0,
        "schemas": [{"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": false, "type": "long"},
            {"id": 2, "name": "raw", "required": true, "type": "binary"}]}],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": {},
        "snapshots": [],
        "snapshot-log": [],
        "metadata-log": [],
        "refs": {}
    });
    std::fs::write(metadata.join("v1.metadata.json"), made.to_string()).unwrap();
    let required = ingest(&[]);
    assert_eq!(required.status.code(), Some(2));
    let message = String::from_utf8_lossy(&required.stderr);
    assert!(message.contains("column `raw` is required"), "{message}");
    made["schemas"][0]["fields"][1]["required"] = false.into();
    std::fs::write(metadata.join("v2.metadata.json"), made.to_string()).unwrap();
    // The table is unpartitioned; the key template makes directories.
    let otherwise = ingest(&["--key-template", "t/id={field:id}/{uuid}"]);
    assert_eq!(otherwise.status.code(), Some(2));
    let message = String::from_utf8_lossy(&otherwise.stderr);
    assert!(
        message.contains(
            "it is partitioned by []; the key template's NAME= directories make [\"id\"]"
        ),
        "{message}"
    );
    let config = store.path().join("t.toml");
    std::fs::write(&config, "schema = { id = \"string\" }\n").unwrap();
    let declared = ingest(&["--config", config.to_str().unwrap()]);
    assert_eq!(declared.status.code(), Some(2));
    let message = String::from_utf8_lossy(&declared.stderr);
    assert!(
        message.contains("the Iceberg table at t holds it as another type"),
        "{message}"
    );
    // Nothing of theirs changed.
    assert_eq!(walk(&metadata).len(), 2);
}

/// A key template's `NAME={field:NAME}` directories partition the table
/// sluice makes by identity on those columns (a string and a long here),
/// kept in the files too; a second run appends to it, compaction rewrites
/// each partition's files apart, and both readers count every row.
#[test]
fn iceberg_tables_are_partitioned_by_the_key_template_s_directories() {
    let Some(readers) = common::python_readers("iceberg-partitions") else {
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    let run = |ids: std::ops::Range<u64>| {
        let input: String = ids
            .map(|id| {
                let tenant = ["north", "south", "east"][(id % 3) as usize];
                format!(
                    "{{\"id\":{id},\"tenant\":\"{tenant}\",\"shard\":{}}}\n",
                    id % 2
                )
            })
            .collect();
        let output = fed(
            Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["ingest", "--stream", "t", "--table", "iceberg", "--json"])
                .args([
                    "--key-template",
                    "t/tenant={field:tenant}/shard={field:shard}/{uuid}",
                ])
                .arg("--store")
                .arg(store.path()),
            input.as_bytes(),
        );
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    };
    run(0..3000);
    run(3000..6000);
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(common::tables::iceberg_metadata(&table)).unwrap())
            .unwrap();
    let fields = &metadata["partition-specs"][0]["fields"];
    let named: Vec<(&str, &str)> = fields
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap(),
                f["transform"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [("tenant", "identity"), ("shard", "identity")],
        "{fields}"
    );
    let read = read_iceberg(&readers, &table, "id", true);
    for reader in ["pyiceberg", "duckdb"] {
        assert_eq!(read[reader]["rows"], 6000, "{reader}: {read}");
        assert_eq!(read[reader]["distinct"], 6000, "{reader}: {read}");
    }
    // Two runs, six partitions each: twelve files, compacted into six.
    let said = common::tables::tables(store.path(), &["compact", "t", "--min-files", "2"]);
    assert!(said.contains("12 files rewritten as 6"), "{said}");
    let read = read_iceberg(&readers, &table, "id", true);
    for reader in ["pyiceberg", "duckdb"] {
        assert_eq!(read[reader]["rows"], 6000, "{reader}: {read}");
        assert_eq!(read[reader]["distinct"], 6000, "{reader}: {read}");
    }
}

/// Issue 47's guarantee for Iceberg tables: a file is announced once a
/// snapshot holds it, and a janitor pass settles the intents of a writer
/// that died between its commit and its events by reading the table's
/// snapshots (see [`common::tables::table_files_are_announced_once_a_commit_holds_them`]).
#[test]
fn iceberg_files_are_announced_once_a_commit_holds_them() {
    let Some(readers) = common::python_readers("iceberg-announce") else {
        return;
    };
    let committed = |table: &std::path::Path| -> Vec<String> {
        if !table.join("metadata").exists() {
            return Vec::new();
        }
        let read = read_iceberg(&readers, table, "id", true);
        let root = format!("file://{}/", table.display());
        read["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f.as_str().unwrap().strip_prefix(&root).unwrap().to_owned())
            .collect()
    };
    common::tables::table_files_are_announced_once_a_commit_holds_them("iceberg", &committed);
}
