//! The engine against a real MinIO (started by scripts/test.sh): the sizes around
//! every boundary, a 300 MiB stream of unknown length, each read back and checked
//! by checksum, and no multipart upload left behind.

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use sluice_store::{ChecksumAlgorithm, ObjectStore};
use sluice_testkit::{minio, test_data};
use sluice_upload::*;

const MB: u64 = MIB;

async fn engine(test: &str) -> Option<(Engine, Arc<dyn ObjectStore>)> {
    let store: Arc<dyn ObjectStore> = Arc::new(minio::store(test).await?);
    let engine = Engine::new(store.clone(), EngineConfig::default()).unwrap();
    Some((engine, store))
}

async fn assert_round_trip(engine: &Engine, key: &str, data: &[u8]) {
    let mut out = Vec::new();
    let downloaded = engine
        .download_to_writer(key, &mut out, None)
        .await
        .unwrap();
    assert!(out == data, "{key}: content differs");
    let expected = ChecksumAlgorithm::Crc32c.checksum(data);
    assert_eq!(downloaded.checksum, Some(expected), "{key}");
    assert!(
        downloaded.verified,
        "{key}: the store should report a full-object checksum"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boundary_sizes_round_trip() {
    let Some((engine, store)) = engine("boundary_sizes").await else {
        return;
    };
    let threshold = engine.config().threshold;
    let sizes = [
        0,
        1,
        threshold - 1,
        threshold,
        threshold + 1,
        5 * MB - 1,
        5 * MB,
        5 * MB + 1,
        100 * MB,
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, size) in sizes.into_iter().enumerate() {
        let data = test_data(size as usize, size);
        let expected = ChecksumAlgorithm::Crc32c.checksum(&data);
        // From a file (positioned reads) ...
        let path = dir.path().join(format!("src{i}"));
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&data)
            .unwrap();
        let key = format!("file/{size}");
        let outcome = engine
            .upload(UploadRequest::new(&key), UploadSource::File(path))
            .await
            .unwrap();
        assert_eq!(
            (outcome.size, outcome.checksum),
            (size, Some(expected)),
            "{key}"
        );
        assert_eq!(outcome.parts > 0, size > threshold, "{key}");
        assert_round_trip(&engine, &key, &data).await;
        // ... and from streams of known and of unknown length.
        for length in [Some(size), None] {
            let key = format!(
                "stream-{}/{size}",
                if length.is_some() { "known" } else { "unknown" }
            );
            let chunks: Vec<std::io::Result<Bytes>> = data
                .chunks(1 << 20)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            let source = UploadSource::Stream {
                stream: futures::stream::iter(chunks).boxed(),
                length,
            };
            let outcome = engine
                .upload(UploadRequest::new(&key), source)
                .await
                .unwrap();
            assert_eq!(outcome.checksum, Some(expected), "{key}");
            assert_round_trip(&engine, &key, &data).await;
        }
    }
    assert!(store.list_multipart_uploads("").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_length_stream_of_300_mib() {
    let Some((engine, store)) = engine("stream_300mib").await else {
        return;
    };
    let size = 300 * MB as usize;
    let data = Arc::new(test_data(size, 300));
    // Produced while it is uploaded: 1 MiB chunks through a bounded channel.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Bytes>>(4);
    let producer = {
        let data = data.clone();
        tokio::spawn(async move {
            for chunk in data.chunks(1 << 20) {
                tx.send(Ok(Bytes::copy_from_slice(chunk))).await.unwrap();
            }
        })
    };
    let stream = futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).boxed();
    let outcome = engine
        .upload(
            UploadRequest::new("big/stream"),
            UploadSource::Stream {
                stream,
                length: None,
            },
        )
        .await
        .unwrap();
    producer.await.unwrap();
    assert_eq!(outcome.size, size as u64);
    assert_eq!(outcome.parts, 19); // 300 MiB in the default 16 MiB parts
    assert_eq!(
        outcome.checksum,
        Some(ChecksumAlgorithm::Crc32c.checksum(&data))
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("back");
    let downloaded = engine
        .download_to_path("big/stream", &path, None)
        .await
        .unwrap();
    assert!(downloaded.verified);
    assert!(std::fs::read(&path).unwrap() == *data);
    assert!(store.list_multipart_uploads("").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_upload_leaves_no_multipart_upload() {
    let Some((engine, store)) = engine("failed_upload").await else {
        return;
    };
    // A stream that fails after 20 MiB, once the multipart upload has parts.
    let good = test_data(20 * MB as usize, 7);
    let chunks: Vec<std::io::Result<Bytes>> = good
        .chunks(1 << 20)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .chain([Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "client went away",
        ))])
        .collect();
    let source = UploadSource::Stream {
        stream: futures::stream::iter(chunks).boxed(),
        length: None,
    };
    let error = engine
        .upload(UploadRequest::new("broken"), source)
        .await
        .unwrap_err();
    assert!(matches!(error, TransferError::Source(_)), "{error}");
    assert!(store.list_multipart_uploads("").await.unwrap().is_empty());
    assert!(store
        .head_object("broken")
        .await
        .unwrap_err()
        .is_not_found());
}

/// Seam bug: two 30 MiB uploads to one new key with `If-None-Match: *` at the
/// same moment both succeeded, one silently overwriting the other. Now the
/// completion carries the condition: exactly one wins, the other is refused
/// and its multipart upload aborted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_uploads_with_if_none_match_have_one_winner() {
    let Some((engine, store)) = engine("if_none_match_race").await else {
        return;
    };
    for round in 0..3 {
        let key = format!("race/{round}");
        let upload = |seed: u64| {
            let engine = engine.clone();
            let key = key.clone();
            async move {
                let data = test_data(30 * MIB as usize, seed);
                let request = UploadRequest {
                    condition: Some(sluice_store::WriteCondition::IfNoneMatch),
                    ..UploadRequest::new(key)
                };
                let stream = futures::stream::iter([Ok(Bytes::from(data.clone()))]).boxed();
                let result = engine
                    .upload(
                        request,
                        UploadSource::Stream {
                            stream,
                            length: Some(data.len() as u64),
                        },
                    )
                    .await;
                (result, data)
            }
        };
        let ((a, data_a), (b, data_b)) = tokio::join!(upload(1), upload(2));
        let winner = match (&a, &b) {
            (Ok(_), Err(e)) | (Err(e), Ok(_)) => {
                assert!(
                    matches!(
                        e,
                        TransferError::Store {
                            source: sluice_store::StoreError::PreconditionFailed,
                            ..
                        }
                    ),
                    "{e:?}"
                );
                if a.is_ok() {
                    data_a
                } else {
                    data_b
                }
            }
            _ => panic!("round {round}: expected one winner: {a:?} / {b:?}"),
        };
        assert_round_trip(&engine, &key, &winner).await;
    }
    engine.finish_background().await;
    assert!(store
        .list_multipart_uploads("race/")
        .await
        .unwrap()
        .is_empty());
}

/// Seam bug (a chaos run in CI: a resumable upload answered 502 InvalidPart on
/// every later PATCH, for ever): a CompleteMultipartUpload whose caller went
/// away midway (its lock lost, its client gone) was cancelled with it, and
/// MinIO, its connection closed, stops a completion between moving the parts
/// and writing the object: the upload can then never be completed (every
/// completion answers InvalidPart) and there is no object. Now a completion
/// runs to its end whoever waits for it, and the next completion of the upload
/// waits for it and finds the object made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_whose_caller_goes_away_still_completes() {
    let Some((engine, store)) = engine("dropped_completion").await else {
        return;
    };
    let data = Bytes::from(test_data(3 * 5 * MB as usize + 1, 17));
    let size = data.len() as u64;
    // The caller goes away 0 to 15 ms after it asked: before, during and after
    // MinIO's work, at some point of which a cancelled completion breaks it.
    for round in 0..30u64 {
        let key = format!("dropped-completion/{round}");
        let request = UploadRequest::new(key.clone());
        let upload_id = engine.create_multipart(&request).await.unwrap();
        let appended = engine
            .append_parts(
                AppendRequest {
                    key: key.clone(),
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
                    stream: futures::stream::iter(
                        data.chunks(1 << 20)
                            .map(|c| Ok(data.slice_ref(c)))
                            .collect::<Vec<_>>(),
                    )
                    .boxed(),
                    length: Some(size),
                },
            )
            .await;
        assert!(appended.error.is_none(), "{:?}", appended.error);
        assert_eq!(appended.parts.len(), 4);
        let wait = std::time::Duration::from_micros(round * 500);
        let dropped =
            engine.complete_multipart(&key, &upload_id, appended.parts.clone(), size, None);
        let _ = tokio::time::timeout(wait, dropped).await;
        let completed = engine
            .complete_multipart(&key, &upload_id, appended.parts, size, None)
            .await;
        assert!(
            completed.is_ok(),
            "round {round} (caller gone after {wait:?}): {completed:?}"
        );
        assert_round_trip(&engine, &key, &data).await;
        store.delete_object(&key).await.unwrap();
    }
    assert!(store.list_multipart_uploads("").await.unwrap().is_empty());
}
