//! tus 1.0 on the resumable endpoint, as a thin adapter: requests are parsed and
//! checked by `sluice-tus`, acted on by `sluice-resumable` (state in the store,
//! locks, chunk writes, concatenation), errors mapped in
//! [`crate::conversions`]; an object a request makes is announced by the engine
//! (the upload's record gives its origin). A HEAD only reads.

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use sluice_resumable::{Protocol, UploadRecord};
use sluice_tus::headers::{self as tus_headers, ConcatRequest, CreateRequest, PatchRequest};
use sluice_tus::{Concat, TusError};
use sluice_upload::UploadKind;

use super::{
    begin_upload, chunk_of, max_size, object_key, pace_small_writes, visible, with_key, Creating,
    BASE_PATH,
};
use crate::admission::Party;
use crate::auth::Grant;
use crate::error::ApiError;
use crate::AppState;

/// Every tus answer carries Tus-Resumable, errors included; the draft's
/// answers (they name their interop version) do not.
pub(super) async fn with_tus_resumable(mut response: Response) -> Response {
    if !response
        .headers()
        .contains_key(sluice_rufh::INTEROP_VERSION)
    {
        let (name, value) = tus_headers::resumable();
        response.headers_mut().insert(name, value);
    }
    response
}

fn capabilities(state: &AppState) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    response
        .headers_mut()
        .extend(tus_headers::capabilities(state.resumable.config().max_size));
    response
}

/// The creation URL: OPTIONS and POST.
pub(super) async fn on_base(
    state: AppState,
    grant: Grant,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    match method {
        Method::OPTIONS => Ok(capabilities(&state)),
        Method::POST => create(state, grant, headers, body).await,
        _ => Ok((
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "OPTIONS, POST")],
        )
            .into_response()),
    }
}

/// An upload's URL, by method, X-HTTP-Method-Override honoured on POST.
pub(super) async fn on_upload(
    state: AppState,
    id: String,
    grant: Grant,
    method: Method,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    match tus_headers::effective_method(&method, &headers)? {
        Method::HEAD | Method::GET => head(state, id, grant, headers).await,
        Method::PATCH => patch(state, id, grant, headers, body).await,
        Method::DELETE => terminate(state, id, grant, headers).await,
        Method::OPTIONS => Ok(capabilities(&state)),
        _ => Ok((
            StatusCode::METHOD_NOT_ALLOWED,
            [(header::ALLOW, "HEAD, PATCH, DELETE, OPTIONS")],
        )
            .into_response()),
    }
}

async fn create(
    state: AppState,
    grant: Grant,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let resumable = &state.resumable;
    let request = CreateRequest::from_headers(&headers, max_size(&state, &grant))?;
    if grant.max_size.is_some() && request.length.is_none() && request.concat.is_none() {
        return Err(ApiError::Forbidden(
            "a token with max_size needs the length up front (Upload-Length)".into(),
        ));
    }
    let partial = request.concat == Some(ConcatRequest::Partial);
    let kind = match request.concat {
        Some(ConcatRequest::Final(_)) => UploadKind::TusConcatenation,
        _ => UploadKind::TusCreation,
    };
    let creating = Creating {
        kind,
        protocol: Protocol::Tus,
        length: request.length,
        metadata: request.metadata,
        partial,
        digest: None,
    };
    let (new, party) = begin_upload(&state, &grant, creating).await?;
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
        .then(|| chunk_of(&state, body, request.body_length, request.checksum, false));
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
    let record = visible(&state, &grant, &id, Protocol::Tus).await?;
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
    let chunk = chunk_of(
        &state,
        body,
        request.body_length,
        request.checksum.clone(),
        false,
    );
    let written = state
        .resumable
        .write(&id, Protocol::Tus, &request, chunk)
        .await;
    drop(slot);
    pace_small_writes(&state, &id, request.offset, &written).await;
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
    visible(&state, &grant, &id, Protocol::Tus).await?;
    // Its event is in the outbox before anything is removed: a failed write
    // removes nothing, and the client's retry records the same event.
    let completion = state.completion.clone();
    state
        .resumable
        .terminate(&id, |record| async move {
            if record.is_finished() || record.upload.concat == Concat::Partial {
                return Ok(());
            }
            completion.terminated(&record).await
        })
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
