//! Authentication and confinement (issue 14): two tenants, every route, every
//! kind of bad token. Each row runs on a fresh gateway (HS256) whose store holds
//! `acme/a`, `globex/g` and one resumable upload of each tenant; a refused
//! request must leave the store exactly as it was and reveal nothing.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::BodyExt;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};
use sluice_server::{AppState, ServerConfig};
use sluice_store::{ObjectStore, PutRequest};
use sluice_testkit::MemoryStore;
use tower::ServiceExt;

const SECRET: &[u8] = b"a test secret of at least thirty-two bytes";
const SECRET_TEXT: &[u8] = b"acme's private bytes";

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn sign(algorithm: Algorithm, claims: Value, secret: &[u8]) -> String {
    jsonwebtoken::encode(
        &Header::new(algorithm),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .unwrap()
}

/// A good token of `tenant`, with `extra` claims over the defaults.
fn token(tenant: &str, extra: Value) -> String {
    let mut claims = json!({ "sub": tenant, "exp": now() + 600 });
    for (name, value) in extra.as_object().unwrap() {
        claims[name] = value.clone();
    }
    sign(Algorithm::HS256, claims, SECRET)
}

/// The kinds of caller of the table: the token each sends (as acme, or as
/// globex against acme's things).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Caller {
    Acme,
    NoToken,
    Expired,
    NotYetValid,
    BadSignature,
    AlgNone,
    WrongAlgorithm,
    OtherTenant,
    OutsidePrefix,
    OverMaxSize,
    WrongOp,
}

const CALLERS: [Caller; 11] = [
    Caller::Acme,
    Caller::NoToken,
    Caller::Expired,
    Caller::NotYetValid,
    Caller::BadSignature,
    Caller::AlgNone,
    Caller::WrongAlgorithm,
    Caller::OtherTenant,
    Caller::OutsidePrefix,
    Caller::OverMaxSize,
    Caller::WrongOp,
];

impl Caller {
    /// The Authorization header's token; `ops` are what the route needs.
    fn token(self, op: &str) -> Option<String> {
        let all_but = |op: &str| {
            let ops: Vec<&str> = ["put", "get", "list", "delete", "resume"]
                .into_iter()
                .filter(|o| *o != op)
                .collect();
            json!(ops)
        };
        Some(match self {
            Caller::Acme => token("acme", json!({ "ops": [op], "max_size": 1000 })),
            Caller::NoToken => return None,
            Caller::Expired => token("acme", json!({ "exp": now() - 3600 })),
            Caller::NotYetValid => token("acme", json!({ "nbf": now() + 3600 })),
            Caller::BadSignature => sign(
                Algorithm::HS256,
                json!({ "sub": "acme", "exp": now() + 600 }),
                b"another secret, also thirty-two bytes long",
            ),
            Caller::AlgNone => {
                let codec = base64::engine::general_purpose::URL_SAFE_NO_PAD;
                let header = codec.encode(br#"{"alg":"none","typ":"JWT"}"#);
                let claims = codec.encode(
                    json!({ "sub": "acme", "exp": now() + 600 })
                        .to_string()
                        .as_bytes(),
                );
                format!("{header}.{claims}.")
            }
            Caller::WrongAlgorithm => sign(
                Algorithm::HS512,
                json!({ "sub": "acme", "exp": now() + 600 }),
                SECRET,
            ),
            Caller::OtherTenant => token("globex", json!({})),
            Caller::OutsidePrefix => token("acme", json!({ "prefix": "acme/", "key": "other/x" })),
            Caller::OverMaxSize => token("acme", json!({ "max_size": 10 })),
            Caller::WrongOp => token("acme", json!({ "ops": all_but(op) })),
        })
    }
}

/// The routes of the table, each aimed at acme's things.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Route {
    Put,
    Get,
    Head,
    Delete,
    List,
    Form,
    TusCreate,
    TusHead,
    TusPatch,
    TusDelete,
    TusConcat,
}

const ROUTES: [Route; 11] = [
    Route::Put,
    Route::Get,
    Route::Head,
    Route::Delete,
    Route::List,
    Route::Form,
    Route::TusCreate,
    Route::TusHead,
    Route::TusPatch,
    Route::TusDelete,
    Route::TusConcat,
];

impl Route {
    fn op(self) -> &'static str {
        match self {
            Route::Put | Route::Form | Route::TusCreate | Route::TusConcat => "put",
            Route::Get | Route::Head => "get",
            Route::Delete => "delete",
            Route::List => "list",
            Route::TusHead | Route::TusPatch | Route::TusDelete => "resume",
        }
    }

    /// The request, for the world `seeded` made; `outside` aims at a key outside
    /// acme's prefix where the route names one.
    fn request(self, world: &World, outside: bool) -> Request<Body> {
        let key = if outside { "other/x" } else { "acme/a" };
        let hundred = Bytes::from(vec![b'x'; 100]);
        let builder = Request::builder();
        match self {
            Route::Put => builder
                .method("PUT")
                .uri(format!("/v1/objects/{key}"))
                .header(header::CONTENT_LENGTH, 100)
                .body(Body::from(hundred)),
            Route::Get => builder.uri(format!("/v1/objects/{key}")).body(Body::empty()),
            Route::Head => builder
                .method("HEAD")
                .uri(format!("/v1/objects/{key}"))
                .body(Body::empty()),
            Route::Delete => builder
                .method("DELETE")
                .uri(format!("/v1/objects/{key}"))
                .body(Body::empty()),
            Route::List => builder
                .uri(format!(
                    "/v1/objects?prefix={}",
                    if outside { "other/" } else { "acme/" }
                ))
                .body(Body::empty()),
            Route::Form => {
                let mut form = b"--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f.bin\"\r\n\r\n".to_vec();
                form.extend_from_slice(&hundred);
                form.extend_from_slice(b"\r\n--B--\r\n");
                builder
                    .method("POST")
                    .uri("/v1/objects")
                    .header(header::CONTENT_TYPE, "multipart/form-data; boundary=B")
                    .header(header::CONTENT_LENGTH, form.len())
                    .body(Body::from(form))
            }
            Route::TusCreate => builder
                .method("POST")
                .uri("/v1/tus/")
                .header("tus-resumable", "1.0.0")
                .header("upload-length", 100)
                .body(Body::empty()),
            Route::TusHead => builder
                .method("HEAD")
                .uri(&world.acme_upload)
                .header("tus-resumable", "1.0.0")
                .body(Body::empty()),
            Route::TusPatch => builder
                .method("PATCH")
                .uri(&world.acme_upload)
                .header("tus-resumable", "1.0.0")
                .header("upload-offset", 0)
                .header(header::CONTENT_TYPE, "application/offset+octet-stream")
                .header(header::CONTENT_LENGTH, 5)
                .body(Body::from("hello")),
            Route::TusDelete => builder
                .method("DELETE")
                .uri(&world.acme_upload)
                .header("tus-resumable", "1.0.0")
                .body(Body::empty()),
            Route::TusConcat => builder
                .method("POST")
                .uri("/v1/tus/")
                .header("tus-resumable", "1.0.0")
                .header("upload-concat", format!("final;{}", world.acme_partial))
                .body(Body::empty()),
        }
        .unwrap()
    }

    /// What acme itself, with a good token, is answered.
    fn success(self) -> StatusCode {
        match self {
            Route::Put | Route::Form | Route::TusCreate | Route::TusConcat => StatusCode::CREATED,
            Route::Get | Route::Head | Route::List | Route::TusHead => StatusCode::OK,
            Route::Delete | Route::TusPatch | Route::TusDelete => StatusCode::NO_CONTENT,
        }
    }

    /// Routes that create under a key the gateway makes (no key to aim outside).
    fn generates_keys(self) -> bool {
        matches!(self, Route::Form | Route::TusCreate | Route::TusConcat)
    }

    fn is_tus_upload(self) -> bool {
        matches!(self, Route::TusHead | Route::TusPatch | Route::TusDelete)
    }

    /// Routes whose request carries an upload of 100 bytes.
    fn uploads(self) -> bool {
        matches!(self, Route::Put | Route::Form | Route::TusCreate)
    }
}

/// The expected answer of `caller` on `route`, from docs/AUTH.md.
fn expected(route: Route, caller: Caller) -> StatusCode {
    match caller {
        Caller::Acme => route.success(),
        Caller::NoToken
        | Caller::Expired
        | Caller::NotYetValid
        | Caller::BadSignature
        | Caller::AlgNone
        | Caller::WrongAlgorithm => StatusCode::UNAUTHORIZED,
        // Another tenant's resumable uploads do not exist for it; what it
        // creates goes under its own prefix; acme's partial is not its to join.
        Caller::OtherTenant if route.is_tus_upload() || route == Route::TusConcat => {
            StatusCode::NOT_FOUND
        }
        Caller::OtherTenant if route.generates_keys() => StatusCode::CREATED,
        Caller::OtherTenant | Caller::OutsidePrefix | Caller::WrongOp => StatusCode::FORBIDDEN,
        Caller::OverMaxSize if route.uploads() => StatusCode::PAYLOAD_TOO_LARGE,
        // A 5-byte partial joined under a 10-byte limit, and requests that
        // upload nothing new, are within it.
        Caller::OverMaxSize => route.success(),
    }
}

struct World {
    state: AppState,
    store: MemoryStore,
    acme_upload: String,
    acme_partial: String,
}

async fn send(state: &AppState, request: Request<Body>) -> (StatusCode, http::HeaderMap, Bytes) {
    let response = state.router().oneshot(request).await.unwrap();
    let (parts, body) = response.into_parts();
    (
        parts.status,
        parts.headers,
        body.collect().await.unwrap().to_bytes(),
    )
}

fn header_text(headers: &http::HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

async fn tus_create(state: &AppState, tenant: &str, length: u64, partial: bool) -> String {
    let mut request = Request::builder()
        .method("POST")
        .uri("/v1/tus/")
        .header("tus-resumable", "1.0.0")
        .header("upload-length", length)
        .header(
            header::AUTHORIZATION,
            format!("Bearer {}", token(tenant, json!({}))),
        );
    if partial {
        request = request.header("upload-concat", "partial");
    }
    let (status, headers, _) = send(state, request.body(Body::empty()).unwrap()).await;
    assert_eq!(status, StatusCode::CREATED);
    header_text(&headers, "location")
}

async fn world() -> World {
    let mut config = ServerConfig {
        key_template: "{tenant}/{uuid}".into(),
        ..ServerConfig::default()
    };
    config.janitor.interval = std::time::Duration::ZERO;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    config.auth.jwt_secret_file = Some(secret);
    let store = MemoryStore::new();
    let state = AppState::new(config, Arc::new(store.clone())).unwrap();
    for key in ["acme/a", "globex/g"] {
        store
            .put_object(PutRequest::new(key, Bytes::from_static(SECRET_TEXT)))
            .await
            .unwrap();
    }
    let acme_upload = tus_create(&state, "acme", 50, false).await;
    tus_create(&state, "globex", 50, false).await;
    let acme_partial = tus_create(&state, "acme", 5, true).await;
    let patch = Request::builder()
        .method("PATCH")
        .uri(&acme_partial)
        .header("tus-resumable", "1.0.0")
        .header("upload-offset", 0)
        .header(header::CONTENT_TYPE, "application/offset+octet-stream")
        .header(
            header::AUTHORIZATION,
            format!("Bearer {}", token("acme", json!({}))),
        )
        .body(Body::from("12345"))
        .unwrap();
    assert_eq!(send(&state, patch).await.0, StatusCode::NO_CONTENT);
    World {
        state,
        store,
        acme_upload,
        acme_partial,
    }
}

/// Every object of the store (the gateway's own state included) with its etag.
async fn snapshot(store: &MemoryStore) -> Vec<(String, String)> {
    let page = store.list_objects("", None, 10_000).await.unwrap();
    page.objects.into_iter().map(|o| (o.key, o.etag)).collect()
}

#[tokio::test]
async fn every_route_against_every_kind_of_caller() {
    for route in ROUTES {
        for caller in CALLERS {
            let world = world().await;
            let before = snapshot(&world.store).await;
            let mut request = route.request(&world, caller == Caller::OutsidePrefix);
            if let Some(token) = caller.token(route.op()) {
                request.headers_mut().insert(
                    header::AUTHORIZATION,
                    format!("Bearer {token}").parse().unwrap(),
                );
            }
            let (status, headers, body) = send(&world.state, request).await;
            let case = format!(
                "{route:?} by {caller:?}: {status} {}",
                String::from_utf8_lossy(&body)
            );
            assert_eq!(status, expected(route, caller), "{case}");
            if status.is_success() {
                if caller == Caller::OtherTenant {
                    // What another tenant creates lands under its own prefix.
                    let key = match route {
                        Route::Form => serde_json::from_slice::<Value>(&body).unwrap()["objects"]
                            [0]["key"]
                            .as_str()
                            .unwrap()
                            .to_owned(),
                        _ => header_text(&headers, "x-sluice-key"),
                    };
                    assert!(key.starts_with("globex/"), "{case}: {key}");
                }
                continue;
            }
            assert_eq!(
                snapshot(&world.store).await,
                before,
                "{case}: the store changed"
            );
            assert!(
                !body.windows(SECRET_TEXT.len()).any(|w| w == SECRET_TEXT)
                    && !String::from_utf8_lossy(&body).contains("acme/a"),
                "{case}: the answer reveals something"
            );
            let code = serde_json::from_slice::<Value>(&body)
                .map(|v| v["error"]["code"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default();
            let expected_code = match status {
                StatusCode::UNAUTHORIZED => "unauthenticated",
                StatusCode::FORBIDDEN => "forbidden",
                StatusCode::NOT_FOUND => "upload_not_found",
                StatusCode::PAYLOAD_TOO_LARGE => "",
                _ => unreachable!(),
            };
            if route != Route::Head && route != Route::TusHead {
                assert!(code.contains(expected_code), "{case}: code {code:?}");
            }
        }
    }
}

#[tokio::test]
async fn without_auth_everything_is_open_and_a_public_address_needs_consent() {
    let mut config = ServerConfig {
        listen: "0.0.0.0:8080".parse().unwrap(),
        ..ServerConfig::default()
    };
    let Err(refused) = AppState::new(config.clone(), Arc::new(MemoryStore::new())) else {
        panic!("0.0.0.0 without auth was accepted");
    };
    assert!(
        refused.to_string().contains("--allow-anonymous"),
        "{refused}"
    );
    config.auth.allow_anonymous = true;
    assert!(AppState::new(config, Arc::new(MemoryStore::new())).is_ok());
}

#[tokio::test]
async fn key_files_and_algorithms_are_checked_at_start_up() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let dir = tempfile::tempdir().unwrap();
    let short = dir.path().join("short");
    std::fs::write(&short, b"too short").unwrap();
    // (secret file, public key file, algorithms, the setting named in the error or None)
    type Case<'a> = (
        Option<PathBuf>,
        Option<PathBuf>,
        &'a [&'a str],
        Option<&'a str>,
    );
    let cases: [Case; 7] = [
        (Some(short), None, &[], Some("auth.jwt_secret_file")),
        (
            Some(dir.path().join("missing")),
            None,
            &[],
            Some("auth.jwt_secret_file"),
        ),
        (None, Some(fixtures.join("jwt-ec-public.pem")), &[], None),
        (
            None,
            Some(fixtures.join("jwt-ed25519-public.pem")),
            &["EdDSA"],
            None,
        ),
        (
            None,
            Some(fixtures.join("jwt-ec-public.pem")),
            &["HS256"],
            Some("auth.algorithms"),
        ),
        (
            None,
            Some(fixtures.join("jwt-ec-public.pem")),
            &["none"],
            Some("auth.algorithms"),
        ),
        (
            None,
            Some(fixtures.join("README.md")),
            &[],
            Some("auth.jwt_public_key_file"),
        ),
    ];
    for (secret, public, algorithms, error) in cases {
        let mut config = ServerConfig::default();
        config.auth.jwt_secret_file = secret;
        config.auth.jwt_public_key_file = public.clone();
        config.auth.algorithms = algorithms.iter().map(|a| a.to_string()).collect();
        let built = AppState::new(config, Arc::new(MemoryStore::new()));
        match (built, error) {
            (Ok(_), None) => {}
            (Err(e), Some(key)) => assert!(e.to_string().contains(&format!("{key}: ")), "{e}"),
            (Ok(_), Some(key)) => panic!("{public:?} {algorithms:?}: no {key} error"),
            (Err(e), None) => panic!("{public:?} {algorithms:?}: {e}"),
        }
    }
}

#[tokio::test]
async fn tokens_signed_with_public_key_algorithms_verify() {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    for (kind, algorithm, private) in [
        (
            "ec",
            Algorithm::ES256,
            EncodingKey::from_ec_pem as fn(&[u8]) -> _,
        ),
        ("ed25519", Algorithm::EdDSA, EncodingKey::from_ed_pem),
    ] {
        let mut config = ServerConfig::default();
        config.auth.jwt_public_key_file = Some(fixtures.join(format!("jwt-{kind}-public.pem")));
        let store = MemoryStore::new();
        let state = AppState::new(config, Arc::new(store.clone())).unwrap();
        let pem = std::fs::read(fixtures.join(format!("jwt-{kind}-private.pem"))).unwrap();
        let good = jsonwebtoken::encode(
            &Header::new(algorithm),
            &json!({ "sub": "acme", "exp": now() + 600 }),
            &private(&pem).unwrap(),
        )
        .unwrap();
        // The same claims as HS256 with the public key's bytes as the secret: the
        // algorithm confusion attack.
        let confused = sign(
            Algorithm::HS256,
            json!({ "sub": "acme", "exp": now() + 600 }),
            &std::fs::read(fixtures.join(format!("jwt-{kind}-public.pem"))).unwrap(),
        );
        for (token, status) in [
            (good, StatusCode::CREATED),
            (confused, StatusCode::UNAUTHORIZED),
        ] {
            let request = Request::builder()
                .method("PUT")
                .uri("/v1/objects/acme/k")
                .header(header::AUTHORIZATION, format!("Bearer {token}"))
                .body(Body::from("hello"))
                .unwrap();
            assert_eq!(send(&state, request).await.0, status, "{kind}");
        }
        assert_eq!(
            store.object("acme/k").as_deref(),
            Some(&b"hello"[..]),
            "{kind}"
        );
    }
}

#[tokio::test]
async fn metrics_move_to_the_admin_address_when_there_is_one() {
    let get = |uri: &str| Request::builder().uri(uri).body(Body::empty()).unwrap();
    let open = AppState::new(ServerConfig::default(), Arc::new(MemoryStore::new())).unwrap();
    assert_eq!(send(&open, get("/metrics")).await.0, StatusCode::OK);
    let config = ServerConfig {
        admin_listen: Some("127.0.0.1:0".parse().unwrap()),
        ..ServerConfig::default()
    };
    let state = AppState::new(config, Arc::new(MemoryStore::new())).unwrap();
    assert_eq!(send(&state, get("/metrics")).await.0, StatusCode::NOT_FOUND);
    assert_eq!(send(&state, get("/healthz")).await.0, StatusCode::OK);
    let admin = sluice_server::routes::admin_router(state.clone());
    for (uri, status) in [
        ("/metrics", StatusCode::OK),
        ("/healthz", StatusCode::OK),
        ("/v1/objects/acme/a", StatusCode::NOT_FOUND),
    ] {
        let answer = admin.clone().oneshot(get(uri)).await.unwrap();
        assert_eq!(answer.status(), status, "{uri}");
    }
}

#[tokio::test]
async fn signed_urls_allow_one_request_on_one_key() {
    use sluice_server::auth::signed_url::SignedRequest;
    let dir = tempfile::tempdir().unwrap();
    let secret_file = dir.path().join("url.secret");
    std::fs::write(&secret_file, SECRET).unwrap();
    let mut config = ServerConfig::default();
    config.auth.url_secret_file = Some(secret_file);
    let store = MemoryStore::new();
    let state = AppState::new(config, Arc::new(store.clone())).unwrap();
    let url = |method: &str, path: &str, expires: u64, max_size: Option<u64>| {
        let query = SignedRequest {
            method: method.into(),
            path: path.into(),
            expires,
            tenant: Some("acme".into()),
            max_size,
        }
        .query(SECRET);
        format!("{path}?{query}")
    };
    let later = now() + 600;
    let put = url("PUT", "/v1/objects/acme/a%20b", later, Some(10));
    // (method, uri, body, status)
    let cases: Vec<(&str, String, &'static str, StatusCode)> = vec![
        ("PUT", put.clone(), "hello", StatusCode::CREATED),
        (
            "PUT",
            put.clone(),
            "more than ten bytes",
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        ("GET", put.clone(), "", StatusCode::UNAUTHORIZED),
        ("DELETE", put.clone(), "", StatusCode::UNAUTHORIZED),
        (
            "PUT",
            put.replace("acme/a%20b", "acme/other"),
            "x",
            StatusCode::UNAUTHORIZED,
        ),
        (
            "PUT",
            url("PUT", "/v1/objects/acme/old", now() - 1, None),
            "x",
            StatusCode::UNAUTHORIZED,
        ),
        (
            "PUT",
            "/v1/objects/acme/nosig".into(),
            "x",
            StatusCode::UNAUTHORIZED,
        ),
        (
            "GET",
            url("GET", "/v1/objects/acme/a%20b", later, None),
            "",
            StatusCode::OK,
        ),
        (
            "HEAD",
            url("GET", "/v1/objects/acme/a%20b", later, None),
            "",
            StatusCode::OK,
        ),
        (
            "GET",
            url("GET", "/v1/objects", later, None),
            "",
            StatusCode::UNAUTHORIZED,
        ),
        (
            "DELETE",
            url("DELETE", "/v1/objects/acme/a%20b", later, None),
            "",
            StatusCode::NO_CONTENT,
        ),
    ];
    for (method, uri, body, status) in cases {
        let request = Request::builder()
            .method(method)
            .uri(&uri)
            .body(Body::from(body))
            .unwrap();
        let (got, _, answer) = send(&state, request).await;
        assert_eq!(
            got,
            status,
            "{method} {uri}: {}",
            String::from_utf8_lossy(&answer)
        );
        if body == "hello" {
            assert_eq!(store.object("acme/a b").as_deref(), Some(&b"hello"[..]));
        }
    }
    assert_eq!(
        store.object("acme/a b"),
        None,
        "the signed DELETE removed it"
    );
    assert_eq!(store.object("acme/other"), None);
    assert_eq!(store.object("acme/old"), None);
}

/// The public key of a PEM SubjectPublicKeyInfo as JWK coordinates: the last 32
/// bytes for Ed25519 (`x`), the last 64 after 0x04 for P-256 (`x`, `y`).
fn jwk(kind: &str, kid: &str) -> Value {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let pem = std::fs::read_to_string(fixtures.join(format!("jwt-{kind}-public.pem"))).unwrap();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap();
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    match kind {
        "ed25519" => {
            json!({ "kty": "OKP", "crv": "Ed25519", "kid": kid, "x": b64(&der[der.len() - 32..]) })
        }
        _ => {
            let point = &der[der.len() - 64..];
            json!({ "kty": "EC", "crv": "P-256", "kid": kid, "x": b64(&point[..32]), "y": b64(&point[32..]) })
        }
    }
}

fn signed_with(kind: &str, kid: &str) -> String {
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let pem = std::fs::read(fixtures.join(format!("jwt-{kind}-private.pem"))).unwrap();
    let (algorithm, key) = match kind {
        "ed25519" => (Algorithm::EdDSA, EncodingKey::from_ed_pem(&pem).unwrap()),
        _ => (Algorithm::ES256, EncodingKey::from_ec_pem(&pem).unwrap()),
    };
    let mut header = Header::new(algorithm);
    header.kid = Some(kid.into());
    jsonwebtoken::encode(&header, &json!({ "sub": "acme", "exp": now() + 600 }), &key).unwrap()
}

#[tokio::test]
async fn jwks_keys_are_chosen_by_kid_and_rotate_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, json!({ "keys": [jwk("ec", "ec-1")] }).to_string()).unwrap();
    let mut config = ServerConfig::default();
    config.auth.jwks_file = Some(jwks.clone());
    // A set with no key for the pinned algorithms, or two sources of keys: no start.
    for (tune, error) in [
        (
            (|c: &mut ServerConfig| c.auth.algorithms = vec!["RS256".into()])
                as fn(&mut ServerConfig),
            "auth.jwks_file: ",
        ),
        (
            |c: &mut ServerConfig| c.auth.jwt_public_key_file = Some("x.pem".into()),
            "auth: give one of",
        ),
    ] {
        let mut odd = config.clone();
        tune(&mut odd);
        let Err(refused) = AppState::new(odd, Arc::new(MemoryStore::new())) else {
            panic!("{error} expected");
        };
        assert!(refused.to_string().contains(error), "{refused}");
    }
    let state = AppState::new(config, Arc::new(MemoryStore::new())).unwrap();
    let reloader = state.auth.spawn_key_reloader().expect("a JWKS is reloaded");
    let put = |token: String| {
        Request::builder()
            .method("PUT")
            .uri("/v1/objects/acme/k")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::from("hello"))
            .unwrap()
    };
    // (token, status) before the rotation
    for (token, status) in [
        (signed_with("ec", "ec-1"), StatusCode::CREATED),
        (signed_with("ec", "ec-2"), StatusCode::UNAUTHORIZED),
        (signed_with("ed25519", "ed-1"), StatusCode::UNAUTHORIZED),
        (signed_with("ed25519", "ec-1"), StatusCode::UNAUTHORIZED),
    ] {
        assert_eq!(send(&state, put(token)).await.0, status);
    }
    // Rotation: the Ed25519 key in, the EC key out.
    std::fs::write(
        &jwks,
        json!({ "keys": [jwk("ed25519", "ed-1")] }).to_string(),
    )
    .unwrap();
    let mut rotated = false;
    for _ in 0..50 {
        if send(&state, put(signed_with("ed25519", "ed-1"))).await.0 == StatusCode::CREATED {
            rotated = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(rotated, "the new key was not taken up");
    assert_eq!(
        send(&state, put(signed_with("ec", "ec-1"))).await.0,
        StatusCode::UNAUTHORIZED
    );
    // A broken file leaves the keys in use.
    std::fs::write(&jwks, "{ not json").unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    assert_eq!(
        send(&state, put(signed_with("ed25519", "ed-1"))).await.0,
        StatusCode::CREATED
    );
    reloader.abort();
}

#[tokio::test]
async fn the_admin_token_guards_metrics_and_the_dashboards_data() {
    let dir = tempfile::tempdir().unwrap();
    let admin = dir.path().join("admin");
    std::fs::write(&admin, "an admin token of at least thirty-two bytes\n").unwrap();
    let mut config = ServerConfig::default();
    config.auth.admin_token_file = Some(admin);
    let state = AppState::new(config, Arc::new(MemoryStore::new())).unwrap();
    let good = "Bearer an admin token of at least thirty-two bytes";
    // (path, authorization, status)
    let cases = [
        ("/metrics", None, 401),
        (
            "/metrics",
            Some("Bearer an admin token of at least thirty-two byteS"),
            401,
        ),
        (
            "/metrics",
            Some("an admin token of at least thirty-two bytes"),
            401,
        ),
        ("/metrics", Some(good), 200),
        ("/ui/status", None, 401),
        ("/ui/status", Some(good), 200),
        // The page itself holds no figures; health stays open for probes.
        ("/ui/dashboard", None, 200),
        ("/healthz", None, 200),
    ];
    for (path, authorization, want) in cases {
        let mut request = Request::builder().uri(path);
        if let Some(value) = authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        let (status, headers, body) = send(&state, request.body(Body::empty()).unwrap()).await;
        assert_eq!(status.as_u16(), want, "{path} {authorization:?}");
        if want == 401 {
            assert!(headers.contains_key(header::WWW_AUTHENTICATE), "{path}");
            assert!(
                !String::from_utf8_lossy(&body).contains("sluice_"),
                "{path}: no figures"
            );
        }
    }
    // A short token file stops the start.
    let short = dir.path().join("short");
    std::fs::write(&short, "short").unwrap();
    let mut config = ServerConfig::default();
    config.auth.admin_token_file = Some(short);
    let error = AppState::new(config, Arc::new(MemoryStore::new()))
        .err()
        .unwrap();
    assert!(
        error.to_string().contains("auth.admin_token_file"),
        "{error}"
    );
}

#[tokio::test]
async fn a_token_cookie_counts_only_on_requests_from_allowed_pages() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let store = MemoryStore::new();
    store
        .put_object(PutRequest::new("acme/a", Bytes::from_static(SECRET_TEXT)))
        .await
        .unwrap();
    let gateway = |cookie: Option<&str>| {
        let mut config = ServerConfig {
            cors_origins: vec!["https://app.example".into()],
            ..ServerConfig::default()
        };
        config.auth.jwt_secret_file = Some(secret.clone());
        config.auth.token_cookie = cookie.map(str::to_owned);
        AppState::new(config, Arc::new(store.clone())).unwrap()
    };
    let with_cookie = gateway(Some("sluice_token"));
    let without = gateway(None);
    let good = token("acme", json!({}));
    let bad = format!("{good}x");
    let cookie = |t: &str| format!("theme=dark; sluice_token={t}");
    // (gateway, cookie, authorization, origin, status)
    let cases = [
        (&with_cookie, Some(cookie(&good)), None, None, 200),
        (
            &with_cookie,
            Some(cookie(&good)),
            None,
            Some("https://app.example"),
            200,
        ),
        (
            &with_cookie,
            Some(cookie(&good)),
            None,
            Some("http://localhost"),
            200,
        ),
        (
            &with_cookie,
            Some(cookie(&good)),
            None,
            Some("https://evil.example"),
            403,
        ),
        (&with_cookie, Some(cookie(&bad)), None, None, 401),
        (
            &with_cookie,
            Some(cookie(&bad)),
            Some(good.clone()),
            Some("https://evil.example"),
            200,
        ),
        (
            &with_cookie,
            Some("theme=dark".to_string()),
            None,
            None,
            401,
        ),
        (&without, Some(cookie(&good)), None, None, 401),
    ];
    for (i, (state, cookie, authorization, origin, want)) in cases.into_iter().enumerate() {
        let mut request = Request::builder()
            .uri("/v1/objects/acme/a")
            .header(header::HOST, "localhost");
        if let Some(cookie) = cookie {
            request = request.header(header::COOKIE, cookie);
        }
        if let Some(token) = authorization {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(origin) = origin {
            request = request.header(header::ORIGIN, origin);
        }
        let (status, _, body) = send(state, request.body(Body::empty()).unwrap()).await;
        assert_eq!(
            status.as_u16(),
            want,
            "case {i}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    // Cookies with CORS for any origin: refused at start-up.
    let mut config = ServerConfig {
        cors_origins: vec!["*".into()],
        ..ServerConfig::default()
    };
    config.auth.jwt_secret_file = Some(secret.clone());
    config.auth.token_cookie = Some("sluice_token".into());
    let error = AppState::new(config, Arc::new(store.clone()))
        .err()
        .unwrap();
    assert!(error.to_string().contains("auth.token_cookie"), "{error}");
}

/// Issue 35, hole 1: with an issuer and an audience configured, a token must
/// carry both claims, with those values; one that leaves a claim out is as
/// refused as one that names another.
#[tokio::test]
async fn a_configured_issuer_and_audience_are_required_claims() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();
    let mut config = ServerConfig::default();
    config.janitor.interval = std::time::Duration::ZERO;
    config.auth.jwt_secret_file = Some(secret);
    config.auth.issuer = Some("https://app.example".into());
    config.auth.audience = Some("uploads".into());
    let store = MemoryStore::new();
    let state = AppState::new(config, Arc::new(store.clone())).unwrap();
    let good = json!({ "iss": "https://app.example", "aud": "uploads" });
    // (claims over a good token's, answer)
    let cases = [
        (json!({}), StatusCode::CREATED),
        (json!({ "iss": null }), StatusCode::UNAUTHORIZED),
        (json!({ "aud": null }), StatusCode::UNAUTHORIZED),
        (
            json!({ "iss": "https://evil.example" }),
            StatusCode::UNAUTHORIZED,
        ),
        (json!({ "aud": "other" }), StatusCode::UNAUTHORIZED),
    ];
    for (i, (change, expected)) in cases.into_iter().enumerate() {
        let mut claims = json!({ "sub": "acme", "exp": now() + 600 });
        for (name, value) in good
            .as_object()
            .unwrap()
            .iter()
            .chain(change.as_object().unwrap())
        {
            match value {
                Value::Null => {
                    claims.as_object_mut().unwrap().remove(name);
                }
                value => claims[name] = value.clone(),
            }
        }
        let request = Request::builder()
            .method("PUT")
            .uri(format!("/v1/objects/acme/claims-{i}"))
            .header(
                header::AUTHORIZATION,
                format!("Bearer {}", sign(Algorithm::HS256, claims.clone(), SECRET)),
            )
            .body(Body::from("x"))
            .unwrap();
        let (status, _, body) = send(&state, request).await;
        assert_eq!(
            status,
            expected,
            "{claims}: {}",
            String::from_utf8_lossy(&body)
        );
        if expected != StatusCode::CREATED {
            assert!(store.object(&format!("acme/claims-{i}")).is_none());
        }
    }
}

/// Issue 35, hole 4: a token bound to one key is good for exactly that key,
/// so it cannot list the prefix around it (and see other keys, sizes, ETags).
#[tokio::test]
async fn a_token_for_one_key_cannot_list() {
    let world = world().await;
    let list = |token: String| {
        Request::builder()
            .uri("/v1/objects?prefix=acme/")
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap()
    };
    let bound = token("acme", json!({ "key": "acme/a" }));
    let (status, _, body) = send(&world.state, list(bound)).await;
    assert_eq!(
        status,
        StatusCode::FORBIDDEN,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert!(!String::from_utf8_lossy(&body).contains("etag"));
    let (status, _, _) = send(&world.state, list(token("acme", json!({})))).await;
    assert_eq!(status, StatusCode::OK);
}

/// Issue 35, hole 3: a listing prefix is checked like a key (no `.` or `..`
/// segment, no empty segment but a trailing `/`, no control character): 400
/// with a clear code, before the store is asked.
#[tokio::test]
async fn a_listing_prefix_with_dot_segments_or_controls_is_refused() {
    let world = world().await;
    // (query, status)
    let cases = [
        ("prefix=acme/", StatusCode::OK),
        ("prefix=acme/a", StatusCode::OK),
        ("prefix=acme/../bob/", StatusCode::BAD_REQUEST),
        ("prefix=acme/%2e%2e/bob/", StatusCode::BAD_REQUEST),
        ("prefix=acme%2F..%2Fbob%2F", StatusCode::BAD_REQUEST),
        ("prefix=acme/./", StatusCode::BAD_REQUEST),
        ("prefix=acme//x", StatusCode::BAD_REQUEST),
        ("prefix=acme/%00", StatusCode::BAD_REQUEST),
    ];
    for (query, expected) in cases {
        let request = Request::builder()
            .uri(format!("/v1/objects?{query}"))
            .header(
                header::AUTHORIZATION,
                format!("Bearer {}", token("acme", json!({}))),
            )
            .body(Body::empty())
            .unwrap();
        let (status, _, body) = send(&world.state, request).await;
        let text = String::from_utf8_lossy(&body);
        assert_eq!(status, expected, "{query}: {text}");
        if expected == StatusCode::BAD_REQUEST {
            assert!(text.contains("invalid_prefix"), "{query}: {text}");
        }
    }
}

/// Issue 35, hole 2: a tenant whose name renders keys into the gateway's own
/// `_sluice/` prefix gets no upload there: generated keys are checked exactly
/// like client keys (tus creation, form, PUT alike).
#[tokio::test]
async fn a_tenant_named_like_the_reserved_prefix_writes_nothing_there() {
    let world = world().await;
    let before = snapshot(&world.store).await;
    let bearer = format!("Bearer {}", token("_sluice", json!({})));
    use base64::Engine as _;
    let filename = base64::engine::general_purpose::STANDARD.encode("state");
    let requests = [
        Request::builder()
            .method("POST")
            .uri("/v1/tus/")
            .header("tus-resumable", "1.0.0")
            .header("upload-length", 5)
            .header("upload-metadata", format!("filename {filename}"))
            .header(header::CONTENT_TYPE, "application/offset+octet-stream")
            .header(header::AUTHORIZATION, &bearer)
            .body(Body::from("hello"))
            .unwrap(),
        Request::builder()
            .method("POST")
            .uri("/v1/objects")
            .header(header::CONTENT_TYPE, "multipart/form-data; boundary=B")
            .header(header::AUTHORIZATION, &bearer)
            .body(Body::from(
                "--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"state\"\r\n\r\nhello\r\n--B--\r\n",
            ))
            .unwrap(),
        Request::builder()
            .method("PUT")
            .uri("/v1/objects/_sluice/x")
            .header(header::AUTHORIZATION, &bearer)
            .body(Body::from("hello"))
            .unwrap(),
    ];
    for request in requests {
        let what = format!("{} {}", request.method(), request.uri());
        let (status, headers, body) = send(&world.state, request).await;
        assert!(
            status.is_client_error(),
            "{what}: {status} {:?} {}",
            headers.get("x-sluice-key"),
            String::from_utf8_lossy(&body)
        );
    }
    assert_eq!(
        snapshot(&world.store).await,
        before,
        "something was written"
    );
}
