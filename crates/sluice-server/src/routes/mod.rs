//! The HTTP API: `/v1/objects` (PUT, POST form, GET, HEAD, DELETE, list),
//! `/healthz`, `/readyz` and `/metrics`.

mod form;
mod health;
mod objects;

use axum::routing::get;
use axum::Router;

use crate::AppState;

pub use objects::{seconds_since, ListEntry, ListResponse, UploadResponse};

pub fn router(state: AppState) -> Router {
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
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .fallback(health::not_found)
        .with_state(state)
}
