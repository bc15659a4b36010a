//! What only the directory store has to get right: keys a directory tree cannot
//! hold side by side, names the filesystem refuses, symbolic links under the
//! root, and sidecars that always belong to the data file they describe.

use std::fs;
use std::path::Path;

use bytes::Bytes;
use futures::TryStreamExt;
use sluice_store::fs::{FsConfig, FsStore};
use sluice_store::*;

fn open(dir: &Path) -> FsStore {
    FsStore::open(FsConfig::new(dir)).unwrap()
}

async fn put(
    store: &FsStore,
    key: &str,
    data: &[u8],
    content_type: &str,
) -> Result<PutOutput, StoreError> {
    let mut request = PutRequest::new(key, Bytes::copy_from_slice(data));
    request.content_type = Some(content_type.into());
    store.put_object(request).await
}

async fn read(store: &FsStore, key: &str) -> Result<(Vec<u8>, Option<String>), StoreError> {
    let output = store.get_object(key, None).await?;
    let chunks: Vec<Bytes> = output.body.try_collect().await?;
    Ok((chunks.concat(), output.meta.content_type))
}

fn sidecar_count(root: &Path) -> usize {
    fn count(dir: &Path) -> usize {
        fs::read_dir(dir)
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| {
                        if e.file_type().unwrap().is_dir() {
                            count(&e.path())
                        } else {
                            1
                        }
                    })
                    .sum()
            })
            .unwrap_or(0)
    }
    count(&root.join(".sluice/sidecars"))
}

/// (first key stored, second key tried, what the second write gets).
#[tokio::test]
async fn keys_a_tree_cannot_hold_together_conflict_and_break_nothing() {
    let long_255 = format!("d/{}", "n".repeat(255));
    let cases: Vec<(&str, &str, Option<&str>)> = vec![
        ("a", "a/b", Some("key_conflict")),
        ("x/y", "x", Some("key_conflict")),
        ("deep/er", "deep/er/still/more", Some("key_conflict")),
        // The sidecar of `k` is no file a key can run into.
        ("k", "k.json/x", None),
        ("m", "m.json", None),
        // A last segment of 251..=255 bytes: no suffix is ever added to it.
        (&long_255, "d/other", None),
        ("2027", "2027/11/upload.bin", Some("key_conflict")),
    ];
    for (first, second, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path());
        put(&store, first, b"first", "text/first").await.unwrap();
        let got = put(&store, second, b"second", "text/second").await;
        match expected {
            None => {
                got.unwrap_or_else(|e| panic!("{first} then {second}: {e}"));
                let (data, content_type) = read(&store, second).await.unwrap();
                assert_eq!(
                    (data.as_slice(), content_type.as_deref()),
                    (&b"second"[..], Some("text/second"))
                );
            }
            Some(kind) => {
                let error = got.expect_err(second);
                assert_eq!(error.kind(), kind, "{first} then {second}: {error}");
                assert!(!error.is_transient());
                // The same key is refused as a multipart upload, before any part.
                let refused = store
                    .create_multipart_upload(CreateMultipartRequest::new(second))
                    .await
                    .expect_err("multipart creation");
                assert_eq!(refused.kind(), kind);
                assert_eq!(store.check_key(second).await.unwrap_err().kind(), kind);
            }
        }
        // The first object is untouched, data and metadata.
        let (data, content_type) = read(&store, first).await.unwrap();
        assert_eq!(
            (data.as_slice(), content_type.as_deref()),
            (&b"first"[..], Some("text/first")),
            "{first} then {second}"
        );
        // Nothing was left staged.
        assert_eq!(
            fs::read_dir(dir.path().join(".sluice/tmp"))
                .unwrap()
                .count(),
            0
        );
        assert!(store.list_multipart_uploads("").await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn names_the_filesystem_cannot_hold_are_invalid_keys() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for key in [
        "n".repeat(256),
        format!("a/{}", "é".repeat(128)),
        "a//b".to_string(),
        ".sluice/tmp/x".to_string(),
    ] {
        let error = put(&store, &key, b"x", "text/plain").await.unwrap_err();
        assert_eq!(error.kind(), "invalid_key", "{key}: {error}");
    }
    let fine = "n".repeat(255);
    put(&store, &fine, b"x", "text/plain").await.unwrap();
    assert_eq!(
        read(&store, &fine).await.unwrap().1.as_deref(),
        Some("text/plain")
    );
}

#[tokio::test]
async fn symbolic_links_under_the_root_are_never_followed() {
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("secret"), b"do not read").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    std::os::unix::fs::symlink(outside.path(), dir.path().join("linked-dir")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret"),
        dir.path().join("linked-file"),
    )
    .unwrap();

    for key in ["linked-dir/secret", "linked-file"] {
        assert!(read(&store, key).await.unwrap_err().is_not_found(), "{key}");
        assert!(
            store.head_object(key).await.unwrap_err().is_not_found(),
            "{key}"
        );
    }
    let listed = store.list_objects("", None, 100).await.unwrap();
    assert!(listed.objects.is_empty(), "{:?}", listed.objects);

    // Writing through the directory link is refused; nothing lands outside.
    let error = put(&store, "linked-dir/new", b"x", "text/plain")
        .await
        .unwrap_err();
    assert_eq!(error.kind(), "key_conflict", "{error}");
    assert!(!outside.path().join("new").exists());
    // A part copy from a link reads nothing either.
    let upload = store
        .create_multipart_upload(CreateMultipartRequest::new("copy"))
        .await
        .unwrap();
    let copy = store
        .upload_part_copy(CopyPartRequest {
            key: "copy".into(),
            upload_id: upload.clone(),
            part_number: 1,
            source_key: "linked-file".into(),
            source_bucket: None,
            source_range: None,
            source_if_match: None,
        })
        .await
        .unwrap_err();
    assert!(copy.is_not_found(), "{copy}");
    store.abort_multipart_upload("copy", &upload).await.unwrap();

    // Deleting the link's key leaves what it points to alone.
    store.delete_object("linked-file").await.unwrap();
    assert_eq!(
        fs::read(outside.path().join("secret")).unwrap(),
        b"do not read"
    );
    // A write to the link's own key replaces the link, not its target.
    put(&store, "linked-file", b"mine", "text/plain")
        .await
        .unwrap();
    assert_eq!(read(&store, "linked-file").await.unwrap().0, b"mine");
    assert_eq!(
        fs::read(outside.path().join("secret")).unwrap(),
        b"do not read"
    );
}

#[tokio::test]
async fn a_fifo_under_the_root_is_no_object_and_no_hang() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let status = std::process::Command::new("mkfifo")
        .arg(dir.path().join("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let got = tokio::time::timeout(std::time::Duration::from_secs(5), read(&store, "pipe"))
        .await
        .expect("opening a FIFO must not block");
    assert!(got.unwrap_err().is_not_found());
}

#[tokio::test]
async fn one_sidecar_per_live_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    put(&store, "a/b/c", b"one", "text/one").await.unwrap();
    put(&store, "a/b/c", b"two!", "text/two").await.unwrap();
    assert_eq!(sidecar_count(dir.path()), 1);
    assert_eq!(
        read(&store, "a/b/c").await.unwrap().1.as_deref(),
        Some("text/two")
    );

    // A multipart completion over it replaces the sidecar too.
    let upload = store
        .create_multipart_upload(CreateMultipartRequest {
            content_type: Some("text/three".into()),
            ..CreateMultipartRequest::new("a/b/c")
        })
        .await
        .unwrap();
    let part = store
        .upload_part(UploadPartRequest {
            key: "a/b/c".into(),
            upload_id: upload.clone(),
            part_number: 1,
            body: Body::from(Bytes::from_static(b"three")),
            checksum: PartChecksum::None,
        })
        .await
        .unwrap();
    store
        .complete_multipart_upload(CompleteMultipartRequest {
            key: "a/b/c".into(),
            upload_id: upload,
            parts: vec![part],
            checksum: None,
            condition: None,
        })
        .await
        .unwrap();
    assert_eq!(
        read(&store, "a/b/c").await.unwrap(),
        (b"three".to_vec(), Some("text/three".into()))
    );
    assert_eq!(sidecar_count(dir.path()), 1);

    // Deleting removes the sidecar and the directories left empty.
    store.delete_object("a/b/c").await.unwrap();
    assert_eq!(sidecar_count(dir.path()), 0);
    assert!(!dir.path().join("a").exists());
}

#[tokio::test]
async fn a_sidecar_from_before_identity_names_is_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    put(&store, "old/object", b"data", "text/new-layout")
        .await
        .unwrap();
    let etag = store.head_object("old/object").await.unwrap().etag;
    // Lose the new sidecar and write one where stores before 2026-11 kept it.
    fs::remove_dir_all(dir.path().join(".sluice/sidecars")).unwrap();
    fs::create_dir_all(dir.path().join(".sluice/sidecars")).unwrap();
    fs::create_dir_all(dir.path().join(".sluice/meta/old")).unwrap();
    let legacy = serde_json::json!({"etag": etag, "content_type": "text/legacy"});
    fs::write(
        dir.path().join(".sluice/meta/old/object.json"),
        legacy.to_string(),
    )
    .unwrap();
    assert_eq!(
        store
            .head_object("old/object")
            .await
            .unwrap()
            .content_type
            .as_deref(),
        Some("text/legacy")
    );
    // Deleting the object takes the legacy sidecar with it.
    store.delete_object("old/object").await.unwrap();
    assert!(!dir.path().join(".sluice/meta/old").exists());
}

/// Issue 36, point 3: a store nested in another (an older CLI made one per
/// directory) kept `demo/.sluice/sidecars/…`, which the outer store listed as
/// objects. No `.sluice` directory at any depth is data; opening and reading
/// a plain directory makes none.
#[tokio::test]
async fn bookkeeping_at_any_depth_is_not_listed_and_reading_makes_none() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("demo/.sluice/sidecars")).unwrap();
    std::fs::write(root.join("demo/.sluice/sidecars/x.json"), b"{}").unwrap();
    std::fs::write(root.join("demo/h.txt"), b"h").unwrap();
    let store = open(root);
    let listed: Vec<String> = store
        .list_objects("", None, 100)
        .await
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect();
    assert_eq!(listed, vec!["demo/h.txt"]);
    assert!(read(&store, "demo/h.txt").await.is_ok());
    assert!(!root.join(".sluice").exists(), "reads made bookkeeping");
    // (key, refused)
    let cases = [
        ("demo/.sluice/sidecars/x.json", true),
        (".sluice/tmp/x", true),
        ("demo/.sluicex", false),
    ];
    for (key, refused) in cases {
        let result = store.head_object(key).await;
        assert_eq!(
            matches!(result, Err(StoreError::InvalidKey { .. })),
            refused,
            "{key}: {result:?}"
        );
    }
    put(&store, "new.txt", b"n", "text/plain").await.unwrap();
    assert!(
        root.join(".sluice/sidecars").is_dir(),
        "the first write makes it"
    );
}
