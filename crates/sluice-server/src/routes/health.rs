//! Liveness, readiness (see [`crate::readiness`]) and the metrics exposition.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::error::ApiError;
use crate::AppState;

pub async fn healthz() -> &'static str {
    "ok\n"
}

/// `{"status": "ready"}`, or 503 `{"status": "not_ready", "reason", "message"}`
/// with the reason (`draining`, `store_unreachable`, `bucket_missing`,
/// `credentials_refused`): from the gateway's state, never waiting on the store.
pub async fn readyz(State(state): State<AppState>) -> Response {
    match state.readiness.check() {
        Ok(()) => (StatusCode::OK, Json(json!({ "status": "ready" }))).into_response(),
        Err(not_ready) => {
            let mut response = (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({
                    "status": "not_ready",
                    "reason": not_ready.code(),
                    "message": not_ready.message(),
                })),
            )
                .into_response();
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(1));
            response
        }
    }
}

pub async fn metrics(
    State(state): State<AppState>,
    headers: axum::http::HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    state.auth.check_admin(&headers)?;
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(&state.engine),
    ))
}

pub async fn not_found() -> ApiError {
    ApiError::NoRoute
}
