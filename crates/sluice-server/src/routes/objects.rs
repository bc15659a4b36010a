//! Object routes: streamed PUT through the engine, GET with Range, HEAD, DELETE
//! and listing.

use std::io;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use axum::Json;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use sluice_store::{Metadata, ObjectMeta, WriteCondition};
use sluice_upload::{UploadRequest, UploadSource};

use crate::auth::{Grant, Op};
use crate::begin::{Asked, KeyFrom};
use crate::completion::UploadKind;
use crate::connection_cut::ConnectionCut;
use crate::error::ApiError;
use crate::keys::validate_client_key;
use crate::upload::UploadResponse;
use crate::AppState;
use sluice_input::range::{parse_range, RangeSpec};

/// Where the gateway keeps its own state (resumable uploads, the event
/// outbox): never listed, never a client's key.
const GATEWAY_STATE: &str = sluice_store::reserved_key!("");

/// Largest total of user metadata, as S3 allows.
const MAX_METADATA_BYTES: usize = 2048;
const META_PREFIX: &str = "x-sluice-meta-";

pub async fn put_object(
    State(state): State<AppState>,
    Path(key): Path<String>,
    grant: Grant,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<UploadResponse>), ApiError> {
    validate_client_key(&key).map_err(ApiError::InvalidKey)?;
    grant.check(Op::Put, &key)?;
    let length = crate::body::content_length(&headers)?;
    let size_limit = state.bodies.limit_for(&grant, length)?;
    let condition = match headers.get(header::IF_NONE_MATCH).map(|v| v.to_str()) {
        None => None,
        Some(Ok("*")) => Some(WriteCondition::IfNoneMatch),
        Some(_) => {
            return Err(ApiError::BadRequest(
                "only If-None-Match: * is supported on PUT".into(),
            ))
        }
    };
    let content_type = match headers.get(header::CONTENT_TYPE) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| ApiError::BadRequest("Content-Type is not visible ASCII".into()))?
                .to_string(),
        ),
    };
    let metadata = metadata_from(&headers)?;
    let begun = state
        .begin
        .begin(
            &grant,
            Asked {
                kind: UploadKind::Put,
                key: KeyFrom::Client(key),
                size: length,
                content_type,
                metadata,
                filename: None,
                ask_hook: true,
            },
        )
        .await?;
    let _slot = state.admission.admit(&begun.party()).await?;
    let request = UploadRequest {
        key: begun.key,
        content_type: begun.content_type,
        metadata: begun.metadata,
        condition,
        origin: Some(begun.origin),
        ..UploadRequest::default()
    };
    let stream = state.bodies.stream(body, size_limit);
    let source = UploadSource::Stream { stream, length };
    let response = crate::upload::run(&state, request, source).await?;
    Ok((StatusCode::CREATED, Json(response)))
}

/// `x-sluice-meta-NAME: value` headers as object metadata.
fn metadata_from(headers: &HeaderMap) -> Result<Metadata, ApiError> {
    let mut metadata = Metadata::new();
    let mut total = 0;
    for (name, value) in headers {
        let Some(field) = name.as_str().strip_prefix(META_PREFIX) else {
            continue;
        };
        if field.is_empty() {
            return Err(ApiError::BadRequest(
                "a metadata header needs a name after x-sluice-meta-".into(),
            ));
        }
        let value = value.to_str().map_err(|_| {
            ApiError::BadRequest(format!("metadata {field:?} is not visible ASCII"))
        })?;
        total += field.len() + value.len();
        metadata.insert(field.to_string(), value.to_string());
    }
    if total > MAX_METADATA_BYTES {
        return Err(ApiError::BadRequest(format!(
            "metadata is {total} bytes; at most {MAX_METADATA_BYTES} are allowed"
        )));
    }
    Ok(metadata)
}

pub async fn get_object(
    State(state): State<AppState>,
    Path(key): Path<String>,
    grant: Grant,
    cut: Option<Extension<ConnectionCut>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    validate_client_key(&key).map_err(ApiError::InvalidKey)?;
    grant.check(Op::Get, &key)?;
    let spec = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_range);
    let range = match spec {
        None => None,
        Some(RangeSpec::Suffix(n)) => {
            let size = state.store.head_object(&key).await?.size;
            match (n, size) {
                // No bytes asked for: unsatisfiable.
                (0, _) => return Err(ApiError::RangeNotSatisfiable { size }),
                // An empty object has no range to send: the whole of it, with 200.
                (_, 0) => None,
                _ => Some(RangeSpec::Suffix(n).to_byte_range(Some(size))),
            }
        }
        Some(spec) => Some(spec.to_byte_range(None)),
    };
    let output = match state.store.get_object(&key, range).await {
        Err(sluice_store::StoreError::InvalidRange) => {
            let size = state.store.head_object(&key).await?.size;
            return Err(ApiError::RangeNotSatisfiable { size });
        }
        other => other?,
    };
    let (start, end) = output.range;
    // `bytes=0-` of an empty object reads nothing: sent as the whole (empty) object.
    let partial = range.is_some() && output.meta.size > 0;
    // Past the deadline the connection closes; the guard, kept by the body,
    // calls that off once the body is sent or dropped.
    let deadline = state.bodies.download_deadline();
    let guard = deadline
        .zip(cut)
        .map(|(deadline, Extension(cut))| cut.after(deadline, state.metrics.clone()));
    let metrics = state.metrics.clone();
    let body = output.body.map_err(io::Error::other).map(move |chunk| {
        let _keep = &guard;
        if let Ok(bytes) = &chunk {
            metrics.bytes_sent(bytes.len() as u64);
        }
        chunk
    });
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = if partial {
        StatusCode::PARTIAL_CONTENT
    } else {
        StatusCode::OK
    };
    object_headers(response.headers_mut(), &output.meta, end - start);
    if partial {
        let value = format!(
            "bytes {start}-{}/{}",
            end.saturating_sub(1),
            output.meta.size
        );
        response
            .headers_mut()
            .insert(header::CONTENT_RANGE, header_value(&value));
    }
    Ok(response)
}

pub async fn head_object(
    State(state): State<AppState>,
    Path(key): Path<String>,
    grant: Grant,
) -> Result<Response, ApiError> {
    validate_client_key(&key).map_err(ApiError::InvalidKey)?;
    grant.check(Op::Get, &key)?;
    let meta = state.store.head_object(&key).await?;
    let mut response = StatusCode::OK.into_response();
    object_headers(response.headers_mut(), &meta, meta.size);
    Ok(response)
}

pub async fn delete_object(
    State(state): State<AppState>,
    Path(key): Path<String>,
    grant: Grant,
) -> Result<StatusCode, ApiError> {
    validate_client_key(&key).map_err(ApiError::InvalidKey)?;
    grant.check(Op::Delete, &key)?;
    state.store.delete_object(&key).await?;
    Ok(StatusCode::NO_CONTENT)
}

fn header_value(text: &str) -> HeaderValue {
    HeaderValue::from_str(text).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

fn object_headers(headers: &mut HeaderMap, meta: &ObjectMeta, length: u64) {
    let content_type = meta
        .content_type
        .as_deref()
        .unwrap_or("application/octet-stream");
    headers.insert(header::CONTENT_TYPE, header_value(content_type));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(length));
    headers.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    headers.insert(header::ETAG, header_value(&meta.etag));
    headers.insert(
        header::LAST_MODIFIED,
        header_value(&httpdate::fmt_http_date(meta.last_modified)),
    );
    if let Some(checksum) = meta.checksum {
        headers.insert(
            HeaderName::from_static("x-sluice-checksum"),
            header_value(&checksum.to_string()),
        );
    }
    for (name, value) in &meta.metadata {
        if let (Ok(name), Ok(value)) = (
            HeaderName::try_from(format!("{META_PREFIX}{name}")),
            HeaderValue::from_str(value),
        ) {
            headers.insert(name, value);
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default)]
    prefix: String,
    limit: Option<usize>,
    cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ListResponse {
    pub objects: Vec<ListEntry>,
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ListEntry {
    pub key: String,
    pub size: u64,
    pub etag: String,
    pub last_modified: String,
}

pub async fn list_objects(
    State(state): State<AppState>,
    grant: Grant,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<ListResponse>, ApiError> {
    let Query(query) =
        query.map_err(|e| ApiError::BadRequest(format!("invalid query: {}", e.body_text())))?;
    let prefix = grant.list_prefix(&query.prefix)?;
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::BadRequest("limit must be within 1..=1000".into()));
    }
    let mut after = query.cursor.as_deref().map(cursor::decode).transpose()?;
    let mut objects = Vec::new();
    // Pages are read until `limit` objects of the API are found or the listing
    // ends; the gateway's own state is skipped in one jump and never shapes a
    // page or a cursor.
    let next = loop {
        let page = state
            .store
            .list_objects(&prefix, after.as_deref(), limit - objects.len())
            .await?;
        let truncated = page.next_cursor.is_some();
        let mut jumped = false;
        for object in page.objects {
            if object.key.starts_with(GATEWAY_STATE) {
                after = Some(cursor::past_state());
                jumped = true;
                break;
            }
            after = Some(object.key.clone());
            objects.push(ListEntry {
                key: object.key,
                size: object.size,
                etag: object.etag,
                last_modified: httpdate::fmt_http_date(object.last_modified),
            });
        }
        if objects.len() >= limit {
            break (truncated || jumped).then_some(after);
        }
        if !truncated && !jumped {
            break None;
        }
    };
    Ok(Json(ListResponse {
        objects,
        next_cursor: next.flatten().as_deref().map(cursor::encode),
    }))
}

/// Listing cursors: opaque to clients (URL-safe base64 of the key the next page
/// starts after); any cursor a client makes up only moves where listing starts.
mod cursor {
    use base64::Engine as _;

    use crate::error::ApiError;

    const CODEC: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;

    pub fn encode(after: &str) -> String {
        CODEC.encode(after)
    }

    pub fn decode(cursor: &str) -> Result<String, ApiError> {
        CODEC
            .decode(cursor)
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| ApiError::BadRequest("the cursor is not one this server gave".into()))
    }

    /// A key after every key of the gateway's own state.
    pub fn past_state() -> String {
        format!("{}\u{10FFFF}", super::GATEWAY_STATE)
    }
}
