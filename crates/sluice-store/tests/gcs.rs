//! What the GCS store does beyond the conformance suite, on the
//! fake-gcs-server `scripts/test.sh` starts: completions of more than 32
//! parts (composed in a tree), a completion sent again, an upload in a
//! storage class (its parts written in it, since compose takes one class),
//! uploads whose keys nest in each other's parts folders, names GCS
//! refuses, and a copy (a rewrite) that does not claim the upload that made
//! its source.

use bytes::Bytes;
use futures::TryStreamExt;
use sluice_store::*;
use sluice_testkit::{fake_gcs, test_data};

const MIB: usize = 1024 * 1024;

async fn read_all(store: &dyn ObjectStore, key: &str) -> Vec<u8> {
    let output = store.get_object(key, None).await.unwrap();
    let chunks: Vec<Bytes> = output.body.try_collect().await.unwrap();
    chunks.concat()
}

/// Uploads `data` as parts of `part_size` (the last one shorter) and
/// answers the upload id and the parts, unfinished.
async fn staged(
    store: &dyn ObjectStore,
    create: CreateMultipartRequest,
    data: &[u8],
    part_size: usize,
) -> (String, Vec<UploadedPart>) {
    let key = create.key.clone();
    let upload_id = store.create_multipart_upload(create).await.unwrap();
    let mut parts = Vec::new();
    for (i, piece) in data.chunks(part_size).enumerate() {
        let part = store
            .upload_part(UploadPartRequest {
                key: key.clone(),
                upload_id: upload_id.clone(),
                part_number: i as u32 + 1,
                body: Body::Bytes(Bytes::copy_from_slice(piece)),
                checksum: PartChecksum::None,
            })
            .await
            .unwrap();
        parts.push(part);
    }
    (upload_id, parts)
}

fn completion(key: &str, upload_id: &str, parts: &[UploadedPart]) -> CompleteMultipartRequest {
    CompleteMultipartRequest {
        key: key.into(),
        upload_id: upload_id.into(),
        parts: parts.to_vec(),
        checksum: None,
        condition: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_32_parts_compose_in_a_tree_and_leave_nothing() {
    let Some(store) = fake_gcs::store("gcs-tree").await else {
        return;
    };
    // 70 parts: three composed pieces, then the object.
    let data = test_data(69 * 5 * MIB + 12_345, 7);
    let (upload_id, parts) = staged(
        &store,
        CreateMultipartRequest::new("tree/big"),
        &data,
        5 * MIB,
    )
    .await;
    assert_eq!(parts.len(), 70);
    let done = store
        .complete_multipart_upload(completion("tree/big", &upload_id, &parts))
        .await
        .unwrap();
    assert!(
        read_all(&store, "tree/big").await == data,
        "the object differs"
    );
    let head = store.head_object("tree/big").await.unwrap();
    assert_eq!(head.etag, done.etag);
    assert_eq!(head.checksum, done.checksum);
    // No part, piece or record left; the object's listing is just the object.
    let left: Vec<String> = list_all(&store, "")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(left, vec!["tree/big".to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completion_sent_again_is_done_unless_the_key_was_replaced() {
    let Some(store) = fake_gcs::store("gcs-again").await else {
        return;
    };
    let data = test_data(6 * MIB, 8);
    let (upload_id, parts) = staged(
        &store,
        CreateMultipartRequest::new("again/k"),
        &data,
        5 * MIB,
    )
    .await;
    let first = store
        .complete_multipart_upload(completion("again/k", &upload_id, &parts))
        .await
        .unwrap();
    // Sent again (its answer was lost): the same object.
    let again = store
        .complete_multipart_upload(completion("again/k", &upload_id, &parts))
        .await
        .unwrap();
    assert_eq!(again.etag, first.etag);
    // Replaced since: the upload is gone, and the newer object stays.
    store
        .put_object(PutRequest::new("again/k", Bytes::from_static(b"newer")))
        .await
        .unwrap();
    let late = store
        .complete_multipart_upload(completion("again/k", &upload_id, &parts))
        .await;
    assert!(
        matches!(late, Err(StoreError::NoSuchUpload { .. })),
        "{late:?}"
    );
    assert_eq!(read_all(&store, "again/k").await, b"newer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_in_a_storage_class_writes_its_parts_in_it() {
    let Some(store) = fake_gcs::store("gcs-class").await else {
        return;
    };
    let data = test_data(6 * MIB, 9);
    let mut create = CreateMultipartRequest::new("class/k");
    create.settings.storage_class = Some("nearline".into());
    let (upload_id, parts) = staged(&store, create, &data, 5 * MIB).await;
    assert!(upload_id.ends_with("-nearline"), "{upload_id}");
    store
        .complete_multipart_upload(completion("class/k", &upload_id, &parts))
        .await
        .unwrap();
    let head = store.head_object("class/k").await.unwrap();
    assert_eq!(head.settings.storage_class.as_deref(), Some("NEARLINE"));
    assert!(read_all(&store, "class/k").await == data);
    // A class GCS does not have is refused before anything is stored.
    let mut create = CreateMultipartRequest::new("class/other");
    create.settings.storage_class = Some("GLACIER".into());
    let refused = store.create_multipart_upload(create).await;
    assert!(
        matches!(refused, Err(StoreError::Unsupported(_))),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_whose_keys_nest_keep_their_parts_apart() {
    let Some(store) = fake_gcs::store("gcs-nest").await else {
        return;
    };
    let data = test_data(5 * MIB + 10, 10);
    let (outer, _) = staged(&store, CreateMultipartRequest::new("n"), &data, 5 * MIB).await;
    // A key inside the first upload's parts folder.
    let inner_key = format!("n/{outer}/x");
    let (inner, inner_parts) = staged(
        &store,
        CreateMultipartRequest::new(inner_key.clone()),
        &data,
        5 * MIB,
    )
    .await;
    store.abort_multipart_upload("n", &outer).await.unwrap();
    store
        .complete_multipart_upload(completion(&inner_key, &inner, &inner_parts))
        .await
        .unwrap();
    assert!(read_all(&store, &inner_key).await == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_gcs_refuses_are_refused_before_a_request() {
    let Some(store) = fake_gcs::store("gcs-names").await else {
        return;
    };
    // With the test's prefix the names are longer; a bare store shows it.
    let bare = fake_gcs::store_at(&fake_gcs::endpoint("gcs-names").unwrap(), "").await;
    for name in [".", ".."] {
        let got = bare.head_object(name).await;
        assert!(
            matches!(got, Err(StoreError::InvalidKey { .. })),
            "{name}: {got:?}"
        );
        let got = bare.delete_object(name).await;
        assert!(
            matches!(got, Err(StoreError::InvalidKey { .. })),
            "{name}: {got:?}"
        );
    }
    // Under a prefix they are ordinary names.
    store
        .put_object(PutRequest::new("..", Bytes::from_static(b"dots")))
        .await
        .unwrap();
    assert_eq!(read_all(&store, "..").await, b"dots");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_is_not_taken_for_the_upload_that_made_its_source() {
    let Some(store) = fake_gcs::store("gcs-copy").await else {
        return;
    };
    let data = test_data(6 * MIB, 11);
    let (upload_id, parts) = staged(
        &store,
        CreateMultipartRequest::new("copy/made"),
        &data,
        5 * MIB,
    )
    .await;
    let made = store
        .complete_multipart_upload(completion("copy/made", &upload_id, &parts))
        .await
        .unwrap();
    let copied = store
        .copy_object(CopyObjectRequest {
            key: "copy/copied".into(),
            source_key: "copy/made".into(),
            source_bucket: None,
            placement: Default::default(),
        })
        .await
        .unwrap();
    assert_ne!(copied.etag, made.etag);
    assert_eq!(copied.checksum, made.checksum);
    assert!(read_all(&store, "copy/copied").await == data);
    // The completion sent again for the source is recognised as done; the
    // same upload named for the copy's key is no upload of that key.
    let again = store
        .complete_multipart_upload(completion("copy/made", &upload_id, &parts))
        .await
        .unwrap();
    assert_eq!(again.etag, made.etag);
    let claimed = store
        .complete_multipart_upload(completion("copy/copied", &upload_id, &parts))
        .await;
    assert!(
        matches!(claimed, Err(StoreError::NoSuchUpload { .. })),
        "{claimed:?}"
    );
}
