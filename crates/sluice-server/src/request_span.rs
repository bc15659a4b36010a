//! One span per request: every request gets an id (an incoming `X-Request-Id`
//! of at most 128 visible characters is kept, else one is made) that is
//! returned in the answer's `X-Request-Id`, and runs inside a `request` span
//! with the id, the method, the route, and the key or upload id the path
//! names; the tenant is recorded once the caller is known
//! ([`record_tenant`]). Every log line inside a request, a 5xx's included,
//! carries them.

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest incoming request id kept.
const MAX_ID: usize = 128;

/// What a path names: its route, and the key or upload id in it.
#[derive(Debug, PartialEq, Eq)]
struct Named<'a> {
    route: &'static str,
    key: Option<&'a str>,
    upload_id: Option<&'a str>,
}

/// The route of `path` and what it names.
fn named(path: &str) -> Named<'_> {
    let plain = |route| Named {
        route,
        key: None,
        upload_id: None,
    };
    if let Some(key) = path.strip_prefix("/v1/objects/").filter(|k| !k.is_empty()) {
        return Named {
            key: Some(key),
            ..plain("/v1/objects/{key}")
        };
    }
    if let Some(id) = path.strip_prefix("/v1/tus/").filter(|k| !k.is_empty()) {
        return Named {
            upload_id: Some(id),
            ..plain("/v1/tus/{id}")
        };
    }
    if let Some(rest) = path.strip_prefix("/s3/multipart/") {
        let id = rest.split('/').next().filter(|id| !id.is_empty());
        return Named {
            upload_id: id,
            ..plain("/s3/multipart/{upload_id}")
        };
    }
    let route = match path {
        "/v1/objects" => "/v1/objects",
        "/v1/tus" | "/v1/tus/" => "/v1/tus/",
        "/s3/params" => "/s3/params",
        "/s3/multipart" => "/s3/multipart",
        "/healthz" | "/readyz" | "/metrics" | "/" => "/{health,metrics,page}",
        p if p.starts_with("/v1/streams/") => "/v1/streams/{stream}",
        p if p.starts_with("/ui/") => "/ui/",
        _ => "other",
    };
    plain(route)
}

/// The request id to use: the client's when it is a sane one, else a new one.
fn request_id(incoming: Option<&HeaderValue>) -> HeaderValue {
    incoming
        .filter(|v| {
            let bytes = v.as_bytes();
            !bytes.is_empty()
                && bytes.len() <= MAX_ID
                && bytes.iter().all(|b| (0x21..0x7f).contains(b))
        })
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&uuid::Uuid::new_v4().simple().to_string()).expect("hex digits")
        })
}

/// The middleware: see the module documentation.
pub async fn request_span(mut request: Request, next: Next) -> Response {
    let id = request_id(request.headers().get(&REQUEST_ID));
    request.headers_mut().insert(REQUEST_ID, id.clone());
    let named = named(request.uri().path());
    let span = tracing::info_span!(
        "request",
        request_id = %id.to_str().unwrap_or_default(),
        method = %request.method(),
        route = %named.route,
        key = named.key.map(tracing::field::display),
        upload_id = named.upload_id.map(tracing::field::display),
        tenant = tracing::field::Empty,
    );
    let mut response = next.run(request).instrument(span.clone()).await;
    if response.status().is_server_error() {
        span.in_scope(|| tracing::warn!(status = response.status().as_u16(), "answered 5xx"));
    }
    response.headers_mut().insert(REQUEST_ID, id);
    response
}

/// Records the caller's tenant in the current request's span.
pub fn record_tenant(tenant: &str) {
    tracing::Span::current().record("tenant", tracing::field::display(tenant));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_their_route_key_and_upload() {
        // (path, route, key, upload id)
        let cases = [
            (
                "/v1/objects/a/b.txt",
                "/v1/objects/{key}",
                Some("a/b.txt"),
                None,
            ),
            ("/v1/objects", "/v1/objects", None, None),
            ("/v1/tus/abc123", "/v1/tus/{id}", None, Some("abc123")),
            ("/v1/tus/", "/v1/tus/", None, None),
            (
                "/s3/multipart/up1/complete",
                "/s3/multipart/{upload_id}",
                None,
                Some("up1"),
            ),
            ("/s3/multipart", "/s3/multipart", None, None),
            ("/v1/streams/clicks", "/v1/streams/{stream}", None, None),
            ("/nowhere", "other", None, None),
        ];
        for (path, route, key, upload_id) in cases {
            assert_eq!(
                named(path),
                Named {
                    route,
                    key,
                    upload_id
                },
                "{path}"
            );
        }
    }

    #[test]
    fn a_sane_incoming_id_is_kept_and_anything_else_replaced() {
        let keep = HeaderValue::from_static("req-42.abc");
        assert_eq!(request_id(Some(&keep)), keep);
        let long = HeaderValue::from_str(&"x".repeat(MAX_ID + 1)).unwrap();
        for bad in [None, Some(&long), Some(&HeaderValue::from_static("a b"))] {
            let made = request_id(bad);
            assert_eq!(made.len(), 32, "{bad:?}");
        }
    }
}
