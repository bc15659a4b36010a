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

/// A compaction killed between any two of its store writes loses and
/// repeats no row, and the next one finishes it.
#[test]
fn an_iceberg_compaction_killed_after_any_store_write_loses_nothing() {
    let Some(readers) = common::python_readers("iceberg-compact-kill") else {
        return;
    };
    common::tables::compaction_survives_a_kill_after_any_store_write("iceberg", &|table| {
        let read = read_iceberg(&readers, table, "id", true);
        ["pyiceberg", "duckdb"]
            .map(|reader| (reader, read[reader].clone()))
            .to_vec()
    });
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
/// a partition directory that is no Iceberg partition (a day without a
/// time field, a month), a
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
    // (key template, what the refusal says)
    let templates = [
        (
            "{stream}/day={yyyy}-{mm}-{dd}/{uuid}",
            "names no time_field",
        ),
        (
            "{stream}/month={yyyy}-{mm}/{uuid}",
            "must be `month={field:month}`",
        ),
    ];
    for (template, want) in templates {
        let partitioned = ingest(&["--key-template", template]);
        assert_eq!(partitioned.status.code(), Some(2), "{template}");
        let message = String::from_utf8_lossy(&partitioned.stderr);
        assert!(message.contains(want), "{template}: {message}");
    }
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

/// A key template's `NAME={yyyy}-{mm}-{dd}` (or `…-{hh}`) directory with a
/// `time_field` partitions the table by `day` (or `hour`) of that timestamp
/// column, as Iceberg's own writers do: records written with an offset, in
/// UTC, without an offset and with a space land in the partition of the
/// instant their column holds; one without a time is set aside by name.
/// Both readers read every row, and the same rows under a filter on the
/// time, for which pyiceberg plans only the files of the partitions it
/// reaches; compaction keeps each partition's files apart.
#[test]
fn iceberg_tables_are_partitioned_by_the_day_or_hour_of_the_record_time() {
    let Some(readers) = common::python_readers("iceberg-time-partitions") else {
        return;
    };
    use time::macros::{datetime, format_description};
    let start = datetime!(2026-11-29 20:00 UTC);
    let since = datetime!(2026-11-30 12:00 UTC);
    const RECORDS: i64 = 1_800; // a minute apart: 30 hours over 3 days
    let records: String = (0..RECORDS)
        .map(|id| {
            let at = start + time::Duration::minutes(id);
            let utc = format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]");
            let text = match id % 4 {
                0 => format!("{}Z", at.format(utc).unwrap()),
                1 => {
                    let local = at.to_offset(time::macros::offset!(-05:00));
                    format!("{}-05:00", local.format(utc).unwrap())
                }
                2 => at.format(utc).unwrap(),
                _ => at
                    .format(format_description!(
                        "[year]-[month]-[day] [hour]:[minute]:[second]"
                    ))
                    .unwrap(),
            };
            format!("{{\"id\":{id},\"ts\":\"{text}\"}}\n")
        })
        .chain(["{\"id\":-1}\n".to_owned()])
        .collect();
    let since_rows = (0..RECORDS)
        .filter(|id| start + time::Duration::minutes(*id) >= since)
        .count();
    // (directory, transform, partitions, partitions reached by the filter)
    let cases = [
        ("ts_day={yyyy}-{mm}-{dd}", "day", 3, 2),
        ("ts_hour={yyyy}-{mm}-{dd}-{hh}", "hour", 30, 14),
    ];
    for (directory, transform, partitions, reached) in cases {
        let store = tempfile::tempdir().unwrap();
        let table = store.path().join("t");
        let config = store.path().join("stream.toml");
        std::fs::write(
            &config,
            format!(
                "table = \"iceberg\"\ntime_field = \"ts\"\n\
                 key_template = \"t/{directory}/{{uuid}}\"\n\
                 dead_letter_template = \"dead/{{uuid}}\"\n[schema]\nts = \"timestamp\"\n"
            ),
        )
        .unwrap();
        let run = || {
            let output = fed(
                Command::new(env!("CARGO_BIN_EXE_sluice"))
                    .args(["ingest", "--stream", "t", "--json", "--config"])
                    .arg(&config)
                    .arg("--store")
                    .arg(store.path()),
                records.as_bytes(),
            );
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(output.status.success(), "{transform}: {stderr}");
            let said: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(said["records"], RECORDS, "{transform}: {said}");
            assert_eq!(said["dead_lettered"], 1, "{transform}: {said}");
        };
        run();
        let metadata: serde_json::Value = serde_json::from_slice(
            &std::fs::read(common::tables::iceberg_metadata(&table)).unwrap(),
        )
        .unwrap();
        let field = &metadata["partition-specs"][0]["fields"][0];
        let name = directory.split('=').next().unwrap();
        assert_eq!(
            (field["name"].as_str(), field["transform"].as_str()),
            (Some(name), Some(transform)),
            "{metadata}"
        );
        // pyiceberg takes an offset, not `Z`.
        let filter = "ts >= '2026-11-30T12:00:00+00:00'";
        let read_filtered = |table: &std::path::Path, filter: &str| {
            let metadata = common::tables::iceberg_metadata(table);
            let args = [
                metadata.to_str().unwrap(),
                "id",
                "--count",
                "--filter",
                filter,
            ];
            common::python_json(&readers, "iceberg_read.py", &args, None)
        };
        let read = read_filtered(&table, filter);
        for reader in ["pyiceberg", "duckdb"] {
            let got = &read[reader];
            assert_eq!(got["distinct"], RECORDS, "{transform} {reader}: {read}");
            assert_eq!(
                read["filtered"][reader], since_rows,
                "{transform} {reader}: {read}"
            );
        }
        assert_eq!(
            read["files"].as_array().unwrap().len(),
            partitions,
            "{transform}: {read}"
        );
        assert_eq!(read["filtered"]["files"], reached, "{transform}: {read}");
        // A second run: two files per partition, compacted into one each.
        run();
        let said = common::tables::tables(store.path(), &["compact", "t", "--min-files", "2"]);
        let want = format!("{} files rewritten as {partitions}", 2 * partitions);
        assert!(said.contains(&want), "{transform}: {said}");
        let read = read_filtered(&table, filter);
        for reader in ["pyiceberg", "duckdb"] {
            let got = &read[reader];
            assert_eq!(got["rows"], 2 * RECORDS, "{transform} {reader}: {read}");
            assert_eq!(
                read["filtered"][reader],
                2 * since_rows,
                "{transform} {reader}: {read}"
            );
        }
        assert_eq!(read["filtered"]["files"], reached, "{transform}: {read}");
    }
    // A time field that is no timestamp column is refused at start, by name.
    let store = tempfile::tempdir().unwrap();
    let output = fed(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "ingest",
                "--stream",
                "t",
                "--table",
                "iceberg",
                "--time-field",
                "ts",
            ])
            .args(["--key-template", "t/ts_day={yyyy}-{mm}-{dd}/{uuid}"])
            .arg("--store")
            .arg(store.path()),
        records.as_bytes(),
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("`ts` must be a timestamp column"),
        "{stderr}"
    );
    assert!(!store.path().join("t").exists(), "a refused stream wrote");
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
