//! Cutting a request's connection from inside its handler: the listener puts
//! a [`ConnectionCut`] in each request's extensions (see `server`), and a
//! handler that must not let a slow reader hold it forever (a GET past its
//! deadline) closes the connection through it.

use std::time::Duration;

use tokio_util::sync::{CancellationToken, DropGuard};

use crate::metrics::Metrics;

/// Closes the connection a request came on, from inside its handler (a request
/// extension; absent where requests come without a listener, as in tests).
#[derive(Debug, Clone)]
pub struct ConnectionCut(pub(crate) CancellationToken);

impl ConnectionCut {
    /// Closes the connection once `deadline` has passed, unless the returned
    /// guard is dropped first (keep it in the response body: it drops when the
    /// body is sent or abandoned).
    pub fn after(&self, deadline: Duration, metrics: Metrics) -> DropGuard {
        let finished = CancellationToken::new();
        let cut = self.0.clone();
        let watch = finished.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(deadline) => {
                    metrics.download_cut();
                    cut.cancel();
                }
                () = watch.cancelled() => {}
            }
        });
        finished.drop_guard()
    }
}
