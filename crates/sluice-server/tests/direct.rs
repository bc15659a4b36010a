//! Direct-to-bucket uploads (issue 15): the `/s3/` routes Uppy's Companion
//! serves, on a real MinIO. A table of requests from two tenants checks the
//! answers (Uppy's `{error, message}` shape); the flows then send bytes to the
//! bucket with the URLs and forms the gateway signed, as a browser would, and
//! check what the bucket and the completion point end up with.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use sluice_server::direct::confirm::{self, Outcome};
use sluice_server::{AppState, ServerConfig};
use sluice_store::{ObjectStore, StoreError};
use sluice_testkit::minio;
use tower::ServiceExt;

const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";
const MIB: usize = 1024 * 1024;

fn token(tenant: &str, extra: Value) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut claims = json!({ "sub": tenant, "exp": now + 600 });
    for (name, value) in extra.as_object().unwrap() {
        claims[name] = value.clone();
    }
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(SECRET),
    )
    .unwrap()
}

struct World {
    state: AppState,
    store: Arc<dyn ObjectStore>,
    _dir: tempfile::TempDir,
}

/// A gateway with HS256 tokens and direct uploads on a fresh MinIO prefix.
async fn world(test: &str, expires: Duration) -> Option<World> {
    world_with(test, expires, |_, _| {}).await
}

/// [`world`], with `tweak` applied to the configuration (given the secret's path).
async fn world_with(
    test: &str,
    expires: Duration,
    tweak: impl FnOnce(&mut ServerConfig, &std::path::Path),
) -> Option<World> {
    let bucket_store = minio::store(test).await?;
    let signer = Arc::new(bucket_store.direct_signer(None));
    let store: Arc<dyn ObjectStore> = Arc::new(bucket_store);
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let mut config = ServerConfig {
        store: format!("s3://{}", minio::TEST_BUCKET),
        key_template: "{tenant}/{uuid}/{filename}".into(),
        ..ServerConfig::default()
    };
    config.janitor.interval = Duration::ZERO;
    config.auth.jwt_secret_file = Some(secret.clone());
    config.direct.enabled = true;
    config.direct.expires = expires;
    tweak(&mut config, &secret);
    let state = AppState::new(config, store.clone())
        .unwrap()
        .with_direct_signer(signer);
    Some(World {
        state,
        store,
        _dir: dir,
    })
}

async fn call(
    state: &AppState,
    method: &str,
    uri: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = match body {
        Some(body) => request
            .header("content-type", "application/json")
            .body(Body::from(body.to_string())),
        None => request.body(Body::empty()),
    }
    .unwrap();
    let response = state.router().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (status, value)
}

fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn data(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Sends a file to the bucket with a signed form POST, as Uppy does.
async fn post_form(params: &Value, file: &[u8]) -> (u16, String) {
    let boundary = "sluice-test-boundary";
    let mut body = Vec::new();
    for (name, value) in params["fields"].as_object().unwrap() {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{}\r\n",
                value.as_str().unwrap()
            )
            .as_bytes(),
        );
    }
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let response = reqwest::Client::new()
        .post(params["url"].as_str().unwrap())
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

async fn put_part(url: &str, bytes: Vec<u8>) -> String {
    let response = reqwest::Client::new()
        .put(url)
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    response.headers()["etag"].to_str().unwrap().to_string()
}

async fn stored(store: &Arc<dyn ObjectStore>, key: &str) -> Option<Vec<u8>> {
    match store.get_object(key, None).await {
        Ok(output) => {
            let mut bytes = Vec::new();
            let mut body = output.body;
            use futures::StreamExt;
            while let Some(chunk) = body.next().await {
                bytes.extend_from_slice(&chunk.unwrap());
            }
            Some(bytes)
        }
        Err(StoreError::NoSuchKey { .. }) => None,
        Err(e) => panic!("{e}"),
    }
}

fn completed(state: &AppState, kind: &str) -> u64 {
    let text = state.metrics.render(&state.engine);
    let wanted = format!("sluice_uploads_completed_total{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&wanted))
        .map_or(0, |v| v.parse().unwrap())
}

/// (what, method, uri, token, body, status, error code)
type Case<'a> = (
    &'a str,
    &'a str,
    String,
    Option<&'a str>,
    Option<Value>,
    u16,
    &'a str,
);

#[tokio::test]
async fn routes_answer_as_uppy_expects_and_confine_each_tenant() {
    let Some(world) = world("direct-table", Duration::from_secs(900)).await else {
        return;
    };
    let state = &world.state;
    let acme = token(
        "acme",
        json!({ "ops": ["put", "resume"], "max_size": 8 * MIB }),
    );
    let globex = token("globex", json!({}));
    let reader = token("acme", json!({ "ops": ["get"] }));
    let (status, created) = call(
        state,
        "POST",
        "/s3/multipart",
        Some(&acme),
        Some(json!({ "filename": "report.pdf", "type": "application/pdf", "metadata": { "name": "report.pdf", "relativePath": null } })),
    )
    .await;
    assert_eq!(status, 200, "{created}");
    let key = created["key"].as_str().unwrap().to_string();
    let upload = created["uploadId"].as_str().unwrap().to_string();
    assert!(
        key.starts_with("acme/") && key.ends_with("/report.pdf"),
        "{key}"
    );
    assert_eq!(created["bucket"], minio::TEST_BUCKET);
    let k = enc(&key);
    let sign = |part: &str| format!("/s3/multipart/{}/{part}?key={k}", enc(&upload));
    let list = format!("/s3/multipart/{}?key={k}", enc(&upload));
    let complete = format!("/s3/multipart/{}/complete?key={k}", enc(&upload));
    let params = "/s3/params?filename=a.txt&type=text%2Fplain&metadata%5Bname%5D=a.txt";
    // globex's own key with acme's upload id: the id must go with the key.
    let theirs = enc("globex/2026/11/27/mine/report.pdf");
    let foreign_id = |route: &str| format!("/s3/multipart/{}{route}?key={theirs}", enc(&upload));
    let cases: Vec<Case> = vec![
        (
            "params without a token",
            "GET",
            params.into(),
            None,
            None,
            401,
            "unauthenticated",
        ),
        (
            "params with a read-only token",
            "GET",
            params.into(),
            Some(&reader),
            None,
            403,
            "forbidden",
        ),
        (
            "params without a filename",
            "GET",
            "/s3/params?type=text%2Fplain".into(),
            Some(&acme),
            None,
            400,
            "bad_request",
        ),
        (
            "params with a bad metadata name",
            "GET",
            "/s3/params?filename=a&metadata%5Bb%20c%5D=1".into(),
            Some(&acme),
            None,
            400,
            "bad_request",
        ),
        (
            "create without a filename",
            "POST",
            "/s3/multipart".into(),
            Some(&acme),
            Some(json!({ "type": "x/y" })),
            400,
            "bad_request",
        ),
        (
            "create without a token",
            "POST",
            "/s3/multipart".into(),
            None,
            Some(json!({ "filename": "f" })),
            401,
            "unauthenticated",
        ),
        ("sign part 1", "GET", sign("1"), Some(&acme), None, 200, ""),
        (
            "sign part 0",
            "GET",
            sign("0"),
            Some(&acme),
            None,
            400,
            "bad_request",
        ),
        (
            "sign part 10001",
            "GET",
            sign("10001"),
            Some(&acme),
            None,
            400,
            "bad_request",
        ),
        (
            "sign a part beyond max_size",
            "GET",
            sign("3"),
            Some(&acme),
            None,
            413,
            "too_large",
        ),
        (
            "sign with another tenant's token",
            "GET",
            sign("1"),
            Some(&globex),
            None,
            404,
            "upload_not_found",
        ),
        (
            "sign another tenant's upload id under one's own key",
            "GET",
            foreign_id("/1"),
            Some(&globex),
            None,
            404,
            "upload_not_found",
        ),
        (
            "sign with a read-only token",
            "GET",
            sign("1"),
            Some(&reader),
            None,
            403,
            "forbidden",
        ),
        (
            "sign without a key",
            "GET",
            format!("/s3/multipart/{}/1", enc(&upload)),
            Some(&acme),
            None,
            400,
            "bad_request",
        ),
        (
            "list the parts",
            "GET",
            list.clone(),
            Some(&acme),
            None,
            200,
            "",
        ),
        (
            "list another tenant's parts",
            "GET",
            list.clone(),
            Some(&globex),
            None,
            404,
            "upload_not_found",
        ),
        (
            "list an unknown upload",
            "GET",
            format!("/s3/multipart/nope?key={k}"),
            Some(&acme),
            None,
            404,
            "upload_not_found",
        ),
        (
            "complete with a part not sent",
            "POST",
            complete.clone(),
            Some(&acme),
            Some(json!({ "parts": [{ "ETag": "\"x\"", "PartNumber": 1 }] })),
            400,
            "bad_request",
        ),
        (
            "complete with no parts",
            "POST",
            complete.clone(),
            Some(&acme),
            Some(json!({ "parts": [] })),
            400,
            "bad_request",
        ),
        (
            "complete another tenant's upload",
            "POST",
            complete.clone(),
            Some(&globex),
            Some(json!({ "parts": [] })),
            404,
            "upload_not_found",
        ),
        (
            "abort another tenant's upload",
            "DELETE",
            list.clone(),
            Some(&globex),
            None,
            404,
            "upload_not_found",
        ),
    ];
    for (what, method, uri, token, body, want, code) in cases {
        let (status, answer) = call(state, method, &uri, token, body).await;
        assert_eq!(status.as_u16(), want, "{what}: {answer}");
        if want >= 400 {
            assert_eq!(answer["error"], code, "{what}: {answer}");
            assert!(
                answer["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{what}: {answer}"
            );
        }
    }
    // The part URL signs no checksum of an empty body (recent SDKs' trap).
    let (_, signed) = call(state, "GET", &sign("1"), Some(&acme), None).await;
    let url = signed["url"].as_str().unwrap();
    assert!(!url.to_ascii_lowercase().contains("checksum"), "{url}");
    assert_eq!(signed["expires"], 900);
    // Nothing of acme's upload was touched by the refused requests.
    assert!(world
        .store
        .list_parts(&key, &upload)
        .await
        .unwrap()
        .is_empty());
    let (status, _) = call(state, "DELETE", &list, Some(&acme), None).await;
    assert_eq!(status, 200);
    let (status, _) = call(state, "DELETE", &list, Some(&acme), None).await;
    assert_eq!(status, 200, "aborting twice is not an error");
}

#[tokio::test]
async fn multipart_uploads_complete_through_the_gateway_within_max_size() {
    let Some(world) = world("direct-multipart", Duration::from_secs(900)).await else {
        return;
    };
    let state = &world.state;
    let acme = token("acme", json!({ "max_size": 8 * MIB }));
    // (what, part sizes, status of the completion)
    let cases: [(&str, &[usize], u16); 2] = [
        ("6 MiB in two parts", &[5 * MIB, MIB], 200),
        ("10 MiB, over max_size", &[5 * MIB, 5 * MIB], 413),
    ];
    for (what, sizes, want) in cases {
        let (_, created) = call(
            state,
            "POST",
            "/s3/multipart",
            Some(&acme),
            Some(json!({ "filename": "big.bin", "type": "application/octet-stream", "metadata": {} })),
        )
        .await;
        let key = created["key"].as_str().unwrap().to_string();
        let upload = created["uploadId"].as_str().unwrap().to_string();
        let k = enc(&key);
        let mut whole = Vec::new();
        let mut parts = Vec::new();
        for (i, size) in sizes.iter().enumerate() {
            let number = i + 1;
            let bytes = data(number as u8, *size);
            whole.extend_from_slice(&bytes);
            let (_, signed) = call(
                state,
                "GET",
                &format!("/s3/multipart/{}/{number}?key={k}", enc(&upload)),
                Some(&acme),
                None,
            )
            .await;
            let etag = put_part(signed["url"].as_str().unwrap(), bytes).await;
            parts.push(json!({ "ETag": etag, "PartNumber": number }));
        }
        let (_, listed) = call(
            state,
            "GET",
            &format!("/s3/multipart/{}?key={k}", enc(&upload)),
            Some(&acme),
            None,
        )
        .await;
        let listed: Vec<(u64, u64)> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                (
                    p["PartNumber"].as_u64().unwrap(),
                    p["Size"].as_u64().unwrap(),
                )
            })
            .collect();
        let expected: Vec<(u64, u64)> = sizes
            .iter()
            .enumerate()
            .map(|(i, s)| (i as u64 + 1, *s as u64))
            .collect();
        assert_eq!(listed, expected, "{what}");
        let (status, answer) = call(
            state,
            "POST",
            &format!("/s3/multipart/{}/complete?key={k}", enc(&upload)),
            Some(&acme),
            Some(json!({ "parts": parts })),
        )
        .await;
        assert_eq!(status.as_u16(), want, "{what}: {answer}");
        if want == 200 {
            assert_eq!(answer["key"], key.as_str(), "{what}");
            assert!(
                answer["location"].as_str().unwrap().ends_with("/big.bin"),
                "{answer}"
            );
            assert_eq!(stored(&world.store, &key).await, Some(whole), "{what}");
        } else {
            assert_eq!(stored(&world.store, &key).await, None, "{what}");
            assert!(
                matches!(
                    world.store.list_parts(&key, &upload).await,
                    Err(StoreError::NoSuchUpload { .. })
                ),
                "{what}: the refused upload is aborted"
            );
        }
    }
    assert_eq!(completed(state, "direct_multipart"), 1);
}

#[tokio::test]
async fn single_request_uploads_are_pinned_by_the_policy_and_confirmed_once() {
    let Some(world) = world("direct-post", Duration::from_secs(900)).await else {
        return;
    };
    let state = &world.state;
    let acme = token("acme", json!({ "max_size": 1024 }));
    let params = |name: &str| {
        format!("/s3/params?filename={name}&type=text%2Fplain&metadata%5Bnote%5D=caf%C3%A9")
    };
    // (what, file size, bucket's status)
    let cases = [("fits", 1000, 204), ("over max_size", 1025, 400)];
    let mut keys = Vec::new();
    for (what, size, want) in cases {
        let (status, signed) = call(
            state,
            "GET",
            &params(what.split(' ').next().unwrap()),
            Some(&acme),
            None,
        )
        .await;
        assert_eq!(status, 200, "{what}: {signed}");
        assert_eq!(signed["method"], "POST");
        let key = signed["fields"]["key"].as_str().unwrap().to_string();
        assert!(key.contains("acme/"), "{key}");
        let (status, text) = post_form(&signed, &data(7, size)).await;
        assert_eq!(status, want, "{what}: {text}");
        keys.push((key, size, want));
    }
    // Tampering with a signed field: the bucket refuses.
    let (_, mut signed) = call(state, "GET", &params("tamper"), Some(&acme), None).await;
    signed["fields"]["key"] = json!("globex/stolen");
    let (status, _) = post_form(&signed, b"x").await;
    assert_eq!(status, 403);
    // Two gateways look at once: the upload is confirmed exactly once.
    let other = world.state.clone();
    let (a, b) = tokio::join!(confirm::pass(state), confirm::pass(&other));
    let outcomes: Vec<Outcome> = a.unwrap().into_iter().chain(b.unwrap()).collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Outcome::Confirmed)
            .count(),
        1,
        "{outcomes:?}"
    );
    assert_eq!(completed(state, "direct_post"), 1);
    for (key, size, want) in &keys {
        let bytes = stored(
            &world.store,
            key.strip_prefix(&prefix_of(&world, key)).unwrap_or(key),
        )
        .await;
        match want {
            204 => assert_eq!(bytes, Some(data(7, *size)), "{key}"),
            _ => assert_eq!(bytes, None, "{key}: nothing stored"),
        }
    }
    // The unused and refused signatures stay pending until their expiry; the
    // used one is watched for a second use until then.
    let mut outcomes = confirm::pass(state).await.unwrap();
    outcomes.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(
        outcomes,
        vec![Outcome::Waiting, Outcome::Waiting, Outcome::Watching]
    );
}

/// A signed policy works until it expires; S3 cannot make it single-use. A
/// second use replaces the object, and that object is announced too: every
/// object the policy made has its own `upload.completed` (its own ETag), so
/// nothing a consumer acted on is changed behind its back unannounced.
#[tokio::test]
async fn a_policy_used_twice_announces_each_object_it_made() {
    let Some(world) = world("direct-reuse", Duration::from_secs(900)).await else {
        return;
    };
    let state = &world.state;
    let acme = token("acme", json!({ "max_size": 1024 }));
    let (status, signed) = call(
        state,
        "GET",
        "/s3/params?filename=twice.txt",
        Some(&acme),
        None,
    )
    .await;
    assert_eq!(status, 200, "{signed}");
    let key = signed["fields"]["key"].as_str().unwrap().to_string();
    let key = key
        .strip_prefix(&prefix_of(&world, &key))
        .unwrap_or(&key)
        .to_string();
    let mut etags = Vec::new();
    // (use, bytes sent, events so far)
    for (seed, events) in [(1u8, 1u64), (2, 2)] {
        let (status, text) = post_form(&signed, &data(seed, 500)).await;
        assert_eq!(status, 204, "use {seed}: {text}");
        let outcomes = confirm::pass(state).await.unwrap();
        assert_eq!(outcomes, vec![Outcome::Confirmed], "use {seed}");
        assert_eq!(completed(state, "direct_post"), events, "use {seed}");
        assert_eq!(stored(&world.store, &key).await, Some(data(seed, 500)));
        etags.push(world.store.head_object(&key).await.unwrap().etag);
        // Looked at again, an unchanged object is not announced twice.
        assert_eq!(confirm::pass(state).await.unwrap(), vec![Outcome::Watching]);
        assert_eq!(completed(state, "direct_post"), events, "use {seed}");
    }
    assert_ne!(etags[0], etags[1]);
}

/// No object without its event, with a gateway killed between announcing an
/// object and writing down that it did (so its claim lapses and another look
/// finds the object again): the event is written again under the same id, one
/// entry in the outbox; a second use of the policy is another event.
#[tokio::test]
async fn a_confirmation_cut_short_announces_the_same_event_again() {
    let Some(world) = world_with("direct-cut", Duration::from_secs(900), |config, secret| {
        config.events.urls = vec!["http://127.0.0.1:9/hook".into()];
        config.events.secret_file = Some(secret.to_path_buf());
    })
    .await
    else {
        return;
    };
    let state = &world.state;
    let acme = token("acme", json!({}));
    let (_, signed) = call(
        state,
        "GET",
        "/s3/params?filename=cut.txt",
        Some(&acme),
        None,
    )
    .await;
    let outbox = || async {
        let page = world
            .store
            .list_objects("_sluice/events/pending/", None, 100)
            .await
            .unwrap();
        page.objects.len()
    };
    // (what, bytes posted first, cut short after announcing, events in the outbox after)
    let steps = [
        ("the first use, cut short", Some(1u8), true, 1),
        ("the next look finds it again", None, false, 1),
        ("a second use", Some(2), false, 2),
    ];
    for (what, posted, cut, events) in steps {
        if let Some(seed) = posted {
            let (status, text) = post_form(&signed, &data(seed, 300)).await;
            assert_eq!(status, 204, "{what}: {text}");
        }
        let outcomes = confirm::pass(state).await.unwrap();
        assert_eq!(outcomes, vec![Outcome::Confirmed], "{what}");
        if cut {
            // The record as a gateway killed after the event leaves it: its
            // claim lapsed, nothing written down as announced.
            let page = world
                .store
                .list_objects(confirm::PENDING, None, 10)
                .await
                .unwrap();
            let name = page.objects[0].key.clone();
            let chunks: Vec<Bytes> = futures::TryStreamExt::try_collect(
                world.store.get_object(&name, None).await.unwrap().body,
            )
            .await
            .unwrap();
            let mut record: confirm::Pending = serde_json::from_slice(&chunks.concat()).unwrap();
            record.announced_etag = None;
            record.claimed_until = 0;
            let body = Bytes::from(serde_json::to_vec(&record).unwrap());
            let rewrite = sluice_store::PutRequest::new(name, body);
            world.store.put_object(rewrite).await.unwrap();
        }
        assert_eq!(outbox().await, events, "{what}");
    }
}

/// The store's own prefix before the keys it hands out in form fields.
fn prefix_of(world: &World, key: &str) -> String {
    let description = world.store.describe();
    let prefix = description
        .split_once(&format!("s3://{}/", minio::TEST_BUCKET))
        .map_or("", |(_, p)| p);
    match key.starts_with(prefix) {
        true => prefix.to_string(),
        false => String::new(),
    }
}

/// The `expiration` of the POST policy in signed form fields.
fn policy_expiration(signed: &Value) -> SystemTime {
    use base64::Engine;
    let policy = signed["fields"]["policy"].as_str().expect("a policy field");
    let document: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(policy)
            .unwrap(),
    )
    .unwrap();
    humantime::parse_rfc3339(document["expiration"].as_str().unwrap()).unwrap()
}

#[tokio::test]
async fn signatures_never_used_are_dropped_after_their_expiry() {
    let Some(world) = world("direct-expiry", Duration::from_secs(1)).await else {
        return;
    };
    let acme = token("acme", json!({}));
    // One signature is never used, one is used and then watched.
    for name in ["unused", "used"] {
        let uri = format!("/s3/params?filename={name}");
        let asked = SystemTime::now();
        let (status, signed) = call(&world.state, "GET", &uri, Some(&acme), None).await;
        assert_eq!(status, 200);
        // The policy's whole-second expiration leaves the whole lifetime.
        assert!(
            policy_expiration(&signed) >= asked + Duration::from_secs(1),
            "{signed}"
        );
        if name == "used" {
            let (status, text) = post_form(&signed, b"once").await;
            assert_eq!(status, 204, "{text}");
        }
    }
    let mut outcomes = confirm::pass(&world.state).await.unwrap();
    outcomes.sort_by_key(|o| format!("{o:?}"));
    assert_eq!(outcomes, vec![Outcome::Confirmed, Outcome::Waiting]);
    // Expired (1 s, rounded up to a whole second: under 2 s from signing)
    // and a grace of one more lifetime, at one-second resolution: 4 s.
    tokio::time::sleep(Duration::from_millis(4200)).await;
    assert_eq!(
        confirm::pass(&world.state).await.unwrap(),
        vec![Outcome::Expired; 2]
    );
    assert!(confirm::pass(&world.state).await.unwrap().is_empty());
}

#[tokio::test]
async fn direct_routes_are_off_unless_configured() {
    let config = ServerConfig::default();
    let state = AppState::new(config, Arc::new(sluice_testkit::MemoryStore::new())).unwrap();
    let (status, answer) = call(
        &state,
        "POST",
        "/s3/multipart",
        None,
        Some(json!({ "filename": "f" })),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(answer["error"], "direct_uploads_off");
    // (what, store, expires, error names)
    let cases = [
        ("a directory store", "./data", 900, "bucket store"),
        (
            "a lifetime over 7 days",
            "s3://bucket-b",
            8 * 86400,
            "7 days",
        ),
        ("a lifetime of 0", "s3://bucket-b", 0, "must be at least 1s"),
    ];
    for (what, store, expires, reason) in cases {
        let mut config = ServerConfig {
            store: store.into(),
            ..ServerConfig::default()
        };
        config.direct.enabled = true;
        config.direct.expires = Duration::from_secs(expires);
        let error = config.validate().unwrap_err().to_string();
        assert!(error.contains(reason), "{what}: {error}");
    }
    let _ = Bytes::new();
}

#[tokio::test]
async fn abandoned_direct_multipart_uploads_are_aborted_by_the_janitor() {
    let Some(world) = world("direct-janitor", Duration::from_secs(900)).await else {
        return;
    };
    let acme = token("acme", json!({}));
    let (_, created) = call(
        &world.state,
        "POST",
        "/s3/multipart",
        Some(&acme),
        Some(json!({ "filename": "left.bin" })),
    )
    .await;
    let key = created["key"].as_str().unwrap();
    let upload = created["uploadId"].as_str().unwrap();
    // A day later (the default janitor.older_than), the pass finds it stale.
    let later = SystemTime::now() + Duration::from_secs(25 * 3600);
    let report = sluice_resumable::janitor::run_once(
        &world.state.resumable,
        Duration::from_secs(24 * 3600),
        false,
        later,
    )
    .await
    .unwrap();
    assert_eq!(report.multipart.aborted.len(), 1, "{report:?}");
    assert!(matches!(
        world.store.list_parts(key, upload).await,
        Err(StoreError::NoSuchUpload { .. })
    ));
}

#[tokio::test]
async fn an_object_older_than_the_signature_is_not_taken_for_the_upload() {
    let Some(world) = world("direct-older", Duration::from_secs(900)).await else {
        return;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    world
        .store
        .put_object(sluice_store::PutRequest::new(
            "acme/taken",
            Bytes::from_static(b"old"),
        ))
        .await
        .unwrap();
    // Signed for a key that held an object before (a hook may choose one):
    // that object, an hour older than the signature, is not the upload.
    let pending = confirm::Pending {
        signed_at: now + 3600,
        ..confirm::Pending::new(
            sluice_upload::UploadKind::DirectPost,
            confirm::Watched::Key("acme/taken".into()),
            Some("acme".into()),
            1024,
            UNIX_EPOCH + Duration::from_secs(now + 4500),
        )
    };
    confirm::record(&world.store, &pending).await.unwrap();
    assert_eq!(
        confirm::pass(&world.state).await.unwrap(),
        vec![Outcome::Waiting]
    );
    assert_eq!(completed(&world.state, "direct_post"), 0);
}
