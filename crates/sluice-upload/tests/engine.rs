//! Engine behaviour against the in-memory store and the fault injector: sizes and
//! source kinds, retries, aborts, ordering and the memory budget.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use sluice_store::{ChecksumAlgorithm, ObjectStore, StoreError};
use sluice_testkit::{test_data, Fault, FaultyStore, MemoryStore, Op};
use sluice_upload::*;

const MB: u64 = MIB;

/// Small parts so that tests are quick: threshold 6 MiB, parts 5 MiB.
fn config() -> EngineConfig {
    EngineConfig {
        threshold: 6 * MB,
        part_size: 5 * MB,
        concurrency: 4,
        memory_limit: 64 * MB,
        retry: RetryPolicy {
            max_attempts: 4,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(100),
        },
        ..EngineConfig::default()
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    File,
    StreamKnown,
    StreamUnknown,
    Blocking,
}

fn source(kind: Kind, data: &[u8], dir: &tempfile::TempDir) -> UploadSource {
    match kind {
        Kind::File => {
            let path = dir.path().join("src.bin");
            std::fs::File::create(&path)
                .unwrap()
                .write_all(data)
                .unwrap();
            UploadSource::File(path)
        }
        Kind::StreamKnown | Kind::StreamUnknown => {
            // Uneven chunks, as a network body delivers them.
            let chunks: Vec<std::io::Result<Bytes>> = data
                .chunks(70_001)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            UploadSource::Stream {
                stream: futures::stream::iter(chunks).boxed(),
                length: matches!(kind, Kind::StreamKnown).then_some(data.len() as u64),
            }
        }
        Kind::Blocking => UploadSource::Blocking {
            reader: Box::new(std::io::Cursor::new(data.to_vec())),
            length: None,
        },
    }
}

#[tokio::test]
async fn sizes_and_sources_round_trip() {
    let sizes = [
        0,
        1,
        6 * MB - 1,
        6 * MB,
        6 * MB + 1,
        10 * MB - 1,
        10 * MB,
        10 * MB + 1,
        23 * MB + 7,
    ];
    let kinds = [
        Kind::File,
        Kind::StreamKnown,
        Kind::StreamUnknown,
        Kind::Blocking,
    ];
    for size in sizes {
        let data = test_data(size as usize, size);
        for kind in kinds {
            let store = MemoryStore::new();
            let engine = Engine::new(Arc::new(store.clone()), config()).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let outcome = engine
                .upload(UploadRequest::new("obj"), source(kind, &data, &dir))
                .await
                .unwrap_or_else(|e| panic!("{kind:?} {size}: {e}"));
            let case = format!("{kind:?} size {size}");
            assert_eq!(outcome.size, size, "{case}");
            assert_eq!(store.object("obj").as_deref(), Some(&data[..]), "{case}");
            assert_eq!(
                outcome.checksum,
                Some(ChecksumAlgorithm::Crc32c.checksum(&data)),
                "{case}"
            );
            let expected_parts = if size <= 6 * MB {
                0
            } else {
                size.div_ceil(5 * MB) as u32
            };
            assert_eq!(outcome.parts, expected_parts, "{case}");
            assert_eq!(store.open_uploads(), 0, "{case}");
            assert_eq!(engine.budget().in_use(), 0, "{case}");
        }
    }
}

#[tokio::test]
async fn crc64nvme_is_carried_and_combined() {
    let store = MemoryStore::new();
    let engine = Engine::new(
        Arc::new(store.clone()),
        EngineConfig {
            checksum: Some(ChecksumAlgorithm::Crc64nvme),
            ..config()
        },
    )
    .unwrap();
    let data = test_data(17 * MB as usize, 9);
    let dir = tempfile::tempdir().unwrap();
    let outcome = engine
        .upload(UploadRequest::new("k"), source(Kind::File, &data, &dir))
        .await
        .unwrap();
    assert_eq!(
        outcome.checksum,
        Some(ChecksumAlgorithm::Crc64nvme.checksum(&data))
    );
}

#[tokio::test(start_paused = true)]
async fn failing_part_aborts_and_leaves_no_parts() {
    for kind in [Kind::File, Kind::StreamUnknown] {
        let memory = MemoryStore::new();
        let faulty = FaultyStore::new(Arc::new(memory.clone())).inject(
            Op::UploadPart,
            Some(3),
            None,
            Fault::Denied,
        );
        let engine = Engine::new(Arc::new(faulty.clone()), config()).unwrap();
        let data = test_data(40 * MB as usize, 1);
        let dir = tempfile::tempdir().unwrap();
        let error = engine
            .upload(UploadRequest::new("k"), source(kind, &data, &dir))
            .await
            .unwrap_err();
        assert!(
            matches!(error.store_error(), Some(StoreError::AccessDenied(_))),
            "{kind:?}: {error}"
        );
        assert_eq!(
            faulty.attempts(Op::UploadPart, Some(3)),
            1,
            "permanent errors are not retried"
        );
        assert_eq!(faulty.attempts(Op::Abort, None), 1);
        assert_eq!(
            (memory.open_uploads(), memory.stored_parts()),
            (0, 0),
            "{kind:?}"
        );
        assert!(memory.object("k").is_none());
        assert_eq!(engine.budget().in_use(), 0);
    }
}

#[tokio::test(start_paused = true)]
async fn transient_failures_are_retried_then_succeed() {
    let memory = MemoryStore::new();
    let faulty = FaultyStore::new(Arc::new(memory.clone()))
        .inject(Op::UploadPart, Some(2), Some(2), Fault::Throttle)
        .inject(Op::Create, None, Some(1), Fault::ServerError)
        .inject(Op::Complete, None, Some(1), Fault::ServerError);
    let engine = Engine::new(Arc::new(faulty.clone()), config()).unwrap();
    let data = test_data(16 * MB as usize, 2);
    let dir = tempfile::tempdir().unwrap();
    engine
        .upload(
            UploadRequest::new("k"),
            source(Kind::StreamKnown, &data, &dir),
        )
        .await
        .unwrap();
    assert_eq!(faulty.attempts(Op::UploadPart, Some(2)), 3);
    assert_eq!(faulty.attempts(Op::Create, None), 2);
    assert_eq!(faulty.attempts(Op::Complete, None), 2);
    assert_eq!(
        engine
            .stats()
            .retries
            .load(std::sync::atomic::Ordering::Relaxed),
        4
    );
    assert_eq!(
        engine
            .stats()
            .throttled
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    assert_eq!(memory.object("k").as_deref(), Some(&data[..]));
}

#[tokio::test(start_paused = true)]
async fn retries_are_bounded() {
    let memory = MemoryStore::new();
    let faulty = FaultyStore::new(Arc::new(memory.clone())).inject(
        Op::UploadPart,
        Some(2),
        None,
        Fault::Throttle,
    );
    let engine = Engine::new(Arc::new(faulty.clone()), config()).unwrap();
    let data = test_data(16 * MB as usize, 3);
    let dir = tempfile::tempdir().unwrap();
    let error = engine
        .upload(UploadRequest::new("k"), source(Kind::File, &data, &dir))
        .await
        .unwrap_err();
    assert!(
        matches!(error.store_error(), Some(StoreError::Throttled { .. })),
        "{error}"
    );
    assert_eq!(
        faulty.attempts(Op::UploadPart, Some(2)),
        config().retry.max_attempts
    );
    assert_eq!((memory.open_uploads(), memory.stored_parts()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn parts_finishing_out_of_order_complete_sorted() {
    let memory = MemoryStore::new();
    let faulty = FaultyStore::new(Arc::new(memory.clone()))
        .inject(
            Op::UploadPart,
            Some(1),
            None,
            Fault::Delay(Duration::from_secs(30)),
        )
        .inject(
            Op::UploadPart,
            Some(2),
            None,
            Fault::Delay(Duration::from_secs(20)),
        );
    let engine = Engine::new(Arc::new(faulty), config()).unwrap();
    let data = test_data(20 * MB as usize, 4);
    let dir = tempfile::tempdir().unwrap();
    let outcome = engine
        .upload(
            UploadRequest::new("k"),
            source(Kind::StreamUnknown, &data, &dir),
        )
        .await
        .unwrap();
    assert_eq!(outcome.parts, 4);
    // The memory store refuses a completion whose parts are not in ascending order.
    assert_eq!(memory.object("k").as_deref(), Some(&data[..]));
}

#[tokio::test(start_paused = true)]
async fn memory_budget_is_never_exceeded() {
    let memory = MemoryStore::new().with_latency(Duration::from_millis(50));
    let limit = 20 * MB;
    let engine = Engine::new(
        Arc::new(memory.clone()),
        EngineConfig {
            threshold: 5 * MB,
            memory_limit: limit,
            concurrency: 8,
            ..config()
        },
    )
    .unwrap();
    let uploads = (0..6).map(|i| {
        let (engine, memory) = (engine.clone(), memory.clone());
        async move {
            let data = test_data(31 * MB as usize, i);
            let dir = tempfile::tempdir().unwrap();
            let kind = if i % 2 == 0 {
                Kind::StreamUnknown
            } else {
                Kind::StreamKnown
            };
            engine
                .upload(
                    UploadRequest::new(format!("k{i}")),
                    source(kind, &data, &dir),
                )
                .await
                .unwrap();
            assert_eq!(memory_object(&memory, i), data);
        }
    });
    futures::future::join_all(uploads).await;
    let peak = memory.peak_in_flight_bytes();
    assert!(
        peak <= limit,
        "peak {peak} bytes in flight exceeds the budget of {limit}"
    );
    assert!(
        peak >= 10 * MB,
        "the test should load the budget (peak {peak})"
    );
    assert_eq!(engine.budget().in_use(), 0);
}

/// One limit on transfers in flight holds across uploads of every kind
/// (multipart from files and streams, single PUTs) and the downloads running
/// beside them; without one, each upload has its own `concurrency`.
#[tokio::test(start_paused = true)]
async fn the_transfer_limit_holds_across_uploads_and_downloads() {
    struct Case {
        tuning: Option<TuningConfig>,
        /// Most parts' worth of bytes inside write requests at once.
        at_most: u64,
        at_least: u64,
    }
    let cases = [
        Case {
            tuning: Some(TuningConfig::fixed(2)),
            at_most: 2,
            at_least: 2,
        },
        Case {
            tuning: Some(TuningConfig::fixed(5)),
            at_most: 5,
            at_least: 3,
        },
        // Each of the three multipart uploads alone may have 4 parts in flight.
        Case {
            tuning: None,
            at_most: 12,
            at_least: 6,
        },
    ];
    for case in cases {
        let memory = MemoryStore::new().with_latency(Duration::from_millis(50));
        let engine = Engine::new(
            Arc::new(memory.clone()),
            EngineConfig {
                tuning: case.tuning,
                memory_limit: 256 * MB,
                ..config()
            },
        )
        .unwrap();
        // Two ranges; smaller than two parts, as this request counts in the peak too.
        memory
            .put_object(sluice_store::PutRequest::new(
                "down",
                Bytes::from(test_data(9 * MB as usize, 9)),
            ))
            .await
            .unwrap();
        let kinds = [
            Kind::File,
            Kind::StreamKnown,
            Kind::StreamUnknown,
            Kind::File,
        ];
        let sizes = [20 * MB, 20 * MB, 20 * MB, MB];
        let uploads = kinds
            .iter()
            .zip(sizes)
            .enumerate()
            .map(|(i, (&kind, size))| {
                let engine = engine.clone();
                async move {
                    let (data, dir) = (
                        test_data(size as usize, i as u64),
                        tempfile::tempdir().unwrap(),
                    );
                    engine
                        .upload(
                            UploadRequest::new(format!("k{i}")),
                            source(kind, &data, &dir),
                        )
                        .await
                        .unwrap();
                }
            });
        let download = async {
            let mut sink = Vec::new();
            engine
                .download_to_writer("down", &mut sink, None)
                .await
                .unwrap();
            assert_eq!(sink.len() as u64, 9 * MB);
        };
        futures::future::join(futures::future::join_all(uploads), download).await;
        let peak = memory.peak_in_flight_bytes();
        let (at_most, at_least) = (case.at_most * 5 * MB, case.at_least * 5 * MB);
        assert!(
            (at_least..=at_most).contains(&peak),
            "{:?}: peak {peak} bytes in flight, expected {at_least}..={at_most}",
            case.tuning
        );
        assert_eq!(engine.transfer_limit(), case.tuning.map(|t| t.initial));
        assert_eq!(engine.budget().in_use(), 0);
    }
}

/// Round trips of a fixed time: every transfer more in flight is more
/// throughput, so the adaptive limit climbs from 32 to what the files wanted
/// (48 at once), for small files as for parts.
#[tokio::test(start_paused = true)]
async fn the_adaptive_limit_climbs_while_throughput_grows() {
    let memory = MemoryStore::new().with_latency(Duration::from_millis(50));
    let engine = Engine::new(
        Arc::new(memory.clone()),
        EngineConfig {
            tuning: Some(TuningConfig::adaptive()),
            ..config()
        },
    )
    .unwrap();
    let data = test_data(4096, 1);
    let uploads = futures::stream::iter(0..3000)
        .map(|i| {
            let (engine, data) = (engine.clone(), data.clone());
            async move {
                let dir = tempfile::tempdir().unwrap();
                engine
                    .upload(
                        UploadRequest::new(format!("small/{i}")),
                        source(Kind::StreamKnown, &data, &dir),
                    )
                    .await
                    .unwrap();
            }
        })
        .buffer_unordered(48);
    uploads.collect::<Vec<()>>().await;
    let limit = engine.transfer_limit().unwrap();
    assert!(
        (36..=64).contains(&limit),
        "limit {limit} after 3000 small files"
    );
}

fn memory_object(store: &MemoryStore, i: u64) -> Vec<u8> {
    store.object(&format!("k{i}")).unwrap().to_vec()
}

#[tokio::test(start_paused = true)]
async fn dropping_an_upload_aborts_it() {
    let memory = MemoryStore::new();
    let engine = Engine::new(Arc::new(memory.clone()), config()).unwrap();
    // A producer that sends 12 MiB and then stalls forever.
    let (tx, rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    tokio::spawn(async move {
        for chunk in test_data(12 * MB as usize, 5).chunks(MB as usize) {
            tx.send(Ok(Bytes::copy_from_slice(chunk))).await.unwrap();
        }
        std::future::pending::<()>().await;
    });
    let stream = tokio_stream_from(rx);
    let upload = engine.upload(
        UploadRequest::new("k"),
        UploadSource::Stream {
            stream,
            length: None,
        },
    );
    assert!(tokio::time::timeout(Duration::from_secs(5), upload)
        .await
        .is_err());
    engine.finish_background().await;
    assert_eq!((memory.open_uploads(), memory.stored_parts()), (0, 0));
    assert_eq!(memory.calls("abort"), 1);
    assert!(memory.object("k").is_none());
}

fn tokio_stream_from(
    mut rx: tokio::sync::mpsc::Receiver<std::io::Result<Bytes>>,
) -> futures::stream::BoxStream<'static, std::io::Result<Bytes>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed()
}

#[tokio::test]
async fn announced_length_must_match() {
    let cases = [
        (3 * MB, 2 * MB),
        (12 * MB, 11 * MB),
        (2 * MB, 3 * MB),
        (11 * MB, 12 * MB),
    ];
    for (announced, actual) in cases {
        let memory = MemoryStore::new();
        let engine = Engine::new(Arc::new(memory.clone()), config()).unwrap();
        let data = test_data(actual as usize, 6);
        let source = UploadSource::Stream {
            stream: futures::stream::iter([Ok(Bytes::from(data))]).boxed(),
            length: Some(announced),
        };
        let error = engine
            .upload(UploadRequest::new("k"), source)
            .await
            .unwrap_err();
        let expected = if actual < announced {
            matches!(error, TransferError::SourceShort { .. })
        } else {
            matches!(error, TransferError::SourceLong { .. })
        };
        assert!(expected, "{announced}/{actual}: {error}");
        assert!(memory.object("k").is_none());
        assert_eq!(memory.open_uploads(), 0);
    }
}

#[tokio::test]
async fn invalid_input_fails_before_any_request() {
    let memory = MemoryStore::new();
    let engine = Engine::new(Arc::new(memory.clone()), config()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let long_key = "k".repeat(1025);
    for key in ["", long_key.as_str()] {
        let result = engine
            .upload(
                UploadRequest::new(key),
                source(Kind::StreamUnknown, b"x", &dir),
            )
            .await;
        assert!(matches!(result, Err(TransferError::Config(_))), "{key:?}");
    }
    let missing = engine
        .upload(
            UploadRequest::new("k"),
            UploadSource::File(dir.path().join("missing")),
        )
        .await;
    assert!(matches!(missing, Err(TransferError::Source(_))));
    let directory = engine
        .upload(
            UploadRequest::new("k"),
            UploadSource::File(dir.path().to_path_buf()),
        )
        .await;
    assert!(matches!(directory, Err(TransferError::Source(_))));
    for op in ["put", "create", "upload_part"] {
        assert_eq!(memory.calls(op), 0, "{op}");
    }
    assert!(Engine::new(
        Arc::new(memory),
        EngineConfig {
            part_size: MB,
            ..config()
        }
    )
    .is_err());
}

#[tokio::test(start_paused = true)]
async fn downloads_verify_and_place_files_atomically() {
    let memory = MemoryStore::new();
    let dir = tempfile::tempdir().unwrap();
    // (size, ranges, flushed): ranges of the 5 MiB part size, then larger
    // ranges once the object splits into more than eight of them; each file
    // flushed to disk before its rename, or not (the default).
    let cases = [
        (0u64, 1, false),
        (1, 1, true),
        (5 * MB, 1, false),
        (5 * MB, 1, true),
        (23 * MB + 3, 5, false),
        (23 * MB + 3, 5, true),
        (61 * MB + 7, 8, false),
    ];
    for (size, ranges, flushed) in cases {
        let config = EngineConfig {
            flush_downloads: flushed,
            ..config()
        };
        let engine = Engine::new(Arc::new(memory.clone()), config).unwrap();
        let data = test_data(size as usize, size);
        engine
            .upload(
                UploadRequest::new("d"),
                source(Kind::StreamUnknown, &data, &dir),
            )
            .await
            .unwrap();
        let path = dir.path().join("out.bin");
        let outcome = engine.download_to_path("d", &path, None).await.unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), data, "size {size} {flushed}");
        assert!(outcome.verified, "size {size}");
        assert_eq!(outcome.ranges, ranges, "size {size}");
        let mut out = Vec::new();
        let outcome = engine
            .download_to_writer("d", &mut out, None)
            .await
            .unwrap();
        assert_eq!(out, data);
        assert_eq!(
            outcome.checksum,
            Some(ChecksumAlgorithm::Crc32c.checksum(&data))
        );
    }
    let engine = Engine::new(Arc::new(memory.clone()), config()).unwrap();
    let missing = engine
        .download_to_path("nope", &dir.path().join("x"), None)
        .await
        .unwrap_err();
    assert!(matches!(missing.store_error(), Some(e) if e.is_not_found()));
    assert!(!dir.path().join("x").exists());
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
    let _ = memory.head_object("d").await.unwrap();
}

/// Downloads retry through the same loop and budget as uploads: a body that
/// breaks off is resumed from the byte reached, and each resumption is a retry.
/// Into a file, a break can come while a batch is being written: the resumed
/// request starts after it.
#[tokio::test]
async fn an_interrupted_download_resumes_through_the_retry_loop() {
    // (object size, the byte the first two bodies break at, into a file, GETs)
    let cases = [
        (3 * MB, 100_000, false, 3),
        (12 * MB, 100_000, true, 5),
        // Past the first write batches (256 KiB): the body comes in 64 KiB pieces,
        // batches are written while the next arrive, and the reset comes with
        // a batch received and not written (dropped) and perhaps one in flight.
        (12 * MB, 2_500_000, true, 5),
        (12 * MB, 4_200_000, true, 5),
    ];
    for (size, cut, to_file, gets) in cases {
        let memory = MemoryStore::new();
        let data = test_data(size as usize, 21);
        memory
            .put_object(sluice_store::PutRequest::new(
                "d",
                Bytes::from(data.clone()),
            ))
            .await
            .unwrap();
        let faulty = FaultyStore::new(Arc::new(memory.clone())).inject(
            Op::Get,
            None,
            Some(2),
            Fault::CutBody(cut),
        );
        let engine = Engine::new(Arc::new(faulty.clone()), config()).unwrap();
        let budget_before = engine.retry_budget_available();
        let case = format!("size {size}, cut at {cut}, into a file: {to_file}");
        let out = if to_file {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("out.bin");
            let outcome = engine.download_to_path("d", &path, None).await.unwrap();
            // Hashed in order across the writes and the resumption.
            assert_eq!(
                outcome.checksum,
                Some(ChecksumAlgorithm::Crc32c.checksum(&data)),
                "{case}"
            );
            std::fs::read(&path).unwrap()
        } else {
            let mut out = Vec::new();
            engine
                .download_to_writer("d", &mut out, None)
                .await
                .unwrap();
            out
        };
        assert!(out == data, "{case}: content differs");
        assert_eq!(faulty.attempts(Op::Get, None), gets, "{case}");
        let retries = engine
            .stats()
            .retries
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(retries, 2, "{case}");
        assert!(engine.retry_budget_available() < budget_before, "{case}");
    }
}

/// Appending takes any source, a file included (no path of a public function
/// reaches a panic on a valid argument).
#[tokio::test]
async fn append_reads_every_kind_of_source() {
    let data = test_data(6 * MB as usize, 22);
    for kind in [Kind::File, Kind::StreamUnknown, Kind::Blocking] {
        let memory = MemoryStore::new();
        let engine = Engine::new(Arc::new(memory.clone()), config()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let upload_id = engine
            .create_multipart(&UploadRequest::new("a"))
            .await
            .unwrap();
        let appended = engine
            .append_parts(
                AppendRequest {
                    key: "a".into(),
                    upload_id,
                    first_part: 1,
                    carried: Vec::new(),
                    part_size: 5 * MB,
                    last: false,
                    remaining: None,
                    carried_memory: None,
                    parts_stored: None,
                },
                source(kind, &data, &dir),
            )
            .await;
        assert!(appended.error.is_none(), "{kind:?}: {:?}", appended.error);
        assert_eq!(appended.parts.len(), 1, "{kind:?}");
        assert_eq!(appended.kept(), data.len() as u64, "{kind:?}");
        assert_eq!(appended.read, data.len() as u64, "{kind:?}");
    }
}

/// `read_up_to` hands back the rest of a stream, and never a stream that ended
/// (polling a finished request body again panics).
#[tokio::test]
async fn read_up_to_splits_a_stream_and_never_polls_an_ended_one_again() {
    let engine = Engine::new(Arc::new(MemoryStore::new()), config()).unwrap();
    let source = || {
        futures::stream::unfold(0, |n| async move {
            (n < 3).then(|| (Ok(Bytes::from_static(b"abcd")), n + 1))
        })
        .boxed()
    };
    // (max, bytes read, rest)
    let cases: [(u64, &[u8], &[u8]); 3] = [
        (6, b"abcdab", b"cdabcd"),
        (12, b"abcdabcdabcd", b""),
        (100, b"abcdabcdabcd", b""),
    ];
    for (max, read, rest) in cases {
        let got = engine.read_up_to(source(), max).await;
        assert!(got.error.is_none());
        assert_eq!(&got.bytes[..], read, "max {max}");
        let tail: Vec<Bytes> = got.rest.map(|c| c.unwrap()).collect().await;
        assert_eq!(tail.concat(), rest, "max {max}");
    }
}

#[tokio::test]
async fn a_file_changed_while_it_is_uploaded_is_not_stored() {
    type Change = fn(&std::path::Path);
    let cases: [(&str, Change, Option<&str>); 3] = [
        ("left alone", |_| {}, None),
        (
            "rewritten in place, same size",
            |path| {
                let before = std::fs::metadata(path).unwrap().modified().unwrap();
                let file = std::fs::File::options().write(true).open(path).unwrap();
                std::os::unix::fs::FileExt::write_all_at(&file, &[0xff; 100], 15 * MB).unwrap();
                // Not left to the filesystem's clock resolution.
                file.set_modified(before + Duration::from_secs(1)).unwrap();
            },
            Some("the file was modified while it was being uploaded; nothing was stored"),
        ),
        (
            "replaced by a rename",
            |path| {
                let other = path.with_extension("new");
                std::fs::write(&other, test_data(16 * MB as usize, 9)).unwrap();
                std::fs::rename(&other, path).unwrap();
            },
            Some("the file was replaced while it was being uploaded; nothing was stored"),
        ),
    ];
    for (name, change, expected) in cases {
        let memory = MemoryStore::new();
        // The last part is read only after the change.
        let faulty = FaultyStore::new(Arc::new(memory.clone())).inject(
            Op::UploadPart,
            Some(4),
            None,
            Fault::Delay(Duration::from_secs(2)),
        );
        let engine = Engine::new(Arc::new(faulty), config()).unwrap();
        let data = test_data(16 * MB as usize, 3);
        let dir = tempfile::tempdir().unwrap();
        let source = source(Kind::File, &data, &dir);
        let path = dir.path().join("src.bin");
        let upload = engine.upload(UploadRequest::new("k"), source);
        let changing = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            change(&path);
        };
        let (result, ()) = tokio::join!(upload, changing);
        match expected {
            None => {
                result.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(memory.object("k").as_deref(), Some(&data[..]), "{name}");
            }
            Some(expected) => {
                let error = result.expect_err(name);
                assert!(
                    matches!(error, TransferError::SourceChanged(_)),
                    "{name}: {error:?}"
                );
                assert_eq!(error.to_string(), expected, "{name}");
                assert!(memory.object("k").is_none(), "{name}: stored");
                assert_eq!(memory.open_uploads(), 0, "{name}: upload left open");
            }
        }
    }
}

/// A completion in flight when the store comes to count as down (the breaker
/// opens on another request's failure) runs to its answer instead of being cut
/// off with the requests that would only wait out a stall: stopped midway, a
/// store such as MinIO can keep an upload that never completes (see the MinIO
/// test `a_completion_whose_caller_goes_away_still_completes`).
#[tokio::test]
async fn a_completion_in_flight_runs_to_its_answer_when_the_breaker_opens() {
    let memory = MemoryStore::new();
    let faulty = FaultyStore::new(Arc::new(memory.clone()))
        .inject(
            Op::Complete,
            None,
            Some(1),
            Fault::Delay(Duration::from_secs(2)),
        )
        .inject(Op::Put, None, None, Fault::ServerError);
    let engine = Engine::new(
        Arc::new(faulty),
        EngineConfig {
            breaker: Some(BreakerConfig {
                failures: 1,
                probe_interval: Duration::from_millis(20),
                probe_timeout: Duration::from_millis(50),
                ..BreakerConfig::default()
            }),
            ..config()
        },
    )
    .unwrap();
    let data = Bytes::from(test_data(7 * MB as usize, 3));
    let upload_id = engine
        .create_multipart(&UploadRequest::new("completing"))
        .await
        .unwrap();
    let appended = engine
        .append_parts(
            AppendRequest {
                key: "completing".into(),
                upload_id: upload_id.clone(),
                first_part: 1,
                carried: Vec::new(),
                part_size: 5 * MB,
                last: true,
                remaining: None,
                carried_memory: None,
                parts_stored: None,
            },
            UploadSource::Stream {
                stream: futures::stream::iter([Ok(data.clone())]).boxed(),
                length: Some(data.len() as u64),
            },
        )
        .await;
    assert!(appended.error.is_none(), "{:?}", appended.error);
    let completing = tokio::spawn({
        let engine = engine.clone();
        let size = data.len() as u64;
        async move {
            engine
                .complete_multipart("completing", &upload_id, appended.parts, size, None)
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let small = Bytes::from_static(b"opens the breaker");
    let failed = engine
        .upload(
            UploadRequest::new("other"),
            UploadSource::Stream {
                stream: futures::stream::iter([Ok(small.clone())]).boxed(),
                length: Some(small.len() as u64),
            },
        )
        .await;
    assert!(failed.is_err());
    assert_eq!(engine.breaker().unwrap().opened_total(), 1);
    let completed = completing.await.unwrap();
    assert!(completed.is_ok(), "{completed:?}");
    assert_eq!(memory.object("completing").as_deref(), Some(&data[..]));
    assert_eq!(memory.open_uploads(), 0);
}

/// Seam bug: a multipart upload the store can no longer complete (MinIO's,
/// after a completion stopped midway by a killed process) was kept by `put
/// --resume` as any failed upload is, so every later run continued it and met
/// InvalidPart again. Now it is aborted, and the next run starts afresh.
#[tokio::test]
async fn a_resumed_upload_the_store_cannot_complete_is_dropped_for_the_next_run() {
    let memory = MemoryStore::new();
    let faulty = FaultyStore::new(Arc::new(memory.clone())).inject(
        Op::Complete,
        None,
        Some(1),
        Fault::InvalidPart,
    );
    let engine = Engine::new(Arc::new(faulty), config()).unwrap();
    let data = test_data(12 * MB as usize, 5);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&data).unwrap();
    let path = file.path().to_path_buf();
    let failed = engine
        .upload_file_resuming(UploadRequest::new("resumed"), path.clone())
        .await
        .expect_err("the completion is refused");
    assert!(
        failed.to_string().contains("CompleteMultipartUpload"),
        "{failed}"
    );
    assert_eq!(memory.open_uploads(), 0, "the broken upload is aborted");
    let done = engine
        .upload_file_resuming(UploadRequest::new("resumed"), path)
        .await
        .unwrap();
    assert_eq!(done.continued, None, "a fresh upload");
    assert_eq!(memory.object("resumed").as_deref(), Some(&data[..]));
}
