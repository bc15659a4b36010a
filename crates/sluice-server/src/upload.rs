//! One upload through the engine, as both the PUT and the form routes run it:
//! counted in the metrics from start to end (an upload whose request is dropped
//! midway counts as aborted; the engine aborts its multipart upload). The
//! caller hands the returned [`Completion`] to the completion point once the
//! object is there to stay (a form's objects only when the whole form is in).

use std::time::Instant;

use sluice_upload::{UploadRequest, UploadSource};

use crate::completion::{Completion, UploadKind};
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

/// Streams `source` into `request.key`; `kind` says which route it came by.
pub async fn run(
    state: &AppState,
    kind: UploadKind,
    request: UploadRequest,
    source: UploadSource,
) -> Result<(UploadResponse, Completion), ApiError> {
    state.metrics.upload_started();
    let mut ended = Ended {
        state,
        started: Instant::now(),
        outcome: None,
    };
    let content_type = request.content_type.clone();
    let metadata = request.metadata.clone();
    let key = request.key.clone();
    match state.engine.upload(request, source).await {
        Ok(outcome) => {
            ended.outcome = Some("completed");
            let completion = Completion {
                content_type,
                metadata,
                ..Completion::new(kind, &outcome)
            };
            let response =
                UploadResponse::new(outcome, crate::routes::seconds_since(ended.started));
            Ok((response, completion))
        }
        Err(error) => {
            ended.outcome = Some("failed");
            tracing::info!(%key, error = %sluice_store::error_chain(&error), "upload failed");
            Err(error.into())
        }
    }
}
