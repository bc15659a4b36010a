//! Resumable uploads over tus 1.0 under `/v1/tus/`: creation (with upload and
//! deferred length), HEAD, PATCH, termination, checksums and expiration. The
//! protocol rules come from `sluice-tus`; this module keeps each upload's state in
//! the store ([`record`]), serialises writers with a lock made of conditional
//! writes ([`lock`]), moves the bytes through the engine ([`write`]) and removes
//! expired uploads ([`sweep`]). Nothing is kept on local disk or in memory between
//! requests, so any instance serves any request.

mod concat;
pub mod lock;
pub mod record;
pub mod sweep;
mod write;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, options};
use axum::Router;
use sluice_store::{limits, ObjectStore};
use sluice_tus::headers::{self as tus_headers, ConcatRequest, CreateRequest, PatchRequest};
use sluice_tus::{Concat, TusError, Upload, UploadChecksum, OFFSET_OCTET_STREAM};
use sluice_upload::{Engine, UploadRequest, UploadSource};

use crate::body::limited_stream;
use crate::error::ApiError;
use crate::keys::KeyInputs;
use crate::AppState;
use lock::{LockError, UploadLock};
use record::{new_id, upload_prefix, valid_id, Loaded, RecordStore, TusRecord};

/// The header naming the object an upload becomes (percent-encoded beyond ASCII).
pub const KEY_HEADER: HeaderName = HeaderName::from_static("x-sluice-key");
const METHOD_OVERRIDE: &str = "x-http-method-override";
/// Where uploads are created; an upload's URL is this plus its id.
pub const BASE_PATH: &str = "/v1/tus/";

/// What the tus routes share.
#[derive(Clone)]
pub struct Tus {
    pub engine: Engine,
    pub store: Arc<dyn ObjectStore>,
    pub records: RecordStore,
    pub expiry: Duration,
    pub lock_timeout: Duration,
    /// Largest upload accepted (Tus-Max-Size).
    pub max_size: u64,
    part_size: u64,
    threshold: u64,
}

impl Tus {
    pub fn new(engine: Engine, store: Arc<dyn ObjectStore>, config: &crate::ServerConfig) -> Tus {
        Tus {
            engine,
            records: RecordStore::new(store.clone()),
            store,
            expiry: config.tus.expiry,
            lock_timeout: config.tus.lock_timeout,
            max_size: config.max_upload_size.unwrap_or(limits::MAX_OBJECT_SIZE),
            part_size: config.engine.part_size,
            threshold: config.engine.threshold,
        }
    }

    /// Parts big enough for a known length to fit in 10,000 (a deferred length
    /// gets the configured size: 10,000 of them is the limit then).
    pub fn part_size(&self, length: Option<u64>) -> u64 {
        let needed = length.map_or(0, |l| l.div_ceil(limits::MAX_PARTS as u64));
        self.part_size.max(needed).max(limits::MIN_PART_SIZE)
    }

    /// Runs `work` holding upload `id`'s lock, renewing it meanwhile; 423 when another
    /// request holds it or the lock is lost midway.
    async fn locked<T>(
        &self,
        id: &str,
        work: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        let mut lock = UploadLock::acquire(self.store.clone(), id, self.lock_timeout)
            .await
            .map_err(lock_error)?;
        let result = tokio::select! {
            result = work => result,
            lost = lock.keep_alive() => {
                tracing::warn!(upload_id = id, error = %lost, "upload lock lost mid-request; the request was stopped");
                return Err(lock_error(lost));
            }
        };
        lock.release().await;
        result
    }
}

fn lock_error(error: LockError) -> ApiError {
    match error {
        LockError::Held => ApiError::Tus(TusError::Locked),
        LockError::Store(e) => ApiError::from(e),
    }
}

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
        .extend(tus_headers::capabilities(state.tus.max_size));
    response
}

/// Routes by method, honouring X-HTTP-Method-Override on POST (for clients behind
/// proxies that allow only GET and POST).
async fn dispatch(
    State(state): State<AppState>,
    Path(id): Path<String>,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let method = match (
        &method,
        headers.get(METHOD_OVERRIDE).and_then(|v| v.to_str().ok()),
    ) {
        (&Method::POST, Some(over)) => {
            Method::from_bytes(over.trim().to_ascii_uppercase().as_bytes()).map_err(|_| {
                ApiError::BadRequest("X-HTTP-Method-Override names no method".into())
            })?
        }
        _ => method,
    };
    match method {
        Method::HEAD | Method::GET => head(state, id, headers).await,
        Method::PATCH => patch(state, id, headers, body).await,
        Method::DELETE => terminate(state, id, headers).await,
        Method::OPTIONS => Ok(capabilities(State(state)).await),
        _ => Ok((
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "HEAD, PATCH, DELETE, OPTIONS")],
        )
            .into_response()),
    }
}

fn is_offset_stream(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case(OFFSET_OCTET_STREAM)
        })
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

fn upload_headers(record: &TusRecord) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = record.upload.head_headers();
    match &record.upload.concat {
        Concat::Partial => return headers, // its bytes are not an object of the API
        Concat::Final(ids) => {
            let urls: Vec<String> = ids.iter().map(|id| format!("{BASE_PATH}{id}")).collect();
            if let Ok(value) = HeaderValue::from_str(&format!("final;{}", urls.join(" "))) {
                headers.push((tus_headers::UPLOAD_CONCAT, value));
            }
        }
        Concat::None => {}
    }
    headers.push((KEY_HEADER, key_header(&record.key)));
    headers
}

fn location(id: &str) -> HeaderValue {
    HeaderValue::from_str(&format!("{BASE_PATH}{id}")).expect("ids are hex")
}

async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let tus = state.tus.clone();
    let request = CreateRequest::from_headers(&headers, tus.max_size)?;
    let body_length = crate::body::content_length(&headers)?;
    let chunked = headers.contains_key(header::TRANSFER_ENCODING);
    let has_body = body_length.map_or(chunked, |n| n > 0);
    if has_body && !is_offset_stream(&headers) {
        return Err(ApiError::Tus(TusError::UnsupportedMediaType));
    }
    let checksum = headers
        .get(tus_headers::UPLOAD_CHECKSUM)
        .map(|v| {
            v.to_str()
                .map_err(|_| ApiError::BadRequest("Upload-Checksum is not visible ASCII".into()))
                .and_then(|v| Ok(UploadChecksum::parse(v)?))
        })
        .transpose()?;
    let content_type = request
        .metadata
        .text("filetype")
        .filter(|t| HeaderValue::from_str(t).is_ok() && !t.is_empty())
        .map(str::to_owned);
    let tenant = crate::keys::tenant(&headers);
    let id = new_id();
    let key = state.template.render(&KeyInputs {
        tenant: &tenant,
        filename: request.metadata.text("filename").unwrap_or(""),
        now: time::OffsetDateTime::now_utc(),
        uuid: uuid::Uuid::parse_str(&id).expect("a fresh id is a uuid"),
    });
    let (concat, key) = match request.concat {
        None => (Concat::None, key),
        // A partial upload's bytes stay hidden until a final upload uses them.
        Some(ConcatRequest::Partial) => (Concat::Partial, format!("{}partial", upload_prefix(&id))),
        Some(ConcatRequest::Final(urls)) => {
            return concat::create_final(&state, id, key, content_type, request.metadata, &urls)
                .await;
        }
    };
    let upload = Upload::new(
        id.clone(),
        request.length,
        request.metadata,
        concat,
        SystemTime::now(),
        tus.expiry,
    );
    let mut record = TusRecord {
        upload,
        key,
        content_type,
        multipart_id: None,
        parts: Vec::new(),
        segments: Vec::new(),
        next_segment: 0,
        finished_etag: None,
    };
    let _slot = if has_body {
        Some(state.admission.admit().await?)
    } else {
        None
    };

    // Fast path: an empty upload, or a small one carried whole by this request,
    // becomes its object with one PutObject.
    let length = record.upload.length;
    let whole_and_small =
        has_body && body_length == length && length.is_some_and(|l| l <= tus.threshold);
    if length == Some(0) || whole_and_small {
        let length = length.expect("checked");
        let stream = limited_stream(
            body,
            Some(length),
            state.config.limits.body_idle_timeout,
            state.metrics.clone(),
        );
        let (check, stream) = write::ChunkCheck::new(checksum, stream);
        let request = UploadRequest {
            key: record.key.clone(),
            content_type: record.content_type.clone(),
            ..UploadRequest::default()
        };
        // The object is written before the checksum is known; a mismatch deletes it.
        match crate::upload::run(
            &state,
            request,
            UploadSource::Stream {
                stream,
                length: Some(length),
            },
        )
        .await
        {
            Ok(stored) => {
                if check.matches() {
                    record.upload.offset = length;
                    record.finished_etag = Some(stored.etag);
                } else {
                    tus.store.delete_object(&record.key).await?;
                    return Err(ApiError::Tus(TusError::ChecksumMismatch));
                }
            }
            Err(error) => {
                tracing::info!(upload_id = %id, error = %error, "creation-with-upload stored nothing; the client can resume from 0")
            }
        }
        tus.records.create(&record).await?;
        return Ok(created(&record, true));
    }

    let etag = tus.records.create(&record).await?;
    let mut loaded = Loaded { record, etag };
    if has_body {
        let patch = PatchRequest {
            offset: 0,
            length: None,
            checksum,
        };
        let result = tus
            .locked(&id, async {
                let plan = loaded.record.upload.check_patch(&patch, SystemTime::now(), tus.max_size)?;
                let stream = limited_stream(body, Some(plan.max_body), state.config.limits.body_idle_timeout, state.metrics.clone());
                let (written, error) = write::write_chunk(&tus, loaded.clone(), stream, plan, patch.checksum.clone()).await;
                if let Some(error) = error {
                    tracing::info!(upload_id = %id, error = %error, offset = written.record.upload.offset, "creation-with-upload ended early");
                }
                if written.record.upload.is_complete() {
                    return write::finish(&tus, written).await;
                }
                Ok(written)
            })
            .await;
        match result {
            Ok(written) => loaded = written,
            Err(error) => {
                tracing::info!(upload_id = %id, error = %error, "creation-with-upload stored nothing; the client can resume")
            }
        }
    }
    Ok(created(&loaded.record, has_body))
}

fn created(record: &TusRecord, with_offset: bool) -> Response {
    let mut response = StatusCode::CREATED.into_response();
    let headers = response.headers_mut();
    headers.insert(header::LOCATION, location(&record.upload.id));
    for (name, value) in upload_headers(record) {
        if name == tus_headers::UPLOAD_OFFSET && !with_offset {
            continue;
        }
        headers.insert(name, value);
    }
    response
}

async fn head(state: AppState, id: String, headers: HeaderMap) -> Result<Response, ApiError> {
    tus_headers::check_version(&headers)?;
    let tus = &state.tus;
    let mut loaded = tus.records.load(&id).await?;
    if loaded.record.upload.is_expired(SystemTime::now()) {
        return Err(ApiError::Tus(TusError::Gone));
    }
    if loaded.record.upload.is_complete() && !loaded.record.is_finished() {
        // All bytes are in but the object is not yet complete (a crash between the
        // two): finish now rather than report an offset the object does not have.
        loaded = tus
            .locked(&id, async {
                write::finish(tus, tus.records.load(&id).await?).await
            })
            .await?;
    }
    let mut response = StatusCode::OK.into_response();
    response
        .headers_mut()
        .extend(upload_headers(&loaded.record));
    Ok(response)
}

async fn patch(
    state: AppState,
    id: String,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let request = PatchRequest::from_headers(&headers)?;
    let body_length = crate::body::content_length(&headers)?;
    let tus = state.tus.clone();
    let _slot = state.admission.admit().await?;
    let loaded = tus
        .locked(&id, async {
            let loaded = tus.records.load(&id).await?;
            let plan =
                loaded
                    .record
                    .upload
                    .check_patch(&request, SystemTime::now(), tus.max_size)?;
            if body_length.is_some_and(|n| n > plan.max_body) {
                return Err(ApiError::Tus(match plan.length {
                    Some(length) => TusError::BeyondLength { length },
                    None => TusError::TooLarge { max: tus.max_size },
                }));
            }
            if loaded.record.is_finished() {
                return Ok(loaded); // nothing more can come (max_body is 0)
            }
            let stream = limited_stream(
                body,
                Some(plan.max_body),
                state.config.limits.body_idle_timeout,
                state.metrics.clone(),
            );
            let (written, error) =
                write::write_chunk(&tus, loaded, stream, plan, request.checksum.clone()).await;
            if let Some(error) = error {
                return Err(error);
            }
            if written.record.upload.is_complete() {
                return write::finish(&tus, written).await;
            }
            Ok(written)
        })
        .await?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    let headers = response.headers_mut();
    for (name, value) in upload_headers(&loaded.record) {
        if name == tus_headers::UPLOAD_OFFSET
            || name == tus_headers::UPLOAD_EXPIRES
            || name == KEY_HEADER
        {
            headers.insert(name, value);
        }
    }
    Ok(response)
}

async fn terminate(state: AppState, id: String, headers: HeaderMap) -> Result<Response, ApiError> {
    tus_headers::check_version(&headers)?;
    let tus = &state.tus;
    tus.locked(&id, async {
        let loaded = tus.records.load(&id).await?;
        remove(tus, &loaded.record).await?;
        tracing::info!(upload_id = %id, key = %loaded.record.key, "upload terminated");
        Ok(())
    })
    .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Removes an upload: its multipart upload (its object, when finished: tus's
/// termination frees the uploaded data) and every state object.
async fn remove(tus: &Tus, record: &TusRecord) -> Result<(), ApiError> {
    if let (Some(upload_id), false) = (&record.multipart_id, record.is_finished()) {
        tus.engine
            .abort_multipart(&record.key, upload_id)
            .await
            .map_err(crate::error::from_transfer)?;
    }
    if record.is_finished() {
        tus.store.delete_object(&record.key).await?;
    }
    tus.records.delete_all(&record.upload.id).await?;
    Ok(())
}
