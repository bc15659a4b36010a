//! Request bodies left unread. A handler that answers before it has read the
//! body (503 at admission, a 413 from the declared length, a 4xx found in the
//! headers) drops it; the connection would then be closed with the client's
//! bytes still arriving, and the kernel answers those with a reset that can
//! reach the client before the response does: it sees a broken connection, not
//! the 503 telling it when to retry. So every request body is wrapped: dropped
//! before its end, it is read on in the background and thrown away, for at
//! most [`DRAIN_TIME`] and [`DRAIN_BYTES`], while the response goes out.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use futures::StreamExt;
use hyper::body::{Body as _, Frame, SizeHint};

/// Longest a dropped body is read on.
pub const DRAIN_TIME: Duration = Duration::from_secs(5);
/// Bytes per second below which a dropped body is not read on.
pub const DRAIN_MIN_RATE: f64 = 1024.0 * 1024.0;
/// Most bytes of a dropped body read on.
pub const DRAIN_BYTES: u64 = 64 << 20;

/// Middleware: wraps the request's body (see the module documentation).
pub async fn drain_unread_bodies(request: Request) -> Request {
    request.map(|body| Body::new(DrainOnDrop { body: Some(body) }))
}

struct DrainOnDrop {
    body: Option<Body>,
}

impl hyper::body::Body for DrainOnDrop {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.body.as_mut() {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
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
            runtime.spawn(drain(body));
        }
    }
}

/// Reads `body` on and throws it away, within [`DRAIN_TIME`] and
/// [`DRAIN_BYTES`]; a body slower than [`DRAIN_MIN_RATE`] (a trickler, most
/// likely the reason for the refusal) is dropped at once.
async fn drain(body: Body) {
    let mut stream = body.into_data_stream();
    let started = tokio::time::Instant::now();
    let mut read = 0u64;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while let Ok(Some(Ok(chunk))) =
            tokio::time::timeout(Duration::from_millis(500), stream.next()).await
        {
            read += chunk.len() as u64;
            let elapsed = started.elapsed().as_secs_f64();
            if read >= DRAIN_BYTES || (elapsed >= 1.0 && (read as f64) < DRAIN_MIN_RATE * elapsed) {
                break;
            }
        }
    })
    .await;
}
