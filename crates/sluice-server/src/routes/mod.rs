//! The HTTP API: `/v1/objects` (PUT, POST form, GET, HEAD, DELETE, list),
//! `/v1/streams/{stream}` (records, see [`crate::streams`]),
//! `/v1/tus/` (resumable uploads, tus and the IETF draft, see [`crate::resumable_endpoint`]),
//! `/iceberg/v1/` (the Iceberg REST catalog, see [`iceberg`]), `/s3/` (direct uploads,
//! [`crate::direct`]), the upload page and `/ui/assets/` ([`crate::ui`]),
//! `/healthz`, `/readyz`, and `/metrics` with the dashboard (on the admin
//! address instead when there is one); CORS for the configured browser origins;
//! every request in its span with its id ([`crate::request_span`]).

mod form;
mod health;
mod iceberg;
mod objects;
mod streams;

use axum::routing::get;
use axum::Router;

use crate::AppState;

pub use crate::upload::{seconds_since, UploadResponse};
pub use objects::{ListEntry, ListResponse};
pub use streams::StreamAck;

pub fn router(state: AppState) -> Router {
    let metrics_here = state.config.admin_listen.is_none();
    Router::new()
        .route(
            "/v1/objects/{*key}",
            get(objects::get_object)
                .head(objects::head_object)
                .put(objects::put_object)
                .delete(objects::delete_object),
        )
        .route(
            "/v1/objects",
            get(objects::list_objects).post(form::post_form),
        )
        .route(
            "/v1/streams/{stream}",
            axum::routing::post(streams::post_records),
        )
        .nest("/iceberg", iceberg::router())
        .merge(crate::resumable_endpoint::router())
        .merge(crate::direct::router())
        .merge(crate::imports::router())
        .merge(crate::ui::router(&state))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .merge(if metrics_here {
            Router::new()
                .route("/metrics", get(health::metrics))
                .merge(crate::ui::dashboard_router(&state, false))
        } else {
            Router::new()
        })
        .fallback(health::not_found)
        .layer(axum::middleware::from_fn(
            crate::unread::drain_unread_bodies,
        ))
        .layer(tower::util::option_layer(cors(
            &state.config.cors_origins,
            state.config.auth.token_cookie.is_some(),
        )))
        .layer(axum::middleware::from_fn(crate::request_span::request_span))
        .with_state(state)
}

/// The admin address's routes: metrics and health, nothing else.
pub fn admin_router(state: AppState) -> Router {
    Router::new()
        .route("/metrics", get(health::metrics))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .merge(crate::ui::dashboard_router(&state, true))
        .fallback(health::not_found)
        .layer(axum::middleware::from_fn(crate::request_span::request_span))
        .with_state(state)
}

/// CORS for browser uploads from `origins` (none: no CORS headers at all).
/// With `credentials` (a token cookie), pages of those origins may send
/// cookies (`origins` is then never `*`: the configuration refuses it).
fn cors(origins: &[String], credentials: bool) -> Option<tower_http::cors::CorsLayer> {
    use axum::http::{HeaderName, HeaderValue, Method};
    use tower_http::cors::{AllowHeaders, AllowOrigin, CorsLayer, ExposeHeaders};
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    let exposed: Vec<HeaderName> = sluice_tus::headers::EXPOSED
        .split(", ")
        .chain([
            "etag",
            "last-modified",
            "content-range",
            "accept-ranges",
            "retry-after",
            "location",
            "x-sluice-checksum",
            "x-request-id",
            "upload-complete",
            "upload-incomplete",
            "upload-limit",
            "upload-draft-interop-version",
        ])
        .filter_map(|h| HeaderName::from_bytes(h.to_ascii_lowercase().as_bytes()).ok())
        .collect();
    let layer = CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([
            Method::GET,
            Method::HEAD,
            Method::PUT,
            Method::POST,
            Method::PATCH,
            Method::DELETE,
            Method::OPTIONS,
        ])
        .allow_headers(AllowHeaders::mirror_request())
        .expose_headers(ExposeHeaders::list(exposed))
        .max_age(std::time::Duration::from_secs(3600))
        .allow_credentials(credentials);
    Some(layer)
}
