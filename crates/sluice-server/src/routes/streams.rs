//! `POST /v1/streams/{stream}`: records in, acknowledged once stored. The body
//! is NDJSON (or a JSON array with `Content-Type: application/json`), optionally
//! gzip or zstd (`Content-Encoding`). It is read under the memory budget and
//! the body limits of uploads, checked whole (an invalid record refuses the
//! request with 400 naming its line, unless the stream has a dead letter), and
//! answered 200 only when every batch holding its records is stored, with their
//! keys; when a batch fails, 503 + Retry-After and nothing is acknowledged.
//!
//! On a stream with a table, `Idempotency-Key: KEY` makes a request count
//! once: its records join the table whole, with a transaction of the key's,
//! and a retry of a request the table holds is answered (`"replayed": true`)
//! without appending anything.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap};
use axum::Json;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde::Serialize;
use sluice_streams::ingest::{acknowledge, submit_keyed_body, BodyEncoding};
use sluice_streams::records::BodyFormat;
use sluice_streams::table::sink::{KeyedRequest, TableSink};
use sluice_streams::RecordStream;

use crate::admission::Party;
use crate::auth::{Grant, Op};
use crate::body::content_length;
use crate::error::ApiError;
use crate::AppState;

/// The answer to an acknowledged request.
#[derive(Debug, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct StreamAck {
    /// Records taken.
    pub records: u64,
    /// Invalid records put in the stream's dead letter.
    pub dead_lettered: u64,
    /// Keys of the objects holding this request's records (dead letter included).
    pub objects: Vec<String>,
    /// The table held this request's idempotency key already: nothing was
    /// appended (the counts are this retry's, zero).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub replayed: bool,
}

pub async fn post_records(
    State(state): State<AppState>,
    Path(name): Path<String>,
    grant: Grant,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<StreamAck>, ApiError> {
    let stream = state
        .streams
        .get(&name)
        .ok_or_else(|| ApiError::NoStream(name.clone()))?
        .clone();
    grant.check(Op::Put, &format!("{name}/"))?;
    let format = body_format(&headers)?;
    let encoding = BodyEncoding::from_header(
        headers
            .get(header::CONTENT_ENCODING)
            .map(|v| v.to_str().unwrap_or("?")),
    )?;
    let limit = stream.config().max_request_bytes;
    let length = content_length(&headers)?;
    if length.is_some_and(|length| length > limit) {
        return Err(ApiError::TooLarge { limit });
    }
    let started = std::time::Instant::now();
    let _slot = state
        .admission
        .admit(&Party {
            tenant: grant.tenant.clone(),
            prefix: Some(name.clone()),
        })
        .await?;
    let key = idempotency_key(&headers, &stream)?;
    let _started = match (&key, stream.table()) {
        (Some(key), Some(sink)) => match sink.start_keyed(key).await {
            Ok(None) => Some(KeyedGuard(sink.clone(), key.clone())),
            Ok(Some(KeyedRequest::Committed)) => {
                return Ok(Json(StreamAck {
                    records: 0,
                    dead_lettered: 0,
                    objects: Vec::new(),
                    replayed: true,
                }))
            }
            Ok(Some(KeyedRequest::InFlight)) => {
                return Err(ApiError::Conflict(
                    "a request with this Idempotency-Key is in progress here; retry once it is answered"
                        .into(),
                ))
            }
            Err(e) => {
                tracing::warn!(error = %e, "the stream's table cannot be read");
                return Err(ApiError::RecordsNotStored);
            }
        },
        _ => None,
    };
    let (body, memory) = read_body(&state, &stream, body, length, limit).await?;
    let submitted = submit_keyed_body(&stream, body, encoding, format, memory, key).await?;
    let (records, dead_lettered) = (submitted.records, submitted.dead_lettered);
    let stored = acknowledge(submitted.tickets).await?;
    state
        .metrics
        .stream_acknowledged(&name, started.elapsed().as_secs_f64());
    let mut objects: Vec<String> = stored.iter().map(|b| b.key.clone()).collect();
    objects.sort();
    objects.dedup();
    Ok(Json(StreamAck {
        records,
        dead_lettered,
        objects,
        replayed: false,
    }))
}

/// A keyed request started at the table's sink, ended however the handler
/// ends.
struct KeyedGuard(std::sync::Arc<TableSink>, String);

impl Drop for KeyedGuard {
    fn drop(&mut self) {
        self.0.end(&self.1);
    }
}

/// The request's `Idempotency-Key`: 1-128 of A-Z a-z 0-9 - _ . :, and only
/// on a stream with a table (elsewhere it could not be kept).
fn idempotency_key(headers: &HeaderMap, stream: &RecordStream) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value.to_str().unwrap_or_default().trim_matches('"');
    let fine = (1..=128).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':'));
    if !fine {
        return Err(ApiError::BadRequest(
            "Idempotency-Key: 1-128 of A-Z a-z 0-9 - _ . :".into(),
        ));
    }
    if stream.table().is_none() {
        return Err(ApiError::BadRequest(
            "Idempotency-Key is kept by streams with a table (table = \"delta\"); this stream has none"
                .into(),
        ));
    }
    Ok(Some(key.to_string()))
}

/// NDJSON unless the body says it is one JSON document.
fn body_format(headers: &HeaderMap) -> Result<BodyFormat, ApiError> {
    let Some(value) = headers.get(header::CONTENT_TYPE) else {
        return Ok(BodyFormat::Ndjson);
    };
    let essence = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match essence.as_str() {
        "application/json" => Ok(BodyFormat::JsonArray),
        "application/x-ndjson"
        | "application/ndjson"
        | "application/jsonl"
        | "application/x-jsonlines"
        | "text/plain"
        | "application/octet-stream" => Ok(BodyFormat::Ndjson),
        _ => Err(ApiError::UnsupportedMediaType {
            expected:
                "application/x-ndjson (one JSON value per line) or application/json (an array)",
        }),
    }
}

/// The whole body in one buffer (records are slices of it), each chunk
/// reserved from the stream's memory as it arrives and nothing reserved twice:
/// a request waiting for memory holds only what it has received.
async fn read_body(
    state: &AppState,
    stream: &RecordStream,
    body: Body,
    length: Option<u64>,
    limit: u64,
) -> Result<(Bytes, sluice_upload::Reservation), ApiError> {
    let budget = stream.memory();
    let mut memory = budget.nothing();
    // Pages of the buffer are touched only as bytes are written into it.
    let mut joined = BytesMut::with_capacity(length.unwrap_or(0).min(limit) as usize);
    let mut body = state.bodies.stream(body, Some(limit));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| crate::conversions::body_failed(&e))?;
        memory.absorb(budget.reserve(chunk.len() as u64).await);
        joined.extend_from_slice(&chunk);
    }
    Ok((joined.freeze(), memory))
}
