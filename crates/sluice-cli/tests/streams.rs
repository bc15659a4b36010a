//! Record streams end to end with the built binary and MinIO: a gateway killed
//! with SIGKILL while clients post records (every acknowledged record is in a
//! stored object, once; every stored object is whole), and `sluice ingest`
//! from standard input.

mod common;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::tables::{
    assert_read_back, changing_records, comparable, fed, ingest_into_table,
    keyed_input_loads_once_across_a_sigkill_and_a_death_after_its_commit, table_files, walk,
};
use common::{minio_prefix, serve_on_minio, stored_records as stored};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_records_survive_a_sigkill_of_the_gateway() {
    let Some((endpoint, prefix, store)) = minio_prefix("streams-kill").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        "[streams.clicks]\nflush_age = \"150ms\"\nflush_records = 2000\n",
    )
    .unwrap();
    let mut gateway = serve_on_minio(
        &endpoint,
        &prefix,
        "127.0.0.1:0",
        &["--config", config.to_str().unwrap()],
    );
    let url = format!("{}/v1/streams/clicks", gateway.url);
    let acknowledged: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let sent: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let clients: Vec<_> = (0..8u64)
        .map(|c| {
            let (client, url) = (client.clone(), url.clone());
            let (acknowledged, sent) = (acknowledged.clone(), sent.clone());
            tokio::spawn(async move {
                for request in 0u64.. {
                    let ids: Vec<(u64, u64)> = (0..100).map(|r| (c, request * 100 + r)).collect();
                    let body: String = ids
                        .iter()
                        .map(|(c, n)| {
                            format!(
                                "{{\"client\":{c},\"n\":{n},\"pad\":\"{}\"}}\n",
                                "p".repeat(200)
                            )
                        })
                        .collect();
                    sent.lock().unwrap().extend(&ids);
                    match client.post(&url).body(body).send().await {
                        Ok(answer) if answer.status() == 200 => {
                            acknowledged.lock().unwrap().extend(ids)
                        }
                        // The gateway is gone: stop.
                        _ => return,
                    }
                }
            })
        })
        .collect();
    // Let batches be stored and others be in flight, then kill it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    gateway.child.kill().unwrap();
    gateway.child.wait().unwrap();
    for client in clients {
        client.await.unwrap();
    }
    let acknowledged = acknowledged.lock().unwrap().clone();
    let sent: HashSet<(u64, u64)> = sent.lock().unwrap().iter().copied().collect();
    assert!(
        acknowledged.len() >= 1000,
        "only {} acknowledged",
        acknowledged.len()
    );
    let (records, objects) = stored(&store, "clicks/").await;
    let ids: Vec<(u64, u64)> = records
        .iter()
        .map(|r| (r["client"].as_u64().unwrap(), r["n"].as_u64().unwrap()))
        .collect();
    let unique: HashSet<(u64, u64)> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "a record stored twice");
    for id in &acknowledged {
        assert!(
            unique.contains(id),
            "acknowledged record {id:?} is not stored"
        );
    }
    assert!(unique.is_subset(&sent), "a stored record nobody sent");
    eprintln!(
        "{} records acknowledged, {} stored in {objects} objects, {} sent",
        acknowledged.len(),
        unique.len(),
        sent.len()
    );
}

#[tokio::test]
async fn ingest_from_standard_input_into_minio() {
    let Some((endpoint, prefix, store)) = minio_prefix("streams-ingest").await else {
        return;
    };
    let input: String = (0..50_000)
        .map(|n| format!("{{\"n\":{n},\"svc\":\"s{}\"}}\n", n % 4))
        .collect();
    let output = fed(
        Command::new(env!("CARGO_BIN_EXE_sluice")).args([
            "ingest",
            "--stream",
            "logs",
            "--store",
            &format!("s3://{}/{prefix}", sluice_testkit::minio::TEST_BUCKET),
            "--endpoint",
            &endpoint,
            "--key-template",
            "{stream}/{field:svc}/{offset}",
            "--flush-records",
            "5000",
            "--json",
        ]),
        input.as_bytes(),
    );
    assert!(output.status.success());
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["records"], 50_000);
    let (records, objects) = stored(&store, "logs/").await;
    assert_eq!(summary["objects"], objects as u64);
    assert!(objects >= 12, "5,000 records per object at most: {objects}");
    let mut numbers: Vec<u64> = records.iter().map(|r| r["n"].as_u64().unwrap()).collect();
    numbers.sort();
    assert_eq!(numbers, (0..50_000).collect::<Vec<u64>>());
}

/// Issue 47: every object `sluice ingest` stores is announced as the
/// gateway's are. With `--event-url`, each batch has its `upload.completed`
/// event in the store's outbox (for the gateways on the store to deliver)
/// when the run ends, and no intent is left; without one, no intent is
/// written at all (nothing would settle it).
#[tokio::test]
async fn ingest_announces_every_batch_it_stores() {
    use sluice_store::ObjectStore;
    let input: String = (0..3_000).map(|n| format!("{{\"n\":{n}}}\n")).collect();
    for with_events in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("events.secret");
        std::fs::write(&secret, b"the ingest events secret, 32 bytes or more").unwrap();
        let store = dir.path().join("store");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .args([
                "ingest",
                "--stream",
                "logs",
                "--flush-records",
                "1000",
                "--store",
            ])
            .arg(&store);
        if with_events {
            command
                .args([
                    "--event-url",
                    "http://127.0.0.1:9/hook",
                    "--event-secret-file",
                ])
                .arg(&secret);
        }
        let output = fed(&mut command, input.as_bytes());
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let fs = sluice_store::fs::FsStore::open(sluice_store::fs::FsConfig::new(&store)).unwrap();
        let listed = |prefix: &'static str| {
            let fs = &fs;
            async move {
                let page = fs.list_objects(prefix, None, 1000).await.unwrap();
                page.objects.into_iter().map(|o| o.key).collect::<Vec<_>>()
            }
        };
        let batches = listed("logs/").await;
        assert_eq!(batches.len(), 3, "{batches:?}");
        assert!(
            listed("_sluice/events/intents/").await.is_empty(),
            "events {with_events}: intents left behind"
        );
        let events = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["events", "--store"])
            .arg(&store)
            .output()
            .unwrap();
        let listed_events = String::from_utf8_lossy(&events.stdout).into_owned();
        let mut announced: Vec<String> = listed_events
            .lines()
            .filter(|line| line.contains("upload.completed"))
            .filter_map(|line| line.split_whitespace().nth(2).map(str::to_owned))
            .collect();
        announced.sort();
        match with_events {
            true => assert_eq!(announced, batches, "{listed_events}"),
            false => assert!(announced.is_empty(), "{listed_events}"),
        }
    }
}

/// `sluice ingest`'s stream settings are the gateway's `[streams.NAME]`
/// definitions: a `--config` file's keys over the defaults, flags over both,
/// and `--table delta` alone meaning Parquet. Seen in the objects a run of 20
/// records makes.
#[test]
fn ingest_settings_come_from_the_definitions_then_the_file_then_the_flags() {
    let input: String = (0..20).map(|n| format!("{{\"n\":{n}}}\n")).collect();
    // (file, flags, objects, ending)
    let cases: [(Option<&str>, &[&str], usize, &str); 4] = [
        (None, &[], 1, ".ndjson.zst"),
        (
            Some("flush_records = 10\ncompression = \"gzip\"\n"),
            &[],
            2,
            ".ndjson.gz",
        ),
        (
            Some("flush_records = 10\n"),
            &["--flush-records", "5"],
            4,
            ".ndjson.zst",
        ),
        (
            None,
            &["--table", "delta", "--flush-records", "5"],
            4,
            ".parquet",
        ),
    ];
    for (file, flags, objects, ending) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store");
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .args(["ingest", "--stream", "s", "--store"])
            .arg(&store)
            .args(flags);
        if let Some(text) = file {
            let path = dir.path().join("stream.toml");
            std::fs::write(&path, text).unwrap();
            command.arg("--config").arg(&path);
        }
        let output = fed(&mut command, input.as_bytes());
        let case = format!("{file:?} {flags:?}");
        assert!(
            output.status.success(),
            "{case}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stored: Vec<std::path::PathBuf> = walk(&store.join("s"))
            .into_iter()
            .filter(|p| !p.components().any(|c| c.as_os_str() == "_delta_log"))
            .collect();
        assert_eq!(stored.len(), objects, "{case}: {stored:?}");
        assert!(
            stored.iter().all(|p| p.to_string_lossy().ends_with(ending)),
            "{case}: {stored:?}"
        );
    }
}

/// (arguments after `ingest --stream s --store DIR`, input, exit code, stderr holds)
type UsageCase = (Vec<&'static str>, &'static str, i32, &'static str);

#[test]
fn ingest_refuses_bad_settings_and_stops_at_an_invalid_line() {
    let cases: Vec<UsageCase> = vec![
        (
            vec!["--key-template", "{stream}"],
            "",
            2,
            "{uuid} or {offset}",
        ),
        (vec!["--level", "40"], "", 2, "level"),
        (vec!["--flush-records", "0"], "", 2, "--flush-records"),
        (vec!["--format", "csv"], "", 2, "--format"),
        (
            vec!["--table", "delta", "--format", "ndjson"],
            "",
            2,
            "Parquet",
        ),
        (vec![], "{\"a\":1}\n{oops\n", 1, "line 2: not JSON"),
        (
            vec!["--dead-letter-template", "dead/{uuid}"],
            "{\"a\":1}\n{oops\n",
            0,
            "",
        ),
    ];
    for (extra, input, code, says) in cases {
        let dir = tempfile::tempdir().unwrap();
        let output = fed(
            Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["ingest", "--stream", "s", "--store"])
                .arg(dir.path())
                .args(&extra),
            input.as_bytes(),
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        if code != 0 {
            let stored = std::fs::read_dir(dir.path().join("s")).map_or(0, |d| d.count());
            assert_eq!(stored, 0, "{extra:?}: nothing stored");
        }
    }
}

/// What pyarrow and DuckDB read from the Parquet files under `dir`, rows
/// ordered by `id` (tests/clients/parquet_read.py).
fn read_parquet(clients: &str, python: &str, dir: &std::path::Path) -> serde_json::Value {
    let read = Command::new(python)
        .arg(format!("{clients}/parquet_read.py"))
        .arg(dir)
        .arg("id")
        .output()
        .unwrap();
    assert!(
        read.status.success(),
        "{}",
        String::from_utf8_lossy(&read.stderr)
    );
    serde_json::from_slice(&read.stdout).unwrap()
}

#[test]
fn parquet_streams_read_back_equal_in_pyarrow_and_duckdb() {
    let Some((clients, python)) = common::python_readers("parquet-readback") else {
        return;
    };
    const RECORDS: u64 = 40_000;
    const CONFLICT: u64 = 30_000;
    let records = changing_records(RECORDS, CONFLICT);
    let input: String = records.iter().map(|r| format!("{r}\n")).collect();
    let dir = tempfile::tempdir().unwrap();
    let ingest = |extra: &[&str]| {
        // A run that stops at a record stops reading: `fed` writes from a
        // thread of its own.
        fed(
            Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["ingest", "--stream", "t", "--format", "parquet", "--json"])
                .args([
                    "--flush-records",
                    "7000",
                    "--row-group-records",
                    "2000",
                    "--store",
                ])
                .arg(dir.path())
                .args(extra),
            input.as_bytes(),
        )
    };
    // Without a dead letter the conflict stops the run, naming line and field.
    let refused = ingest(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains(&format!("line {}", CONFLICT + 1)) && stderr.contains("`price`"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir.path().join("t")).ok();
    // With one, it goes there and nothing else stops.
    let output = ingest(&["--dead-letter-template", "dead/{uuid}"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["records"], RECORDS - 1, "{summary}");
    assert_eq!(summary["dead_lettered"], 1, "{summary}");
    let read = read_parquet(&clients, &python, &dir.path().join("t"));
    assert!(read["files"].as_u64().unwrap() >= 6, "{}", read["files"]);
    let columns = ["id", "name", "price", "pad", "tags", "where"];
    let want: Vec<serde_json::Value> = records
        .iter()
        .filter(|r| r["id"] != CONFLICT)
        .map(|r| {
            let mut row = serde_json::Map::new();
            for column in columns {
                row.insert(column.into(), r.get(column).cloned().unwrap_or_default());
            }
            serde_json::Value::Object(row)
        })
        .collect();
    for reader in ["pyarrow", "duckdb"] {
        let rows = read[reader].as_array().unwrap();
        assert_eq!(rows.len(), want.len(), "{reader}");
        for (row, want) in rows.iter().zip(&want) {
            assert_eq!(comparable(row), comparable(want), "{reader}");
        }
    }
}

/// Text as JSON means it, whatever arrow-json made of it: an escaped
/// surrogate pair is one character of planes 2 to 16 (arrow-json 59.3 ORed
/// the halves, so U+20000 was stored as U+10000), and a key given twice
/// counts with its last value, even when its first is no value of the column.
#[test]
fn parquet_streams_store_text_and_repeated_keys_as_json_means_them() {
    let Some((clients, python)) = common::python_readers("parquet-json-meaning") else {
        return;
    };
    let input = concat!(
        r#"{"id":0,"name":"plain","price":1.5}"#,
        "\n",
        r#"{"id":1,"name":"\ud840\udc00 \ud842\udfb7 \udb40\udc41 \ud83d\ude00 \u00e9"}"#,
        "\n",
        r#"{"id":2,"name":"first","name":"last","price":1}"#,
        "\n",
        r#"{"id":3,"price":"x","price":2.5,"name":"kept"}"#,
        "\n",
    );
    let dir = tempfile::tempdir().unwrap();
    let output = fed(
        Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args([
                "ingest", "--stream", "t", "--format", "parquet", "--json", "--store",
            ])
            .arg(dir.path()),
        input.as_bytes(),
    );
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let read = read_parquet(&clients, &python, &dir.path().join("t"));
    let want = [
        (0, "plain", Some(1.5)),
        (1, "\u{20000} \u{20bb7} \u{e0041} \u{1f600} \u{e9}", None),
        (2, "last", Some(1.0)),
        (3, "kept", Some(2.5)),
    ];
    for reader in ["pyarrow", "duckdb"] {
        let rows = read[reader].as_array().unwrap();
        assert_eq!(rows.len(), want.len(), "{reader}: {rows:?}");
        for (row, (id, name, price)) in rows.iter().zip(want) {
            assert_eq!(row["id"], id, "{reader}: {row}");
            assert_eq!(row["name"], name, "{reader}: {row}");
            assert_eq!(row["price"].as_f64(), price, "{reader}: {row}");
        }
    }
}

#[tokio::test]
async fn parquet_streams_on_the_gateway_widen_and_refuse_by_field() {
    let Some((clients, python)) = common::python_readers("parquet-gateway") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        "[streams.orders]\nkey_template = \"{stream}/{uuid}\"\nformat = \"parquet\"\n\
         flush_age = \"100ms\"\nschema = { price = \"float64\" }\n",
    )
    .unwrap();
    let store = dir.path().join("store");
    let gateway = common::serve(&[
        "--listen",
        "127.0.0.1:0",
        "--store",
        store.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
    ]);
    let url = format!("{}/v1/streams/orders", gateway.url);
    let client = reqwest::Client::new();
    let post = |body: String| {
        client
            .post(&url)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
    };
    // (body, status, the answer holds)
    let requests = [
        (
            "{\"id\":1,\"price\":2}\n{\"id\":2,\"price\":2.5}\n",
            200,
            "\"records\":2",
        ),
        (
            "{\"id\":3,\"price\":1,\"tag\":{\"k\":\"v\"}}\n",
            200,
            "\"records\":1",
        ),
        (
            "{\"id\":4,\"price\":3}\n{\"id\":5,\"price\":\"free\"}\n",
            400,
            "line 2: field `price`: a string where the column holds a number",
        ),
        ("[1,2]\n", 400, "records are JSON objects"),
    ];
    for (body, status, says) in requests {
        let answer = post(body.to_string()).await.unwrap();
        assert_eq!(answer.status().as_u16(), status, "{body}");
        let text = answer.text().await.unwrap();
        assert!(text.contains(says), "{body}: {text}");
    }
    let read = read_parquet(&clients, &python, &store.join("orders"));
    let want = serde_json::json!([
        {"id": 1, "price": 2.0},
        {"id": 2, "price": 2.5},
        {"id": 3, "price": 1.0, "tag": {"k": "v"}},
    ]);
    for reader in ["pyarrow", "duckdb"] {
        assert_eq!(comparable(&read[reader]), comparable(&want), "{reader}");
    }
}

#[test]
fn delta_tables_grow_columns_refuse_conflicts_and_share_the_table_with_python_deltalake() {
    let Some(readers) = common::python_readers("delta-interop") else {
        return;
    };
    const RECORDS: u64 = 30_000;
    const CONFLICT: u64 = 20_000;
    let mut records = changing_records(RECORDS, CONFLICT);
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    let lines = |records: &[serde_json::Value]| -> String {
        records.iter().map(|r| format!("{r}\n")).collect()
    };
    // 1. sluice: fields that appear mid-stream become columns; the conflict
    //    goes to the dead letter and stops nothing else.
    let first = ingest_into_table(store.path(), "delta", &lines(&records));
    assert_eq!(first["records"], RECORDS - 1, "{first}");
    assert_eq!(first["dead_lettered"], 1, "{first}");
    records.remove(CONFLICT as usize);
    // 2. Another writer appends, with a column of its own.
    let theirs = serde_json::json!([
        {"id": 1_000_000, "name": "from python", "origin": "deltalake"},
        {"id": 1_000_001, "price": 1.5, "origin": "deltalake"},
    ]);
    let appended = Command::new(&readers.1)
        .arg(format!("{}/delta_append.py", readers.0))
        .arg(&table)
        .arg(theirs.to_string())
        .output()
        .unwrap();
    assert!(
        appended.status.success(),
        "{}",
        String::from_utf8_lossy(&appended.stderr)
    );
    records.extend(theirs.as_array().unwrap().iter().cloned());
    // 3. sluice again: it takes the table's schema as it is now (Python's
    //    column included, as a string), so a number there is a conflict.
    let ours = vec![
        serde_json::json!({"id": 2_000_000, "origin": "sluice", "late": true}),
        serde_json::json!({"id": 2_000_001, "origin": 7}),
    ];
    let second = ingest_into_table(store.path(), "delta", &lines(&ours));
    assert_eq!(second["records"], 1, "{second}");
    assert_eq!(second["dead_lettered"], 1, "{second}");
    records.push(ours[0].clone());
    // Both readers read every row as it was written, by whichever writer.
    let read = common::read_delta(&readers, None, table.to_str().unwrap(), "id", true);
    assert_read_back(
        &read,
        &["deltalake", "duckdb"],
        "rows_by_key",
        &records,
        &["id", "tags", "where", "origin", "late"],
    );
}

/// `sluice serve` with stream `clicks` into a Delta table on MinIO (fresh
/// port), with `env`.
fn delta_gateway(
    endpoint: &str,
    prefix: &str,
    config: &std::path::Path,
    env: &[(&str, &str)],
) -> common::Gateway {
    let store = format!("s3://{}/{prefix}", sluice_testkit::minio::TEST_BUCKET);
    common::serve_with_env(
        &[
            "--listen",
            "127.0.0.1:0",
            "--store",
            &store,
            "--endpoint",
            endpoint,
            "--config",
            config.to_str().unwrap(),
        ],
        env,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn delta_gateway_requests_retried_across_gateway_deaths_count_once() {
    let Some(readers) = common::python_readers("delta-gateway-kill") else {
        return;
    };
    let Some((endpoint, prefix, _store)) = minio_prefix("delta-gateway-kill").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(
        &config,
        "[streams.clicks]\ntable = \"delta\"\nformat = \"parquet\"\n\
         key_template = \"{stream}/{uuid}\"\nflush_age = \"150ms\"\nflush_records = 2000\n",
    )
    .unwrap();
    // The first gateway dies right after its third table commit, before it
    // answers the requests in it; the second is killed from outside.
    let gateway = delta_gateway(
        &endpoint,
        &prefix,
        &config,
        &[("SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS", "3")],
    );
    let url: Arc<Mutex<String>> =
        Arc::new(Mutex::new(format!("{}/v1/streams/clicks", gateway.url)));
    let replayed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    const CLIENTS: u64 = 8;
    const REQUESTS: u64 = 40;
    const PER_REQUEST: u64 = 100;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (client, url, replayed) = (client.clone(), url.clone(), replayed.clone());
            tokio::spawn(async move {
                for request in 0..REQUESTS {
                    let body: String = (0..PER_REQUEST)
                        .map(|r| {
                            let id = c * 1_000_000 + request * PER_REQUEST + r;
                            format!(
                                "{{\"id\":{id},\"client\":{c},\"pad\":\"{}\"}}\n",
                                "p".repeat(100)
                            )
                        })
                        .collect();
                    // Retried with its key until acknowledged, through
                    // whichever gateway is up.
                    let deadline = std::time::Instant::now() + Duration::from_secs(90);
                    loop {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "client {c} request {request} never acknowledged"
                        );
                        let target = url.lock().unwrap().clone();
                        let answer = client
                            .post(&target)
                            .header("idempotency-key", format!("c{c}-r{request}"))
                            .body(body.clone())
                            .send()
                            .await;
                        if let Ok(answer) = answer {
                            if answer.status() == 200 {
                                let ack: serde_json::Value = answer.json().await.unwrap();
                                if ack["replayed"] == true {
                                    replayed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                                break;
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            })
        })
        .collect();
    let mut gateway = gateway;
    assert!(
        tokio::task::spawn_blocking(move || {
            let status = gateway.child.wait().unwrap();
            status.code() == Some(137)
        })
        .await
        .unwrap(),
        "the first gateway did not die at its third commit"
    );
    let mut second = delta_gateway(&endpoint, &prefix, &config, &[]);
    *url.lock().unwrap() = format!("{}/v1/streams/clicks", second.url);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    second.child.kill().unwrap();
    second.child.wait().unwrap();
    let mut third = delta_gateway(&endpoint, &prefix, &config, &[]);
    *url.lock().unwrap() = format!("{}/v1/streams/clicks", third.url);
    for client in clients {
        client.await.unwrap();
    }
    third.child.kill().unwrap();
    third.child.wait().unwrap();
    let replayed = replayed.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("{replayed} retried requests were found committed and not appended again");
    assert!(
        replayed >= 1,
        "no request was committed and left unanswered"
    );
    let table = format!(
        "s3://{}/{}/clicks",
        sluice_testkit::minio::TEST_BUCKET,
        prefix.trim_end_matches('/')
    );
    let read = common::read_delta(&readers, Some(&endpoint), &table, "id", false);
    for reader in ["deltalake", "duckdb"] {
        let got = &read[reader];
        assert_eq!(
            got["rows"],
            CLIENTS * REQUESTS * PER_REQUEST,
            "{reader}: {got}"
        );
        assert_eq!(
            got["distinct"],
            CLIENTS * REQUESTS * PER_REQUEST,
            "{reader}: {got}"
        );
    }
}

/// Compaction, vacuum (by `sluice tables` and by the janitor) and a
/// checkpoint of a Delta table twenty ingests made keep every row; an
/// Iceberg-only step is refused by name.
#[test]
fn delta_tables_compact_vacuum_and_checkpoint_keep_every_row() {
    let Some(readers) = common::python_readers("delta-upkeep") else {
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    common::tables::upkeep_keeps_every_row(
        store.path(),
        "delta",
        (&["checkpoint", "t"], "checkpoint at version", 21),
        (&["expire", "t"], "is a Delta Lake table"),
        &|| {
            let read = common::read_delta(&readers, None, table.to_str().unwrap(), "id", false);
            ["deltalake", "duckdb"]
                .map(|reader| (reader, read[reader].clone()))
                .to_vec()
        },
    );
}

/// A compaction killed between any two of its store writes loses and
/// repeats no row, and the next one finishes it.
#[test]
fn a_delta_compaction_killed_after_any_store_write_loses_nothing() {
    let Some(readers) = common::python_readers("delta-compact-kill") else {
        return;
    };
    common::tables::compaction_survives_a_kill_after_any_store_write("delta", &|table| {
        let read = common::read_delta(&readers, None, table.to_str().unwrap(), "id", true);
        ["deltalake", "duckdb"]
            .map(|reader| (reader, read[reader].clone()))
            .to_vec()
    });
}

#[test]
fn keyed_standard_input_loads_once_across_a_sigkill_and_a_death_after_its_commit() {
    let Some(readers) = common::python_readers("delta-keyed-stdin") else {
        return;
    };
    let store = tempfile::tempdir().unwrap();
    let table = store.path().join("t");
    let records = keyed_input_loads_once_across_a_sigkill_and_a_death_after_its_commit(
        store.path(),
        "delta",
        "_delta_log",
    );
    let read = common::read_delta(&readers, None, table.to_str().unwrap(), "id", false);
    for reader in ["deltalake", "duckdb"] {
        assert_eq!(read[reader]["rows"], records, "{reader}: {}", read[reader]);
        assert_eq!(
            read[reader]["distinct"], records,
            "{reader}: {}",
            read[reader]
        );
    }
    // Refused: a key without a table.
    let refused = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args([
            "ingest",
            "--stream",
            "s",
            "--idempotency-key",
            "k",
            "--store",
        ])
        .arg(store.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr)
        .contains("needs a table (--table delta or --table iceberg)"));
}

/// Issue 47, for Delta: see [`common::tables::table_files_are_announced_once_a_commit_holds_them`].
#[test]
fn delta_files_are_announced_once_a_commit_holds_them() {
    common::tables::table_files_are_announced_once_a_commit_holds_them("delta", &table_files);
}
