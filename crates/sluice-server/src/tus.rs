//! Resumable uploads over tus 1.0 under `/v1/tus/`, as thin adapters: requests are
//! parsed and checked by `sluice-tus`, acted on by `sluice-resumable` (state in the
//! store, locks, chunk writes, concatenation), errors mapped in
//! [`crate::conversions`]; an object a request makes is announced by the
//! engine (the upload's record gives its origin). A HEAD only reads.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, options};
use axum::Router;
use sluice_resumable::{new_id, Chunk, NewUpload, Protocol, UploadRecord};
use sluice_tus::headers::{self as tus_headers, ConcatRequest, CreateRequest, PatchRequest};
use sluice_tus::{Concat, TusError};

use crate::admission::Party;
use crate::auth::Grant;
use crate::begin::{Asked, KeyFrom};
use crate::error::ApiError;
use crate::AppState;
use sluice_upload::UploadKind;

/// The header naming the object an upload becomes (percent-encoded beyond ASCII).
pub const KEY_HEADER: HeaderName = HeaderName::from_static("x-sluice-key");
/// Where uploads are created; an upload's URL is this plus its id.
pub const BASE_PATH: &str = "/v1/tus/";

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/tus", options(capabilities).post(create))
        .route(BASE_PATH, options(capabilities).post(create))
        .route("/v1/tus/{id}", any(dispatch))
        .layer(axum::middleware::map_response(with_tus_resumable))
}

/// Every tus answer carries Tus-Resumable, errors included.
async fn with_tus_resumable(mut response: Response) -> Response {
    let (name, value) = tus_headers::resumable();
    response.headers_mut().insert(name, value);
    response
}

async fn capabilities(State(state): State<AppState>) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .extend(tus_headers::capabilities(state.resumable.config().max_size));
    response
}

/// Routes by method, X-HTTP-Method-Override honoured on POST.
async fn dispatch(
    State(state): State<AppState>,
    Path(id): Path<String>,
    grant: Grant,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    match tus_headers::effective_method(&method, &headers)? {
        Method::HEAD | Method::GET => head(state, id, grant, headers).await,
        Method::PATCH => patch(state, id, grant, headers, body).await,
        Method::DELETE => terminate(state, id, grant, headers).await,
        Method::OPTIONS => Ok(capabilities(State(state)).await),
        _ => Ok((
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "HEAD, PATCH, DELETE, OPTIONS")],
        )
            .into_response()),
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

fn chunk_of(
    state: &AppState,
    body: Body,
    declared: Option<u64>,
    checksum: Option<sluice_tus::UploadChecksum>,
) -> Chunk {
    Chunk {
        // The upload's own limits apply, in sluice-resumable.
        body: state.bodies.stream(body, None),
        declared,
        checksum,
        completes: false,
    }
}

async fn create(
    State(state): State<AppState>,
    grant: Grant,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let resumable = &state.resumable;
    let max_size = resumable.config().max_size;
    let request =
        CreateRequest::from_headers(&headers, grant.max_size.unwrap_or(max_size).min(max_size))?;
    if grant.max_size.is_some() && request.length.is_none() && request.concat.is_none() {
        return Err(ApiError::Forbidden(
            "a token with max_size needs the length up front (Upload-Length)".into(),
        ));
    }
    let content_type = request
        .metadata
        .text("filetype")
        .filter(|t| HeaderValue::from_str(t).is_ok() && !t.is_empty())
        .map(str::to_owned);
    let id = new_id();
    let partial = request.concat == Some(ConcatRequest::Partial);
    let mut metadata = request.metadata;
    let text: BTreeMap<String, String> = metadata
        .0
        .keys()
        .filter_map(|k| Some((k.clone(), metadata.text(k)?.to_owned())))
        .collect();
    let begun = state
        .begin
        .begin(
            &grant,
            Asked {
                kind: match request.concat {
                    Some(ConcatRequest::Final(_)) => UploadKind::TusConcatenation,
                    _ => UploadKind::TusCreation,
                },
                key: KeyFrom::Template {
                    filename: text.get("filename").cloned().unwrap_or_default(),
                    id: uuid::Uuid::parse_str(&id).expect("a fresh id is a uuid"),
                },
                size: request.length,
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
    let (key, content_type) = (begun.key, begun.content_type);
    let new = NewUpload {
        id,
        key,
        length: request.length,
        metadata,
        partial,
        content_type,
        owner: grant.owner(),
        protocol: Protocol::Tus,
    };
    if let Some(ConcatRequest::Final(urls)) = &request.concat {
        let ids = urls
            .iter()
            .map(|url| {
                tus_headers::upload_id_from_url(url, BASE_PATH)
                    .map(str::to_owned)
                    .ok_or_else(|| {
                        TusError::InvalidConcat(format!("{url} is not an upload of this server"))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if grant.owner().is_some() {
            // Only the caller's own partials, and no more bytes than it may store.
            let mut total = 0u64;
            for id in &ids {
                let partial = resumable.status(id).await?;
                grant.check_owner(partial.owner.as_deref())?;
                total = total.saturating_add(partial.upload.offset);
            }
            grant.check_size(total)?;
        }
        // Joining partials moves bytes like an upload does: it waits its turn.
        let _slot = state.admission.admit(&party).await?;
        let written = resumable.concatenate(new, &ids).await?;
        return Ok(created(&written.record, true));
    }
    let _slot = match request.has_body {
        true => Some(state.admission.admit(&party).await?),
        false => None,
    };
    let chunk = request
        .has_body
        .then(|| chunk_of(&state, body, request.body_length, request.checksum));
    let written = resumable.create(new, chunk).await?;
    let with_offset = request.has_body || written.finished.is_some();
    Ok(created(&written.record, with_offset))
}

fn created(record: &UploadRecord, with_offset: bool) -> Response {
    let mut response = StatusCode::CREATED.into_response();
    let headers = response.headers_mut();
    let location =
        HeaderValue::from_str(&format!("{BASE_PATH}{}", record.id())).expect("ids are hex");
    headers.insert(header::LOCATION, location);
    for (name, value) in with_key(record.upload.head_headers(BASE_PATH), record) {
        if name == tus_headers::UPLOAD_OFFSET && !with_offset {
            continue;
        }
        headers.insert(name, value);
    }
    response
}

async fn head(
    state: AppState,
    id: String,
    grant: Grant,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    tus_headers::check_version(&headers)?;
    let record = state.resumable.status(&id).await?;
    grant.check_resume(record.owner.as_deref(), object_key(&record))?;
    record.check_protocol(Protocol::Tus)?;
    let mut response = StatusCode::OK.into_response();
    response
        .headers_mut()
        .extend(with_key(record.upload.head_headers(BASE_PATH), &record));
    Ok(response)
}

async fn patch(
    state: AppState,
    id: String,
    grant: Grant,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let request = PatchRequest::from_headers(&headers)?;
    if grant.owner().is_some() {
        // The owner never changes, so it can be checked before the write.
        let record = state.resumable.status(&id).await?;
        grant.check_resume(record.owner.as_deref(), object_key(&record))?;
    }
    // The upload's key is in its record, read only once the slot is held.
    let party = Party::tenant_only(grant.tenant.clone());
    let slot = state.admission.admit(&party).await?;
    let chunk = chunk_of(&state, body, request.body_length, request.checksum.clone());
    let written = state.resumable.write(&id, Protocol::Tus, &request, chunk).await;
    drop(slot);
    // A PATCH that failed may still have stored what arrived (a body cut off
    // midway keeps its bytes): it counts as small, or a client could send one
    // byte and hang up, again and again, without ever waiting.
    let (stored, finished) = match &written {
        Ok(w) => (
            w.record.upload.offset.saturating_sub(request.offset),
            w.record.is_finished(),
        ),
        Err(_) => (0, false),
    };
    let wait = state.small_patches.wait(&id, stored, finished);
    if finished {
        state.small_patches.forget(&id);
    }
    // Cut by a shutdown: answered at once, the gateway is about to exit.
    if !wait.is_zero() && !state.bodies.cut() {
        state.metrics.small_patch_waited(wait);
        tokio::time::sleep(wait).await;
    }
    let written = written?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().extend(with_key(
        written.record.upload.patch_headers(),
        &written.record,
    ));
    Ok(response)
}

async fn terminate(
    state: AppState,
    id: String,
    grant: Grant,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    tus_headers::check_version(&headers)?;
    let record = state.resumable.status(&id).await?;
    grant.check_resume(record.owner.as_deref(), object_key(&record))?;
    record.check_protocol(Protocol::Tus)?;
    let terminated = state.resumable.terminate(&id).await?;
    if !terminated.is_finished() && terminated.upload.concat != Concat::Partial {
        state.completion.terminated(&terminated).await?;
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}
