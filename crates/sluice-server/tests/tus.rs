//! The tus routes without a socket: protocol error paths as a table, uploads in
//! chunks of every size against the in-memory store, creation-with-upload, deferred
//! length, checksums, locks, a second gateway on the same store, and expiry.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use base64::Engine as _;
use bytes::Bytes;
use sha1::Digest as _;
use sluice_server::{AppState, ServerConfig};
use sluice_store::ObjectStore;
use sluice_testkit::{test_data, MemoryStore};

mod support;

use support::oneshot::{send, Answer};

const MIB: usize = 1 << 20;

fn config() -> ServerConfig {
    let mut config = ServerConfig {
        max_upload_size: Some(64 * MIB as u64),
        key_template: "{tenant}/{uuid}/{filename}".into(),
        ..ServerConfig::default()
    };
    config.engine.part_size = 5 * MIB as u64;
    config.engine.threshold = 5 * MIB as u64;
    // Many cases send tiny chunks; the pacing has its own test.
    config.tus.small_patches_per_second = 0.0;
    config
}

fn gateway(store: &MemoryStore) -> AppState {
    AppState::new(config(), Arc::new(store.clone()) as Arc<dyn ObjectStore>).unwrap()
}

fn tus(method: &str, uri: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("tus-resumable", "1.0.0")
}

fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

async fn create(state: &AppState, length: u64) -> String {
    let answer = send(
        state,
        tus("POST", "/v1/tus/")
            .header("upload-length", length)
            .header(
                "upload-metadata",
                format!(
                    "filename {},filetype {}",
                    b64("report.pdf"),
                    b64("application/pdf")
                ),
            )
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{:?}", answer.body);
    answer.header("location").unwrap().to_owned()
}

fn patch_request(location: &str, offset: u64, chunk: &[u8]) -> axum::http::request::Builder {
    tus("PATCH", location)
        .header("content-type", "application/offset+octet-stream")
        .header("upload-offset", offset)
        .header("content-length", chunk.len())
}

async fn patch(state: &AppState, location: &str, offset: u64, chunk: &[u8]) -> Answer {
    send(
        state,
        patch_request(location, offset, chunk)
            .body(Body::from(chunk.to_vec()))
            .unwrap(),
    )
    .await
}

async fn head(state: &AppState, location: &str) -> Answer {
    send(state, tus("HEAD", location).body(Body::empty()).unwrap()).await
}

async fn object(state: &AppState, key: &str) -> Bytes {
    let answer = send(
        state,
        Request::get(format!("/v1/objects/{key}"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "GET {key}");
    answer.body
}

/// Uploads `data` in chunks of `chunk` bytes, alternating between `gateways`.
async fn upload_in_chunks(gateways: &[&AppState], data: &[u8], chunk: usize) -> String {
    let location = create(gateways[0], data.len() as u64).await;
    let mut offset = 0;
    for (i, piece) in data.chunks(chunk).enumerate() {
        let answer = patch(
            gateways[i % gateways.len()],
            &location,
            offset as u64,
            piece,
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::NO_CONTENT,
            "chunk {i}: {:?}",
            answer.body
        );
        offset += piece.len();
        assert_eq!(
            answer.header("upload-offset"),
            Some(offset.to_string().as_str())
        );
    }
    let done = head(gateways[0], &location).await;
    assert_eq!(
        done.header("upload-offset"),
        Some(data.len().to_string().as_str())
    );
    done.header("x-sluice-key").unwrap().to_owned()
}

#[tokio::test]
async fn chunk_sizes_table_round_trips() {
    // (object size, chunk size): below, at and above the 5 MiB part size, tiny chunks, one chunk.
    let cases = [
        (12 * MIB + 7, MIB),
        (12 * MIB + 7, 5 * MIB),
        (12 * MIB + 7, 8 * MIB),
        (12 * MIB + 7, 12 * MIB + 7),
        (3 * MIB, 256 * 1024),
        (10 * MIB, 5 * MIB),
        (6 * MIB + 1, 3 * MIB),
        (1, 1),
        // Chunks smaller than the record's tail: carried in it, then in
        // segments that begin with it, then cut into a part with it.
        (7000, 1000),
        (20_000, 3000),
        (5 * MIB + 5000, 3000),
    ];
    for (size, chunk) in cases {
        let store = MemoryStore::new();
        let state = gateway(&store);
        let data = test_data(size, 7);
        let key = upload_in_chunks(&[&state], &data, chunk).await;
        assert!(
            key.starts_with("default/") && key.ends_with("/report.pdf"),
            "{key}"
        );
        // filetype from Upload-Metadata is the object's Content-Type.
        let meta = send(
            &state,
            Request::head(format!("/v1/objects/{key}"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
        assert_eq!(
            meta.header("content-type"),
            Some("application/pdf"),
            "size {size} chunk {chunk}"
        );
        assert_eq!(
            object(&state, &key).await,
            data,
            "size {size} chunk {chunk}"
        );
        assert_eq!(store.open_uploads(), 0, "size {size} chunk {chunk}");
        // Only the record and the lock (its lease ended: released, not deleted,
        // so that a late release can never remove another holder's lock) are left.
        let left = store.list_objects("_sluice/tus/", None, 100).await.unwrap();
        let names: Vec<&str> = left
            .objects
            .iter()
            .map(|o| o.key.rsplit('/').next().unwrap())
            .collect();
        assert_eq!(names, ["lock", "state"], "size {size} chunk {chunk}");
    }
}

#[tokio::test]
async fn two_gateways_on_one_store_serve_alternate_chunks() {
    let store = MemoryStore::new();
    let (a, b) = (gateway(&store), gateway(&store));
    let data = test_data(11 * MIB + 3, 7);
    let key = upload_in_chunks(&[&a, &b], &data, 2 * MIB).await;
    assert_eq!(object(&b, &key).await, data);
}

#[tokio::test]
async fn creation_with_a_small_whole_body_is_one_put() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let data = test_data(100_000, 7);
    let answer = send(
        &state,
        tus("POST", "/v1/tus/")
            .header("upload-length", data.len())
            .header("upload-metadata", format!("filename {}", b64("a.bin")))
            .header("content-type", "application/offset+octet-stream")
            .header("content-length", data.len())
            .body(Body::from(data.clone()))
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED);
    assert_eq!(answer.header("upload-offset"), Some("100000"));
    let key = answer.header("x-sluice-key").unwrap().to_owned();
    assert_eq!(object(&state, &key).await, data);
    assert_eq!(
        store.calls("create"),
        0,
        "no multipart upload for a small whole body"
    );
    // HEAD on the finished upload still answers its final offset.
    let done = head(&state, answer.header("location").unwrap()).await;
    assert_eq!(
        (done.status, done.header("upload-offset")),
        (StatusCode::OK, Some("100000"))
    );
}

#[tokio::test]
async fn creation_with_part_of_the_body_then_patches() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let data = test_data(7 * MIB, 7);
    let first = &data[..3 * MIB];
    let answer = send(
        &state,
        tus("POST", "/v1/tus/")
            .header("upload-length", data.len())
            .header("content-type", "application/offset+octet-stream")
            .header("content-length", first.len())
            .body(Body::from(first.to_vec()))
            .unwrap(),
    )
    .await;
    assert_eq!(
        (answer.status, answer.header("upload-offset")),
        (StatusCode::CREATED, Some("3145728"))
    );
    let location = answer.header("location").unwrap().to_owned();
    assert_eq!(
        patch(&state, &location, 3 * MIB as u64, &data[3 * MIB..])
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let key = head(&state, &location)
        .await
        .header("x-sluice-key")
        .unwrap()
        .to_owned();
    assert_eq!(object(&state, &key).await, data);
}

#[tokio::test]
async fn deferred_length_is_set_by_the_last_patch() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let data = test_data(6 * MIB + 5, 7);
    let answer = send(
        &state,
        tus("POST", "/v1/tus/")
            .header("upload-defer-length", "1")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let location = answer.header("location").unwrap().to_owned();
    assert_eq!(
        head(&state, &location).await.header("upload-defer-length"),
        Some("1")
    );
    assert_eq!(
        patch(&state, &location, 0, &data[..4 * MIB]).await.status,
        StatusCode::NO_CONTENT
    );
    let last = send(
        &state,
        patch_request(&location, 4 * MIB as u64, &data[4 * MIB..])
            .header("upload-length", data.len())
            .body(Body::from(data[4 * MIB..].to_vec()))
            .unwrap(),
    )
    .await;
    assert_eq!(last.status, StatusCode::NO_CONTENT);
    let done = head(&state, &location).await;
    assert_eq!(
        done.header("upload-length"),
        Some(data.len().to_string().as_str())
    );
    assert_eq!(
        object(&state, done.header("x-sluice-key").unwrap()).await,
        data
    );
}

fn sha1_header(data: &[u8]) -> String {
    format!(
        "sha1 {}",
        base64::engine::general_purpose::STANDARD.encode(sha1::Sha1::digest(data))
    )
}

#[tokio::test]
async fn a_chunk_with_a_wrong_checksum_is_discarded() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let data = test_data(6 * MIB, 7);
    let location = create(&state, data.len() as u64).await;
    let (first, second) = data.split_at(3 * MIB);
    let wrong = send(
        &state,
        patch_request(&location, 0, first)
            .header("upload-checksum", sha1_header(second))
            .body(Body::from(first.to_vec()))
            .unwrap(),
    )
    .await;
    assert_eq!(
        (wrong.status.as_u16(), wrong.code().as_str()),
        (460, "checksum_mismatch")
    );
    assert_eq!(
        head(&state, &location).await.header("upload-offset"),
        Some("0")
    );
    for (offset, chunk) in [(0, first), (3 * MIB, second)] {
        let right = send(
            &state,
            patch_request(&location, offset as u64, chunk)
                .header("upload-checksum", sha1_header(chunk))
                .body(Body::from(chunk.to_vec()))
                .unwrap(),
        )
        .await;
        assert_eq!(right.status, StatusCode::NO_CONTENT);
    }
    let key = head(&state, &location)
        .await
        .header("x-sluice-key")
        .unwrap()
        .to_owned();
    assert_eq!(object(&state, &key).await, data);
}

#[tokio::test]
async fn a_second_writer_is_refused_while_the_first_is_writing() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let location = create(&state, 10 * MIB as u64).await;
    // The first PATCH's body arrives slowly, holding the lock.
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let slow_body = Body::from_stream(tokio_stream_from(receiver));
    let first = {
        let state = state.clone();
        let request = tus("PATCH", &location)
            .header("content-type", "application/offset+octet-stream")
            .header("upload-offset", 0)
            .body(slow_body)
            .unwrap();
        tokio::spawn(async move { send(&state, request).await })
    };
    sender
        .send(Ok(Bytes::from(test_data(MIB, 7))))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = patch(&state, &location, 0, &test_data(MIB, 7)).await;
    assert_eq!(
        (second.status, second.code().as_str()),
        (StatusCode::LOCKED, "upload_locked")
    );
    // Clients that retry on 423 (tus-js-client, Uppy) learn when to.
    let retry_after: u64 = second.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=6).contains(&retry_after), "{retry_after}");
    drop(sender);
    let first = first.await.unwrap();
    assert_eq!(
        (first.status, first.header("upload-offset")),
        (StatusCode::NO_CONTENT, Some("1048576"))
    );
}

fn tokio_stream_from(
    mut receiver: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

#[tokio::test]
async fn expired_uploads_are_swept_and_terminated_ones_are_gone() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let location = create(&state, 12 * MIB as u64).await;
    assert_eq!(
        patch(&state, &location, 0, &test_data(6 * MIB, 7))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(store.open_uploads(), 1);
    let later = SystemTime::now() + Duration::from_secs(2 * 24 * 3600);
    let report = sluice_resumable::sweep::sweep(&state.resumable, later, false)
        .await
        .unwrap();
    assert_eq!((report.seen, report.expired), (1, 1));
    assert_eq!(store.open_uploads(), 0);
    assert_eq!(head(&state, &location).await.status, StatusCode::NOT_FOUND);
    assert!(store
        .list_objects("_sluice/", None, 10)
        .await
        .unwrap()
        .objects
        .is_empty());

    let location = create(&state, 12 * MIB as u64).await;
    assert_eq!(
        patch(&state, &location, 0, &test_data(6 * MIB, 7))
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let gone = send(
        &state,
        tus("DELETE", &location).body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(gone.status, StatusCode::NO_CONTENT);
    assert_eq!(store.open_uploads(), 0);
    assert_eq!(head(&state, &location).await.status, StatusCode::NOT_FOUND);
    assert_eq!(
        patch(&state, &location, 6 * MIB as u64, b"x").await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn protocol_error_table() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let location = create(&state, 100).await;
    assert_eq!(
        patch(&state, &location, 0, &[7; 40]).await.status,
        StatusCode::NO_CONTENT
    );
    let unknown = "/v1/tus/0123456789abcdef0123456789abcdef";
    let octet = "application/offset+octet-stream";
    let cases: Vec<(Request<Body>, u16, &str)> = vec![
        (
            Request::post("/v1/tus/")
                .header("upload-length", 5)
                .body(Body::empty())
                .unwrap(),
            412,
            "tus_version_unsupported",
        ),
        (
            Request::post("/v1/tus/")
                .header("tus-resumable", "0.2.2")
                .header("upload-length", 5)
                .body(Body::empty())
                .unwrap(),
            412,
            "tus_version_unsupported",
        ),
        (
            Request::head(location.as_str())
                .body(Body::empty())
                .unwrap(),
            412,
            "",
        ),
        (
            Request::patch(location.as_str())
                .header("content-type", octet)
                .header("upload-offset", 40)
                .body(Body::from("x"))
                .unwrap(),
            412,
            "tus_version_unsupported",
        ),
        (
            tus("POST", "/v1/tus/").body(Body::empty()).unwrap(),
            400,
            "missing_header",
        ),
        (
            tus("POST", "/v1/tus/")
                .header("upload-length", 64 * MIB + 1)
                .body(Body::empty())
                .unwrap(),
            413,
            "too_large",
        ),
        (
            tus("POST", "/v1/tus/")
                .header("upload-length", 5)
                .header("upload-metadata", "filename !!")
                .body(Body::empty())
                .unwrap(),
            400,
            "invalid_metadata",
        ),
        (
            tus("POST", "/v1/tus/")
                .header("upload-length", 5)
                .header("upload-concat", "whole")
                .body(Body::empty())
                .unwrap(),
            400,
            "invalid_header",
        ),
        (
            tus("POST", "/v1/tus/")
                .header("upload-length", 5)
                .header("content-type", "text/plain")
                .header("content-length", 5)
                .body(Body::from("hello"))
                .unwrap(),
            415,
            "unsupported_media_type",
        ),
        (
            tus("PATCH", &location)
                .header("content-type", "text/plain")
                .header("upload-offset", 40)
                .body(Body::from("x"))
                .unwrap(),
            415,
            "unsupported_media_type",
        ),
        (
            patch_request(&location, 0, b"x")
                .body(Body::from("x"))
                .unwrap(),
            409,
            "offset_mismatch",
        ),
        (
            patch_request(&location, 41, b"x")
                .body(Body::from("x"))
                .unwrap(),
            409,
            "offset_mismatch",
        ),
        (
            patch_request(&location, 40, &[0; 61])
                .body(Body::from(vec![0; 61]))
                .unwrap(),
            413,
            "beyond_length",
        ),
        (
            tus("PATCH", &location)
                .header("content-type", octet)
                .header("upload-offset", 40)
                .body(Body::from(vec![0u8; 61]))
                .unwrap(),
            413,
            "beyond_length",
        ),
        (
            patch_request(&location, 40, b"x")
                .header("upload-checksum", "crc32 AAAAAA==")
                .body(Body::from("x"))
                .unwrap(),
            400,
            "checksum_algorithm_unsupported",
        ),
        (
            patch_request(&location, 40, b"x")
                .header("upload-checksum", "sha1 AAAA")
                .body(Body::from("x"))
                .unwrap(),
            400,
            "invalid_header",
        ),
        (
            patch_request(&location, 40, b"x")
                .header("upload-length", 99)
                .body(Body::from("x"))
                .unwrap(),
            400,
            "length_already_set",
        ),
        (
            patch_request(unknown, 0, b"x")
                .body(Body::from("x"))
                .unwrap(),
            404,
            "upload_not_found",
        ),
        (tus("HEAD", unknown).body(Body::empty()).unwrap(), 404, ""),
        (
            tus("DELETE", unknown).body(Body::empty()).unwrap(),
            404,
            "upload_not_found",
        ),
        (
            tus("HEAD", "/v1/tus/..%2F..%2Fetc")
                .body(Body::empty())
                .unwrap(),
            404,
            "",
        ),
        (
            tus("PATCH", "/v1/tus/not-an-id")
                .header("content-type", octet)
                .header("upload-offset", 0)
                .body(Body::from("x"))
                .unwrap(),
            404,
            "upload_not_found",
        ),
        (tus("PUT", &location).body(Body::empty()).unwrap(), 405, ""),
    ];
    for (request, status, code) in cases {
        let what = format!("{} {}", request.method(), request.uri());
        let answer = send(&state, request).await;
        assert_eq!(answer.status.as_u16(), status, "{what}: {:?}", answer.body);
        if !code.is_empty() {
            assert_eq!(answer.code(), code, "{what}");
        }
        assert_eq!(answer.header("tus-resumable"), Some("1.0.0"), "{what}");
    }
    // None of that changed the upload.
    assert_eq!(
        head(&state, &location).await.header("upload-offset"),
        Some("40")
    );
    assert_eq!(
        store
            .list_objects("default/", None, 10)
            .await
            .unwrap()
            .objects
            .len(),
        0
    );
}

#[tokio::test]
async fn options_announce_version_extensions_and_limits() {
    let state = gateway(&MemoryStore::new());
    let answer = send(
        &state,
        Request::options("/v1/tus/").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert_eq!(answer.header("tus-version"), Some("1.0.0"));
    assert_eq!(answer.header("tus-max-size"), Some("67108864"));
    let extensions = answer.header("tus-extension").unwrap();
    for extension in [
        "creation",
        "creation-with-upload",
        "creation-defer-length",
        "termination",
        "checksum",
        "expiration",
        "concatenation",
    ] {
        assert!(extensions.split(',').any(|e| e == extension), "{extension}");
    }
    assert_eq!(
        answer.header("tus-checksum-algorithm"),
        Some("sha1,md5,sha256")
    );
}

#[tokio::test]
async fn reserved_state_keys_are_not_objects() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    create(&state, 10).await;
    let put = send(
        &state,
        Request::put("/v1/objects/_sluice/tus/x")
            .body(Body::from("x"))
            .unwrap(),
    )
    .await;
    assert_eq!(put.status, StatusCode::BAD_REQUEST);
    let list = send(
        &state,
        Request::get("/v1/objects?prefix=")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(
        !String::from_utf8_lossy(&list.body).contains("_sluice"),
        "{:?}",
        list.body
    );
}

#[tokio::test]
async fn cors_lets_configured_origins_read_the_tus_headers() {
    let mut config = config();
    config.cors_origins = vec!["https://app.example".into()];
    let state =
        AppState::new(config, Arc::new(MemoryStore::new()) as Arc<dyn ObjectStore>).unwrap();
    let preflight = send(
        &state,
        Request::options("/v1/tus/")
            .header("origin", "https://app.example")
            .header("access-control-request-method", "POST")
            .header(
                "access-control-request-headers",
                "tus-resumable,upload-length,upload-metadata",
            )
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(preflight.status.is_success(), "{}", preflight.status);
    assert_eq!(
        preflight.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let allowed = preflight
        .header("access-control-allow-headers")
        .unwrap()
        .to_ascii_lowercase();
    assert!(
        allowed.contains("upload-length") && allowed.contains("tus-resumable"),
        "{allowed}"
    );
    assert!(preflight
        .header("access-control-allow-methods")
        .unwrap()
        .contains("PATCH"));

    let created = send(
        &state,
        tus("POST", "/v1/tus/")
            .header("origin", "https://app.example")
            .header("upload-length", 10)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let exposed = created
        .header("access-control-expose-headers")
        .unwrap()
        .to_ascii_lowercase();
    for name in [
        "location",
        "upload-offset",
        "upload-length",
        "upload-expires",
        "tus-resumable",
        "x-sluice-key",
    ] {
        assert!(exposed.contains(name), "{name} not in {exposed}");
    }
    let stranger = send(
        &state,
        tus("POST", "/v1/tus/")
            .header("origin", "https://evil.example")
            .header("upload-length", 10)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(stranger.header("access-control-allow-origin"), None);
}

async fn partial(state: &AppState, data: &[u8]) -> String {
    let answer = send(
        state,
        tus("POST", "/v1/tus/")
            .header("upload-length", data.len())
            .header("upload-concat", "partial")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{:?}", answer.body);
    let location = answer.header("location").unwrap().to_owned();
    for (i, piece) in data.chunks(4 * MIB).enumerate() {
        assert_eq!(
            patch(state, &location, (i * 4 * MIB) as u64, piece)
                .await
                .status,
            StatusCode::NO_CONTENT
        );
    }
    let head = head(state, &location).await;
    assert_eq!(head.header("upload-concat"), Some("partial"));
    assert_eq!(
        head.header("x-sluice-key"),
        None,
        "a partial upload is not an object"
    );
    location
}

/// Each (partial URLs, message) is refused with 400 invalid_concat naming the
/// problem, and nothing is stored.
async fn assert_concatenations_refused(
    state: &AppState,
    store: &MemoryStore,
    cases: Vec<(Vec<&str>, &str)>,
) {
    for (parts, message) in cases {
        let answer = concatenate(state, &parts).await;
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (StatusCode::BAD_REQUEST, "invalid_concat"),
            "{parts:?}"
        );
        assert!(
            String::from_utf8_lossy(&answer.body).contains(message),
            "{parts:?}: {:?}",
            answer.body
        );
    }
    assert!(store
        .list_objects("default/", None, 10)
        .await
        .unwrap()
        .objects
        .is_empty());
}

async fn concatenate(state: &AppState, parts: &[&str]) -> Answer {
    send(
        state,
        tus("POST", "/v1/tus/")
            .header("upload-concat", format!("final;{}", parts.join(" ")))
            .header("upload-metadata", format!("filename {}", b64("joined.bin")))
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn concatenation_copies_parts_server_side_where_sizes_allow() {
    // (partial sizes, copied server-side)
    let cases: Vec<(Vec<usize>, bool)> = vec![
        (vec![6 * MIB, 5 * MIB, 2 * MIB + 1], true),
        (vec![MIB, 6 * MIB], false),
        (vec![7 * MIB], true),
    ];
    for (sizes, copied) in cases {
        let store = MemoryStore::new();
        let state = gateway(&store);
        let datas: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| test_data(n, i as u64 + 40))
            .collect();
        let mut locations = Vec::new();
        for data in &datas {
            locations.push(partial(&state, data).await);
        }
        // A full URL works as well as a path.
        locations[0] = format!("http://gateway.example{}", locations[0]);
        let refs: Vec<&str> = locations.iter().map(String::as_str).collect();
        let answer = concatenate(&state, &refs).await;
        assert_eq!(
            answer.status,
            StatusCode::CREATED,
            "{sizes:?}: {:?}",
            answer.body
        );
        let total: usize = sizes.iter().sum();
        let final_location = answer.header("location").unwrap().to_owned();
        let head = head(&state, &final_location).await;
        assert_eq!(
            head.header("upload-offset"),
            Some(total.to_string().as_str())
        );
        assert!(head
            .header("upload-concat")
            .unwrap()
            .starts_with("final;/v1/tus/"));
        let key = head.header("x-sluice-key").unwrap().to_owned();
        assert!(key.ends_with("/joined.bin"));
        assert!(
            object(&state, &key).await == datas.concat(),
            "{sizes:?}: content differs"
        );
        let copies = store.calls("upload_part_copy");
        assert_eq!(copies > 0, copied, "{sizes:?}: {copies} copies");
        assert_eq!(store.open_uploads(), 0);
        let refused = patch(&state, &final_location, total as u64, b"").await;
        assert_eq!(
            (refused.status, refused.code().as_str()),
            (StatusCode::FORBIDDEN, "final_upload_patched")
        );
    }
}

#[tokio::test]
async fn concatenation_refuses_what_it_cannot_join() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let done = partial(&state, &test_data(10, 50)).await;
    let plain = create(&state, 10).await;
    let unfinished = send(
        &state,
        tus("POST", "/v1/tus/")
            .header("upload-length", 10)
            .header("upload-concat", "partial")
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .header("location")
    .unwrap()
    .to_owned();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![&done, "/v1/tus/0123456789abcdef0123456789abcdef"],
            "there is no upload",
        ),
        (vec![&done, &plain], "is not a partial upload"),
        (vec![&done, &unfinished], "is not complete"),
        (vec!["/files/abc"], "not an upload of this server"),
    ];
    assert_concatenations_refused(&state, &store, cases).await;
}

fn gateway_with(store: &MemoryStore, change: impl FnOnce(&mut ServerConfig)) -> AppState {
    let mut config = config();
    change(&mut config);
    AppState::new(config, Arc::new(store.clone()) as Arc<dyn ObjectStore>).unwrap()
}

/// Seam bug: a PATCH whose request future is dropped (client gone, shutdown) kept
/// the upload locked for the lock timeout; every retry got 423.
#[tokio::test]
async fn a_dropped_patch_releases_the_lock_at_once() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let location = create(&state, 10 * MIB as u64).await;
    let (sender, receiver) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let writer = {
        let state = state.clone();
        let request = tus("PATCH", &location)
            .header("content-type", "application/offset+octet-stream")
            .header("upload-offset", 0)
            .body(Body::from_stream(tokio_stream_from(receiver)))
            .unwrap();
        tokio::spawn(async move { send(&state, request).await })
    };
    sender
        .send(Ok(Bytes::from(test_data(1000, 7))))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        patch(&state, &location, 0, b"x").await.status,
        StatusCode::LOCKED,
        "the writer holds the lock"
    );
    writer.abort(); // the client went away: its request future is dropped
    let _ = writer.await;
    let mut answer = patch(&state, &location, 0, b"x").await;
    for _ in 0..50 {
        if answer.status != StatusCode::LOCKED {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        answer = patch(&state, &location, 0, b"x").await;
    }
    assert_eq!(answer.status, StatusCode::NO_CONTENT, "{:?}", answer.body);
    assert_eq!(answer.header("upload-offset"), Some("1"));
}

/// Seam bug: a PATCH to a malformed upload id wrote a lock object before finding
/// there was no such upload.
#[tokio::test]
async fn an_invalid_upload_id_writes_nothing() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    for id in [
        "not-an-id",
        "0123456789ABCDEF0123456789ABCDEF",
        "..%2F..%2Fx",
    ] {
        let answer = patch(&state, &format!("/v1/tus/{id}"), 0, b"x").await;
        assert_eq!(answer.status, StatusCode::NOT_FOUND, "{id}");
    }
    assert_eq!(store.calls("put"), 0);
}

/// Seam bug: a client sending 1-byte PATCHes cost a store read per carried
/// segment, so PATCH n read n objects. Then each cost five requests, and every
/// 16th another 35 to merge the 1-byte segments.
#[tokio::test]
async fn tiny_patches_cost_a_bounded_number_of_store_requests() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let data = test_data(300, 9);
    let location = create(&state, data.len() as u64).await;
    let requests = || {
        ["get", "put", "delete", "head", "list"]
            .iter()
            .map(|op| store.calls(op))
            .sum::<u64>()
    };
    let mut costs = std::collections::BTreeMap::<u64, usize>::new();
    for (offset, byte) in data.iter().enumerate() {
        let before = requests();
        let answer = patch(&state, &location, offset as u64, &[*byte]).await;
        assert_eq!(answer.status, StatusCode::NO_CONTENT, "{offset}");
        *costs.entry(requests() - before).or_default() += 1;
    }
    // The lock, taken with the hint the last PATCH left and released, and the
    // record written with the byte in it: no segment object, and no read of
    // the record this gateway wrote last. The first PATCH reads it; the last
    // one stores the object as well.
    assert_eq!(costs.get(&3), Some(&(data.len() - 2)), "{costs:?}");
    assert_eq!(costs.get(&4), Some(&2), "{costs:?}");
    let key = head(&state, &location)
        .await
        .header("x-sluice-key")
        .unwrap()
        .to_owned();
    assert_eq!(object(&state, &key).await, data);
    let left = store.list_objects("_sluice/tus/", None, 100).await.unwrap();
    assert!(left.objects.len() <= 2, "{:?}", left.objects);
}

/// Seam bug: `Upload-Length: 0` with a 1-byte body answered 201, and every HEAD
/// after it 500, forever.
#[tokio::test]
async fn a_body_past_the_upload_length_creates_nothing() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let cases: [(u64, &[u8], bool); 3] = [(0, b"x", true), (3, b"abcd", true), (3, b"abcd", false)];
    for (length, body, declared) in cases {
        let request = tus("POST", "/v1/tus/")
            .header("upload-length", length)
            .header("content-type", "application/offset+octet-stream");
        let request = if declared {
            request.header("content-length", body.len())
        } else {
            request.header("transfer-encoding", "chunked")
        };
        let stream = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(body.to_vec()))]);
        let answer = send(&state, request.body(Body::from_stream(stream)).unwrap()).await;
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (StatusCode::PAYLOAD_TOO_LARGE, "beyond_length"),
            "length {length}, {} bytes, declared {declared}",
            body.len()
        );
    }
    assert!(store
        .list_objects("", None, 10)
        .await
        .unwrap()
        .objects
        .is_empty());
    assert_eq!(store.open_uploads(), 0);
}

#[tokio::test]
async fn a_zero_length_upload_is_its_empty_object_at_creation() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let location = create(&state, 0).await;
    let head = head(&state, &location).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(
        (head.header("upload-offset"), head.header("upload-length")),
        (Some("0"), Some("0"))
    );
    let key = head.header("x-sluice-key").unwrap().to_owned();
    assert!(object(&state, &key).await.is_empty());
}

/// Seam bug: an upload whose bytes are all in but whose object is missing (a
/// crash between the two, recorded before phases existed) was kept forever.
#[tokio::test]
async fn the_janitor_finishes_an_upload_whose_bytes_are_all_in() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let id = "0123456789abcdef0123456789abcdef";
    let data = test_data(1000, 3);
    store
        .put_object(sluice_store::PutRequest::new(
            format!("_sluice/tus/{id}/seg-0"),
            Bytes::from(data.clone()),
        ))
        .await
        .unwrap();
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // A record as the gateway wrote them before phases: all bytes in, no object.
    let record = serde_json::json!({
        "upload": {"id": id, "length": 1000, "offset": 1000, "metadata": {},
                   "concat": {"kind": "none"}, "created": now, "expires": now + 3600},
        "key": "stuck/object.bin",
        "segments": [{"number": 0, "len": 1000}],
        "next_segment": 1,
    });
    store
        .put_object(sluice_store::PutRequest::new(
            format!("_sluice/tus/{id}/state"),
            Bytes::from(serde_json::to_vec(&record).unwrap()),
        ))
        .await
        .unwrap();
    let report = sluice_resumable::sweep::sweep(&state.resumable, SystemTime::now(), false)
        .await
        .unwrap();
    assert_eq!(report.finished.len(), 1);
    assert_eq!(object(&state, "stuck/object.bin").await, data);
    let head = head(&state, &format!("/v1/tus/{id}")).await;
    assert_eq!(head.header("upload-offset"), Some("1000"));
}

/// Seam bug: concatenation accepted the same partial twice and any number of them.
#[tokio::test]
async fn concatenation_refuses_duplicates_and_too_many_partials() {
    let store = MemoryStore::new();
    let state = gateway_with(&store, |c| c.tus.max_partials = 2);
    let done = partial(&state, &test_data(10, 50)).await;
    let other = partial(&state, &test_data(10, 51)).await;
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![&done, &done], "named twice"),
        (vec![&done, &other, &done], "at most 2 partial uploads"),
    ];
    assert_concatenations_refused(&state, &store, cases).await;
}

/// Seam bug: a concatenation whose request was dropped left its multipart upload.
#[tokio::test]
async fn a_dropped_concatenation_aborts_its_multipart_upload() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let first = partial(&state, &test_data(6 * MIB, 60)).await;
    let second = partial(&state, &test_data(6 * MIB, 61)).await;
    let slow = store.clone().with_latency(Duration::from_millis(300));
    let slow_state = gateway(&slow);
    let joining = {
        let (first, second) = (first.clone(), second.clone());
        tokio::spawn(async move { concatenate(&slow_state, &[&first, &second]).await })
    };
    // Partials read, the multipart upload created, parts being copied.
    for _ in 0..100 {
        if store.open_uploads() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.open_uploads(), 1);
    joining.abort();
    let _ = joining.await;
    state.engine.finish_background().await;
    for _ in 0..100 {
        if store.open_uploads() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.open_uploads(), 0);
}

/// The completion point: one upload of each kind completes exactly once, and
/// reading them (HEAD included) completes nothing.
#[tokio::test]
async fn one_upload_of_each_kind_completes_exactly_once() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    // PUT
    let put = send(
        &state,
        Request::put("/v1/objects/kinds/put.bin")
            .body(Body::from(test_data(1000, 1)))
            .unwrap(),
    )
    .await;
    assert_eq!(put.status, StatusCode::CREATED);
    // form POST
    let boundary = "sluiceboundary";
    let form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"form.bin\"\r\n\r\nform bytes\r\n--{boundary}--\r\n"
    );
    let posted = send(
        &state,
        Request::post("/v1/objects")
            .header(
                "content-type",
                format!("multipart/form-data; boundary={boundary}"),
            )
            .body(Body::from(form))
            .unwrap(),
    )
    .await;
    assert_eq!(posted.status, StatusCode::CREATED, "{:?}", posted.body);
    // tus creation-with-upload
    let whole = test_data(100, 2);
    let created = send(
        &state,
        tus("POST", "/v1/tus/")
            .header("upload-length", whole.len())
            .header("content-type", "application/offset+octet-stream")
            .header("content-length", whole.len())
            .body(Body::from(whole))
            .unwrap(),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    // tus PATCH
    let location = create(&state, 10).await;
    assert_eq!(
        patch(&state, &location, 0, &test_data(10, 3)).await.status,
        StatusCode::NO_CONTENT
    );
    // concatenation (its partials are hidden state, not completions)
    let first = partial(&state, &test_data(10, 4)).await;
    let second = partial(&state, &test_data(10, 5)).await;
    assert_eq!(
        concatenate(&state, &[&first, &second]).await.status,
        StatusCode::CREATED
    );
    for location in [
        &location,
        &first,
        &second,
        created.header("location").unwrap(),
    ] {
        assert_eq!(head(&state, location).await.status, StatusCode::OK);
    }
    let metrics = state.metrics.render(&state.engine);
    let completed: Vec<(String, u64)> = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_uploads_completed_total{"))
        .map(|l| {
            let (labels, value) = l.rsplit_once(' ').unwrap();
            (labels.to_owned(), value.parse().unwrap())
        })
        .collect();
    let total: u64 = completed.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 5, "{completed:?}");
    for kind in [
        "put",
        "form",
        "tus_creation",
        "tus_patch",
        "tus_concatenation",
    ] {
        assert!(
            completed
                .iter()
                .any(|(l, n)| l.contains(&format!("kind=\"{kind}\"")) && *n == 1),
            "{kind}: {completed:?}"
        );
    }
}

/// Review finding: a first part that failed took the carried bytes with it (the
/// offset went back and the segments were deleted). Nothing may move then.
#[tokio::test]
async fn a_failed_part_keeps_the_carried_bytes_and_the_offset() {
    let memory = MemoryStore::new();
    let faulty = sluice_testkit::FaultyStore::new(Arc::new(memory.clone())).inject(
        sluice_testkit::Op::UploadPart,
        Some(1),
        Some(1),
        sluice_testkit::Fault::Denied,
    );
    let state = AppState::new(config(), Arc::new(faulty) as Arc<dyn ObjectStore>).unwrap();
    let data = test_data(9 * MIB, 31);
    let location = create(&state, data.len() as u64).await;
    let third = 3 * MIB;
    assert_eq!(
        patch(&state, &location, 0, &data[..third]).await.status,
        StatusCode::NO_CONTENT
    );
    // 3 MiB carried + 3 MiB: a part is cut, and the store refuses it.
    let refused = patch(&state, &location, third as u64, &data[third..2 * third]).await;
    assert!(refused.status.is_server_error(), "{:?}", refused.status);
    assert_eq!(
        head(&state, &location).await.header("upload-offset"),
        Some("3145728")
    );
    // The client sends the chunk again and goes on.
    assert_eq!(
        patch(&state, &location, third as u64, &data[third..2 * third])
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        patch(&state, &location, 2 * third as u64, &data[2 * third..])
            .await
            .status,
        StatusCode::NO_CONTENT
    );
    let key = head(&state, &location)
        .await
        .header("x-sluice-key")
        .unwrap()
        .to_owned();
    assert!(object(&state, &key).await == data, "content differs");
}

/// Review finding: a body that failed after its last byte left the record at
/// "all bytes in" without the object. The object is completed instead.
#[tokio::test]
async fn a_body_failing_after_its_last_byte_still_completes_the_object() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let data = test_data(2 * MIB, 32);
    let location = create(&state, data.len() as u64).await;
    let chunks = vec![
        Ok(Bytes::from(data.clone())),
        Err(std::io::Error::other("connection reset")),
    ];
    let request = tus("PATCH", &location)
        .header("content-type", "application/offset+octet-stream")
        .header("upload-offset", 0)
        .body(Body::from_stream(futures::stream::iter(chunks)))
        .unwrap();
    send(&state, request).await;
    let head = head(&state, &location).await;
    assert_eq!(head.header("upload-offset"), Some("2097152"));
    let key = head.header("x-sluice-key").unwrap().to_owned();
    assert!(
        object(&state, &key).await == data,
        "the object is missing or differs"
    );
}

/// Review finding: a request that completed the object and was stopped before
/// its record said so left the upload stuck. The client's retry finds it.
#[tokio::test]
async fn an_object_completed_by_an_interrupted_request_is_found_again() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let data = test_data(12 * MIB, 33);
    let location = create(&state, data.len() as u64).await;
    let ten = 10 * MIB;
    assert_eq!(
        patch(&state, &location, 0, &data[..ten]).await.status,
        StatusCode::NO_CONTENT
    );
    // What the interrupted request did: the last part stored, the upload completed.
    let id = location.rsplit('/').next().unwrap();
    let record: serde_json::Value =
        serde_json::from_slice(&store.object(&format!("_sluice/tus/{id}/state")).unwrap()).unwrap();
    let key = record["key"].as_str().unwrap().to_owned();
    let upload_id = record["multipart_id"].as_str().unwrap().to_owned();
    let last = store
        .upload_part(sluice_store::UploadPartRequest {
            key: key.clone(),
            upload_id: upload_id.clone(),
            part_number: 3,
            body: sluice_store::Body::Bytes(Bytes::from(data[ten..].to_vec())),
            checksum: sluice_store::PartChecksum::None,
        })
        .await
        .unwrap();
    let mut parts = store.list_parts(&key, &upload_id).await.unwrap();
    parts.retain(|p| p.part_number < 3);
    parts.push(last);
    store
        .complete_multipart_upload(sluice_store::CompleteMultipartRequest {
            key: key.clone(),
            upload_id,
            parts,
            checksum: None,
            condition: None,
        })
        .await
        .unwrap();
    // The client never heard back and sends the last chunk again.
    let retried = patch(&state, &location, ten as u64, &data[ten..]).await;
    assert_eq!(retried.status, StatusCode::NO_CONTENT, "{:?}", retried.body);
    assert_eq!(retried.header("upload-offset"), Some("12582912"));
    assert!(object(&state, &key).await == data, "content differs");
    let metrics = state.metrics.render(&state.engine);
    assert!(
        metrics.contains("sluice_uploads_completed_total{kind=\"tus_patch\"} 1"),
        "{metrics}"
    );
}

/// A client PATCHing 1 byte at a time costs the store three requests per byte:
/// past a burst of 8, its answers wait so that it makes 4 such PATCHes a second.
/// A chunk of 64 KiB, the last one, and another upload never wait.
#[tokio::test(start_paused = true)]
async fn small_patches_are_paced_per_upload() {
    let store = MemoryStore::new();
    let state = gateway_with(&store, |config| {
        config.tus.small_patches_per_second = 4.0;
    });
    let data = test_data(64 * 1024 + 21, 5);
    let location = create(&state, data.len() as u64).await;
    let started = tokio::time::Instant::now();
    for offset in 0..20 {
        let answer = patch(&state, &location, offset, &data[offset as usize..][..1]).await;
        assert_eq!(answer.status, StatusCode::NO_CONTENT, "{offset}");
    }
    let took = started.elapsed();
    // 12 PATCHes past the burst of 8, a quarter of a second each.
    assert!(
        (Duration::from_millis(2950)..Duration::from_millis(3100)).contains(&took),
        "20 1-byte PATCHes took {took:?}"
    );

    let other = create(&state, 10).await;
    let started = tokio::time::Instant::now();
    let answer = patch(&state, &other, 0, b"x").await;
    assert_eq!(answer.status, StatusCode::NO_CONTENT);
    assert!(started.elapsed() < Duration::from_millis(10));

    let started = tokio::time::Instant::now();
    let big = patch(&state, &location, 20, &data[20..20 + 64 * 1024]).await;
    assert_eq!(big.status, StatusCode::NO_CONTENT);
    let last = patch(&state, &location, 20 + 64 * 1024, &data[20 + 64 * 1024..]).await;
    assert_eq!(last.status, StatusCode::NO_CONTENT);
    assert!(started.elapsed() < Duration::from_millis(10));
    let key = last.header("x-sluice-key").unwrap().to_owned();
    assert_eq!(object(&state, &key).await, data);

    // The same trickle as bodies cut off after their first byte: each byte is
    // kept and answered with an error, and paced all the same.
    let cut = create(&state, 100).await;
    let started = tokio::time::Instant::now();
    for offset in 0..20u64 {
        let chunks = vec![
            Ok(Bytes::from_static(b"c")),
            Err(std::io::Error::other("connection reset")),
        ];
        let request = tus("PATCH", &cut)
            .header("content-type", "application/offset+octet-stream")
            .header("upload-offset", offset)
            .body(Body::from_stream(futures::stream::iter(chunks)))
            .unwrap();
        let answer = send(&state, request).await;
        assert!(
            answer.status.is_client_error(),
            "{offset}: {}",
            answer.status
        );
    }
    let took = started.elapsed();
    assert_eq!(head(&state, &cut).await.header("upload-offset"), Some("20"));
    assert!(
        took >= Duration::from_millis(2950),
        "20 cut-off 1-byte PATCHes took {took:?}"
    );

    let metrics = send(
        &state,
        Request::get("/metrics").body(Body::empty()).unwrap(),
    )
    .await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(
        text.contains("sluice_tus_small_patches_waited_total 24\n"),
        "{text}"
    );
}
