//! One upload through the engine, as both the PUT and the form routes run it:
//! counted in the metrics from start to end (an upload whose request is dropped
//! midway counts as aborted; the engine aborts its multipart upload). The
//! object it makes is announced by the engine to the completion point, with
//! the origin [`origin`] gives it.

use std::sync::Arc;
use std::time::Instant;

use sluice_upload::{Origin, UploadKind, UploadRequest, UploadSource};

use crate::auth::Grant;
use crate::error::ApiError;
use crate::routes::UploadResponse;
use crate::AppState;

/// Records the end of an upload exactly once, `aborted` unless told otherwise.
struct Ended<'a> {
    state: &'a AppState,
    started: Instant,
    outcome: Option<&'static str>,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        let outcome = self.outcome.unwrap_or("aborted");
        self.state
            .metrics
            .upload_ended(outcome, self.started.elapsed().as_secs_f64());
    }
}

/// The origin of an upload of `kind` by `grant`'s caller into `request`.
pub fn origin(kind: UploadKind, grant: &Grant, request: &UploadRequest) -> Arc<Origin> {
    Arc::new(Origin {
        kind,
        tenant: grant.owner(),
        content_type: request.content_type.clone(),
        metadata: request.metadata.clone(),
        ..Origin::default()
    })
}

/// Streams `source` into `request.key` (its origin set: the object is announced).
pub async fn run(
    state: &AppState,
    request: UploadRequest,
    source: UploadSource,
) -> Result<UploadResponse, ApiError> {
    debug_assert!(request.origin.is_some(), "a gateway upload has an origin");
    state.metrics.upload_started();
    let mut ended = Ended {
        state,
        started: Instant::now(),
        outcome: None,
    };
    let key = request.key.clone();
    match state.engine.upload(request, source).await {
        Ok(outcome) => {
            ended.outcome = Some("completed");
            Ok(UploadResponse::new(
                outcome,
                crate::routes::seconds_since(ended.started),
            ))
        }
        Err(error) => {
            ended.outcome = Some("failed");
            tracing::info!(%key, error = %sluice_store::error_chain(&error), "upload failed");
            Err(error.into())
        }
    }
}
