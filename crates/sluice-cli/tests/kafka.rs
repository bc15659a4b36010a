//! `sluice ingest --from kafka://…` against a real broker (scripts/kafka.sh
//! starts one; KAFKA_BOOTSTRAP and KAFKA_CP name it) and MinIO. Every record of
//! the topic is stored exactly once:
//! - across a run killed with SIGKILL once batches are stored, and a second run;
//! - past a batch an earlier run stored out of order (every batch still holds
//!   consecutive messages, keyed by its first offset);
//! - while the store lags far behind (the partitions are paused);
//! - across a rebalance that takes partitions away mid-run (their batches are
//!   stored and committed before the next owner starts).

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sluice_chaos::{ChaosConfig, ChaosProxy};
use sluice_store::s3::S3Store;
use sluice_store::{ObjectStore, PutRequest};

use common::{minio_prefix, stored_batches, stored_records};

/// What a Kafka test works on: the broker, and a MinIO prefix and a topic of
/// its own.
struct Fixture {
    bootstrap: String,
    cp: String,
    endpoint: String,
    prefix: String,
    store: S3Store,
    topic: String,
}

/// The fixture of `test`, or None when the test may skip.
async fn fixture(test: &str) -> Option<Fixture> {
    let (bootstrap, cp) = kafka()?;
    let (endpoint, prefix, store) = minio_prefix(test).await?;
    let topic = prefix.replace('/', "-");
    Some(Fixture {
        bootstrap,
        cp,
        endpoint,
        prefix,
        store,
        topic,
    })
}

/// The broker's address and the Kafka classpath, or None when Kafka tests may skip.
fn kafka() -> Option<(String, String)> {
    match (std::env::var("KAFKA_BOOTSTRAP"), std::env::var("KAFKA_CP")) {
        (Ok(bootstrap), Ok(cp)) => Some((bootstrap, cp)),
        _ if std::env::var_os("SLUICE_TEST_S3_REQUIRED").is_some() => {
            panic!("KAFKA_BOOTSTRAP and KAFKA_CP must be set (scripts/test.sh starts a broker)")
        }
        _ => {
            eprintln!("skipping: no Kafka broker (run scripts/test.sh)");
            None
        }
    }
}

fn kafka_tool(cp: &str, class: &str, args: &[&str], input: Option<&[u8]>) {
    let mut child = Command::new("java")
        .args(["-Xmx256m", "-cp", cp, class])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("java");
    if let Some(input) = input {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "{class} {args:?}");
}

/// A topic of `partitions` holding `records` lines `{"n":N,"pad":"…"}` (N from
/// 0, each line about `pad` bytes long).
fn topic_of(cp: &str, bootstrap: &str, topic: &str, partitions: u32, records: u64, pad: usize) {
    kafka_tool(
        cp,
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            bootstrap,
            "--create",
            "--topic",
            topic,
            "--partitions",
            &partitions.to_string(),
        ],
        None,
    );
    let input: String = (0..records).map(|n| record(n, pad) + "\n").collect();
    kafka_tool(
        cp,
        "kafka.tools.ConsoleProducer",
        &["--bootstrap-server", bootstrap, "--topic", topic],
        Some(input.as_bytes()),
    );
}

fn record(n: u64, pad: usize) -> String {
    format!("{{\"n\":{n},\"pad\":\"{}\"}}", "k".repeat(pad))
}

/// `sluice ingest` of `topic` into stream `events` under `prefix`, in the
/// consumer group named after the topic (tests share the broker).
fn ingest(bootstrap: &str, topic: &str, endpoint: &str, prefix: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args([
        "ingest",
        "--stream",
        "events",
        "--from",
        &format!("kafka://{bootstrap}/{topic}"),
        "--group",
        topic,
        "--store",
        &format!("s3://{}/{prefix}", sluice_testkit::minio::TEST_BUCKET),
        "--endpoint",
        endpoint,
        "--flush-records",
        "4000",
        "--flush-age",
        "200ms",
        "--idle-exit",
        "3s",
        "--json",
    ]);
    command
}

/// The summary of a run that succeeded.
fn summary_of(output: &Output) -> serde_json::Value {
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary = serde_json::from_slice(&output.stdout).unwrap();
    eprintln!("run: {summary}");
    summary
}

/// A spawned run, killed if the test fails before it ends.
struct Running(Option<std::process::Child>);

impl Running {
    fn spawn(command: &mut Command) -> Running {
        Running(Some(command.spawn().unwrap()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits (off the runtime) for a spawned run to end.
async fn finished(mut run: Running) -> Output {
    let child = run.0.take().expect("running");
    tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap()
}

/// Waits until at least `count` objects are stored under `prefix`.
async fn objects_stored(store: &S3Store, prefix: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stored = store
            .list_objects(prefix, None, 1000)
            .await
            .unwrap()
            .objects
            .len();
        if stored >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{count} objects not stored within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every record 0..records stored once under `events/`, in whole zstd objects.
async fn assert_exactly_once(store: &S3Store, records: u64) {
    let (stored, _) = stored_records(store, "events/").await;
    let mut seen: HashMap<u64, u32> = HashMap::new();
    for record in &stored {
        *seen.entry(record["n"].as_u64().unwrap()).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).take(5).collect();
    assert!(twice.is_empty(), "records stored twice: {twice:?}");
    assert_eq!(seen.len() as u64, records, "records lost");
}

#[tokio::test]
async fn kafka_records_are_stored_exactly_once_across_a_sigkill() {
    let Some(Fixture {
        bootstrap,
        cp,
        endpoint,
        prefix,
        store,
        topic,
    }) = fixture("kafka-once").await
    else {
        return;
    };
    const RECORDS: u64 = 100_000;
    topic_of(&cp, &bootstrap, &topic, 4, RECORDS, 100);
    // First run: killed once some batches are stored.
    let mut first = ingest(&bootstrap, &topic, &endpoint, &prefix)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    objects_stored(&store, "events/", 3).await;
    first.kill().unwrap();
    first.wait().unwrap();
    // Second run: picks up at the committed offsets, skips what is stored.
    summary_of(
        &ingest(&bootstrap, &topic, &endpoint, &prefix)
            .output()
            .unwrap(),
    );
    for object in store
        .list_objects("events/", None, 1000)
        .await
        .unwrap()
        .objects
    {
        assert!(object.key.ends_with(".ndjson.zst"), "{}", object.key);
    }
    assert_exactly_once(&store, RECORDS).await;
}

#[tokio::test]
async fn kafka_batches_hold_consecutive_messages_around_one_stored_out_of_order() {
    let Some(Fixture {
        bootstrap,
        cp,
        endpoint,
        prefix,
        store,
        topic,
    }) = fixture("kafka-gap").await
    else {
        return;
    };
    // One partition: a record's offset is its n.
    topic_of(&cp, &bootstrap, &topic, 1, 1000, 20);
    // An earlier run stored the batch of offsets 300..400 and died before the
    // one before it was stored (batches of a partition go up concurrently).
    let lines: String = (300..400).map(|n| record(n, 20) + "\n").collect();
    let frame = sluice_streams::compress::compress_frame(
        sluice_streams::Compression::Zstd,
        3,
        lines.as_bytes(),
    )
    .unwrap();
    store
        .put_object(PutRequest::new(
            format!("events/0/{:020}.ndjson.zst", 300),
            frame,
        ))
        .await
        .unwrap();
    let summary = summary_of(
        &ingest(&bootstrap, &topic, &endpoint, &prefix)
            .output()
            .unwrap(),
    );
    assert_eq!(summary["records"], 900);
    assert_eq!(summary["replayed_skipped"], 100);
    assert_exactly_once(&store, 1000).await;
    // Each batch: the messages from its key's offset on, with no gap.
    for (key, records) in stored_batches(&store, "events/").await {
        let first: u64 = key
            .trim_end_matches(".ndjson.zst")
            .rsplit('/')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let got: Vec<u64> = records.iter().map(|r| r["n"].as_u64().unwrap()).collect();
        let want: Vec<u64> = (first..first + got.len() as u64).collect();
        let gap = got.iter().zip(&want).position(|(g, w)| g != w);
        assert!(
            gap.is_none(),
            "{key}: record {gap:?} breaks the run: {:?}",
            gap.map(|i| &got[i.saturating_sub(1)..=i])
        );
    }
}

#[tokio::test]
async fn kafka_partitions_pause_while_the_store_lags_and_nothing_is_lost() {
    let Some(Fixture {
        bootstrap,
        cp,
        endpoint,
        prefix,
        store,
        topic,
    }) = fixture("kafka-pause").await
    else {
        return;
    };
    const RECORDS: u64 = 40_000;
    topic_of(&cp, &bootstrap, &topic, 2, RECORDS, 1000);
    // Every store request held 2 s: 40 MB of records cannot wait in 48 MiB.
    let lagging = ChaosConfig {
        latency: Duration::from_secs(2),
        write_rate_per_prefix: None,
        ..ChaosConfig::default()
    };
    let proxy = ChaosProxy::start(SocketAddr::from(([127, 0, 0, 1], 0)), &endpoint, lagging)
        .await
        .unwrap();
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let run = Running::spawn(
        ingest(&bootstrap, &topic, &proxy.url(), &prefix)
            .args([
                "--memory-limit",
                "48MiB",
                "--metrics-listen",
                &metrics.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    // Meanwhile the consumer lag shows what is read and not yet stored.
    let text = reqwest::get(format!("http://{metrics}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lag: u64 = text
        .lines()
        .find_map(|line| line.strip_prefix("sluice_stream_consumer_lag{stream=\"events\"} "))
        .unwrap_or_else(|| panic!("no consumer lag in {text}"))
        .parse()
        .unwrap();
    assert!(lag > 0, "{text}");
    proxy
        .set_config(ChaosConfig {
            write_rate_per_prefix: None,
            ..ChaosConfig::default()
        })
        .unwrap();
    let output = finished(run).await;
    let summary = summary_of(&output);
    assert!(
        summary["pauses"].as_u64().unwrap() >= 1,
        "the partitions were never paused: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(summary["records"], RECORDS);
    assert_exactly_once(&store, RECORDS).await;
}

#[tokio::test]
async fn kafka_partitions_revoked_mid_run_are_stored_once() {
    let Some(Fixture {
        bootstrap,
        cp,
        endpoint,
        prefix,
        store,
        topic,
    }) = fixture("kafka-rebalance").await
    else {
        return;
    };
    const RECORDS: u64 = 40_000;
    topic_of(&cp, &bootstrap, &topic, 4, RECORDS, 1000);
    // The store holds every request 2 s while the second member joins: the
    // first, in 32 MiB, has read at most 16 MiB of the topic's 40 MB by then,
    // and must store and commit that before its partitions change hands.
    let lagging = |latency| ChaosConfig {
        latency,
        write_rate_per_prefix: None,
        ..ChaosConfig::default()
    };
    let proxy = ChaosProxy::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        &endpoint,
        lagging(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let member = || {
        let mut command = ingest(&bootstrap, &topic, &proxy.url(), &prefix);
        command.args(["--memory-limit", "32MiB"]);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        command
    };
    let first = Running::spawn(&mut member());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = Running::spawn(&mut member());
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.set_config(lagging(Duration::ZERO)).unwrap();
    let (first, second) = (finished(first).await, finished(second).await);
    let (first, second) = (summary_of(&first), summary_of(&second));
    assert!(
        first["revoked"].as_u64().unwrap() >= 1,
        "the second member's joining revoked nothing: {first}"
    );
    assert!(
        second["records"].as_u64().unwrap() > 0,
        "the second member took nothing over: {second}"
    );
    let taken = |s: &serde_json::Value| {
        s["records"].as_u64().unwrap() + s["replayed_skipped"].as_u64().unwrap()
    };
    assert!(
        taken(&first) + taken(&second) >= RECORDS,
        "{first} {second}"
    );
    assert_exactly_once(&store, RECORDS).await;
}

#[test]
fn kafka_sources_are_checked_before_connecting() {
    // (arguments, stderr holds)
    let cases = [
        (
            vec!["--from", "kafka://127.0.0.1:1"],
            "kafka://BROKERS/TOPIC",
        ),
        (
            vec!["--from", "kafka://127.0.0.1:1/t", "--group", ""],
            "group",
        ),
        (
            vec![
                "--from",
                "kafka://127.0.0.1:1/t",
                "--key-template",
                "{stream}/{uuid}",
            ],
            "{partition}",
        ),
    ];
    for (args, says) in cases {
        let dir = tempfile::tempdir().unwrap();
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["ingest", "--stream", "s", "--store"])
            .arg(dir.path())
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
