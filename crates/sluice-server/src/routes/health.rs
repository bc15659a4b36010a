//! Liveness, readiness (the store answers) and the metrics exposition.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;

use crate::error::ApiError;
use crate::AppState;

pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Ready when the store answers a HEAD of a key that does not exist; not ready
/// (503, at once) while the store counts as down.
pub async fn readyz(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    if let Some(breaker) = state.engine.breaker().filter(|b| b.is_open()) {
        return Err(ApiError::Store(breaker.refusal()));
    }
    // Asked once, without retries: readiness is about now.
    match state
        .engine
        .store()
        .head_object(".sluice-readyz-probe")
        .await
    {
        Ok(_) => Ok("ready\n"),
        Err(e) if e.is_not_found() => Ok("ready\n"),
        Err(e) => Err(ApiError::Store(e)),
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
