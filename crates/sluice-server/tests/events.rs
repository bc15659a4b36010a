//! Upload events against a real HTTP receiver on loopback: it verifies every
//! signature, fails three requests in ten and is down (connections refused) for
//! a while; uploads of every kind go through two gateways sharing one store, one
//! of which dies before delivering anything. Every completion and termination
//! must arrive at least once, recognisable by its id.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Request, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;
use sluice_server::events::signature;
use sluice_server::{AppState, ServerConfig};
use sluice_testkit::MemoryStore;
use tower::ServiceExt;

const SECRET: &[u8] = b"the events secret, thirty-two bytes or more";

#[derive(Default)]
struct Receiver {
    requests: AtomicU64,
    /// id -> (type, key, times received)
    events: Mutex<BTreeMap<String, (String, String, u32)>>,
    bad_signatures: AtomicU64,
}

async fn receive(
    State(receiver): State<Arc<Receiver>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let n = receiver.requests.fetch_add(1, Ordering::SeqCst);
    let signed = signature::verify_request(SECRET, &headers, &body, 300);
    if !signed {
        receiver.bad_signatures.fetch_add(1, Ordering::SeqCst);
        return StatusCode::UNAUTHORIZED;
    }
    if n % 10 < 3 {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let event: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        headers["sluice-event-id"].to_str().unwrap(),
        event["id"].as_str().unwrap()
    );
    let mut events = receiver.events.lock().unwrap();
    let entry = events
        .entry(event["id"].as_str().unwrap().to_owned())
        .or_insert_with(|| {
            (
                event["type"].as_str().unwrap().to_owned(),
                event["data"]["key"].as_str().unwrap().to_owned(),
                0,
            )
        });
    entry.2 += 1;
    StatusCode::NO_CONTENT
}

/// Serves the receiver on `address` until the returned sender is dropped.
async fn serve_receiver(
    receiver: Arc<Receiver>,
    address: SocketAddr,
) -> tokio::sync::oneshot::Sender<()> {
    let listener = sluice_server::bind(address).await.unwrap();
    let app = axum::Router::new()
        .route("/hook", axum::routing::post(receive))
        .with_state(receiver);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    stop
}

fn gateway(store: &MemoryStore, url: &str, secret: &std::path::Path) -> AppState {
    let mut config = ServerConfig::default();
    config.janitor.interval = Duration::ZERO;
    config.events.urls = vec![url.to_owned()];
    config.events.secret_file = Some(secret.to_owned());
    config.events.poll_interval = Duration::from_millis(100);
    config.events.timeout = Duration::from_secs(2);
    AppState::new(config, Arc::new(store.clone())).unwrap()
}

async fn send(state: &AppState, request: Request<Body>) -> (StatusCode, HeaderMap) {
    let response = state.router().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let _ = body.collect().await;
    (parts.status, parts.headers)
}

/// One upload of kind `i % 4` (PUT, form, tus in two PATCHes, tus terminated);
/// returns the key and the event type it must produce.
async fn upload(state: &AppState, i: usize) -> (String, &'static str) {
    let tus = |method: &str, uri: &str| {
        Request::builder()
            .method(method)
            .uri(uri)
            .header("tus-resumable", "1.0.0")
    };
    match i % 4 {
        0 => {
            let key = format!("put/{i}");
            let request = Request::builder()
                .method("PUT")
                .uri(format!("/v1/objects/{key}"))
                .body(Body::from(format!("object {i}")))
                .unwrap();
            assert_eq!(send(state, request).await.0, StatusCode::CREATED);
            (key, "upload.completed")
        }
        1 => {
            let form = format!("--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f{i}\"\r\n\r\nform {i}\r\n--B--\r\n");
            let request = Request::builder()
                .method("POST")
                .uri("/v1/objects")
                .header("content-type", "multipart/form-data; boundary=B")
                .body(Body::from(form))
                .unwrap();
            let response = state.router().oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::CREATED);
            let body: Value =
                serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes())
                    .unwrap();
            (
                body["objects"][0]["key"].as_str().unwrap().to_owned(),
                "upload.completed",
            )
        }
        _ => {
            let created = tus("POST", "/v1/tus/")
                .header("upload-length", 10)
                .body(Body::empty())
                .unwrap();
            let (status, headers) = send(state, created).await;
            assert_eq!(status, StatusCode::CREATED);
            let location = headers["location"].to_str().unwrap().to_owned();
            let key = headers["x-sluice-key"].to_str().unwrap().to_owned();
            let patch = |offset: u64, bytes: &'static str| {
                tus("PATCH", &location)
                    .header("upload-offset", offset)
                    .header("content-type", "application/offset+octet-stream")
                    .body(Body::from(bytes))
                    .unwrap()
            };
            assert_eq!(
                send(state, patch(0, "01234")).await.0,
                StatusCode::NO_CONTENT
            );
            if i % 4 == 3 {
                let terminate = tus("DELETE", &location).body(Body::empty()).unwrap();
                assert_eq!(send(state, terminate).await.0, StatusCode::NO_CONTENT);
                return (key, "upload.terminated");
            }
            assert_eq!(
                send(state, patch(5, "56789")).await.0,
                StatusCode::NO_CONTENT
            );
            (key, "upload.completed")
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_completion_is_delivered_at_least_once_through_failures_and_a_dead_gateway() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("events.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let receiver = Arc::new(Receiver::default());
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{address}/hook");
    let store = MemoryStore::new();
    // Gateway A records events but dies before delivering any (no worker);
    // gateway B delivers its own and A's.
    let a = gateway(&store, &url, &secret);
    let b = gateway(&store, &url, &secret);
    let mut expected = BTreeMap::new();
    for i in 0..40 {
        let (key, kind) = upload(&a, i).await;
        expected.insert(key, kind);
    }
    drop(a);
    let delivery = b
        .completion
        .events()
        .spawn_delivery()
        .expect("events are on");
    // The receiver is down while B's first uploads complete, then up.
    for i in 40..100 {
        let (key, kind) = upload(&b, i).await;
        expected.insert(key, kind);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stop = serve_receiver(receiver.clone(), address).await;
    for i in 100..200 {
        let (key, kind) = upload(&b, i).await;
        expected.insert(key, kind);
    }

    let deadline = Instant::now() + Duration::from_secs(90);
    let delivered = loop {
        let delivered: BTreeMap<String, String> = receiver
            .events
            .lock()
            .unwrap()
            .values()
            .map(|(kind, key, _)| (key.clone(), kind.clone()))
            .collect();
        if delivered.len() >= expected.len() || Instant::now() > deadline {
            break delivered;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    for (key, kind) in &expected {
        assert_eq!(delivered.get(key).map(String::as_str), Some(*kind), "{key}");
    }
    let events = receiver.events.lock().unwrap().clone();
    assert_eq!(events.len(), expected.len(), "one id per completion");
    let ids: BTreeSet<&String> = events.keys().collect();
    assert_eq!(ids.len(), events.len());
    assert_eq!(receiver.bad_signatures.load(Ordering::SeqCst), 0);
    assert!(
        receiver.requests.load(Ordering::SeqCst) > expected.len() as u64,
        "the receiver's failures made retries"
    );
    // Delivered entries leave the outbox.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = sluice_store::ObjectStore::list_objects(&store, "_sluice/events/", None, 10)
            .await
            .unwrap()
            .objects;
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "outbox not emptied: {:?}",
            left[0].key
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    delivery.abort();
    drop(stop);
}

#[tokio::test]
async fn events_need_a_secret_and_http_urls() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("events.secret");
    std::fs::write(&secret, SECRET).unwrap();
    // (urls, secret file, the setting named in the error)
    let cases: [(&str, Option<&std::path::Path>, &str); 3] = [
        ("http://127.0.0.1:9/hook", None, "events.secret_file"),
        ("ftp://example/hook", Some(&secret), "events.urls"),
        ("not a url", Some(&secret), "events.urls"),
    ];
    for (url, secret_file, key) in cases {
        let mut config = ServerConfig::default();
        config.events.urls = vec![url.into()];
        config.events.secret_file = secret_file.map(|p| p.to_owned());
        let Err(refused) = AppState::new(config, Arc::new(MemoryStore::new())) else {
            panic!("{url} was accepted");
        };
        assert!(refused.to_string().contains(key), "{refused}");
    }
}

/// Issue 35, hole 6: a receiver that answers with a redirect does not get the
/// signed event sent on to where it points; the delivery counts as failed (and
/// is tried again later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_a_failed_delivery_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("events.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let moved = Arc::new(AtomicU64::new(0));
    let elsewhere = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new()
        .route(
            "/moved",
            axum::routing::post({
                let moved = moved.clone();
                move || async move {
                    moved.fetch_add(1, Ordering::SeqCst);
                    (
                        StatusCode::TEMPORARY_REDIRECT,
                        [(axum::http::header::LOCATION, "/elsewhere")],
                    )
                }
            }),
        )
        .route(
            "/elsewhere",
            axum::routing::post({
                let elsewhere = elsewhere.clone();
                move || async move {
                    elsewhere.fetch_add(1, Ordering::SeqCst);
                    StatusCode::NO_CONTENT
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let store = MemoryStore::new();
    let state = gateway(&store, &format!("http://{address}/moved"), &secret);
    let delivery = state
        .completion
        .events()
        .spawn_delivery()
        .expect("events are on");
    upload(&state, 0).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while moved.load(Ordering::SeqCst) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Time for a followed redirect to arrive, had it been followed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    delivery.abort();
    assert!(
        moved.load(Ordering::SeqCst) >= 1,
        "the event was never sent"
    );
    assert_eq!(
        elsewhere.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
}
