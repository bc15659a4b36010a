//! The listener: accepts connections (HTTP/1.1 and HTTP/2) up to
//! `limits.max_connections`, bounds how long a connection may take to deliver its
//! first request, and on shutdown drains: `/readyz` says `draining` at once; on
//! [`Stop::Drain`] (SIGTERM) new uploads are still taken for `drain_delay`, so a
//! load balancer polling readiness moves traffic away before anything is
//! refused; then it stops accepting, refuses new requests, lets in-flight ones
//! finish within the grace period, drops the rest (their multipart uploads are
//! aborted; a resumable upload keeps what was stored) and waits for those aborts.
//!
//! Connection limits, in the order a connection meets them:
//! - beyond `max_connections` open ones, a connection is answered a bare
//!   `503` with `Retry-After` and closed, without its request being read;
//! - its first request must be in within `header_read_timeout` of the accept
//!   (protocol detection included: hyper's own timer starts after it);
//! - an idle HTTP/1.1 keep-alive connection is closed after `header_read_timeout`
//!   (hyper starts that timer whenever it waits for a request's head);
//! - HTTP/2: at most `http2_max_streams` requests at once per connection, and
//!   pings every `http2_keep_alive` close a peer that stopped answering;
//! - a handler may cut its connection ([`ConnectionCut`]): a GET past
//!   `download_deadline` does, since a reader that stops reading blocks the
//!   writes, and with them anything inside the response body that could notice;
//! - an answer marked as an offense ([`crate::error::Offense`]) counts against
//!   the client's address; once the address is penalized, each offense closes
//!   its connection (HTTP/1.1 after the answer, HTTP/2 at once), and its new
//!   connections are held unread for the rest of the penalty, then answered a
//!   bare `429` and closed ([`crate::offenders`]).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderValue, Version};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::connection_cut::ConnectionCut;
use crate::error::Offense;
use crate::metrics::Metrics;
use crate::offenders::{Standing, MAX_HELD};
use crate::AppState;

/// Connections the kernel may queue before they are accepted (capped by
/// `net.core.somaxconn`): a storm of simultaneous uploads must not overflow it.
const LISTEN_BACKLOG: u32 = 8192;

/// Refused connections being answered at once; more are closed unanswered.
const MAX_REFUSING: usize = 1024;

/// How long a refused connection's request is read (and dropped) after the
/// answer, so that closing does not reset the connection before the client
/// reads the answer.
const REFUSE_LINGER: Duration = Duration::from_secs(1);

/// The most of a penalized connection's request read after its answer: enough
/// for a client that watches for an early answer, little for a flood.
const PENALIZED_LINGER_BYTES: u64 = 64 << 10;

/// A connection's byte stream: plain TCP, or TLS over it.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}

impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

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

/// Serves the admin routes (metrics, health) of `state` on `listener` until
/// `shutdown` resolves. The admin address belongs on a private network.
pub async fn serve_admin(
    state: AppState,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, crate::routes::admin_router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// How long requests whose bodies were cut at the end of the grace get to
/// commit what they received.
const CUT_REQUESTS_FINISH: Duration = Duration::from_secs(5);

/// How a gateway is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM, from a process manager: not ready at once, new uploads taken
    /// for `limits.drain_delay`, then the grace for those in flight.
    Drain,
    /// Ctrl-C: no delay, the grace for those in flight.
    Now,
}

impl From<()> for Stop {
    fn from((): ()) -> Stop {
        Stop::Drain
    }
}

/// Serves `state` on `listener` until `shutdown` resolves, then drains (see
/// [`Stop`]). Accept errors (such as running out of file descriptors) are
/// logged and retried, so serving itself never fails.
pub async fn serve<S: Into<Stop>>(
    state: AppState,
    listener: TcpListener,
    shutdown: impl Future<Output = S>,
) {
    let router = state.router();
    let limits = state.config.limits.clone();
    let builder = connection_builder(&limits);
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    let held = Arc::new(Semaphore::new(MAX_HELD));
    let offenders = state.offenders.clone();
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    // The gateway's own work beside the requests, stopped when it stops serving.
    let background = crate::background::Background::start(&state);
    let tls = state.tls.clone();
    tokio::pin!(shutdown);
    // Armed once asked to stop: until it fires new connections are still taken.
    let mut draining = false;
    let accept_until = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(accept_until);
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
                if let Standing::Penalized(left) = offenders.standing(peer.ip(), tokio::time::Instant::now()) {
                    state.metrics.connection_penalized();
                    if let Ok(turn) = held.clone().try_acquire_owned() {
                        let retry_after = limits.retry_after_seconds;
                        let plain = tls.is_none();
                        tokio::spawn(async move {
                            tokio::time::sleep(left).await;
                            // Over TLS a bare answer would be garbage: closed unanswered.
                            if plain {
                                refuse(stream, Refusal::Penalized, retry_after).await;
                            }
                            drop(turn);
                        });
                    }
                    continue;
                }
                let Ok(slot) = open.clone().try_acquire_owned() else {
                    state.metrics.connection_refused();
                    if let (Ok(turn), None) = (refusing.clone().try_acquire_owned(), &tls) {
                        let retry_after = limits.retry_after_seconds;
                        tokio::spawn(async move {
                            refuse(stream, Refusal::TooManyConnections, retry_after).await;
                            drop(turn);
                        });
                    }
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let connection = Connection {
                    stream,
                    peer,
                    slot,
                    router: router.clone(),
                    offenders: offenders.clone(),
                    metrics: state.metrics.clone(),
                    tls: tls.clone(),
                    first_request: limits.header_read_timeout,
                };
                connections.spawn(connection.run(builder.clone(), graceful.watcher()));
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            stop = &mut shutdown, if !draining => {
                state.readiness.start_draining();
                let delay = match stop.into() {
                    Stop::Drain => limits.drain_delay,
                    Stop::Now => Duration::ZERO,
                };
                tracing::info!(
                    delay_ms = delay.as_millis() as u64,
                    "draining: /readyz answers 503; new uploads are taken until the delay is over"
                );
                draining = true;
                accept_until.as_mut().reset(tokio::time::Instant::now() + delay);
            }
            () = &mut accept_until, if draining => break,
        }
    }
    drop(listener);
    background.stop();
    finish_in_flight(&state, graceful, connections).await;
    tracing::info!("stopped");
}

/// One accepted connection, under its place in `limits.max_connections`.
struct Connection {
    stream: TcpStream,
    peer: std::net::SocketAddr,
    slot: tokio::sync::OwnedSemaphorePermit,
    router: axum::Router,
    offenders: Arc<crate::offenders::Offenders>,
    metrics: Metrics,
    tls: Option<crate::tls::Tls>,
    /// How long until its first request's head must be in (handshake included).
    first_request: Duration,
}

impl Connection {
    /// Serves the connection's requests until it ends, is cut (a download
    /// past its deadline, a penalized address on HTTP/2) or sends no request
    /// in time; `watcher` lets the shutdown end it gracefully.
    async fn run(
        self,
        builder: Builder<TokioExecutor>,
        watcher: hyper_util::server::graceful::Watcher,
    ) {
        let Connection {
            stream,
            peer,
            slot,
            router,
            offenders,
            metrics,
            tls,
            first_request,
        } = self;
        // Set once the first request's head is in and reaches the router.
        let started = Arc::new(AtomicBool::new(false));
        let cut = CancellationToken::new();
        // Cancelled by an offense of a penalized address on HTTP/2.
        let penalized = CancellationToken::new();
        let service = {
            let started = started.clone();
            let router = router.clone();
            let cut = ConnectionCut(cut.clone());
            let offenders = offenders.clone();
            let metrics = metrics.clone();
            let penalized = penalized.clone();
            tower::service_fn(move |request: Request<hyper::body::Incoming>| {
                started.store(true, Ordering::Relaxed);
                let version = request.version();
                let mut request = request.map(axum::body::Body::new);
                request.extensions_mut().insert(cut.clone());
                let answer = router.clone().oneshot(request);
                let offenders = offenders.clone();
                let metrics = metrics.clone();
                let penalized = penalized.clone();
                async move {
                    let mut response = answer.await?;
                    if response.extensions().get::<Offense>().is_some() {
                        let (standing, newly_penalized) =
                            offenders.offense(peer.ip(), tokio::time::Instant::now());
                        metrics.offense(newly_penalized);
                        if newly_penalized {
                            tracing::warn!(%peer, "penalized a client address for its malformed requests");
                        }
                        match (standing, version <= Version::HTTP_11) {
                            (Standing::Tolerated, _) => {}
                            (Standing::Penalized(_), true) => {
                                response
                                    .headers_mut()
                                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
                            }
                            // No Connection header in HTTP/2, and one
                            // connection carries many requests at once.
                            (Standing::Penalized(_), false) => penalized.cancel(),
                        }
                    }
                    Ok::<_, std::convert::Infallible>(response)
                }
            })
        };
        let service = TowerToHyperService::new(service);
        let first_request = tokio::time::sleep(first_request);
        let _slot = OpenConnection::new(slot, metrics.clone());
        tokio::pin!(first_request);
        // The handshake counts against the time to the first request.
        let io: Box<dyn Io> = match tls {
            None => Box::new(stream),
            Some(tls) => tokio::select! {
                handshake = tls.accept(stream) => match handshake {
                    Ok(stream) => Box::new(stream),
                    Err(error) => {
                        metrics.tls_handshake_failed();
                        tracing::debug!(%peer, %error, "TLS handshake failed");
                        return;
                    }
                },
                () = &mut first_request => {
                    metrics.connection_timed_out();
                    tracing::debug!(%peer, "closed a connection whose TLS handshake did not finish in time");
                    return;
                }
            },
        };
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(io), service)
            .into_owned();
        let connection = watcher.watch(connection);
        tokio::pin!(connection);
        let mut awaiting_first = true;
        let ended = loop {
            tokio::select! {
                ended = &mut connection => break ended,
                () = &mut first_request, if awaiting_first => {
                    if !started.load(Ordering::Relaxed) {
                        metrics.connection_timed_out();
                        tracing::debug!(%peer, "closed a connection that sent no request in time");
                        return;
                    }
                    awaiting_first = false;
                }
                () = cut.cancelled() => {
                    tracing::info!(%peer, "closed a connection past its download deadline");
                    return;
                }
                () = penalized.cancelled() => {
                    tracing::debug!(%peer, "closed an HTTP/2 connection of a penalized address");
                    return;
                }
            }
        };
        if let Err(error) = ended {
            tracing::debug!(%peer, %error, "connection ended with an error");
        }
    }
}

/// HTTP/1.1 and HTTP/2 as `limits` bound them.
fn connection_builder(limits: &crate::config::Limits) -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        .keep_alive_interval(limits.http2_keep_alive)
        .keep_alive_timeout(limits.http2_keep_alive);
    builder
}

/// After the listener closed: no new uploads are admitted, waiting stream
/// requests are answered, in-flight requests get the grace (then their bodies
/// are cut so they keep what came, then they are dropped), and the engine's
/// aborts finish.
async fn finish_in_flight(
    state: &AppState,
    graceful: GracefulShutdown,
    mut connections: JoinSet<()>,
) {
    let limits = &state.config.limits;
    state.admission.close();
    // Requests waiting for their batch are answered now, not at its age.
    state.streams.flush_all();
    tracing::info!(
        in_flight = connections.len(),
        grace_s = limits.shutdown_grace.as_secs(),
        "shutting down"
    );
    let finished = graceful.shutdown();
    tokio::pin!(finished);
    if tokio::time::timeout(limits.shutdown_grace, &mut finished)
        .await
        .is_err()
    {
        // Bodies still arriving end here, so their requests keep what came
        // (a resumable upload stays resumable elsewhere from it).
        tracing::warn!("shutdown grace expired; cutting the request bodies still arriving");
        state.bodies.cut_all();
        if tokio::time::timeout(CUT_REQUESTS_FINISH, &mut finished)
            .await
            .is_err()
        {
            tracing::warn!("aborting the requests still running");
        }
    }
    connections.shutdown().await;
    tracing::debug!("connections closed");
    state.streams.close_all().await;
    state.engine.finish_background().await;
}

/// A connection's place under `limits.max_connections`, counted in the metrics.
struct OpenConnection {
    _slot: tokio::sync::OwnedSemaphorePermit,
    metrics: Metrics,
}

impl OpenConnection {
    fn new(slot: tokio::sync::OwnedSemaphorePermit, metrics: Metrics) -> Self {
        metrics.connections_changed(1);
        OpenConnection {
            _slot: slot,
            metrics,
        }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.metrics.connections_changed(-1);
    }
}

/// Why a connection is answered without its request being read.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    /// Beyond `limits.max_connections`.
    TooManyConnections,
    /// From a penalized address, after its hold.
    Penalized,
}

impl Refusal {
    fn status_line(self) -> &'static str {
        match self {
            Refusal::TooManyConnections => "503 Service Unavailable",
            Refusal::Penalized => "429 Too Many Requests",
        }
    }

    fn body(self) -> &'static str {
        match self {
            Refusal::TooManyConnections => {
                r#"{"error":{"code":"too_many_connections","message":"the server has too many open connections; retry later"}}"#
            }
            Refusal::Penalized => {
                r#"{"error":{"code":"penalized","message":"this address sent too many malformed requests; its connections were held for a while"}}"#
            }
        }
    }

    /// The most of the request read after the answer (see [`REFUSE_LINGER`]).
    fn linger_bytes(self) -> u64 {
        match self {
            Refusal::TooManyConnections => u64::MAX,
            Refusal::Penalized => PENALIZED_LINGER_BYTES,
        }
    }
}

/// Answers a connection with a bare HTTP/1.1 refusal and closes it. Its request
/// is never parsed; what it sent is read and dropped for a moment so that the
/// close does not reset the connection under the answer.
async fn refuse(mut stream: TcpStream, refusal: Refusal, retry_after: u64) {
    let body = refusal.body();
    let answer = format!(
        "HTTP/1.1 {}\r\nRetry-After: {retry_after}\r\n\
         Content-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        refusal.status_line(),
        body.len(),
    );
    let linger = async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut read = 0u64;
        while read < refusal.linger_bytes() {
            match stream.read(&mut sink).await? {
                0 => break,
                n => read += n as u64,
            }
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSE_LINGER, linger).await;
}
