//! What the record-stream and Delta table tests share: `sluice ingest` and
//! `sluice tables` runs on a directory store, and looking at what they left
//! on disk.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Runs `command` with `input` on its standard input (written from a thread
/// of its own: a run that stops early closes the pipe), capturing its output.
pub fn fed(command: &mut Command, input: &[u8]) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    output
}

/// `sluice ingest --table FORMAT` (delta, iceberg) of `input` into stream
/// `t` under `store` (flushing every 5,000 records, invalid ones to a dead
/// letter).
pub fn ingest_into_table(store: &std::path::Path, format: &str, input: &str) -> serde_json::Value {
    let output = fed(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["ingest", "--stream", "t", "--table", format, "--json"])
            .args([
                "--flush-records",
                "5000",
                "--dead-letter-template",
                "dead/{uuid}",
            ])
            .arg("--store")
            .arg(store),
        input.as_bytes(),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `sluice ingest --table FORMAT --idempotency-key KEY` on `store`, stream
/// `t` (flushing every 1,000 records).
pub fn keyed_ingest(store: &std::path::Path, format: &str, key: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command
        .args(["ingest", "--stream", "t", "--table", format, "--json"])
        .args([
            "--flush-records",
            "1000",
            "--idempotency-key",
            key,
            "--store",
        ])
        .arg(store)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// `sluice tables ARGS…` on the directory store `store`; its stdout.
pub fn tables(store: &std::path::Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("tables")
        .arg(args[0])
        .arg("--store")
        .arg(store)
        .args(&args[1..])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Every file under `dir`.
pub fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else {
            found.push(path);
        }
    }
    found
}

/// Every file under `dir`, none when it does not exist.
pub fn walk_if_there(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    match dir.exists() {
        true => walk(dir),
        false => Vec::new(),
    }
}

/// The Parquet files under `dir`.
pub fn parquet_files(dir: &std::path::Path) -> usize {
    walk_if_there(dir)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .count()
}

/// The add paths of a directory store's Delta table at `table`, from its log.
pub fn table_files(table: &std::path::Path) -> Vec<String> {
    let mut files = Vec::new();
    for commit in walk_if_there(&table.join("_delta_log")) {
        if commit.extension().is_none_or(|e| e != "json") {
            continue;
        }
        for line in std::fs::read_to_string(&commit).unwrap().lines() {
            let action: serde_json::Value = serde_json::from_str(line).unwrap();
            if let Some(path) = action["add"]["path"].as_str() {
                files.push(path.to_owned());
            }
        }
    }
    files.sort();
    files
}

/// Runs `command` (a `sluice ingest` into the table at `table`) on the first
/// half of `input` and SIGKILLs it once it stored three Parquet files.
pub fn kill_once_files_are_stored(command: &mut Command, input: &str, table: &std::path::Path) {
    let mut run = command.spawn().unwrap();
    let mut stdin = run.stdin.take().unwrap();
    stdin
        .write_all(&input.as_bytes()[..input.len() / 2])
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while parquet_files(table) < 3 {
        assert!(std::time::Instant::now() < deadline, "no file stored");
        std::thread::sleep(Duration::from_millis(20));
    }
    run.kill().unwrap();
    run.wait().unwrap();
}

/// The newest metadata file of the Iceberg table at `table` (a directory).
pub fn iceberg_metadata(table: &std::path::Path) -> std::path::PathBuf {
    walk(&table.join("metadata"))
        .into_iter()
        .filter_map(|path| {
            let name = path.file_name()?.to_str()?;
            let version: u64 = name
                .strip_prefix('v')?
                .strip_suffix(".metadata.json")?
                .parse()
                .ok()?;
            Some((version, path))
        })
        .max()
        .map(|(_, path)| path)
        .expect("the table has a metadata file")
}

/// What pyiceberg and DuckDB read from the Iceberg table at `table` (a
/// directory), by `key` (tests/clients/iceberg_read.py): every row, or with
/// `count`, how many and how many distinct keys. The two must agree.
pub fn read_iceberg(
    readers: &(String, String),
    table: &std::path::Path,
    key: &str,
    count: bool,
) -> serde_json::Value {
    let metadata = iceberg_metadata(table);
    read_iceberg_at(readers, None, metadata.to_str().unwrap(), key, count)
}

/// [`read_iceberg`] from the metadata file at `metadata` (a path, or
/// s3://bucket/… on MinIO at `endpoint`).
pub fn read_iceberg_at(
    readers: &(String, String),
    endpoint: Option<&str>,
    metadata: &str,
    key: &str,
    count: bool,
) -> serde_json::Value {
    let mut args = vec![metadata, key];
    if count {
        args.push("--count");
    }
    let read = super::python_json(readers, "iceberg_read.py", &args, endpoint);
    assert_eq!(
        read["pyiceberg"]["rows"], read["duckdb"]["rows"],
        "the readers disagree"
    );
    read
}

/// Records that bring fields as they go (a column, a list, a nested object),
/// with nulls, non-ASCII text and, at `conflict`, a type conflict.
pub fn changing_records(count: u64, conflict: u64) -> Vec<serde_json::Value> {
    (0..count)
        .map(|n| {
            let mut record = serde_json::json!({
                "id": n,
                "name": format!("r{n} ünïcødé \"q\""),
                "price": n as f64 * 0.25,
                "pad": "x".repeat(200),
            });
            if n >= count / 4 {
                record["tags"] =
                    serde_json::json!(if n % 3 == 0 { vec![] } else { vec!["a", "b"] });
            }
            if n >= count / 2 {
                record["where"] = serde_json::json!({"x": n, "y": null, "z": [1.5, 2]});
            }
            if n % 10 == 0 {
                record["name"] = serde_json::Value::Null;
            }
            if n == conflict {
                record["price"] = serde_json::json!("free");
            }
            record
        })
        .collect()
}

/// A value as a table gives it back: a member that is null and one that is
/// absent are the same (a field only ever null has no column yet), and
/// numbers compare as numbers (an integer in a float column reads as a float).
pub fn comparable(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Number(n) => serde_json::json!(n.as_f64().unwrap()),
        Value::Array(items) => Value::Array(items.iter().map(comparable).collect()),
        Value::Object(members) => Value::Object(
            members
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), comparable(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Issue 47: a table's data file is announced once a commit holds it, never
/// when it is only stored (a file no commit takes is a vacuum orphan, and an
/// event for it would name data no reader of the table ever sees). A keyed
/// `sluice ingest --table FORMAT` with events (its committed files listed by
/// `table_files`): SIGKILLed with files stored and
/// none committed; run again, dying right after its commit and before any
/// event is recorded; then a janitor pass reconciles what the second left
/// (`--event-reconcile-after 0s`: the default only makes the pass wait 30 s
/// for the intents it settles; what it decides is the same). Every file the
/// table holds has one `upload.completed` event, no other file has one, and
/// no intent is left.
pub fn table_files_are_announced_once_a_commit_holds_them(
    format: &str,
    table_files: &dyn Fn(&std::path::Path) -> Vec<String>,
) {
    // About 4 MiB: several of ingest's 1 MiB blocks.
    const RECORDS: u64 = 60_000;
    let input: String = (0..RECORDS)
        .map(|n| format!("{{\"id\":{n},\"pad\":\"{}\"}}\n", "q".repeat(50)))
        .collect();
    let store = tempfile::tempdir().unwrap();
    let secret = store.path().join("events.secret");
    std::fs::write(&secret, b"the table events secret, 32 bytes or more").unwrap();
    let data = store.path().join("bucket");
    let table = data.join("t");
    let with_events = |command: &mut Command| {
        command
            .args([
                "--event-url",
                "http://127.0.0.1:9/hook",
                "--event-secret-file",
            ])
            .arg(&secret);
    };
    // 1. SIGKILLed with files stored and none committed.
    let mut first = keyed_ingest(&data, format, "load-1");
    with_events(&mut first);
    kill_once_files_are_stored(&mut first, &input, &table);
    assert!(table_files(&table).is_empty(), "the first run committed");
    // 2. Dies right after its one commit, before it announces anything.
    let mut second = keyed_ingest(&data, format, "load-1");
    with_events(&mut second);
    let second = fed(
        second.env("SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS", "1"),
        input.as_bytes(),
    );
    assert_eq!(second.status.code(), Some(137));
    let committed = table_files(&table);
    assert!(!committed.is_empty());
    // 3. A janitor pass settles what the second run left.
    let mut janitor = Command::new(env!("CARGO_BIN_EXE_sluice"));
    janitor
        .args(["janitor", "--event-reconcile-after", "0s", "--store"])
        .arg(&data);
    with_events(&mut janitor);
    let janitor = janitor.output().unwrap();
    assert!(
        janitor.status.success(),
        "{}",
        String::from_utf8_lossy(&janitor.stderr)
    );
    // Every committed file's event came from the intents the second run left.
    let report = String::from_utf8_lossy(&janitor.stdout).into_owned();
    assert!(
        report.contains(&format!(
            "intents: {} announced, 0 dropped",
            committed.len()
        )),
        "{report}"
    );
    let events = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["events", "--store"])
        .arg(&data)
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&events.stdout).into_owned();
    let mut announced: Vec<String> = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for line in listed.lines().filter(|l| l.contains("upload.completed")) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert!(
            ids.insert(fields[0].to_owned()),
            "an event id twice: {listed}"
        );
        announced.push(fields[2].trim_start_matches("t/").to_owned());
    }
    announced.sort();
    assert_eq!(
        announced,
        committed,
        "events are not the table's files ({} stored): {listed}\n{}",
        parquet_files(&table),
        String::from_utf8_lossy(&janitor.stdout)
    );
    assert!(
        walk_if_there(&data.join("_sluice/events/intents")).is_empty(),
        "intents left behind"
    );
}

/// Asserts that each of `readers` in `read` (under `rows`: its rows ordered
/// by `id`) gives `records` back as they were written, with `columns` among
/// its columns.
pub fn assert_read_back(
    read: &serde_json::Value,
    readers: &[&str],
    rows: &str,
    records: &[serde_json::Value],
    columns: &[&str],
) {
    let mut want: Vec<serde_json::Value> = records.iter().map(comparable).collect();
    want.sort_by_key(|r| r["id"].as_f64().unwrap() as u64);
    for reader in readers {
        let got: Vec<serde_json::Value> = read[reader][rows]
            .as_array()
            .unwrap()
            .iter()
            .map(comparable)
            .collect();
        assert_eq!(got.len(), want.len(), "{reader}");
        for (got, want) in got.iter().zip(&want) {
            assert_eq!(got, want, "{reader}");
        }
        let found = &read[reader]["columns"];
        for column in columns {
            assert!(
                found.as_array().unwrap().iter().any(|c| c == column),
                "{reader}: no column {column}: {found}"
            );
        }
    }
}

/// `sluice ingest --table FORMAT --idempotency-key load-1` of `RECORDS`
/// records into `t` under `store` (its log or metadata under `log`): SIGKILLed
/// part-way with files stored and none committed; run again, dying right
/// after its one commit, before it could say so; run once more, finding the
/// key in the table and appending nothing. The readers then count once.
pub fn keyed_input_loads_once_across_a_sigkill_and_a_death_after_its_commit(
    store: &std::path::Path,
    format: &str,
    log: &str,
) -> u64 {
    // About 7 MiB: several of ingest's 1 MiB blocks.
    const RECORDS: u64 = 100_000;
    let input: String = (0..RECORDS)
        .map(|n| format!("{{\"id\":{n},\"pad\":\"{}\"}}\n", "q".repeat(50)))
        .collect();
    let table = store.join("t");
    // 1. SIGKILLed part-way, with files stored and none committed.
    kill_once_files_are_stored(&mut keyed_ingest(store, format, "load-1"), &input, &table);
    assert!(
        walk_if_there(&table.join(log)).is_empty(),
        "the first run committed"
    );
    // 2. Again with the same key, dying right after its one commit, before
    //    it could say so.
    let second = fed(
        keyed_ingest(store, format, "load-1").env("SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS", "1"),
        input.as_bytes(),
    );
    assert_eq!(
        second.status.code(),
        Some(137),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    // 3. Once more: the table holds the key, nothing is appended.
    let output = fed(&mut keyed_ingest(store, format, "load-1"), input.as_bytes());
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["replayed"], true, "{summary}");
    assert_eq!(summary["records"], 0, "{summary}");
    RECORDS
}

/// `sluice tables compact` and `vacuum` (and the janitor's vacuum) on a
/// FORMAT table twenty ingests made, as twenty one-second flushes would,
/// with an orphan (a file a writer stored and never committed) planted a day
/// ago: the small files become one, the orphan goes and nothing else does.
/// Then the format's own step `history` (ARGS, what it says, the Parquet
/// files after it), one more writer, and `count` (each reader's count of
/// `id`s) finds every row once. Refused: a vacuum that could delete what a
/// writer is committing, and the other format's step `refused` (ARGS, what
/// the refusal says).
pub fn upkeep_keeps_every_row(
    store: &std::path::Path,
    format: &str,
    history: (&[&str], &str, usize),
    refused: (&[&str], &str),
    count: &dyn Fn() -> Vec<(&'static str, serde_json::Value)>,
) {
    let table = store.join("t");
    for run in 0..20u64 {
        let input: String = (0..500)
            .map(|n| format!("{{\"id\":{},\"run\":{run}}}\n", run * 500 + n))
            .collect();
        ingest_into_table(store, format, &input);
    }
    // Data files (not a Delta checkpoint).
    let parquet_files = || {
        walk(&table)
            .into_iter()
            .filter(|p| {
                p.extension().is_some_and(|e| e == "parquet")
                    && !p.to_string_lossy().contains("_delta_log")
            })
            .count()
    };
    assert_eq!(parquet_files(), 20);
    let orphan = table.join("orphan.parquet");
    let plant_orphan = || {
        std::fs::write(&orphan, b"PAR1 not committed").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&orphan)
            .unwrap()
            .set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(86_400))
            .unwrap();
    };
    plant_orphan();
    let said = tables(store, &["compact", "t", "--min-files", "4"]);
    assert!(said.contains("20 files rewritten as 1"), "{said}");
    let said = tables(store, &["vacuum", "t", "--retain", "1h"]);
    // The orphan goes; the compacted-away files stay for readers of older
    // versions until they are older than the retention.
    assert!(said.contains("deleted 1 files"), "{said}");
    assert!(!orphan.exists());
    assert_eq!(parquet_files(), 21);
    // The janitor does the same for the tables it is given.
    plant_orphan();
    let janitor = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["janitor", "--store"])
        .arg(store)
        .args(["--table", "t"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&janitor.stdout);
    assert!(
        janitor.status.success(),
        "{said} {}",
        String::from_utf8_lossy(&janitor.stderr)
    );
    assert!(said.contains("table t: deleted 1 files"), "{said}");
    assert!(!orphan.exists());
    assert_eq!(parquet_files(), 21);
    let (args, says, files) = history;
    let said = tables(store, args);
    assert!(said.contains(says), "{said}");
    assert_eq!(parquet_files(), files);
    // A writer after it, then the readers.
    ingest_into_table(store, format, "{\"id\":10000,\"run\":20}\n");
    for (reader, read) in count() {
        assert_eq!(read["rows"], 10_001, "{reader}: {read}");
        assert_eq!(read["distinct"], 10_001, "{reader}: {read}");
    }
    let refusals: [(&[&str], &str); 2] = [
        (&["vacuum", "t", "--retain", "10m"], "at least 1h"),
        refused,
    ];
    for (args, says) in refusals {
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["tables", args[0], "--store"])
            .arg(store)
            .args(&args[1..])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// A FORMAT table's compaction killed right after any one of its store
/// writes (`SLUICE_FAULT_EXIT_AFTER_STORE_WRITES=N`, N from 1 until the
/// compaction ends by itself, each on a table made anew) leaves a
/// table `count` (each reader's count of `id`s in the table at the path it
/// is given) reads whole, once; the next compaction, with nothing set,
/// finishes the job and the readers count the same.
pub fn compaction_survives_a_kill_after_any_store_write(
    format: &str,
    count: &dyn Fn(&std::path::Path) -> Vec<(&'static str, serde_json::Value)>,
) {
    const ROWS: u64 = 400;
    // Four files: made anew for every kill (an Iceberg table's paths are
    // absolute, so it cannot be copied).
    let made = || {
        let store = tempfile::tempdir().unwrap();
        for run in 0..4u64 {
            let input: String = (0..ROWS / 4)
                .map(|n| format!("{{\"id\":{}}}\n", run * ROWS / 4 + n))
                .collect();
            ingest_into_table(store.path(), format, &input);
        }
        store
    };
    let whole = |table: &std::path::Path, when: &str| {
        for (reader, read) in count(table) {
            assert_eq!(read["rows"], ROWS, "{when}, {reader}: {read}");
            assert_eq!(read["distinct"], ROWS, "{when}, {reader}: {read}");
        }
    };
    let mut killed = 0;
    for at in 1.. {
        assert!(at <= 40, "a compaction of four files made 40 writes");
        let store = made();
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["tables", "compact", "t", "--min-files", "2", "--store"])
            .arg(store.path())
            .env("SLUICE_FAULT_EXIT_AFTER_STORE_WRITES", at.to_string())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if output.status.success() {
            // It made fewer writes than `at`: every one of them was tried.
            break;
        }
        assert_eq!(output.status.code(), Some(137), "write {at}: {stderr}");
        killed += 1;
        let table = store.path().join("t");
        whole(&table, &format!("killed after write {at}"));
        tables(store.path(), &["compact", "t", "--min-files", "2"]);
        whole(&table, &format!("compacted again after write {at}"));
        // The job is done: one file, nothing left to compact.
        let said = tables(store.path(), &["compact", "t", "--min-files", "2"]);
        assert!(
            said.contains("nothing to compact (1 files)"),
            "after write {at}: {said}"
        );
    }
    assert!(killed >= 3, "only {killed} writes to kill after");
    eprintln!("{format}: the compaction was killed after each of its {killed} store writes");
}
