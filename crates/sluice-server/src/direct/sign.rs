//! `POST /s3/sign`: the route behind Uppy 6's `signRequest` mode. Uppy hands
//! the app one request at a time (`{method, key, uploadId, partNumber,
//! contentType}`), the app posts it here with the user's token, and hands back
//! what this answers (`{url, key, fields, headers}`):
//!
//! | request | needs | answer |
//! | --- | --- | --- |
//! | `PUT` (PutObject) | `put` | a form POST (`fields`) whose policy pins the key the template made, the type and the size range; `key` |
//! | `POST` (CreateMultipartUpload) | `put` | a URL, and `key`: the key the template made; with a type (asked with `contentType`, or set by the pre-create hook) the URL is signed for it and `headers` carry it |
//! | `PUT` + `uploadId` + `partNumber` | `resume` | a URL for that part of the caller's upload |
//! | `GET` + `uploadId` (ListParts) | `resume` | a URL |
//! | `POST` + `uploadId` (CompleteMultipartUpload) | `resume` | a URL; the object is then looked for ([`super::confirm`]) |
//! | `DELETE` + `uploadId` (AbortMultipartUpload) | `resume` | a URL |
//!
//! Keys of existing uploads must be the caller's (404 otherwise, as for
//! Companion's routes); the key Uppy proposes for a new upload is taken as the
//! file's name for the key template. Deleting objects is not signed.

use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sluice_store::limits::MAX_OBJECT_SIZE;
use sluice_store::{BucketRequest, Metadata};
use sluice_upload::UploadKind;

use super::confirm::{self, Pending, Watched};
use super::{direct, form_post, new_key, own_key, part_url, size_limit, upload_gone};
use super::{CallerGrant, DirectResult};
use crate::error::ApiError;
use crate::AppState;

/// One request Uppy wants signed (`PresignableRequest`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToSign {
    method: String,
    key: String,
    #[serde(default)]
    upload_id: Option<String>,
    #[serde(default)]
    part_number: Option<u32>,
    #[serde(default)]
    content_type: Option<String>,
    /// Seconds; at most `direct.expires`.
    #[serde(default)]
    expires_in: Option<u64>,
}

pub async fn sign(
    State(state): State<AppState>,
    CallerGrant(grant): CallerGrant,
    body: axum::body::Bytes,
) -> DirectResult<Json<Value>> {
    let direct = direct(&state)?;
    let request: ToSign = serde_json::from_slice(&body).map_err(|e| {
        ApiError::BadRequest(format!(
            "the body must be JSON {{method, key, uploadId, partNumber, contentType}}: {e}"
        ))
    })?;
    let expires = request.expires_in.map_or(direct.settings.expires, |s| {
        Duration::from_secs(s.max(1)).min(direct.settings.expires)
    });
    let content_type = request.content_type.filter(|t| !t.is_empty());
    // Signed as a header value for a multipart creation: it must be one.
    if let Some(bad) = content_type
        .as_deref()
        .filter(|t| http::HeaderValue::from_str(t).is_err())
    {
        return Err(ApiError::BadRequest(format!(
            "contentType {bad:?} is not a header value (visible ASCII and spaces)"
        ))
        .into());
    }
    let presign = |bucket_request: BucketRequest| async move {
        direct
            .signer
            .presign(&bucket_request, expires)
            .await
            .map_err(ApiError::Store)
    };
    let answer = match (
        request.method.as_str(),
        request.upload_id,
        request.part_number,
    ) {
        ("PUT", None, None) => {
            let signed = form_post(
                &state,
                direct,
                &grant,
                &request.key,
                content_type,
                Metadata::new(),
            )
            .await?;
            json!({ "url": signed.url, "fields": signed.fields, "key": signed.key })
        }
        ("POST", None, None) => {
            let (key, content_type, _) = new_key(
                &state,
                &grant,
                &request.key,
                &content_type,
                &Metadata::new(),
                UploadKind::DirectMultipart,
            )
            .await?;
            // The type asked for, or the one the hook set, is signed: the
            // bucket refuses the URL with another, and Uppy sends the
            // answer's headers after its own.
            let url = presign(BucketRequest::CreateMultipart {
                key: key.clone(),
                content_type: content_type.clone(),
            })
            .await?;
            match content_type {
                Some(content_type) => {
                    json!({ "url": url, "key": key, "headers": { "content-type": content_type } })
                }
                None => json!({ "url": url, "key": key }),
            }
        }
        ("PUT", Some(upload_id), Some(part)) => {
            let key = own_key(&grant, Some(request.key))?;
            json!({ "url": part_url(&state, direct, &grant, key, upload_id, part).await? })
        }
        ("GET", Some(upload_id), None) => {
            let key = own_key(&grant, Some(request.key))?;
            json!({ "url": presign(BucketRequest::ListParts { key, upload_id }).await? })
        }
        ("POST", Some(upload_id), None) => {
            let key = own_key(&grant, Some(request.key))?;
            state
                .store
                .check_upload(&key, &upload_id)
                .await
                .map_err(upload_gone)?;
            // The bucket completes it: the object is looked for, and checked
            // against the caller's limit, once it shows up. Not by its age (a
            // completed upload's Last-Modified is its initiation on AWS): an
            // object at the key now is not the upload.
            let before = match state.store.head_object(&key).await {
                Ok(object) => Some(object.etag),
                Err(sluice_store::StoreError::NoSuchKey { .. }) => None,
                Err(e) => return Err(ApiError::Store(e).into()),
            };
            let pending = Pending {
                signed_at: 0,
                announced_etag: before,
                ..Pending::new(
                    UploadKind::DirectMultipart,
                    Watched::Key(key.clone()),
                    grant.owner(),
                    size_limit(&state, &grant, MAX_OBJECT_SIZE),
                    SystemTime::now() + expires,
                )
            };
            // One record per upload, however often its completion is signed.
            let name = confirm::upload_record_name(&key, &upload_id);
            confirm::record_as(&state.store, &name, &pending)
                .await
                .map_err(ApiError::Store)?;
            json!({ "url": presign(BucketRequest::Complete { key, upload_id }).await? })
        }
        ("DELETE", Some(upload_id), None) => {
            let key = own_key(&grant, Some(request.key))?;
            json!({ "url": presign(BucketRequest::Abort { key, upload_id }).await? })
        }
        ("DELETE", None, None) => {
            return Err(ApiError::Forbidden(
                "deletions are not signed; delete objects with DELETE /v1/objects/KEY".into(),
            )
            .into())
        }
        (method, upload_id, part) => {
            return Err(ApiError::BadRequest(format!(
                "no S3 request is {method} with{} an uploadId and with{} a partNumber",
                if upload_id.is_some() { "" } else { "out" },
                if part.is_some() { "" } else { "out" },
            ))
            .into())
        }
    };
    Ok(Json(answer))
}
