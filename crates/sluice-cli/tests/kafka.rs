//! `sluice ingest --from kafka://…` against a real broker (scripts/kafka.sh
//! starts one; KAFKA_BOOTSTRAP and KAFKA_CP name it) and MinIO. Every record of
//! the topic is stored exactly once:
//! - across a run killed with SIGKILL once batches are stored, and a second run;
//! - past a batch an earlier run stored out of order (every batch still holds
//!   consecutive messages, keyed by its first offset);
//! - while the store lags far behind (the partitions are paused);
//! - across a rebalance that takes partitions away mid-run (their batches are
//!   stored and committed before the next owner starts);
//! - with values spread over lines (kept byte for byte, keys in their order),
//!   tombstones and empty values (skipped, dead-lettered or stopping the run,
//!   as the stream says), and invalid messages in a dead letter, replayed;
//! - a run stopped by an invalid message commits what it stored, and the
//!   multipart uploads a SIGKILLed run left are aborted by the next;
//! - and a topic made after the run started is waited for and read, while
//!   one that never appears ends the run with an error naming it.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sluice_chaos::{ChaosConfig, ChaosProxy};
use sluice_store::s3::S3Store;
use sluice_store::{ObjectStore, PutRequest};

use common::kafka::{create_topic, kafka, kafka_tool, record};
use common::{minio_prefix, minio_store, stored_batches, stored_lines, stored_records};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

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

/// A topic of `partitions` holding `records` lines `{"n":N,"pad":"…"}` (N from
/// 0, each line about `pad` bytes long).
fn topic_of(cp: &str, bootstrap: &str, topic: &str, partitions: u32, records: u64, pad: usize) {
    create_topic(cp, bootstrap, topic, partitions);
    let input: String = (0..records).map(|n| record(n, pad) + "\n").collect();
    kafka_tool(
        cp,
        "kafka.tools.ConsoleProducer",
        &["--bootstrap-server", bootstrap, "--topic", topic],
        Some(input.as_bytes()),
    );
}

/// `sluice ingest` of `topic` into stream `events` under `prefix`, in the
/// consumer group named after the topic (tests share the broker).
fn ingest(bootstrap: &str, topic: &str, endpoint: &str, prefix: &str) -> Command {
    ingest_in(bootstrap, topic, topic, endpoint, prefix)
}

/// [`ingest`] in consumer group `group`.
fn ingest_in(bootstrap: &str, topic: &str, group: &str, endpoint: &str, prefix: &str) -> Command {
    let mut command = ingest_with_defaults(bootstrap, topic, group, endpoint, prefix);
    command.args(["--flush-records", "4000", "--flush-age", "200ms"]);
    command
}

/// [`ingest_in`] with the default batch sizes.
fn ingest_with_defaults(
    bootstrap: &str,
    topic: &str,
    group: &str,
    endpoint: &str,
    prefix: &str,
) -> Command {
    ingest_with_idle(bootstrap, topic, group, endpoint, prefix, "3s")
}

/// [`ingest_with_defaults`], ending once idle for `idle`.
fn ingest_with_idle(
    bootstrap: &str,
    topic: &str,
    group: &str,
    endpoint: &str,
    prefix: &str,
    idle: &str,
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
    command.args([
        "ingest",
        "--stream",
        "events",
        "--from",
        &format!("kafka://{bootstrap}/{topic}"),
        "--group",
        group,
        "--store",
        &format!("s3://{}/{prefix}", sluice_testkit::minio::TEST_BUCKET),
        "--endpoint",
        endpoint,
        "--idle-exit",
        idle,
        "--json",
    ]);
    command
}

/// Stores `lines` as the zstd batch of partition 0 an earlier run wrote from
/// `first_offset` on (and died before committing).
async fn store_batch(store: &S3Store, first_offset: u64, lines: &[String]) {
    let text: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let frame = sluice_streams::compress::compress_frame(
        sluice_streams::Compression::Zstd,
        3,
        text.as_bytes(),
    )
    .unwrap();
    store
        .put_object(PutRequest::new(
            format!("events/0/{first_offset:020}.ndjson.zst"),
            frame,
        ))
        .await
        .unwrap();
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

    /// A run whose stderr goes to `log`, to be shown if it ends too soon.
    fn spawn_logged(command: &mut Command, log: &tempfile::NamedTempFile) -> Running {
        Running::spawn(command.stderr(log.reopen().unwrap()))
    }

    /// How the run ended, if it has.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.0.as_mut().unwrap().try_wait().unwrap()
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
    let lines: Vec<String> = (300..400).map(|n| record(n, 20)).collect();
    store_batch(&store, 300, &lines).await;
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
async fn kafka_a_replay_goes_on_counting_a_stored_batch_across_offset_gaps() {
    let Some(Fixture {
        bootstrap,
        endpoint,
        prefix,
        store,
        topic,
        ..
    }) = fixture("kafka-gaps").await
    else {
        return;
    };
    // Three transactions of 100 records: each commit marker takes an offset
    // that consumers never see (0..=99, 101..=200, 202..=301).
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .create()
        .unwrap();
    admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("transactional.id", &topic)
        .create()
        .unwrap();
    let records: Vec<String> = (0..300).map(|n| record(n, 20)).collect();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    for chunk in records.chunks(100) {
        producer.begin_transaction().unwrap();
        for value in chunk {
            producer
                .send(
                    BaseRecord::<(), str>::to(&topic)
                        .partition(0)
                        .payload(value),
                )
                .map_err(|(e, _)| e)
                .unwrap();
        }
        producer
            .commit_transaction(Duration::from_secs(30))
            .unwrap();
    }
    // An earlier run stored records 0..150 (offsets 0..=99 and 101..=150)
    // and died before committing: its batch spans a gap, and nothing of this
    // run is pending when the replay meets it.
    store_batch(&store, 0, &records[..150]).await;
    let summary = summary_of(
        &ingest(&bootstrap, &topic, &endpoint, &prefix)
            .output()
            .unwrap(),
    );
    assert_eq!(summary["replayed_skipped"], 150, "{summary}");
    assert_eq!(summary["records"], 150, "{summary}");
    assert_exactly_once(&store, 300).await;
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

/// A topic of one partition holding `values` in order (None: a tombstone),
/// produced as they are: over several lines, empty, or not JSON.
async fn topic_with(bootstrap: &str, topic: &str, values: &[Option<&[u8]>]) {
    let config = {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", bootstrap);
        config
    };
    let admin: AdminClient<DefaultClientContext> = config.create().unwrap();
    let made = admin
        .create_topics(
            &[NewTopic::new(topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(made.iter().all(Result::is_ok), "{made:?}");
    let producer: BaseProducer = config.create().unwrap();
    for value in values {
        let mut record = BaseRecord::<(), [u8]>::to(topic).partition(0);
        if let Some(value) = value {
            record = record.payload(*value);
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
        producer.poll(Duration::ZERO);
    }
    // A fixture, not what is tested: on a loaded machine a topic just made
    // may take its broker a while to accept (a suite run once timed out at 30 s).
    producer.flush(Duration::from_secs(120)).unwrap();
}

/// The offset group `group` committed for partition 0 of `topic` (None: none).
fn committed(bootstrap: &str, group: &str, topic: &str) -> Option<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut asked = TopicPartitionList::new();
    asked.add_partition(topic, 0);
    let answer = consumer
        .committed_offsets(asked, Duration::from_secs(10))
        .unwrap();
    match answer.find_partition(topic, 0).unwrap().offset() {
        Offset::Offset(offset) => Some(offset),
        _ => None,
    }
}

/// Every stored line under `prefix`, in key order.
async fn lines_under(store: &S3Store, prefix: &str) -> Vec<String> {
    stored_lines(store, prefix)
        .await
        .into_iter()
        .flat_map(|(_, lines)| lines)
        .collect()
}

#[tokio::test]
async fn kafka_values_keep_their_bytes_and_empty_messages_are_skipped_by_default() {
    let Some(Fixture {
        bootstrap,
        endpoint,
        prefix,
        store,
        topic,
        ..
    }) = fixture("kafka-values").await
    else {
        return;
    };
    let values: [Option<&[u8]>; 8] = [
        Some(b"{\"n\":0}"),
        Some(b"{\n  \"n\": 1,\n  \"b\": {\"z\": 1, \"y\": [2.50, \"\\u00e9\"]},\r\n  \"a\": 2\n}"),
        None,
        Some(b"{\"n\":3}"),
        Some(b""),
        Some(b"  \n"),
        Some(b"{\"n\":6}"),
        None,
    ];
    topic_with(&bootstrap, &topic, &values).await;
    let summary = summary_of(
        &ingest(&bootstrap, &topic, &endpoint, &prefix)
            .output()
            .unwrap(),
    );
    assert_eq!(summary["records"], 4);
    assert_eq!(summary["empty_skipped"], 4, "{summary}");
    assert_eq!(
        lines_under(&store, "events/").await,
        [
            "{\"n\":0}",
            "{\"n\":1,\"b\":{\"z\":1,\"y\":[2.50,\"\\u00e9\"]},\"a\":2}",
            "{\"n\":3}",
            "{\"n\":6}",
        ]
    );
    // The trailing tombstone is done with too: nothing is left to read.
    assert_eq!(committed(&bootstrap, &topic, &topic), Some(8));
}

#[tokio::test]
async fn kafka_empty_and_invalid_messages_go_to_the_dead_letter_once_across_a_replay() {
    let Some(Fixture {
        bootstrap,
        endpoint,
        prefix,
        store,
        topic,
        ..
    }) = fixture("kafka-dead").await
    else {
        return;
    };
    let values: [Option<&[u8]>; 5] = [
        Some(b"{\"n\":0}"),
        None,
        Some(b"{\"n\": nope"),
        Some(b"{\"n\":3}"),
        Some(b"{\"n\":4}"),
    ];
    topic_with(&bootstrap, &topic, &values).await;
    let run = |group: &str| {
        let mut command = ingest_in(&bootstrap, &topic, group, &endpoint, &prefix);
        command.args([
            "--empty-messages",
            "dead-letter",
            "--dead-letter-template",
            "{stream}/dead/{partition}/{offset}",
        ]);
        summary_of(&command.output().unwrap())
    };
    let first = run(&topic);
    assert_eq!(first["records"], 3, "{first}");
    assert_eq!(first["dead_lettered"], 2, "{first}");
    let dead = |store: &S3Store| {
        let store = store.clone();
        async move {
            let listed = store.list_objects("events/dead/", None, 100).await.unwrap();
            listed
                .objects
                .into_iter()
                .map(|o| o.key)
                .collect::<Vec<_>>()
        }
    };
    let dead_keys = vec![
        format!("events/dead/0/{:020}.ndjson.zst", 1),
        format!("events/dead/0/{:020}.ndjson.zst", 2),
    ];
    assert_eq!(dead(&store).await, dead_keys);
    assert_eq!(
        lines_under(&store, "events/dead/0/").await,
        ["", "{\"n\": nope"]
    );
    // Another group starts from offset 0, as a run killed before its first
    // commit would: the stored batch is skipped, the dead letters are found
    // stored, and nothing is written twice.
    let replay = run(&format!("{topic}-again"));
    assert_eq!(replay["records"], 0, "{replay}");
    assert_eq!(replay["replayed_skipped"], 3, "{replay}");
    assert_eq!(dead(&store).await, dead_keys);
    assert_eq!(
        lines_under(&store, "events/0/").await,
        ["{\"n\":0}", "{\"n\":3}", "{\"n\":4}"]
    );
    assert_eq!(
        committed(&bootstrap, &format!("{topic}-again"), &topic),
        Some(5)
    );
}

/// (what stops the run at offset 5000, extra arguments, the error says)
type StopCase<'a> = (Option<&'a [u8]>, &'a [&'a str], &'a str);

#[tokio::test]
async fn kafka_a_run_stopped_by_a_message_commits_what_came_before_it() {
    let cases: [StopCase; 2] = [
        (Some(b"{nope"), &[], "not JSON"),
        (None, &["--empty-messages", "stop"], "empty"),
    ];
    for (i, (stopper, args, says)) in cases.into_iter().enumerate() {
        let Some(Fixture {
            bootstrap,
            endpoint,
            prefix,
            store,
            topic,
            ..
        }) = fixture(&format!("kafka-stop-{i}")).await
        else {
            return;
        };
        let valid: Vec<String> = (0..5000).map(|n| record(n, 20)).collect();
        let mut values: Vec<Option<&[u8]>> = valid.iter().map(|v| Some(v.as_bytes())).collect();
        values.push(stopper);
        values.push(Some(b"{\"n\":5001}"));
        topic_with(&bootstrap, &topic, &values).await;
        let output = ingest(&bootstrap, &topic, &endpoint, &prefix)
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{says}: {stderr}");
        assert!(
            stderr.contains("offset 5000") && stderr.contains(says),
            "{stderr}"
        );
        // Everything before the message is stored, and committed.
        assert_exactly_once(&store, 5000).await;
        assert_eq!(committed(&bootstrap, &topic, &topic), Some(5000), "{says}");
    }
}

/// A topic made after the run started (its creation still on its way to the
/// broker, or the producer makes it later) is waited for and read: a run is
/// idle only on a topic that exists, so it outlasts its idle exit while it
/// waits.
#[tokio::test]
async fn kafka_a_topic_made_after_the_run_started_is_read() {
    let Some(Fixture {
        bootstrap,
        endpoint,
        prefix,
        store,
        topic,
        ..
    }) = fixture("kafka-late-topic").await
    else {
        return;
    };
    // The idle exit is long enough for the producer (which makes the topic
    // empty, then fills it) on a loaded machine.
    let mut run = Running::spawn(
        ingest_with_idle(&bootstrap, &topic, &topic, &endpoint, &prefix, "15s")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    tokio::time::sleep(Duration::from_secs(17)).await;
    let waiting = run.exited();
    assert!(
        waiting.is_none(),
        "the run ended before the topic existed: {waiting:?}"
    );
    let valid: Vec<String> = (0..1000).map(|n| record(n, 20)).collect();
    let values: Vec<Option<&[u8]>> = valid.iter().map(|v| Some(v.as_bytes())).collect();
    topic_with(&bootstrap, &topic, &values).await;
    let output = finished(run).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("waiting for it"), "{stderr}");
    let summary = summary_of(&output);
    assert_eq!(summary["records"], 1000, "{summary}");
    assert_exactly_once(&store, 1000).await;
    assert_eq!(committed(&bootstrap, &topic, &topic), Some(1000));
}

/// A topic that does not exist ends the run with an error naming it, once
/// it has been waited for (not as an idle run that stored nothing).
#[tokio::test]
async fn kafka_a_topic_that_never_appears_is_an_error_naming_it() {
    let Some(Fixture {
        bootstrap,
        endpoint,
        prefix,
        topic,
        ..
    }) = fixture("kafka-no-topic").await
    else {
        return;
    };
    let started = Instant::now();
    let output = ingest(&bootstrap, &topic, &endpoint, &prefix)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("topic {topic} does not exist")),
        "{stderr}"
    );
    assert!(started.elapsed() >= Duration::from_secs(30), "{stderr}");
    // MinIO closes connections idle for 30 s: a fresh client looks.
    let store = minio_store(&endpoint, &prefix).await;
    assert!(lines_under(&store, "").await.is_empty());
}

#[tokio::test]
async fn kafka_a_sigkilled_run_s_multipart_uploads_are_aborted_by_the_next() {
    let Some(Fixture {
        bootstrap,
        cp,
        endpoint,
        prefix,
        store,
        topic,
    }) = fixture("kafka-orphans").await
    else {
        return;
    };
    // Records that do not compress away, in batches of many megabytes.
    const RECORDS: u64 = 40_000;
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let input: String = (0..RECORDS)
        .map(|n| {
            let pad: String = (0..32)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    format!("{state:016x}")
                })
                .collect();
            format!("{{\"n\":{n},\"pad\":\"{pad}\"}}\n")
        })
        .collect();
    create_topic(&cp, &bootstrap, &topic, 1);
    kafka_tool(
        &cp,
        "kafka.tools.ConsoleProducer",
        &["--bootstrap-server", &bootstrap, "--topic", &topic],
        Some(input.as_bytes()),
    );
    // One batch of about 20 MB, in parts of 5 MiB from the first.
    let big_batches = [
        "--flush-age",
        "60s",
        "--threshold",
        "5MiB",
        "--part-size",
        "5MiB",
    ];
    let mut first = ingest_with_defaults(&bootstrap, &topic, &topic, &endpoint, &prefix)
        .args(big_batches)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while store
        .list_multipart_uploads("events/")
        .await
        .unwrap()
        .is_empty()
    {
        assert!(
            Instant::now() < deadline,
            "no multipart upload began within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(!store
        .list_multipart_uploads("events/")
        .await
        .unwrap()
        .is_empty());
    summary_of(
        &ingest(&bootstrap, &topic, &endpoint, &prefix)
            .output()
            .unwrap(),
    );
    assert_eq!(
        store.list_multipart_uploads("events/").await.unwrap().len(),
        0,
        "the killed run's uploads are still there"
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
        (
            vec!["--from", "kafka://127.0.0.1:1/t", "--format", "parquet"],
            "parquet",
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

/// A table format a Kafka stream commits to, as its tests see it.
#[derive(Clone, Copy, PartialEq)]
enum Format {
    Delta,
    Iceberg,
}

impl Format {
    fn name(self) -> &'static str {
        match self {
            Format::Delta => "delta",
            Format::Iceberg => "iceberg",
        }
    }

    /// Where its commits are: the log's entries, or the metadata versions.
    fn commits_under(self) -> (&'static str, &'static str) {
        match self {
            Format::Delta => ("events/_delta_log/", ".json"),
            Format::Iceberg => ("events/metadata/v", ".metadata.json"),
        }
    }
}

/// `sluice ingest … --table FORMAT` into the table `events` through
/// `endpoint`, in consumer group `group`, ending once idle for `idle`.
fn ingest_table(
    format: Format,
    fixture: &Fixture,
    endpoint: &str,
    group: &str,
    idle: &str,
) -> Command {
    let mut command = ingest_with_idle(
        &fixture.bootstrap,
        &fixture.topic,
        group,
        endpoint,
        &fixture.prefix,
        idle,
    );
    command.args([
        "--table",
        format.name(),
        "--flush-records",
        "2000",
        "--flush-age",
        "300ms",
    ]);
    command
}

/// A console producer sending lines `{"n":N,"pad":"…"}` (100 bytes of pad)
/// to a topic in chunks, `every` apart, numbered from 0, until it is stopped:
/// records keep arriving however long the runs reading them take.
struct PacedProducer {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl Drop for PacedProducer {
    /// A test that failed stops it too (after the chunk under way).
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl PacedProducer {
    fn start(cp: &str, bootstrap: &str, topic: &str, chunk: u64, every: Duration) -> Self {
        let (cp, bootstrap, topic) = (cp.to_string(), bootstrap.to_string(), topic.to_string());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut produced = 0;
            while !stopped.load(std::sync::atomic::Ordering::SeqCst) {
                let began = Instant::now();
                let input: String = (produced..produced + chunk)
                    .map(|n| record(n, 100) + "\n")
                    .collect();
                kafka_tool(
                    &cp,
                    "kafka.tools.ConsoleProducer",
                    &["--bootstrap-server", &bootstrap, "--topic", &topic],
                    Some(input.as_bytes()),
                );
                produced += chunk;
                std::thread::sleep(every.saturating_sub(began.elapsed()));
            }
            produced
        });
        PacedProducer {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops after the chunk under way; the records produced in all.
    async fn stop(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let thread = self.thread.take().expect("not stopped yet");
        tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap()
    }
}

/// The table's commits so far.
async fn table_commits(format: Format, store: &S3Store) -> usize {
    let (prefix, ending) = format.commits_under();
    let mut count = 0;
    let mut cursor: Option<String> = None;
    loop {
        let page = store
            .list_objects(prefix, cursor.as_deref(), 1000)
            .await
            .unwrap();
        count += page
            .objects
            .iter()
            .filter(|o| o.key.ends_with(ending))
            .count();
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return count,
        }
    }
}

/// Waits until the table has more than `commits` commits, made by `run`
/// (`what` it is, its stderr in `log`): a run that ends first fails the test
/// at once with its log.
async fn table_grows_past(
    format: Format,
    store: &S3Store,
    commits: usize,
    run: &mut Running,
    what: &str,
    log: &tempfile::NamedTempFile,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while table_commits(format, store).await <= commits {
        if let Some(status) = run.exited() {
            panic!(
                "{what} ended ({status}) before a table commit past {commits}:\n{}",
                std::fs::read_to_string(log.path()).unwrap()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no table commit past {commits} within 60 s:\n{}",
            std::fs::read_to_string(log.path()).unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn kafka_into_delta_is_exactly_once_across_deaths_between_the_commits_sigkills_and_a_rebalance(
) {
    exactly_once_across_deaths(Format::Delta, 3).await;
}

/// The same for an Iceberg table, with nine SIGKILLs from outside (ten
/// with the second member's).
#[tokio::test]
async fn kafka_into_iceberg_is_exactly_once_across_deaths_between_the_commits_sigkills_and_a_rebalance(
) {
    exactly_once_across_deaths(Format::Iceberg, 9).await;
}

/// Kafka into a `format` table, exactly once: twice a run dies right after
/// a table commit (before the group's) and once right after its first
/// store write (before its commit), `kills` runs are SIGKILLed from
/// outside once they committed, and a second member joins (a rebalance) and
/// is killed; then both readers of the format count every record once.
async fn exactly_once_across_deaths(format: Format, kills: usize) {
    let test = format!("kafka-{}", format.name());
    let Some(readers) = common::python_readers(&test) else {
        return;
    };
    let Some(fixture) = fixture(&test).await else {
        return;
    };
    create_topic(&fixture.cp, &fixture.bootstrap, &fixture.topic, 8);
    // Records arrive while the runs below come and go, in chunks 3 s apart,
    // until the last run is killed: each run dies part-way through the topic,
    // and none finds it drained however slow the machine makes the runs.
    // SLUICE_KAFKA_TABLE_CHUNK raises the chunk for a longer proof by hand.
    let chunk: u64 = std::env::var("SLUICE_KAFKA_TABLE_CHUNK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let producer = PacedProducer::start(
        &fixture.cp,
        &fixture.bootstrap,
        &fixture.topic,
        chunk,
        Duration::from_secs(3),
    );
    let group = fixture.topic.clone();
    let endpoint = fixture.endpoint.clone();
    // Twice, a run ends right after a table commit and before the group's:
    // the group's offsets lag the table's, and the next run must go by the table.
    // Such a run waits for records as long as it takes (the producer, a JVM,
    // may be slow to start on a loaded machine): it is meant to die at its
    // commit, not to end idle before it has any work.
    // Then once right after its first store write, before any commit of
    // its own: what it stored is in no table version.
    let faults = [
        ("SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS", 1),
        ("SLUICE_FAULT_EXIT_AFTER_TABLE_COMMITS", 2),
        ("SLUICE_FAULT_EXIT_AFTER_STORE_WRITES", 1),
    ];
    for (fault, at) in faults {
        let died = ingest_table(format, &fixture, &endpoint, &group, "120s")
            .env(fault, at.to_string())
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(
            died.status.code(),
            Some(137),
            "{}",
            String::from_utf8_lossy(&died.stderr)
        );
    }
    // SIGKILLs from outside, each once the run has committed once. Records
    // keep coming, so these runs never idle out: they are only killed.
    for kill in 1..=kills {
        let before = table_commits(format, &fixture.store).await;
        let log = tempfile::NamedTempFile::new().unwrap();
        let mut run = Running::spawn_logged(
            ingest_table(format, &fixture, &endpoint, &group, "60s").stdout(Stdio::null()),
            &log,
        );
        let what = format!("run {kill} of {kills} to be killed");
        table_grows_past(format, &fixture.store, before, &mut run, &what, &log).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(run);
    }
    // A second member joins, takes half the partitions, and is killed: they
    // come back to the first once its session lapses. The first stays up
    // until the producer has stopped and the topic is drained (then idle for
    // 20 s).
    let before = table_commits(format, &fixture.store).await;
    let first_log = tempfile::NamedTempFile::new().unwrap();
    let mut first = Running::spawn_logged(
        ingest_table(format, &fixture, &endpoint, &group, "20s").stdout(Stdio::piped()),
        &first_log,
    );
    table_grows_past(
        format,
        &fixture.store,
        before,
        &mut first,
        "the first member",
        &first_log,
    )
    .await;
    let before = table_commits(format, &fixture.store).await;
    let second_log = tempfile::NamedTempFile::new().unwrap();
    let mut second = Running::spawn_logged(
        ingest_table(format, &fixture, &endpoint, &group, "60s").stdout(Stdio::null()),
        &second_log,
    );
    tokio::time::sleep(Duration::from_secs(8)).await;
    let what = "the second member (or the first)";
    table_grows_past(
        format,
        &fixture.store,
        before,
        &mut second,
        what,
        &second_log,
    )
    .await;
    drop(second);
    let records = producer.stop().await;
    eprintln!("{records} records produced");
    let mut first = finished(first).await;
    first.stderr = std::fs::read(first_log.path()).unwrap();
    let first = summary_of(&first);
    assert!(
        first["revoked"].as_u64().unwrap() >= 1,
        "the second member's joining revoked nothing: {first}"
    );
    let root = format!(
        "s3://{}/{}/events",
        sluice_testkit::minio::TEST_BUCKET,
        fixture.prefix.trim_end_matches('/')
    );
    let (read, readers) = match format {
        Format::Delta => (
            common::read_delta(&readers, Some(&fixture.endpoint), &root, "n", false),
            ["deltalake", "duckdb"],
        ),
        Format::Iceberg => {
            let version = table_commits(format, &fixture.store).await;
            let metadata = format!("{root}/metadata/v{version}.metadata.json");
            let read = common::tables::read_iceberg_at(
                &readers,
                Some(&fixture.endpoint),
                &metadata,
                "n",
                true,
            );
            (read, ["pyiceberg", "duckdb"])
        }
    };
    for reader in readers {
        let got = &read[reader];
        assert_eq!(got["rows"], records, "{reader}: {got}");
        assert_eq!(got["distinct"], records, "{reader}: records twice: {got}");
        assert_eq!(got["min"], 0, "{reader}: {got}");
        assert_eq!(got["max"], records - 1, "{reader}: {got}");
        if format == Format::Delta {
            // Every pad equal to what was produced.
            assert_eq!(got["distinct_values"]["pad"], 1, "{reader}: {got}");
        }
    }
}
