//! One upload through the engine, as both the PUT and the form routes run it:
//! counted in the metrics from start to end (an upload whose request is dropped
//! midway counts as aborted; the engine aborts its multipart upload).

use std::time::Instant;

use sluice_upload::{UploadRequest, UploadSource};

use crate::error::{from_transfer, ApiError};
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

/// Streams `source` into `request.key`.
pub async fn run(
    state: &AppState,
    request: UploadRequest,
    source: UploadSource,
) -> Result<UploadResponse, ApiError> {
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
            tracing::info!(%key, size = outcome.size, parts = outcome.parts, "upload stored");
            Ok(UploadResponse::new(
                outcome,
                crate::routes::seconds_since(ended.started),
            ))
        }
        Err(error) => {
            ended.outcome = Some("failed");
            tracing::info!(%key, error = %sluice_store::error_chain(&error), "upload failed");
            Err(from_transfer(error))
        }
    }
}
