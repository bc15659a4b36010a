//! `sluice serve`'s Iceberg REST catalog on MinIO, driven by clients nobody
//! here wrote: pyiceberg (PyPI) makes a namespace and a table, appends and
//! reads; DuckDB 1.5.5 attaches the catalog (`TYPE iceberg`) and reads. A
//! stream's Iceberg table, registered in the catalog, takes pyiceberg's
//! appends between the stream's commits (keyed requests among them, one
//! retried), and every reader counts every row once; eight writers of four
//! kinds at once on one table all commit, and nothing is lost.

mod common;

use std::process::Command;

use common::{minio_prefix, python_readers};
use sluice_store::ObjectStore;

/// tests/clients/iceberg_rest.py with `args`, on MinIO at `endpoint`.
fn rest_client(readers: &(String, String), endpoint: &str, args: &[&str]) -> serde_json::Value {
    common::python_json(readers, "iceberg_rest.py", args, Some(endpoint))
}

/// A config file under `dir` with stream `clicks` into the Iceberg table at
/// `analytics/clicks`.
fn clicks_config(dir: &std::path::Path) -> std::path::PathBuf {
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        "[streams.clicks]\ntable = \"iceberg\"\nformat = \"parquet\"\n\
         table_location = \"analytics/clicks\"\nkey_template = \"analytics/clicks/data/{uuid}\"\n\
         flush_age = \"100ms\"\n",
    )
    .unwrap();
    config
}

/// Posts records `ids` to stream `clicks` with idempotency key `key`; the
/// answer's JSON.
async fn post(
    client: &reqwest::Client,
    url: &str,
    key: &str,
    ids: std::ops::Range<u64>,
) -> serde_json::Value {
    let body: String = ids
        .map(|id| format!("{{\"id\":{id},\"source\":\"stream\"}}\n"))
        .collect();
    let answer = client
        .post(format!("{url}/v1/streams/clicks"))
        .header("content-type", "application/x-ndjson")
        .header("idempotency-key", key)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    answer.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pyiceberg_duckdb_and_a_stream_share_tables_through_sluice_s_catalog() {
    let Some(readers) = python_readers("iceberg-catalog") else {
        return;
    };
    let Some((endpoint, prefix, store)) = minio_prefix("iceberg-catalog").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = clicks_config(dir.path());
    let gateway = common::serve_on_minio(
        &endpoint,
        &prefix,
        "127.0.0.1:0",
        &["--config", config.to_str().unwrap()],
    );
    let catalog = format!("{}/iceberg", gateway.url);
    let client = reqwest::Client::new();
    // The stream makes its table; a retried request is found committed.
    for (n, key) in ["a", "b", "c"].iter().enumerate() {
        let start = n as u64 * 100;
        post(&client, &gateway.url, key, start..start + 100).await;
    }
    let again = post(&client, &gateway.url, "b", 100..200).await;
    assert_eq!(again["replayed"], true, "{again}");
    // Registered in the catalog under analytics.clicks.
    let mut latest = 0;
    for object in store
        .list_objects("analytics/clicks/metadata/v", None, 1000)
        .await
        .unwrap()
        .objects
    {
        let name = object.key.rsplit('/').next().unwrap();
        if let Some(version) = name
            .strip_prefix('v')
            .and_then(|n| n.strip_suffix(".metadata.json"))
            .and_then(|n| n.parse::<u64>().ok())
        {
            latest = latest.max(version);
        }
    }
    let metadata = format!(
        "s3://{}/{}analytics/clicks/metadata/v{latest}.metadata.json",
        sluice_testkit::minio::TEST_BUCKET,
        prefix
    );
    rest_client(
        &readers,
        &endpoint,
        &["register", &catalog, "analytics", "clicks", &metadata],
    );
    // pyiceberg appends between the stream's commits.
    rest_client(
        &readers,
        &endpoint,
        &["append", &catalog, "analytics", "clicks", "1000", "500"],
    );
    post(&client, &gateway.url, "d", 300..400).await;
    // pyiceberg's own table.
    rest_client(
        &readers,
        &endpoint,
        &["append", &catalog, "lake", "events", "0", "1000"],
    );
    for (namespace, table, rows) in [("analytics", "clicks", 900), ("lake", "events", 1000)] {
        let read = rest_client(&readers, &endpoint, &["read", &catalog, namespace, table]);
        for reader in ["pyiceberg", "duckdb"] {
            assert_eq!(read[reader]["rows"], rows, "{table} in {reader}: {read}");
            assert_eq!(
                read[reader]["distinct"], rows,
                "{table} in {reader}: {read}"
            );
        }
    }
    let listed = rest_client(&readers, &endpoint, &["list", &catalog]);
    assert_eq!(
        listed["namespaces"],
        serde_json::json!([["analytics"], ["lake"]])
    );
}

/// Eight writers on one Iceberg table at once, none of them waiting for the
/// others: two gateways' streams (two clients each), two `sluice ingest`
/// runs and two pyiceberg appenders through the catalog (each commit of
/// theirs refused because the table moved is made again, as an application
/// does). Every writer's every record is in the table once, as pyiceberg and
/// DuckDB read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_writers_at_once_all_commit_and_nothing_is_lost() {
    let Some(readers) = python_readers("iceberg-eight-writers") else {
        return;
    };
    let Some((endpoint, prefix, _store)) = minio_prefix("iceberg-eight-writers").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = clicks_config(dir.path());
    let gateways = [
        common::serve_on_minio(
            &endpoint,
            &prefix,
            "127.0.0.1:0",
            &["--config", config.to_str().unwrap()],
        ),
        common::serve_on_minio(
            &endpoint,
            &prefix,
            "127.0.0.1:0",
            &["--config", config.to_str().unwrap()],
        ),
    ];
    let catalog = format!("{}/iceberg", gateways[0].url);
    let client = reqwest::Client::new();
    // The table, made by the first request, registered in the catalog.
    post(&client, &gateways[0].url, "first", 0..1).await;
    let metadata = format!(
        "s3://{}/{}analytics/clicks/metadata/v1.metadata.json",
        sluice_testkit::minio::TEST_BUCKET,
        prefix
    );
    rest_client(
        &readers,
        &endpoint,
        &["register", &catalog, "analytics", "clicks", &metadata],
    );
    const PER_WRITER: u64 = 10_000;
    let mut writers = Vec::new();
    // Stream clients: requests of 100 records, two through each gateway.
    for (w, gateway) in [0u64, 1, 2, 3].iter().zip([0usize, 0, 1, 1]) {
        let (client, url) = (client.clone(), gateways[gateway].url.clone());
        writers.push(tokio::spawn(async move {
            let base = (w + 1) * 1_000_000;
            for r in 0..PER_WRITER / 100 {
                let start = base + r * 100;
                post(&client, &url, &format!("w{w}-r{r}"), start..start + 100).await;
            }
        }));
    }
    // Two `sluice ingest` runs into the same table.
    for w in [4u64, 5] {
        let store_uri = format!("s3://{}/{}", sluice_testkit::minio::TEST_BUCKET, prefix);
        let endpoint = endpoint.clone();
        writers.push(tokio::task::spawn_blocking(move || {
            let base = (w + 1) * 1_000_000;
            let input: String = (base..base + PER_WRITER)
                .map(|id| format!("{{\"id\":{id},\"source\":\"ingest\"}}\n"))
                .collect();
            let output = common::tables::fed(
                Command::new(env!("CARGO_BIN_EXE_sluice"))
                    .args(["ingest", "--stream", "clicks", "--table", "iceberg"])
                    .args(["--table-location", "analytics/clicks"])
                    .args(["--key-template", "analytics/clicks/data/{uuid}"])
                    .args(["--flush-records", "2000", "--store", &store_uri])
                    .args(["--endpoint", &endpoint]),
                input.as_bytes(),
            );
            assert!(
                output.status.success(),
                "ingest {w}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }));
    }
    // Two pyiceberg appenders, ten commits each.
    for w in [6u64, 7] {
        let (readers, endpoint, catalog) = (readers.clone(), endpoint.clone(), catalog.clone());
        writers.push(tokio::task::spawn_blocking(move || {
            let start = ((w + 1) * 1_000_000).to_string();
            let count = PER_WRITER.to_string();
            let appended = rest_client(
                &readers,
                &endpoint,
                &[
                    "append",
                    &catalog,
                    "analytics",
                    "clicks",
                    &start,
                    &count,
                    "--batches",
                    "10",
                ],
            );
            eprintln!("pyiceberg appender {w}: {appended}");
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    let total = 1 + 8 * PER_WRITER;
    let read = rest_client(
        &readers,
        &endpoint,
        &["read", &catalog, "analytics", "clicks"],
    );
    for reader in ["pyiceberg", "duckdb"] {
        assert_eq!(read[reader]["rows"], total, "{reader}: {read}");
        assert_eq!(read[reader]["distinct"], total, "{reader}: {read}");
    }
}

/// The catalog's gateway killed right after any one of its store writes
/// (`SLUICE_FAULT_EXIT_AFTER_STORE_WRITES=N`, N from 1 until pyiceberg's
/// first run ends with the gateway alive, each on a fresh prefix) while
/// pyiceberg makes a namespace and a table and appends 100 rows: a gateway
/// started again with the default settings serves a catalog in which the
/// same client makes the same namespace and table (taking over what was
/// half made) and appends 100 more, and both readers count the rows of
/// every append that landed, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_killed_after_any_store_write_is_whole_when_started_again() {
    let Some(readers) = python_readers("iceberg-catalog-kill") else {
        return;
    };
    let Some((endpoint, prefix, _store)) = minio_prefix("iceberg-catalog-kill").await else {
        return;
    };
    let first_append = |catalog: &str| {
        let (clients, python) = &readers;
        Command::new(python)
            .arg(format!("{clients}/iceberg_rest.py"))
            .args(["append", catalog, "lake", "events", "0", "100"])
            .env("AWS_ENDPOINT_URL", &endpoint)
            .output()
            .unwrap()
    };
    let mut killed = 0;
    for at in 1.. {
        assert!(
            at <= 40,
            "a namespace, a table and an append made 40 writes"
        );
        let here = format!("{prefix}kill-{at}/");
        let fault = at.to_string();
        let mut gateway = common::serve_on_minio_with_env(
            &endpoint,
            &here,
            "127.0.0.1:0",
            &[],
            &[("SLUICE_FAULT_EXIT_AFTER_STORE_WRITES", &fault)],
        );
        let catalog = format!("{}/iceberg", gateway.url);
        let first = first_append(&catalog);
        let answered = first.status.success();
        if answered {
            // A write after the answer (the version hint) may still end it.
            std::thread::sleep(std::time::Duration::from_millis(500));
            if gateway.child.try_wait().unwrap().is_none() {
                break;
            }
        }
        let mut status = None;
        for _ in 0..100 {
            status = gateway.child.try_wait().unwrap();
            if status.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let stderr = String::from_utf8_lossy(&first.stderr);
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(137),
            "write {at}: the client failed and the gateway lives on: {stderr}"
        );
        killed += 1;
        drop(gateway);
        let again = common::serve_on_minio(&endpoint, &here, "127.0.0.1:0", &[]);
        let catalog = format!("{}/iceberg", again.url);
        rest_client(
            &readers,
            &endpoint,
            &["append", &catalog, "lake", "events", "100", "100"],
        );
        let read = rest_client(&readers, &endpoint, &["read", &catalog, "lake", "events"]);
        let rows = read["pyiceberg"]["rows"].as_u64().unwrap();
        // The first append is in when its commit landed, answered or not;
        // one that was answered is in.
        assert!(
            rows == 200 || (rows == 100 && !answered),
            "write {at}: {rows} rows: {read}"
        );
        for reader in ["pyiceberg", "duckdb"] {
            assert_eq!(read[reader]["rows"], rows, "write {at}, {reader}: {read}");
            assert_eq!(
                read[reader]["distinct"], rows,
                "write {at}, {reader}: {read}"
            );
        }
        let listed = rest_client(&readers, &endpoint, &["list", &catalog]);
        assert_eq!(
            listed["namespaces"],
            serde_json::json!([["lake"]]),
            "write {at}"
        );
    }
    assert!(killed >= 3, "only {killed} writes to kill after");
    eprintln!("the catalog was killed after each of its {killed} store writes");
}
