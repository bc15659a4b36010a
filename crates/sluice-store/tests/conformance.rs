//! One conformance suite, run against every backend: the directory store on a
//! temporary directory and the S3 store against the MinIO `scripts/test.sh` starts
//! (each test under a unique prefix). The in-memory test double runs it too, so
//! engine tests that use it can trust it behaves like the real thing.

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use sluice_store::fs::{FsConfig, FsStore};
use sluice_store::*;
use sluice_testkit::{azurite, fake_gcs, minio, test_data, MemoryStore};

const MIB: usize = 1024 * 1024;

async fn read_all(
    store: &dyn ObjectStore,
    key: &str,
    range: Option<ByteRange>,
) -> Result<Vec<u8>, StoreError> {
    let output = store.get_object(key, range).await?;
    let chunks: Vec<Bytes> = output.body.try_collect().await?;
    Ok(chunks.concat())
}

async fn put_bytes(store: &dyn ObjectStore, key: &str, data: &[u8]) -> PutOutput {
    store
        .put_object(PutRequest::new(key, Bytes::copy_from_slice(data)))
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"))
}

/// Every key under `prefix`, listed `limit` at a time until the listing ends
/// (each page at most `limit` long; at most 50 pages).
async fn list_all_keys(store: &dyn ObjectStore, prefix: &str, limit: usize) -> Vec<String> {
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..50 {
        let page = store
            .list_objects(prefix, cursor.as_deref(), limit)
            .await
            .unwrap();
        assert!(page.objects.len() <= limit, "a page longer than {limit}");
        seen.extend(page.objects.into_iter().map(|o| o.key));
        cursor = page.next_cursor;
        if cursor.is_none() {
            return seen;
        }
    }
    panic!("listing {prefix:?} by {limit} does not end");
}

async fn put_get_roundtrip(store: Arc<dyn ObjectStore>) {
    let data = test_data(100_000, 1);
    let mut request = PutRequest::new("dir/a.bin", Bytes::from(data.clone()));
    request.content_type = Some("application/x-test".into());
    request
        .metadata
        .insert("origin".into(), "conformance".into());
    request.checksum = Some(ChecksumAlgorithm::Crc32c.checksum(&data));
    let put = store.put_object(request).await.unwrap();
    assert!(!put.etag.is_empty());
    assert_eq!(read_all(&*store, "dir/a.bin", None).await.unwrap(), data);
    let head = store.head_object("dir/a.bin").await.unwrap();
    assert_eq!(head.size, data.len() as u64);
    assert_eq!(head.etag, put.etag);
    assert_eq!(head.content_type.as_deref(), Some("application/x-test"));
    assert_eq!(
        head.metadata.get("origin").map(String::as_str),
        Some("conformance")
    );
    assert_eq!(
        head.checksum,
        Some(ChecksumAlgorithm::Crc32c.checksum(&data))
    );
    // A listing names the object by the same ETag (downloads compare them).
    let listed = store.list_objects("dir/", None, 10).await.unwrap();
    assert_eq!(listed.objects.len(), 1);
    assert_eq!(listed.objects[0].etag, head.etag);
}

/// Names S3 takes, stored side by side: some sort differently by bytes and
/// by culture (`_` against digits), which a signature over them must follow.
async fn metadata_names_of_every_shape(store: Arc<dyn ObjectStore>) {
    let names = ["file_name", "file1", "x-y", "x1-", "a_b_1", "2fa", "mtime"];
    let mut request = PutRequest::new("meta/names", Bytes::from_static(b"x"));
    for (i, name) in names.iter().enumerate() {
        request.metadata.insert(name.to_string(), format!("v{i}"));
    }
    store.put_object(request).await.unwrap();
    let head = store.head_object("meta/names").await.unwrap();
    for (i, name) in names.iter().enumerate() {
        assert_eq!(
            head.metadata.get(*name).map(String::as_str),
            Some(format!("v{i}").as_str()),
            "{name}: {:?}",
            head.metadata
        );
    }
}

async fn empty_object(store: Arc<dyn ObjectStore>) {
    put_bytes(&*store, "empty", b"").await;
    assert_eq!(read_all(&*store, "empty", None).await.unwrap(), b"");
    assert_eq!(store.head_object("empty").await.unwrap().size, 0);
}

async fn ranged_get(store: Arc<dyn ObjectStore>) {
    let data = test_data(1000, 2);
    put_bytes(&*store, "ranged", &data).await;
    let cases: Vec<(ByteRange, Option<&[u8]>)> = vec![
        (ByteRange::new(0, 10), Some(&data[0..10])),
        (ByteRange::new(990, 2000), Some(&data[990..])),
        (ByteRange::from(500), Some(&data[500..])),
        (ByteRange::new(999, 1000), Some(&data[999..])),
        (ByteRange::new(0, u64::MAX), Some(&data[..])),
        (ByteRange::new(998, u64::MAX), Some(&data[998..])),
        (ByteRange::from(1000), None),
        (ByteRange::from(5000), None),
    ];
    for (range, expected) in cases {
        match (read_all(&*store, "ranged", Some(range)).await, expected) {
            (Ok(got), Some(want)) => assert_eq!(got, want, "{range:?}"),
            (Err(StoreError::InvalidRange), None) => {}
            (other, _) => panic!("{range:?}: unexpected {:?}", other.map(|v| v.len())),
        }
    }
    let output = store
        .get_object("ranged", Some(ByteRange::new(10, 20)))
        .await
        .unwrap();
    assert_eq!(output.range, (10, 20));
    assert_eq!(output.meta.size, 1000);
}

async fn missing_key(store: Arc<dyn ObjectStore>) {
    assert!(matches!(
        store.head_object("nope").await,
        Err(StoreError::NoSuchKey { .. })
    ));
    assert!(matches!(
        store.get_object("nope", None).await,
        Err(StoreError::NoSuchKey { .. })
    ));
    store
        .delete_object("nope")
        .await
        .expect("deleting a missing key succeeds");
}

async fn overwrite_and_delete(store: Arc<dyn ObjectStore>) {
    let first = put_bytes(&*store, "k", b"first").await;
    let second = put_bytes(&*store, "k", b"second version").await;
    assert_ne!(first.etag, second.etag);
    assert_eq!(
        read_all(&*store, "k", None).await.unwrap(),
        b"second version"
    );
    store.delete_object("k").await.unwrap();
    assert!(store.head_object("k").await.unwrap_err().is_not_found());
}

async fn conditional_put(store: Arc<dyn ObjectStore>) {
    let mut create = PutRequest::new("cond", Bytes::from_static(b"v1"));
    create.condition = Some(WriteCondition::IfNoneMatch);
    let v1 = store.put_object(create.clone()).await.unwrap();
    let mut again = create.clone();
    again.body = Body::Bytes(Bytes::from_static(b"v1-again"));
    assert!(matches!(
        store.put_object(again).await,
        Err(StoreError::PreconditionFailed)
    ));
    assert_eq!(read_all(&*store, "cond", None).await.unwrap(), b"v1");

    let mut swap = PutRequest::new("cond", Bytes::from_static(b"v2"));
    swap.condition = Some(WriteCondition::IfMatch(v1.etag.clone()));
    store.put_object(swap.clone()).await.unwrap();
    swap.body = Body::Bytes(Bytes::from_static(b"v3"));
    assert!(matches!(
        store.put_object(swap).await,
        Err(StoreError::PreconditionFailed)
    ));
    assert_eq!(read_all(&*store, "cond", None).await.unwrap(), b"v2");
}

async fn list_pagination(store: Arc<dyn ObjectStore>) {
    let keys = ["list/a", "list/b/1", "list/b/2", "list/c", "list/d"];
    for key in keys {
        put_bytes(&*store, key, key.as_bytes()).await;
    }
    put_bytes(&*store, "other", b"x").await;
    assert_eq!(list_all_keys(&*store, "list/", 2).await, keys);
    let page = store.list_objects("list/b", None, 100).await.unwrap();
    assert_eq!(
        page.objects.iter().map(|o| o.size).collect::<Vec<_>>(),
        vec![8, 8]
    );
    // A cursor is the key listing starts after: any key works, present or not.
    let cases = [
        ("list/b", vec!["list/b/1", "list/b/2", "list/c", "list/d"]),
        ("list/b/1", vec!["list/b/2", "list/c", "list/d"]),
        ("list/bz", vec!["list/c", "list/d"]),
        ("list/d", vec![]),
    ];
    for (after, expected) in cases {
        let page = store.list_objects("list/", Some(after), 100).await.unwrap();
        let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, expected, "after {after}");
    }
}

/// `If-None-Match: *` on completion: exactly one of two uploads to a new key
/// becomes the object; the other is refused and its upload can still be aborted.
async fn multipart_completion_if_none_match(store: Arc<dyn ObjectStore>) {
    let key = "race/object";
    let mut uploads = Vec::new();
    for fill in [b'a', b'b'] {
        let upload_id = store
            .create_multipart_upload(CreateMultipartRequest::new(key))
            .await
            .unwrap();
        let part = store
            .upload_part(UploadPartRequest {
                key: key.into(),
                upload_id: upload_id.clone(),
                part_number: 1,
                body: Body::Bytes(Bytes::from(vec![fill; 1000])),
                checksum: PartChecksum::None,
            })
            .await
            .unwrap();
        uploads.push((upload_id, part, fill));
    }
    let complete = |upload_id: &str, part: &UploadedPart| CompleteMultipartRequest {
        key: key.into(),
        upload_id: upload_id.into(),
        parts: vec![part.clone()],
        checksum: None,
        condition: Some(WriteCondition::IfNoneMatch),
    };
    let (first_id, first_part, first_fill) = &uploads[0];
    store
        .complete_multipart_upload(complete(first_id, first_part))
        .await
        .unwrap();
    let (second_id, second_part, _) = &uploads[1];
    let refused = store
        .complete_multipart_upload(complete(second_id, second_part))
        .await;
    assert!(
        matches!(refused, Err(StoreError::PreconditionFailed)),
        "{refused:?}"
    );
    let stored = read_all(store.as_ref(), key, None).await.unwrap();
    assert_eq!(stored, vec![*first_fill; 1000]);
    store.abort_multipart_upload(key, second_id).await.unwrap();
    assert!(store
        .list_multipart_uploads("race/")
        .await
        .unwrap()
        .is_empty());
}

async fn multipart_out_of_order_parallel(store: Arc<dyn ObjectStore>) {
    let data = test_data(10 * MIB + 1024, 3);
    let mut create = CreateMultipartRequest::new("mp/object");
    create.checksum_algorithm = Some(ChecksumAlgorithm::Crc32c);
    create.content_type = Some("application/octet-stream".into());
    let upload_id = store.create_multipart_upload(create).await.unwrap();
    let ranges = [
        (3u32, 10 * MIB..data.len()),
        (1, 0..5 * MIB),
        (2, 5 * MIB..10 * MIB),
    ];
    let uploads = ranges.iter().map(|(n, range)| {
        let body = Bytes::copy_from_slice(&data[range.clone()]);
        let request = UploadPartRequest {
            key: "mp/object".into(),
            upload_id: upload_id.clone(),
            part_number: *n,
            checksum: PartChecksum::Known(ChecksumAlgorithm::Crc32c.checksum(&body)),
            body: Body::Bytes(body),
        };
        let store = store.clone();
        async move { store.upload_part(request).await }
    });
    let mut parts = futures::future::try_join_all(uploads).await.unwrap();

    let listed = store.list_parts("mp/object", &upload_id).await.unwrap();
    assert_eq!(
        listed.iter().map(|p| p.part_number).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    let open = store.list_multipart_uploads("mp/").await.unwrap();
    assert!(open
        .iter()
        .any(|u| u.upload_id == upload_id && u.key == "mp/object"));

    parts.sort_by_key(|p| p.part_number);
    let whole = ChecksumAlgorithm::Crc32c.checksum(&data);
    let done = store
        .complete_multipart_upload(CompleteMultipartRequest {
            key: "mp/object".into(),
            upload_id: upload_id.clone(),
            parts,
            checksum: Some(whole),
            condition: None,
        })
        .await
        .unwrap();
    assert_eq!(done.checksum, Some(whole));
    assert_eq!(read_all(&*store, "mp/object", None).await.unwrap(), data);
    let head = store.head_object("mp/object").await.unwrap();
    assert_eq!(head.size, data.len() as u64);
    assert_eq!(head.checksum, Some(whole));
    assert!(store
        .list_multipart_uploads("mp/")
        .await
        .unwrap()
        .is_empty());
}

async fn multipart_abort(store: Arc<dyn ObjectStore>) {
    let upload_id = store
        .create_multipart_upload(CreateMultipartRequest::new("ab/x"))
        .await
        .unwrap();
    store
        .upload_part(UploadPartRequest {
            key: "ab/x".into(),
            upload_id: upload_id.clone(),
            part_number: 1,
            body: Body::Bytes(Bytes::from(test_data(1000, 4))),
            checksum: PartChecksum::None,
        })
        .await
        .unwrap();
    store
        .abort_multipart_upload("ab/x", &upload_id)
        .await
        .unwrap();
    assert!(store
        .list_multipart_uploads("ab/")
        .await
        .unwrap()
        .is_empty());
    assert!(matches!(
        store.list_parts("ab/x", &upload_id).await,
        Err(StoreError::NoSuchUpload { .. })
    ));
    assert!(store.head_object("ab/x").await.unwrap_err().is_not_found());
}

async fn multipart_part_copied_from_objects(store: Arc<dyn ObjectStore>) {
    let first = test_data(5 * 1024 * 1024 + 3, 21);
    let second = test_data(1234, 22);
    put_bytes(store.as_ref(), "copy/src one", &first).await;
    put_bytes(store.as_ref(), "copy/src+two", &second).await;
    let upload_id = store
        .create_multipart_upload(CreateMultipartRequest::new("copy/joined"))
        .await
        .unwrap();
    let mut parts = Vec::new();
    for (number, source) in [(1, "copy/src one"), (2, "copy/src+two")] {
        let part = store
            .upload_part_copy(CopyPartRequest {
                key: "copy/joined".into(),
                upload_id: upload_id.clone(),
                part_number: number,
                source_key: source.into(),
                source_bucket: None,
                source_range: None,
                source_if_match: None,
            })
            .await
            .unwrap();
        assert_eq!(part.part_number, number);
        parts.push(part);
    }
    assert_eq!(parts[0].size, first.len() as u64);
    store
        .complete_multipart_upload(CompleteMultipartRequest {
            key: "copy/joined".into(),
            upload_id,
            parts,
            checksum: None,
            condition: None,
        })
        .await
        .unwrap();
    let joined = read_all(store.as_ref(), "copy/joined", None).await.unwrap();
    assert!(joined == [first, second].concat(), "copied parts differ");
    let missing = store
        .upload_part_copy(CopyPartRequest {
            key: "copy/joined".into(),
            upload_id: "nope".into(),
            part_number: 1,
            source_key: "copy/missing".into(),
            source_bucket: None,
            source_range: None,
            source_if_match: None,
        })
        .await;
    assert!(missing.is_err());
}

/// A part copy pinned to the source's ETag copies only that version, and a
/// range past the source's end is refused, as S3 does.
async fn part_copy_conditions(store: Arc<dyn ObjectStore>) {
    let data = test_data(6 * 1024 * 1024, 31);
    let source = put_bytes(store.as_ref(), "pin/src", &data).await;
    let upload_id = store
        .create_multipart_upload(CreateMultipartRequest::new("pin/dst"))
        .await
        .unwrap();
    let copy = |if_match: Option<&str>, range: Option<ByteRange>| CopyPartRequest {
        key: "pin/dst".into(),
        upload_id: upload_id.clone(),
        part_number: 1,
        source_key: "pin/src".into(),
        source_bucket: None,
        source_range: range,
        source_if_match: if_match.map(str::to_string),
    };
    let whole = Some(ByteRange::new(0, data.len() as u64));
    let past_end = Some(ByteRange::new(0, data.len() as u64 + 1));
    let other_etag = "\"0123456789abcdef0123456789abcdef\"";
    let etag = Some(source.etag.as_str());
    // (case, ETag asked for, range (`None`: the whole object), copied?)
    let cases = [
        ("the source's ETag", etag, whole, true),
        ("no condition", None, whole, true),
        ("another ETag", Some(other_etag), whole, false),
        ("a range past the end", None, past_end, false),
        ("the whole, the source's ETag", etag, None, true),
        ("the whole, another ETag", Some(other_etag), None, false),
    ];
    for (name, if_match, range, copied) in cases {
        let result = store.upload_part_copy(copy(if_match, range)).await;
        match (copied, result) {
            (true, Ok(part)) => assert_eq!(part.size, data.len() as u64, "{name}"),
            (false, Err(StoreError::PreconditionFailed)) if if_match.is_some() => {}
            (false, Err(e)) if if_match.is_none() => {
                assert!(!e.is_transient(), "{name}: {e}")
            }
            (_, result) => panic!("{name}: {result:?}"),
        }
    }
    // Overwritten: the old ETag no longer copies.
    put_bytes(store.as_ref(), "pin/src", &data[..1024 * 1024]).await;
    for range in [Some(ByteRange::new(0, 1024)), None] {
        let stale = store.upload_part_copy(copy(etag, range)).await;
        assert!(
            matches!(stale, Err(StoreError::PreconditionFailed)),
            "{range:?}: {stale:?}"
        );
    }
    store
        .abort_multipart_upload("pin/dst", &upload_id)
        .await
        .unwrap();
}

async fn multipart_small_part_rejected(store: Arc<dyn ObjectStore>) {
    let upload_id = store
        .create_multipart_upload(CreateMultipartRequest::new("small/x"))
        .await
        .unwrap();
    let mut parts = Vec::new();
    for n in 1..=2 {
        let part = store
            .upload_part(UploadPartRequest {
                key: "small/x".into(),
                upload_id: upload_id.clone(),
                part_number: n,
                body: Body::Bytes(Bytes::from(test_data(1024, n as u64))),
                checksum: PartChecksum::None,
            })
            .await
            .unwrap();
        parts.push(part);
    }
    let result = store
        .complete_multipart_upload(CompleteMultipartRequest {
            key: "small/x".into(),
            upload_id: upload_id.clone(),
            parts,
            checksum: None,
            condition: None,
        })
        .await;
    assert!(
        matches!(result, Err(StoreError::EntityTooSmall)),
        "{result:?}"
    );
    assert!(store
        .head_object("small/x")
        .await
        .unwrap_err()
        .is_not_found());
    store
        .abort_multipart_upload("small/x", &upload_id)
        .await
        .unwrap();
}

async fn checksum_mismatch_rejected(store: Arc<dyn ObjectStore>) {
    let mut request = PutRequest::new("bad", Bytes::from_static(b"the real content"));
    request.checksum = Some(ChecksumAlgorithm::Crc32c.checksum(b"something else"));
    let result = store.put_object(request).await;
    assert!(
        matches!(result, Err(StoreError::ChecksumMismatch { .. })),
        "{result:?}"
    );
    assert!(store.head_object("bad").await.unwrap_err().is_not_found());

    let mut create = CreateMultipartRequest::new("bad-mp");
    create.checksum_algorithm = Some(ChecksumAlgorithm::Crc64nvme);
    let upload_id = store.create_multipart_upload(create).await.unwrap();
    let result = store
        .upload_part(UploadPartRequest {
            key: "bad-mp".into(),
            upload_id: upload_id.clone(),
            part_number: 1,
            body: Body::Bytes(Bytes::from_static(b"part bytes")),
            checksum: PartChecksum::Known(ChecksumAlgorithm::Crc64nvme.checksum(b"other bytes")),
        })
        .await;
    assert!(
        matches!(result, Err(StoreError::ChecksumMismatch { .. })),
        "{result:?}"
    );
    store
        .abort_multipart_upload("bad-mp", &upload_id)
        .await
        .unwrap();
}

async fn file_body(store: Arc<dyn ObjectStore>) {
    let data = test_data(300_000, 5);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&data).unwrap();
    let body = Body::File {
        path: file.path().to_path_buf(),
        offset: 1000,
        len: 200_000,
    };
    let mut request = PutRequest::new("from-file", body);
    request.checksum = Some(ChecksumAlgorithm::Crc64nvme.checksum(&data[1000..201_000]));
    store.put_object(request).await.unwrap();
    assert_eq!(
        read_all(&*store, "from-file", None).await.unwrap(),
        &data[1000..201_000]
    );
}

async fn streamed_part_checksum(store: Arc<dyn ObjectStore>) {
    let data = test_data(6 * MIB, 8);
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&data).unwrap();
    for algorithm in [ChecksumAlgorithm::Crc32c, ChecksumAlgorithm::Crc64nvme] {
        let key = format!("streamed/{algorithm}");
        let mut create = CreateMultipartRequest::new(&key);
        create.checksum_algorithm = Some(algorithm);
        let upload_id = store.create_multipart_upload(create).await.unwrap();
        let part = store
            .upload_part(UploadPartRequest {
                key: key.clone(),
                upload_id: upload_id.clone(),
                part_number: 1,
                body: Body::File {
                    path: file.path().to_path_buf(),
                    offset: 0,
                    len: data.len() as u64,
                },
                checksum: PartChecksum::Streamed(algorithm),
            })
            .await
            .unwrap();
        let expected = algorithm.checksum(&data);
        assert_eq!(part.checksum, Some(expected), "{algorithm}");
        let done = store
            .complete_multipart_upload(CompleteMultipartRequest {
                key: key.clone(),
                upload_id,
                parts: vec![part],
                checksum: Some(expected),
                condition: None,
            })
            .await
            .unwrap();
        assert_eq!(done.checksum, Some(expected));
        assert_eq!(
            store.head_object(&key).await.unwrap().checksum,
            Some(expected)
        );
    }
}

async fn directory_listing(store: Arc<dyn ObjectStore>) {
    for key in ["a", "b/1", "b/2", "c/d/e", "ca", "z"] {
        put_bytes(&*store, key, key.as_bytes()).await;
    }
    let names = |entries: &[DirectoryEntry]| -> Vec<String> {
        entries
            .iter()
            .map(|e| match e {
                DirectoryEntry::Object(o) => format!("{} ({})", o.key, o.size),
                DirectoryEntry::Prefix(p) => p.clone(),
            })
            .collect()
    };
    // (prefix, page size, entries over every page)
    let cases: &[(&str, usize, &[&str])] = &[
        ("", 1000, &["a (1)", "b/", "c/", "ca (2)", "z (1)"]),
        ("", 2, &["a (1)", "b/", "c/", "ca (2)", "z (1)"]),
        ("", 1, &["a (1)", "b/", "c/", "ca (2)", "z (1)"]),
        ("b/", 1, &["b/1 (3)", "b/2 (3)"]),
        ("c", 1000, &["c/", "ca (2)"]),
        ("c/", 1000, &["c/d/"]),
        ("nothing/", 1000, &[]),
    ];
    for (prefix, limit, expected) in cases {
        let mut all = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..20 {
            let page = store
                .list_directory(prefix, cursor.as_deref(), *limit)
                .await
                .unwrap();
            all.extend(names(&page.entries));
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        assert!(
            cursor.is_none(),
            "{prefix:?} by {limit}: listing does not end"
        );
        assert_eq!(all, *expected, "{prefix:?} by {limit}");
    }
}

/// A key holding U+10FFFF (what the cursor past a prefix is made of) neither
/// repeats its prefix nor stops the listing from moving on.
async fn directory_listing_past_the_largest_character(store: Arc<dyn ObjectStore>) {
    let odd = format!("d/{}x", char::MAX);
    for key in ["c", "d/y", odd.as_str(), "e"] {
        put_bytes(&*store, key, b"1").await;
    }
    for limit in [1, 2, 1000] {
        let mut names = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..20 {
            let page = store
                .list_directory("", cursor.as_deref(), limit)
                .await
                .unwrap();
            names.extend(page.entries.iter().map(|e| e.name().to_string()));
            cursor = page.next_cursor;
            if cursor.is_none() {
                break;
            }
        }
        assert!(cursor.is_none(), "by {limit}: the listing does not end");
        assert_eq!(names, ["c", "d/", "e"], "by {limit}");
    }
}

/// Keys come in byte order across directories (`a.txt` before `a/…`, `a/b.c/…`
/// before `a/b/…`), whatever the page size and wherever the cursor falls.
async fn list_order_across_directories(store: Arc<dyn ObjectStore>) {
    let keys = [
        "a-b", "a.txt", "a/b.c/d", "a/b/x", "a/b/y", "a0", "ab", "b/c/d/e",
    ];
    for key in keys.iter().rev() {
        put_bytes(&*store, key, b"1").await;
    }
    for limit in [1, 2, 3, 1000] {
        assert_eq!(list_all_keys(&*store, "", limit).await, keys, "by {limit}");
    }
    let cases = [
        ("a/", "", vec!["a/b.c/d", "a/b/x", "a/b/y"]),
        (
            "",
            "a/b",
            vec!["a/b.c/d", "a/b/x", "a/b/y", "a0", "ab", "b/c/d/e"],
        ),
        ("", "a/b/", vec!["a/b/x", "a/b/y", "a0", "ab", "b/c/d/e"]),
        ("", "a/b/x", vec!["a/b/y", "a0", "ab", "b/c/d/e"]),
        ("", "a/c", vec!["a0", "ab", "b/c/d/e"]),
        ("a/b", "a/b.c/d", vec!["a/b/x", "a/b/y"]),
        ("b/", "b/c/d/e", vec![]),
    ];
    for (prefix, cursor, expected) in cases {
        let page = store
            .list_objects(prefix, Some(cursor), 1000)
            .await
            .unwrap();
        let listed: Vec<String> = page.objects.into_iter().map(|o| o.key).collect();
        assert_eq!(listed, expected, "{prefix:?} after {cursor:?}");
    }
}

async fn batched_delete(store: Arc<dyn ObjectStore>) {
    let keys: Vec<String> = (0..5).map(|i| format!("batch/{i}")).collect();
    for key in &keys {
        put_bytes(&*store, key, b"x").await;
    }
    let mut doomed = keys[..3].to_vec();
    doomed.push("batch/missing".into());
    let failures = store.delete_objects(&doomed).await.unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    let left: Vec<String> = store
        .list_objects("batch/", None, 100)
        .await
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(left, ["batch/3", "batch/4"]);
}

async fn server_side_copy(store: Arc<dyn ObjectStore>) {
    let data = test_data(70_000, 31);
    let mut request = PutRequest::new("copy-src/a", Bytes::from(data.clone()));
    request
        .metadata
        .insert("mtime".into(), "1700000000.5".into());
    request.content_type = Some("text/x-copied".into());
    let source = store.put_object(request).await.unwrap();
    let copied = store
        .copy_object(CopyObjectRequest {
            key: "copy-dst/a".into(),
            source_key: "copy-src/a".into(),
            source_bucket: None,
            placement: Default::default(),
        })
        .await;
    match copied {
        // Every store but the local directory copies server-side.
        Err(StoreError::Unsupported(_)) if store.describe().starts_with("file://") => {}
        Err(error) => panic!("copy: {error}"),
        Ok(copied) => {
            assert_eq!(read_all(&*store, "copy-dst/a", None).await.unwrap(), data);
            if source.checksum.is_some() {
                assert_eq!(copied.checksum, source.checksum);
            }
            let head = store.head_object("copy-dst/a").await.unwrap();
            assert_eq!(
                head.metadata.get("mtime").map(String::as_str),
                Some("1700000000.5")
            );
            assert_eq!(head.content_type.as_deref(), Some("text/x-copied"));
        }
    }
    // Ranges of one object as parts (how objects over 5 GiB are copied).
    let big = test_data(5 * MIB + 100, 32);
    put_bytes(&*store, "copy-src/big", &big).await;
    let upload_id = store
        .create_multipart_upload(CreateMultipartRequest::new("copy-dst/big"))
        .await
        .unwrap();
    let split = 5 * MIB as u64;
    let mut parts = Vec::new();
    for (number, range) in [
        (1, ByteRange::new(0, split)),
        (2, ByteRange::new(split, big.len() as u64)),
    ] {
        parts.push(
            store
                .upload_part_copy(CopyPartRequest {
                    key: "copy-dst/big".into(),
                    upload_id: upload_id.clone(),
                    part_number: number,
                    source_key: "copy-src/big".into(),
                    source_bucket: None,
                    source_range: Some(range),
                    source_if_match: None,
                })
                .await
                .unwrap(),
        );
    }
    assert_eq!(parts[1].size, 100);
    store
        .complete_multipart_upload(CompleteMultipartRequest {
            key: "copy-dst/big".into(),
            upload_id,
            parts,
            checksum: None,
            condition: None,
        })
        .await
        .unwrap();
    assert!(
        read_all(&*store, "copy-dst/big", None).await.unwrap() == big,
        "ranged copy differs"
    );
}

macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        mod fs_backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let dir = tempfile::tempdir().unwrap();
                    let store = super::FsStore::open(super::FsConfig::new(dir.path())).unwrap();
                    super::$case(std::sync::Arc::new(store)).await;
                }
            )*
        }
        mod memory_double {
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(std::sync::Arc::new(super::MemoryStore::new())).await;
                }
            )*
        }
        mod s3_minio {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(store) = super::minio::store(stringify!($case)).await else { return };
                    super::$case(std::sync::Arc::new(store)).await;
                }
            )*
        }
        mod azure_azurite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(store) = super::azurite::store(stringify!($case)).await else { return };
                    super::$case(std::sync::Arc::new(store)).await;
                }
            )*
        }
        mod gcs_fake {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let Some(store) = super::fake_gcs::store(stringify!($case)).await else { return };
                    super::$case(std::sync::Arc::new(store)).await;
                }
            )*
        }
    };
}

conformance!(
    put_get_roundtrip,
    metadata_names_of_every_shape,
    empty_object,
    ranged_get,
    missing_key,
    overwrite_and_delete,
    conditional_put,
    list_pagination,
    multipart_out_of_order_parallel,
    multipart_abort,
    multipart_completion_if_none_match,
    multipart_part_copied_from_objects,
    part_copy_conditions,
    multipart_small_part_rejected,
    checksum_mismatch_rejected,
    file_body,
    streamed_part_checksum,
    directory_listing,
    directory_listing_past_the_largest_character,
    list_order_across_directories,
    batched_delete,
    server_side_copy,
);
