//! No object without its event, through crashes: the built gateway on MinIO,
//! with default settings, takes uploads of every kind (PUT small and multipart,
//! form, tus with a final PATCH, tus concatenation, direct multipart through
//! `/s3/*`, stream batches, tus uploads their clients terminate, and
//! `sluice ingest` batches, one run of it SIGKILLed midway) from
//! clients that resume or retry as real ones do,
//! while it is SIGKILLed at random moments and at targeted ones (a few ms into a
//! final PATCH, a multipart PUT's completion, a direct completion, a batch) and
//! restarted on the same port each time. A real receiver verifies every
//! signature and fails a third of the deliveries. At the end:
//!
//! - every object in the bucket (outside `_sluice/`) has a delivered,
//!   correctly signed `upload.completed` event, under exactly one id;
//! - every event names an object that exists (nothing is deleted here);
//! - every termination answered has its `upload.terminated` event, under one id;
//! - every 2xx a client got names an object that exists.
//!
//! `SLUICE_CRASH_UPLOADS` and `SLUICE_CRASH_KILLS` make a longer run.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::{json, Value};
use sluice_server::events::signature;
use sluice_store::ObjectStore;
use tokio::sync::Notify;

const SECRET: &[u8] = b"the crash test's events secret, 32 bytes or more";

fn setting(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Of one key: the event ids and the upload kinds its events named.
type Seen = (BTreeSet<String>, BTreeSet<String>);

#[derive(Default)]
struct Receiver {
    requests: AtomicU64,
    bad_signatures: AtomicU64,
    events: Mutex<BTreeMap<String, Seen>>,
    /// `upload.terminated` event ids by tus upload id.
    terminations: Mutex<BTreeMap<String, BTreeSet<String>>>,
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
    if n % 3 == 0 {
        return StatusCode::INTERNAL_SERVER_ERROR;
    }
    let event: Value = serde_json::from_slice(&body).unwrap();
    if event["type"] == "upload.terminated" {
        let upload = event["data"]["upload_id"].as_str().unwrap().to_owned();
        let mut terminations = receiver.terminations.lock().unwrap();
        let ids = terminations.entry(upload).or_default();
        ids.insert(event["id"].as_str().unwrap().to_owned());
        return StatusCode::NO_CONTENT;
    }
    if event["type"] != "upload.completed" {
        return StatusCode::NO_CONTENT;
    }
    let key = event["data"]["key"].as_str().unwrap().to_owned();
    let mut events = receiver.events.lock().unwrap();
    let seen = events.entry(key).or_default();
    seen.0.insert(event["id"].as_str().unwrap().to_owned());
    seen.1
        .insert(event["data"]["upload_kind"].as_str().unwrap().to_owned());
    StatusCode::NO_CONTENT
}

async fn receiver_up(receiver: Arc<Receiver>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/events", axum::routing::post(receive))
        .with_state(receiver);
    tokio::spawn(async move { axum::serve(listener, app).await });
    address
}

/// What the clients and the killer share.
struct Run {
    gateway: String,
    client: reqwest::Client,
    /// A client is about to send a request that finishes an upload.
    finishing: Notify,
    /// Keys named by 2xx answers, with the kind of upload.
    acknowledged: Mutex<Vec<(String, &'static str)>>,
    /// tus uploads whose termination was answered (204, or 404 to a DELETE
    /// sent again after the first one's answer was lost).
    terminated: Mutex<Vec<String>>,
    /// Requests that failed on a dead gateway (connection refused or cut, 5xx).
    failures: AtomicUsize,
    stop_killing: AtomicBool,
}

/// A step failed: the gateway died under it, or answered 5xx while starting.
#[derive(Debug)]
struct Retry;

impl Run {
    /// Waits a little before a step is tried again.
    async fn pause(&self) {
        self.failures.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    fn acknowledge(&self, key: String, kind: &'static str) {
        self.acknowledged.lock().unwrap().push((key, kind));
    }

    /// Sends `request`; a transport error or a 5xx (a gateway killed, or one
    /// starting) is a `Retry`.
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response, Retry> {
        match request.send().await {
            Ok(answer) if answer.status().is_server_error() => Err(Retry),
            Ok(answer) => Ok(answer),
            Err(_) => Err(Retry),
        }
    }

    /// `step` until it gives an answer (at most two minutes).
    async fn until<T, F: std::future::Future<Output = Result<T, Retry>>>(
        &self,
        mut step: impl FnMut() -> F,
    ) -> T {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            match step().await {
                Ok(done) => return done,
                Err(Retry) => {
                    assert!(
                        Instant::now() < deadline,
                        "a step kept failing for 2 minutes"
                    );
                    self.pause().await;
                }
            }
        }
    }
}

fn tus(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request.header("tus-resumable", "1.0.0")
}

async fn json_of(answer: reqwest::Response) -> Result<Value, Retry> {
    answer.json().await.map_err(|_| Retry)
}

/// Upload `i`, of kind `i % 8` (a large PUT every 40th).
async fn upload(run: &Run, i: usize) {
    let gateway = &run.gateway;
    let body = format!("upload {i} ").repeat(200 + i % 300).into_bytes();
    match i % 8 {
        7 => tus_termination(run, i, body).await,
        0 => {
            let (key, body) = match i % 40 {
                0 => (format!("crash/large/{i}"), vec![i as u8; 17 << 20]),
                _ => (format!("crash/put/{i}"), body),
            };
            if body.len() > 1 << 20 {
                run.finishing.notify_one();
            }
            run.until(|| async {
                let answer = run
                    .send(
                        run.client
                            .put(format!("{gateway}/v1/objects/{key}"))
                            .body(body.clone()),
                    )
                    .await?;
                assert_eq!(answer.status(), 201, "PUT {key}");
                Ok(())
            })
            .await;
            run.acknowledge(key, "put");
        }
        1 => {
            let key = run
                .until(|| async {
                    let part = reqwest::multipart::Part::bytes(body.clone())
                        .file_name(format!("form-{i}.txt"));
                    let form = reqwest::multipart::Form::new().part("file", part);
                    let answer = run
                        .send(
                            run.client
                                .post(format!("{gateway}/v1/objects"))
                                .multipart(form),
                        )
                        .await?;
                    assert_eq!(answer.status(), 201, "form {i}");
                    Ok(json_of(answer).await?["objects"][0]["key"]
                        .as_str()
                        .unwrap()
                        .to_owned())
                })
                .await;
            run.acknowledge(key, "form");
        }
        2 | 3 => tus_upload(run, i, body).await,
        4 => tus_concatenation(run, i, body).await,
        5 => direct_multipart(run, i, body).await,
        _ => {
            let records: String = (0..20)
                .map(|r| format!("{{\"upload\":{i},\"record\":{r}}}\n"))
                .collect();
            run.finishing.notify_one();
            run.until(|| async {
                let answer = run
                    .send(
                        run.client
                            .post(format!("{gateway}/v1/streams/clicks"))
                            .body(records.clone()),
                    )
                    .await?;
                assert!(
                    answer.status().is_success(),
                    "stream {i}: {}",
                    answer.status()
                );
                Ok(())
            })
            .await;
        }
    }
}

/// A tus upload in two PATCHes, resumed from HEAD after any failure.
async fn tus_upload(run: &Run, i: usize, body: Vec<u8>) {
    let gateway = &run.gateway;
    let length = body.len();
    let (location, key) = run
        .until(|| async {
            let answer = run
                .send(
                    tus(run.client.post(format!("{gateway}/v1/tus/")))
                        .header("upload-length", length),
                )
                .await?;
            assert_eq!(answer.status(), 201, "tus {i}");
            let header = |name: &str| answer.headers()[name].to_str().unwrap().to_owned();
            Ok((header("location"), header("x-sluice-key")))
        })
        .await;
    let url = format!("{gateway}{location}");
    let half = length / 2;
    let mut offset = 0usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    while offset < length {
        assert!(Instant::now() < deadline, "tus {i} did not finish");
        let end = if offset < half { half } else { length };
        if end == length {
            run.finishing.notify_one();
        }
        let patched = run
            .send(
                tus(run.client.patch(&url))
                    .header("upload-offset", offset)
                    .header("content-type", "application/offset+octet-stream")
                    .body(body[offset..end].to_vec()),
            )
            .await;
        match patched {
            Ok(answer) if answer.status() == 204 => offset = end,
            Ok(answer) if answer.status() == 409 || answer.status() == 423 => {
                // An offset that moved, or the lock of a killed request: ask where it is.
                run.pause().await;
                offset = head_offset(run, &url).await;
            }
            Ok(answer) => panic!("tus {i} PATCH at {offset}: {}", answer.status()),
            Err(Retry) => {
                run.pause().await;
                offset = head_offset(run, &url).await;
            }
        }
    }
    run.acknowledge(key, "tus");
}

/// A tus upload given half its bytes, then terminated by its client (DELETE
/// sent again until answered): its `upload.terminated` event must come, under
/// one id, whatever the kills cut.
async fn tus_termination(run: &Run, i: usize, body: Vec<u8>) {
    let gateway = &run.gateway;
    let location = run
        .until(|| async {
            let answer = run
                .send(
                    tus(run.client.post(format!("{gateway}/v1/tus/")))
                        .header("upload-length", body.len()),
                )
                .await?;
            assert_eq!(answer.status(), 201, "tus {i} to terminate");
            Ok(answer.headers()["location"].to_str().unwrap().to_owned())
        })
        .await;
    let url = format!("{gateway}{location}");
    let half = body.len() / 2;
    // The first half, once (a kill may cut it: what came is kept).
    let _ = run
        .send(
            tus(run.client.patch(&url))
                .header("upload-offset", 0)
                .header("content-type", "application/offset+octet-stream")
                .body(body[..half].to_vec()),
        )
        .await;
    run.finishing.notify_one();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        assert!(Instant::now() < deadline, "tus {i} was never terminated");
        match run.send(tus(run.client.delete(&url))).await {
            Ok(answer) if answer.status() == 204 || answer.status() == 404 => break,
            // The lock of a killed request: it lapses.
            Ok(answer) if answer.status() == 423 => run.pause().await,
            Ok(answer) => panic!("tus {i} DELETE: {}", answer.status()),
            Err(Retry) => run.pause().await,
        }
    }
    let id = location.rsplit('/').next().unwrap().to_owned();
    run.terminated.lock().unwrap().push(id);
}

/// Runs `sluice ingest --stream ingested` into `(store, endpoint, event url,
/// secret file)` twice: the first run SIGKILLed once a batch is in the bucket,
/// the second fed to its end. The batches stored.
async fn ingest_killed_then_whole(
    (location, endpoint, event_url, secret): &(String, String, String, String),
    store: &sluice_store::s3::S3Store,
) -> usize {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let ingest = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_sluice"));
        command
            .args(["ingest", "--stream", "ingested", "--flush-records", "500"])
            .args(["--store", location, "--endpoint", endpoint])
            .args(["--event-url", event_url, "--event-secret-file", secret])
            .env("SLUICE_LOG", "error")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        command
    };
    let batches = || async {
        store
            .list_objects("ingested/", None, 1000)
            .await
            .unwrap()
            .objects
            .len()
    };
    let lines = |from: u64| -> Vec<u8> {
        (from..from + 5_000)
            .map(|n| format!("{{\"n\":{n}}}\n"))
            .collect::<String>()
            .into_bytes()
    };
    // Fed 5,000 records every 200 ms until killed.
    let mut killed = ingest().spawn().unwrap();
    let mut stdin = killed.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for chunk in 0..200u64 {
            if stdin.write_all(&lines(chunk * 5_000)).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while batches().await == 0 {
        assert!(Instant::now() < deadline, "the first ingest stored nothing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    killed.kill().unwrap();
    killed.wait().unwrap();
    feeder.join().unwrap();
    let mut whole = ingest().spawn().unwrap();
    let mut stdin = whole.stdin.take().unwrap();
    stdin.write_all(&lines(1_000_000)).unwrap();
    drop(stdin);
    assert!(whole.wait().unwrap().success(), "the second ingest failed");
    batches().await
}

/// Where a tus upload stands, once the gateway answers.
async fn head_offset(run: &Run, url: &str) -> usize {
    run.until(|| async {
        let answer = run.send(tus(run.client.head(url))).await?;
        match answer.status().as_u16() {
            200 => Ok(answer.headers()["upload-offset"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap()),
            423 => Err(Retry),
            other => panic!("HEAD {url}: {other}"),
        }
    })
    .await
}

/// Two partial uploads sent whole with their creation, then their final upload.
async fn tus_concatenation(run: &Run, i: usize, body: Vec<u8>) {
    let gateway = &run.gateway;
    let half = body.len() / 2;
    let mut partials = Vec::new();
    for piece in [&body[..half], &body[half..]] {
        let location = run
            .until(|| async {
                let answer = run
                    .send(
                        tus(run.client.post(format!("{gateway}/v1/tus/")))
                            .header("upload-length", piece.len())
                            .header("upload-concat", "partial")
                            .header("content-type", "application/offset+octet-stream")
                            .body(piece.to_vec()),
                    )
                    .await?;
                assert_eq!(answer.status(), 201, "partial of {i}");
                assert_eq!(
                    answer.headers()["upload-offset"].to_str().unwrap(),
                    piece.len().to_string(),
                    "partial of {i} whole"
                );
                Ok(answer.headers()["location"].to_str().unwrap().to_owned())
            })
            .await;
        partials.push(location);
    }
    run.finishing.notify_one();
    let key = run
        .until(|| async {
            let answer = run
                .send(
                    tus(run.client.post(format!("{gateway}/v1/tus/")))
                        .header("upload-concat", format!("final;{}", partials.join(" "))),
                )
                .await?;
            assert_eq!(answer.status(), 201, "final upload of {i}");
            Ok(answer.headers()["x-sluice-key"]
                .to_str()
                .unwrap()
                .to_owned())
        })
        .await;
    run.acknowledge(key, "tus_concatenation");
}

/// A multipart upload straight to MinIO, signed and completed through `/s3/*`.
async fn direct_multipart(run: &Run, i: usize, body: Vec<u8>) {
    let gateway = &run.gateway;
    let (key, upload_id) = run
        .until(|| async {
            let answer = run
                .send(
                    run.client
                        .post(format!("{gateway}/s3/multipart"))
                        .json(&json!({"filename": format!("direct-{i}.bin"), "type": "application/octet-stream"})),
                )
                .await?;
            assert_eq!(answer.status(), 200, "direct create {i}");
            let created = json_of(answer).await?;
            Ok((
                created["key"].as_str().unwrap().to_owned(),
                created["uploadId"].as_str().unwrap().to_owned(),
            ))
        })
        .await;
    let etag = run
        .until(|| async {
            let answer = run
                .send(
                    run.client
                        .get(format!("{gateway}/s3/multipart/{upload_id}/1"))
                        .query(&[("key", &key)]),
                )
                .await?;
            assert_eq!(answer.status(), 200, "direct sign {i}");
            let url = json_of(answer).await?["url"].as_str().unwrap().to_owned();
            let stored = run.send(run.client.put(url).body(body.clone())).await?;
            assert!(
                stored.status().is_success(),
                "direct part {i}: {}",
                stored.status()
            );
            Ok(stored.headers()["etag"].to_str().unwrap().to_owned())
        })
        .await;
    run.finishing.notify_one();
    let completed = run
        .until(|| async {
            let answer = run
                .send(
                    run.client
                        .post(format!("{gateway}/s3/multipart/{upload_id}/complete"))
                        .query(&[("key", &key)])
                        .json(&json!({"parts": [{"ETag": etag, "PartNumber": 1}]})),
                )
                .await?;
            Ok(answer.status())
        })
        .await;
    // A completion whose answer a kill lost and that is gone now is not a 2xx.
    if completed.is_success() {
        run.acknowledge(key, "direct_multipart");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_object_has_its_event_through_repeated_kills() {
    let Some((endpoint, prefix, store)) = common::minio_prefix("lifecycle-crash").await else {
        return;
    };
    let uploads = setting("SLUICE_CRASH_UPLOADS", 560);
    let kills = setting("SLUICE_CRASH_KILLS", 12);
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("events.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let config = dir.path().join("sluice.toml");
    std::fs::write(&config, "[streams.clicks]\nflush_age = \"100ms\"\n").unwrap();
    let receiver = Arc::new(Receiver::default());
    let event_url = format!("http://{}/events", receiver_up(receiver.clone()).await);
    let listen = common::free_loopback_address();
    let (secret, config) = (
        secret.to_str().unwrap().to_owned(),
        config.to_str().unwrap().to_owned(),
    );
    // `sluice ingest` writes into the same bucket, announcing as the gateway does.
    let ingest_into = (
        format!("s3://{}/{prefix}", sluice_testkit::minio::TEST_BUCKET),
        endpoint.clone(),
        event_url.clone(),
        secret.clone(),
    );
    // Default settings but what says where things are.
    let start = Arc::new(move || {
        common::serve_on_minio(
            &endpoint,
            &prefix,
            &listen,
            &[
                "--config",
                &config,
                "--direct",
                "--event-url",
                &event_url,
                "--event-secret-file",
                &secret,
            ],
        )
    });
    let gateway = start();
    let run = Arc::new(Run {
        gateway: gateway.url.clone(),
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
        finishing: Notify::new(),
        acknowledged: Mutex::default(),
        terminated: Mutex::default(),
        failures: AtomicUsize::new(0),
        stop_killing: AtomicBool::new(false),
    });

    // Kills: odd ones at a random moment, even ones a few ms after a client
    // starts a request that finishes an upload. Restarted on the same port.
    let killer = {
        let (run, start) = (run.clone(), start.clone());
        let mut gateway = gateway;
        tokio::spawn(async move {
            let mut done = 0;
            while done < kills && !run.stop_killing.load(Ordering::SeqCst) {
                let pause = Duration::from_millis(300 + rand::random::<u64>() % 900);
                tokio::time::sleep(pause).await;
                if done % 2 == 0 {
                    let targeted =
                        tokio::time::timeout(Duration::from_secs(5), run.finishing.notified());
                    if targeted.await.is_ok() {
                        tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 25)).await;
                    }
                }
                gateway.child.kill().unwrap();
                gateway.child.wait().unwrap();
                done += 1;
                gateway = start();
            }
            (gateway, done)
        })
    };

    let next = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (run, next) = (run.clone(), next.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= uploads {
                        return;
                    }
                    upload(&run, i).await;
                }
            })
        })
        .collect();
    // `sluice ingest` from standard input, SIGKILLed once it has stored a
    // batch, then run again to its end: every batch either run stored has its
    // event (the killed run's intents are settled by the gateways'
    // reconciliation, which sends where it would have).
    let ingested = ingest_killed_then_whole(&ingest_into, &store).await;
    for client in clients {
        client.await.unwrap();
    }
    run.stop_killing.store(true, Ordering::SeqCst);
    let (_gateway, killed) = killer.await.unwrap();
    assert!(killed >= kills.min(10), "only {killed} kills");

    // Every object in the bucket has its event, in the end.
    let objects = || async {
        let mut keys = BTreeSet::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = store
                .list_objects("", cursor.as_deref(), 1000)
                .await
                .unwrap();
            keys.extend(
                page.objects
                    .into_iter()
                    .map(|o| o.key)
                    .filter(|k| !k.starts_with("_sluice/")),
            );
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return keys,
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(240);
    let terminated = run.terminated.lock().unwrap().clone();
    let (objects, missing, unannounced) = loop {
        let objects = objects().await;
        let events = receiver.events.lock().unwrap().clone();
        let missing: Vec<String> = objects
            .iter()
            .filter(|k| !events.contains_key(*k))
            .cloned()
            .collect();
        let terminations = receiver.terminations.lock().unwrap().clone();
        let unannounced: Vec<String> = terminated
            .iter()
            .filter(|id| !terminations.contains_key(*id))
            .cloned()
            .collect();
        if (missing.is_empty() && unannounced.is_empty()) || Instant::now() > deadline {
            break (objects, missing, unannounced);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(
        unannounced.is_empty(),
        "terminations answered with no upload.terminated event: {unannounced:?}"
    );
    let terminations = receiver.terminations.lock().unwrap().clone();
    let twice: Vec<_> = terminations
        .iter()
        .filter(|(_, ids)| ids.len() > 1)
        .collect();
    assert!(twice.is_empty(), "terminations under two ids: {twice:?}");
    assert!(!terminated.is_empty(), "no termination was tried");
    assert!(ingested > 0, "sluice ingest stored no batch");
    let events = receiver.events.lock().unwrap().clone();
    let acknowledged = run.acknowledged.lock().unwrap().clone();
    let kinds: BTreeSet<String> = events.values().flat_map(|(_, k)| k.clone()).collect();
    let duplicates: usize = events.values().map(|(ids, _)| ids.len() - 1).sum();
    eprintln!(
        "{uploads} uploads, {killed} kills, {} failed requests retried; {} objects, {} with events \
         ({duplicates} with a second event id), {} acknowledged; {} deliveries tried; kinds {kinds:?}",
        run.failures.load(Ordering::SeqCst),
        objects.len(),
        events.len(),
        acknowledged.len(),
        receiver.requests.load(Ordering::SeqCst),
    );
    assert!(missing.is_empty(), "objects without an event: {missing:?}");
    // Issue 47: an object's event has one id, whatever step a kill cut. (A
    // PUT or form that a client sent again as a new request, its first answer
    // lost in a kill, is a second upload of the key, with an event of its own.)
    let two_ids: Vec<(&String, &BTreeSet<String>)> = events
        .iter()
        .filter(|(_, (ids, kinds))| {
            ids.len() > 1 && !kinds.iter().all(|k| k == "put" || k == "form")
        })
        .map(|(key, (ids, _))| (key, ids))
        .collect();
    assert!(
        two_ids.is_empty(),
        "objects announced under two ids: {two_ids:?}"
    );
    let phantom: Vec<&String> = events.keys().filter(|k| !objects.contains(*k)).collect();
    assert!(phantom.is_empty(), "events naming no object: {phantom:?}");
    let lost: Vec<&(String, &str)> = acknowledged
        .iter()
        .filter(|(k, _)| !objects.contains(k))
        .collect();
    assert!(lost.is_empty(), "2xx answers with no object: {lost:?}");
    assert_eq!(receiver.bad_signatures.load(Ordering::SeqCst), 0);
    for kind in [
        "put",
        "form",
        "tus_patch",
        "tus_concatenation",
        "direct_multipart",
        "stream_batch",
    ] {
        assert!(kinds.contains(kind), "no {kind} event among {kinds:?}");
    }
}
