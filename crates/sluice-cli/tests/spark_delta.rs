//! Apache Spark with Delta Lake (pyspark 4.2, delta-spark 4.4, local[2]) and
//! sluice on the same tables, local directories: Spark creates tables with
//! the features its current releases enable (column mapping, deletion
//! vectors with rows deleted, row tracking, in-commit timestamps, V2
//! checkpoints), sluice appends to each, and Spark, `deltalake` and DuckDB
//! agree on the rows; Spark reads every table sluice writes; Kafka into a
//! table Spark appends to at the same time stays exactly once. One Spark
//! session serves the whole binary (it takes ~20 s to start): the tests take
//! it in turn.

mod common;

use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};

use common::spark::Session;
use common::tables::{fed, tables};

/// What the Delta tests ask of Spark beyond SQL (tests/clients/spark_delta.py).
trait DeltaReads {
    fn read_by(&mut self, table: &std::path::Path, key: &str) -> Value;
    fn read(&mut self, table: &std::path::Path, version: Option<u64>) -> Value;
}

impl DeltaReads for Session {
    fn read_by(&mut self, table: &std::path::Path, key: &str) -> Value {
        self.call(json!({"op": "read", "table": table, "key": key}))
    }

    fn read(&mut self, table: &std::path::Path, version: Option<u64>) -> Value {
        let mut command = json!({"op": "read", "table": table, "key": "id"});
        if let Some(version) = version {
            command["version"] = json!(version);
        }
        self.call(command)
    }
}

/// The session, started by the first test that needs it (None: no Python
/// clients, and the suite does not require them).
fn spark(test: &str) -> Option<std::sync::MutexGuard<'static, Session>> {
    static SPARK: OnceLock<Mutex<Session>> = OnceLock::new();
    let (clients, python) = common::python_readers(test)?;
    let spark = SPARK.get_or_init(|| {
        Mutex::new(Session::start(
            &python,
            &format!("{clients}/spark_delta.py"),
            &[],
        ))
    });
    Some(spark.lock().unwrap_or_else(|e| e.into_inner()))
}

/// `sluice ingest` of `records` into stream `t` (table `t`) of the
/// directory store `store`, partitioned by tenant when `partitioned`.
fn sluice_appends(store: &std::path::Path, records: &[Value], partitioned: bool) -> Value {
    let input: String = records.iter().map(|r| format!("{r}\n")).collect();
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command
        .args(["ingest", "--stream", "t", "--table", "delta", "--json"])
        .args(["--dead-letter-template", "dead/{uuid}"]);
    if partitioned {
        command.args(["--key-template", "t/tenant={field:tenant}/{uuid}"]);
    }
    command.arg("--store").arg(store);
    let output = fed(&mut command, input.as_bytes());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn records(ids: std::ops::Range<u64>) -> Vec<Value> {
    ids.map(|id| {
        json!({
            "id": id,
            "name": format!("sluice {id}"),
            "tenant": if id % 2 == 0 { "even" } else { "odd" },
        })
    })
    .collect()
}

/// `records` with a value for each typed column of the Spark tables.
fn typed_records(ids: std::ops::Range<u64>) -> Vec<Value> {
    let mut records = records(ids);
    for record in &mut records {
        record["ts"] = json!("2026-11-29T10:00:00Z");
        record["tn"] = json!("2026-11-29T10:00:00");
        record["d"] = json!("2026-11-29");
        record["amount"] = json!("12.50");
        record["tags"] = json!({"source": "sluice"});
    }
    records
}

/// The log's actions of `table`, every commit file in order.
fn log_actions(table: &std::path::Path) -> Vec<Value> {
    let mut commits: Vec<_> = common::tables::walk(&table.join("_delta_log"))
        .into_iter()
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.len() == 25 && n.ends_with(".json"))
        })
        .collect();
    commits.sort();
    commits
        .iter()
        .flat_map(|c| {
            std::fs::read_to_string(c)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Spark, DuckDB and `deltalake` read the same ids from `table`.
/// `deltalake` 1.6 reads no table with V2 checkpoints (its reader says so,
/// and that is all it may say).
fn all_readers_agree(spark: &mut Session, table: &std::path::Path, want: &[u64], case: &str) {
    let read = spark.read(table, None);
    let ids: Vec<u64> = serde_json::from_value(read["keys"].clone()).unwrap();
    assert_eq!(ids, want, "{case}: Spark");
    let (clients, python) = common::python_readers(case).unwrap();
    let output = Command::new(python)
        .arg(format!("{clients}/delta_read.py"))
        .arg(table)
        .args(["id", "--rows", "--deltalake-may-refuse"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{case}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let others: Value = serde_json::from_slice(&output.stdout).unwrap();
    for reader in ["duckdb", "deltalake"] {
        if let Some(refused) = others[reader]["unsupported"].as_str() {
            assert!(
                reader == "deltalake" && refused.contains("V2Checkpoint"),
                "{case}: {reader} refused: {refused}"
            );
            eprintln!("{case}: {reader} does not read this table: {refused}");
            continue;
        }
        let ids: Vec<u64> = others[reader]["rows_by_key"]
            .as_array()
            .unwrap()
            .iter()
            .map(|row| row["id"].as_u64().unwrap())
            .collect();
        assert_eq!(ids, want, "{case}: {reader}");
    }
}

/// Issue 48: the tables Spark 4.2 with Delta 4.4 makes today, each with
/// features sluice refused to append to. sluice appends to each between
/// Spark's own writes, its commits follow each feature's rules, and the
/// three readers agree on every row.
#[test]
fn sluice_appends_to_the_tables_spark_makes_today() {
    let Some(mut spark) = spark("spark-modern-tables") else {
        return;
    };
    let cases = [
        (
            "column mapping by name, deletion vectors, row tracking, in-commit timestamps, V2 checkpoints",
            "'delta.columnMapping.mode'='name', 'delta.enableDeletionVectors'='true', \
             'delta.enableRowTracking'='true', 'delta.enableInCommitTimestamps'='true', \
             'delta.checkpointPolicy'='v2', 'delta.checkpointInterval'='2'",
        ),
        (
            "column mapping by id, deletion vectors",
            "'delta.columnMapping.mode'='id', 'delta.enableDeletionVectors'='true'",
        ),
        ("a plain table, checkpointed by Spark", "'delta.checkpointInterval'='2'"),
    ];
    for (case, properties) in cases {
        let store = tempfile::tempdir().unwrap();
        let table = store.path().join("t");
        let at = table.to_str().unwrap();
        spark.sql(&format!(
            "CREATE TABLE delta.`{at}` (id BIGINT NOT NULL, name STRING, ts TIMESTAMP, \
             tn TIMESTAMP_NTZ, d DATE, amount DECIMAL(10,2), tags MAP<STRING,STRING>, \
             tenant STRING) USING delta PARTITIONED BY (tenant) TBLPROPERTIES ({properties})"
        ));
        // Spark's rows: one file of four, then two of them deleted (a
        // deletion vector where the table has them).
        spark.sql(&format!(
            "INSERT INTO delta.`{at}` SELECT id, concat('spark ', id), \
             TIMESTAMP'2026-11-29 10:00:00', TIMESTAMP_NTZ'2026-11-29 10:00:00', \
             DATE'2026-11-29', 12.50, map('source', 'spark'), 'even' \
             FROM (SELECT explode(array(1000L, 1002L, 1004L, 1006L)) AS id)"
        ));
        spark.sql(&format!(
            "DELETE FROM delta.`{at}` WHERE id IN (1002, 1004)"
        ));
        let appended = sluice_appends(store.path(), &typed_records(0..20), true);
        assert_eq!(appended["records"], 20, "{case}: {appended}");
        // Values that are not of their column's type go to the dead letter.
        let wrong = sluice_appends(
            store.path(),
            &[
                json!({"id": 900, "tenant": "even", "ts": "yesterday"}),
                json!({"id": 901, "tenant": "even", "amount": "1.005"}),
                json!({"id": 902, "tenant": "even", "tn": "2026-11-29T10:00:00Z"}),
            ],
            true,
        );
        assert_eq!(wrong["dead_lettered"], 3, "{case}: {wrong}");
        spark.sql(&format!(
            "INSERT INTO delta.`{at}` VALUES (1008, 'spark 1008', NULL, NULL, NULL, NULL, NULL, 'odd')"
        ));
        let appended = sluice_appends(store.path(), &typed_records(20..30), true);
        assert_eq!(appended["records"], 10, "{case}: {appended}");
        // A record bringing a column the table does not have: a table that
        // maps its columns takes no new one from sluice (dead-lettered).
        let extra = sluice_appends(
            store.path(),
            &[json!({"id": 30, "tenant": "even", "color": "red"})],
            true,
        );
        let mapped = properties.contains("columnMapping");
        // In parts (V2: sidecars) of 3 actions each.
        let said = tables(store.path(), &["checkpoint", "t", "--part-actions", "3"]);
        assert!(said.contains("checkpoint at version"), "{case}: {said}");
        let after_checkpoint = sluice_appends(store.path(), &typed_records(31..35), true);
        assert_eq!(after_checkpoint["records"], 4, "{case}");

        let mut want: Vec<u64> = (0..30).chain(31..35).collect();
        if !mapped {
            want.push(30);
        } else {
            assert_eq!(extra["dead_lettered"], 1, "{case}: {extra}");
        }
        want.extend([1000, 1006, 1008]);
        want.sort();
        all_readers_agree(&mut spark, &table, &want, case);
        // sluice's typed values, as Spark reads them; nulls only where no
        // value was given (Spark's row 1008, and record 30 of the plain table).
        let read = spark.read(&table, None);
        let first = &read["first"];
        assert_eq!(first["id"], 0, "{case}: {first}");
        assert_eq!(first["ts"], "2026-11-29 10:00:00", "{case}: {first}");
        assert_eq!(first["tn"], "2026-11-29 10:00:00", "{case}: {first}");
        assert_eq!(first["d"], "2026-11-29", "{case}: {first}");
        assert_eq!(first["amount"], "12.50", "{case}: {first}");
        assert_eq!(
            first["tags"],
            json!({"source": "sluice"}),
            "{case}: {first}"
        );
        let untyped = 1 + u64::from(!mapped);
        for column in ["ts", "tn", "d", "amount", "tags"] {
            assert_eq!(read["nulls"][column], untyped, "{case}: {column} {read}");
        }
        // Spark skips files on sluice's statistics of typed columns (a bound
        // written wrong would skip a file it needs, or keep none).
        let typed = read["rows"].as_u64().unwrap() - untyped;
        for (filter, matching) in [
            ("ts = TIMESTAMP'2026-11-29 10:00:00'", typed),
            ("ts < TIMESTAMP'2026-11-29 10:00:00'", 0),
            ("tn = TIMESTAMP_NTZ'2026-11-29 10:00:00'", typed),
            ("d = DATE'2026-11-29'", typed),
            ("d > DATE'2026-11-29'", 0),
            ("amount = 12.50", typed),
            ("amount > 12.50", 0),
        ] {
            let count = spark.call(json!({"op": "count", "table": table, "where": filter}));
            assert_eq!(count["skipping"], matching, "{case}: {filter}: {count}");
            assert_eq!(count["scanning"], matching, "{case}: {filter}: {count}");
        }

        // What each feature asks of sluice's own commits.
        let actions = log_actions(&table);
        let ours: Vec<&Value> = actions
            .iter()
            .filter(|a| {
                a["add"]["path"]
                    .as_str()
                    .is_some_and(|p| !p.contains("part-0"))
            })
            .collect();
        assert!(!ours.is_empty(), "{case}");
        // Bounds for every typed column but the map (id, name, ts, tn, d,
        // amount: under their physical names in a mapped table).
        let bounded = |add: &Value| {
            let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
            stats["minValues"].as_object().map_or(0, |m| m.len())
        };
        assert!(
            ours.iter().any(|a| bounded(&a["add"]) == 6),
            "{case}: {:?}",
            ours.iter().map(|a| &a["add"]["stats"]).collect::<Vec<_>>()
        );
        let protocol = spark.call(json!({"op": "protocol", "table": table}));
        let features: Vec<&str> = protocol["tableFeatures"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if features.contains(&"rowTracking") {
            // Each of sluice's adds has fresh row ids; no two files share one
            // (a file Spark re-adds with a deletion vector keeps its own).
            let mut ranges: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
            for add in actions.iter().filter_map(|a| a.get("add")) {
                let base = add["baseRowId"].as_i64();
                let stats: Value = serde_json::from_str(add["stats"].as_str().unwrap()).unwrap();
                let path = add["path"].as_str().unwrap().to_string();
                assert!(base.is_some(), "{case}: {path} has no baseRowId");
                assert!(add["defaultRowCommitVersion"].is_i64(), "{case}: {path}");
                let base = base.unwrap();
                ranges.insert(
                    path,
                    (base, base + stats["numRecords"].as_i64().unwrap() - 1),
                );
            }
            let mut spans: Vec<(i64, i64)> = ranges.into_values().collect();
            spans.sort();
            assert!(
                spans.windows(2).all(|w| w[0].1 < w[1].0),
                "{case}: {spans:?}"
            );
        }
        if features.contains(&"inCommitTimestamp") {
            let stamps: Vec<i64> = actions
                .iter()
                .filter_map(|a| a["commitInfo"]["inCommitTimestamp"].as_i64())
                .collect();
            let commits = actions
                .iter()
                .filter(|a| a.get("commitInfo").is_some())
                .count();
            assert_eq!(stamps.len(), commits, "{case}: every commit has one");
            assert!(stamps.windows(2).all(|w| w[0] < w[1]), "{case}: {stamps:?}");
        }
        if mapped {
            // Partition values and statistics under the physical names.
            for add in &ours {
                let values = add["add"]["partitionValues"].as_object().unwrap();
                assert!(
                    values.keys().all(|k| k.starts_with("col-")),
                    "{case}: {values:?}"
                );
            }
        }
        if features.contains(&"v2Checkpoint") {
            let checkpoints: Vec<String> = common::tables::walk(&table.join("_delta_log"))
                .iter()
                .filter_map(|p| p.file_name()?.to_str().map(str::to_owned))
                .filter(|n| n.contains(".checkpoint.") && n.ends_with(".json"))
                .collect();
            assert!(!checkpoints.is_empty(), "{case}: a V2 checkpoint");
        }
        // An early version still reads (time travel through sluice's commits).
        let first = spark.read(&table, Some(1));
        assert_eq!(first["rows"], 4, "{case}: {first}");
    }
}

/// Issue 48: Spark reads every table sluice writes: a widened schema (a
/// nested column added), sluice's checkpoint (in parts of 3 actions),
/// compaction and vacuum, and time travel to version 0.
#[test]
fn spark_reads_every_table_sluice_writes() {
    let Some(mut spark) = spark("spark-reads-sluice") else {
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    for run in 0..5u64 {
        let mut batch = records(run * 10..run * 10 + 10);
        if run >= 3 {
            // A new column, nested: the schema widens.
            for record in &mut batch {
                record["where"] = json!({"city": "Lyon", "floor": run});
            }
        }
        let appended = sluice_appends(store.path(), &batch, false);
        assert_eq!(appended["records"], 10);
    }
    let said = tables(store.path(), &["checkpoint", "t", "--part-actions", "3"]);
    assert!(said.contains("checkpoint at version"), "{said}");
    let said = tables(store.path(), &["compact", "t", "--min-files", "2"]);
    assert!(said.contains("rewritten as"), "{said}");
    let said = tables(store.path(), &["vacuum", "t", "--retain", "1h"]);
    assert!(!said.is_empty());
    let want: Vec<u64> = (0..50).collect();
    all_readers_agree(&mut spark, &table, &want, "sluice's table");
    let read = spark.read(&table, None);
    assert_eq!(read["nulls"]["where"], 30, "{read}");
    // Version 0: the first run's rows (vacuum kept what versions within its
    // retention read).
    let first = spark.read(&table, Some(0));
    assert_eq!(first["rows"], 10, "{first}");
}

/// Issue 48: exactly once still holds with another engine appending to the
/// same table: Spark (which created it) inserts rows while `sluice ingest`
/// reads a Kafka topic into it, is SIGKILLed once it has committed, and a
/// second run finishes the topic (its second half produced after the kill). Every record is in once, and so is each of
/// Spark's rows; both engines' commits interleave in one log.
#[test]
fn kafka_into_a_table_spark_appends_to_is_exactly_once() {
    let Some(mut spark) = spark("spark-kafka") else {
        return;
    };
    let Some((bootstrap, cp)) = common::kafka::kafka() else {
        return;
    };
    let records = 20_000u64;
    let topic = format!(
        "spark-delta-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
    );
    common::kafka::create_topic(&cp, &bootstrap, &topic, 4);
    // Half the records now, half once the first run is dead.
    let produce = |from: u64, to: u64| {
        let input: String = (from..to)
            .map(|n| common::kafka::record(n, 50) + "\n")
            .collect();
        common::kafka::kafka_tool(
            &cp,
            "kafka.tools.ConsoleProducer",
            &["--bootstrap-server", &bootstrap, "--topic", &topic],
            Some(input.as_bytes()),
        );
    };
    produce(0, records / 2);
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("events");
    let at = table.to_str().unwrap().to_string();
    spark.sql(&format!(
        "CREATE TABLE delta.`{at}` (n BIGINT NOT NULL, pad STRING) USING delta \
         TBLPROPERTIES ('delta.checkpointInterval'='5')"
    ));
    // Each run's log, read when it fails.
    let logs = tempfile::tempdir().unwrap();
    let ingest = |idle: &str, log: &str| {
        let log = std::fs::File::create(logs.path().join(log)).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .args(["ingest", "--stream", "events", "--table", "delta", "--json"])
            .arg("--from")
            .arg(format!("kafka://{bootstrap}/{topic}"))
            .args(["--group", &topic, "--idle-exit", idle])
            .args(["--flush-records", "1000", "--flush-age", "200ms"])
            .arg("--store")
            .arg(store.path())
            .stdout(Stdio::null())
            .stderr(log);
        command
    };
    let log_of = |name: &str| std::fs::read_to_string(logs.path().join(name)).unwrap_or_default();
    // The first run is killed once it has committed, Spark inserting
    // meanwhile; the second finishes the topic, Spark still inserting.
    let commits = |table: &std::path::Path| {
        log_actions(table)
            .iter()
            .filter(|a| {
                a["commitInfo"]["clientVersion"]
                    .as_str()
                    .is_some_and(|v| v.starts_with("sluice"))
            })
            .count()
    };
    let mut first = ingest("120s", "first").spawn().unwrap();
    let mut spark_rows = Vec::new();
    // Spark's inserts take seconds each on a loaded machine; the bound is
    // for sluice's first commit, whatever Spark does meanwhile.
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    while commits(&table) < 1 {
        if let Some(status) = first.try_wait().unwrap() {
            panic!(
                "the first run ended ({status}) before committing: {}",
                log_of("first")
            );
        }
        assert!(
            std::time::Instant::now() < deadline,
            "sluice committed nothing in 300 s: {}",
            log_of("first")
        );
        let n = 1_000_000 + spark_rows.len() as u64;
        spark.sql(&format!("INSERT INTO delta.`{at}` VALUES ({n}, 'spark')"));
        spark_rows.push(n);
        std::thread::sleep(Duration::from_millis(500));
    }
    // SIGKILL (it may have ended by itself, idle, once its half was in).
    let _ = first.kill();
    first.wait().unwrap();
    produce(records / 2, records);
    let mut second = ingest("5s", "second").spawn().unwrap();
    for _ in 0..3 {
        let n = 1_000_000 + spark_rows.len() as u64;
        spark.sql(&format!("INSERT INTO delta.`{at}` VALUES ({n}, 'spark')"));
        spark_rows.push(n);
    }
    let ended = second.wait().unwrap();
    assert!(
        ended.success(),
        "the second run failed: {}",
        log_of("second")
    );

    let mut want: Vec<u64> = (0..records).collect();
    want.extend(&spark_rows);
    let read = spark.read_by(&table, "n");
    let got: Vec<u64> = serde_json::from_value(read["keys"].clone()).unwrap();
    assert_eq!(got.len(), want.len(), "Spark: {} rows", got.len());
    assert_eq!(got, want, "Spark");
    let readers = common::python_readers("spark-kafka").unwrap();
    let others = common::read_delta(&readers, None, &at, "n", false);
    for reader in ["deltalake", "duckdb"] {
        let got = &others[reader];
        assert_eq!(got["rows"], want.len(), "{reader}: {got}");
        assert_eq!(
            got["distinct"],
            want.len(),
            "{reader}: records twice: {got}"
        );
    }
}
