//! The pre-create hook against a real HTTP hook on loopback, for PUT, form and
//! tus creation alike: it lets through, renames, refuses with its own status
//! and message, fails, stalls, or is not there at all; the upload is stored
//! (where the hook said) or refused with nothing stored.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::IntoResponse;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use sluice_server::{AppState, ServerConfig};
use sluice_store::ObjectStore;
use sluice_testkit::MemoryStore;
use tower::ServiceExt;

const SECRET: &[u8] = b"the hook secret of thirty-two bytes or more";

/// The hook: what it answers depends on how the proposed key starts.
async fn hook(
    seen: axum::extract::State<Arc<Mutex<Vec<Value>>>>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let signed = headers
        .get("sluice-signature")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|h| sluice_server::events::signature::verify(SECRET, h, &body, now, 60));
    assert!(signed, "hook requests are signed");
    let request: Value = serde_json::from_slice(&body).unwrap();
    seen.lock().unwrap().push(request.clone());
    let key = request["key"].as_str().unwrap().to_owned();
    let name = key.rsplit('/').next().unwrap().to_owned();
    match name.split('-').next().unwrap() {
        "allow" => StatusCode::NO_CONTENT.into_response(),
        "rename" => axum::Json(json!({
            "key": format!("renamed/{name}"),
            "content_type": "text/x-renamed",
            "metadata": { "checked": "yes" },
        }))
        .into_response(),
        "quota" => (
            StatusCode::FORBIDDEN,
            axum::Json(json!({ "message": "quota exceeded for acme" })),
        )
            .into_response(),
        "odd" => (StatusCode::UNPROCESSABLE_ENTITY, "no odd names").into_response(),
        "broken" => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        "slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            StatusCode::NO_CONTENT.into_response()
        }
        "evil" => axum::Json(json!({ "key": "../escape" })).into_response(),
        // Issue 35, hole 6: a redirect to a page that approves anything.
        "redirect" => (
            StatusCode::TEMPORARY_REDIRECT,
            [(axum::http::header::LOCATION, "/approve-anything")],
        )
            .into_response(),
        other => panic!("no case {other}"),
    }
}

async fn start_hook() -> (SocketAddr, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let app = axum::Router::new()
        .route("/pre-create", axum::routing::post(hook))
        .route(
            "/approve-anything",
            axum::routing::post(|| async { StatusCode::OK }),
        )
        .with_state(seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (address, seen)
}

fn gateway(
    store: &MemoryStore,
    url: String,
    fail_open: bool,
    secret: &std::path::Path,
) -> AppState {
    let mut config = ServerConfig {
        key_template: "{uuid}/{filename}".into(),
        ..ServerConfig::default()
    };
    config.janitor.interval = Duration::ZERO;
    config.hooks.pre_create_url = Some(url);
    config.hooks.timeout = Duration::from_secs(1);
    config.hooks.fail_open = fail_open;
    config.hooks.secret_file = Some(secret.to_owned());
    AppState::new(config, Arc::new(store.clone())).unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Route {
    Put,
    Form,
    Tus,
    /// The IETF draft's optimistic creation.
    Draft,
}

/// Uploads `name` by `route`; the status, the error code and the stored key.
async fn upload(
    state: &AppState,
    route: Route,
    name: &str,
) -> (StatusCode, String, Option<String>) {
    let request = match route {
        Route::Put => Request::builder()
            .method("PUT")
            .uri(format!("/v1/objects/{name}"))
            .body(Body::from("hello"))
            .unwrap(),
        Route::Form => Request::builder()
            .method("POST")
            .uri("/v1/objects")
            .header("content-type", "multipart/form-data; boundary=B")
            .body(Body::from(format!(
                "--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"{name}\"\r\n\r\nhello\r\n--B--\r\n"
            )))
            .unwrap(),
        Route::Tus => {
            use base64::Engine as _;
            let encoded = base64::engine::general_purpose::STANDARD.encode(name);
            Request::builder()
                .method("POST")
                .uri("/v1/tus/")
                .header("tus-resumable", "1.0.0")
                .header("upload-length", 5)
                .header("upload-metadata", format!("filename {encoded}"))
                .header("content-type", "application/offset+octet-stream")
                .header("content-length", 5)
                .body(Body::from("hello"))
                .unwrap()
        }
        Route::Draft => Request::builder()
            .method("POST")
            .uri("/v1/tus/")
            .header("upload-draft-interop-version", "8")
            .header("upload-complete", "?1")
            .header("content-disposition", format!("inline; filename=\"{name}\""))
            .header("content-length", 5)
            .body(Body::from("hello"))
            .unwrap(),
    };
    let response = state.router().oneshot(request).await.unwrap();
    let status = response.status();
    let key = response
        .headers()
        .get("x-sluice-key")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    // The gateway's error body, or the draft's problem document.
    let code = value["error"]["code"]
        .as_str()
        .or(value["code"].as_str())
        .unwrap_or_default()
        .to_owned();
    let key = key
        .or_else(|| value["key"].as_str().map(str::to_owned))
        .or_else(|| value["objects"][0]["key"].as_str().map(str::to_owned));
    let message = value["error"]["message"]
        .as_str()
        .or(value["detail"].as_str())
        .unwrap_or_default();
    (status, format!("{code} {message}").trim().to_owned(), key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pre_create_hook_decides_for_every_kind_of_upload() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("hook.secret");
    std::fs::write(&secret, SECRET).unwrap();
    let (address, seen) = start_hook().await;
    let url = format!("http://{address}/pre-create");
    let closed = format!(
        "http://{}/pre-create",
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    );
    // (hook, fail open, name, status, code and message start, stored key)
    type Case<'a> = (&'a str, bool, &'a str, u16, &'a str, Option<&'a str>);
    let cases: [Case; 12] = [
        (&url, false, "allow-1", 201, "", Some("allow-1")),
        (&url, false, "rename-1", 201, "", Some("renamed/rename-1")),
        (
            &url,
            false,
            "quota-1",
            403,
            "rejected_by_hook quota exceeded for acme",
            None,
        ),
        (
            &url,
            false,
            "odd-1",
            422,
            "rejected_by_hook no odd names",
            None,
        ),
        (&url, false, "broken-1", 503, "hook_unavailable", None),
        (&url, true, "broken-2", 201, "", Some("broken-2")),
        (&url, false, "slow-1", 503, "hook_unavailable", None),
        (&url, false, "evil-1", 503, "hook_unavailable", None),
        (&closed, false, "allow-2", 503, "hook_unavailable", None),
        (&closed, true, "allow-3", 201, "", Some("allow-3")),
        // A redirect is not followed: the hook did answer, and not with a yes.
        (&url, false, "redirect-1", 403, "rejected_by_hook", None),
        (&url, true, "redirect-2", 403, "rejected_by_hook", None),
    ];
    for route in [Route::Put, Route::Form, Route::Tus, Route::Draft] {
        for (hook_url, fail_open, name, status, code, stored) in cases {
            let store = MemoryStore::new();
            let state = gateway(&store, hook_url.to_owned(), fail_open, &secret);
            let (got, got_code, key) = upload(&state, route, name).await;
            let case = format!("{route:?} {name} (fail open {fail_open}): {got} {got_code}");
            assert_eq!(got.as_u16(), status, "{case}");
            assert!(got_code.starts_with(code), "{case}");
            let objects: Vec<String> = store
                .list_objects("", None, 100)
                .await
                .unwrap()
                .objects
                .into_iter()
                .map(|o| o.key)
                .filter(|k| !k.starts_with("_sluice/"))
                .collect();
            match stored {
                Some(expected) => {
                    // Form and tus keys come from the template: {uuid}/{filename}.
                    let generated =
                        !matches!(route, Route::Put) && !expected.starts_with("renamed/");
                    let key = key.unwrap_or_default();
                    match generated {
                        true => assert!(key.ends_with(&format!("/{expected}")), "{case}: {key}"),
                        false => assert_eq!(key, expected, "{case}"),
                    }
                    assert_eq!(objects, vec![key.clone()], "{case}");
                    let expected = key.as_str();
                    if name.starts_with("rename") {
                        let meta = store.head_object(expected).await.unwrap();
                        assert_eq!(
                            meta.content_type.as_deref(),
                            Some("text/x-renamed"),
                            "{case}"
                        );
                    }
                }
                None => assert!(objects.is_empty(), "{case}: stored {objects:?}"),
            }
        }
    }
    let seen = seen.lock().unwrap();
    let kinds: std::collections::BTreeSet<&str> = seen
        .iter()
        .filter_map(|r| r["upload_kind"].as_str())
        .collect();
    assert_eq!(kinds.len(), 4, "{kinds:?}");
    assert!(kinds.contains("resumable_creation"), "{kinds:?}");
    assert!(seen.iter().all(|r| r["type"] == "upload.pre_create"));
}
