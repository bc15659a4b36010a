//! Every request has an id (kept from `X-Request-Id`, else made, and
//! returned) and one span with its route, key and upload id, which every log
//! line inside it carries: a 5xx's error line names what failed.

use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use sluice_server::{AppState, ServerConfig};
use sluice_testkit::{Fault, FaultyStore, MemoryStore, Op};
use tower::ServiceExt;

/// Log lines, as the gateway writes them.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn requests_carry_an_id_and_their_failures_name_route_key_and_id() {
    let lines = Lines::default();
    let writer = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let faults =
        FaultyStore::new(Arc::new(MemoryStore::new())).inject(Op::Put, None, None, Fault::Denied);
    let state = AppState::new(ServerConfig::default(), Arc::new(faults)).unwrap();
    let put = |id: Option<&str>| {
        let mut request = Request::builder()
            .method("PUT")
            .uri("/v1/objects/photos/cat.jpg");
        if let Some(id) = id {
            request = request.header("x-request-id", id);
        }
        request.body(Body::from("meow")).unwrap()
    };
    // (incoming id, id answered: None means a new one)
    let cases = [
        (Some("trace-7f3a"), Some("trace-7f3a")),
        (None, None),
        (Some("two words"), None),
    ];
    for (incoming, kept) in cases {
        let response = state.router().oneshot(put(incoming)).await.unwrap();
        assert!(response.status().is_server_error(), "{incoming:?}");
        let answered = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_owned();
        match kept {
            Some(kept) => assert_eq!(answered, kept),
            None => assert_eq!(answered.len(), 32, "{answered}"),
        }
        let log = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        let failure = log
            .lines()
            .rev()
            .find(|l| l.contains("request failed") || l.contains("answered 5xx"))
            .unwrap_or_else(|| panic!("no error line in {log}"));
        for field in [
            format!("request_id={answered}"),
            "route=/v1/objects/{key}".to_string(),
            "key=photos/cat.jpg".to_string(),
            "method=PUT".to_string(),
        ] {
            assert!(failure.contains(&field), "{field} missing in {failure}");
        }
    }
    // A health check answers with an id too.
    let response = state
        .router()
        .oneshot(Request::get("/healthz").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key("x-request-id"));
}
