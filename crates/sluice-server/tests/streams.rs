//! `POST /v1/streams/{stream}` without a socket (`Router::oneshot`): answers as
//! a table of request → status and code, records stored only when the whole
//! request is valid, group commit across concurrent requests, and 503 with
//! nothing acknowledged when the store fails.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt;
use sluice_server::routes::StreamAck;
use sluice_server::{AppState, ServerConfig};
use sluice_store::ObjectStore;
use sluice_streams::{Compression, StreamConfig};
use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};
use tower::ServiceExt;

fn config() -> ServerConfig {
    let mut config = ServerConfig::default();
    config.janitor.interval = Duration::ZERO;
    config.streams.insert(
        "clicks".into(),
        StreamConfig {
            flush_age: Duration::from_millis(100),
            max_request_bytes: 1 << 20,
            ..StreamConfig::default()
        },
    );
    config
}

async fn post(
    state: &AppState,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> (StatusCode, axum::http::HeaderMap, serde_json::Value) {
    let mut request = Request::post(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = state
        .router()
        .oneshot(request.body(Body::from(body.into())).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (parts.status, parts.headers, json)
}

async fn stored_records(store: &MemoryStore) -> Vec<String> {
    let mut records = Vec::new();
    for object in store.list_objects("", None, 1000).await.unwrap().objects {
        if object.key.starts_with("_sluice/") {
            continue;
        }
        let data = store.object(&object.key).unwrap();
        let plain = sluice_streams::compress::decompress(Compression::Zstd, &data).unwrap();
        records.extend(String::from_utf8(plain).unwrap().lines().map(String::from));
    }
    records.sort();
    records
}

fn gzip(text: &str) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap()
}

/// (name, path, headers, body, status, error code, records stored)
type Case = (
    &'static str,
    &'static str,
    Vec<(&'static str, &'static str)>,
    Vec<u8>,
    StatusCode,
    Option<&'static str>,
    usize,
);

#[tokio::test]
async fn requests_answer_as_a_table() {
    let ndjson = b"{\"a\":1}\n{\"a\":2}\n".to_vec();
    let cases: Vec<Case> = vec![
        (
            "ndjson",
            "/v1/streams/clicks",
            vec![],
            ndjson.clone(),
            StatusCode::OK,
            None,
            2,
        ),
        (
            "json array",
            "/v1/streams/clicks",
            vec![("content-type", "application/json")],
            b"[{\"a\":1},{\"a\":2},{\"a\":3}]".to_vec(),
            StatusCode::OK,
            None,
            3,
        ),
        (
            "gzip body",
            "/v1/streams/clicks",
            vec![
                ("content-encoding", "gzip"),
                ("content-type", "application/x-ndjson"),
            ],
            gzip("{\"a\":1}\n"),
            StatusCode::OK,
            None,
            1,
        ),
        (
            "an invalid line refuses the request",
            "/v1/streams/clicks",
            vec![],
            b"{\"a\":1}\n{\"a\":\n".to_vec(),
            StatusCode::BAD_REQUEST,
            Some("invalid_records"),
            0,
        ),
        (
            "not an array",
            "/v1/streams/clicks",
            vec![("content-type", "application/json")],
            b"{\"a\":1}".to_vec(),
            StatusCode::BAD_REQUEST,
            Some("bad_request"),
            0,
        ),
        (
            "unknown stream",
            "/v1/streams/nope",
            vec![],
            ndjson.clone(),
            StatusCode::NOT_FOUND,
            Some("no_such_stream"),
            0,
        ),
        (
            "csv",
            "/v1/streams/clicks",
            vec![("content-type", "text/csv")],
            b"a,b\n".to_vec(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Some("unsupported_media_type"),
            0,
        ),
        (
            "brotli",
            "/v1/streams/clicks",
            vec![("content-encoding", "br")],
            ndjson.clone(),
            StatusCode::BAD_REQUEST,
            Some("bad_request"),
            0,
        ),
        (
            "not gzip",
            "/v1/streams/clicks",
            vec![("content-encoding", "gzip")],
            ndjson.clone(),
            StatusCode::BAD_REQUEST,
            Some("bad_request"),
            0,
        ),
        (
            "over the request limit",
            "/v1/streams/clicks",
            vec![],
            vec![b' '; (1 << 20) + 1],
            StatusCode::PAYLOAD_TOO_LARGE,
            Some("too_large"),
            0,
        ),
    ];
    for (name, path, headers, body, status, code, records) in cases {
        let store = MemoryStore::new();
        let state = AppState::new(config(), Arc::new(store.clone())).unwrap();
        let (got, _, json) = post(&state, path, &headers, body).await;
        assert_eq!(got, status, "{name}: {json}");
        assert_eq!(json["error"]["code"].as_str(), code, "{name}: {json}");
        state.streams.close_all().await;
        assert_eq!(stored_records(&store).await.len(), records, "{name}");
        if status == StatusCode::OK {
            let ack: StreamAck = serde_json::from_value(json).unwrap();
            assert_eq!(ack.records, records as u64, "{name}");
            assert_eq!(ack.objects.len(), 1, "{name}");
            assert!(
                ack.objects[0].starts_with("clicks/"),
                "{name}: {:?}",
                ack.objects
            );
        }
    }
}

#[tokio::test]
async fn invalid_lines_are_named() {
    let state = AppState::new(config(), Arc::new(MemoryStore::new())).unwrap();
    let (status, _, json) = post(&state, "/v1/streams/clicks", &[], "1\n2\n\nthree\n4\n").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let message = json["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("line 4: not JSON"), "{message}");
}

#[tokio::test]
async fn concurrent_requests_are_acknowledged_by_one_flush() {
    let store = MemoryStore::new();
    let state = AppState::new(config(), Arc::new(store.clone())).unwrap();
    let requests = (0..16).map(|i| {
        let state = state.clone();
        async move {
            let body = format!("{{\"client\":{i},\"n\":1}}\n{{\"client\":{i},\"n\":2}}\n");
            post(&state, "/v1/streams/clicks", &[], body).await
        }
    });
    let answers = futures::future::join_all(requests).await;
    let mut keys = std::collections::BTreeSet::new();
    for (status, _, json) in answers {
        assert_eq!(status, StatusCode::OK, "{json}");
        let ack: StreamAck = serde_json::from_value(json).unwrap();
        keys.extend(ack.objects);
    }
    assert_eq!(keys.len(), 1, "{keys:?}");
    assert_eq!(stored_records(&store).await.len(), 32);
    let metrics = state.metrics.render(&state.engine);
    for line in [
        "sluice_stream_batches_total{stream=\"clicks\"} 1",
        "sluice_stream_records_total{stream=\"clicks\"} 32",
        "sluice_uploads_completed_total{kind=\"stream_batch\"} 1",
        "sluice_stream_ack_seconds_count{stream=\"clicks\"} 16",
    ] {
        assert!(metrics.contains(line), "{line} missing from\n{metrics}");
    }
}

#[tokio::test]
async fn a_store_outage_acknowledges_nothing() {
    let memory = Arc::new(MemoryStore::new());
    let faulty: Arc<dyn ObjectStore> =
        Arc::new(FaultyStore::new(memory.clone()).inject(Op::Put, None, None, Fault::Denied));
    let state = AppState::new(config(), faulty).unwrap();
    let (status, headers, json) = post(&state, "/v1/streams/clicks", &[], "{\"a\":1}\n").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{json}");
    assert_eq!(json["error"]["code"], "not_stored");
    assert!(headers.contains_key(header::RETRY_AFTER));
    assert!(stored_records(&memory).await.is_empty());
}
