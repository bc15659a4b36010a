//! The HTTP/1.1 client side of a load run: a pool of keep-alive connections to one
//! address, request bodies made of shared byte chunks (the payload is never copied),
//! and one exchange: request out, status and headers back, response body read whole.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// A request body: byte chunks sent one after another.
#[derive(Debug, Clone, Default)]
pub struct ChunkBody {
    chunks: VecDeque<Bytes>,
    remaining: u64,
}

impl ChunkBody {
    pub fn new(chunks: impl IntoIterator<Item = Bytes>) -> ChunkBody {
        let chunks: VecDeque<Bytes> = chunks.into_iter().filter(|c| !c.is_empty()).collect();
        let remaining = chunks.iter().map(|c| c.len() as u64).sum();
        ChunkBody { chunks, remaining }
    }

    pub fn len(&self) -> u64 {
        self.remaining
    }
}

impl Body for ChunkBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.chunks.pop_front() {
            Some(chunk) => {
                self.remaining -= chunk.len() as u64;
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// What came back.
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
}

/// Why an exchange produced no answer; the names are the error kinds of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExchangeError {
    /// The TCP connection could not be made.
    Connect,
    /// The exchange took longer than the request timeout.
    Timeout,
    /// The connection broke during the exchange (reset, closed early, malformed answer).
    Transport,
}

impl ExchangeError {
    pub fn kind(self) -> &'static str {
        match self {
            ExchangeError::Connect => "connect",
            ExchangeError::Timeout => "timeout",
            ExchangeError::Transport => "transport",
        }
    }
}

/// Keep-alive connections to one address. Idle connections are reused; a reused
/// connection that turns out to be closed by the server is replaced by a fresh one
/// (once) without counting an error.
pub struct Pool {
    addr: SocketAddr,
    idle: Mutex<Vec<SendRequest<ChunkBody>>>,
}

impl Pool {
    pub fn new(addr: SocketAddr) -> Pool {
        Pool {
            addr,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// One exchange; `request` builds the request (again, if a stale connection
    /// forces a second try).
    pub async fn exchange(
        &self,
        request: impl Fn() -> Request<ChunkBody>,
        timeout: Duration,
    ) -> Result<Answer, ExchangeError> {
        match tokio::time::timeout(timeout, self.exchange_inner(request)).await {
            Ok(result) => result,
            Err(_) => Err(ExchangeError::Timeout),
        }
    }

    async fn exchange_inner(
        &self,
        request: impl Fn() -> Request<ChunkBody>,
    ) -> Result<Answer, ExchangeError> {
        if let Some(mut sender) = self.take_idle() {
            if sender.ready().await.is_ok() {
                match sender.send_request(request()).await {
                    Ok(response) => return self.finish(sender, response).await,
                    // Closed by the server while idle: nothing was processed.
                    Err(error) if error.is_canceled() || error.is_incomplete_message() => {}
                    Err(_) => return Err(ExchangeError::Transport),
                }
            }
        }
        let mut sender = self.connect().await?;
        let response = sender
            .send_request(request())
            .await
            .map_err(|_| ExchangeError::Transport)?;
        self.finish(sender, response).await
    }

    async fn finish(
        &self,
        sender: SendRequest<ChunkBody>,
        response: http::Response<hyper::body::Incoming>,
    ) -> Result<Answer, ExchangeError> {
        let (parts, body) = response.into_parts();
        body.collect().await.map_err(|_| ExchangeError::Transport)?;
        let closing = parts
            .headers
            .get(http::header::CONNECTION)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"));
        if !closing && !sender.is_closed() {
            self.idle.lock().expect("pool lock").push(sender);
        }
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
        })
    }

    fn take_idle(&self) -> Option<SendRequest<ChunkBody>> {
        self.idle.lock().expect("pool lock").pop()
    }

    async fn connect(&self) -> Result<SendRequest<ChunkBody>, ExchangeError> {
        let stream = TcpStream::connect(self.addr)
            .await
            .map_err(|_| ExchangeError::Connect)?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|_| ExchangeError::Connect)?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }
}
