//! Upload events end to end: the built gateway on MinIO, 1,000 uploads of mixed
//! kinds, a real receiver that verifies signatures, fails three requests in ten
//! and is down for 10 s in the middle; then the receiver goes down again, the
//! gateway is killed (SIGKILL) with events still in its outbox, and a second
//! gateway started on the same bucket delivers them. Every completion arrives
//! at least once, recognisable by its id.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use futures::StreamExt;
use serde_json::Value;
use sluice_server::events::signature;

const SECRET: &[u8] = b"the end-to-end events secret, 32 bytes or more";
const UPLOADS: usize = 1000;

#[derive(Default)]
struct Receiver {
    requests: AtomicU64,
    bad_signatures: AtomicU64,
    /// key -> (event id, type, times received)
    events: Mutex<BTreeMap<String, (String, String, u32)>>,
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
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    let event: Value = serde_json::from_slice(&body).unwrap();
    let key = event["data"]["key"].as_str().unwrap().to_owned();
    let id = event["id"].as_str().unwrap().to_owned();
    let kind = event["type"].as_str().unwrap().to_owned();
    let mut events = receiver.events.lock().unwrap();
    let seen = events
        .entry(key.clone())
        .or_insert_with(|| (id.clone(), kind, 0));
    assert_eq!(seen.0, id, "{key}: two events for one completion");
    seen.2 += 1;
    StatusCode::OK
}

/// The receiver on `address` until the sender is dropped (then: connections refused).
async fn receiver_up(
    receiver: Arc<Receiver>,
    address: SocketAddr,
) -> tokio::sync::oneshot::Sender<()> {
    let listener = sluice_server::bind(address).await.unwrap();
    let app = axum::Router::new()
        .route("/events", axum::routing::post(receive))
        .with_state(receiver);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    stop
}

/// Upload `i` through `gateway`: a PUT, a form, or a tus upload in two PATCHes.
async fn upload(client: &reqwest::Client, gateway: &str, i: usize) -> String {
    let body = format!("upload {i} ").repeat(50);
    match i % 3 {
        0 => {
            let key = format!("put/{i}");
            let answer = client
                .put(format!("{gateway}/v1/objects/{key}"))
                .body(body)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 201, "PUT {i}");
            key
        }
        1 => {
            let part = reqwest::multipart::Part::text(body).file_name(format!("form-{i}.txt"));
            let form = reqwest::multipart::Form::new().part("file", part);
            let answer = client
                .post(format!("{gateway}/v1/objects"))
                .multipart(form)
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 201, "form {i}");
            let value: Value = answer.json().await.unwrap();
            value["objects"][0]["key"].as_str().unwrap().to_owned()
        }
        _ => {
            let bytes = body.into_bytes();
            let created = client
                .post(format!("{gateway}/v1/tus/"))
                .header("tus-resumable", "1.0.0")
                .header("upload-length", bytes.len())
                .send()
                .await
                .unwrap();
            assert_eq!(created.status(), 201, "tus {i}");
            let location = created.headers()["location"].to_str().unwrap().to_owned();
            let key = created.headers()["x-sluice-key"]
                .to_str()
                .unwrap()
                .to_owned();
            let half = bytes.len() / 2;
            for (offset, chunk) in [(0, &bytes[..half]), (half, &bytes[half..])] {
                let answer = client
                    .patch(format!("{gateway}{location}"))
                    .header("tus-resumable", "1.0.0")
                    .header("upload-offset", offset)
                    .header("content-type", "application/offset+octet-stream")
                    .body(chunk.to_vec())
                    .send()
                    .await
                    .unwrap();
                assert_eq!(answer.status(), 204, "tus {i} PATCH at {offset}");
            }
            key
        }
    }
}

fn sluice_events(store: &str, endpoint: &str, failed: bool) -> usize {
    let mut args = vec![
        "events",
        "--store",
        store,
        "--endpoint",
        endpoint,
        "--limit",
        "5000",
    ];
    if failed {
        args.push("--failed");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().lines().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_completion_is_delivered_through_receiver_failures_and_a_killed_gateway() {
    let Some((endpoint, prefix, _store)) = common::minio_prefix("events-e2e").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("events.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let secret = secret.to_str().unwrap().to_owned();
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let event_url = format!("http://{address}/events");
    let store = format!("s3://{}/{prefix}", sluice_testkit::minio::TEST_BUCKET);
    let start = || {
        common::serve_on_minio(
            &endpoint,
            &prefix,
            "127.0.0.1:0",
            &[
                "--event-url",
                &event_url,
                "--event-secret-file",
                &secret,
                "--janitor-interval",
                "0s",
            ],
        )
    };
    let receiver = Arc::new(Receiver::default());
    let mut receiver_stop = Some(receiver_up(receiver.clone(), address).await);
    let mut gateway = start();
    let client = reqwest::Client::new();
    let done = Arc::new(AtomicUsize::new(0));

    // The receiver is down for 10 s once 400 uploads are done, and again from
    // upload 900 on (until after the gateway is killed).
    let outages = {
        let (done, receiver) = (done.clone(), receiver.clone());
        let mut stop = receiver_stop.take();
        tokio::spawn(async move {
            while done.load(Ordering::SeqCst) < 400 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            drop(stop.take());
            tokio::time::sleep(Duration::from_secs(10)).await;
            let again = receiver_up(receiver, address).await;
            while done.load(Ordering::SeqCst) < 900 {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            drop(again);
        })
    };
    let url = gateway.url.clone();
    let keys: Vec<String> = futures::stream::iter(0..UPLOADS)
        .map(|i| {
            let (client, url, done) = (client.clone(), url.clone(), done.clone());
            async move {
                let key = upload(&client, &url, i).await;
                done.fetch_add(1, Ordering::SeqCst);
                key
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    outages.await.unwrap();

    // Killed with the receiver down: its last events wait in the outbox.
    gateway.child.kill().unwrap();
    gateway.child.wait().unwrap();
    let pending = sluice_events(&store, &endpoint, false);
    assert!(pending > 0, "no event left to deliver after the kill");
    let delivered_before = receiver.events.lock().unwrap().len();
    eprintln!("killed with {pending} deliveries pending, {delivered_before} events delivered");

    // Another gateway on the bucket delivers them once the receiver is back.
    let _receiver = receiver_up(receiver.clone(), address).await;
    let _second = start();
    let deadline = Instant::now() + Duration::from_secs(180);
    while receiver.events.lock().unwrap().len() < UPLOADS {
        assert!(
            Instant::now() < deadline,
            "{} of {UPLOADS} delivered",
            receiver.events.lock().unwrap().len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let events = receiver.events.lock().unwrap().clone();
    for key in &keys {
        let (_, kind, _) = events
            .get(key)
            .unwrap_or_else(|| panic!("no event for {key}"));
        assert_eq!(kind, "upload.completed");
    }
    let duplicates: u32 = events.values().map(|(_, _, n)| n - 1).sum();
    eprintln!(
        "{UPLOADS} uploads: {} requests to the receiver, {duplicates} duplicate deliveries",
        receiver.requests.load(Ordering::SeqCst)
    );
    assert_eq!(receiver.bad_signatures.load(Ordering::SeqCst), 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while sluice_events(&store, &endpoint, false) > 0 {
        assert!(Instant::now() < deadline, "the outbox is not emptied");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(sluice_events(&store, &endpoint, true), 0);
}
