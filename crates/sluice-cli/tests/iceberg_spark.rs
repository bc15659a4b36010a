//! Apache Spark with Apache Iceberg (pyspark 4.1, iceberg-spark-runtime
//! 4.1_2.13 1.12.0, local[2], Iceberg's Hadoop catalog on a local directory)
//! and sluice on one table, taking turns: Spark reads what sluice wrote and
//! appends; sluice appends on top with a new column; Spark compacts with its
//! own `rewrite_data_files`; sluice appends and compacts Spark's files; and
//! Spark, pyiceberg and DuckDB agree on every row at each step.

mod common;

use std::process::Command;

use serde_json::{json, Value};

use common::spark::Session;
use common::tables::{fed, read_iceberg, tables};

/// Reads the table `ns.t` as Spark has it.
fn read(spark: &mut Session) -> Value {
    spark.call(json!({"op": "read", "table": "ns.t", "key": "id"}))
}

/// `sluice ingest` of the rows `ids` into the Iceberg table `ns/t` of the
/// directory store `store` (with column `extra` when `extra`).
fn sluice_appends(store: &std::path::Path, ids: std::ops::Range<u64>, extra: bool) {
    let input: String = ids
        .map(|id| match extra {
            true => format!(
                "{{\"id\":{id},\"name\":\"sluice {id}\",\"extra\":{}}}\n",
                id % 2 == 0
            ),
            false => format!("{{\"id\":{id},\"name\":\"sluice {id}\"}}\n"),
        })
        .collect();
    ingest_to(store, "t", &["--key-template", "ns/t/data/{uuid}"], &input);
}

/// `sluice ingest` of `input` into the Iceberg table `ns/NAME` (stream
/// NAME) under `store`, with `args` besides.
fn ingest_to(store: &std::path::Path, name: &str, args: &[&str], input: &str) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command
        .args(["ingest", "--stream", name, "--table", "iceberg", "--json"])
        .arg("--table-location")
        .arg(format!("ns/{name}"))
        .args(args)
        .arg("--store")
        .arg(store);
    let output = fed(&mut command, input.as_bytes());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Spark, pyiceberg and DuckDB each count `rows` rows, ids 0 up to `max`
/// once each.
fn all_read(
    spark: &mut Session,
    readers: &(String, String),
    table: &std::path::Path,
    rows: u64,
    max: u64,
) {
    let by_spark = read(spark);
    let read = read_iceberg(readers, table, "id", true);
    for (reader, got) in [
        ("spark", &by_spark),
        ("pyiceberg", &read["pyiceberg"]),
        ("duckdb", &read["duckdb"]),
    ] {
        assert_eq!(got["rows"], rows, "{reader}: {got}");
        assert_eq!(got["distinct"], rows, "{reader}: {got}");
        assert_eq!(got["max"], max, "{reader}: {got}");
    }
}

#[test]
fn spark_and_sluice_take_turns_on_one_iceberg_table() {
    let Some(readers) = common::python_readers("iceberg-spark") else {
        return;
    };
    let Ok(spark_python) = std::env::var("SLUICE_TEST_SPARK_ICEBERG_PYTHON") else {
        assert!(
            std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() != Ok("1"),
            "pyspark 4.1 for Iceberg is not installed (SLUICE_TEST_SPARK_ICEBERG_PYTHON; scripts/test.sh installs it)"
        );
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("ns/t");
    // 1. sluice makes the table; Spark reads it and appends.
    sluice_appends(store.path(), 0..1000, false);
    let script = format!("{}/spark_iceberg.py", readers.0);
    let mut spark = Session::start(&spark_python, &script, &[store.path().as_os_str()]);
    all_read(&mut spark, &readers, &table, 1000, 999);
    spark.sql(
        "INSERT INTO local.ns.t (id, name) \
         SELECT id + 1000, concat('spark ', id) FROM range(500)",
    );
    all_read(&mut spark, &readers, &table, 1500, 1499);
    // 2. sluice appends on top of Spark's snapshot, with a new column.
    sluice_appends(store.path(), 1500..2000, true);
    all_read(&mut spark, &readers, &table, 2000, 1999);
    let columns = read(&mut spark)["columns"].clone();
    assert_eq!(columns, json!(["id", "name", "extra"]));
    // 3. Spark compacts (its own replace snapshot); sluice appends on top,
    //    then compacts Spark's files with its own.
    spark.sql(
        "CALL local.system.rewrite_data_files(table => 'ns.t', \
         options => map('min-input-files', '2'))",
    );
    all_read(&mut spark, &readers, &table, 2000, 1999);
    sluice_appends(store.path(), 2000..2500, true);
    let said = tables(store.path(), &["compact", "ns/t", "--min-files", "2"]);
    assert!(said.contains("files rewritten as 1"), "{said}");
    all_read(&mut spark, &readers, &table, 2500, 2499);
    // 4. Spark appends once more, after sluice's compaction.
    spark.sql("INSERT INTO local.ns.t VALUES (2500, 'spark last', true)");
    all_read(&mut spark, &readers, &table, 2501, 2500);

    // 5. A table sluice partitions by its key template's directories:
    //    Spark prunes by the partition tuples sluice wrote, appends into a
    //    partition, and sluice appends after it.
    let partitioned = |ids: std::ops::Range<u64>| {
        let input: String = ids
            .map(|id| {
                let tenant = ["north", "south"][(id % 2) as usize];
                format!("{{\"id\":{id},\"tenant\":\"{tenant}\"}}\n")
            })
            .collect();
        ingest_to(
            store.path(),
            "p",
            &["--key-template", "ns/p/data/tenant={field:tenant}/{uuid}"],
            &input,
        );
    };
    partitioned(0..1000);
    // Spark's catalog caches a table's metadata: refreshed to see sluice's
    // commits.
    let count = |spark: &mut Session, filter: &str| {
        spark.sql("REFRESH TABLE local.ns.p");
        spark.sql(&format!("SELECT count(*) FROM local.ns.p {filter}"))
    };
    assert_eq!(count(&mut spark, "WHERE tenant = 'north'"), 500);
    // Only the north partition's files are read for it.
    let files = spark.sql("SELECT count(*) FROM local.ns.p.files WHERE partition.tenant = 'north'");
    assert_eq!(files, 1);
    spark.sql("INSERT INTO local.ns.p VALUES (1000, 'north'), (1001, 'west')");
    partitioned(1002..1100);
    assert_eq!(count(&mut spark, ""), 1100);
    assert_eq!(count(&mut spark, "WHERE tenant = 'north'"), 550);
    assert_eq!(count(&mut spark, "WHERE tenant = 'west'"), 1);
    let read = read_iceberg(&readers, &store.path().join("ns/p"), "id", true);
    for reader in ["pyiceberg", "duckdb"] {
        assert_eq!(read[reader]["rows"], 1100, "{reader}: {read}");
        assert_eq!(read[reader]["distinct"], 1100, "{reader}: {read}");
    }

    // 6. A table Spark makes partitioned by days(ts): sluice appends into
    //    its days (each record's time read as the column reads it), Spark
    //    prunes by the tuples both wrote, and sluice's compaction merges
    //    both writers' files day by day.
    spark.sql(
        "CREATE TABLE local.ns.d (id bigint, ts timestamp) USING iceberg \
         PARTITIONED BY (days(ts))",
    );
    spark.sql(
        "INSERT INTO local.ns.d VALUES (0, TIMESTAMP '2026-11-29T10:00:00Z'), \
         (1, TIMESTAMP '2026-11-30T10:00:00Z')",
    );
    // 48 records 90 minutes apart from 2026-11-29 00:00 UTC: 16 a day, over
    // three days, half of them written with an offset.
    let input: String = (0..48i64)
        .map(|n| {
            let minutes = n * 90;
            let (day, hour, minute) = (29 + minutes / 1440, minutes % 1440 / 60, minutes % 60);
            let (month, day) = if day > 30 { (12, day - 30) } else { (11, day) };
            let ts = if n % 2 == 0 {
                format!("2026-{month:02}-{day:02}T{hour:02}:{minute:02}:00Z")
            } else {
                // The same instant, an hour ahead.
                let (day, hour) = if hour == 23 {
                    (day + 1, 0)
                } else {
                    (day, hour + 1)
                };
                let (month, day) = if month == 11 && day > 30 {
                    (12, day - 30)
                } else {
                    (month, day)
                };
                format!("2026-{month:02}-{day:02}T{hour:02}:{minute:02}:00+01:00")
            };
            format!("{{\"id\":{},\"ts\":\"{ts}\"}}\n", n + 2)
        })
        .collect();
    ingest_to(
        store.path(),
        "d",
        &[
            "--time-field",
            "ts",
            "--key-template",
            "ns/d/data/ts_day={yyyy}-{mm}-{dd}/{uuid}",
        ],
        &input,
    );
    let days = |spark: &mut Session| -> Vec<i64> {
        spark.sql("REFRESH TABLE local.ns.d");
        ["2026-11-29", "2026-11-30", "2026-12-01"]
            .iter()
            .map(|day| {
                let filter = format!(
                    "ts >= TIMESTAMP '{day}T00:00:00Z' \
                     AND ts < TIMESTAMP '{day}T00:00:00Z' + INTERVAL 1 DAY"
                );
                let count = spark.sql(&format!("SELECT count(*) FROM local.ns.d WHERE {filter}"));
                count.as_i64().unwrap()
            })
            .collect()
    };
    assert_eq!(days(&mut spark), [17, 17, 16]);
    let files = |spark: &mut Session, day: &str| {
        spark.sql(&format!(
            "SELECT count(*) FROM local.ns.d.files WHERE partition.ts_day = DATE '{day}'"
        ))
    };
    assert_eq!(
        files(&mut spark, "2026-11-29"),
        2,
        "Spark's file and sluice's"
    );
    let said = tables(store.path(), &["compact", "ns/d", "--min-files", "2"]);
    assert!(said.contains("4 files rewritten as 2"), "{said}");
    assert_eq!(days(&mut spark), [17, 17, 16]);
    assert_eq!(files(&mut spark, "2026-11-29"), 1);
    assert_eq!(files(&mut spark, "2026-12-01"), 1);
    let read = read_iceberg(&readers, &store.path().join("ns/d"), "id", true);
    for reader in ["pyiceberg", "duckdb"] {
        assert_eq!(read[reader]["distinct"], 50, "{reader}: {read}");
    }
}
