//! One upload through the engine, as both the PUT and the form routes run it:
//! counted in the metrics from start to end (an upload whose request is dropped
//! midway counts as aborted; the engine aborts its multipart upload). The
//! object it makes is announced by the engine to the completion point, with
//! the origin its begin gave it; [`UploadResponse`] is the client's answer.

use std::time::Instant;

use serde::{Deserialize, Serialize};
use sluice_upload::{UploadOutcome, UploadRequest, UploadSource};

use crate::error::ApiError;
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

/// The answer to a completed upload.
#[derive(Debug, Serialize, Deserialize)]
pub struct UploadResponse {
    pub key: String,
    pub size: u64,
    pub etag: String,
    pub checksum: Option<String>,
    pub parts: u32,
    pub seconds: f64,
}

impl UploadResponse {
    pub fn new(outcome: UploadOutcome, seconds: f64) -> Self {
        UploadResponse {
            key: outcome.key,
            size: outcome.size,
            etag: outcome.etag,
            checksum: outcome.checksum.map(|c| c.to_string()),
            parts: outcome.parts,
            seconds,
        }
    }
}

/// Seconds since `started`, to the millisecond.
pub fn seconds_since(started: Instant) -> f64 {
    (started.elapsed().as_secs_f64() * 1000.0).round() / 1000.0
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
            Ok(UploadResponse::new(outcome, seconds_since(ended.started)))
        }
        Err(error) => {
            ended.outcome = Some("failed");
            tracing::info!(%key, error = %sluice_store::error_chain(&error), "upload failed");
            Err(error.into())
        }
    }
}
