//! Record streams end to end on an in-memory store (and a faulty one): flush
//! rules, group commit, partitions, dead letters, refused bodies, encodings,
//! multipart batches under the memory budget, and failed stores.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_store::ObjectStore;
use sluice_streams::ingest::{acknowledge, submit_body, BodyEncoding, Submitted};
use sluice_streams::records::BodyFormat;
use sluice_streams::{
    records_memory, Compression, CpuPool, RecordStream, StreamConfig, StreamError,
};
use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};
use sluice_upload::{Engine, EngineConfig, RetryPolicy, MIB};

fn engine(store: Arc<dyn ObjectStore>, memory: u64) -> Engine {
    Engine::new(
        store,
        EngineConfig {
            threshold: 6 * MIB,
            part_size: 5 * MIB,
            concurrency: 4,
            memory_limit: memory,
            retry: RetryPolicy {
                max_attempts: 2,
                base_delay: Duration::from_millis(5),
                max_delay: Duration::from_millis(10),
            },
            ..EngineConfig::default()
        },
    )
    .unwrap()
}

fn stream(store: Arc<dyn ObjectStore>, config: StreamConfig) -> RecordStream {
    let engine = engine(store, 64 * MIB);
    let memory = records_memory(engine.budget());
    RecordStream::new("events", config, engine, memory, CpuPool::new(2), None).unwrap()
}

fn lines(from: usize, to: usize) -> String {
    (from..to)
        .map(|i| format!("{{\"n\":{i},\"t\":\"t{}\"}}\n", i % 3))
        .collect()
}

async fn submit(stream: &RecordStream, body: &str) -> Result<Submitted, StreamError> {
    submit_body(
        stream,
        Bytes::from(body.to_string()),
        BodyEncoding::Identity,
        BodyFormat::Ndjson,
        stream.memory().reserve(body.len() as u64).await,
    )
    .await
}

/// Every stored object, decompressed, by key.
async fn objects(store: &MemoryStore, compression: Compression) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let listed = store.list_objects("", None, 1000).await.unwrap();
    for object in listed.objects {
        let data = store.object(&object.key).unwrap();
        let plain = sluice_streams::compress::decompress(compression, &data).unwrap();
        out.push((object.key, String::from_utf8(plain).unwrap()));
    }
    out
}

/// (name, config, records sent in one body, records per object)
type FlushCase = (&'static str, StreamConfig, usize, Vec<usize>);

#[tokio::test]
async fn batches_flush_on_records_bytes_and_close() {
    let cases: Vec<FlushCase> = vec![
        (
            "record count",
            StreamConfig {
                flush_records: 3,
                ..Default::default()
            },
            7,
            vec![3, 3, 1],
        ),
        (
            "bytes (the record that reaches the size ends its batch)",
            StreamConfig {
                flush_bytes: 30,
                ..Default::default()
            },
            5,
            vec![2, 2, 1],
        ),
        (
            "closing flushes the rest",
            StreamConfig::default(),
            5,
            vec![5],
        ),
    ];
    for (name, config, records, want) in cases {
        let store = Arc::new(MemoryStore::new());
        let stream = stream(store.clone(), config);
        let submitted = submit(&stream, &lines(0, records)).await.unwrap();
        assert_eq!(submitted.records, records as u64, "{name}");
        stream.close().await;
        let stored = acknowledge(submitted.tickets).await.unwrap();
        let mut got: Vec<(u64, usize)> = objects(&store, Compression::Zstd)
            .await
            .into_iter()
            .map(|(_, text)| {
                let first: serde_json::Value =
                    serde_json::from_str(text.lines().next().unwrap()).unwrap();
                (first["n"].as_u64().unwrap(), text.lines().count())
            })
            .collect();
        got.sort();
        let counts: Vec<usize> = got.iter().map(|(_, n)| *n).collect();
        assert_eq!(counts, want, "{name}");
        assert_eq!(stored.len(), want.len(), "{name}");
        let total: u64 = stored.iter().map(|b| b.records).sum();
        assert_eq!(total, records as u64, "{name}");
    }
}

#[tokio::test]
async fn concurrent_requests_share_one_flush() {
    let store = Arc::new(MemoryStore::new());
    let stream = stream(
        store.clone(),
        StreamConfig {
            flush_age: Duration::from_millis(200),
            ..Default::default()
        },
    );
    let requests = (0..20).map(|i| {
        let stream = stream.clone();
        async move {
            let submitted = submit(&stream, &lines(i * 10, i * 10 + 10)).await.unwrap();
            acknowledge(submitted.tickets).await.unwrap()
        }
    });
    // Acknowledged by the age flush alone: nothing calls flush or close.
    let acks = futures::future::join_all(requests).await;
    let keys: std::collections::BTreeSet<String> =
        acks.iter().flatten().map(|b| b.key.clone()).collect();
    assert_eq!(
        keys.len(),
        1,
        "one object for all twenty requests: {keys:?}"
    );
    let stored = objects(&store, Compression::Zstd).await;
    assert_eq!(stored.len(), 1);
    let mut numbers: Vec<u64> = stored[0]
        .1
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                .as_u64()
                .unwrap()
        })
        .collect();
    numbers.sort();
    assert_eq!(numbers, (0..200).collect::<Vec<u64>>());
    assert_eq!(stream.stats().snapshot().batches, 1);
}

#[tokio::test]
async fn partitions_by_field_with_a_cap_on_open_ones() {
    let store = Arc::new(MemoryStore::new());
    let stream = stream(
        store.clone(),
        StreamConfig {
            key_template: "{stream}/{field:t}/{uuid}".into(),
            compression: Compression::Gzip,
            max_open_partitions: 2,
            ..Default::default()
        },
    );
    // t0, t1, t2 in turn: each third partition flushes the oldest open one.
    let submitted = submit(&stream, &lines(0, 9)).await.unwrap();
    stream.close().await;
    acknowledge(submitted.tickets).await.unwrap();
    let stored = objects(&store, Compression::Gzip).await;
    for (key, text) in &stored {
        let t = key.split('/').nth(1).unwrap();
        assert!(key.ends_with(".ndjson.gz"), "{key}");
        for line in text.lines() {
            assert!(line.contains(&format!("\"t\":\"{t}\"")), "{key}: {line}");
        }
    }
    let total: usize = stored.iter().map(|(_, t)| t.lines().count()).sum();
    assert_eq!(total, 9);
    assert!(stream.stats().snapshot().evicted >= 1);
    assert!(
        stored.len() > 3,
        "evictions make more objects: {}",
        stored.len()
    );
}

#[tokio::test]
async fn invalid_records_refuse_the_body_or_go_to_the_dead_letter() {
    let body = "{\"n\":1}\nnot json\n{\"n\":3}\n";
    let store = Arc::new(MemoryStore::new());
    let strict = stream(store.clone(), StreamConfig::default());
    match submit(&strict, body).await {
        Err(StreamError::BadRecords { first, count }) => {
            assert_eq!((first.number, count), (2, 1));
        }
        other => panic!("{other:?}"),
    }
    strict.close().await;
    assert!(
        objects(&store, Compression::Zstd).await.is_empty(),
        "nothing stored"
    );

    let store = Arc::new(MemoryStore::new());
    let lenient = stream(
        store.clone(),
        StreamConfig {
            dead_letter_template: Some("{stream}-dead/{uuid}".into()),
            ..Default::default()
        },
    );
    let submitted = submit(&lenient, body).await.unwrap();
    assert_eq!((submitted.records, submitted.dead_lettered), (2, 1));
    lenient.close().await;
    let stored = acknowledge(submitted.tickets).await.unwrap();
    assert_eq!(stored.len(), 2);
    let objects = objects(&store, Compression::Zstd).await;
    let dead: Vec<_> = objects
        .iter()
        .filter(|(k, _)| k.starts_with("events-dead/"))
        .collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].1, "not json\n");
}

/// (name, body, encoding, decoded limit, records, or None when refused)
type EncodingCase = (&'static str, Vec<u8>, BodyEncoding, u64, Option<u64>);

#[tokio::test]
async fn encoded_bodies_decode_within_the_limit() {
    use std::io::Write;
    let text = lines(0, 1000);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(text.as_bytes()).unwrap();
    let gzip = gz.finish().unwrap();
    let zstd = zstd::encode_all(text.as_bytes(), 3).unwrap();
    let bomb = zstd::encode_all(&vec![b' '; 3 << 20][..], 3).unwrap();
    let cases: Vec<EncodingCase> = vec![
        ("gzip", gzip, BodyEncoding::Gzip, 1 << 20, Some(1000)),
        ("zstd", zstd, BodyEncoding::Zstd, 1 << 20, Some(1000)),
        (
            "over the limit once decoded",
            bomb,
            BodyEncoding::Zstd,
            2 << 20,
            None,
        ),
        (
            "not gzip",
            b"{}\n".to_vec(),
            BodyEncoding::Gzip,
            1 << 20,
            None,
        ),
    ];
    for (name, body, encoding, limit, want) in cases {
        let store = Arc::new(MemoryStore::new());
        let stream = stream(
            store.clone(),
            StreamConfig {
                max_request_bytes: limit,
                ..Default::default()
            },
        );
        let memory = stream.memory().reserve(body.len() as u64).await;
        let got = submit_body(&stream, body.into(), encoding, BodyFormat::Ndjson, memory).await;
        match (got, want) {
            (Ok(submitted), Some(records)) => assert_eq!(submitted.records, records, "{name}"),
            (Err(StreamError::BadInput(_)), None) => {}
            (got, _) => panic!("{name}: {got:?}"),
        }
        stream.close().await;
        assert_eq!(
            stream.engine().budget().in_use(),
            0,
            "{name}: memory given back"
        );
    }
}

#[tokio::test]
async fn large_batches_stream_as_multipart_within_the_budget() {
    let store = Arc::new(MemoryStore::new());
    let engine = engine(store.clone(), 24 * MIB);
    let stream = RecordStream::new(
        "big",
        StreamConfig {
            compression: Compression::None,
            flush_age: Duration::from_secs(600),
            flush_bytes: 1 << 30,
            ..Default::default()
        },
        engine.clone(),
        records_memory(engine.budget()),
        CpuPool::new(2),
        None,
    )
    .unwrap();
    // 96 MiB of records through a 24 MiB budget: bodies wait for memory while
    // earlier frames stream out as parts.
    let mut tickets = Vec::new();
    let record = format!("{{\"pad\":\"{}\"}}\n", "x".repeat(1000));
    let body: String = record.repeat(1024);
    for _ in 0..96 {
        let submitted = submit(&stream, &body).await.unwrap();
        tickets.extend(submitted.tickets);
        assert!(stream.engine().budget().in_use() <= 24 * MIB);
    }
    stream.close().await;
    let stored = acknowledge(tickets).await.unwrap();
    assert!(stored.iter().all(|b| b.key == stored[0].key), "one batch");
    let batch = &stored[0];
    assert_eq!(batch.records, 96 * 1024);
    assert!(batch.outcome.parts >= 19, "parts: {}", batch.outcome.parts);
    assert_eq!(batch.outcome.size, 96 * 1024 * record.len() as u64);
    assert_eq!(stream.engine().budget().in_use(), 0);
}

#[tokio::test]
async fn a_failing_store_acknowledges_nothing() {
    let memory = Arc::new(MemoryStore::new());
    let faulty =
        Arc::new(FaultyStore::new(memory.clone()).inject(Op::Put, None, None, Fault::Denied));
    let stream = stream(faulty, StreamConfig::default());
    let submitted = submit(&stream, &lines(0, 10)).await.unwrap();
    stream.close().await;
    match acknowledge(submitted.tickets).await {
        Err(StreamError::NotStored(_)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(stream.stats().snapshot().failed, 1);
    assert!(matches!(
        submit(&stream, "{}\n").await,
        Err(StreamError::Closed)
    ));
}

#[tokio::test]
async fn keys_without_uuid_are_written_once() {
    let store = Arc::new(MemoryStore::new());
    let config = StreamConfig {
        key_template: "{stream}/{offset}".into(),
        ..Default::default()
    };
    let first = stream(store.clone(), config.clone());
    let submitted = submit(&first, &lines(0, 3)).await.unwrap();
    first.close().await;
    let stored = acknowledge(submitted.tickets).await.unwrap();
    assert_eq!(stored[0].key, "events/00000000000000000000.ndjson.zst");
    // A replay makes the same key and is refused rather than written twice.
    let replay = stream(store.clone(), config);
    let submitted = submit(&replay, &lines(100, 103)).await.unwrap();
    replay.close().await;
    assert!(matches!(
        acknowledge(submitted.tickets).await,
        Err(StreamError::NotStored(_))
    ));
    let kept = objects(&store, Compression::Zstd).await;
    assert_eq!(kept.len(), 1);
    assert!(kept[0].1.starts_with("{\"n\":0,"), "{}", kept[0].1);
}

/// A rejected pretty-printed array element is one line in the dead letter, even
/// when the dead letter's batch is cut by size (it once counted its inner line
/// breaks as records and underflowed).
#[tokio::test]
async fn dead_lettered_elements_stay_one_line() {
    let store = Arc::new(MemoryStore::new());
    let stream = stream(
        store.clone(),
        StreamConfig {
            dead_letter_template: Some("dead/{uuid}".into()),
            max_record_bytes: 40,
            flush_bytes: 16,
            ..Default::default()
        },
    );
    let body = format!("[{{\"ok\":1}}, {{\n  \"pad\": \"{}\"\n}}]", "x".repeat(60));
    let memory = stream.memory().reserve(body.len() as u64).await;
    let submitted = submit_body(
        &stream,
        Bytes::from(body),
        BodyEncoding::Identity,
        BodyFormat::JsonArray,
        memory,
    )
    .await
    .unwrap();
    assert_eq!((submitted.records, submitted.dead_lettered), (1, 1));
    stream.close().await;
    acknowledge(submitted.tickets).await.unwrap();
    let dead: Vec<_> = objects(&store, Compression::Zstd)
        .await
        .into_iter()
        .filter(|(key, _)| key.starts_with("dead/"))
        .collect();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].1.lines().count(), 1, "{:?}", dead[0].1);
}

#[tokio::test]
async fn frames_are_cut_at_their_size_with_records_whole_and_in_order() {
    // Bodies of 700 records of about 1 KiB: runs cross the 1 MiB frame
    // boundary, and one record is longer than the room a frame starts with.
    let pad = "y".repeat(1000);
    let body = |from: usize| -> String {
        (from..from + 700)
            .map(|n| format!("{{\"n\":{n},\"pad\":\"{pad}\"}}\n"))
            .collect()
    };
    let huge = format!("{{\"n\":-1,\"pad\":\"{}\"}}\n", "z".repeat(100 << 10));
    for compression in [Compression::Zstd, Compression::Gzip, Compression::None] {
        let store = Arc::new(MemoryStore::new());
        let stream = stream(
            store.clone(),
            StreamConfig {
                compression,
                flush_age: Duration::from_secs(600),
                flush_bytes: 1 << 30,
                max_record_bytes: 1 << 20,
                ..Default::default()
            },
        );
        let mut sent = String::new();
        let mut tickets = Vec::new();
        for n in 0..6 {
            let mut text = body(n * 700);
            if n == 3 {
                text.push_str(&huge);
            }
            tickets.extend(submit(&stream, &text).await.unwrap().tickets);
            sent.push_str(&text);
        }
        stream.close().await;
        acknowledge(tickets).await.unwrap();
        let stored = objects(&store, compression).await;
        assert_eq!(stored.len(), 1, "{compression:?}");
        assert!(stored[0].1 == sent, "{compression:?}: records differ");
        if compression == Compression::Zstd {
            // Frame by frame: each holds whole records and about 1 MiB.
            let listed = store.list_objects("", None, 10).await.unwrap();
            let data = store.object(&listed.objects[0].key).unwrap();
            let mut rest = &data[..];
            let mut frames = 0;
            while !rest.is_empty() {
                let size = zstd::zstd_safe::find_frame_compressed_size(rest).unwrap();
                let plain = zstd::decode_all(&rest[..size]).unwrap();
                assert!(plain.ends_with(b"\n"), "frame {frames} cuts a record");
                assert!(plain.len() <= (1 << 20) + huge.len(), "frame {frames}");
                rest = &rest[size..];
                frames += 1;
            }
            assert!(frames >= 4, "frames: {frames}");
        }
    }
}
