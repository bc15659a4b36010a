//! Route tests without a socket (`Router::oneshot`): every error path answers with
//! its status, stable code and JSON body, and stores nothing.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use sluice_server::{AppState, ServerConfig};
use sluice_store::ObjectStore;
use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};
use tower::ServiceExt;

fn config() -> ServerConfig {
    let mut config = ServerConfig {
        max_upload_size: Some(40 * 1024 * 1024),
        key_template: "{tenant}/{uuid}/{filename}".into(),
        ..ServerConfig::default()
    };
    config.engine.part_size = 5 * 1024 * 1024;
    config.engine.threshold = 5 * 1024 * 1024;
    config
}

fn state_on(store: Arc<dyn ObjectStore>, config: ServerConfig) -> AppState {
    AppState::new(config, store).unwrap()
}

async fn send(
    state: &AppState,
    request: Request<Body>,
) -> (StatusCode, axum::http::HeaderMap, Bytes) {
    let response: Response = state.router().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn error_code(body: &Bytes) -> String {
    let value: serde_json::Value =
        serde_json::from_slice(body).unwrap_or_else(|_| panic!("not JSON: {body:?}"));
    value["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn request(method: &str, uri: &str) -> axum::http::request::Builder {
    Request::builder().method(method).uri(uri)
}

#[tokio::test]
async fn error_paths_table() {
    let memory = MemoryStore::new();
    let state = state_on(Arc::new(memory.clone()), config());
    memory
        .put_object(sluice_store::PutRequest::new(
            "exists",
            Bytes::from_static(b"0123456789"),
        ))
        .await
        .unwrap();
    let long_key = format!("/v1/objects/{}", "k".repeat(1025));
    let big_meta = "m".repeat(3000);
    let cases: Vec<(Request<Body>, StatusCode, &str)> = vec![
        (
            request("PUT", "/v1/objects/a/../b")
                .body(Body::from("x"))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_key",
        ),
        (
            request("PUT", "/v1/objects/a/./b")
                .body(Body::from("x"))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_key",
        ),
        (
            request("PUT", "/v1/objects/a//b")
                .body(Body::from("x"))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_key",
        ),
        (
            request("PUT", "/v1/objects/tab%09key")
                .body(Body::from("x"))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_key",
        ),
        (
            request("PUT", "/v1/objects/bad%FFutf8")
                .body(Body::from("x"))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "",
        ),
        (
            request("PUT", &long_key).body(Body::from("x")).unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_key",
        ),
        (
            request("PUT", "/v1/objects/exists")
                .header(header::IF_NONE_MATCH, "*")
                .body(Body::from("new"))
                .unwrap(),
            StatusCode::PRECONDITION_FAILED,
            "precondition_failed",
        ),
        (
            request("PUT", "/v1/objects/k")
                .header(header::IF_NONE_MATCH, "\"abc\"")
                .body(Body::from("x"))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            request("PUT", "/v1/objects/k")
                .header(header::CONTENT_LENGTH, "41943041")
                .body(Body::empty())
                .unwrap(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
        ),
        (
            request("PUT", "/v1/objects/k")
                .header(header::CONTENT_LENGTH, "many")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            request("PUT", "/v1/objects/k")
                .header("x-sluice-meta-big", big_meta.as_str())
                .body(Body::from("x"))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            request("GET", "/v1/objects/missing")
                .body(Body::empty())
                .unwrap(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            request("GET", "/v1/objects/exists")
                .header(header::RANGE, "bytes=10-")
                .body(Body::empty())
                .unwrap(),
            StatusCode::RANGE_NOT_SATISFIABLE,
            "range_not_satisfiable",
        ),
        (
            request("GET", "/v1/objects/..")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_key",
        ),
        (
            request("DELETE", "/v1/objects/a/../b")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "invalid_key",
        ),
        (
            request("GET", "/v1/objects?limit=0")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            request("GET", "/v1/objects?colour=red")
                .body(Body::empty())
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            request("POST", "/v1/objects")
                .header(header::CONTENT_TYPE, "application/json")
                .body(Body::from("{}"))
                .unwrap(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (
            request("POST", "/v1/objects")
                .header(header::CONTENT_TYPE, "multipart/form-data; boundary=XX")
                .body(Body::from(
                    "--XX\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nvalue\r\n--XX--\r\n",
                ))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            request("POST", "/v1/objects")
                .header(header::CONTENT_TYPE, "multipart/form-data; boundary=XX")
                .body(Body::from("garbage without boundaries"))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            request("GET", "/v2/nothing").body(Body::empty()).unwrap(),
            StatusCode::NOT_FOUND,
            "no_route",
        ),
    ];
    for (request, status, code) in cases {
        let label = format!("{} {}", request.method(), request.uri());
        let (got, _, body) = send(&state, request).await;
        assert_eq!(got, status, "{label}: {body:?}");
        if !code.is_empty() {
            assert_eq!(error_code(&body), code, "{label}");
        }
    }
    let page = memory.list_objects("", None, 100).await.unwrap();
    assert_eq!(
        page.objects
            .iter()
            .map(|o| o.key.as_str())
            .collect::<Vec<_>>(),
        vec!["exists"],
        "nothing else stored"
    );
    assert_eq!(memory.object("exists").as_deref(), Some(&b"0123456789"[..]));
}

#[tokio::test]
async fn chunked_body_over_the_limit_is_refused_and_aborted() {
    let memory = MemoryStore::new();
    let mut config = config();
    config.max_upload_size = Some(12 * 1024 * 1024);
    let state = state_on(Arc::new(memory.clone()), config);
    // 20 MiB without Content-Length: refused once the limit is passed.
    let chunks = (0..20).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![7u8; 1024 * 1024])));
    let body = Body::from_stream(futures::stream::iter(chunks));
    let (status, _, body) = send(
        &state,
        request("PUT", "/v1/objects/big").body(body).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(&body), "too_large");
    assert!(memory.object("big").is_none());
    assert_eq!((memory.open_uploads(), memory.stored_parts()), (0, 0));
}

#[tokio::test(start_paused = true)]
async fn stalled_body_times_out_and_stores_nothing() {
    let memory = MemoryStore::new();
    let mut config = config();
    config.limits.body_idle_timeout = Duration::from_secs(5);
    let state = state_on(Arc::new(memory.clone()), config);
    let stalled = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"start"))])
        .chain(futures::stream::pending());
    let (status, _, body) = send(
        &state,
        request("PUT", "/v1/objects/slow")
            .body(Body::from_stream(stalled))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert_eq!(error_code(&body), "body_timeout");
    assert!(memory.object("slow").is_none());
}

#[tokio::test(start_paused = true)]
async fn overload_answers_503_with_retry_after() {
    let memory = MemoryStore::new();
    let mut config = config();
    config.limits.max_concurrent_uploads = 1;
    config.limits.queue_length = 1;
    config.limits.queue_timeout = Duration::from_secs(2);
    config.limits.retry_after_seconds = 3;
    config.limits.body_idle_timeout = Duration::from_secs(3600);
    let state = state_on(Arc::new(memory.clone()), config);
    // One upload holds the only slot with a body that never ends.
    let (_tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
    let hold = Body::from_stream(futures::stream::poll_fn({
        let mut rx = rx;
        move |cx| rx.poll_recv(cx)
    }));
    let holder = tokio::spawn({
        let state = state.clone();
        async move {
            send(
                &state,
                request("PUT", "/v1/objects/held").body(hold).unwrap(),
            )
            .await
        }
    });
    tokio::task::yield_now().await;
    // The next waits in the queue until its deadline; a third finds the queue full.
    let queued = tokio::spawn({
        let state = state.clone();
        async move {
            send(
                &state,
                request("PUT", "/v1/objects/queued")
                    .body(Body::from("q"))
                    .unwrap(),
            )
            .await
        }
    });
    tokio::task::yield_now().await;
    let (status, headers, body) = send(
        &state,
        request("PUT", "/v1/objects/third")
            .body(Body::from("t"))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(error_code(&body), "overloaded");
    assert_eq!(headers.get(header::RETRY_AFTER).unwrap(), "3");
    let (status, headers, _) = queued.await.unwrap();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(headers.get(header::RETRY_AFTER).unwrap(), "3");
    holder.abort();
    let metrics = send(
        &state,
        request("GET", "/metrics").body(Body::empty()).unwrap(),
    )
    .await
    .2;
    let text = String::from_utf8_lossy(&metrics);
    assert!(
        text.contains("sluice_admission_rejections_total 2"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn store_failures_stay_generic() {
    let denied =
        FaultyStore::new(Arc::new(MemoryStore::new())).inject(Op::Put, None, None, Fault::Denied);
    let state = state_on(Arc::new(denied), config());
    let (status, headers, body) = send(
        &state,
        request("PUT", "/v1/objects/k")
            .body(Body::from("x"))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    assert_eq!(error_code(&body), "store_error");
    assert!(headers.get(header::RETRY_AFTER).is_none());
    let text = String::from_utf8_lossy(&body);
    assert!(
        !text.contains("injected") && !text.contains("denied"),
        "internal detail leaked: {text}"
    );

    let throttled = FaultyStore::new(Arc::new(MemoryStore::new()))
        .inject(Op::Put, None, None, Fault::Throttle)
        .inject(Op::Head, None, None, Fault::ServerError);
    let state = state_on(Arc::new(throttled), config());
    let (status, headers, body) = send(
        &state,
        request("PUT", "/v1/objects/k")
            .body(Body::from("x"))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(error_code(&body), "store_unavailable");
    assert!(headers.get(header::RETRY_AFTER).is_some());
    // A throttling store is alive: ready (the adaptive limiter slows down).
    let (status, _, _) = send(
        &state,
        request("GET", "/readyz").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _, _) = send(
        &state,
        request("GET", "/healthz").body(Body::empty()).unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

/// `/readyz` answers from what the gateway knows, at once, with the reason;
/// the store is checked by the start-up check and the heartbeat, never by it.
#[tokio::test]
async fn readiness_names_the_reason_and_never_waits_on_the_store() {
    // (what, the check's listing fails with, draining, status, reason)
    let cases: Vec<(&str, Option<Fault>, bool, u16, &str)> = vec![
        ("a store that answers", None, false, 200, ""),
        (
            "no answers",
            Some(Fault::ServerError),
            false,
            503,
            "store_unreachable",
        ),
        (
            "no bucket",
            Some(Fault::NoSuchBucket),
            false,
            503,
            "bucket_missing",
        ),
        (
            "refused credentials",
            Some(Fault::BadCredentials),
            false,
            503,
            "credentials_refused",
        ),
        (
            "listing denied, writes allowed",
            Some(Fault::Denied),
            false,
            200,
            "",
        ),
        ("shutting down", None, true, 503, "draining"),
    ];
    for (what, fault, draining, want, reason) in cases {
        let mut store = FaultyStore::new(Arc::new(MemoryStore::new()));
        if let Some(fault) = fault {
            store = store.inject(Op::List, None, None, fault);
        }
        let state = state_on(Arc::new(store.clone()), config());
        state.engine.breaker().unwrap().check_now().await;
        if draining {
            state.readiness.start_draining();
        }
        // Whatever the store does now (it hangs), readiness answers at once.
        store.inject_under(Op::Head, "", None, Fault::Delay(Duration::from_secs(3600)));
        store.inject_under(Op::List, "", None, Fault::Delay(Duration::from_secs(3600)));
        let asked = std::time::Instant::now();
        let (status, headers, body) = send(
            &state,
            request("GET", "/readyz").body(Body::empty()).unwrap(),
        )
        .await;
        assert!(asked.elapsed() < Duration::from_millis(100), "{what}");
        assert_eq!(status.as_u16(), want, "{what}");
        let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
        match want {
            200 => assert_eq!(answer["status"], "ready", "{what}"),
            _ => {
                assert_eq!(answer["status"], "not_ready", "{what}");
                assert_eq!(answer["reason"], reason, "{what}: {answer}");
                // Anyone may ask: the store's own error (bucket, endpoint) stays in the log.
                let message = answer["message"].as_str().unwrap();
                assert!(
                    !message.is_empty() && !message.contains("injected"),
                    "{what}: {answer}"
                );
                assert!(headers.get(header::RETRY_AFTER).is_some(), "{what}");
            }
        }
    }
}

#[tokio::test]
async fn put_get_form_list_and_delete() {
    let memory = MemoryStore::new();
    let state = state_on(Arc::new(memory.clone()), config());
    let data = sluice_testkit::test_data(7 * 1024 * 1024, 1);
    let put = request("PUT", "/v1/objects/dir/file.bin")
        .header(header::CONTENT_TYPE, "application/x-test")
        .header("x-sluice-meta-origin", "routes")
        .body(Body::from(data.clone()))
        .unwrap();
    let (status, _, body) = send(&state, put).await;
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["key"], "dir/file.bin");
    assert_eq!(answer["size"], data.len());
    assert_eq!(answer["parts"], 2);
    assert_eq!(
        answer["checksum"],
        sluice_store::ChecksumAlgorithm::Crc32c
            .checksum(&data)
            .to_string()
    );

    let (status, headers, body) = send(
        &state,
        request("GET", "/v1/objects/dir/file.bin")
            .header(header::RANGE, "bytes=-4")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(&body[..], &data[data.len() - 4..]);
    assert_eq!(
        headers.get(header::CONTENT_TYPE).unwrap(),
        "application/x-test"
    );
    assert_eq!(headers.get("x-sluice-meta-origin").unwrap(), "routes");
    assert!(headers.get(header::ETAG).is_some() && headers.get(header::LAST_MODIFIED).is_some());

    let form = "--B\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\nhello\r\n\
--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nfirst file\r\n\
--B\r\nContent-Disposition: form-data; name=\"g\"; filename=\"../b.txt\"\r\n\r\nsecond\r\n--B--\r\n";
    let post = request("POST", "/v1/objects")
        .header(header::CONTENT_TYPE, "multipart/form-data; boundary=B")
        .header("x-sluice-tenant", "acme")
        .body(Body::from(form))
        .unwrap();
    let (status, _, body) = send(&state, post).await;
    assert_eq!(status, StatusCode::CREATED, "{body:?}");
    let answer: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let keys: Vec<&str> = answer["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys.len(), 2);
    assert!(
        keys[0].starts_with("acme/") && keys[0].ends_with("/a.txt"),
        "{keys:?}"
    );
    assert!(keys[1].ends_with("/b.txt"), "{keys:?}");
    assert_eq!(memory.object(keys[0]).as_deref(), Some(&b"first file"[..]));

    let (status, _, body) = send(
        &state,
        request("GET", "/v1/objects?prefix=acme/&limit=1")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let page: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(page["objects"].as_array().unwrap().len(), 1);
    assert!(page["next_cursor"].is_string());

    let (status, _, _) = send(
        &state,
        request("DELETE", "/v1/objects/dir/file.bin")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, _) = send(
        &state,
        request("HEAD", "/v1/objects/dir/file.bin")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Seam bug: a listing's page was shaped by the gateway's own state and its
/// `next_cursor` was a state key, leaking a tus upload id (its only secret).
#[tokio::test]
async fn listing_never_shows_or_leaks_upload_state() {
    let memory = MemoryStore::new();
    let state = state_on(Arc::new(memory.clone()), config());
    let created = send(
        &state,
        request("POST", "/v1/tus/")
            .header("tus-resumable", "1.0.0")
            .header("upload-length", "10")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(created.0, StatusCode::CREATED);
    let id = created.1["location"]
        .to_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let list = |uri: String| {
        let (state, id) = (state.clone(), id.clone());
        async move {
            let (status, _, body) =
                send(&state, request("GET", &uri).body(Body::empty()).unwrap()).await;
            assert_eq!(status, StatusCode::OK, "{body:?}");
            assert!(!String::from_utf8_lossy(&body).contains(&id), "{body:?}");
            serde_json::from_slice::<sluice_server::routes::ListResponse>(&body).unwrap()
        }
    };
    // Only state in the store: an empty listing and no cursor.
    let only_state = list("/v1/objects?limit=1".into()).await;
    assert!(only_state.objects.is_empty());
    assert_eq!(only_state.next_cursor, None);
    // Objects on both sides of the state in key order ("A" < "_" < "b").
    for key in ["A1", "A2", "b1", "b2"] {
        let (status, _, _) = send(
            &state,
            request("PUT", &format!("/v1/objects/{key}"))
                .body(Body::from("x"))
                .unwrap(),
        )
        .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    for limit in [1, 2, 3, 1000] {
        let mut keys = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..10 {
            let uri = match &cursor {
                Some(c) => format!("/v1/objects?limit={limit}&cursor={c}"),
                None => format!("/v1/objects?limit={limit}"),
            };
            let page = list(uri).await;
            assert!(page.objects.len() <= limit);
            keys.extend(page.objects.into_iter().map(|o| o.key));
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        assert_eq!(keys, ["A1", "A2", "b1", "b2"], "limit {limit}");
    }
    let (status, _, body) = send(
        &state,
        request("GET", "/v1/objects?cursor=%25%25not-base64")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (StatusCode::BAD_REQUEST, "bad_request")
    );
}

/// Seam bug: two PUTs of 30 MiB to one new key with `If-None-Match: *` at once
/// both answered 201. Exactly one may; the other gets 412 and leaves nothing.
#[tokio::test]
async fn racing_puts_with_if_none_match_have_one_winner() {
    let memory = MemoryStore::new();
    let state = state_on(Arc::new(memory.clone()), config());
    let put = |fill: u8| {
        let state = state.clone();
        async move {
            let body = vec![fill; 30 * 1024 * 1024];
            send(
                &state,
                request("PUT", "/v1/objects/race/one")
                    .header("if-none-match", "*")
                    .header("content-length", body.len())
                    .body(Body::from(body))
                    .unwrap(),
            )
            .await
        }
    };
    let (a, b) = tokio::join!(put(b'a'), put(b'b'));
    let mut statuses = [a.0, b.0];
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::CREATED, StatusCode::PRECONDITION_FAILED]
    );
    let winner = if a.0 == StatusCode::CREATED {
        b'a'
    } else {
        b'b'
    };
    assert_eq!(
        memory.object("race/one").unwrap(),
        vec![winner; 30 * 1024 * 1024]
    );
    state.engine.finish_background().await;
    assert_eq!(memory.open_uploads(), 0);
}

/// RFC 9110 byte ranges, including the overflow seen when the gateway was
/// attacked: `bytes=0-18446744073709551615` answered 206 with an empty body.
#[tokio::test]
async fn ranges_follow_rfc_9110() {
    let memory = MemoryStore::new();
    let state = state_on(Arc::new(memory), config());
    for (key, data) in [("ten", &b"0123456789"[..]), ("empty", &b""[..])] {
        let put = request("PUT", &format!("/v1/objects/{key}"))
            .body(Body::from(data))
            .unwrap();
        assert_eq!(send(&state, put).await.0, StatusCode::CREATED);
    }
    // (object, Range, status, body, Content-Range)
    type Case = (
        &'static str,
        &'static str,
        StatusCode,
        &'static [u8],
        Option<&'static str>,
    );
    let cases: [Case; 14] = [
        (
            "ten",
            "bytes=0-18446744073709551615",
            StatusCode::PARTIAL_CONTENT,
            b"0123456789",
            Some("bytes 0-9/10"),
        ),
        (
            "ten",
            "bytes=8-18446744073709551615",
            StatusCode::PARTIAL_CONTENT,
            b"89",
            Some("bytes 8-9/10"),
        ),
        (
            "ten",
            "bytes=2-3",
            StatusCode::PARTIAL_CONTENT,
            b"23",
            Some("bytes 2-3/10"),
        ),
        (
            "ten",
            "bytes=7-",
            StatusCode::PARTIAL_CONTENT,
            b"789",
            Some("bytes 7-9/10"),
        ),
        (
            "ten",
            "bytes=9-100",
            StatusCode::PARTIAL_CONTENT,
            b"9",
            Some("bytes 9-9/10"),
        ),
        (
            "ten",
            "bytes=-3",
            StatusCode::PARTIAL_CONTENT,
            b"789",
            Some("bytes 7-9/10"),
        ),
        (
            "ten",
            "bytes=-300",
            StatusCode::PARTIAL_CONTENT,
            b"0123456789",
            Some("bytes 0-9/10"),
        ),
        (
            "ten",
            "bytes=10-",
            StatusCode::RANGE_NOT_SATISFIABLE,
            b"",
            Some("bytes */10"),
        ),
        (
            "ten",
            "bytes=-0",
            StatusCode::RANGE_NOT_SATISFIABLE,
            b"",
            Some("bytes */10"),
        ),
        // Several ranges, other units and nonsense are ignored: the whole object.
        ("ten", "bytes=0-1,4-5", StatusCode::OK, b"0123456789", None),
        ("ten", "items=0-1", StatusCode::OK, b"0123456789", None),
        ("ten", "bytes=5-3", StatusCode::OK, b"0123456789", None),
        // An empty object has no byte to range over: sent whole.
        ("empty", "bytes=0-", StatusCode::OK, b"", None),
        ("empty", "bytes=-5", StatusCode::OK, b"", None),
    ];
    for (key, range, status, expected, content_range) in cases {
        let get = request("GET", &format!("/v1/objects/{key}"))
            .header(header::RANGE, range)
            .body(Body::empty())
            .unwrap();
        let (got, headers, body) = send(&state, get).await;
        assert_eq!(got, status, "{key} {range}: {body:?}");
        assert_eq!(
            headers
                .get(header::CONTENT_RANGE)
                .map(|v| v.to_str().unwrap()),
            content_range,
            "{key} {range}"
        );
        if status != StatusCode::RANGE_NOT_SATISFIABLE {
            assert_eq!(&body[..], expected, "{key} {range}");
            let length = headers
                .get(header::CONTENT_LENGTH)
                .unwrap()
                .to_str()
                .unwrap();
            assert_eq!(length, expected.len().to_string(), "{key} {range}");
        }
    }
}

/// A form body that starts with `head` and then repeats `filler` without end,
/// counting the bytes the gateway pulled from it.
fn endless_form(
    head: &'static str,
    filler: &'static [u8],
) -> (Body, Arc<std::sync::atomic::AtomicU64>) {
    let pulled = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = pulled.clone();
    let chunks = futures::stream::once(async move { Bytes::from_static(head.as_bytes()) })
        .chain(futures::stream::repeat(Bytes::from_static(filler)))
        .map(move |chunk| {
            counter.fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, std::io::Error>(chunk)
        });
    (Body::from_stream(chunks), pulled)
}

/// Seam bug (hostile clients): a part header that never ends grew the gateway's
/// memory without bound while a core rescanned it. Each form limit answers 400
/// after reading a few KiB past it, and stores nothing.
#[tokio::test]
async fn hostile_forms_are_refused_within_a_few_kib() {
    let memory = MemoryStore::new();
    let mut config = config();
    config.form.max_parts = 3;
    config.form.max_field_bytes = 64 << 10;
    let state = state_on(Arc::new(memory.clone()), config);
    let field = "--B\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\nv\r\n";
    let many_fields: &'static str = field.repeat(4).leak();
    // (what, body head, endless filler, most bytes the gateway may read)
    let cases: [(&str, &'static str, &'static [u8], u64); 4] = [
        (
            "endless part header",
            "--B\r\nX: ",
            &[b'A'; 4096],
            16 * 1024 + 8192,
        ),
        ("endless preamble", "", &[b'A'; 4096], 16 * 1024 + 8192),
        (
            "endless plain field",
            "--B\r\nContent-Disposition: form-data; name=\"n\"\r\n\r\n",
            &[b'v'; 4096],
            64 * 1024 + 8192,
        ),
        ("too many parts", many_fields, field.as_bytes(), 64 * 1024),
    ];
    for (what, head, filler, most) in cases {
        let (body, pulled) = endless_form(head, filler);
        let post = request("POST", "/v1/objects")
            .header(header::CONTENT_TYPE, "multipart/form-data; boundary=B")
            .body(body)
            .unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), send(&state, post))
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer"));
        assert_eq!(answer.0, StatusCode::BAD_REQUEST, "{what}: {:?}", answer.2);
        let read = pulled.load(std::sync::atomic::Ordering::SeqCst);
        assert!(read <= most, "{what}: read {read} bytes");
    }
    assert!(memory
        .list_objects("", None, 10)
        .await
        .unwrap()
        .objects
        .is_empty());
}

/// The directory store behind the gateway: keys it cannot hold next to stored
/// objects answer 409 `key_conflict` (a tus upload at creation, before any byte),
/// the gateway's own namespace is refused, and nothing else is disturbed.
#[tokio::test]
async fn directory_store_key_faults_table() {
    let dir = tempfile::tempdir().unwrap();
    let fs_store =
        sluice_store::fs::FsStore::open(sluice_store::fs::FsConfig::new(dir.path())).unwrap();
    let state = state_on(Arc::new(fs_store.clone()), config());
    let put = |key: &str| {
        request("PUT", &format!("/v1/objects/{key}"))
            .body(Body::from("data"))
            .unwrap()
    };
    let tus_create = |tenant: &str| {
        request("POST", "/v1/tus/")
            .header("tus-resumable", "1.0.0")
            .header("upload-length", 10_000_000)
            .header("x-sluice-tenant", tenant)
            .body(Body::empty())
            .unwrap()
    };
    let long_last = format!("d/{}", "n".repeat(253));
    let cases: Vec<(Request<Body>, StatusCode, &str)> = vec![
        (put("a"), StatusCode::CREATED, ""),
        (put("a/b"), StatusCode::CONFLICT, "key_conflict"),
        (put("x/y"), StatusCode::CREATED, ""),
        (put("x"), StatusCode::CONFLICT, "key_conflict"),
        (put("k"), StatusCode::CREATED, ""),
        (put("k.json/x"), StatusCode::CREATED, ""),
        (put(&long_last), StatusCode::CREATED, ""),
        (put("_sluice"), StatusCode::BAD_REQUEST, "invalid_key"),
        (
            put("_sluice/tus/x/state"),
            StatusCode::BAD_REQUEST,
            "invalid_key",
        ),
        // The key template puts `{tenant}` first: a tenant named like an
        // object cannot place uploads under it.
        (put("taken"), StatusCode::CREATED, ""),
        (tus_create("taken"), StatusCode::CONFLICT, "key_conflict"),
        // A tenant named like the gateway's namespace writes beside it.
        (tus_create("_sluice"), StatusCode::CREATED, ""),
        (tus_create("fine"), StatusCode::CREATED, ""),
    ];
    for (index, (req, status, code)) in cases.into_iter().enumerate() {
        let what = format!("case {index}: {} {}", req.method(), req.uri());
        let (got, _, body) = send(&state, req).await;
        assert_eq!(got, status, "{what}: {body:?}");
        if !code.is_empty() {
            assert_eq!(error_code(&body), code, "{what}");
        }
    }
    // Every object stored first is whole; the refused keys hold nothing.
    for key in ["a", "x/y", "k", "k.json/x", long_last.as_str(), "taken"] {
        assert_eq!(fs_store.head_object(key).await.unwrap().size, 4, "{key}");
    }
    // Tus creations after the conflict still work, and the `_sluice` tenant's
    // upload is not in the state namespace.
    let listed = fs_store
        .list_objects("_sluice/tus/", None, 100)
        .await
        .unwrap();
    assert_eq!(
        listed
            .objects
            .iter()
            .filter(|o| o.key.ends_with("/state"))
            .count(),
        2
    );
}
