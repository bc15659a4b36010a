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
use std::collections::BTreeMap;

use sluice_resumable::{
    new_id, Chunk, NewUpload, Protocol, ResumableError, UploadRecord, WantedDigest, Written,
};
use sluice_rufh::{DraftError, Interop};
use sluice_tus::{Concat, Metadata};
use sluice_upload::UploadKind;

use crate::admission::Party;
use crate::auth::Grant;
use crate::begin::{Asked, KeyFrom};
use crate::error::ApiError;
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

/// The caller's grant is taken here rather than refused by the extractor, so
/// that a refusal (no token, a bad one) is answered in the protocol spoken.
async fn on_base(
    State(state): State<AppState>,
    grant: Result<Grant, ApiError>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match (protocol_of(&headers), grant) {
        (Err(refused), _) => draft::refused(None, refused),
        (Ok(Some(interop)), Err(error)) => draft::refused_by_gateway(interop, error),
        (Ok(None), Err(error)) => error.into_response(),
        (Ok(Some(interop)), Ok(grant)) => {
            draft::on_base(state, grant, interop, method, headers, body).await
        }
        (Ok(None), Ok(grant)) => tus::on_base(state, grant, method, headers, body)
            .await
            .into_response(),
    }
}

async fn on_upload(
    State(state): State<AppState>,
    Path(id): Path<String>,
    grant: Result<Grant, ApiError>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    match (protocol_of(&headers), grant) {
        (Err(refused), _) => draft::refused(None, refused),
        (Ok(Some(interop)), Err(error)) => draft::refused_by_gateway(interop, error),
        (Ok(None), Err(error)) => error.into_response(),
        (Ok(Some(interop)), Ok(grant)) => {
            draft::on_upload(state, id, grant, interop, method, headers, body).await
        }
        (Ok(None), Ok(grant)) => tus::on_upload(state, id, grant, method, headers, body)
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

/// What a creation of either protocol asks for.
struct Creating {
    kind: UploadKind,
    protocol: Protocol,
    length: Option<u64>,
    /// Its metadata (`filename` fills the key template, `filetype` is the type).
    metadata: Metadata,
    /// A partial upload of a concatenation: its bytes become no object.
    partial: bool,
    digest: Option<WantedDigest>,
}

/// The one begin of a new upload of either protocol (key, authorization, the
/// pre-create hook, metadata the hook replaced): the upload to make and the
/// party its bytes are admitted as.
async fn begin_upload(
    state: &AppState,
    grant: &Grant,
    creating: Creating,
) -> Result<(NewUpload, Party), ApiError> {
    let Creating {
        kind,
        protocol,
        length,
        mut metadata,
        partial,
        digest,
    } = creating;
    let text: BTreeMap<String, String> = metadata
        .0
        .keys()
        .filter_map(|k| Some((k.clone(), metadata.text(k)?.to_owned())))
        .collect();
    let content_type = text
        .get("filetype")
        .filter(|t| HeaderValue::from_str(t).is_ok() && !t.is_empty())
        .cloned();
    let id = new_id();
    let begun = state
        .begin
        .begin(
            grant,
            Asked {
                kind,
                key: KeyFrom::Template {
                    filename: text.get("filename").cloned().unwrap_or_default(),
                    id: uuid::Uuid::parse_str(&id).expect("a fresh id is a uuid"),
                },
                size: length,
                content_type,
                filename: text.get("filename").cloned(),
                metadata: text,
                // A partial upload becomes no object: the final upload is asked about.
                ask_hook: !partial,
            },
        )
        .await?;
    if begun.metadata_replaced {
        metadata.0 = begun
            .metadata
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone().into_bytes())))
            .collect();
    }
    let party = begun.party();
    let new = NewUpload {
        id,
        key: begun.key,
        length,
        metadata,
        partial,
        content_type: begun.content_type,
        owner: grant.owner(),
        protocol,
        digest,
    };
    Ok((new, party))
}

/// The largest upload this caller may make: the gateway's limit, or its
/// token's `max_size` when lower.
fn max_size(state: &AppState, grant: &Grant) -> u64 {
    let configured = state.resumable.config().max_size;
    grant.max_size.unwrap_or(configured).min(configured)
}

/// Upload `id` as this caller may see it in `protocol`: someone else's answers
/// as a missing one; one of the other protocol is refused.
async fn visible(
    state: &AppState,
    grant: &Grant,
    id: &str,
    protocol: Protocol,
) -> Result<UploadRecord, ApiError> {
    let record = state.resumable.status(id).await?;
    grant.check_resume(record.owner.as_deref(), object_key(&record))?;
    record.check_protocol(protocol)?;
    Ok(record)
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
