//! Direct-to-bucket uploads: the `/s3/` routes Uppy's Companion serves for
//! `@uppy/aws-s3`, with the same request and answer shapes, so the browser
//! sends the bytes to the bucket and the gateway only signs; the same routes
//! under a sealed session path ([`session`], Uppy 6's `companionEndpoint`,
//! which sends no headers), one signing route for Uppy 6's `signRequest`
//! ([`sign`]) and temporary credentials for its `getCredentials`
//! ([`credentials`]). Callers are
//! authorized as for every upload ([`Grant`]): keys come from the key template
//! under the caller's prefix, the pre-create hook is asked, `max_size` is
//! pinned in the POST policy and checked against part numbers and at
//! completion. A multipart upload completed here goes through the completion
//! point at once; a single-request upload is confirmed by [`confirm`] once the
//! object shows up in the bucket. Errors are `{error, message}` JSON, as Uppy
//! reads them.

pub mod confirm;
pub mod credentials;
pub mod session;
pub mod sign;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, Query, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sluice_store::limits::{MAX_PARTS, MAX_PUT_SIZE, MIN_PART_SIZE};
use sluice_store::presign::MAX_PRESIGN_EXPIRY;
use sluice_store::{
    BucketRequest, CreateMultipartRequest, DirectSigner, Metadata, PostPolicy, StoreError,
    UploadedPart,
};
use sluice_upload::{Origin, TransferError, UploadKind};

use crate::auth::{Grant, Op};
use crate::begin::{Asked, KeyFrom};
use crate::client_metadata;
use crate::error::{ApiError, FlatApiError};
use crate::AppState;

/// `[direct]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Direct uploads")]
pub struct DirectSettings {
    /// Sign direct-to-bucket uploads under /s3/ (the routes Uppy's Companion
    /// serves for @uppy/aws-s3): browsers send bytes to the bucket itself.
    /// Needs an s3:// store; see docs/DIRECT.md.
    #[arg(id = "direct.enabled", long = "direct", env = "SLUICE_DIRECT", value_name = "BOOL", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = clap::ArgAction::Set, value_parser = crate::values::flag_bool())]
    pub enabled: bool,
    /// How long a signed direct upload request stays good (at most 7 days, S3's
    /// limit).
    #[arg(id = "direct.expires", long = "direct-expires", env = "SLUICE_DIRECT_EXPIRES", value_name = "DURATION", default_value = "15m", value_parser = crate::values::duration_in(crate::values::SECOND, MAX_PRESIGN_EXPIRY))]
    #[serde(with = "humantime_serde")]
    pub expires: Duration,
    /// The bucket's endpoint as browsers reach it, when not --endpoint
    /// (signatures cover the host) [default: --endpoint].
    #[arg(id = "direct.public_endpoint", long = "direct-endpoint", env = "SLUICE_DIRECT_ENDPOINT", value_name = "URL", value_parser = crate::values::http_url)]
    pub public_endpoint: Option<String>,
    /// How often pending single-request direct uploads are looked for in the
    /// bucket.
    #[arg(id = "direct.confirm_interval", long = "direct-confirm-interval", env = "SLUICE_DIRECT_CONFIRM_INTERVAL", value_name = "DURATION", default_value = "2s", value_parser = crate::values::duration_in(std::time::Duration::from_millis(1), std::time::Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub confirm_interval: Duration,
    /// How long a session from POST /s3/session (Uppy 6's companionEndpoint)
    /// acts for the token it was made from; never beyond the token's own exp.
    /// Each URL it signs is good for --direct-expires.
    #[arg(id = "direct.session_lifetime", long = "direct-session-lifetime", env = "SLUICE_DIRECT_SESSION_LIFETIME", value_name = "DURATION", default_value = "12h", value_parser = crate::values::duration_in(crate::values::SECOND, Duration::from_secs(7 * 24 * 3600)))]
    #[serde(with = "humantime_serde")]
    pub session_lifetime: Duration,
    /// The role /s3/sts assumes for a browser's temporary credentials (AWS
    /// needs one the gateway's keys may assume; MinIO ignores it and takes
    /// the gateway's own keys).
    #[arg(id = "direct.role_arn", long = "direct-role-arn", env = "SLUICE_DIRECT_ROLE_ARN", value_name = "ARN", default_value = "arn:aws:iam::000000000000:role/sluice-direct", value_parser = crate::values::role_arn)]
    pub role_arn: String,
}

impl Default for DirectSettings {
    fn default() -> Self {
        sluice_upload::defaults()
    }
}

/// The signer and settings, when direct uploads are on.
#[derive(Debug, Clone)]
pub struct Direct {
    pub signer: Arc<dyn DirectSigner>,
    pub settings: DirectSettings,
    /// Where the next confirmation pass goes on listing pending records.
    pub confirm_cursor: Arc<std::sync::Mutex<Option<String>>>,
    /// The key sessions are sealed with, read from the bucket once.
    pub session_key: Arc<tokio::sync::OnceCell<bytes::Bytes>>,
}

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(companion_routes())
        .nest("/s3/session/{session}", companion_routes())
        .route("/s3/session", post(session::create))
        .route("/s3/sign", post(sign::sign))
        .route("/s3/sts", get(credentials::credentials))
}

/// Companion's routes for `@uppy/aws-s3`.
fn companion_routes() -> Router<AppState> {
    Router::new()
        .route("/s3/params", get(params))
        .route("/s3/multipart", post(create_multipart))
        .route(
            "/s3/multipart/{upload_id}",
            get(list_parts).delete(abort_multipart),
        )
        .route("/s3/multipart/{upload_id}/{part}", get(sign_part))
        .route(
            "/s3/multipart/{upload_id}/complete",
            post(complete_multipart),
        )
}

type DirectResult<T> = Result<T, FlatApiError>;

/// The caller's [`Grant`]: its session's under `/s3/session/SESSION/`, its
/// token's elsewhere; refused in Uppy's error shape.
pub struct CallerGrant(pub Grant);

impl axum::extract::FromRequestParts<AppState> for CallerGrant {
    type Rejection = FlatApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &AppState,
    ) -> Result<CallerGrant, FlatApiError> {
        let params = axum::extract::RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NoRoute)?;
        if let Some((_, sealed)) = params.iter().find(|(name, _)| *name == "session") {
            let grant = session::grant(state, sealed).await?;
            if let Some(tenant) = grant.owner() {
                crate::request_span::record_tenant(&tenant);
            }
            return Ok(CallerGrant(grant));
        }
        Ok(CallerGrant(Grant::from_request_parts(parts, state).await?))
    }
}

/// `{uploadId}` of a route (a struct, so a session's parameter may sit beside it).
#[derive(Debug, Deserialize)]
pub struct UploadPath {
    upload_id: String,
}

/// `{uploadId}/{partNumber}` of a route.
#[derive(Debug, Deserialize)]
pub struct PartPath {
    upload_id: String,
    part: String,
}

/// `at`, rounded up to a whole second. A POST policy's expiration (and its
/// confirmation record's) is in whole seconds: rounded down, it cut up to a
/// second off the lifetime, most of a one-second one.
fn whole_second_after(at: SystemTime) -> SystemTime {
    let since_epoch = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    match since_epoch.subsec_nanos() {
        0 => at,
        _ => SystemTime::UNIX_EPOCH + Duration::from_secs(since_epoch.as_secs() + 1),
    }
}

fn direct(state: &AppState) -> Result<&Direct, FlatApiError> {
    state
        .direct
        .as_ref()
        .ok_or(FlatApiError(ApiError::DirectUploadsOff))
}

/// The largest object the caller may make directly: the token's and the
/// gateway's limits, and S3's for one request or for a whole object.
fn size_limit(state: &AppState, grant: &Grant, ceiling: u64) -> u64 {
    state
        .bodies
        .size_limit(grant)
        .map_or(ceiling, |limit| limit.min(ceiling))
}

/// The key a new direct upload gets, after the hook had its say (see
/// [`crate::begin`]).
async fn new_key(
    state: &AppState,
    grant: &Grant,
    filename: &str,
    content_type: &Option<String>,
    metadata: &Metadata,
    kind: UploadKind,
) -> Result<(String, Option<String>, Metadata), ApiError> {
    let begun = state
        .begin
        .begin(
            grant,
            Asked {
                kind,
                key: KeyFrom::Template {
                    filename: filename.to_owned(),
                    id: uuid::Uuid::new_v4(),
                },
                size: None,
                content_type: content_type.clone(),
                metadata: metadata.clone(),
                filename: Some(filename.to_owned()),
                ask_hook: true,
            },
        )
        .await?;
    Ok((begun.key, begun.content_type, begun.metadata))
}

/// A key named by a request about an existing upload: the caller's, or not
/// found (never confirming that another caller's upload exists).
fn own_key(grant: &Grant, key: Option<String>) -> Result<String, ApiError> {
    let key =
        key.ok_or_else(|| ApiError::BadRequest("the key query parameter is missing".into()))?;
    crate::keys::validate_client_key(&key).map_err(ApiError::InvalidKey)?;
    match grant.check(Op::Resume, &key) {
        Ok(()) => Ok(key),
        // Allowed to resume, but not this key: it is not the caller's upload.
        Err(ApiError::Forbidden(_)) if grant.allows(Op::Resume).is_ok() => {
            Err(ApiError::Tus(sluice_tus::TusError::NotFound))
        }
        Err(e) => Err(e),
    }
}

fn upload_gone(error: StoreError) -> ApiError {
    match error {
        StoreError::NoSuchUpload { .. } | StoreError::NoSuchKey { .. } => {
            ApiError::Tus(sluice_tus::TusError::NotFound)
        }
        other => ApiError::Store(other),
    }
}

#[derive(Debug, Deserialize)]
pub struct KeyQuery {
    key: Option<String>,
}

/// `GET /s3/params?filename=&type=&metadata[NAME]=value`: a form POST to the
/// bucket for one small file.
async fn params(
    State(state): State<AppState>,
    CallerGrant(grant): CallerGrant,
    Query(query): Query<Vec<(String, String)>>,
) -> DirectResult<Json<Value>> {
    let direct = direct(&state)?;
    let mut filename = None;
    let mut content_type = None;
    let mut pairs = Vec::new();
    for (name, value) in query {
        match name.as_str() {
            "filename" => filename = Some(value),
            "type" => content_type = Some(value).filter(|t| !t.is_empty()),
            other => {
                if let Some(field) = other
                    .strip_prefix("metadata[")
                    .and_then(|rest| rest.strip_suffix(']'))
                {
                    pairs.push((field.to_string(), value));
                }
            }
        }
    }
    let filename = filename
        .ok_or_else(|| ApiError::BadRequest("the filename query parameter is missing".into()))?;
    let metadata = client_metadata::object_metadata(pairs)?;
    let signed = form_post(&state, direct, &grant, &filename, content_type, metadata).await?;
    Ok(Json(json!({
        "method": "POST",
        "url": signed.url,
        "fields": signed.fields,
        "expires": direct.settings.expires.as_secs(),
    })))
}

/// A signed form POST for one new object.
struct SignedForm {
    url: String,
    fields: serde_json::Map<String, Value>,
    /// The key, as the gateway names it (without the store's prefix).
    key: String,
}

/// Signs a form POST of one file to the bucket, after the key template and the
/// hook, and records it for [`confirm`] before handing it out.
async fn form_post(
    state: &AppState,
    direct: &Direct,
    grant: &Grant,
    filename: &str,
    content_type: Option<String>,
    metadata: Metadata,
) -> Result<SignedForm, ApiError> {
    let (key, content_type, metadata) = new_key(
        state,
        grant,
        filename,
        &content_type,
        &metadata,
        UploadKind::DirectPost,
    )
    .await?;
    let max_size = size_limit(state, grant, MAX_PUT_SIZE);
    let expires_at = whole_second_after(SystemTime::now() + direct.settings.expires);
    let pending = confirm::Pending {
        content_type: content_type.clone(),
        metadata: metadata.clone(),
        ..confirm::Pending::new(
            UploadKind::DirectPost,
            confirm::Watched::Key(key.clone()),
            grant.owner(),
            max_size,
            expires_at,
        )
    };
    confirm::record(&state.store, &pending)
        .await
        .map_err(ApiError::Store)?;
    let post = direct
        .signer
        .post(&PostPolicy {
            key: key.clone(),
            content_type,
            metadata: metadata.into_iter().collect(),
            max_size,
            expires_at,
        })
        .await
        .map_err(ApiError::Store)?;
    Ok(SignedForm {
        url: post.url,
        fields: post
            .fields
            .into_iter()
            .map(|(name, value)| (name, Value::String(value)))
            .collect(),
        key,
    })
}

#[derive(Debug, Deserialize)]
pub struct CreateBody {
    filename: String,
    #[serde(rename = "type", default)]
    content_type: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, Value>,
}

/// `POST /s3/multipart`: starts a multipart upload in the bucket.
async fn create_multipart(
    State(state): State<AppState>,
    CallerGrant(grant): CallerGrant,
    body: axum::body::Bytes,
) -> DirectResult<Json<Value>> {
    let direct = direct(&state)?;
    let request: CreateBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "the body must be JSON {{filename, type, metadata}}: {e}"
        ))
    })?;
    let content_type = request.content_type.filter(|t| !t.is_empty());
    let metadata =
        client_metadata::object_metadata(client_metadata::json_metadata(request.metadata))?;
    let (key, content_type, metadata) = new_key(
        &state,
        &grant,
        &request.filename,
        &content_type,
        &metadata,
        UploadKind::DirectMultipart,
    )
    .await?;
    let upload_id = state
        .store
        .create_multipart_upload(CreateMultipartRequest {
            key: key.clone(),
            content_type,
            metadata,
            settings: Default::default(),
            checksum_algorithm: None,
        })
        .await
        .map_err(ApiError::Store)?;
    tracing::info!(key, upload_id, tenant = %grant.tenant, "direct multipart upload started");
    Ok(Json(json!({
        "key": key,
        "uploadId": upload_id,
        "bucket": direct.signer.bucket(),
    })))
}

/// `GET /s3/multipart/{uploadId}/{partNumber}?key=`: a URL to PUT one part to.
async fn sign_part(
    State(state): State<AppState>,
    CallerGrant(grant): CallerGrant,
    Path(PartPath { upload_id, part }): Path<PartPath>,
    Query(query): Query<KeyQuery>,
) -> DirectResult<Json<Value>> {
    let direct = direct(&state)?;
    let key = own_key(&grant, query.key)?;
    let part: u32 = part.parse().map_err(|_| {
        ApiError::BadRequest(format!("part number {part:?} is not 1 to {MAX_PARTS}"))
    })?;
    let url = part_url(&state, direct, &grant, key, upload_id, part).await?;
    Ok(Json(
        json!({ "url": url, "expires": direct.settings.expires.as_secs() }),
    ))
}

/// A URL to PUT part `part` of the caller's upload to: refused beyond the
/// part that the caller's size limit allows, and for an upload id that is not
/// an upload at the caller's key.
async fn part_url(
    state: &AppState,
    direct: &Direct,
    grant: &Grant,
    key: String,
    upload_id: String,
    part: u32,
) -> Result<String, ApiError> {
    if !(1..=MAX_PARTS).contains(&part) {
        return Err(ApiError::BadRequest(format!(
            "part number {part} is not 1 to {MAX_PARTS}"
        )));
    }
    // Every part but the last holds at least 5 MiB: beyond this many parts the
    // object cannot fit the caller's limit.
    let limit = size_limit(state, grant, sluice_store::limits::MAX_OBJECT_SIZE);
    let most_parts = limit.div_ceil(MIN_PART_SIZE).max(1);
    if u64::from(part) > most_parts {
        return Err(ApiError::TooLarge { limit });
    }
    // The signature would name the caller's key with any upload id: the id
    // must be an upload at that key, or it is not the caller's upload.
    state
        .store
        .check_upload(&key, &upload_id)
        .await
        .map_err(upload_gone)?;
    direct
        .signer
        .presign(
            &BucketRequest::UploadPart {
                key,
                upload_id,
                part_number: part,
            },
            direct.settings.expires,
        )
        .await
        .map_err(ApiError::Store)
}

/// `GET /s3/multipart/{uploadId}?key=`: the parts in the bucket, every page.
async fn list_parts(
    State(state): State<AppState>,
    CallerGrant(grant): CallerGrant,
    Path(UploadPath { upload_id }): Path<UploadPath>,
    Query(query): Query<KeyQuery>,
) -> DirectResult<Json<Value>> {
    direct(&state)?;
    let key = own_key(&grant, query.key)?;
    let parts = state
        .store
        .list_parts(&key, &upload_id)
        .await
        .map_err(upload_gone)?;
    Ok(Json(Value::Array(
        parts
            .into_iter()
            .map(|p| json!({ "PartNumber": p.part_number, "ETag": p.etag, "Size": p.size }))
            .collect(),
    )))
}

#[derive(Debug, Deserialize)]
pub struct CompleteBody {
    parts: Vec<ClientPart>,
}

#[derive(Debug, Deserialize)]
pub struct ClientPart {
    #[serde(rename = "ETag")]
    etag: String,
    #[serde(rename = "PartNumber")]
    part_number: u32,
}

/// `POST /s3/multipart/{uploadId}/complete?key=`: joins the parts the client
/// names, once their sizes are checked against the caller's limit; the object
/// then goes through the completion point (`upload.completed`).
async fn complete_multipart(
    State(state): State<AppState>,
    CallerGrant(grant): CallerGrant,
    Path(UploadPath { upload_id }): Path<UploadPath>,
    Query(query): Query<KeyQuery>,
    body: axum::body::Bytes,
) -> DirectResult<Json<Value>> {
    let direct = direct(&state)?;
    let key = own_key(&grant, query.key)?;
    let request: CompleteBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "the body must be JSON {{parts: [{{ETag, PartNumber}}]}}: {e}"
        ))
    })?;
    if request.parts.is_empty() {
        return Err(ApiError::BadRequest("the part list is empty".into()).into());
    }
    let stored = state
        .store
        .list_parts(&key, &upload_id)
        .await
        .map_err(upload_gone)?;
    let mut parts = Vec::with_capacity(request.parts.len());
    for named in &request.parts {
        let found = stored.iter().find(|p| {
            p.part_number == named.part_number
                && p.etag.trim_matches('"') == named.etag.trim_matches('"')
        });
        let Some(found) = found else {
            return Err(ApiError::BadRequest(format!(
                "part {} with ETag {} is not in the upload",
                named.part_number, named.etag
            ))
            .into());
        };
        parts.push(UploadedPart {
            checksum: None,
            ..found.clone()
        });
    }
    parts.sort_by_key(|p| p.part_number);
    parts.dedup_by_key(|p| p.part_number);
    let size: u64 = parts.iter().map(|p| p.size).sum();
    let limit = size_limit(&state, &grant, sluice_store::limits::MAX_OBJECT_SIZE);
    if size > limit {
        if let Err(e) = state.store.abort_multipart_upload(&key, &upload_id).await {
            tracing::warn!(key, upload_id, error = %e, "could not abort an oversized direct upload");
        }
        return Err(ApiError::TooLarge { limit }.into());
    }
    // Through the engine: the completion runs to its end if the browser goes
    // away, and announces the object (its type and metadata as stored).
    let origin = Origin {
        kind: UploadKind::DirectMultipart,
        tenant: grant.owner(),
        upload_id: Some(upload_id.clone()),
        described_by_store: true,
        ..Origin::default()
    };
    state
        .engine
        .complete_multipart(&key, &upload_id, parts, size, Some(Arc::new(origin)))
        .await
        .map_err(|error| match error {
            TransferError::Store { source, .. } => upload_gone(source),
            other => ApiError::from(other),
        })?;
    Ok(Json(json!({
        "location": direct.signer.object_url(&key),
        "key": key,
        "bucket": direct.signer.bucket(),
    })))
}

/// `DELETE /s3/multipart/{uploadId}?key=`: aborts the upload (an upload
/// already gone is not an error).
async fn abort_multipart(
    State(state): State<AppState>,
    CallerGrant(grant): CallerGrant,
    Path(UploadPath { upload_id }): Path<UploadPath>,
    Query(query): Query<KeyQuery>,
) -> DirectResult<Json<Value>> {
    direct(&state)?;
    let key = own_key(&grant, query.key)?;
    match state.store.abort_multipart_upload(&key, &upload_id).await {
        Ok(()) | Err(StoreError::NoSuchUpload { .. }) => Ok(Json(json!({}))),
        Err(e) => Err(ApiError::Store(e).into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiries_round_up_to_a_whole_second() {
        // (since the epoch, rounded)
        let cases = [
            (Duration::from_secs(100), Duration::from_secs(100)),
            (Duration::from_millis(100_001), Duration::from_secs(101)),
            (Duration::from_millis(100_950), Duration::from_secs(101)),
            (
                Duration::from_nanos(100_999_999_999),
                Duration::from_secs(101),
            ),
        ];
        for (at, rounded) in cases {
            assert_eq!(
                whole_second_after(SystemTime::UNIX_EPOCH + at),
                SystemTime::UNIX_EPOCH + rounded,
                "{at:?}"
            );
        }
    }
}
