//! The IETF resumable-upload draft on the tus endpoint, without a socket: the
//! wire of interop 8 step by step (careful and optimistic creation, offsets,
//! appends, the 409, completion, a completed upload, cancellation), how each
//! interop version spells its answers, malformed requests as a table (a clear
//! 4xx, nothing stored), and the two protocols kept apart.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use sluice_server::{AppState, ServerConfig};
use sluice_store::ObjectStore;
use sluice_testkit::{test_data, MemoryStore};

mod support;

use support::oneshot::send;

const MIB: usize = 1 << 20;
const PARTIAL: &str = "application/partial-upload";

fn gateway(store: &MemoryStore) -> AppState {
    let mut config = ServerConfig {
        max_upload_size: Some(64 * MIB as u64),
        key_template: "{tenant}/{uuid}/{filename}".into(),
        ..ServerConfig::default()
    };
    config.engine.part_size = 5 * MIB as u64;
    config.engine.threshold = 5 * MIB as u64;
    // Cases send tiny appends; the pacing has its own test (tus.rs).
    config.tus.small_patches_per_second = 0.0;
    AppState::new(config, Arc::new(store.clone()) as Arc<dyn ObjectStore>).unwrap()
}

/// A request of interop `version` with `headers`, and a body with its
/// Content-Length (None: no body; chunked bodies are built apart).
fn draft(
    version: u8,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Request<Body> {
    let mut builder = Request::builder()
        .method(method)
        .uri(uri)
        .header("upload-draft-interop-version", version.to_string());
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    match body {
        Some(bytes) => builder
            .header("content-length", bytes.len().to_string())
            .body(Body::from(bytes.to_vec()))
            .unwrap(),
        None => builder.body(Body::empty()).unwrap(),
    }
}

/// An append of interop 8 at `offset`: `application/partial-upload`, saying
/// whether it completes the upload.
fn append(url: &str, offset: &str, complete: bool, body: &[u8]) -> Request<Body> {
    let flag = if complete { "?1" } else { "?0" };
    draft(
        8,
        "PATCH",
        url,
        &[
            ("content-type", PARTIAL),
            ("upload-offset", offset),
            ("upload-complete", flag),
        ],
        Some(body),
    )
}

/// The `Upload-Limit` of an upload just created, as `want` says, or with
/// its lifetime one second shorter: a second boundary may pass between the
/// upload's creation and its answer (its expiry and the clock are whole
/// seconds).
fn assert_fresh_limit(got: Option<&str>, want: Option<&str>, context: &str) {
    let one_second_on = want.and_then(|want| {
        let (head, seconds) = want.rsplit_once('=')?;
        Some(format!("{head}={}", seconds.parse::<u64>().ok()? - 1))
    });
    assert!(
        got == want || got.is_some() && got == one_second_on.as_deref(),
        "{context}: Upload-Limit {got:?}, expected {want:?}"
    );
}

/// A body sent in pieces with no Content-Length (chunked on the wire).
fn chunked(bytes: &[u8]) -> Body {
    let pieces: Vec<Result<Bytes, std::io::Error>> = bytes
        .chunks(MIB)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Body::from_stream(futures::stream::iter(pieces))
}

/// Every key the store holds, the gateway's own state included.
async fn keys(store: &MemoryStore) -> Vec<String> {
    let page = store.list_objects("", None, 10_000).await.unwrap();
    page.objects.into_iter().map(|o| o.key).collect()
}

/// Creates an upload of interop 8 carefully (no body); its URL.
async fn careful(state: &AppState, length: Option<usize>) -> String {
    let length = length.map(|l| l.to_string());
    let mut headers = vec![("upload-complete", "?0")];
    if let Some(length) = &length {
        headers.push(("upload-length", length));
    }
    let answer = send(state, draft(8, "POST", "/v1/tus/", &headers, None)).await;
    assert_eq!(answer.status, StatusCode::CREATED, "{answer:?}");
    answer.header("location").unwrap().to_owned()
}

#[tokio::test]
async fn interop_8_careful_creation_appends_and_completes() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let data = test_data(12 * MIB, 8);
    let length = data.len().to_string();

    let created = send(
        &state,
        draft(
            8,
            "POST",
            "/v1/tus/",
            &[
                ("upload-complete", "?0"),
                ("upload-length", &length),
                ("content-disposition", "inline; filename=\"movie.mp4\""),
            ],
            None,
        ),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let url = created.header("location").unwrap().to_owned();
    assert!(url.starts_with("/v1/tus/"), "{url}");
    assert_eq!(created.header("upload-complete"), Some("?0"));
    assert_eq!(created.header("upload-offset"), Some("0"));
    assert_fresh_limit(
        created.header("upload-limit"),
        Some("max-size=67108864, max-age=86400"),
        "interop 8",
    );
    assert_eq!(created.header("upload-draft-interop-version"), Some("8"));
    assert_eq!(
        created.header("tus-resumable"),
        None,
        "the draft's answers are not tus's"
    );
    let key = created.header("x-sluice-key").unwrap().to_owned();
    assert!(key.ends_with("/movie.mp4"), "{key}");

    let head = send(&state, draft(8, "HEAD", &url, &[], None)).await;
    assert_eq!(head.status, StatusCode::NO_CONTENT);
    assert_eq!(head.header("upload-offset"), Some("0"));
    assert_eq!(head.header("upload-complete"), Some("?0"));
    assert_eq!(head.header("upload-length"), Some(length.as_str()));
    assert!(head
        .header("upload-limit")
        .unwrap()
        .starts_with("max-size=67108864, max-age="));
    assert_eq!(head.header("cache-control"), Some("no-store"));

    // The first 5 MiB, then an append at a stale offset: 409 with the real one.
    let first = send(&state, append(&url, "0", false, &data[..5 * MIB])).await;
    assert_eq!(first.status, StatusCode::NO_CONTENT, "{first:?}");
    assert_eq!(first.header("upload-complete"), Some("?0"));
    assert_eq!(first.header("upload-offset"), Some("5242880"));
    let stale = send(&state, append(&url, "0", false, &data[..MIB])).await;
    assert_eq!(stale.status, StatusCode::CONFLICT);
    assert_eq!(stale.header("upload-offset"), Some("5242880"));
    assert_eq!(stale.header("upload-complete"), Some("?0"));
    assert_eq!(
        stale.header("content-type"),
        Some("application/problem+json")
    );
    let problem = stale.json();
    assert_eq!(
        problem["type"],
        "https://iana.org/assignments/http-problem-types#mismatching-upload-offset"
    );
    assert_eq!(problem["expected-offset"], 5 * MIB);
    assert_eq!(problem["provided-offset"], 0);

    // The rest, chunked, completing: the object, described as PUT describes it.
    let request = Request::builder()
        .method("PATCH")
        .uri(&url)
        .header("upload-draft-interop-version", "8")
        .header("content-type", PARTIAL)
        .header("upload-offset", "5242880")
        .header("upload-complete", "?1")
        .body(chunked(&data[5 * MIB..]))
        .unwrap();
    let last = send(&state, request).await;
    assert_eq!(last.status, StatusCode::CREATED, "{last:?}");
    assert_eq!(last.header("upload-complete"), Some("?1"));
    assert_eq!(last.json()["key"], key.as_str());
    assert_eq!(last.json()["size"], data.len());
    assert_eq!(store.object(&key).unwrap(), &data[..]);
    assert_eq!(store.open_uploads(), 0);

    let head = send(&state, draft(8, "HEAD", &url, &[], None)).await;
    assert_eq!(head.header("upload-complete"), Some("?1"));
    assert_eq!(head.header("upload-offset"), Some(length.as_str()));

    // A completed upload takes nothing more (drafts -10/-11).
    let empty = send(&state, append(&url, &length, true, b"")).await;
    assert_eq!(empty.status, StatusCode::GONE);
    assert_eq!(
        empty.json()["type"],
        "https://iana.org/assignments/http-problem-types#completed-upload"
    );
    let more = send(&state, append(&url, &length, true, b"more")).await;
    assert_eq!(more.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        more.json()["type"],
        "https://iana.org/assignments/http-problem-types#inconsistent-upload-length"
    );
    assert_eq!(store.object(&key).unwrap(), &data[..]);
}

#[tokio::test]
async fn optimistic_creation_is_answered_as_the_object() {
    // (size, with Content-Length, method)
    let cases = [
        (0, true, "POST"),
        (1000, true, "POST"),
        (3 * MIB, false, "PUT"),
        (11 * MIB, true, "PATCH"),
        (11 * MIB, false, "POST"),
    ];
    for (size, sized, method) in cases {
        let store = MemoryStore::new();
        let state = gateway(&store);
        let data = test_data(size, size as u64);
        let request = match sized {
            true => draft(
                8,
                method,
                "/v1/tus/",
                &[("upload-complete", "?1"), ("content-type", "video/mp4")],
                Some(&data),
            ),
            false => Request::builder()
                .method(method)
                .uri("/v1/tus/")
                .header("upload-draft-interop-version", "8")
                .header("upload-complete", "?1")
                .header("content-type", "video/mp4")
                .body(chunked(&data))
                .unwrap(),
        };
        let answer = send(&state, request).await;
        let case = format!("{size} bytes, sized {sized}, {method}");
        assert_eq!(answer.status, StatusCode::CREATED, "{case}: {answer:?}");
        assert_eq!(answer.header("upload-complete"), Some("?1"), "{case}");
        assert!(answer.header("location").is_some(), "{case}");
        let key = answer.json()["key"].as_str().unwrap().to_owned();
        assert_eq!(store.object(&key).unwrap(), &data[..], "{case}");
        assert_eq!(store.open_uploads(), 0, "{case}");
        let url = answer.header("location").unwrap();
        let head = send(&state, draft(8, "HEAD", url, &[], None)).await;
        assert_eq!(head.header("upload-complete"), Some("?1"), "{case}");
        assert_eq!(
            head.header("upload-length"),
            Some(size.to_string().as_str()),
            "{case}"
        );
    }
}

#[tokio::test]
async fn each_interop_version_spells_its_answers() {
    struct Case {
        version: u8,
        /// The header an unfinished upload's answers carry, and its value.
        open: (&'static str, &'static str),
        append_status: StatusCode,
        limit: Option<&'static str>,
        /// Whether an append must say application/partial-upload.
        typed: bool,
    }
    #[rustfmt::skip]
    let cases = [
        Case { version: 3, open: ("upload-incomplete", "?1"), append_status: StatusCode::CREATED, limit: None, typed: false },
        Case { version: 4, open: ("upload-complete", "?0"), append_status: StatusCode::CREATED, limit: None, typed: false },
        Case { version: 5, open: ("upload-complete", "?0"), append_status: StatusCode::CREATED, limit: None, typed: false },
        Case { version: 6, open: ("upload-complete", "?0"), append_status: StatusCode::CREATED, limit: Some("max-size=67108864, expires=86400"), typed: true },
        Case { version: 7, open: ("upload-complete", "?0"), append_status: StatusCode::NO_CONTENT, limit: Some("max-size=67108864, max-age=86400"), typed: true },
        Case { version: 8, open: ("upload-complete", "?0"), append_status: StatusCode::NO_CONTENT, limit: Some("max-size=67108864, max-age=86400"), typed: true },
    ];
    for case in cases {
        let store = MemoryStore::new();
        let state = gateway(&store);
        let v = case.version;
        let data = test_data(100, v as u64);
        let created = send(
            &state,
            draft(v, "POST", "/v1/tus/", &[case.open], Some(&data[..40])),
        )
        .await;
        assert_eq!(
            created.status,
            StatusCode::CREATED,
            "interop {v}: {created:?}"
        );
        assert_eq!(
            created.header(case.open.0),
            Some(case.open.1),
            "interop {v}"
        );
        assert_eq!(created.header("upload-offset"), Some("40"), "interop {v}");
        assert_fresh_limit(
            created.header("upload-limit"),
            case.limit,
            &format!("interop {v}"),
        );
        assert_eq!(
            created.header("upload-draft-interop-version"),
            Some(v.to_string().as_str())
        );
        let url = created.header("location").unwrap().to_owned();
        let mut headers = vec![("upload-offset", "40"), case.open];
        if case.typed {
            headers.push(("content-type", PARTIAL));
        }
        let middle = send(
            &state,
            draft(v, "PATCH", &url, &headers, Some(&data[40..70])),
        )
        .await;
        assert_eq!(middle.status, case.append_status, "interop {v}: {middle:?}");
        assert_eq!(middle.header(case.open.0), Some(case.open.1), "interop {v}");
        assert_eq!(middle.header("upload-offset"), Some("70"), "interop {v}");
        if case.typed {
            let untyped = send(
                &state,
                draft(
                    v,
                    "PATCH",
                    &url,
                    &[("upload-offset", "70"), case.open],
                    Some(b"x"),
                ),
            )
            .await;
            assert_eq!(
                untyped.status,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "interop {v}"
            );
        }
        // The last bytes: interop 3 completes by leaving Upload-Incomplete out.
        let mut headers = vec![("upload-offset", "70")];
        if v != 3 {
            headers.push(("upload-complete", "?1"));
        }
        if case.typed {
            headers.push(("content-type", PARTIAL));
        }
        let last = send(&state, draft(v, "PATCH", &url, &headers, Some(&data[70..]))).await;
        assert_eq!(last.status, StatusCode::CREATED, "interop {v}: {last:?}");
        let key = last.json()["key"].as_str().unwrap().to_owned();
        assert_eq!(store.object(&key).unwrap(), &data[..], "interop {v}");
        let head = send(&state, draft(v, "HEAD", &url, &[], None)).await;
        assert_eq!(head.status, StatusCode::NO_CONTENT, "interop {v}");
        let done = match v {
            3 => ("upload-incomplete", "?0"),
            _ => ("upload-complete", "?1"),
        };
        assert_eq!(head.header(done.0), Some(done.1), "interop {v}");
    }
}

#[tokio::test]
async fn malformed_requests_are_refused_and_store_nothing() {
    struct Case {
        name: &'static str,
        method: &'static str,
        /// On the creation URL, or on an open upload of 100 bytes holding 10.
        on_upload: bool,
        version: Option<&'static str>,
        headers: &'static [(&'static str, &'static str)],
        body: Option<&'static [u8]>,
        status: StatusCode,
        code: &'static str,
    }
    use StatusCode as S;
    #[rustfmt::skip]
    let cases = [
        Case { name: "completion not a boolean", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-complete", "yes")], body: None, status: S::BAD_REQUEST, code: "invalid_header" },
        Case { name: "completion with parameters of bad syntax", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-complete", "?1;A=1")], body: Some(b"x"), status: S::BAD_REQUEST, code: "invalid_header" },
        Case { name: "completion sent twice", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-complete", "?0"), ("upload-complete", "?1")], body: None, status: S::BAD_REQUEST, code: "invalid_header" },
        Case { name: "no completion on a creation", method: "POST", on_upload: false, version: Some("8"), headers: &[], body: Some(b"abc"), status: S::BAD_REQUEST, code: "missing_header" },
        Case { name: "both protocols' headers", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-complete", "?0"), ("tus-resumable", "1.0.0"), ("upload-length", "10")], body: None, status: S::BAD_REQUEST, code: "both_protocols" },
        Case { name: "a version not served", method: "POST", on_upload: false, version: Some("9"), headers: &[("upload-complete", "?0")], body: None, status: S::BAD_REQUEST, code: "interop_version_unsupported" },
        Case { name: "a version that is no number", method: "POST", on_upload: false, version: Some("latest"), headers: &[("upload-complete", "?0")], body: None, status: S::BAD_REQUEST, code: "invalid_header" },
        Case { name: "length and complete body disagree", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-complete", "?1"), ("upload-length", "100")], body: Some(b"0123456789"), status: S::BAD_REQUEST, code: "inconsistent_length" },
        Case { name: "body longer than the length", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-complete", "?0"), ("upload-length", "5")], body: Some(b"0123456789"), status: S::BAD_REQUEST, code: "inconsistent_length" },
        Case { name: "negative length", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-complete", "?0"), ("upload-length", "-1")], body: None, status: S::BAD_REQUEST, code: "invalid_header" },
        Case { name: "length over the limit", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-complete", "?0"), ("upload-length", "999999999999")], body: None, status: S::PAYLOAD_TOO_LARGE, code: "too_large" },
        Case { name: "an offset on a creation", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-complete", "?0"), ("upload-offset", "7")], body: None, status: S::BAD_REQUEST, code: "header_not_allowed" },
        Case { name: "interop 3's header in interop 8", method: "POST", on_upload: false, version: Some("8"), headers: &[("upload-incomplete", "?1")], body: None, status: S::BAD_REQUEST, code: "header_not_allowed" },
        Case { name: "append not typed as a partial upload", method: "PATCH", on_upload: true, version: Some("8"), headers: &[("upload-offset", "10"), ("upload-complete", "?0"), ("content-type", "application/offset+octet-stream")], body: Some(b"abc"), status: S::UNSUPPORTED_MEDIA_TYPE, code: "unsupported_media_type" },
        Case { name: "append without an offset", method: "PATCH", on_upload: true, version: Some("8"), headers: &[("upload-complete", "?0"), ("content-type", PARTIAL)], body: Some(b"abc"), status: S::BAD_REQUEST, code: "missing_header" },
        Case { name: "append without completion", method: "PATCH", on_upload: true, version: Some("8"), headers: &[("upload-offset", "10"), ("content-type", PARTIAL)], body: Some(b"abc"), status: S::BAD_REQUEST, code: "missing_header" },
        Case { name: "append past the offset", method: "PATCH", on_upload: true, version: Some("8"), headers: &[("upload-offset", "50"), ("upload-complete", "?0"), ("content-type", PARTIAL)], body: Some(b"abc"), status: S::CONFLICT, code: "offset_mismatch" },
        Case { name: "append naming another length", method: "PATCH", on_upload: true, version: Some("8"), headers: &[("upload-offset", "10"), ("upload-complete", "?0"), ("upload-length", "90"), ("content-type", PARTIAL)], body: Some(b"abc"), status: S::BAD_REQUEST, code: "inconsistent_length" },
        Case { name: "completing short of the length", method: "PATCH", on_upload: true, version: Some("8"), headers: &[("upload-offset", "10"), ("upload-complete", "?1"), ("content-type", PARTIAL)], body: Some(b"abc"), status: S::BAD_REQUEST, code: "inconsistent_length" },
        Case { name: "an offset past 15 digits", method: "PATCH", on_upload: true, version: Some("8"), headers: &[("upload-offset", "1000000000000000"), ("upload-complete", "?0"), ("content-type", PARTIAL)], body: Some(b"abc"), status: S::BAD_REQUEST, code: "invalid_header" },
        Case { name: "offset retrieval with upload fields", method: "HEAD", on_upload: true, version: Some("8"), headers: &[("upload-offset", "10")], body: None, status: S::BAD_REQUEST, code: "" },
        Case { name: "cancellation with upload fields", method: "DELETE", on_upload: true, version: Some("8"), headers: &[("upload-complete", "?1")], body: None, status: S::BAD_REQUEST, code: "header_not_allowed" },
        Case { name: "a tus append on the draft's upload", method: "PATCH", on_upload: true, version: None, headers: &[("tus-resumable", "1.0.0"), ("upload-offset", "10"), ("content-type", "application/offset+octet-stream")], body: Some(b"abc"), status: S::BAD_REQUEST, code: "other_protocol" },
        Case { name: "a tus offset retrieval on the draft's upload", method: "HEAD", on_upload: true, version: None, headers: &[("tus-resumable", "1.0.0")], body: None, status: S::BAD_REQUEST, code: "" },
        Case { name: "GET on the creation URL", method: "GET", on_upload: false, version: Some("8"), headers: &[], body: None, status: S::METHOD_NOT_ALLOWED, code: "" },
    ];
    for case in cases {
        let store = MemoryStore::new();
        let state = gateway(&store);
        let uri = match case.on_upload {
            true => {
                let url = careful(&state, Some(100)).await;
                let filled = send(
                    &state,
                    draft(
                        8,
                        "PATCH",
                        &url,
                        &[
                            ("upload-offset", "0"),
                            ("upload-complete", "?0"),
                            ("content-type", PARTIAL),
                        ],
                        Some(&[1; 10]),
                    ),
                )
                .await;
                assert_eq!(filled.header("upload-offset"), Some("10"));
                url
            }
            false => "/v1/tus/".to_owned(),
        };
        let before = keys(&store).await;
        let mut builder = Request::builder().method(case.method).uri(&uri);
        if let Some(version) = case.version {
            builder = builder.header("upload-draft-interop-version", version);
        }
        for (name, value) in case.headers {
            builder = builder.header(*name, *value);
        }
        let request = match case.body {
            Some(body) => builder
                .header("content-length", body.len().to_string())
                .body(Body::from(body))
                .unwrap(),
            None => builder.body(Body::empty()).unwrap(),
        };
        let answer = send(&state, request).await;
        assert_eq!(answer.status, case.status, "{}: {answer:?}", case.name);
        if case.version.is_some() {
            assert_eq!(
                answer.header("tus-resumable"),
                None,
                "{}: the draft's answer",
                case.name
            );
            assert!(
                answer.header("upload-draft-interop-version").is_some(),
                "{}",
                case.name
            );
        }
        if !case.code.is_empty() {
            assert_eq!(answer.code(), case.code, "{}: {answer:?}", case.name);
        }
        // Nothing stored: no object, no new upload, the open one as it was.
        assert_eq!(keys(&store).await, before, "{}", case.name);
        assert_eq!(store.open_uploads(), 0, "{}", case.name);
        if case.on_upload {
            let head = send(&state, draft(8, "HEAD", &uri, &[], None)).await;
            assert_eq!(head.header("upload-offset"), Some("10"), "{}", case.name);
        }
    }
}

#[tokio::test]
async fn a_draft_append_on_a_tus_upload_is_refused() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let created = send(
        &state,
        Request::builder()
            .method("POST")
            .uri("/v1/tus/")
            .header("tus-resumable", "1.0.0")
            .header("upload-length", "10")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let url = created.header("location").unwrap().to_owned();
    for (method, headers) in [
        (
            "PATCH",
            vec![
                ("upload-offset", "0"),
                ("upload-complete", "?1"),
                ("content-type", PARTIAL),
            ],
        ),
        ("HEAD", vec![]),
        ("DELETE", vec![]),
    ] {
        let answer = send(
            &state,
            draft(
                8,
                method,
                &url,
                &headers,
                (method == "PATCH").then_some(&[0u8; 10][..]),
            ),
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::BAD_REQUEST,
            "{method}: {answer:?}"
        );
    }
    let head = send(
        &state,
        Request::builder()
            .method("HEAD")
            .uri(&url)
            .header("tus-resumable", "1.0.0")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(head.status, StatusCode::OK, "the tus upload is still there");
    assert_eq!(head.header("upload-offset"), Some("0"));
}

#[tokio::test]
async fn cancellation_removes_the_upload() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let url = careful(&state, None).await;
    let data = test_data(6 * MIB, 1);
    let appended = send(
        &state,
        draft(
            8,
            "PATCH",
            &url,
            &[
                ("upload-offset", "0"),
                ("upload-complete", "?0"),
                ("content-type", PARTIAL),
            ],
            Some(&data),
        ),
    )
    .await;
    assert_eq!(appended.status, StatusCode::NO_CONTENT);
    assert_eq!(store.open_uploads(), 1, "a part was cut");
    let cancelled = send(&state, draft(8, "DELETE", &url, &[], None)).await;
    assert_eq!(cancelled.status, StatusCode::NO_CONTENT);
    assert_eq!(store.open_uploads(), 0);
    let head = send(&state, draft(8, "HEAD", &url, &[], None)).await;
    assert_eq!(head.status, StatusCode::NOT_FOUND);
    assert!(
        keys(&store)
            .await
            .iter()
            .all(|k| !k.starts_with("_sluice/tus/")),
        "{:?}",
        keys(&store).await
    );
}

#[tokio::test]
async fn cancelling_a_finished_upload_keeps_its_object() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let made = send(
        &state,
        draft(
            8,
            "POST",
            "/v1/tus/",
            &[("upload-complete", "?1")],
            Some(b"kept"),
        ),
    )
    .await;
    assert_eq!(made.status, StatusCode::CREATED);
    let url = made.header("location").unwrap().to_owned();
    let key = made.json()["key"].as_str().unwrap().to_owned();
    let cancelled = send(&state, draft(8, "DELETE", &url, &[], None)).await;
    assert_eq!(cancelled.status, StatusCode::NO_CONTENT);
    assert_eq!(store.object(&key).unwrap(), &b"kept"[..]);
    assert_eq!(
        send(&state, draft(8, "HEAD", &url, &[], None)).await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(keys(&store).await, vec![key]);
}

#[tokio::test]
async fn options_tell_the_limits_and_the_append_type() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    for (version, limit) in [
        (8, Some("max-size=67108864, max-age=86400")),
        (6, Some("max-size=67108864, expires=86400")),
        (5, None),
    ] {
        let answer = send(&state, draft(version, "OPTIONS", "/v1/tus/", &[], None)).await;
        assert!(answer.status.is_success(), "{answer:?}");
        assert_eq!(answer.header("accept-patch"), Some(PARTIAL));
        assert_eq!(answer.header("upload-limit"), limit, "interop {version}");
        assert_eq!(answer.header("tus-version"), None);
    }
}

/// A body that sends `first` and then nothing more, until dropped.
fn trickle(first: &'static [u8]) -> Body {
    use futures::StreamExt as _;
    let head = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(first))]);
    Body::from_stream(head.chain(futures::stream::pending()))
}

#[tokio::test]
async fn a_newer_request_ends_the_one_still_writing() {
    // (the newer request, on the same gateway or on another one on the same store)
    let cases = [
        ("HEAD", true),
        ("HEAD", false),
        ("PATCH", true),
        ("DELETE", false),
    ];
    for (method, same_gateway) in cases {
        let store = MemoryStore::new();
        let state = gateway(&store);
        let other = gateway(&store);
        let url = careful(&state, Some(100)).await;
        // An append that sent 10 bytes and then went silent (a phone that lost
        // its network, as far as the gateway can tell).
        let stuck = {
            let state = state.clone();
            let request = Request::builder()
                .method("PATCH")
                .uri(&url)
                .header("upload-draft-interop-version", "8")
                .header("content-type", PARTIAL)
                .header("upload-offset", "0")
                .header("upload-complete", "?0")
                .body(trickle(b"0123456789"))
                .unwrap();
            tokio::spawn(async move { send(&state, request).await })
        };
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let newer = match same_gateway {
            true => &state,
            false => &other,
        };
        let started = std::time::Instant::now();
        let case = format!(
            "{method} on the {} gateway",
            if same_gateway { "same" } else { "other" }
        );
        let headers: &[(&str, &str)] = match method {
            "PATCH" => &[
                ("content-type", PARTIAL),
                ("upload-offset", "10"),
                ("upload-complete", "?0"),
            ],
            _ => &[],
        };
        let body = (method == "PATCH").then_some(&b"abcdefghij"[..]);
        let answer = send(newer, draft(8, method, &url, headers, body)).await;
        let took = started.elapsed();
        // The older request ended, its 10 bytes kept.
        let older = tokio::time::timeout(std::time::Duration::from_secs(5), stuck).await;
        assert!(older.is_ok(), "{case}: the older request still runs");
        assert!(
            took < std::time::Duration::from_secs(4),
            "{case}: took {took:?}"
        );
        match method {
            "HEAD" => {
                assert_eq!(answer.status, StatusCode::NO_CONTENT, "{case}: {answer:?}");
                assert_eq!(answer.header("upload-offset"), Some("10"), "{case}");
            }
            "PATCH" => {
                assert_eq!(answer.status, StatusCode::NO_CONTENT, "{case}: {answer:?}");
                assert_eq!(answer.header("upload-offset"), Some("20"), "{case}");
            }
            _ => {
                assert_eq!(answer.status, StatusCode::NO_CONTENT, "{case}: {answer:?}");
                let head = send(&state, draft(8, "HEAD", &url, &[], None)).await;
                assert_eq!(head.status, StatusCode::NOT_FOUND, "{case}");
            }
        }
        eprintln!("{case}: answered after {took:?}");
    }
}

#[tokio::test]
async fn tus_still_refuses_a_second_writer_at_once() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let created = send(
        &state,
        Request::builder()
            .method("POST")
            .uri("/v1/tus/")
            .header("tus-resumable", "1.0.0")
            .header("upload-length", "100")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    let url = created.header("location").unwrap().to_owned();
    let tus_patch = |offset: &str, body: Body| {
        Request::builder()
            .method("PATCH")
            .uri(&url)
            .header("tus-resumable", "1.0.0")
            .header("content-type", "application/offset+octet-stream")
            .header("upload-offset", offset)
            .body(body)
            .unwrap()
    };
    let stuck = {
        let state = state.clone();
        let request = tus_patch("0", trickle(b"0123456789"));
        tokio::spawn(async move { send(&state, request).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let second = send(&state, tus_patch("0", Body::from("x"))).await;
    assert_eq!(second.status, StatusCode::LOCKED, "{second:?}");
    assert!(!stuck.is_finished(), "tus ends no request for another");
    stuck.abort();
}

#[tokio::test]
async fn repr_digest_is_checked_against_what_was_stored() {
    use base64::Engine as _;
    use sha2::Digest as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let data = test_data(7 * MIB + 123, 5);
    let sha = b64(&sha2::Sha256::digest(&data));
    let crc = b64(&(sluice_store::ChecksumAlgorithm::Crc32c
        .checksum(&data)
        .value as u32)
        .to_be_bytes());
    let mut wrong = data.clone();
    wrong[4 * MIB] ^= 1;
    let wrong_sha = b64(&sha2::Sha256::digest(&wrong));
    struct Case {
        name: &'static str,
        digest: String,
        /// Sent whole with the creation, or in three appends over two gateways.
        whole: bool,
        status: StatusCode,
        code: &'static str,
    }
    #[rustfmt::skip]
    let cases = [
        Case { name: "sha-256 in appends", digest: format!("sha-256=:{sha}:"), whole: false, status: StatusCode::CREATED, code: "", },
        Case { name: "crc32c in appends", digest: format!("crc32c=:{crc}:"), whole: false, status: StatusCode::CREATED, code: "", },
        Case { name: "sha-256 preferred, others ignored", digest: format!("unixsum=:AAAA:, crc32c=:AAAAAA==:, sha-256=:{sha}:"), whole: false, status: StatusCode::CREATED, code: "", },
        Case { name: "sha-256 whole", digest: format!("sha-256=:{sha}:"), whole: true, status: StatusCode::CREATED, code: "", },
        Case { name: "wrong sha-256 in appends", digest: format!("sha-256=:{wrong_sha}:"), whole: false, status: StatusCode::BAD_REQUEST, code: "digest_mismatch", },
        Case { name: "wrong crc32c in appends", digest: "crc32c=:AAAAAA==:".into(), whole: false, status: StatusCode::BAD_REQUEST, code: "digest_mismatch", },
        Case { name: "wrong sha-256 whole", digest: format!("sha-256=:{wrong_sha}:"), whole: true, status: StatusCode::BAD_REQUEST, code: "digest_mismatch", },
        Case { name: "wrong sha-256, completed by an empty append", digest: format!("sha-256=:{wrong_sha}:"), whole: false, status: StatusCode::BAD_REQUEST, code: "digest_mismatch" },
    ];
    for case in cases {
        let store = MemoryStore::new();
        let (one, two) = (gateway(&store), gateway(&store));
        let last = match case.whole {
            true => {
                send(
                    &one,
                    draft(
                        8,
                        "POST",
                        "/v1/tus/",
                        &[("upload-complete", "?1"), ("repr-digest", &case.digest)],
                        Some(&data),
                    ),
                )
                .await
            }
            false => {
                let created = send(
                    &one,
                    draft(
                        8,
                        "POST",
                        "/v1/tus/",
                        &[("upload-complete", "?0"), ("repr-digest", &case.digest)],
                        Some(&data[..1000]),
                    ),
                )
                .await;
                assert_eq!(
                    created.status,
                    StatusCode::CREATED,
                    "{}: {created:?}",
                    case.name
                );
                let url = created.header("location").unwrap().to_owned();
                let middle = send(&two, append(&url, "1000", false, &data[1000..6 * MIB])).await;
                assert_eq!(
                    middle.status,
                    StatusCode::NO_CONTENT,
                    "{}: {middle:?}",
                    case.name
                );
                let offset = (6 * MIB).to_string();
                if case.name.ends_with("empty append") {
                    let rest = send(&one, append(&url, &offset, false, &data[6 * MIB..])).await;
                    assert_eq!(
                        rest.status,
                        StatusCode::NO_CONTENT,
                        "{}: {rest:?}",
                        case.name
                    );
                    let end = data.len().to_string();
                    send(&two, append(&url, &end, true, b"")).await
                } else {
                    send(&one, append(&url, &offset, true, &data[6 * MIB..])).await
                }
            }
        };
        assert_eq!(last.status, case.status, "{}: {last:?}", case.name);
        match case.code {
            "" => {
                let key = last.json()["key"].as_str().unwrap().to_owned();
                assert_eq!(store.object(&key).unwrap(), &data[..], "{}", case.name);
                assert!(last.header("repr-digest").is_some(), "{}", case.name);
            }
            code => {
                assert_eq!(last.code(), code, "{}", case.name);
                let objects: Vec<String> = keys(&store)
                    .await
                    .into_iter()
                    .filter(|k| !k.starts_with("_sluice/"))
                    .collect();
                assert!(objects.is_empty(), "{}: {objects:?}", case.name);
                assert!(
                    keys(&store)
                        .await
                        .iter()
                        .all(|k| !k.starts_with("_sluice/tus/")),
                    "{}: the upload stays",
                    case.name
                );
            }
        }
        assert_eq!(store.open_uploads(), 0, "{}", case.name);
    }
    // A digest that cannot be one is refused at creation.
    let store = MemoryStore::new();
    let state = gateway(&store);
    for bad in ["sha-256=:AAAA:", "sha-256=:not base64:", "sha-256"] {
        let answer = send(
            &state,
            draft(
                8,
                "POST",
                "/v1/tus/",
                &[("upload-complete", "?0"), ("repr-digest", bad)],
                None,
            ),
        )
        .await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{bad}: {answer:?}");
        assert_eq!(answer.code(), "invalid_header", "{bad}");
    }
    assert!(keys(&store).await.is_empty());
}

const JWT_SECRET: &[u8] = b"the draft's test secret, thirty-two bytes or more";

fn jwt(tenant: &str, extra: serde_json::Value) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut claims = serde_json::json!({ "sub": tenant, "exp": now + 600 });
    for (name, value) in extra.as_object().unwrap() {
        claims[name] = value.clone();
    }
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET),
    )
    .unwrap()
}

/// The events waiting in the outbox, as (type, upload_kind, key, tenant).
async fn outbox(store: &MemoryStore) -> Vec<(String, String, String, String)> {
    use futures::TryStreamExt as _;
    let mut events = Vec::new();
    let page = store
        .list_objects(sluice_server::events::outbox::PENDING, None, 1000)
        .await
        .unwrap();
    for object in page.objects {
        let output = store.get_object(&object.key, None).await.unwrap();
        let bytes: Vec<Bytes> = output.body.try_collect().await.unwrap();
        let entry: serde_json::Value = serde_json::from_slice(&bytes.concat()).unwrap();
        let event = &entry["event"];
        let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        events.push((
            text(&event["type"]),
            text(&event["data"]["upload_kind"]),
            text(&event["data"]["key"]),
            text(&event["data"]["tenant"]),
        ));
    }
    events.sort();
    events
}

#[tokio::test]
async fn tenants_limits_and_events_hold_for_the_draft() {
    let dir = tempfile::tempdir().unwrap();
    let (jwt_file, events_file) = (dir.path().join("jwt"), dir.path().join("events"));
    std::fs::write(&jwt_file, JWT_SECRET).unwrap();
    std::fs::write(&events_file, JWT_SECRET).unwrap();
    let mut config = ServerConfig {
        key_template: "{tenant}/{uuid}/{filename}".into(),
        ..ServerConfig::default()
    };
    config.auth.jwt_secret_file = Some(jwt_file);
    config.events.urls = vec!["http://127.0.0.1:9/hook".into()];
    config.events.secret_file = Some(events_file);
    config.janitor.interval = std::time::Duration::ZERO;
    let store = MemoryStore::new();
    let state = AppState::new(config, Arc::new(store.clone()) as Arc<dyn ObjectStore>).unwrap();
    let acme = format!("Bearer {}", jwt("acme", serde_json::json!({})));
    let globex = format!("Bearer {}", jwt("globex", serde_json::json!({})));
    let small = format!(
        "Bearer {}",
        jwt("acme", serde_json::json!({ "max_size": 100 }))
    );
    let as_ = |who: &str, mut request: Request<Body>| {
        request
            .headers_mut()
            .insert("authorization", who.parse().unwrap());
        request
    };

    let created = send(
        &state,
        as_(
            &acme,
            draft(
                8,
                "POST",
                "/v1/tus/",
                &[
                    ("upload-complete", "?0"),
                    ("content-disposition", "inline; filename=\"a.txt\""),
                ],
                Some(b"hello "),
            ),
        ),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{created:?}");
    let url = created.header("location").unwrap().to_owned();
    let key = created.header("x-sluice-key").unwrap().to_owned();
    assert!(key.starts_with("acme/") && key.ends_with("/a.txt"), "{key}");

    // Another tenant's upload answers as a missing one, whatever it asks.
    for (method, headers, body) in [
        ("HEAD", vec![], None),
        (
            "PATCH",
            vec![
                ("content-type", PARTIAL),
                ("upload-offset", "6"),
                ("upload-complete", "?1"),
            ],
            Some(&b"x"[..]),
        ),
        ("DELETE", vec![], None),
    ] {
        let answer = send(&state, as_(&globex, draft(8, method, &url, &headers, body))).await;
        assert_eq!(
            answer.status,
            StatusCode::NOT_FOUND,
            "globex {method}: {answer:?}"
        );
    }
    let none = send(&state, draft(8, "HEAD", &url, &[], None)).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED);
    // Refused in the protocol spoken: a problem document, no tus header.
    let refused = send(
        &state,
        draft(8, "POST", "/v1/tus/", &[("upload-complete", "?0")], None),
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        refused.header("content-type"),
        Some("application/problem+json")
    );
    assert_eq!(refused.header("tus-resumable"), None);
    assert!(refused.header("www-authenticate").is_some());

    // A token's max_size: a length over it is refused, and so is no length.
    let over = send(
        &state,
        as_(
            &small,
            draft(
                8,
                "POST",
                "/v1/tus/",
                &[("upload-complete", "?0"), ("upload-length", "101")],
                None,
            ),
        ),
    )
    .await;
    assert_eq!(over.status, StatusCode::PAYLOAD_TOO_LARGE, "{over:?}");
    let unknown = send(
        &state,
        as_(
            &small,
            draft(8, "POST", "/v1/tus/", &[("upload-complete", "?0")], None),
        ),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::FORBIDDEN, "{unknown:?}");

    // Completed by acme: one event, of the draft's kind, with the tenant.
    let last = send(&state, as_(&acme, append(&url, "6", true, b"world"))).await;
    assert_eq!(last.status, StatusCode::CREATED, "{last:?}");
    assert_eq!(store.object(&key).unwrap(), &b"hello world"[..]);
    // And one cancelled before it finished.
    let doomed = send(
        &state,
        as_(
            &acme,
            draft(
                8,
                "POST",
                "/v1/tus/",
                &[("upload-complete", "?0")],
                Some(b"bye"),
            ),
        ),
    )
    .await;
    let doomed_url = doomed.header("location").unwrap().to_owned();
    let doomed_key = doomed.header("x-sluice-key").unwrap().to_owned();
    let cancelled = send(
        &state,
        as_(&acme, draft(8, "DELETE", &doomed_url, &[], None)),
    )
    .await;
    assert_eq!(cancelled.status, StatusCode::NO_CONTENT);
    let events = outbox(&store).await;
    let expected = vec![
        (
            "upload.completed".to_owned(),
            "resumable_append".to_owned(),
            key.clone(),
            "acme".to_owned(),
        ),
        (
            "upload.terminated".to_owned(),
            "resumable_cancelled".to_owned(),
            doomed_key,
            "acme".to_owned(),
        ),
    ];
    assert_eq!(events, expected);
}

#[tokio::test]
async fn an_idle_draft_upload_expires_like_a_tus_one() {
    let store = MemoryStore::new();
    let state = gateway(&store);
    let url = careful(&state, Some(12 * MIB)).await;
    let data = test_data(6 * MIB, 3);
    let appended = send(&state, append(&url, "0", false, &data)).await;
    assert_eq!(appended.status, StatusCode::NO_CONTENT);
    assert_eq!(store.open_uploads(), 1);
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(2 * 24 * 3600);
    let report = sluice_resumable::sweep::sweep(&state.resumable, later, false)
        .await
        .unwrap();
    assert_eq!((report.seen, report.expired), (1, 1));
    assert_eq!(store.open_uploads(), 0);
    let head = send(&state, draft(8, "HEAD", &url, &[], None)).await;
    assert_eq!(head.status, StatusCode::NOT_FOUND);
    assert!(keys(&store).await.is_empty(), "{:?}", keys(&store).await);
}

/// Issue 47, draft -11 §4.4.2: an append that would run past the upload's
/// known length is rejected *and* makes the upload invalid: every later
/// request on it (HEAD, append, DELETE) is answered 410, and nothing of it
/// stays in the store but its record (swept when it expires). With a Content-Length that says so at
/// once, and with a chunked body found too long midway, after parts stored.
#[tokio::test]
async fn an_append_past_the_length_invalidates_the_upload() {
    // (case, bytes appended before, Content-Length sent, Upload-Complete)
    let cases: [(&str, usize, bool, bool); 4] = [
        ("declared past the length, completing", 1, true, true),
        ("declared past the length, not completing", 1, true, false),
        (
            "chunked past the length, a part stored",
            6 * MIB,
            false,
            true,
        ),
        ("chunked past the length, nothing stored", 1, false, true),
    ];
    for (case, first, declared, completing) in cases {
        let store = MemoryStore::new();
        let state = gateway(&store);
        let data = test_data(8 * MIB, 9);
        let url = careful(&state, Some(data.len())).await;
        let answer = send(&state, append(&url, "0", false, &data[..first])).await;
        assert_eq!(answer.status, StatusCode::NO_CONTENT, "{case}: {answer:?}");
        // The rest and a byte more.
        let mut past = data[first..].to_vec();
        past.push(0);
        let request = match declared {
            true => append(&url, &first.to_string(), completing, &past),
            false => Request::builder()
                .method("PATCH")
                .uri(&url)
                .header("upload-draft-interop-version", "8")
                .header("content-type", PARTIAL)
                .header("upload-offset", first.to_string())
                .header("upload-complete", "?1")
                .body(chunked(&past))
                .unwrap(),
        };
        let answer = send(&state, request).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{case}: {answer:?}");
        assert!(
            answer.json()["type"]
                .as_str()
                .is_some_and(|t| t.ends_with("inconsistent-upload-length")),
            "{case}: {}",
            answer.json()
        );
        let head = send(&state, draft(8, "HEAD", &url, &[], None)).await;
        assert_eq!(head.status, StatusCode::GONE, "{case}: HEAD {head:?}");
        let again = send(
            &state,
            append(&url, &first.to_string(), true, &data[first..]),
        )
        .await;
        assert_eq!(again.status, StatusCode::GONE, "{case}: append {again:?}");
        let open = store.list_multipart_uploads("").await.unwrap();
        assert!(open.is_empty(), "{case}: {open:?}");
        let left: Vec<String> = keys(&store)
            .await
            .into_iter()
            .filter(|k| !k.ends_with("/state") && !k.ends_with("/lock"))
            .collect();
        assert!(left.is_empty(), "{case}: {left:?}");
        let cancelled = send(&state, draft(8, "DELETE", &url, &[], None)).await;
        assert_eq!(cancelled.status, StatusCode::GONE, "{case}: {cancelled:?}");
    }
}
