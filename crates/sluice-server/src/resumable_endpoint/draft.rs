//! The IETF draft "Resumable Uploads for HTTP" on the resumable endpoint, as a
//! thin adapter like tus's: requests are parsed by `sluice-rufh` for the
//! interop version they name, acted on by `sluice-resumable` over the same
//! uploads, locks and completion as tus (an object a request makes is announced
//! by the engine), and refused with the draft's problem documents.
//!
//! Creation is any POST, PUT or PATCH on `/v1/tus/` that says whether its body
//! completes the upload (`Upload-Complete`, interop 3's `Upload-Incomplete`);
//! an upload's URL takes HEAD (and GET) for its offset, PATCH to append, DELETE
//! to cancel, OPTIONS for the limits. No 104 (Upload Resumption Supported) is
//! sent: hyper's server cannot send an interim response (docs/RESUMABLE.md
//! says which clients resume all the same).

use std::time::{Instant, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sluice_resumable::{
    DigestAlgorithm, Protocol, ResumableError, UploadRecord, WantedDigest, Written,
};
use sluice_rufh::answer::{self, Limits, UploadState};
use sluice_rufh::fields::{ByteMember, FieldError};
use sluice_rufh::request::{self, Append, Creation};
use sluice_rufh::{DraftError, Interop};
use sluice_tus::headers::PatchRequest;
use sluice_tus::{Metadata, TusError};
use sluice_upload::UploadKind;

use super::{
    begin_upload, chunk_of, max_size, pace_small_writes, visible, with_key, Creating, BASE_PATH,
};
use crate::admission::Party;
use crate::auth::Grant;
use crate::error::{ApiError, ProblemApiError};
use crate::upload::{seconds_since, UploadResponse};
use crate::AppState;

/// Why a request of the draft was not served: one of the draft's refusals
/// (a problem document), or the gateway's own (auth, admission, the store).
enum Failure {
    Draft(DraftError),
    Api(ApiError),
}

impl From<DraftError> for Failure {
    fn from(e: DraftError) -> Self {
        Failure::Draft(e)
    }
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Failure::Api(e)
    }
}

impl From<TusError> for Failure {
    /// The upload model's refusals the draft has words for.
    fn from(e: TusError) -> Self {
        match e {
            TusError::OffsetMismatch { expected, given } => {
                Failure::Draft(DraftError::MismatchingOffset {
                    expected,
                    provided: given,
                })
            }
            TusError::InconsistentLength { length, reached } => {
                Failure::Draft(DraftError::InconsistentLength {
                    detail: format!(
                        "the upload's length is {length} but this request ends it at {reached}"
                    ),
                })
            }
            TusError::LengthAlreadySet => Failure::Draft(DraftError::InconsistentLength {
                detail: "the upload's length is already set to another value".into(),
            }),
            TusError::BeyondLength { length } => Failure::Draft(DraftError::InconsistentLength {
                detail: format!("the body runs past the upload's length of {length} bytes"),
            }),
            other => Failure::Api(ApiError::Tus(other)),
        }
    }
}

impl From<ResumableError> for Failure {
    fn from(e: ResumableError) -> Self {
        match e {
            ResumableError::Protocol(tus) => tus.into(),
            other => Failure::Api(other.into()),
        }
    }
}

/// A refusal as the draft answers it: a problem document (the draft's type,
/// or `about:blank` with the gateway's code), the version echoed, and, from
/// interop 7 on, that the upload did not complete.
pub(super) fn refused(interop: Option<Interop>, refusal: DraftError) -> Response {
    answer_failure(interop, Failure::Draft(refusal))
}

/// The gateway's own refusal (no token, a bad one) as the draft answers it.
pub(super) fn refused_by_gateway(interop: Interop, error: ApiError) -> Response {
    answer_failure(Some(interop), Failure::Api(error))
}

fn answer_failure(interop: Option<Interop>, failure: Failure) -> Response {
    // From interop 7 on, an answer to a request that did not complete the
    // upload says so; a refusal because it is complete does not.
    let says_incomplete = interop.is_some_and(|i| i.number() >= 7)
        && !matches!(failure, Failure::Draft(DraftError::CompletedUpload { .. }));
    let mut response = match failure {
        Failure::Draft(refusal) => {
            let mut response = (refusal.status(), Json(refusal.problem())).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            );
            response.headers_mut().extend(refusal.headers());
            response
        }
        Failure::Api(error) => ProblemApiError(error).into_response(),
    };
    // The version is echoed; a request whose version is unknown is told the
    // newest one served (as Apple's server does), and not taken for tus's.
    let headers = response.headers_mut();
    headers.extend([answer::version(interop.unwrap_or(Interop::LATEST))]);
    if let (Some(interop), true) = (interop, says_incomplete) {
        headers.extend([answer::completion(interop, false)]);
    }
    response
}

fn answered(interop: Interop, result: Result<Response, Failure>) -> Response {
    result.unwrap_or_else(|failure| answer_failure(Some(interop), failure))
}

/// The creation URL: a creation (POST, PUT or PATCH saying whether it
/// completes), OPTIONS.
pub(super) async fn on_base(
    state: AppState,
    grant: Grant,
    interop: Interop,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let result = match method {
        Method::OPTIONS => Ok(capabilities(&state, &grant, interop)),
        Method::POST | Method::PUT | Method::PATCH if request::is_creation(&headers) => {
            create(state, grant, interop, headers, body).await
        }
        Method::POST | Method::PUT | Method::PATCH => {
            Err(DraftError::Missing(match interop.inverted_completion() {
                true => "Upload-Incomplete",
                false => "Upload-Complete",
            })
            .into())
        }
        _ => Ok(not_allowed(interop, "OPTIONS, POST, PUT, PATCH")),
    };
    answered(interop, result)
}

/// An upload's URL: HEAD (or GET), PATCH, DELETE, OPTIONS; POST with
/// X-HTTP-Method-Override as for tus.
pub(super) async fn on_upload(
    state: AppState,
    id: String,
    grant: Grant,
    interop: Interop,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let method = match sluice_tus::headers::effective_method(&method, &headers) {
        Ok(method) => method,
        Err(e) => return answer_failure(Some(interop), e.into()),
    };
    let result = match method {
        Method::HEAD | Method::GET => offset(state, id, grant, interop, headers).await,
        Method::PATCH => append(state, id, grant, interop, headers, body).await,
        Method::DELETE => cancel(state, id, grant, interop, headers).await,
        Method::OPTIONS => Ok(capabilities(&state, &grant, interop)),
        _ => Ok(not_allowed(interop, "HEAD, GET, PATCH, DELETE, OPTIONS")),
    };
    answered(interop, result)
}

fn not_allowed(interop: Interop, allow: &'static str) -> Response {
    let mut response = (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, allow)]).into_response();
    response.headers_mut().extend([answer::version(interop)]);
    response
}

fn new_upload_limits(state: &AppState, grant: &Grant) -> Limits {
    Limits {
        max_size: max_size(state, grant),
        lifetime_seconds: state.resumable.config().expiry.as_secs(),
    }
}

fn upload_limits(state: &AppState, grant: &Grant, record: &UploadRecord) -> Limits {
    let now = state
        .resumable
        .clock()
        .now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Limits {
        max_size: max_size(state, grant),
        lifetime_seconds: record.upload.expires.saturating_sub(now),
    }
}

fn capabilities(state: &AppState, grant: &Grant, interop: Interop) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().extend(answer::capabilities(
        interop,
        new_upload_limits(state, grant),
    ));
    response
}

fn state_of(record: &UploadRecord) -> UploadState {
    UploadState {
        offset: record.upload.offset,
        length: record.upload.length,
        complete: record.is_finished(),
    }
}

/// The answer to a request after which the upload is `written`: 201 with the
/// object (as `PUT /v1/objects` describes it) when the request completed it,
/// else `status` with the upload's state. A creation's answer names the upload.
fn written_answer(
    state: &AppState,
    grant: &Grant,
    interop: Interop,
    written: &Written,
    status: StatusCode,
    created: bool,
    started: Instant,
) -> Response {
    let record = &written.record;
    let mut response = match &written.finished {
        Some(outcome) => (
            StatusCode::CREATED,
            Json(UploadResponse::new(outcome.clone(), seconds_since(started))),
        )
            .into_response(),
        None => status.into_response(),
    };
    let headers = response.headers_mut();
    if created || written.finished.is_some() {
        let location =
            HeaderValue::from_str(&format!("{BASE_PATH}{}", record.id())).expect("ids are hex");
        headers.insert(header::LOCATION, location);
    }
    let upload_headers = answer::state(
        interop,
        state_of(record),
        upload_limits(state, grant, record),
    );
    headers.extend(with_key(upload_headers, record));
    // The digest the object was checked against, once it is made.
    if let (Some(_), Some(digesting)) = (&written.finished, &record.digest) {
        let value = format!(
            "{}=:{}:",
            digesting.algorithm.name(),
            digesting.wanted_base64()
        );
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(sluice_rufh::REPR_DIGEST, value);
        }
    }
    response
}

/// The digest to check the upload against: `Repr-Digest`'s SHA-256, else its
/// CRC32C (other algorithms are not checked, as RFC 9530 lets a recipient do).
fn wanted_digest(members: &[ByteMember]) -> Result<Option<WantedDigest>, Failure> {
    for algorithm in [DigestAlgorithm::Sha256, DigestAlgorithm::Crc32c] {
        let Some((_, value)) = members.iter().find(|(name, _)| name == algorithm.name()) else {
            continue;
        };
        let invalid = |given: String| {
            Err(DraftError::Field(FieldError::Invalid {
                name: sluice_rufh::REPR_DIGEST,
                expected: "a 32-byte sha-256 or a 4-byte crc32c digest, as a byte sequence",
                given,
            })
            .into())
        };
        let Some(value) = value else {
            return invalid(format!("{} that is no byte sequence", algorithm.name()));
        };
        return match WantedDigest::new(algorithm, value.clone()) {
            Some(wanted) => Ok(Some(wanted)),
            None => invalid(format!("{} bytes of {}", value.len(), algorithm.name())),
        };
    }
    Ok(None)
}

/// Upload-Metadata (tus-js-client sends it in the draft's mode too), with the
/// file name of Content-Disposition and the representation's type.
fn metadata_of(headers: &HeaderMap, creation: &Creation) -> Result<Metadata, Failure> {
    let mut metadata = match headers.get(sluice_tus::headers::UPLOAD_METADATA) {
        Some(value) => {
            let text = value
                .to_str()
                .map_err(|_| TusError::InvalidMetadata("not ASCII".into()))?;
            Metadata::parse(text)?
        }
        None => Metadata::default(),
    };
    for (key, value) in [
        ("filename", &creation.filename),
        ("filetype", &creation.content_type),
    ] {
        if let Some(value) = value {
            metadata
                .0
                .entry(key.to_owned())
                .or_insert_with(|| Some(value.clone().into_bytes()));
        }
    }
    Ok(metadata)
}

async fn create(
    state: AppState,
    grant: Grant,
    interop: Interop,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Failure> {
    let started = Instant::now();
    let creation = Creation::from_headers(&headers, interop)?;
    let max = max_size(&state, &grant);
    if creation.length.is_some_and(|length| length > max) {
        return Err(TusError::TooLarge { max }.into());
    }
    if grant.max_size.is_some() && creation.length.is_none() {
        return Err(ApiError::Forbidden(
            "a token with max_size needs the length up front (Upload-Length)".into(),
        )
        .into());
    }
    let digest = wanted_digest(&creation.digests)?;
    let creating = Creating {
        kind: UploadKind::ResumableCreation,
        protocol: Protocol::IetfDraft,
        length: creation.length,
        metadata: metadata_of(&headers, &creation)?,
        partial: false,
        digest,
    };
    let (new, party) = begin_upload(&state, &grant, creating).await?;
    // An empty careful creation moves no bytes; anything else waits its turn.
    let has_body = creation.complete || creation.body_length != Some(0);
    let _slot = match has_body {
        true => Some(state.admission.admit(&party).await?),
        false => None,
    };
    let chunk =
        has_body.then(|| chunk_of(&state, body, creation.body_length, None, creation.complete));
    let written = state.resumable.create(new, chunk).await?;
    Ok(written_answer(
        &state,
        &grant,
        interop,
        &written,
        StatusCode::CREATED,
        true,
        started,
    ))
}

async fn offset(
    state: AppState,
    id: String,
    grant: Grant,
    interop: Interop,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    request::check_bare(&headers)?;
    let record = visible(&state, &grant, &id, Protocol::IetfDraft).await?;
    // A request still writing is ended first, so that the offset answered is
    // the one the next append must name.
    let record = match record.is_finished() {
        true => record,
        false => state.resumable.settled_status(&id).await?,
    };
    let mut response = StatusCode::NO_CONTENT.into_response();
    let upload_headers = answer::state(
        interop,
        state_of(&record),
        upload_limits(&state, &grant, &record),
    );
    let headers = response.headers_mut();
    headers.extend(with_key(upload_headers, &record));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(response)
}

async fn append(
    state: AppState,
    id: String,
    grant: Grant,
    interop: Interop,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, Failure> {
    let started = Instant::now();
    let append = Append::from_headers(&headers, interop)?;
    let record = visible(&state, &grant, &id, Protocol::IetfDraft).await?;
    if record.is_finished() {
        return Err(interop
            .completed_upload(append.body_length == Some(0))
            .into());
    }
    let party = Party::tenant_only(grant.tenant.clone());
    let slot = state.admission.admit(&party).await?;
    let patch = PatchRequest {
        offset: append.offset,
        body_length: append.body_length,
        length: append.length,
        checksum: None,
    };
    let chunk = chunk_of(&state, body, append.body_length, None, append.complete);
    let written = state
        .resumable
        .write(&id, Protocol::IetfDraft, &patch, chunk)
        .await;
    drop(slot);
    pace_small_writes(&state, &id, append.offset, &written).await;
    Ok(written_answer(
        &state,
        &grant,
        interop,
        &written?,
        interop.append_status(),
        false,
        started,
    ))
}

async fn cancel(
    state: AppState,
    id: String,
    grant: Grant,
    interop: Interop,
    headers: HeaderMap,
) -> Result<Response, Failure> {
    request::check_bare(&headers)?;
    visible(&state, &grant, &id, Protocol::IetfDraft).await?;
    // Its event is in the outbox before anything is removed (see tus.rs).
    let completion = state.completion.clone();
    state
        .resumable
        .cancel(&id, |record| async move {
            if record.is_finished() {
                return Ok(());
            }
            completion.terminated(&record).await
        })
        .await?;
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().extend([answer::version(interop)]);
    Ok(response)
}
