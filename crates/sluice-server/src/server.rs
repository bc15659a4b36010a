//! The listener: accepts connections (HTTP/1.1 and HTTP/2), applies the header
//! read timeout, and on shutdown stops accepting, lets in-flight requests finish
//! within the grace period, then drops the rest (their multipart uploads are
//! aborted) and waits for those aborts.

use std::future::Future;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::AppState;

/// Connections the kernel may queue before they are accepted (capped by
/// `net.core.somaxconn`): a storm of simultaneous uploads must not overflow it.
const LISTEN_BACKLOG: u32 = 8192;

/// Binds a listener with a deep accept backlog.
pub async fn bind(address: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if address.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(address)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Serves `state` on `listener` until `shutdown` resolves, then drains. Accept
/// errors (such as running out of file descriptors) are logged and retried, so
/// serving itself never fails.
pub async fn serve(state: AppState, listener: TcpListener, shutdown: impl Future<Output = ()>) {
    let router = state.router();
    let limits = state.config.limits.clone();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let janitor = (!state.config.janitor.interval.is_zero()).then(|| {
        crate::janitor::spawn(
            state.resumable.clone(),
            state.metrics.clone(),
            state.config.janitor.interval,
            state.config.janitor.older_than,
        )
    });
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: back off, keep serving.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let service = TowerToHyperService::new(router.clone());
                let connection = builder.serve_connection_with_upgrades(TokioIo::new(stream), service).into_owned();
                let connection = graceful.watch(connection);
                connections.spawn(async move {
                    if let Err(error) = connection.await {
                        tracing::debug!(%peer, %error, "connection ended with an error");
                    }
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            () = &mut shutdown => break,
        }
    }
    drop(listener);
    if let Some(janitor) = janitor {
        janitor.abort();
    }
    state.admission.close();
    tracing::info!(
        in_flight = connections.len(),
        grace_s = limits.shutdown_grace.as_secs(),
        "shutting down"
    );
    if tokio::time::timeout(limits.shutdown_grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace expired; aborting the uploads still running");
    }
    connections.shutdown().await;
    state.engine.finish_aborts().await;
}
