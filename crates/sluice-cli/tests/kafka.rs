//! `sluice ingest --from kafka://…` against a real broker (scripts/kafka.sh
//! starts one; KAFKA_BOOTSTRAP and KAFKA_CP name it) and MinIO: a run killed
//! with SIGKILL once batches are stored, then a second run, store every record
//! of the topic exactly once.

mod common;

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_store::ObjectStore;

use common::{minio_prefix, stored_records};

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

fn ingest(bootstrap: &str, topic: &str, endpoint: &str, prefix: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args([
        "ingest",
        "--stream",
        "events",
        "--from",
        &format!("kafka://{bootstrap}/{topic}"),
        "--group",
        "sluice-test",
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

#[tokio::test]
async fn kafka_records_are_stored_exactly_once_across_a_sigkill() {
    let Some((bootstrap, cp)) = kafka() else {
        return;
    };
    let Some((endpoint, prefix, store)) = minio_prefix("kafka-once").await else {
        return;
    };
    let topic = prefix.replace('/', "-");
    kafka_tool(
        &cp,
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--create",
            "--topic",
            &topic,
            "--partitions",
            "4",
        ],
        None,
    );
    const RECORDS: u64 = 100_000;
    let input: String = (0..RECORDS)
        .map(|n| format!("{{\"n\":{n},\"pad\":\"{}\"}}\n", "k".repeat(100)))
        .collect();
    kafka_tool(
        &cp,
        "kafka.tools.ConsoleProducer",
        &["--bootstrap-server", &bootstrap, "--topic", &topic],
        Some(input.as_bytes()),
    );
    // First run: killed once some batches are stored.
    let mut first = ingest(&bootstrap, &topic, &endpoint, &prefix)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let stored = store
            .list_objects("events/", None, 1000)
            .await
            .unwrap()
            .objects
            .len();
        if stored >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "no batch stored within 60 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    // Second run: picks up at the committed offsets, skips what is stored.
    let second = ingest(&bootstrap, &topic, &endpoint, &prefix)
        .output()
        .unwrap();
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    eprintln!("second run: {summary}");
    // Every record exactly once, each object whole.
    let (records, _) = stored_records(&store, "events/").await;
    for object in store
        .list_objects("events/", None, 1000)
        .await
        .unwrap()
        .objects
    {
        assert!(object.key.ends_with(".ndjson.zst"), "{}", object.key);
    }
    let mut seen: HashMap<u64, u32> = HashMap::new();
    for record in &records {
        *seen.entry(record["n"].as_u64().unwrap()).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, &c)| c > 1).take(5).collect();
    assert!(twice.is_empty(), "records stored twice: {twice:?}");
    assert_eq!(seen.len() as u64, RECORDS, "records lost");
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
