//! Resumable uploads end to end: the built `sluice serve` in front of the MinIO
//! that scripts/test.sh starts, driven by real tus clients (tus-js-client and
//! tuspy, installed by scripts/test.sh) and by raw requests: chunk sizes, a
//! gateway killed and restarted mid-upload, two gateways on one bucket, and two
//! writers at once.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sluice_store::ObjectStore;
use sluice_testkit::test_data;

const MIB: usize = 1 << 20;

mod common;

use common::stores::{Backend, TestStore, BACKENDS};
use common::{client_events as events, minio_prefix as setup, Gateway};

fn start(endpoint: &str, prefix: &str, listen: &str) -> Gateway {
    common::serve_on_minio(endpoint, prefix, listen, &["--tus-lock-timeout", "3s"])
}

/// The installed clients, or None (skipped) when scripts/test.sh did not install
/// them and S3 tests may skip.
fn clients(test: &str) -> Option<(String, String)> {
    match (
        std::env::var("SLUICE_TEST_CLIENTS"),
        std::env::var("SLUICE_TEST_PYTHON"),
    ) {
        (Ok(dir), Ok(python)) if !dir.is_empty() => Some((dir, python)),
        _ => {
            if std::env::var("SLUICE_TEST_S3_REQUIRED").as_deref() == Ok("1") {
                panic!("{test}: the tus clients are not installed (SLUICE_TEST_CLIENTS, SLUICE_TEST_PYTHON)");
            }
            eprintln!("SKIPPED {test}: no tus clients (run scripts/test.sh)");
            None
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Client {
    TusJs,
    Tuspy,
}

/// Uppy's default retry delays (ms), which a gateway restart must fit in.
const UPPY_RETRY_DELAYS: &str = "[0, 1000, 3000, 5000]";

/// Starts a client uploading `file` to the gateway's tus endpoint.
fn run_client(client: Client, gateway_url: &str, file: &std::path::Path, chunk: &str) -> Child {
    client_command(client, gateway_url, file, chunk)
        .spawn()
        .expect("start the tus client")
}

/// The command that runs a client uploading `file` to the gateway's tus endpoint.
fn client_command(
    client: Client,
    gateway_url: &str,
    file: &std::path::Path,
    chunk: &str,
) -> Command {
    let (dir, python) = clients("run_client").expect("clients checked by the caller");
    let endpoint = format!("{gateway_url}/v1/tus/");
    let mut command = match client {
        Client::TusJs => {
            let mut c = Command::new("node");
            c.arg(format!("{dir}/tus_js_upload.mjs"));
            c
        }
        Client::Tuspy => {
            let mut c = Command::new(python);
            c.arg(format!("{dir}/tuspy_upload.py"));
            c
        }
    };
    command
        .args([endpoint.as_str(), file.to_str().unwrap(), chunk])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    command
}

/// The object key the upload at `url` became, from HEAD.
async fn key_of(url: &str) -> (String, u64) {
    let response = reqwest::Client::new()
        .head(url)
        .header("tus-resumable", "1.0.0")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "HEAD {url}");
    let key = response.headers()["x-sluice-key"]
        .to_str()
        .unwrap()
        .to_owned();
    let offset = response.headers()["upload-offset"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    (key, offset)
}

async fn stored(store: &dyn ObjectStore, key: &str) -> Vec<u8> {
    use futures::TryStreamExt;
    let output = store.get_object(key, None).await.unwrap();
    let chunks: Vec<Bytes> = output.body.try_collect().await.unwrap();
    chunks.concat()
}

async fn no_multipart_left(store: &dyn ObjectStore) {
    let open = store.list_multipart_uploads("").await.unwrap();
    assert!(open.is_empty(), "open multipart uploads: {open:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_clients_upload_64_mib_in_every_chunk_size() {
    let Some((endpoint, prefix, store)) = setup("tus_clients").await else {
        return;
    };
    if clients("tus_clients").is_none() {
        return;
    }
    let gateway = start(&endpoint, &prefix, "127.0.0.1:0");
    let dir = tempfile::tempdir().unwrap();
    let data = test_data(64 * MIB, 11);
    let file = dir.path().join("sixty-four.bin");
    std::fs::write(&file, &data).unwrap();
    let chunks = [
        MIB.to_string(),
        (8 * MIB).to_string(),
        "unbounded".to_string(),
    ];
    for client in [Client::TusJs, Client::Tuspy] {
        for chunk in &chunks {
            let mut child = run_client(client, &gateway.url, &file, chunk);
            let seen = events(&mut child, |_| false);
            assert!(
                child.wait().unwrap().success(),
                "{client:?} {chunk}: {seen:?}"
            );
            let last = seen.last().unwrap();
            assert_eq!(last["event"], "success", "{client:?} {chunk}: {seen:?}");
            let url = last["url"].as_str().unwrap();
            let (key, offset) = key_of(url).await;
            assert_eq!(offset, data.len() as u64);
            assert!(key.ends_with("/sixty-four.bin"), "{key}");
            assert!(
                stored(&store, &key).await == data,
                "{client:?} {chunk}: content differs"
            );
        }
    }
    no_multipart_left(&store).await;
}

/// tus-js-client behind a gateway that requires tokens (issue 14): with a token
/// of tenant acme it uploads into acme's prefix; without one it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tus_js_client_uploads_with_a_token_into_its_tenant() {
    let Some((endpoint, prefix, store)) = setup("tus_token").await else {
        return;
    };
    if clients("tus_token").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let secret = b"the tus test's jwt secret, 32 bytes or more";
    let secret_file = dir.path().join("jwt.secret");
    std::fs::write(&secret_file, secret).unwrap();
    let gateway = common::serve_on_minio(
        &endpoint,
        &prefix,
        "127.0.0.1:0",
        &["--jwt-secret-file", secret_file.to_str().unwrap()],
    );
    let data = test_data(3 * MIB, 12);
    let file = dir.path().join("tokened.bin");
    std::fs::write(&file, &data).unwrap();
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 600;
    let token = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({ "sub": "acme", "exp": exp, "ops": ["put", "resume"] }),
        &jsonwebtoken::EncodingKey::from_secret(secret),
    )
    .unwrap();
    // (headers, succeeds)
    let cases = [
        (format!(r#"{{"Authorization": "Bearer {token}"}}"#), true),
        ("{}".to_owned(), false),
    ];
    for (headers, succeeds) in cases {
        let mut child = client_command(Client::TusJs, &gateway.url, &file, &MIB.to_string())
            .env("TUS_HEADERS", &headers)
            .env("TUS_RETRY_DELAYS", "[]")
            .spawn()
            .unwrap();
        let seen = events(&mut child, |_| false);
        assert_eq!(
            child.wait().unwrap().success(),
            succeeds,
            "{headers}: {seen:?}"
        );
        let last = seen.last().unwrap();
        if !succeeds {
            assert_eq!(last["event"], "error", "{seen:?}");
            assert!(
                last["message"].as_str().unwrap().contains("401"),
                "{seen:?}"
            );
            continue;
        }
        let key = last["key"].as_str().unwrap().to_owned();
        assert!(key.starts_with("acme/"), "{key}");
        assert!(stored(&store, &key).await == data, "content differs");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_gateway_restarted_lets_the_client_resume() {
    let Some((endpoint, prefix, store)) = setup("tus_resume").await else {
        return;
    };
    if clients("tus_resume").is_none() {
        return;
    }
    let listen = common::free_loopback_address();
    // The default lock lease, and the client retrying as Uppy does by default:
    // the killed request's lock must lapse within those retries.
    let mut gateway = common::serve_on_minio(&endpoint, &prefix, &listen, &[]);
    let dir = tempfile::tempdir().unwrap();
    let data = test_data(64 * MIB, 12);
    let file = dir.path().join("resumed.bin");
    std::fs::write(&file, &data).unwrap();
    let mut child = client_command(Client::TusJs, &gateway.url, &file, &MIB.to_string())
        .env("TUS_RETRY_DELAYS", UPPY_RETRY_DELAYS)
        .spawn()
        .expect("start the tus client");
    // Let a quarter of it in, then kill the gateway without warning and start it again.
    let seen = events(&mut child, |e| {
        e["offset"].as_u64().is_some_and(|o| o >= 16 * MIB as u64)
    });
    assert!(seen.iter().any(|e| e["event"] == "url"), "{seen:?}");
    gateway.child.kill().unwrap();
    gateway.child.wait().unwrap();
    let killed_at = Instant::now();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _restarted = common::serve_on_minio(&endpoint, &prefix, &listen, &[]);
    let rest = events(&mut child, |_| false);
    assert!(child.wait().unwrap().success(), "{rest:?}");
    let last = rest.last().unwrap();
    assert_eq!(last["event"], "success", "{rest:?}");
    // It resumed rather than starting over: the first offset after the restart is past 16 MiB.
    let first_after = rest.iter().find_map(|e| e["offset"].as_u64()).unwrap();
    assert!(
        first_after > 16 * MIB as u64,
        "restarted from {first_after}"
    );
    let (key, _) = key_of(last["url"].as_str().unwrap()).await;
    assert!(stored(&store, &key).await == data, "content differs");
    no_multipart_left(&store).await;
    eprintln!(
        "resumed {:.1} s after the kill",
        killed_at.elapsed().as_secs_f64()
    );
}

async fn create(client: &reqwest::Client, gateway: &str, length: usize) -> String {
    let response = client
        .post(format!("{gateway}/v1/tus/"))
        .header("tus-resumable", "1.0.0")
        .header("upload-length", length)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    format!(
        "{gateway}{}",
        response.headers()["location"].to_str().unwrap()
    )
}

fn patch(
    client: &reqwest::Client,
    url: &str,
    offset: usize,
    body: reqwest::Body,
) -> reqwest::RequestBuilder {
    client
        .patch(url)
        .header("tus-resumable", "1.0.0")
        .header("content-type", "application/offset+octet-stream")
        .header("upload-offset", offset)
        .body(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_share_uploads_and_one_writer_wins() {
    let Some((endpoint, prefix, store)) = setup("tus_two_gateways").await else {
        return;
    };
    let a = start(&endpoint, &prefix, "127.0.0.1:0");
    let b = start(&endpoint, &prefix, "127.0.0.1:0");
    let client = reqwest::Client::new();

    // PATCH requests of one upload alternate between the gateways.
    let data = test_data(23 * MIB + 5, 13);
    let url = create(&client, &a.url, data.len()).await;
    let path = url.strip_prefix(&a.url).unwrap().to_owned();
    for (i, piece) in data.chunks(3 * MIB).enumerate() {
        let gateway = if i % 2 == 0 { &b.url } else { &a.url };
        let response = patch(
            &client,
            &format!("{gateway}{path}"),
            i * 3 * MIB,
            piece.to_vec().into(),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(response.status(), 204, "chunk {i}");
    }
    let (key, offset) = key_of(&format!("{}{path}", b.url)).await;
    assert_eq!(offset, data.len() as u64);
    assert!(
        stored(&store, &key).await == data,
        "alternating: content differs"
    );

    // Two writers at once: one holds the upload with a slow body, the other is refused quickly.
    let data = test_data(12 * MIB, 14);
    let url = create(&client, &a.url, data.len()).await;
    let path = url.strip_prefix(&a.url).unwrap().to_owned();
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let slow = reqwest::Body::wrap_stream(futures::stream::unfold(receiver, |mut r| async move {
        r.recv().await.map(|item| (item, r))
    }));
    let first = tokio::spawn(
        patch(&client, &url, 0, slow)
            .header("content-length", 6 * MIB)
            .send(),
    );
    sender
        .send(Ok(Bytes::from(data[..MIB].to_vec())))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    let second = patch(
        &client,
        &format!("{}{path}", b.url),
        0,
        data[..6 * MIB].to_vec().into(),
    )
    .send()
    .await
    .unwrap();
    assert!(
        second.status() == 423 || second.status() == 409,
        "{}",
        second.status()
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "refused after {:?}",
        started.elapsed()
    );
    sender
        .send(Ok(Bytes::from(data[MIB..6 * MIB].to_vec())))
        .await
        .unwrap();
    drop(sender);
    let first = first.await.unwrap().unwrap();
    assert_eq!(first.status(), 204);
    let response = patch(
        &client,
        &format!("{}{path}", b.url),
        6 * MIB,
        data[6 * MIB..].to_vec().into(),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(response.status(), 204);
    let (key, _) = key_of(&url).await;
    assert!(
        stored(&store, &key).await == data,
        "concurrent: content differs"
    );
    no_multipart_left(&store).await;
}

/// Concatenation copies each partial into a part without a byte through the
/// gateway (S3's UploadPartCopy, Azure's Put Block From URL up to 100 MiB,
/// GCS's rewrite of a whole object); on every backend the final upload is byte-exact and leaves no
/// multipart upload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concatenation_joins_partials_on_every_store() {
    for backend in BACKENDS {
        let Some(test_store) = TestStore::open(backend, "tus_concat").await else {
            return;
        };
        let gateway = test_store.serve("127.0.0.1:0", &[]);
        let client = reqwest::Client::new();
        let datas = [test_data(6 * MIB, 15), test_data(3 * MIB + 1, 16)];
        let mut paths = Vec::new();
        for data in &datas {
            let response = client
                .post(format!("{}/v1/tus/", gateway.url))
                .header("tus-resumable", "1.0.0")
                .header("upload-length", data.len())
                .header("upload-concat", "partial")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 201, "{backend:?}");
            let path = response.headers()["location"].to_str().unwrap().to_owned();
            let url = format!("{}{path}", gateway.url);
            let done = patch(&client, &url, 0, data.clone().into())
                .send()
                .await
                .unwrap();
            assert_eq!(done.status(), 204, "{backend:?}");
            paths.push(path);
        }
        let response = client
            .post(format!("{}/v1/tus/", gateway.url))
            .header("tus-resumable", "1.0.0")
            .header("upload-concat", format!("final;{}", paths.join(" ")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 201, "{backend:?}");
        let key = response.headers()["x-sluice-key"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(
            stored(test_store.store.as_ref(), &key).await == datas.concat(),
            "{backend:?}: concatenated content differs"
        );
        no_multipart_left(test_store.store.as_ref()).await;
    }
}

/// The protocols whose one long request a crash must not throw away.
#[derive(Debug, Clone, Copy)]
enum LongRequest {
    /// tus: creation with Upload-Length, then one PATCH of everything
    /// (tus-js-client's and Uppy's default `chunkSize: Infinity`).
    TusPatch,
    /// The IETF draft (interop 8): careful creation, then one append with
    /// `Upload-Complete: ?1`.
    DraftAppend,
}

impl LongRequest {
    async fn create(self, client: &reqwest::Client, gateway: &str, length: usize) -> String {
        let request = client.post(format!("{gateway}/v1/tus/"));
        let request = match self {
            LongRequest::TusPatch => request
                .header("tus-resumable", "1.0.0")
                .header("upload-length", length),
            LongRequest::DraftAppend => request
                .header("upload-draft-interop-version", "8")
                .header("upload-complete", "?0")
                .header("upload-length", length)
                .header("content-length", 0),
        };
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 201, "{self:?}: creation");
        response.headers()["location"].to_str().unwrap().to_owned()
    }

    fn append(
        self,
        client: &reqwest::Client,
        url: &str,
        offset: usize,
        length: usize,
        body: reqwest::Body,
    ) -> reqwest::RequestBuilder {
        let request = match self {
            LongRequest::TusPatch => patch(client, url, offset, body),
            LongRequest::DraftAppend => client
                .patch(url)
                .header("upload-draft-interop-version", "8")
                .header("content-type", "application/partial-upload")
                .header("upload-offset", offset)
                .header("upload-complete", "?1")
                .body(body),
        };
        request.header("content-length", length)
    }

    /// The offset HEAD reports (the draft's waits for a dead writer's lease).
    async fn offset(self, client: &reqwest::Client, url: &str) -> u64 {
        self.head(client, url).await["upload-offset"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    async fn head(self, client: &reqwest::Client, url: &str) -> reqwest::header::HeaderMap {
        let request = match self {
            LongRequest::TusPatch => client.head(url).header("tus-resumable", "1.0.0"),
            LongRequest::DraftAppend => {
                client.head(url).header("upload-draft-interop-version", "8")
            }
        };
        let response = request.send().await.unwrap();
        assert!(
            response.status().is_success(),
            "{self:?}: HEAD {}",
            response.status()
        );
        response.headers().clone()
    }
}

/// A body that sends `data` at about 12 MiB/s, as a browser on a fast link does.
fn trickled(data: Vec<u8>) -> reqwest::Body {
    use futures::StreamExt as _;
    let pieces: Vec<Bytes> = data.chunks(MIB).map(Bytes::copy_from_slice).collect();
    let stream = futures::stream::iter(pieces).then(|piece| async move {
        tokio::time::sleep(Duration::from_millis(80)).await;
        Ok::<_, std::io::Error>(piece)
    });
    reqwest::Body::wrap_stream(stream)
}

/// The parts the store holds of the prefix's one open multipart upload.
async fn parts_in_the_bucket(store: &dyn ObjectStore) -> Vec<sluice_store::UploadedPart> {
    let open = store.list_multipart_uploads("").await.unwrap();
    match open.first() {
        Some(upload) => store
            .list_parts(&upload.key, &upload.upload_id)
            .await
            .unwrap_or_default(),
        None => Vec::new(),
    }
}

/// Issue 47: one long request (tus PATCH or draft append of 96 MiB), its
/// gateway SIGKILLed once three parts are in the bucket. Whether the same
/// gateway comes back or another one that was up all along answers, HEAD
/// reports at least what those parts hold less one part (the one whose
/// record write the kill may have cut), the client resumes from there, and
/// the object is byte-exact with no multipart upload left. Default settings.
/// On MinIO, on Azurite and on fake-gcs-server (issue 51: Azure's blocks
/// staged on the blob, GCS's parts as objects composed at the end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_keeps_the_parts_one_long_request_stored() {
    let cases = [
        (LongRequest::TusPatch, false, Backend::Minio),
        (LongRequest::TusPatch, true, Backend::Minio),
        (LongRequest::DraftAppend, false, Backend::Minio),
        (LongRequest::DraftAppend, true, Backend::Minio),
        (LongRequest::TusPatch, false, Backend::Azurite),
        (LongRequest::DraftAppend, true, Backend::Azurite),
        (LongRequest::TusPatch, true, Backend::FakeGcs),
        (LongRequest::DraftAppend, false, Backend::FakeGcs),
    ];
    for (n, (protocol, second_gateway, backend)) in cases.into_iter().enumerate() {
        let case = format!("{protocol:?} on {backend:?}, second gateway: {second_gateway}");
        let Some(test_store) = TestStore::open(backend, "tus_crash_progress").await else {
            return;
        };
        let store = test_store.store.clone();
        let store = store.as_ref();
        let listen = common::free_loopback_address();
        let mut first = test_store.serve(&listen, &[]);
        let other = second_gateway.then(|| test_store.serve("127.0.0.1:0", &[]));
        let client = reqwest::Client::new();
        let data = test_data(96 * MIB, 60 + n as u64);
        let path = protocol.create(&client, &first.url, data.len()).await;
        let long = protocol
            .append(
                &client,
                &format!("{}{path}", first.url),
                0,
                data.len(),
                trickled(data.clone()),
            )
            .send();
        let long = tokio::spawn(long);
        // Wait for three parts in the bucket, then kill the gateway without warning.
        let deadline = Instant::now() + Duration::from_secs(120);
        let stored_parts = loop {
            let parts = parts_in_the_bucket(store).await;
            if parts.len() >= 3 {
                break parts;
            }
            assert!(Instant::now() < deadline, "{case}: {} parts", parts.len());
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        first.child.kill().unwrap();
        first.child.wait().unwrap();
        let _ = long.await;
        let in_bucket: u64 = stored_parts.iter().map(|p| p.size).sum();
        let largest = stored_parts.iter().map(|p| p.size).max().unwrap();
        let (_restarted, gateway) = match &other {
            Some(other) => (None, other.url.clone()),
            None => {
                let restarted = test_store.serve(&listen, &[]);
                let url = restarted.url.clone();
                (Some(restarted), url)
            }
        };
        let url = format!("{gateway}{path}");
        let offset = protocol.offset(&client, &url).await;
        assert!(
            offset >= in_bucket - largest,
            "{case}: HEAD reports {offset} with {} parts ({in_bucket} bytes) in the bucket",
            stored_parts.len()
        );
        assert!(offset <= data.len() as u64, "{case}: {offset}");
        // The client resumes from there; the dead request's lock lapses meanwhile.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let offset = protocol.offset(&client, &url).await as usize;
            let rest = data[offset..].to_vec();
            let response = protocol
                .append(&client, &url, offset, rest.len(), rest.into())
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            if status == 204 || status == 200 || status == 201 {
                break;
            }
            assert!(
                matches!(status, 423 | 409 | 503) && Instant::now() < deadline,
                "{case}: resuming at {offset}: {status}"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let head = protocol.head(&client, &url).await;
        let key = head["x-sluice-key"].to_str().unwrap().to_owned();
        assert!(stored(store, &key).await == data, "{case}: content differs");
        no_multipart_left(store).await;
        eprintln!(
            "{case}: {} parts in the bucket at the kill, HEAD then said {offset}",
            stored_parts.len()
        );
    }
}
