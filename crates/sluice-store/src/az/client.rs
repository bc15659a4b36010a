//! One Azure Blob request: its URL (the blob name percent-encoded, the SAS
//! appended), the headers every request carries (`x-ms-date`,
//! `x-ms-version`, the length), the Shared Key signature, sending it once,
//! and an error answer read into a [`StoreError`].
//!
//! **Stalls.** A request is cancelled when, for the stall timeout, it neither
//! hands the connection a body chunk nor gets its answer, and an answer's
//! body when no chunk of it arrives for that long: progress, not the
//! request's whole duration (a large block on a slow link goes on as long as
//! its bytes do). Errors never carry the URL, which may hold a SAS.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::Method;

use super::auth::{shared_key, AzureAccount, AzureCredential};
use super::body::Outgoing;
use super::errors::{self, Context};
use crate::error::{error_chain, StoreError};

/// The service version sluice speaks: the first with `startFrom` on List
/// Blobs (Azurite 3.37 accepts it).
pub(crate) const SERVICE_VERSION: &str = "2026-02-06";

/// Blob names keep their `/`; everything but unreserved characters is escaped.
const NAME: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');
/// Query values escape `/` too.
const VALUE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// The HTTP side of an Azure store: one connection pool, one account, one
/// container.
#[derive(Debug)]
pub(crate) struct Client {
    http: reqwest::Client,
    account: AzureAccount,
    container: String,
    /// The endpoint's own path (`/devstoreaccount1` on Azurite), before the container.
    base_path: String,
    /// How long a request may go without an answer or a body byte.
    stall_timeout: Option<Duration>,
}

/// What a request sends.
pub(crate) struct Call<'a> {
    pub method: Method,
    /// The blob's full name, or `None` for a request to the container.
    pub blob: Option<&'a str>,
    pub query: Vec<(&'static str, String)>,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Option<(Outgoing, u64)>,
    pub context: Context<'a>,
}

impl<'a> Call<'a> {
    pub fn new(method: Method, blob: Option<&'a str>, context: Context<'a>) -> Call<'a> {
        Call {
            method,
            blob,
            query: Vec::new(),
            headers: Vec::new(),
            body: None,
            context,
        }
    }

    pub fn query(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.query.push((name, value.into()));
        self
    }

    pub fn header(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_ascii_lowercase(), value.into()));
        self
    }

    pub fn body(mut self, body: Outgoing, len: u64) -> Self {
        self.body = Some((body, len));
        self
    }

    /// Several headers at once.
    pub fn headers(mut self, headers: impl IntoIterator<Item = (String, String)>) -> Self {
        for (name, value) in headers {
            self = self.header(&name, value);
        }
        self
    }

    /// A write's condition: `If-None-Match: *` (then a 409
    /// `BlobAlreadyExists` is the precondition failing) or `If-Match`.
    pub fn condition(mut self, condition: &Option<crate::types::WriteCondition>) -> Self {
        use crate::types::WriteCondition;
        match condition {
            None => self,
            Some(WriteCondition::IfNoneMatch) => {
                self.context.create_only = true;
                self.header("if-none-match", "*")
            }
            Some(WriteCondition::IfMatch(etag)) => self.header("if-match", etag.clone()),
        }
    }

    /// A small body in memory (a record, a block list).
    pub fn bytes(self, bytes: impl Into<bytes::Bytes>) -> Self {
        let bytes = bytes.into();
        let len = bytes.len() as u64;
        self.body(super::body::in_memory(bytes), len)
    }
}

impl Client {
    pub fn new(
        account: AzureAccount,
        container: String,
        connect_timeout: Duration,
        stall_timeout: Option<Duration>,
    ) -> Result<Client, StoreError> {
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            .http1_only()
            .build()
            .map_err(|e| StoreError::transport(error_chain(&e.without_url())))?;
        let after_scheme = account.endpoint.split("://").nth(1).unwrap_or("");
        let base_path = after_scheme
            .find('/')
            .map_or(String::new(), |at| after_scheme[at..].to_string());
        Ok(Client {
            http,
            account,
            container,
            base_path,
            stall_timeout,
        })
    }

    pub fn container(&self) -> &str {
        &self.container
    }

    pub fn account(&self) -> &AzureAccount {
        &self.account
    }

    /// The URL of a blob (or the container), without a query.
    pub fn url_of(&self, blob: Option<&str>) -> (String, String) {
        let mut path = format!(
            "{}/{}",
            self.base_path,
            utf8_percent_encode(&self.container, NAME)
        );
        if let Some(blob) = blob {
            path.push('/');
            path.push_str(&utf8_percent_encode(blob, NAME).to_string());
        }
        let origin_len = self.account.endpoint.len() - self.base_path.len();
        (
            format!("{}{path}", &self.account.endpoint[..origin_len]),
            path,
        )
    }

    /// Sends `call` once; an answer other than 2xx is the error it maps to.
    pub async fn send(&self, call: Call<'_>) -> Result<reqwest::Response, StoreError> {
        let Call {
            method,
            blob,
            query,
            mut headers,
            body,
            context,
        } = call;
        // A URL resolves `.` and `..` segments: such a key would name another blob.
        if let Some(name) = blob.filter(|b| b.split('/').any(|s| s == "." || s == "..")) {
            return Err(StoreError::InvalidKey {
                key: name.to_string(),
                reason:
                    "a segment `.` or `..` cannot be in a blob's name on Azure (URLs resolve them)",
            });
        }
        let (mut url, path) = self.url_of(blob);
        let mut text_query = String::new();
        for (name, value) in &query {
            text_query.push(if text_query.is_empty() { '?' } else { '&' });
            text_query.push_str(name);
            text_query.push('=');
            text_query.push_str(&utf8_percent_encode(value, VALUE).to_string());
        }
        if let AzureCredential::Sas(sas) = &self.account.credential {
            text_query.push(if text_query.is_empty() { '?' } else { '&' });
            text_query.push_str(sas);
        }
        url.push_str(&text_query);
        headers.push((
            "x-ms-date".into(),
            httpdate::fmt_http_date(SystemTime::now()),
        ));
        headers.push(("x-ms-version".into(), SERVICE_VERSION.into()));
        let length = body.as_ref().map(|(_, len)| *len);
        if let Some(len) = length {
            headers.push(("content-length".into(), len.to_string()));
        } else if method == Method::PUT {
            headers.push(("content-length".into(), "0".into()));
        }
        if let AzureCredential::AccountKey(key) = &self.account.credential {
            let signed_query: Vec<(String, String)> = query
                .iter()
                .map(|(n, v)| (n.to_string(), v.clone()))
                .collect();
            let authorization = shared_key(
                &self.account.name,
                key,
                method.as_str(),
                &path,
                &signed_query,
                &headers,
            );
            headers.push(("authorization".into(), authorization));
        }
        let mut request = self.http.request(method.clone(), &url);
        for (name, value) in &headers {
            request = request.header(name.as_str(), value.as_str());
        }
        // The last moment the request showed progress, in ms since it started.
        let started = Instant::now();
        let progress = Arc::new(AtomicU64::new(0));
        if let Some((body, _)) = body {
            let seen = progress.clone();
            let watched = body.inspect(move |_| {
                seen.store(started.elapsed().as_millis() as u64, Ordering::Relaxed)
            });
            request = request.body(reqwest::Body::wrap_stream(watched));
        }
        let sending = request.send();
        let answer = match self.stall_timeout {
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
        .map_err(|e| self.transport(e))?;
        let status = answer.status();
        if status.is_success() {
            return Ok(answer);
        }
        let header = |name: &str| {
            answer
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let mut code = header("x-ms-error-code").unwrap_or_default();
        let retry_after = header("retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let mut message = String::new();
        if method != Method::HEAD {
            let text = self.text(answer).await.unwrap_or_default();
            if let Ok(error) = super::xml::parse(&text) {
                if code.is_empty() {
                    code = error.text_at("Code").unwrap_or("").to_string();
                }
                message = error.text_at("Message").unwrap_or("").to_string();
            }
        }
        tracing::debug!(
            status = status.as_u16(),
            code = %code,
            blob = blob.unwrap_or(""),
            "azure answered an error"
        );
        Err(errors::map(
            status.as_u16(),
            &code,
            &message,
            retry_after,
            context,
        ))
    }

    /// A request that got no answer (without its URL: it may hold a SAS).
    pub fn transport(&self, error: reqwest::Error) -> StoreError {
        StoreError::Transport {
            at: Some(self.account.endpoint.clone()),
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
        let endpoint = self.account.endpoint.clone();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_escape_names_and_keep_the_endpoint_path() {
        let account = AzureAccount::new(
            "devstoreaccount1",
            Some("http://127.0.0.1:10000/devstoreaccount1"),
            AzureCredential::Anonymous,
        )
        .unwrap();
        let client = Client::new(
            account,
            "c".into(),
            Duration::from_secs(1),
            Some(Duration::from_secs(1)),
        )
        .unwrap();
        // (blob, url, path as signed)
        let cases = [
            (
                Some("a b/ü+%.txt"),
                "http://127.0.0.1:10000/devstoreaccount1/c/a%20b/%C3%BC%2B%25.txt",
                "/devstoreaccount1/c/a%20b/%C3%BC%2B%25.txt",
            ),
            (
                None,
                "http://127.0.0.1:10000/devstoreaccount1/c",
                "/devstoreaccount1/c",
            ),
        ];
        for (blob, url, path) in cases {
            assert_eq!(
                client.url_of(blob),
                (url.to_string(), path.to_string()),
                "{blob:?}"
            );
        }
    }
}
