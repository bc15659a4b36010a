//! What the end-to-end tests share: a `sluice serve` child process (killed when
//! dropped) and a MinIO prefix of its own for each test.
#![allow(dead_code)] // each test binary uses part of it

pub mod kafka;
pub mod own_minio;
pub mod spark;
pub mod stores;
pub mod tables;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use futures::TryStreamExt;
use sluice_store::ObjectStore;
use sluice_testkit::minio;

/// A running gateway; killed when dropped.
pub struct Gateway {
    pub child: Child,
    /// `http://127.0.0.1:PORT`, as the gateway printed it.
    pub url: String,
}

impl Gateway {
    /// Whether the gateway process ends within `wait` (by itself: a fault
    /// that makes it exit).
    pub fn died_within(&mut self, wait: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            if self.child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        false
    }
}

impl Gateway {
    /// Takes an upload slot and keeps it: a PUT whose body (1000 bytes
    /// announced, 5 sent) is still arriving, returned once the gateway counts
    /// it in flight (`sluice_uploads_in_flight` on /metrics, counted after
    /// admission). The slot is given back when the connection drops.
    pub async fn hold_a_slot(&self) -> std::net::TcpStream {
        use std::io::Write;
        let address = self.url.trim_start_matches("http://").to_string();
        let mut holder = std::net::TcpStream::connect(&address).unwrap();
        write!(
            holder,
            "PUT /v1/objects/held HTTP/1.1\r\nHost: {address}\r\nContent-Length: 1000\r\n\r\nstart"
        )
        .unwrap();
        let client = reqwest::Client::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let in_flight = metric(&client, &self.url, "sluice_uploads_in_flight").await;
            if in_flight >= 1.0 {
                return holder;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the held PUT was not admitted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A figure from the gateway's /metrics (open without auth).
pub async fn metric(client: &reqwest::Client, gateway: &str, name: &str) -> f64 {
    let text = client
        .get(format!("{gateway}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.split([' ', '{']).next() == Some(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .collect();
    assert!(!values.is_empty(), "no {name} in /metrics");
    values.iter().sum()
}

/// `127.0.0.1:PORT` with a port free now (closed again: a gateway started on
/// it, and started again there after a kill, keeps its address).
pub fn free_loopback_address() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

/// A loopback port free now (closed again), for a helper process to listen on.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Starts `sluice serve ARGS` and waits for the URL it prints.
pub fn serve(args: &[&str]) -> Gateway {
    serve_with_env(args, &[])
}

/// [`serve`] with variables set for the gateway (credentials, ...).
pub fn serve_with_env(args: &[&str], env: &[(&str, &str)]) -> Gateway {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("serve")
        .args(args)
        .envs(env.iter().copied())
        // The fault tests make gateways log a lot; SLUICE_TEST_GATEWAY_LOG=info to see it.
        .env(
            "SLUICE_LOG",
            std::env::var("SLUICE_TEST_GATEWAY_LOG").unwrap_or_else(|_| "error".into()),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start sluice serve");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://") || w.starts_with("https://"))
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .trim_end_matches('/')
        .to_string();
    Gateway { child, url }
}

/// Starts `sluice serve` listening on `listen` against `s3://sluice-test/<prefix>`.
pub fn serve_on_minio(endpoint: &str, prefix: &str, listen: &str, extra: &[&str]) -> Gateway {
    serve_on_minio_with_env(endpoint, prefix, listen, extra, &[])
}

/// [`serve_on_minio`] with variables set for the gateway (a fault, ...).
pub fn serve_on_minio_with_env(
    endpoint: &str,
    prefix: &str,
    listen: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Gateway {
    let store = format!("s3://{}/{prefix}", minio::TEST_BUCKET);
    let mut args = vec![
        "--listen",
        listen,
        "--store",
        &store,
        "--endpoint",
        endpoint,
    ];
    args.extend_from_slice(extra);
    serve_with_env(&args, env)
}

/// MinIO's endpoint, a fresh prefix and a store on it; None when S3 tests may skip.
pub async fn minio_prefix(test: &str) -> Option<(String, String, sluice_store::s3::S3Store)> {
    let endpoint = minio::endpoint(test)?;
    let prefix = minio::unique_prefix(test);
    let store = minio_store(&endpoint, &prefix).await;
    store.ensure_bucket().await.unwrap();
    Some((endpoint, prefix, store))
}

/// A client of its own for `prefix` of the test bucket at `endpoint` (one
/// whose pooled connections MinIO has not closed while a test waited: the
/// tests' own requests are not retried).
pub async fn minio_store(endpoint: &str, prefix: &str) -> sluice_store::s3::S3Store {
    let mut config = sluice_store::s3::S3Config::new(minio::TEST_BUCKET);
    config.endpoint = Some(endpoint.to_string());
    config.prefix = prefix.to_string();
    sluice_store::s3::S3Store::connect(config).await
}

/// The bytes of the object at `key`, whole. The tests' stores are not
/// wrapped in the engine's retries, so a read that fails transiently is
/// tried again (at most three times): an emulator closes a connection idle
/// for 5 s (Node's keep-alive timeout, Azurite) while the client may just be
/// taking it from its pool.
pub async fn object_bytes(store: &dyn ObjectStore, key: &str) -> Vec<u8> {
    let mut tries = 0;
    loop {
        tries += 1;
        let read = async {
            let chunks: Vec<bytes::Bytes> = store
                .get_object(key, None)
                .await?
                .body
                .try_collect()
                .await?;
            Ok::<_, sluice_store::StoreError>(chunks.concat())
        };
        match read.await {
            Ok(bytes) => return bytes,
            Err(e) if e.is_transient() && tries < 3 => {
                eprintln!("{key}: reading it failed ({e}); trying again");
            }
            Err(e) => panic!("{key}: {e}"),
        }
    }
}

/// Reads the client's JSON events until `stop` says so or the client ends.
pub fn client_events(
    child: &mut Child,
    mut stop: impl FnMut(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let stdout = child.stdout.as_mut().unwrap();
    let mut reader = BufReader::new(stdout);
    let mut seen = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            return seen;
        }
        let event: serde_json::Value =
            serde_json::from_str(line.trim()).unwrap_or_else(|_| panic!("not JSON: {line}"));
        let done = stop(&event);
        seen.push(event);
        if done {
            return seen;
        }
    }
}

/// Where scripts/test.sh installed the npm clients (tests/clients), or None
/// (after saying so) when they are not installed and S3 tests may skip.
pub fn npm_clients(test: &str) -> Option<String> {
    match std::env::var("SLUICE_TEST_CLIENTS") {
        Ok(dir) if !dir.is_empty() => Some(dir),
        _ => {
            if std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() == Ok("1") {
                panic!("{test}: the npm clients are not installed (SLUICE_TEST_CLIENTS)");
            }
            eprintln!("SKIPPED {test}: no npm clients (run scripts/test.sh)");
            None
        }
    }
}

/// Every record (a JSON line) of the zstd stream batches stored under `prefix`, with the number of objects; panics
/// on an object that does not decompress whole.
pub async fn stored_records(
    store: &sluice_store::s3::S3Store,
    prefix: &str,
) -> (Vec<serde_json::Value>, usize) {
    let batches = stored_batches(store, prefix).await;
    let objects = batches.len();
    (
        batches
            .into_iter()
            .flat_map(|(_, records)| records)
            .collect(),
        objects,
    )
}

/// The zstd stream batches stored under `prefix`, in key order: each key with
/// its records; panics on an object that does not decompress whole.
pub async fn stored_batches(
    store: &sluice_store::s3::S3Store,
    prefix: &str,
) -> Vec<(String, Vec<serde_json::Value>)> {
    stored_lines(store, prefix)
        .await
        .into_iter()
        .map(|(key, lines)| {
            let records = lines
                .iter()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect();
            (key, records)
        })
        .collect()
}

/// Every zstd object under `prefix` (in key order) and its lines, as stored.
pub async fn stored_lines(
    store: &sluice_store::s3::S3Store,
    prefix: &str,
) -> Vec<(String, Vec<String>)> {
    let mut batches = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list_objects(prefix, cursor.as_deref(), 1000)
            .await
            .unwrap();
        for object in &page.objects {
            let data = object_bytes(store, &object.key).await;
            let plain =
                sluice_streams::compress::decompress(sluice_streams::Compression::Zstd, &data)
                    .unwrap_or_else(|e| panic!("{} is not whole: {e}", object.key));
            let lines = String::from_utf8(plain)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect();
            batches.push((object.key.clone(), lines));
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    batches
}

/// The Python with pyarrow and DuckDB (scripts/test.sh installs them), or
/// None when the test may skip.
pub fn python_readers(test: &str) -> Option<(String, String)> {
    match (
        std::env::var("SLUICE_TEST_CLIENTS"),
        std::env::var("SLUICE_TEST_PYTHON"),
    ) {
        (Ok(dir), Ok(python)) if !dir.is_empty() => Some((dir, python)),
        _ if std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() == Ok("1") => {
            panic!("{test}: the Python readers (pyarrow, DuckDB, deltalake) are not installed (SLUICE_TEST_CLIENTS, SLUICE_TEST_PYTHON)")
        }
        _ => {
            eprintln!("SKIPPED {test}: no Python readers (run scripts/test.sh)");
            None
        }
    }
}

/// What the Python deltalake package and DuckDB read from the Delta table at
/// `table` (a directory, or s3://bucket/prefix on `endpoint`), by `key`
/// (tests/clients/delta_read.py).
pub fn read_delta(
    readers: &(String, String),
    endpoint: Option<&str>,
    table: &str,
    key: &str,
    rows: bool,
) -> serde_json::Value {
    let mut args = vec![table, key];
    if rows {
        args.push("--rows");
    }
    let read = python_json(readers, "delta_read.py", &args, endpoint);
    assert_eq!(
        read["deltalake"]["rows"], read["duckdb"]["rows"],
        "the readers disagree"
    );
    read
}

/// What the Python client `script` (under tests/clients) prints as JSON, run
/// with `args` (on MinIO at `endpoint`, if any); a failed run fails the test
/// with its error output.
pub fn python_json(
    readers: &(String, String),
    script: &str,
    args: &[&str],
    endpoint: Option<&str>,
) -> serde_json::Value {
    let (clients, python) = readers;
    let mut command = std::process::Command::new(python);
    command.arg(format!("{clients}/{script}")).args(args);
    if let Some(endpoint) = endpoint {
        command.env("AWS_ENDPOINT_URL", endpoint);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{script} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// `secret` in a file of a directory of its own (for `--jwt-secret-file`,
/// `--event-secret-file`): the directory, which must outlive its readers, and
/// the file's path.
pub fn secret_file(secret: &[u8]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("secret");
    std::fs::write(&path, secret).unwrap();
    let path = path.to_str().unwrap().to_string();
    (dir, path)
}

/// An HS256 token signed with `secret` carrying `claims` (an `exp` ten
/// minutes away added when they have none).
pub fn hs256_token(secret: &[u8], claims: serde_json::Value) -> String {
    let mut claims = claims;
    if claims.get("exp").is_none() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        claims["exp"] = serde_json::json!(now + 600);
    }
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret),
    )
    .unwrap()
}

/// (upload kind, count) of the outbox's events, by key.
pub async fn outbox_events(
    store: &dyn ObjectStore,
) -> std::collections::BTreeMap<String, (String, usize)> {
    let mut events = std::collections::BTreeMap::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_objects("_sluice/events/pending/", cursor.as_deref(), 1000)
            .await
            .unwrap();
        for entry in &page.objects {
            let entry: serde_json::Value =
                serde_json::from_slice(&object_bytes(store, &entry.key).await).unwrap();
            let data = &entry["event"]["data"];
            let slot = events
                .entry(data["key"].as_str().unwrap().to_string())
                .or_insert((data["upload_kind"].as_str().unwrap().to_string(), 0));
            slot.1 += 1;
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return events,
        }
    }
}

/// A helper process (haproxy, a proxy) in a process group of its own, killed
/// with every process it started when dropped (proxy.py's workers outlive a
/// kill of their parent alone).
pub struct KillOnDrop(Child);

impl KillOnDrop {
    pub fn spawn(command: &mut Command, what: &str) -> KillOnDrop {
        use std::os::unix::process::CommandExt;
        let child = command
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        KillOnDrop(child)
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status();
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The haproxy binary scripts/test.sh installs, or `None` (after saying so)
/// outside the script.
pub fn haproxy_binary(test: &str) -> Option<String> {
    let binary = std::env::var("SLUICE_TEST_HAPROXY").unwrap_or_else(|_| "haproxy".into());
    match Command::new(&binary).arg("-v").output() {
        Ok(output) if output.status.success() => Some(binary),
        _ if std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() == Ok("1") => {
            panic!("haproxy is not installed (scripts/test.sh installs it)")
        }
        _ => {
            eprintln!("SKIPPED {test}: no haproxy");
            None
        }
    }
}
