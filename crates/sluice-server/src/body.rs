//! Request bodies as the engine reads them: a stream of chunks that enforces the
//! route's own byte limit and idle timeout (axum's body limit does not apply to
//! streamed bodies), and counts bytes received.

use std::io;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};

use crate::error::ApiError;
use crate::metrics::Metrics;

/// Why a body stopped; carried inside the `io::Error` the engine sees.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BodyError {
    #[error("the body is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("no data for {seconds} s")]
    Idle { seconds: u64 },
    #[error("the client connection failed")]
    Client,
}

impl BodyError {
    /// Finds a `BodyError` anywhere in an error chain (inside `io::Error`s and
    /// the form parser's errors).
    pub fn find(error: &(dyn std::error::Error + 'static)) -> Option<BodyError> {
        let mut current = Some(error);
        while let Some(e) = current {
            if let Some(found) = e.downcast_ref::<BodyError>() {
                return Some(found.clone());
            }
            if let Some(inner) = e.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
                if let Some(found) = BodyError::find(inner) {
                    return Some(found);
                }
            }
            current = e.source();
        }
        None
    }
}

/// The body as a stream of chunks, failing once more than `limit` bytes arrive
/// or when no chunk arrives for `idle`.
pub fn limited_stream(
    body: Body,
    limit: Option<u64>,
    idle: Duration,
    metrics: Metrics,
) -> BoxStream<'static, io::Result<Bytes>> {
    let state = (body.into_data_stream(), 0u64, false);
    futures::stream::unfold(state, move |(mut data, mut seen, failed)| {
        let metrics = metrics.clone();
        async move {
            if failed {
                return None;
            }
            let fail = |e: BodyError| {
                Some((
                    Err(io::Error::other(e)),
                    (Body::empty().into_data_stream(), 0, true),
                ))
            };
            match tokio::time::timeout(idle, data.next()).await {
                Err(_) => fail(BodyError::Idle {
                    seconds: idle.as_secs(),
                }),
                Ok(None) => None,
                Ok(Some(Err(_))) => fail(BodyError::Client),
                Ok(Some(Ok(chunk))) => {
                    seen += chunk.len() as u64;
                    metrics.bytes_received(chunk.len() as u64);
                    match limit {
                        Some(limit) if seen > limit => fail(BodyError::TooLarge { limit }),
                        _ => Some((Ok(chunk), (data, seen, false))),
                    }
                }
            }
        }
    })
    .boxed()
}

/// The request's Content-Length, if it sent one; 400 when it is not a number.
pub fn content_length(headers: &axum::http::HeaderMap) -> Result<Option<u64>, ApiError> {
    match headers.get(axum::http::header::CONTENT_LENGTH) {
        None => Ok(None),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or_else(|| ApiError::BadRequest("Content-Length is not a number".into())),
    }
}
