//! Request bodies left unread. A handler that answers before it has read the
//! body (503 at admission, a 413 from the declared length, a 4xx found in the
//! headers) drops it; the connection would then be closed with the client's
//! bytes still arriving, and the kernel answers those with a reset that can
//! reach the client before the response does: it sees a broken connection, not
//! the 503 telling it when to retry. So every request body is wrapped: dropped
//! before its end, it is read on in the background and thrown away, for at
//! most [`DRAIN_TIME`] and [`DRAIN_BYTES`], while the response goes out.
//!
//! That courtesy is for bodies refused before any of them was read: the client
//! did nothing wrong by sending them. A body answered 4xx after the handler read
//! some of it was refused for what it holds or how it came (a form header
//! without end, a body too slow or too large); its client is broken or
//! hostile, and reading up to 64 MiB after each such answer would hand a flood
//! that much of the gateway's time per request. Those bodies are read on for at
//! most [`DRAIN_BYTES_AFTER_BAD_BODY`], enough for a client that watches for
//! an early answer (curl, browsers) to see it.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use futures::StreamExt;
use hyper::body::{Body as _, Frame, SizeHint};

/// Longest a dropped body is read on.
pub const DRAIN_TIME: Duration = Duration::from_secs(5);
/// Bytes per second below which a dropped body is not read on.
pub const DRAIN_MIN_RATE: f64 = 1024.0 * 1024.0;
/// Most bytes of a dropped body read on.
pub const DRAIN_BYTES: u64 = 64 << 20;
/// Most bytes read on of a body refused (4xx) after some of it was read.
pub const DRAIN_BYTES_AFTER_BAD_BODY: u64 = 64 << 10;

/// Middleware: wraps the request's body (see the module documentation) and
/// tells its drain how the request was answered.
pub async fn drain_unread_bodies(request: Request, next: Next) -> Response {
    let verdict = Arc::new(Verdict::default());
    let request = request.map(|body| {
        Body::new(DrainOnDrop {
            body: Some(body),
            verdict: verdict.clone(),
        })
    });
    let response = next.run(request).await;
    if response.status().is_client_error() {
        verdict.client_error.store(true, Ordering::Relaxed);
    }
    response
}

/// What the drain of one body needs to know of its request.
#[derive(Debug, Default)]
struct Verdict {
    /// The handler read some of the body.
    read_from: AtomicBool,
    /// The request was answered 4xx.
    client_error: AtomicBool,
}

impl Verdict {
    /// Most bytes of the body to read on after it was dropped.
    fn allowance(&self) -> u64 {
        let bad_body =
            self.read_from.load(Ordering::Relaxed) && self.client_error.load(Ordering::Relaxed);
        match bad_body {
            true => DRAIN_BYTES_AFTER_BAD_BODY,
            false => DRAIN_BYTES,
        }
    }
}

struct DrainOnDrop {
    body: Option<Body>,
    verdict: Arc<Verdict>,
}

impl hyper::body::Body for DrainOnDrop {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = match self.body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => return Poll::Ready(None),
        };
        if let Poll::Ready(Some(Ok(_))) = &polled {
            self.verdict.read_from.store(true, Ordering::Relaxed);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        let Some(body) = self.body.take() else {
            return;
        };
        if body.is_end_stream() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(drain(body, self.verdict.clone()));
        }
    }
}

/// Reads `body` on and throws it away, within [`DRAIN_TIME`] and the verdict's
/// allowance (the answer may come a moment after the drop, so it is asked at
/// each chunk); a body slower than [`DRAIN_MIN_RATE`] (a trickler, most likely
/// the reason for the refusal) is dropped at once.
async fn drain(body: Body, verdict: Arc<Verdict>) {
    let mut stream = body.into_data_stream();
    let started = tokio::time::Instant::now();
    let mut read = 0u64;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while let Ok(Some(Ok(chunk))) =
            tokio::time::timeout(Duration::from_millis(500), stream.next()).await
        {
            read += chunk.len() as u64;
            let elapsed = started.elapsed().as_secs_f64();
            if read >= verdict.allowance()
                || (elapsed >= 1.0 && (read as f64) < DRAIN_MIN_RATE * elapsed)
            {
                break;
            }
        }
    })
    .await;
}
