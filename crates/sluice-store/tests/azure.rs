//! What the Azure store does beyond the conformance suite, on the Azurite
//! `scripts/test.sh` starts: a part copied from an object is copied by the
//! service (Put Block From URL), its bytes never passing through this
//! process, from this container or another, a range or the whole, pinned to
//! one version of the source.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use sluice_store::az::{AzureConfig, AzureStore};
use sluice_store::*;
use sluice_testkit::{azurite, test_data};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MIB: usize = 1024 * 1024;

async fn read_all(store: &dyn ObjectStore, key: &str) -> Vec<u8> {
    let output = store.get_object(key, None).await.unwrap();
    let chunks: Vec<Bytes> = output.body.try_collect().await.unwrap();
    chunks.concat()
}

/// A TCP relay in front of Azurite that counts the bytes going each way.
/// Requests keep their `Host` (the relay's address), which the source URLs
/// of copies name too, so Azurite takes them as its own.
struct CountingRelay {
    address: std::net::SocketAddr,
    to_store: Arc<AtomicU64>,
    from_store: Arc<AtomicU64>,
}

impl CountingRelay {
    async fn start(upstream: std::net::SocketAddr) -> CountingRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let to_store = Arc::new(AtomicU64::new(0));
        let from_store = Arc::new(AtomicU64::new(0));
        let (up, down) = (to_store.clone(), from_store.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(store) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (store_read, store_write) = store.into_split();
                tokio::spawn(pump(client_read, store_write, up.clone()));
                tokio::spawn(pump(store_read, client_write, down.clone()));
            }
        });
        CountingRelay {
            address,
            to_store,
            from_store,
        }
    }

    /// Bytes sent to the store and received from it so far.
    fn counts(&self) -> (u64, u64) {
        (
            self.to_store.load(Ordering::SeqCst),
            self.from_store.load(Ordering::SeqCst),
        )
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    count: Arc<AtomicU64>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                count.fetch_add(n as u64, Ordering::SeqCst);
                if to.write_all(&buffer[..n]).await.is_err() {
                    break;
                }
            }
        }
    }
    let _ = to.shutdown().await;
}

/// Azurite's `http://HOST:PORT/ACCOUNT` split into its address and path.
fn address_and_path(endpoint: &str) -> (std::net::SocketAddr, String) {
    let rest = endpoint
        .strip_prefix("http://")
        .expect("Azurite speaks http");
    let (address, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    (
        address.parse().expect("a loopback address"),
        path.to_string(),
    )
}

/// The test's store reached through a counting relay, and the relay.
async fn relayed_store(test: &str) -> Option<(AzureStore, CountingRelay)> {
    let endpoint = azurite::endpoint(test)?;
    let (upstream, path) = address_and_path(&endpoint);
    let relay = CountingRelay::start(upstream).await;
    let relayed = format!("http://{}{path}", relay.address);
    let mut config = AzureConfig::new(azurite::account(&relayed), azurite::TEST_CONTAINER);
    config.prefix = sluice_testkit::minio::unique_prefix(test);
    let store = AzureStore::open(config).unwrap();
    store.ensure_container().await.unwrap();
    Some((store, relay))
}

fn part_copy(
    upload_id: &str,
    part_number: u32,
    source_key: &str,
    range: Option<ByteRange>,
) -> CopyPartRequest {
    CopyPartRequest {
        key: "joined".into(),
        upload_id: upload_id.into(),
        part_number,
        source_key: source_key.into(),
        source_bucket: None,
        source_range: range,
        source_if_match: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn part_copies_are_made_by_azure_not_streamed_through_sluice() {
    let Some((store, relay)) = relayed_store("az_part_copies_server_side").await else {
        return;
    };
    let first = test_data(6 * MIB, 41);
    let second = test_data(5 * MIB + 17, 42);
    for (key, data) in [("src/first", &first), ("src/second", &second)] {
        store
            .put_object(PutRequest::new(key, Bytes::copy_from_slice(data)))
            .await
            .unwrap();
    }
    let upload_id = store
        .create_multipart_upload(CreateMultipartRequest::new("joined"))
        .await
        .unwrap();
    let before = relay.counts();
    // (part, source, range): a whole object, then a range of another.
    let copies = [
        (1, "src/first", None),
        (
            2,
            "src/second",
            Some(ByteRange::new(17, second.len() as u64)),
        ),
    ];
    let mut parts = Vec::new();
    for (number, source, range) in copies {
        parts.push(
            store
                .upload_part_copy(part_copy(&upload_id, number, source, range))
                .await
                .unwrap(),
        );
    }
    let after = relay.counts();
    let (sent, received) = (after.0 - before.0, after.1 - before.1);
    // Headers, a HEAD and the upload's record: kilobytes, not the 11 MiB copied.
    assert!(
        sent < 64 * 1024 && received < 64 * 1024,
        "the copies moved {sent} bytes to the store and {received} from it"
    );
    assert_eq!(
        parts.iter().map(|p| p.size).collect::<Vec<_>>(),
        [first.len() as u64, 5 * MIB as u64]
    );
    store
        .complete_multipart_upload(CompleteMultipartRequest {
            key: "joined".into(),
            upload_id,
            parts,
            checksum: None,
            condition: None,
        })
        .await
        .unwrap();
    assert!(read_all(&store, "joined").await == [&first[..], &second[17..]].concat());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_copy_reads_one_version_of_its_source() {
    let Some((store, _relay)) = relayed_store("az_part_copy_one_version").await else {
        return;
    };
    let old = test_data(MIB, 43);
    let put = store
        .put_object(PutRequest::new("src", Bytes::copy_from_slice(&old)))
        .await
        .unwrap();
    let new = test_data(2 * MIB, 44);
    store
        .put_object(PutRequest::new("src", Bytes::copy_from_slice(&new)))
        .await
        .unwrap();
    let upload_id = store
        .create_multipart_upload(CreateMultipartRequest::new("joined"))
        .await
        .unwrap();
    // Pinned to the version that was replaced: refused, nothing staged.
    let mut pinned = part_copy(&upload_id, 1, "src", None);
    pinned.source_if_match = Some(put.etag);
    let stale = store.upload_part_copy(pinned).await;
    assert!(
        matches!(stale, Err(StoreError::PreconditionFailed)),
        "{stale:?}"
    );
    // Unpinned: the version there now, whole.
    let part = store
        .upload_part_copy(part_copy(&upload_id, 1, "src", None))
        .await
        .unwrap();
    assert_eq!(part.size, new.len() as u64);
    // A source that is not there is named as the missing key.
    let missing = store
        .upload_part_copy(part_copy(&upload_id, 2, "nothing", None))
        .await;
    assert!(
        matches!(&missing, Err(StoreError::NoSuchKey { key }) if key == "nothing"),
        "{missing:?}"
    );
    store
        .complete_multipart_upload(CompleteMultipartRequest {
            key: "joined".into(),
            upload_id,
            parts: vec![part],
            checksum: None,
            condition: None,
        })
        .await
        .unwrap();
    assert!(read_all(&store, "joined").await == new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_is_copied_from_another_container() {
    let Some((store, relay)) = relayed_store("az_part_copy_other_container").await else {
        return;
    };
    let endpoint = azurite::endpoint("az_part_copy_other_container").unwrap();
    let relayed = format!("http://{}{}", relay.address, address_and_path(&endpoint).1);
    let other = AzureStore::open(AzureConfig::new(
        azurite::account(&relayed),
        "sluice-test-other",
    ))
    .unwrap();
    other.ensure_container().await.unwrap();
    let data = test_data(5 * MIB + 3, 45);
    let source_key = format!("{}src", sluice_testkit::minio::unique_prefix("az_other"));
    other
        .put_object(PutRequest::new(&source_key, Bytes::copy_from_slice(&data)))
        .await
        .unwrap();
    let upload_id = store
        .create_multipart_upload(CreateMultipartRequest::new("joined"))
        .await
        .unwrap();
    let before = relay.counts();
    let mut copy = part_copy(&upload_id, 1, &source_key, None);
    copy.source_bucket = Some("sluice-test-other".into());
    let part = store.upload_part_copy(copy).await.unwrap();
    let after = relay.counts();
    assert!(after.1 - before.1 < 64 * 1024, "streamed through sluice");
    store
        .complete_multipart_upload(CompleteMultipartRequest {
            key: "joined".into(),
            upload_id,
            parts: vec![part],
            checksum: None,
            condition: None,
        })
        .await
        .unwrap();
    assert!(read_all(&store, "joined").await == data);
    other.delete_object(&source_key).await.unwrap();
}
