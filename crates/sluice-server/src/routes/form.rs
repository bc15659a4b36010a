//! `POST /v1/objects` with `multipart/form-data` (a browser form, `curl -F`): each
//! file part streams into an object of its own, named by the key template; nothing
//! is buffered whole and nothing touches local disk. If any part fails, the
//! objects already stored from the same form are deleted again.
//!
//! A form is held to `[form]` limits (part header size, number of parts, plain
//! field size): the parser buffers whatever precedes the end of a part's
//! headers, so the bytes fed to it while it looks for one are counted
//! ([`HeaderWindow`]) and a form that goes on past the limit is refused with 400.

use std::io;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use sluice_upload::{UploadRequest, UploadSource};

use crate::admission::Party;
use crate::auth::{Grant, Op};
use crate::begin::{Asked, KeyFrom};
use crate::body::BodyError;
use crate::completion::UploadKind;
use crate::error::ApiError;
use crate::upload::UploadResponse;
use crate::AppState;
use sluice_input::form::HeaderWindow;

#[derive(Debug, Serialize, Deserialize)]
pub struct FormResponse {
    pub objects: Vec<UploadResponse>,
}

pub async fn post_form(
    State(state): State<AppState>,
    grant: Grant,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<FormResponse>), ApiError> {
    grant.check(Op::Put, &grant.generated_key(String::new()))?;
    check_origin(&headers, &state.auth)?;
    let expected = "multipart/form-data with a boundary";
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .ok_or(ApiError::UnsupportedMediaType { expected })?;
    let boundary = multer::parse_boundary(content_type)
        .map_err(|_| ApiError::UnsupportedMediaType { expected })?;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let limit = state.bodies.limit_for(&grant, declared)?;
    let tenant = grant.tenant.clone();
    let _slot = state
        .admission
        .admit(&Party::tenant_only(tenant.clone()))
        .await?;
    let stream = state.bodies.stream(body, limit);
    let limits = state.bodies.form();
    let window = HeaderWindow::default();
    let stream = window.watch(stream, limits.max_header_bytes, |limit| {
        io::Error::other(BodyError::FormHeaderTooLarge { limit })
    });
    let mut form = multer::Multipart::new(stream, boundary);
    let mut stored: Vec<UploadResponse> = Vec::new();
    let result = async {
        let mut parts = 0usize;
        loop {
            window.open();
            let next = form.next_field().await;
            window.close();
            let Some(mut field) = next.map_err(form_error)? else {
                break;
            };
            parts += 1;
            if parts > limits.max_parts {
                return Err(ApiError::Malformed(format!(
                    "the form has more than {} parts",
                    limits.max_parts
                )));
            }
            // Plain form fields carry no file: read within their limit and dropped.
            let Some(filename) = field.file_name().map(str::to_string) else {
                let mut length = 0u64;
                while let Some(chunk) = field.chunk().await.map_err(form_error)? {
                    length += chunk.len() as u64;
                    if length > limits.max_field_bytes {
                        return Err(ApiError::Malformed(format!(
                            "a form field is longer than {} bytes",
                            limits.max_field_bytes
                        )));
                    }
                }
                continue;
            };
            let content_type = field.content_type().map(|m| m.to_string());
            let begun = state
                .begin
                .begin(
                    &grant,
                    Asked {
                        kind: UploadKind::Form,
                        key: KeyFrom::Template {
                            filename: filename.clone(),
                            id: uuid::Uuid::new_v4(),
                        },
                        size: None,
                        content_type,
                        metadata: Default::default(),
                        filename: Some(filename),
                        ask_hook: true,
                    },
                )
                .await?;
            let request = UploadRequest {
                key: begun.key,
                content_type: begun.content_type,
                metadata: begun.metadata,
                origin: Some(begun.origin),
                ..UploadRequest::default()
            };
            let stream = field.map_err(std::io::Error::other).boxed();
            let source = UploadSource::Stream {
                stream,
                length: None,
            };
            stored.push(crate::upload::run(&state, request, source).await?);
        }
        Ok::<_, ApiError>(())
    }
    .await;
    match result {
        Ok(()) if stored.is_empty() => {
            Err(ApiError::BadRequest("the form holds no file part".into()))
        }
        Ok(()) => Ok((StatusCode::CREATED, Json(FormResponse { objects: stored }))),
        Err(error) => {
            for object in &stored {
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
    ApiError::Malformed(format!("malformed multipart/form-data: {error}"))
}

/// Refuses a form posted by a page of another site (cross-site request
/// forgery: a browser sends such a form without asking, with the user's
/// cookies) unless its origin is allowed (the CORS origins, `*` for any). A
/// form from the gateway's own origin, or from no browser (no `Origin`),
/// passes.
fn check_origin(headers: &HeaderMap, auth: &crate::auth::Authenticator) -> Result<(), ApiError> {
    if auth.origin_allowed(headers) {
        return Ok(());
    }
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|o| o.to_str().ok())
        .unwrap_or("");
    Err(ApiError::Forbidden(format!(
        "forms from {origin:?} are not accepted (cross-site); allow the origin with --cors-origin"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cross_site_forms_are_refused_unless_allowed() {
        let settings = crate::auth::AuthSettings::default();
        let allowed =
            crate::auth::Authenticator::new(&settings, &["https://app.example".to_string()])
                .unwrap();
        // (Origin, Host, accepted)
        let cases = [
            (None, "gw.example", true),
            (Some("https://gw.example"), "gw.example", true),
            (Some("http://gw.example:8080"), "gw.example:8080", true),
            (Some("https://app.example"), "gw.example", true),
            (Some("https://evil.example"), "gw.example", false),
            (Some("null"), "gw.example", false),
            (Some("https://gw.example.evil"), "gw.example", false),
        ];
        for (origin, host, accepted) in cases {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, host.parse().unwrap());
            if let Some(origin) = origin {
                headers.insert(header::ORIGIN, origin.parse().unwrap());
            }
            assert_eq!(
                check_origin(&headers, &allowed).is_ok(),
                accepted,
                "{origin:?} on {host}"
            );
        }
        let mut headers = HeaderMap::new();
        headers.insert(header::ORIGIN, "https://evil.example".parse().unwrap());
        let any = crate::auth::Authenticator::new(&settings, &["*".to_string()]).unwrap();
        assert!(check_origin(&headers, &any).is_ok());
    }
}
