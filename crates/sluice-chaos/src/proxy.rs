//! The proxy: accepts HTTP/1.1 on a loopback port, forwards each S3 request to
//! the upstream unchanged (the Host header too, so SigV4 signatures still hold),
//! and on the way injects what the [`ChaosConfig`] asks for. Requests under
//! `/_chaos/` are its own control API: `GET /_chaos/stats`, `POST /_chaos/stats/reset`,
//! `GET /_chaos/config` and `PUT /_chaos/config` (JSON).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use http::{header, Request, Response, StatusCode, Uri};
use http_body::{Body as _, Frame};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rand::Rng;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::config::{ChaosConfig, ConfigError};
use crate::operation::{classify, S3Request};
use crate::rate::RateLimiter;
use crate::stats::{Event, Report, Stats};

/// The body of answers the proxy sends.
type ProxyBody = BoxBody<Bytes, ProxyError>;

/// Why a connection was cut (an injected reset, or the upstream's failure).
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("injected connection reset")]
    InjectedReset,
    #[error("the upstream could not be reached: {0}")]
    Upstream(String),
    #[error("reading the client's request failed: {0}")]
    Client(#[from] hyper::Error),
    #[error("could not listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the upstream must be an http:// URL with a host, got {0:?}")]
    UpstreamUrl(String),
}

struct Shared {
    config: RwLock<ChaosConfig>,
    upstream: Uri,
    client: Client<HttpConnector, BoxBody<Bytes, hyper::Error>>,
    limiter: Mutex<RateLimiter>,
    stats: Mutex<Stats>,
}

/// A proxy serving in the background; dropping it stops accepting connections.
pub struct ChaosProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl ChaosProxy {
    /// Binds `listen` and starts forwarding to `upstream` (`http://host:port`).
    pub async fn start(
        listen: SocketAddr,
        upstream: &str,
        config: ChaosConfig,
    ) -> Result<ChaosProxy, ProxyError> {
        let upstream_uri: Uri = upstream
            .parse()
            .map_err(|_| ProxyError::UpstreamUrl(upstream.to_string()))?;
        if upstream_uri.scheme_str() != Some("http") || upstream_uri.authority().is_none() {
            return Err(ProxyError::UpstreamUrl(upstream.to_string()));
        }
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| ProxyError::Bind {
                addr: listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| ProxyError::Bind {
            addr: listen,
            source,
        })?;
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let shared = Arc::new(Shared {
            config: RwLock::new(config),
            upstream: upstream_uri,
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(1024)
                .build(connector),
            limiter: Mutex::default(),
            stats: Mutex::new(Stats::new()),
        });
        let accept = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(ChaosProxy {
            addr,
            shared,
            accept,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL clients use in place of the upstream's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn stats(&self) -> Report {
        lock(&self.shared.stats).report()
    }

    /// Replaces the configuration (after validating it).
    pub fn set_config(&self, config: ChaosConfig) -> Result<(), ConfigError> {
        config.validate()?;
        *self
            .shared
            .config
            .write()
            .unwrap_or_else(|p| p.into_inner()) = config;
        Ok(())
    }

    pub fn config(&self) -> ChaosConfig {
        self.shared
            .config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| handle(shared.clone(), request));
            // An error here is a reset, injected or not: nothing to report.
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// What one draw decided for a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    RateLimited,
    Slowdown,
    InternalError,
    ResetRequest,
    ResetResponse,
    Stall,
}

fn decide(shared: &Shared, request: &S3Request, config: &ChaosConfig) -> Fault {
    if let (Some(rate), true) = (config.write_rate_per_prefix, request.operation.is_write()) {
        let prefix = request.prefix(config.prefix_depth);
        if !lock(&shared.limiter).admit(&prefix, rate, tokio::time::Instant::now()) {
            return Fault::RateLimited;
        }
    }
    let rates = config.rates(request.operation);
    let draw: f64 = rand::rng().random();
    let mut edge = 0.0;
    for (rate, fault) in [
        (rates.slowdown, Fault::Slowdown),
        (rates.internal_error, Fault::InternalError),
        (rates.reset_request, Fault::ResetRequest),
        (rates.reset_response, Fault::ResetResponse),
        (rates.stall, Fault::Stall),
    ] {
        edge += rate;
        if draw < edge {
            return fault;
        }
    }
    Fault::None
}

async fn handle(
    shared: Arc<Shared>,
    request: Request<Incoming>,
) -> Result<Response<ProxyBody>, ProxyError> {
    if request.uri().path().starts_with("/_chaos/") {
        return Ok(control(&shared, request).await);
    }
    let s3 = classify(
        request.method(),
        request.uri().path(),
        request.uri().query(),
        request.headers(),
    );
    let config = shared
        .config
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let fault = decide(&shared, &s3, &config);
    let record = |event| lock(&shared.stats).record(s3.operation, event);
    match fault {
        Fault::RateLimited | Fault::Slowdown => {
            record(if fault == Fault::RateLimited {
                Event::RateLimited
            } else {
                Event::Slowdown
            });
            let head = request.method() == http::Method::HEAD;
            drain(request.into_body()).await?;
            let mut answer = s3_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "SlowDown",
                "Please reduce your request rate.",
                &s3,
                head,
            );
            if let Some(seconds) = config.retry_after {
                answer
                    .headers_mut()
                    .insert(header::RETRY_AFTER, seconds.into());
            }
            return Ok(answer);
        }
        Fault::InternalError => {
            record(Event::InternalError);
            let head = request.method() == http::Method::HEAD;
            drain(request.into_body()).await?;
            return Ok(s3_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "We encountered an internal error. Please try again.",
                &s3,
                head,
            ));
        }
        Fault::ResetRequest => {
            record(Event::ResetRequest);
            read_some(request.into_body()).await;
            return Err(ProxyError::InjectedReset);
        }
        Fault::None | Fault::ResetResponse | Fault::Stall => {}
    }
    if !config.latency.is_zero() {
        tokio::time::sleep(config.latency).await;
    }
    let answer = match forward(&shared, request).await {
        Ok(answer) => answer,
        Err(error) => {
            record(Event::Unreachable);
            tracing::debug!(%error, "upstream unreachable, resetting the client's connection");
            return Err(error);
        }
    };
    match fault {
        Fault::ResetResponse => {
            record(Event::ResetResponse);
            Ok(cut_short(answer).await?)
        }
        Fault::Stall => {
            record(Event::Stall);
            tokio::time::sleep(config.stall_for).await;
            Ok(answer.map(|b| b.map_err(ProxyError::Client).boxed()))
        }
        _ => {
            record(
                if answer.status().is_client_error() || answer.status().is_server_error() {
                    Event::StoreError
                } else {
                    Event::StoreOk
                },
            );
            Ok(answer.map(|b| b.map_err(ProxyError::Client).boxed()))
        }
    }
}

/// Sends the request on to the upstream, headers (Host included) unchanged.
async fn forward(
    shared: &Shared,
    request: Request<Incoming>,
) -> Result<Response<Incoming>, ProxyError> {
    let (mut parts, body) = request.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let mut uri = shared.upstream.clone().into_parts();
    uri.path_and_query = Some(path.parse().map_err(|_| ProxyError::UpstreamUrl(path))?);
    parts.uri = Uri::from_parts(uri).map_err(|e| ProxyError::Upstream(e.to_string()))?;
    // The proxy reads the body already; the upstream must not wait for a go-ahead.
    parts.headers.remove(header::EXPECT);
    parts.headers.remove(header::CONNECTION);
    let request = Request::from_parts(parts, body.boxed());
    shared
        .client
        .request(request)
        .await
        .map_err(|e| ProxyError::Upstream(error_chain(&e)))
}

/// The store answered; the client gets the headers and half the body of a
/// `GET`, or nothing at all, before the connection drops.
async fn cut_short(answer: Response<Incoming>) -> Result<Response<ProxyBody>, ProxyError> {
    let length = answer
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    if length < 2 {
        // Let the upstream connection go back to the pool, then reset ours.
        let _ = answer.into_body().collect().await;
        return Err(ProxyError::InjectedReset);
    }
    let (parts, body) = answer.into_parts();
    let half = length / 2;
    let stream = futures::stream::unfold((body, 0u64), move |(mut body, sent)| async move {
        if sent >= half {
            return Some((Err(ProxyError::InjectedReset), (body, u64::MAX)));
        }
        if sent == u64::MAX {
            return None;
        }
        match body.frame().await {
            Some(Ok(frame)) => match frame.into_data() {
                Ok(mut data) => {
                    let keep = (half - sent).min(data.len() as u64) as usize;
                    let data = data.split_to(keep);
                    let sent = sent + keep as u64;
                    Some((Ok(Frame::data(data)), (body, sent)))
                }
                Err(_) => Some((Err(ProxyError::InjectedReset), (body, u64::MAX))),
            },
            Some(Err(e)) => Some((Err(ProxyError::Client(e)), (body, u64::MAX))),
            None => None,
        }
    });
    Ok(Response::from_parts(
        parts,
        BodyExt::boxed(StreamBody::new(stream)),
    ))
}

/// Reads and discards a request body (so the client sees the answer, not a
/// broken pipe).
async fn drain(mut body: Incoming) -> Result<(), ProxyError> {
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok(())
}

/// Reads about half of a request body (at least one frame, if there is a body).
async fn read_some(mut body: Incoming) {
    let expected = body.size_hint().exact().unwrap_or(0);
    let mut read = 0u64;
    while read == 0 || read < expected / 2 {
        match body.frame().await {
            Some(Ok(frame)) => {
                read += frame.data_ref().map_or(0, |d| d.len() as u64);
            }
            _ => break,
        }
    }
}

fn s3_error(
    status: StatusCode,
    code: &str,
    message: &str,
    request: &S3Request,
    head: bool,
) -> Response<ProxyBody> {
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message><Resource>/{}/{}</Resource><RequestId>sluice-chaos</RequestId></Error>",
        xml_escape(&request.bucket),
        xml_escape(&request.key)
    );
    let body = if head { Bytes::new() } else { Bytes::from(xml) };
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/xml")
        .header("x-amz-request-id", "sluice-chaos")
        .body(full(body))
        .expect("a valid response")
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn full(bytes: Bytes) -> ProxyBody {
    Full::new(bytes)
        .map_err(|never: Infallible| match never {})
        .boxed()
}

fn json(status: StatusCode, value: &impl serde::Serialize) -> Response<ProxyBody> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(Bytes::from(body)))
        .expect("a valid response")
}

async fn control(shared: &Shared, request: Request<Incoming>) -> Response<ProxyBody> {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    match (method.as_str(), path.as_str()) {
        ("GET", "/_chaos/stats") => json(StatusCode::OK, &lock(&shared.stats).report()),
        ("POST", "/_chaos/stats/reset") => {
            *lock(&shared.stats) = Stats::new();
            json(StatusCode::OK, &serde_json::json!({"reset": true}))
        }
        ("GET", "/_chaos/config") => {
            let config = shared
                .config
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            json(StatusCode::OK, &config)
        }
        ("PUT", "/_chaos/config") => {
            let bytes = match request.into_body().collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(e) => {
                    return json(
                        StatusCode::BAD_REQUEST,
                        &serde_json::json!({"error": error_chain(&e)}),
                    )
                }
            };
            let parsed = serde_json::from_slice::<ChaosConfig>(&bytes)
                .map_err(|e| ConfigError::Invalid(e.to_string()))
                .and_then(|config| config.validate().map(|()| config));
            match parsed {
                Ok(config) => {
                    *shared.config.write().unwrap_or_else(|p| p.into_inner()) = config.clone();
                    json(StatusCode::OK, &config)
                }
                Err(e) => json(
                    StatusCode::BAD_REQUEST,
                    &serde_json::json!({"error": e.to_string()}),
                ),
            }
        }
        _ => json(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"error": "unknown control path; try GET /_chaos/stats or /_chaos/config"}),
        ),
    }
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}
