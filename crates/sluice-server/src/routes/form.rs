//! `POST /v1/objects` with `multipart/form-data` (a browser form, `curl -F`): each
//! file part streams into an object of its own, named by the key template; nothing
//! is buffered whole and nothing touches local disk. If any part fails, the
//! objects already stored from the same form are deleted again.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use sluice_upload::{UploadRequest, UploadSource};

use crate::body::{limited_stream, BodyError};
use crate::completion::{Completion, UploadKind};
use crate::error::ApiError;
use crate::keys::KeyInputs;
use crate::routes::UploadResponse;
use crate::AppState;

#[derive(Debug, Serialize, Deserialize)]
pub struct FormResponse {
    pub objects: Vec<UploadResponse>,
}

pub async fn post_form(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<FormResponse>), ApiError> {
    let expected = "multipart/form-data with a boundary";
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .ok_or(ApiError::UnsupportedMediaType { expected })?;
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| ApiError::UnsupportedMediaType { expected })?;
    let limit = state.config.max_upload_size;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let (Some(length), Some(limit)) = (declared, limit) {
        if length > limit {
            return Err(ApiError::TooLarge { limit });
        }
    }
    let tenant = crate::keys::tenant(&headers);
    let _slot = state.admission.admit().await?;
    let stream = limited_stream(
        body,
        limit,
        state.config.limits.body_idle_timeout,
        state.metrics.clone(),
    );
    let mut form = multer::Multipart::new(stream, boundary);
    let mut stored: Vec<(UploadResponse, Completion)> = Vec::new();
    let result = async {
        while let Some(field) = form.next_field().await.map_err(form_error)? {
            // Plain form fields carry no file; they are skipped.
            let Some(filename) = field.file_name().map(str::to_string) else {
                continue;
            };
            let content_type = field.content_type().map(|m| m.to_string());
            let key = state.template.render(&KeyInputs {
                tenant: &tenant,
                filename: &filename,
                now: time::OffsetDateTime::now_utc(),
                uuid: uuid::Uuid::new_v4(),
            });
            let request = UploadRequest {
                key,
                content_type,
                ..UploadRequest::default()
            };
            let stream = field.map_err(std::io::Error::other).boxed();
            let source = UploadSource::Stream {
                stream,
                length: None,
            };
            stored.push(crate::upload::run(&state, UploadKind::Form, request, source).await?);
        }
        Ok::<_, ApiError>(())
    }
    .await;
    match result {
        Ok(()) if stored.is_empty() => {
            Err(ApiError::BadRequest("the form holds no file part".into()))
        }
        Ok(()) => {
            let mut objects = Vec::with_capacity(stored.len());
            for (response, completion) in stored {
                crate::completion::complete(&state.metrics, &completion);
                objects.push(response);
            }
            Ok((StatusCode::CREATED, Json(FormResponse { objects })))
        }
        Err(error) => {
            for (object, _) in &stored {
                if let Err(e) = state.store.delete_object(&object.key).await {
                    tracing::warn!(key = %object.key, error = %e, "could not delete an object of a failed form upload");
                }
            }
            Err(error)
        }
    }
}

fn form_error(error: multer::Error) -> ApiError {
    if let Some(body) = BodyError::find(&error) {
        return body.into();
    }
    ApiError::BadRequest(format!("malformed multipart/form-data: {error}"))
}
