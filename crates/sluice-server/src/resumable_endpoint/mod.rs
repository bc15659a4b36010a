//! The resumable endpoint, `/v1/tus/` and the upload URLs it hands out, where
//! two protocols meet over the same uploads: tus 1.0 ([`tus`]) and the IETF
//! draft "Resumable Uploads for HTTP" ([`draft`]). Each request is served by
//! the protocol it speaks, as tusd switches: `Upload-Draft-Interop-Version`
//! makes it the draft's, anything else is tus. An upload is continued only in
//! the protocol that made it (its record says which). What both adapters share
//! lives here: the key header, a request body as a chunk, and the pacing of
//! small writes.

pub mod draft;
pub mod tus;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use sluice_resumable::{Chunk, ResumableError, UploadRecord, Written};
use sluice_rufh::{DraftError, Interop};
use sluice_tus::Concat;

use crate::auth::Grant;
use crate::AppState;

/// The header naming the object an upload becomes (percent-encoded beyond ASCII).
pub const KEY_HEADER: HeaderName = HeaderName::from_static("x-sluice-key");
/// Where uploads are created; an upload's URL is this plus its id.
pub const BASE_PATH: &str = "/v1/tus/";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/tus", any(on_base))
        .route(BASE_PATH, any(on_base))
        .route("/v1/tus/{id}", any(on_upload))
        .layer(axum::middleware::map_response(tus::with_tus_resumable))
}

/// The draft's version a request speaks, None for tus; a request speaking
/// both, or a version not served, is refused.
fn protocol_of(headers: &HeaderMap) -> Result<Option<Interop>, DraftError> {
    let interop = Interop::from_headers(headers)?;
    if interop.is_some() && headers.contains_key(sluice_tus::headers::TUS_RESUMABLE) {
        return Err(DraftError::BothProtocols);
    }
    Ok(interop)
}

async fn on_base(
    State(state): State<AppState>,
    grant: Grant,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match protocol_of(&headers) {
        Err(refused) => draft::refused(None, refused),
        Ok(Some(interop)) => draft::on_base(state, grant, interop, method, headers, body).await,
        Ok(None) => tus::on_base(state, grant, method, headers, body)
            .await
            .into_response(),
    }
}

async fn on_upload(
    State(state): State<AppState>,
    Path(id): Path<String>,
    grant: Grant,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match protocol_of(&headers) {
        Err(refused) => draft::refused(None, refused),
        Ok(Some(interop)) => {
            draft::on_upload(state, id, grant, interop, method, headers, body).await
        }
        Ok(None) => tus::on_upload(state, id, grant, method, headers, body)
            .await
            .into_response(),
    }
}

/// A key as a header value: bytes outside visible ASCII percent-encoded.
fn key_header(key: &str) -> HeaderValue {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        if (0x21..0x7f).contains(&byte) && byte != b'%' {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    HeaderValue::from_str(&out).expect("visible ASCII")
}

/// `headers` plus the object's key, except for a partial upload (its bytes are
/// not an object of the API).
fn with_key(
    mut headers: Vec<(HeaderName, HeaderValue)>,
    record: &UploadRecord,
) -> Vec<(HeaderName, HeaderValue)> {
    if record.upload.concat != Concat::Partial {
        headers.push((KEY_HEADER, key_header(&record.key)));
    }
    headers
}

/// The object an upload becomes; none for a partial upload.
fn object_key(record: &UploadRecord) -> Option<&str> {
    (record.upload.concat != Concat::Partial).then_some(record.key.as_str())
}

/// A request's body as the chunk it brings.
fn chunk_of(
    state: &AppState,
    body: Body,
    declared: Option<u64>,
    checksum: Option<sluice_tus::UploadChecksum>,
    completes: bool,
) -> Chunk {
    Chunk {
        // The upload's own limits apply, in sluice-resumable.
        body: state.bodies.stream(body, None),
        declared,
        checksum,
        completes,
    }
}

/// After a write to upload `id` that began at `offset`: a write that stored
/// little without finishing waits its turn (see [`crate::small_patches`]),
/// unless the gateway is shutting down. A failed write may still have stored
/// what arrived (a body cut off midway keeps its bytes): it counts as small,
/// or a client could send one byte and hang up, again and again, without ever
/// waiting.
async fn pace_small_writes(
    state: &AppState,
    id: &str,
    offset: u64,
    written: &Result<Written, ResumableError>,
) {
    let (stored, finished) = match written {
        Ok(w) => (
            w.record.upload.offset.saturating_sub(offset),
            w.record.is_finished(),
        ),
        Err(_) => (0, false),
    };
    let wait = state.small_patches.wait(id, stored, finished);
    if finished {
        state.small_patches.forget(id);
    }
    // Cut by a shutdown: answered at once, the gateway is about to exit.
    if !wait.is_zero() && !state.bodies.cut() {
        state.metrics.small_patch_waited(wait);
        tokio::time::sleep(wait).await;
    }
}
