//! "An object that exists has its event, and an event names an object that
//! existed", tried at the steps where a gateway can fail between making an
//! object and recording its event: an outbox write that fails after a tus
//! upload's last byte, an intent write that fails, the janitor finishing an
//! upload (in the gateway and from `sluice janitor`, whose own completion point
//! settles what it wrote), a client gone while its
//! completion runs, and each row of the reconciliation's table. The gateway
//! runs without its delivery worker, so events stay in the outbox to be read.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use bytes::Bytes;
use futures::TryStreamExt;
use http_body_util::BodyExt;
use serde_json::Value;
use sluice_resumable::record::{Receiving, RecordStore};
use sluice_resumable::Phase;
use sluice_server::completion::intents::INTENTS;
use sluice_server::completion::reconcile::{reconcile_once, ReconcileReport, DROP_UNMADE_AFTER};
use sluice_server::completion::CompletionPoint;
use sluice_server::events::outbox::PENDING;
use sluice_server::events::{EventSettings, Events};
use sluice_server::metrics::Metrics;
use sluice_server::{AppState, ServerConfig};
use sluice_store::{CreateMultipartRequest, ObjectStore, PutRequest};
use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};
use sluice_upload::{Intent, Making, Origin, UploadKind};
use tower::ServiceExt;

const SECRET: &[u8] = b"the lifecycle secret, thirty-two bytes or more";

struct Gateway {
    state: AppState,
    faults: FaultyStore,
    store: MemoryStore,
    _dir: tempfile::TempDir,
}

/// A gateway with events on (default settings) over a memory store that faults can be put into.
fn gateway() -> Gateway {
    gateway_with(|_| {})
}

/// [`gateway`] with its settings changed by `adjust`.
fn gateway_with(adjust: impl FnOnce(&mut ServerConfig)) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("events.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let store = MemoryStore::new();
    let faults = FaultyStore::new(Arc::new(store.clone()));
    let mut config = ServerConfig::default();
    config.janitor.interval = Duration::ZERO;
    config.events.urls = vec!["http://127.0.0.1:9/hook".into()];
    config.events.secret_file = Some(secret);
    adjust(&mut config);
    let state = AppState::new(config, Arc::new(faults.clone())).unwrap();
    Gateway {
        state,
        faults,
        store,
        _dir: dir,
    }
}

async fn send(state: &AppState, request: Request<Body>) -> (StatusCode, HeaderMap) {
    let response = state.router().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let _ = body.collect().await;
    (parts.status, parts.headers)
}

fn tus(method: &str, uri: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("tus-resumable", "1.0.0")
}

fn patch(location: &str, offset: u64, bytes: &'static str) -> Request<Body> {
    tus("PATCH", location)
        .header("upload-offset", offset)
        .header("content-type", "application/offset+octet-stream")
        .body(Body::from(bytes))
        .unwrap()
}

/// Creates a tus upload of `length` bytes; its location and key.
async fn create(state: &AppState, length: u64) -> (String, String) {
    let created = tus("POST", "/v1/tus/")
        .header("upload-length", length)
        .body(Body::empty())
        .unwrap();
    let (status, headers) = send(state, created).await;
    assert_eq!(status, StatusCode::CREATED);
    (
        headers["location"].to_str().unwrap().to_owned(),
        headers["x-sluice-key"].to_str().unwrap().to_owned(),
    )
}

/// Keys under `prefix` in `store`.
async fn keys(store: &MemoryStore, prefix: &str) -> Vec<String> {
    let page = store.list_objects(prefix, None, 1000).await.unwrap();
    page.objects.into_iter().map(|o| o.key).collect()
}

/// The events in the outbox, as (type, key, upload_kind, id).
async fn outbox(store: &MemoryStore) -> Vec<(String, String, String, String)> {
    let mut events = Vec::new();
    for key in keys(store, PENDING).await {
        let output = store.get_object(&key, None).await.unwrap();
        let bytes: Vec<Bytes> = output.body.try_collect().await.unwrap();
        let entry: Value = serde_json::from_slice(&bytes.concat()).unwrap();
        let event = &entry["event"];
        events.push((
            event["type"].as_str().unwrap().to_owned(),
            event["data"]["key"].as_str().unwrap().to_owned(),
            event["data"]["upload_kind"].as_str().unwrap().to_owned(),
            event["id"].as_str().unwrap().to_owned(),
        ));
    }
    events
}

/// Completed events in the outbox for `key`.
async fn completed_events(store: &MemoryStore, key: &str) -> Vec<(String, String)> {
    outbox(store)
        .await
        .into_iter()
        .filter(|(kind, k, _, _)| kind == "upload.completed" && k == key)
        .map(|(_, _, upload_kind, id)| (upload_kind, id))
        .collect()
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A reconciliation pass as if `later` had passed (default `reconcile_after`).
async fn reconcile_later(gateway: &Gateway, later: Duration) -> ReconcileReport {
    let after = gateway
        .state
        .completion
        .events()
        .settings()
        .unwrap()
        .reconcile_after;
    reconcile_once(
        &gateway.state.completion,
        now_ms() + later.as_millis() as u64,
        after,
        None,
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn an_outbox_write_failing_after_a_tus_uploads_last_byte_leaves_the_object_and_then_its_event(
) {
    let gateway = gateway();
    let state = &gateway.state;
    let (location, key) = create(state, 10).await;
    assert_eq!(
        send(state, patch(&location, 0, "01234")).await.0,
        StatusCode::NO_CONTENT
    );
    // Every outbox write fails (a permanent refusal: no retry hides it).
    gateway
        .faults
        .inject_under(Op::Put, PENDING, Some(1), Fault::Denied);
    let (status, headers) = send(state, patch(&location, 5, "56789")).await;
    // The object is made: the client is told so (its retry would find nothing to send).
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(headers["upload-offset"], "10");
    assert_eq!(gateway.store.object(&key).unwrap(), &b"0123456789"[..]);
    assert!(completed_events(&gateway.store, &key).await.is_empty());
    assert_eq!(
        keys(&gateway.store, INTENTS).await.len(),
        1,
        "the intent stays"
    );
    // The client's retry meets the finished upload.
    let (status, headers) = send(state, tus("HEAD", &location).body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["upload-offset"], "10");
    // A young intent belongs to a completion that may still run.
    assert_eq!(reconcile_later(&gateway, Duration::ZERO).await.waiting, 1);
    let report = reconcile_later(&gateway, Duration::from_secs(60)).await;
    assert_eq!(report.confirmed, 1, "{report:?}");
    let events = completed_events(&gateway.store, &key).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "tus_patch");
    assert!(keys(&gateway.store, INTENTS).await.is_empty());
    // Settled once: a second pass changes nothing.
    assert_eq!(
        reconcile_later(&gateway, Duration::from_secs(60)).await,
        ReconcileReport::default()
    );
}

#[tokio::test]
async fn an_intent_write_failing_makes_no_object_and_the_clients_retry_makes_it_with_its_event() {
    let gateway = gateway();
    let state = &gateway.state;
    let (location, key) = create(state, 10).await;
    assert_eq!(
        send(state, patch(&location, 0, "01234")).await.0,
        StatusCode::NO_CONTENT
    );
    gateway
        .faults
        .inject_under(Op::Put, INTENTS, Some(1), Fault::Denied);
    let (status, _) = send(state, patch(&location, 5, "56789")).await;
    assert!(status.is_server_error(), "{status}");
    assert!(
        gateway.store.object(&key).is_none(),
        "no object without its intent"
    );
    let (_, headers) = send(state, tus("HEAD", &location).body(Body::empty()).unwrap()).await;
    assert_eq!(headers["upload-offset"], "5");
    assert_eq!(
        send(state, patch(&location, 5, "56789")).await.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(gateway.store.object(&key).unwrap(), &b"0123456789"[..]);
    assert_eq!(completed_events(&gateway.store, &key).await.len(), 1);
    assert!(keys(&gateway.store, INTENTS).await.is_empty());
}

#[tokio::test]
async fn every_kind_of_upload_leaves_its_event_and_no_intent() {
    let gateway = gateway();
    let state = &gateway.state;
    // PUT, small and multipart (over the default 16 MiB threshold).
    for (key, len) in [("put/small", 10usize), ("put/large", 17 << 20)] {
        let request = Request::builder()
            .method("PUT")
            .uri(format!("/v1/objects/{key}"))
            .body(Body::from(vec![7u8; len]))
            .unwrap();
        assert_eq!(send(state, request).await.0, StatusCode::CREATED);
        let events = completed_events(&gateway.store, key).await;
        assert_eq!(events.len(), 1, "{key}");
        assert_eq!(events[0].0, "put");
    }
    // A tus creation that carries every byte.
    let created = tus("POST", "/v1/tus/")
        .header("upload-length", 3)
        .header("content-type", "application/offset+octet-stream")
        .header("content-length", 3)
        .body(Body::from("abc"))
        .unwrap();
    let (status, headers) = send(state, created).await;
    assert_eq!(status, StatusCode::CREATED);
    let key = headers["x-sluice-key"].to_str().unwrap();
    assert_eq!(headers["upload-offset"], "3");
    assert_eq!(
        gateway.store.object(key).unwrap(),
        &b"abc"[..],
        "{headers:?}"
    );
    let events = completed_events(&gateway.store, key).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "tus_creation");
    // A concatenation of two partial uploads: one event, for the final upload.
    let mut partials = Vec::new();
    for body in ["abc", "def"] {
        let created = tus("POST", "/v1/tus/")
            .header("upload-length", 3)
            .header("upload-concat", "partial")
            .header("content-type", "application/offset+octet-stream")
            .header("content-length", 3)
            .body(Body::from(body))
            .unwrap();
        let (status, headers) = send(state, created).await;
        assert_eq!(status, StatusCode::CREATED);
        partials.push(headers["location"].to_str().unwrap().to_owned());
    }
    let before = outbox(&gateway.store).await.len();
    let joined = tus("POST", "/v1/tus/")
        .header("upload-concat", format!("final;{}", partials.join(" ")))
        .body(Body::empty())
        .unwrap();
    let (status, headers) = send(state, joined).await;
    assert_eq!(status, StatusCode::CREATED);
    let key = headers["x-sluice-key"].to_str().unwrap();
    assert_eq!(gateway.store.object(key).unwrap(), &b"abcdef"[..]);
    assert_eq!(outbox(&gateway.store).await.len(), before + 1);
    assert_eq!(
        completed_events(&gateway.store, key).await[0].0,
        "tus_concatenation"
    );
    assert!(keys(&gateway.store, INTENTS).await.is_empty());
}

/// Turns upload `location` (created, nothing sent) into one whose bytes are
/// all in but whose object was never made: what the janitor finishes.
async fn stuck(store: &MemoryStore, location: &str, bytes: &'static [u8]) {
    let id = location.rsplit('/').next().unwrap();
    let records = RecordStore::new(Arc::new(store.clone()));
    let mut loaded = records.load(id).await.unwrap();
    loaded.record.upload.offset = bytes.len() as u64;
    loaded.record.phase = Phase::Receiving(Receiving {
        tail: Bytes::from_static(bytes),
        ..Receiving::default()
    });
    records.replace(&loaded.record, &loaded.etag).await.unwrap();
}

#[tokio::test]
async fn an_upload_the_gateways_janitor_finishes_has_its_event() {
    let gateway = gateway();
    let state = &gateway.state;
    let (location, key) = create(state, 5).await;
    stuck(&gateway.store, &location, b"hello").await;
    let report = sluice_resumable::janitor::run_once(
        &state.resumable,
        Duration::from_secs(3600),
        false,
        SystemTime::now(),
    )
    .await
    .unwrap();
    assert_eq!(report.resumable.finished.len(), 1);
    assert_eq!(gateway.store.object(&key).unwrap(), &b"hello"[..]);
    let events = completed_events(&gateway.store, &key).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "tus_recovered");
}

#[tokio::test]
async fn an_upload_sluice_janitor_finishes_has_its_event_in_the_outbox_when_the_pass_ends() {
    let gateway = gateway();
    let (location, key) = create(&gateway.state, 5).await;
    stuck(&gateway.store, &location, b"hello").await;
    // As `sluice janitor --event-url` runs: an engine of its own announcing
    // through a completion point of its own (crates/sluice-cli/src/announcing.rs).
    let store: Arc<dyn ObjectStore> = Arc::new(gateway.store.clone());
    let engine = sluice_upload::Engine::new(store.clone(), Default::default()).unwrap();
    let settings = EventSettings {
        urls: vec!["http://127.0.0.1:9/hook".into()],
        secret_file: Some(gateway._dir.path().join("events.secret")),
        ..EventSettings::default()
    };
    CompletionPoint::announcing_for(&engine, &settings, Metrics::new()).unwrap();
    let resumable =
        sluice_resumable::Resumable::new(engine, ServerConfig::default().resumable_config());
    let report = sluice_resumable::janitor::run_once(
        &resumable,
        Duration::from_secs(3600),
        false,
        SystemTime::now(),
    )
    .await
    .unwrap();
    assert_eq!(report.resumable.finished.len(), 1);
    let events = completed_events(&gateway.store, &key).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "tus_recovered");
    // Its intent is settled by the pass that wrote it.
    assert!(keys(&gateway.store, INTENTS).await.is_empty());
}

#[tokio::test]
async fn a_put_whose_client_leaves_during_its_completion_still_gets_its_event() {
    let gateway = gateway();
    let state = &gateway.state;
    // The completion takes a while; the client leaves once it has begun, not
    // after a fixed time (on a loaded machine the parts may still be going
    // then, and a client leaving before the completion aborts the upload).
    gateway.faults.inject_under(
        Op::Complete,
        "",
        Some(1),
        Fault::Delay(Duration::from_secs(1)),
    );
    let request = Request::builder()
        .method("PUT")
        .uri("/v1/objects/left/early")
        .body(Body::from(vec![1u8; 17 << 20]))
        .unwrap();
    let mut answer = Box::pin(send(state, request));
    let completion_began = async {
        while gateway.faults.attempts(Op::Complete, None) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    tokio::select! {
        _ = &mut answer => panic!("answered before the completion had begun"),
        () = completion_began => {}
    }
    assert!(
        gateway.store.object("left/early").is_none(),
        "the completion is still going when the client leaves"
    );
    drop(answer);
    state.engine.finish_background().await;
    assert!(gateway.store.object("left/early").is_some());
    assert_eq!(
        completed_events(&gateway.store, "left/early").await.len(),
        1
    );
    assert!(keys(&gateway.store, INTENTS).await.is_empty());
}

/// An intent as the engine forms it, written by `gateway`'s completion point
/// `ahead` after now (an object made now is older than it).
/// The gateway's background tasks run without a socket (background.rs):
/// what a request left (an intent whose outbox write failed) becomes its
/// event by the gateway's own reconciliation, with nobody calling it.
#[tokio::test]
async fn the_gateways_background_tasks_settle_what_a_request_left() {
    let gateway = gateway_with(|config| {
        config.events.reconcile_after = Duration::ZERO;
        config.events.reconcile_interval = Duration::from_millis(50);
    });
    let state = &gateway.state;
    let (location, key) = create(state, 5).await;
    gateway
        .faults
        .inject_under(Op::Put, PENDING, Some(1), Fault::Denied);
    let (status, _) = send(state, patch(&location, 0, "01234")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(completed_events(&gateway.store, &key).await.is_empty());
    let background = sluice_server::background::Background::start(state);
    let running = background.running();
    for task in ["event delivery", "intent reconciliation", "store heartbeat"] {
        assert!(running.contains(&task), "{task} not among {running:?}");
    }
    assert!(!running.contains(&"janitor"), "the janitor is off here");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while completed_events(&gateway.store, &key).await.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no event");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(keys(&gateway.store, INTENTS).await.is_empty());
    background.stop();
}

/// An intent carries where its writer sends events: a reconciliation that
/// sends elsewhere (a `sluice ingest` or `janitor` run with its own
/// `--event-url`) leaves it to one that sends there, and the other way round.
#[tokio::test]
async fn an_intent_is_settled_only_where_its_writer_sends_events() {
    let gateway = gateway();
    let store: Arc<dyn ObjectStore> = Arc::new(gateway.store.clone());
    let other = EventSettings {
        urls: vec!["http://127.0.0.1:9/elsewhere".into()],
        secret_file: Some(gateway._dir.path().join("events.secret")),
        ..EventSettings::default()
    };
    let metrics = Metrics::new();
    let elsewhere = CompletionPoint::new(
        metrics.clone(),
        Events::new(&other, store.clone(), metrics).unwrap(),
        store,
    );
    let intent = Intent::new(
        &Origin::new(UploadKind::StreamBatch),
        "s/batch",
        4,
        None,
        Making::Put { nonce: 9 },
    );
    sluice_upload::Announcer::intend(&elsewhere, &intent)
        .await
        .unwrap();
    gateway
        .store
        .put_object(PutRequest::new("s/batch", Bytes::from_static(b"abcd")))
        .await
        .unwrap();
    let report = reconcile_later(&gateway, Duration::from_secs(60)).await;
    assert_eq!((report.confirmed, report.waiting), (0, 1), "{report:?}");
    assert!(completed_events(&gateway.store, "s/batch").await.is_empty());
    let after = other.reconcile_after;
    let later = now_ms() + 60_000;
    let report = reconcile_once(&elsewhere, later, after, None)
        .await
        .unwrap();
    assert_eq!(report.confirmed, 1, "{report:?}");
    assert_eq!(completed_events(&gateway.store, "s/batch").await.len(), 1);
}

/// A termination whose event cannot be written removes nothing: the client
/// is answered 5xx, the upload is still there, and its DELETE sent again
/// records the event (one) and removes the upload. (Written after the removal,
/// as before, the failed write lost the event: the retry met a 404.)
#[tokio::test]
async fn a_termination_whose_event_fails_removes_nothing_until_it_is_recorded() {
    let gateway = gateway();
    let state = &gateway.state;
    let (location, _key) = create(state, 10).await;
    assert_eq!(
        send(state, patch(&location, 0, "01234")).await.0,
        StatusCode::NO_CONTENT
    );
    gateway
        .faults
        .inject_under(Op::Put, PENDING, Some(1), Fault::Denied);
    let delete = || tus("DELETE", &location).body(Body::empty()).unwrap();
    let (status, _) = send(state, delete()).await;
    assert!(status.is_server_error(), "{status}");
    let (status, headers) = send(state, tus("HEAD", &location).body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::OK, "the upload stays");
    assert_eq!(headers["upload-offset"], "5");
    assert_eq!(send(state, delete()).await.0, StatusCode::NO_CONTENT);
    let terminated: Vec<_> = outbox(&gateway.store)
        .await
        .into_iter()
        .filter(|(kind, ..)| kind == "upload.terminated")
        .collect();
    assert_eq!(terminated.len(), 1, "{terminated:?}");
    let (status, _) = send(state, tus("HEAD", &location).body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

async fn intend_at(gateway: &Gateway, key: &str, size: u64, making: Making, ahead: Duration) {
    let mut intent = Intent::new(&Origin::new(UploadKind::Put), key, size, None, making);
    intent.at += ahead;
    sluice_upload::Announcer::intend(&gateway.state.completion, &intent)
        .await
        .unwrap();
}

async fn intend(gateway: &Gateway, key: &str, size: u64, making: Making) {
    intend_at(gateway, key, size, making, Duration::ZERO).await
}

#[tokio::test]
async fn the_reconciliation_settles_each_intent_by_what_the_store_holds() {
    let gateway = gateway();
    let store = &gateway.store;
    let put = |key: &str, len: usize| {
        let request = PutRequest::new(key, Bytes::from(vec![0u8; len]));
        let store = store.clone();
        async move { store.put_object(request).await.unwrap() }
    };
    // (intent, what the store holds) -> settled as
    // 1. a single PUT whose object is there: its event.
    intend(&gateway, "a/made", 4, Making::Put { nonce: 1 }).await;
    put("a/made", 4).await;
    // 2. a single PUT with no object: waits (it may still run), dropped when old.
    intend(&gateway, "a/missing", 4, Making::Put { nonce: 2 }).await;
    // 3. a single PUT whose key holds another object (another size): as 2.
    put("a/other", 9).await;
    intend(&gateway, "a/other", 4, Making::Put { nonce: 3 }).await;
    // 4. a multipart completion whose upload is still open: waits.
    let open = store
        .create_multipart_upload(CreateMultipartRequest::new("a/open"))
        .await
        .unwrap();
    intend(&gateway, "a/open", 4, Making::Multipart { upload_id: open }).await;
    // 5. a multipart completion whose upload is gone, no object: dropped.
    intend(
        &gateway,
        "a/aborted",
        4,
        Making::Multipart {
            upload_id: "gone".into(),
        },
    )
    .await;
    // 6. a multipart completion whose object is dated long before the intent
    // (S3 dates a multipart object from the upload's start): its event.
    put("a/long", 4).await;
    let ten_minutes = Duration::from_secs(600);
    intend_at(
        &gateway,
        "a/long",
        4,
        Making::Multipart {
            upload_id: "done-long-ago".into(),
        },
        ten_minutes,
    )
    .await;
    // 7. a single PUT whose key holds an object from before its intent: as 2.
    put("a/older", 4).await;
    intend_at(
        &gateway,
        "a/older",
        4,
        Making::Put { nonce: 7 },
        ten_minutes,
    )
    .await;
    // 8. a table's file (stored before its intent) that the table's log
    // holds: its event.
    let table = sluice_streams::table::delta::DeltaTable::new(
        Arc::new(store.clone()),
        sluice_streams::table::delta::TableLayout {
            location: "t".into(),
            partition_columns: Vec::new(),
        },
    );
    let columns = serde_json::json!({"type": "struct", "fields": [
        {"name": "n", "type": "long", "nullable": true, "metadata": {}}]});
    put("t/in.parquet", 4).await;
    let file = sluice_streams::table::delta::NewFile {
        key: "t/in.parquet".into(),
        size: 4,
        records: 1,
        announce_as: None,
        footer: None,
    };
    table.commit(&[file], &[], &columns).await.unwrap();
    let table_commit = || Making::TableCommit { table: "t".into() };
    intend_at(&gateway, "t/in.parquet", 4, table_commit(), ten_minutes).await;
    // 9. a table's file stored and in no commit (its writer fenced, or
    // killed before its commit): waits (the commit may still come), dropped
    // when old.
    put("t/out.parquet", 4).await;
    intend_at(&gateway, "t/out.parquet", 4, table_commit(), ten_minutes).await;
    let report = reconcile_later(&gateway, ten_minutes + Duration::from_secs(60)).await;
    assert_eq!(
        report,
        ReconcileReport {
            seen: 9,
            confirmed: 3,
            dropped: 1,
            waiting: 5,
            next: None,
        }
    );
    for key in ["a/made", "a/long", "t/in.parquet"] {
        assert_eq!(completed_events(store, key).await.len(), 1, "{key}");
    }
    for key in [
        "a/missing",
        "a/other",
        "a/open",
        "a/aborted",
        "a/older",
        "t/out.parquet",
    ] {
        assert!(completed_events(store, key).await.is_empty(), "{key}");
    }
    let report = reconcile_later(&gateway, DROP_UNMADE_AFTER + ten_minutes).await;
    assert_eq!((report.dropped, report.waiting), (4, 1), "{report:?}");
    assert_eq!(
        keys(store, INTENTS).await.len(),
        1,
        "the open upload's intent stays"
    );
}

#[tokio::test]
async fn a_failed_put_refused_by_the_store_leaves_no_intent() {
    let gateway = gateway();
    let put = |body: &'static str| {
        Request::builder()
            .method("PUT")
            .uri("/v1/objects/once")
            .header("if-none-match", "*")
            .body(Body::from(body))
            .unwrap()
    };
    assert_eq!(
        send(&gateway.state, put("first")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        send(&gateway.state, put("second")).await.0,
        StatusCode::PRECONDITION_FAILED
    );
    assert_eq!(completed_events(&gateway.store, "once").await.len(), 1);
    assert!(keys(&gateway.store, INTENTS).await.is_empty());
}

#[tokio::test]
async fn a_completion_whose_record_write_failed_is_announced_once_when_the_client_sends_again() {
    // (the writes that fail after the object is made, events in the outbox
    // before the client sends again)
    let cases: [(&[&str], usize); 2] = [
        // the record only: the event was written
        (&["state"], 1),
        // the event and the record: as a gateway killed right after the completion
        (&["state", "events"], 0),
    ];
    for (failing, events_before) in cases {
        let gateway = gateway();
        let state = &gateway.state;
        let length = 17u64 << 20;
        let (location, key) = create(state, length).await;
        let id = location.rsplit('/').next().unwrap().to_owned();
        let first = tus("PATCH", &location)
            .header("upload-offset", 0)
            .header("content-type", "application/offset+octet-stream")
            .body(Body::from(vec![3u8; 16 << 20]))
            .unwrap();
        assert_eq!(send(state, first).await.0, StatusCode::NO_CONTENT);
        for write in failing {
            let prefix = match *write {
                "state" => format!("_sluice/tus/{id}/state"),
                _ => PENDING.to_owned(),
            };
            gateway
                .faults
                .inject_under(Op::Put, &prefix, Some(1), Fault::Denied);
        }
        let last = || {
            tus("PATCH", &location)
                .header("upload-offset", 16 << 20)
                .header("content-type", "application/offset+octet-stream")
                .body(Body::from(vec![4u8; 1 << 20]))
                .unwrap()
        };
        let (status, _) = send(state, last()).await;
        assert!(status.is_server_error(), "{failing:?}: {status}");
        assert_eq!(gateway.store.object(&key).unwrap().len() as u64, length);
        assert_eq!(
            completed_events(&gateway.store, &key).await.len(),
            events_before,
            "{failing:?}"
        );
        // The client sends the last chunk again: the upload is found finished
        // and announced as the one completion it is.
        let (status, headers) = send(state, last()).await;
        assert_eq!(status, StatusCode::NO_CONTENT, "{failing:?}");
        assert_eq!(headers["upload-offset"], length.to_string().as_str());
        let events = completed_events(&gateway.store, &key).await;
        assert_eq!(events.len(), 1, "{failing:?}: {events:?}");
        assert!(
            keys(&gateway.store, INTENTS).await.is_empty(),
            "{failing:?}"
        );
        // Nothing left for the reconciliation.
        let report = reconcile_later(&gateway, Duration::from_secs(60)).await;
        assert_eq!(report, ReconcileReport::default(), "{failing:?}");
    }
}
