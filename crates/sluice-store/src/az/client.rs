//! One Azure Blob request: its URL (the blob name percent-encoded, the SAS
//! appended), the headers every request carries (`x-ms-date`,
//! `x-ms-version`, the length), the Shared Key signature, sending it once
//! (watched for stalls: [`crate::rest::watch`]), and an error answer read
//! into a [`StoreError`].

use std::time::{Duration, SystemTime};

use percent_encoding::{utf8_percent_encode, AsciiSet};
use reqwest::Method;

use super::auth::{shared_key, AzureAccount, AzureCredential};
use super::errors::{self, Context};
use crate::error::StoreError;
use crate::rest::body::Outgoing;
pub(crate) use crate::rest::watch::header_text;
use crate::rest::watch::Http;

/// The service version sluice speaks: the first with `startFrom` on List
/// Blobs (Azurite 3.37 accepts it).
pub(crate) const SERVICE_VERSION: &str = "2026-02-06";

/// Blob names keep their `/`; everything but unreserved characters is escaped.
const NAME: &AsciiSet = crate::rest::UNRESERVED_AND_SLASH;
/// Query values escape `/` too.
const VALUE: &AsciiSet = crate::rest::UNRESERVED;

/// The HTTP side of an Azure store: one connection pool, one account, one
/// container.
#[derive(Debug)]
pub(crate) struct Client {
    http: Http,
    account: AzureAccount,
    container: String,
    /// The endpoint's own path (`/devstoreaccount1` on Azurite), before the container.
    base_path: String,
}

/// What a request sends.
pub(crate) struct Call<'a> {
    pub method: Method,
    /// The blob's full name, or `None` for a request to the container.
    pub blob: Option<&'a str>,
    /// Another container than the store's (the source of a copy).
    pub container: Option<&'a str>,
    pub query: Vec<(&'static str, String)>,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Option<(Outgoing, u64)>,
    pub context: Context<'a>,
    /// How much longer than the store's stall timeout the call may go
    /// without progress.
    pub extra_patience: Duration,
}

impl<'a> Call<'a> {
    pub fn new(method: Method, blob: Option<&'a str>, context: Context<'a>) -> Call<'a> {
        Call {
            method,
            blob,
            container: None,
            query: Vec::new(),
            headers: Vec::new(),
            body: None,
            context,
            extra_patience: Duration::ZERO,
        }
    }

    /// The call may go without progress for `extra` longer than the store's
    /// stall timeout allows (when it has one): Azure answers it only once
    /// it has done work of its own.
    pub fn patience(mut self, extra: Duration) -> Self {
        self.extra_patience = extra;
        self
    }

    /// The call's blob in `container` rather than the store's.
    pub fn in_container(mut self, container: &'a str) -> Self {
        self.container = Some(container);
        self
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
        self.body(crate::rest::body::in_memory(bytes), len)
    }
}

/// Whether a blob name has a `.` or `..` segment: a URL resolves them, so
/// such a key would name another blob.
pub(crate) fn has_dot_segment(name: &str) -> bool {
    name.split('/').any(|s| s == "." || s == "..")
}

impl Client {
    pub fn new(
        account: AzureAccount,
        container: String,
        connect_timeout: Duration,
        stall_timeout: Option<Duration>,
    ) -> Result<Client, StoreError> {
        let http = Http::new(&account.endpoint, connect_timeout, stall_timeout)?;
        let after_scheme = account.endpoint.split("://").nth(1).unwrap_or("");
        let base_path = after_scheme
            .find('/')
            .map_or(String::new(), |at| after_scheme[at..].to_string());
        Ok(Client {
            http,
            account,
            container,
            base_path,
        })
    }

    pub fn container(&self) -> &str {
        &self.container
    }

    pub fn account(&self) -> &AzureAccount {
        &self.account
    }

    /// The URL of a blob (or the container) of the store's container,
    /// without a query, and its path as signed.
    pub fn url_of(&self, blob: Option<&str>) -> (String, String) {
        self.url_in(&self.container, blob)
    }

    /// [`Client::url_of`] in `container`.
    fn url_in(&self, container: &str, blob: Option<&str>) -> (String, String) {
        let mut path = format!(
            "{}/{}",
            self.base_path,
            utf8_percent_encode(container, NAME)
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

    /// A blob's URL as the source of a copy (`x-ms-copy-source`): the
    /// account key of the request authorizes a source in the same account;
    /// a SAS rides in the URL.
    pub fn source_url(&self, container: Option<&str>, blob: &str) -> String {
        let (url, _) = self.url_in(container.unwrap_or(&self.container), Some(blob));
        match &self.account.credential {
            AzureCredential::Sas(sas) => format!("{url}?{sas}"),
            AzureCredential::AccountKey(_) | AzureCredential::Anonymous => url,
        }
    }

    /// A blob's URL that the service itself can read it by, as the source
    /// of a Put Block From URL (which, unlike Copy Blob, takes no authority
    /// from the request's Shared Key): with an account key, a read SAS for
    /// that blob lasting `lifetime`; with a SAS, the account's own; for an
    /// anonymous account, the bare URL (a public container).
    pub fn readable_source_url(
        &self,
        container: Option<&str>,
        blob: &str,
        lifetime: Duration,
    ) -> Result<String, StoreError> {
        let container = container.unwrap_or(&self.container);
        let (url, _) = self.url_in(container, Some(blob));
        match &self.account.credential {
            AzureCredential::AccountKey(_) => {
                let sas = super::sas::blob_sas(
                    &self.account,
                    container,
                    blob,
                    crate::presign::PresignedMethod::Get,
                    SystemTime::now() + lifetime,
                    SERVICE_VERSION,
                )?;
                Ok(format!("{url}?{sas}"))
            }
            AzureCredential::Sas(sas) => Ok(format!("{url}?{sas}")),
            AzureCredential::Anonymous => Ok(url),
        }
    }

    /// Sends `call` once; an answer other than 2xx is the error it maps to.
    pub async fn send(&self, call: Call<'_>) -> Result<reqwest::Response, StoreError> {
        let Call {
            method,
            blob,
            container,
            query,
            mut headers,
            body,
            context,
            extra_patience,
        } = call;
        if let Some(name) = blob.filter(|b| has_dot_segment(b)) {
            return Err(StoreError::InvalidKey {
                key: name.to_string(),
                reason:
                    "a segment `.` or `..` cannot be in a blob's name on Azure (URLs resolve them)",
            });
        }
        let (mut url, path) = self.url_in(container.unwrap_or(&self.container), blob);
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
        let body = body.map(|(body, _)| body);
        let stall = self.http.stall_timeout().map(|s| s + extra_patience);
        let answer = self.http.send_watched(request, body, stall).await?;
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

    /// A small answer's body as text, within the stall timeout.
    pub async fn text(&self, answer: reqwest::Response) -> Result<String, StoreError> {
        self.http.text(answer).await
    }

    /// An answer's body as a stream, watched for stalls.
    pub fn body_stream(&self, answer: reqwest::Response) -> crate::types::ByteStream {
        self.http.body_stream(answer)
    }
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
