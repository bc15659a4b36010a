//! Request bodies as the engine reads them: a stream of chunks that enforces the
//! route's own byte limit, an idle timeout and a minimum data rate (axum's body
//! limit does not apply to streamed bodies), and counts bytes received.
//! [`Bodies`] is the service handlers take bodies through, built once with the
//! settings that govern them.
//!
//! The rate is Apache mod_reqtimeout's `MinRate` idea, counted over the time
//! spent waiting for the client only: while the gateway itself does not read
//! (waiting for memory, for the store), the client is not slow.

use std::io;
use std::time::Duration;

use tokio::time::Instant;

use axum::body::Body;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};

use crate::error::ApiError;
use crate::metrics::Metrics;

/// How bodies flow, for every route: the largest upload, the pace request
/// bodies must keep, the limits of forms, the deadline of download bodies.
#[derive(Clone)]
pub struct Bodies {
    max_upload_size: Option<u64>,
    pace: BodyPace,
    form: crate::config::FormSettings,
    download_deadline: Option<Duration>,
    metrics: Metrics,
    /// Cancelled when a shutdown's grace is over: bodies still arriving end
    /// with [`BodyError::ShuttingDown`], so what they brought is committed (a
    /// resumable upload keeps it) instead of dropped with the request.
    cut: tokio_util::sync::CancellationToken,
}

impl Bodies {
    pub fn new(config: &crate::ServerConfig, metrics: Metrics) -> Bodies {
        let limits = &config.limits;
        Bodies {
            max_upload_size: config.max_upload_size,
            pace: BodyPace {
                idle: limits.body_idle_timeout,
                min_rate: limits.min_body_rate,
                grace: limits.min_body_rate_grace,
            },
            form: config.form.clone(),
            download_deadline: limits.download_deadline,
            metrics,
            cut: tokio_util::sync::CancellationToken::new(),
        }
    }

    /// Ends every request body still arriving, now and from now on.
    pub fn cut_all(&self) {
        self.cut.cancel();
    }

    /// Whether bodies were cut (the gateway is about to exit).
    pub fn cut(&self) -> bool {
        self.cut.is_cancelled()
    }

    /// The gateway's own limit on one upload (none: S3's).
    pub fn max_upload_size(&self) -> Option<u64> {
        self.max_upload_size
    }

    /// The most bytes `grant` may upload in one object.
    pub fn size_limit(&self, grant: &crate::auth::Grant) -> Option<u64> {
        grant.size_limit(self.max_upload_size)
    }

    /// [`Bodies::size_limit`], refused at once (413) when the declared length
    /// is already beyond it.
    pub fn limit_for(
        &self,
        grant: &crate::auth::Grant,
        declared: Option<u64>,
    ) -> Result<Option<u64>, ApiError> {
        let limit = self.size_limit(grant);
        if let (Some(length), Some(limit)) = (declared, limit) {
            if length > limit {
                return Err(ApiError::TooLarge { limit });
            }
        }
        Ok(limit)
    }

    /// The body as a stream held to `limit` and to the pace (see
    /// [`limited_stream`]).
    pub fn stream(&self, body: Body, limit: Option<u64>) -> BoxStream<'static, io::Result<Bytes>> {
        limited_stream(
            body,
            limit,
            self.pace,
            self.metrics.clone(),
            self.cut.clone(),
        )
    }

    /// What a form may make the gateway read before its files.
    pub fn form(&self) -> &crate::config::FormSettings {
        &self.form
    }

    /// The longest a download body may take to send.
    pub fn download_deadline(&self) -> Option<Duration> {
        self.download_deadline
    }
}

/// Why a body stopped; carried inside the `io::Error` the engine sees.
#[derive(Debug, Clone, thiserror::Error)]
pub enum BodyError {
    #[error("the body is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    #[error("no data for {seconds} s")]
    Idle { seconds: u64 },
    #[error("the body arrived slower than {bytes_per_second} bytes/s")]
    TooSlow { bytes_per_second: u64 },
    #[error("the client connection failed")]
    Client,
    #[error("a form part's headers run past {limit} bytes")]
    FormHeaderTooLarge { limit: u64 },
    #[error("the gateway is shutting down: the body was cut")]
    ShuttingDown,
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

/// How fast a request body must arrive (from `[limits]`; see [`Bodies`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyPace {
    /// Longest wait for the next chunk.
    pub idle: Duration,
    /// Bytes per second the body must average, over the time spent waiting for
    /// it, once `grace` of waiting has passed; 0 turns the check off.
    pub min_rate: u64,
    pub grace: Duration,
}

impl BodyPace {
    /// The longest the next wait may last, after `waited` in all for `seen` bytes.
    fn next_wait(&self, seen: u64, waited: Duration) -> (Duration, BodyError) {
        let idle = (
            self.idle,
            BodyError::Idle {
                seconds: self.idle.as_secs(),
            },
        );
        if self.min_rate == 0 {
            return idle;
        }
        // The rate holds while waited <= grace + seen / min_rate.
        let allowed = self.grace + Duration::from_secs_f64(seen as f64 / self.min_rate as f64);
        let left = allowed.saturating_sub(waited);
        if left < self.idle {
            let slow = BodyError::TooSlow {
                bytes_per_second: self.min_rate,
            };
            (left, slow)
        } else {
            idle
        }
    }
}

struct Progress {
    seen: u64,
    waited: Duration,
}

/// The body as a stream of chunks, failing once more than `limit` bytes arrive,
/// when no chunk arrives for `pace.idle`, or when it falls below `pace.min_rate`.
fn limited_stream(
    body: Body,
    limit: Option<u64>,
    pace: BodyPace,
    metrics: Metrics,
    cut: tokio_util::sync::CancellationToken,
) -> BoxStream<'static, io::Result<Bytes>> {
    let progress = Progress {
        seen: 0,
        waited: Duration::ZERO,
    };
    let state = (body.into_data_stream(), progress, false);
    futures::stream::unfold(state, move |(mut data, mut progress, failed)| {
        let metrics = metrics.clone();
        let cut = cut.clone();
        async move {
            if failed {
                return None;
            }
            let fail = |e: BodyError, progress| {
                Some((
                    Err(io::Error::other(e)),
                    (Body::empty().into_data_stream(), progress, true),
                ))
            };
            let (wait, why) = pace.next_wait(progress.seen, progress.waited);
            let started = Instant::now();
            let next = tokio::select! {
                next = tokio::time::timeout(wait, data.next()) => next,
                () = cut.cancelled() => return fail(BodyError::ShuttingDown, progress),
            };
            progress.waited += started.elapsed();
            match next {
                Err(_) => fail(why, progress),
                Ok(None) => None,
                Ok(Some(Err(_))) => fail(BodyError::Client, progress),
                Ok(Some(Ok(chunk))) => {
                    progress.seen += chunk.len() as u64;
                    metrics.bytes_received(chunk.len() as u64);
                    match limit {
                        Some(limit) if progress.seen > limit => {
                            fail(BodyError::TooLarge { limit }, progress)
                        }
                        _ => Some((Ok(chunk), (data, progress, false))),
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
            .ok_or_else(|| ApiError::Malformed("Content-Length is not a number".into())),
    }
}
