//! The HTTP transport every S3 request goes through: hyper-util's pooled
//! HTTP/1.1 client, with a fixed read size, under the SDK's connect and read
//! timeouts, TLS by rustls with the platform's roots.
//!
//! Why not the SDK's own client (aws-smithy-http-client): it lets hyper grow a
//! connection's read buffer to 408 KiB, and while a chunk of that buffer is
//! still held the next read gets fresh memory, so a download's bytes arrive in
//! newly mapped pages (23x s5cmd's page faults for the same 5 GiB) and its
//! peak RSS is half again this transport's. The SDK keeps hyper's builder
//! private (awslabs/aws-sdk-rust#1334), so the read size can only be set here.
//! Reading
//! [`READ_SIZE`] at a time keeps each buffer small; a buffer is still replaced
//! while its chunk is being written, and the `sluice` binary's allocator
//! (jemalloc) hands the freed one back for a later read without faulting its
//! pages again (docs/STORES.md).
//! The SDK's default client is not built at all (no aws-lc, no hyper 0.14):
//! [`http_client`] serves the credential providers and STS too.
//!
//! What it keeps from the SDK's client: the connect timeout covers the TCP
//! connect and the TLS handshake; the read timeout runs from the call until the
//! answer's headers; TCP_NODELAY; an idle connection stays pooled for 90 s;
//! the roots are the platform's (`SSL_CERT_FILE` and `SSL_CERT_DIR` are
//! honoured); a poisoned connection (after a 5xx or a timeout) is not reused;
//! the proxy the environment names (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`,
//! `NO_PROXY`), with its user and password. What differs: a proxy is always
//! reached by a CONNECT tunnel, for `http://` endpoints too (the SDK's client
//! sends those in absolute form), and it must be an `http://` proxy; HTTP/2 is
//! not offered (no S3 store needs it, and the read size is an HTTP/1.1
//! setting).

use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use aws_smithy_runtime_api::client::connection::{CaptureSmithyConnection, ConnectionMetadata};
use aws_smithy_runtime_api::client::connector_metadata::ConnectorMetadata;
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpClient,
    SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::ErrorKind;
use http::uri::Scheme;
use http::Uri;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::HttpConnector as TcpConnector;
use hyper_util::client::legacy::connect::{capture_connection, CaptureConnection};
use hyper_util::client::legacy::Client;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};

type BoxError = Box<dyn StdError + Send + Sync>;

/// What one read from a connection takes at most. In A/B sets of 20 x 256
/// MiB downloads against the SDK's adaptive buffer (up to 408 KiB), 128 KiB
/// took 0.95x and 0.90x s5cmd's CPU where the SDK's took 1.09x and 0.92x
/// (within the machine's noise), at 52-54 MiB peak RSS against 80-90. 64 KiB
/// (s5cmd reads 32 KiB) tripled the context switches (a chunk handed from the
/// connection to the writer per read) and cost CPU; 256 and 512 KiB faulted
/// as many pages as the adaptive buffer
/// (bench/results/2026-11-30/download-read-size-ab.txt).
pub(crate) const READ_SIZE: usize = 128 * 1024;

/// How long an idle connection stays pooled: hyper's default, as in the SDK.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// The transport for an SDK config (and its credential providers): the S3
/// store's, and the one tests give the SDK clients of their own (the SDK's
/// default client is not built).
pub fn http_client() -> SharedHttpClient {
    SharedHttpClient::new(Transport::default())
}

/// One connector per set of timeouts (the SDK asks per request; they are
/// almost always the same), each with its own connection pool.
#[derive(Debug, Default)]
struct Transport {
    connectors: Mutex<HashMap<Timeouts, SharedHttpConnector>>,
}

/// A connector's connect and read timeouts.
type Timeouts = (Option<Duration>, Option<Duration>);

/// TLS settings, with the platform's roots loaded once per process.
static TLS: LazyLock<rustls::ClientConfig> = LazyLock::new(|| tls_config(platform_roots()));

/// The proxies the environment names, read once per process.
static PROXIES: LazyLock<Arc<Matcher>> = LazyLock::new(|| Arc::new(Matcher::from_env()));

impl HttpClient for Transport {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        let key = (settings.connect_timeout(), settings.read_timeout());
        let mut connectors = self.connectors.lock().unwrap_or_else(|e| e.into_inner());
        connectors
            .entry(key)
            .or_insert_with(|| SharedHttpConnector::new(Connector::new(key.0, key.1)))
            .clone()
    }

    fn connector_metadata(&self) -> Option<ConnectorMetadata> {
        Some(ConnectorMetadata::new("hyper", Some("1.x".into())))
    }
}

/// Sends requests through one pool of connections.
#[derive(Debug)]
struct Connector {
    client: Client<ConnectWithin<HttpsConnector<Route>>, SdkBody>,
    read_timeout: Option<Duration>,
}

impl Connector {
    fn new(connect_timeout: Option<Duration>, read_timeout: Option<Duration>) -> Connector {
        let mut tcp = TcpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let route = Route {
            tcp,
            proxies: PROXIES.clone(),
        };
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(TLS.clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(route);
        let client = Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(POOL_IDLE)
            .http1_read_buf_exact_size(READ_SIZE)
            .build(ConnectWithin {
                inner: https,
                limit: connect_timeout,
            });
        Connector {
            client,
            read_timeout,
        }
    }
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let mut request = match request.try_into_http1x() {
            Ok(request) => request,
            Err(e) => return HttpConnectorFuture::ready(Err(ConnectorError::user(e.into()))),
        };
        // The SDK poisons the connection of an answer it will not trust
        // (a 5xx, a timeout), so that the next attempt opens a new one.
        let captured = capture_connection(&mut request);
        if let Some(smithy) = request.extensions().get::<CaptureSmithyConnection>() {
            smithy.set_connection_retriever(move || connection_metadata(&captured));
        }
        let answer = self.client.request(request);
        let read_timeout = self.read_timeout;
        HttpConnectorFuture::new(async move {
            let answer = match read_timeout {
                Some(limit) => match tokio::time::timeout(limit, answer).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        return Err(ConnectorError::timeout(
                            format!("no answer within {limit:?} (read timeout)").into(),
                        ))
                    }
                },
                None => answer.await,
            };
            match answer {
                Ok(response) => HttpResponse::try_from(response.map(SdkBody::from_body_1_x))
                    .map_err(|e| ConnectorError::other(e.into(), None)),
                Err(e) => Err(connector_error(e.into())),
            }
        })
    }
}

/// What the SDK may know of the connection a request went out on, and how it
/// marks that connection not to be reused.
fn connection_metadata(captured: &CaptureConnection) -> Option<ConnectionMetadata> {
    let proxied = captured.connection_metadata().as_ref()?.is_proxied();
    let captured = captured.clone();
    Some(
        ConnectionMetadata::builder()
            .proxied(proxied)
            .poison_fn(move || {
                if let Some(connected) = captured.connection_metadata().as_ref() {
                    connected.poison();
                }
            })
            .build(),
    )
}

/// The failure of a request that got no answer, classed as the SDK's client
/// classes it: timeouts, then I/O (refused, reset, closed, DNS), then a
/// message cut short (transient), then anything else.
fn connector_error(error: BoxError) -> ConnectorError {
    let io_kinds: Vec<io::ErrorKind> = chain(error.as_ref())
        .filter_map(|e| e.downcast_ref::<io::Error>())
        .map(io::Error::kind)
        .collect();
    let hyper = chain(error.as_ref()).find_map(|e| e.downcast_ref::<hyper::Error>());
    let client =
        chain(error.as_ref()).find_map(|e| e.downcast_ref::<hyper_util::client::legacy::Error>());
    // A request body's own failure is the caller's, whatever it wraps.
    if hyper.is_some_and(hyper::Error::is_user) {
        return ConnectorError::user(error);
    }
    if io_kinds.contains(&io::ErrorKind::TimedOut) || hyper.is_some_and(hyper::Error::is_timeout) {
        return ConnectorError::timeout(error);
    }
    if !io_kinds.is_empty()
        || client.is_some_and(hyper_util::client::legacy::Error::is_connect)
        || hyper.is_some_and(|e| e.is_closed() || e.is_canceled())
    {
        return ConnectorError::io(error);
    }
    if hyper.is_some_and(hyper::Error::is_incomplete_message) {
        return ConnectorError::other(error, Some(ErrorKind::TransientError));
    }
    ConnectorError::other(error, None)
}

/// `error` and its sources, an I/O error's payload included.
fn chain<'a>(
    error: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(error), |&e| match e.downcast_ref::<io::Error>() {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
        None => e.source(),
    })
}

/// The platform's trusted roots; none found is logged, and HTTPS then fails
/// with the server's certificate named as unknown.
fn platform_roots() -> rustls::RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = rustls::RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    for error in &found.errors {
        if added == 0 {
            tracing::warn!(%error, "trusted roots could not be loaded (SSL_CERT_FILE, SSL_CERT_DIR, the platform's)");
        } else {
            tracing::debug!(%error, "a trusted root could not be loaded");
        }
    }
    if added == 0 {
        tracing::warn!(
            ignored,
            "no trusted root certificates found; HTTPS stores will be refused"
        );
    }
    roots
}

/// TLS 1.2 and 1.3 with ring, trusting `roots`.
fn tls_config(roots: rustls::RootCertStore) -> rustls::ClientConfig {
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("ring supports TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// Connects to a store directly, or through the proxy the environment names
/// for it by a CONNECT tunnel (TLS to the store then goes through the tunnel).
#[derive(Debug, Clone)]
struct Route {
    tcp: TcpConnector,
    proxies: Arc<Matcher>,
}

impl tower_service::Service<Uri> for Route {
    type Response = <TcpConnector as tower_service::Service<Uri>>::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.tcp.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, target: Uri) -> Self::Future {
        let Some(proxy) = self.proxies.intercept(&target) else {
            let connecting = self.tcp.call(target);
            return Box::pin(async move { connecting.await.map_err(Into::into) });
        };
        if proxy.uri().scheme() != Some(&Scheme::HTTP) {
            let said = format!(
                "the proxy {} is not an http:// one (sluice reaches proxies over plain HTTP only)",
                without_userinfo(proxy.uri())
            );
            return Box::pin(async move { Err(said.into()) });
        }
        let mut tunnel = Tunnel::new(proxy.uri().clone(), self.tcp.clone());
        if let Some(auth) = proxy.basic_auth() {
            tunnel = tunnel.with_auth(auth.clone());
        }
        let target = with_port(target);
        let shown = without_userinfo(proxy.uri());
        Box::pin(async move {
            let tunnelled = async {
                std::future::poll_fn(|cx| tower_service::Service::poll_ready(&mut tunnel, cx))
                    .await?;
                tower_service::Service::call(&mut tunnel, target.clone()).await
            };
            tunnelled
                .await
                .map_err(|e| tunnel_error(e.into(), &shown, &target))
        })
    }
}

/// A tunnel's failure said as what a user can do about it. hyper-util does
/// not export its error type, so its words are read.
fn tunnel_error(error: BoxError, proxy: &str, target: &Uri) -> BoxError {
    let authority = target.authority().map_or("?", |a| a.as_str());
    let said = error.to_string();
    if said.contains("proxy authorization required") {
        return format!(
            "the proxy {proxy} wants a user and password it was not given or refused \
             (407); put them in the proxy URL, http://USER:PASSWORD@HOST:PORT"
        )
        .into();
    }
    if said.ends_with("unsuccessful") {
        return format!("the proxy {proxy} refused to open a tunnel to {authority}").into();
    }
    let cause = error.source().map(crate::error_chain);
    if said.contains("failed to create underlying connection") {
        let cause = cause.unwrap_or(said);
        return io::Error::other(format!("could not reach the proxy {proxy}: {cause}")).into();
    }
    let cause = cause.map_or(said.clone(), |c| format!("{said}: {c}"));
    io::Error::other(format!("through the proxy {proxy}: {cause}")).into()
}

/// `uri` with its port spelled out (a tunnel is asked for host and port, and
/// hyper-util's takes a missing one as 443).
fn with_port(uri: Uri) -> Uri {
    if uri.port().is_some() {
        return uri;
    }
    let (Some(scheme), Some(host)) = (uri.scheme(), uri.host()) else {
        return uri;
    };
    let port = if *scheme == Scheme::HTTPS { 443 } else { 80 };
    format!("{scheme}://{host}:{port}/").parse().unwrap_or(uri)
}

/// A proxy's address without the user and password in it, to show.
fn without_userinfo(uri: &Uri) -> String {
    let authority = uri.authority().map_or("", |a| a.as_str());
    let host = authority.rsplit('@').next().unwrap_or(authority);
    format!("{}://{host}", uri.scheme_str().unwrap_or("?"))
}

/// A connector whose connections (TCP and TLS handshake) must be made within
/// `limit`, as the SDK's connect timeout is.
#[derive(Debug, Clone)]
struct ConnectWithin<C> {
    inner: C,
    limit: Option<Duration>,
}

impl<C> tower_service::Service<Uri> for ConnectWithin<C>
where
    C: tower_service::Service<Uri>,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let limit = self.limit;
        Box::pin(async move {
            let Some(limit) = limit else {
                return connecting.await.map_err(Into::into);
            };
            match tokio::time::timeout(limit, connecting).await {
                Ok(connected) => connected.map_err(Into::into),
                Err(_) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection within {limit:?} (connect timeout)"),
                )
                .into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(error: &ConnectorError) -> &'static str {
        if error.is_timeout() {
            "timeout"
        } else if error.is_io() {
            "io"
        } else if error.is_user() {
            "user"
        } else {
            "other"
        }
    }

    #[test]
    fn failures_without_an_answer_are_classed_as_the_sdk_classes_them() {
        let timed_out = || io::Error::new(io::ErrorKind::TimedOut, "no connection within 10s");
        let cases: Vec<(&str, BoxError, &str)> = vec![
            (
                "refused",
                Box::new(io::Error::new(io::ErrorKind::ConnectionRefused, "refused")),
                "io",
            ),
            ("connect timeout", Box::new(timed_out()), "timeout"),
            (
                "timeout inside an I/O error's payload",
                Box::new(io::Error::other(timed_out())),
                "timeout",
            ),
            ("no I/O error at all", "something else".into(), "other"),
        ];
        for (name, error, expected) in cases {
            assert_eq!(class(&connector_error(error)), expected, "{name}");
        }
    }

    fn get(uri: &str) -> HttpRequest {
        let request = http::Request::builder().uri(uri).body(SdkBody::empty());
        HttpRequest::try_from(request.unwrap()).unwrap()
    }

    #[tokio::test]
    async fn real_failures_of_the_client_are_classed_too() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let closed_port = closed.local_addr().unwrap().port();
        drop(closed);
        // Accepts (the backlog) and never answers.
        let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let silent_port = silent.local_addr().unwrap().port();
        let connector = Connector::new(
            Some(Duration::from_secs(5)),
            Some(Duration::from_millis(300)),
        );
        let cases = [
            (format!("http://127.0.0.1:{closed_port}/b/k"), "io"),
            (format!("http://127.0.0.1:{silent_port}/b/k"), "timeout"),
        ];
        for (uri, expected) in cases {
            let error = connector.call(get(&uri)).await.unwrap_err();
            assert_eq!(class(&error), expected, "{uri}: {error:?}");
        }
        drop(silent);
    }

    #[tokio::test]
    async fn a_connect_that_does_not_finish_in_time_is_a_timeout() {
        // A listener that never accepts still completes the TCP handshake
        // (the backlog), so hold the connect forever with a service instead.
        #[derive(Clone)]
        struct Never;
        impl tower_service::Service<http::Uri> for Never {
            type Response = ();
            type Error = io::Error;
            type Future = futures::future::Pending<io::Result<()>>;
            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
                Poll::Ready(Ok(()))
            }
            fn call(&mut self, _: http::Uri) -> Self::Future {
                futures::future::pending()
            }
        }
        let mut within = ConnectWithin {
            inner: Never,
            limit: Some(Duration::from_millis(50)),
        };
        let error = tower_service::Service::call(&mut within, "http://h/".parse().unwrap())
            .await
            .unwrap_err();
        assert_eq!(class(&connector_error(error)), "timeout");
    }
}
