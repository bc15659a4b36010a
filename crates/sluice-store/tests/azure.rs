//! What the Azure store does beyond the conformance suite, on the Azurite
//! `scripts/test.sh` starts: a part copied from an object is copied by the
//! service (Put Block From URL), its bytes never passing through this
//! process, from this container or another, a range or the whole, of one
//! version of the source even when it is replaced while Azure reads it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use sluice_store::az::{AzureConfig, AzureStore};
use sluice_store::*;
use sluice_testkit::{azurite, test_data};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

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
    gate: Arc<Gate>,
}

/// What the relay does to requests that name a copy source: holds back the
/// next one once armed; answers each as a service without Put Block From
/// URL does while `refuse` is set.
#[derive(Default)]
struct Gate {
    armed: AtomicBool,
    refuse: AtomicBool,
    refused: AtomicU64,
    /// Notified when a request is held.
    held: Notify,
    /// Lets the held request go on.
    release: Notify,
}

impl CountingRelay {
    async fn start(upstream: std::net::SocketAddr) -> CountingRelay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let to_store = Arc::new(AtomicU64::new(0));
        let from_store = Arc::new(AtomicU64::new(0));
        let gate = Arc::new(Gate::default());
        let (up, down, held) = (to_store.clone(), from_store.clone(), gate.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(store) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (store_read, store_write) = store.into_split();
                let client_write: Writer = Arc::new(tokio::sync::Mutex::new(client_write));
                let store_write: Writer = Arc::new(tokio::sync::Mutex::new(store_write));
                let to_client = (held.clone(), client_write.clone());
                tokio::spawn(pump(client_read, store_write, up.clone(), Some(to_client)));
                tokio::spawn(pump(store_read, client_write, down.clone(), None));
            }
        });
        CountingRelay {
            address,
            to_store,
            from_store,
            gate,
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

/// One side of a relayed connection, shared by the pump that writes to it
/// and, for the client's, the gate that answers it itself.
type Writer = Arc<tokio::sync::Mutex<tokio::net::tcp::OwnedWriteHalf>>;

/// Copies `from` to `to`, counting; the client's requests pass `gate`,
/// which may hold one back or answer it to `client` itself.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    to: Writer,
    count: Arc<AtomicU64>,
    gate: Option<(Arc<Gate>, Writer)>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        count.fetch_add(n as u64, Ordering::SeqCst);
        let names_a_source = buffer[..n]
            .windows(b"x-ms-copy-source".len())
            .any(|w| w.eq_ignore_ascii_case(b"x-ms-copy-source"));
        if let Some((gate, client)) = gate.as_ref().filter(|_| names_a_source) {
            if gate.refuse.load(Ordering::SeqCst) {
                gate.refused.fetch_add(1, Ordering::SeqCst);
                let refusal = "HTTP/1.1 501 Not Implemented\r\nx-ms-error-code: APINotImplemented\r\ncontent-length: 0\r\n\r\n";
                let _ = client.lock().await.write_all(refusal.as_bytes()).await;
                continue;
            }
            if gate.armed.swap(false, Ordering::SeqCst) {
                gate.held.notify_one();
                gate.release.notified().await;
            }
        }
        if to.lock().await.write_all(&buffer[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.lock().await.shutdown().await;
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

/// Puts `data` at `key`.
async fn put(store: &dyn ObjectStore, key: &str, data: &[u8]) -> PutOutput {
    store
        .put_object(PutRequest::new(key, Bytes::copy_from_slice(data)))
        .await
        .unwrap()
}

/// Starts the test's upload of `joined`.
async fn start(store: &dyn ObjectStore) -> String {
    store
        .create_multipart_upload(CreateMultipartRequest::new("joined"))
        .await
        .unwrap()
}

/// Completes the test's upload of `joined` with `parts`.
async fn complete(store: &dyn ObjectStore, upload_id: impl Into<String>, parts: Vec<UploadedPart>) {
    store
        .complete_multipart_upload(CompleteMultipartRequest {
            key: "joined".into(),
            upload_id: upload_id.into(),
            parts,
            checksum: None,
            condition: None,
        })
        .await
        .unwrap();
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
        put(&store, key, data).await;
    }
    let upload_id = start(&store).await;
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
    complete(&store, upload_id, parts).await;
    assert!(read_all(&store, "joined").await == [&first[..], &second[17..]].concat());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_copy_reads_one_version_of_its_source() {
    let Some((store, _relay)) = relayed_store("az_part_copy_one_version").await else {
        return;
    };
    let old = test_data(MIB, 43);
    let old_version = put(&store, "src", &old).await;
    let new = test_data(2 * MIB, 44);
    put(&store, "src", &new).await;
    let upload_id = start(&store).await;
    // Pinned to the version that was replaced: refused, nothing staged.
    let mut pinned = part_copy(&upload_id, 1, "src", None);
    pinned.source_if_match = Some(old_version.etag);
    let stale = store.upload_part_copy(pinned).await;
    assert!(
        matches!(stale, Err(StoreError::PreconditionFailed)),
        "{stale:?}"
    );
    assert!(store
        .list_parts("joined", &upload_id)
        .await
        .unwrap()
        .is_empty());
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
    complete(&store, upload_id, vec![part]).await;
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
    put(&other, &source_key, &data).await;
    let upload_id = start(&store).await;
    let before = relay.counts();
    let mut copy = part_copy(&upload_id, 1, &source_key, None);
    copy.source_bucket = Some("sluice-test-other".into());
    let part = store.upload_part_copy(copy).await.unwrap();
    let after = relay.counts();
    assert!(
        after.0 - before.0 < 64 * 1024 && after.1 - before.1 < 64 * 1024,
        "streamed through sluice: {before:?} then {after:?}"
    );
    complete(&store, upload_id, vec![part]).await;
    assert!(read_all(&store, "joined").await == data);
    other.delete_object(&source_key).await.unwrap();
}

/// The source replaced after the copy's HEAD, while Azure is about to read
/// it: a copy pinned to the version it was asked for is refused; one that
/// pinned none is made again from the version there now. Either way the part
/// is one version, never a mix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_replaced_while_azure_reads_it_is_refused_or_read_again() {
    let Some((store, relay)) = relayed_store("az_part_copy_replaced").await else {
        return;
    };
    let store = Arc::new(store);
    let upload_id = start(store.as_ref()).await;
    // (pinned to the version asked for, what the copy answers)
    for (number, pinned) in [(1u32, true), (2, false)] {
        let first = test_data(MIB, 50 + number as u64);
        let asked = put(store.as_ref(), "src", &first).await;
        relay.gate.armed.store(true, Ordering::SeqCst);
        let mut copy = part_copy(&upload_id, number, "src", None);
        if pinned {
            copy.source_if_match = Some(asked.etag.clone());
        }
        let copying = tokio::spawn({
            let store = store.clone();
            async move { store.upload_part_copy(copy).await }
        });
        relay.gate.held.notified().await;
        let replacement = test_data(2 * MIB, 60 + number as u64);
        put(store.as_ref(), "src", &replacement).await;
        relay.gate.release.notify_one();
        let copied = copying.await.unwrap();
        match pinned {
            true => assert!(
                matches!(copied, Err(StoreError::PreconditionFailed)),
                "pinned: {copied:?}"
            ),
            false => {
                let part = copied.unwrap();
                assert_eq!(part.size, replacement.len() as u64, "unpinned");
                complete(&*store, upload_id.clone(), vec![part]).await;
                assert!(read_all(store.as_ref(), "joined").await == replacement);
            }
        }
    }
}

/// Where Azure cannot read sources by URL (an emulator without the
/// operation, an account's network rules), parts stream through sluice
/// instead, and the operation is not tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_stream_where_azure_cannot_copy_them_by_url() {
    let Some((store, relay)) = relayed_store("az_part_copy_refused").await else {
        return;
    };
    let data = test_data(5 * MIB + 9, 70);
    put(&store, "src", &data).await;
    let upload_id = start(&store).await;
    relay.gate.refuse.store(true, Ordering::SeqCst);
    let before = relay.counts();
    let split = 5 * MIB as u64;
    let mut parts = Vec::new();
    for (number, range) in [
        (1, ByteRange::new(0, split)),
        (2, ByteRange::new(split, data.len() as u64)),
    ] {
        let copy = part_copy(&upload_id, number, "src", Some(range));
        parts.push(store.upload_part_copy(copy).await.unwrap());
    }
    let received = relay.counts().1 - before.1;
    assert!(received >= data.len() as u64, "{received} bytes read");
    assert_eq!(relay.gate.refused.load(Ordering::SeqCst), 1, "tried again");
    complete(&store, upload_id, parts).await;
    assert!(read_all(&store, "joined").await == data);
}
