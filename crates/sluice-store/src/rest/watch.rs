//! One connection pool to a REST store, and a request sent on it watched for
//! stalls.
//!
//! **Stalls.** A request is cancelled when, for the stall timeout, it neither
//! hands the connection a body chunk nor gets its answer, and an answer's
//! body when no chunk of it arrives for that long: progress, not the
//! request's whole duration (a large part on a slow link goes on as long as
//! its bytes do). Errors never carry the URL, which may hold a SAS or a
//! signature.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::body::Outgoing;
use crate::error::{error_chain, StoreError};

/// An HTTP/1.1 connection pool to one endpoint, with the stall timeout its
/// requests are watched by.
#[derive(Debug)]
pub(crate) struct Http {
    client: reqwest::Client,
    /// The endpoint, for errors.
    endpoint: String,
    /// How long a request may go without an answer or a body byte.
    stall_timeout: Option<Duration>,
}

impl Http {
    pub fn new(
        endpoint: &str,
        connect_timeout: Duration,
        stall_timeout: Option<Duration>,
    ) -> Result<Http, StoreError> {
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .http1_only()
            .build()
            .map_err(|e| StoreError::transport(error_chain(&e.without_url())))?;
        Ok(Http {
            client,
            endpoint: endpoint.to_string(),
            stall_timeout,
        })
    }

    pub fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        self.client.request(method, url)
    }

    /// Sends `request` with `body`, watched for stalls: the answer, whatever
    /// its status.
    pub async fn send(
        &self,
        request: reqwest::RequestBuilder,
        body: Option<Outgoing>,
    ) -> Result<reqwest::Response, StoreError> {
        self.send_watched(request, body, self.stall_timeout).await
    }

    /// The store's stall timeout (`None`: not watched).
    pub fn stall_timeout(&self) -> Option<Duration> {
        self.stall_timeout
    }

    /// [`Http::send`] with `stall_timeout` instead of the store's: for a
    /// request the service answers only once it has done long work of its
    /// own (a server-side copy).
    pub async fn send_watched(
        &self,
        mut request: reqwest::RequestBuilder,
        body: Option<Outgoing>,
        stall_timeout: Option<Duration>,
    ) -> Result<reqwest::Response, StoreError> {
        // The last moment the request showed progress, in ms since it started.
        let started = Instant::now();
        let progress = Arc::new(AtomicU64::new(0));
        if let Some(body) = body {
            let seen = progress.clone();
            let watched = body.inspect(move |_| {
                seen.store(started.elapsed().as_millis() as u64, Ordering::Relaxed)
            });
            request = request.body(reqwest::Body::wrap_stream(watched));
        }
        let sending = request.send();
        match stall_timeout {
            None => sending.await,
            Some(stall) => {
                tokio::pin!(sending);
                loop {
                    tokio::select! {
                        answer = &mut sending => break answer,
                        _ = tokio::time::sleep(Duration::from_millis(250)) => {
                            let idle = started.elapsed().as_millis() as u64
                                - progress.load(Ordering::Relaxed);
                            if idle > stall.as_millis() as u64 {
                                return Err(StoreError::Stalled { after: stall, store_silent: false });
                            }
                        }
                    }
                }
            }
        }
        .map_err(|e| self.transport(e))
    }

    /// A request that got no answer (without its URL).
    pub fn transport(&self, error: reqwest::Error) -> StoreError {
        StoreError::Transport {
            at: Some(self.endpoint.clone()),
            cause: error_chain(&error.without_url()),
        }
    }

    /// A small answer's body as text, within the stall timeout.
    pub async fn text(&self, answer: reqwest::Response) -> Result<String, StoreError> {
        match self.stall_timeout {
            None => answer.text().await.map_err(|e| self.transport(e)),
            Some(stall) => match tokio::time::timeout(stall, answer.text()).await {
                Ok(text) => text.map_err(|e| self.transport(e)),
                Err(_) => Err(StoreError::Stalled {
                    after: stall,
                    store_silent: false,
                }),
            },
        }
    }

    /// An answer's body as a stream that fails when no chunk comes for the
    /// stall timeout.
    pub fn body_stream(&self, answer: reqwest::Response) -> crate::types::ByteStream {
        let endpoint = self.endpoint.clone();
        let stall = self.stall_timeout;
        let chunks = answer.bytes_stream();
        Box::pin(futures::stream::unfold(Some(chunks), move |chunks| {
            let endpoint = endpoint.clone();
            async move {
                let mut chunks = chunks?;
                let next = match stall {
                    None => Ok(chunks.next().await),
                    Some(stall) => tokio::time::timeout(stall, chunks.next()).await,
                };
                match next {
                    Ok(Some(Ok(chunk))) => Some((Ok(chunk), Some(chunks))),
                    Ok(None) => None,
                    Ok(Some(Err(e))) => Some((
                        Err(StoreError::Transport {
                            at: Some(endpoint),
                            cause: error_chain(&e.without_url()),
                        }),
                        None,
                    )),
                    Err(_) => Some((
                        Err(StoreError::Stalled {
                            after: stall.unwrap_or_default(),
                            store_silent: false,
                        }),
                        None,
                    )),
                }
            }
        }))
    }
}

/// A response header as text.
pub(crate) fn header_text(answer: &reqwest::Response, name: &str) -> Option<String> {
    answer
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}
