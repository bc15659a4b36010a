//! One request to the GCS JSON API: its URL (object names percent-encoded
//! whole, `/` included, as the API wants them in a path), the bearer token,
//! sending it once (watched for stalls: [`crate::rest::watch`]), and an
//! error answer read into a [`StoreError`].

use std::borrow::Cow;
use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet};
use reqwest::Method;

use super::auth::{GcsCredential, Tokens};
use super::errors::{self, Context};
use crate::error::StoreError;
use crate::rest::body::Outgoing;
pub(crate) use crate::rest::watch::header_text;
use crate::rest::watch::Http;

/// Object names and query values: everything but unreserved characters is
/// escaped (an object name's `/` too).
const COMPONENT: &AsciiSet = crate::rest::UNRESERVED;

/// Google's endpoint for the JSON API.
pub const DEFAULT_ENDPOINT: &str = "https://storage.googleapis.com";

/// The HTTP side of a GCS store: one connection pool, one bucket.
#[derive(Debug)]
pub(crate) struct Client {
    http: Http,
    /// `https://storage.googleapis.com`, or an emulator's origin.
    endpoint: String,
    bucket: String,
    tokens: Tokens,
}

/// Which of the API's URL families a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Api {
    /// `/storage/v1/b/BUCKET/o[/NAME]`: metadata, listing, delete, compose.
    Objects,
    /// `/upload/storage/v1/b/BUCKET/o`: uploads.
    Upload,
    /// `/download/storage/v1/b/BUCKET/o/NAME?alt=media`: an object's bytes.
    Download,
    /// `/storage/v1/b`: buckets.
    Buckets,
}

/// What a request sends.
pub(crate) struct Call<'a> {
    pub method: Method,
    pub api: Api,
    /// The object's full name, if the request is about one.
    pub object: Option<&'a str>,
    /// Another bucket than the store's (the source of a copy).
    pub bucket: Option<&'a str>,
    /// After the object's name (`/compose`, `/rewriteTo/b/BUCKET/o/NAME`).
    pub suffix: Cow<'static, str>,
    pub query: Vec<(&'static str, String)>,
    pub headers: Vec<(&'static str, String)>,
    pub body: Option<(Outgoing, u64)>,
    pub context: Context<'a>,
}

impl<'a> Call<'a> {
    pub fn new(method: Method, api: Api, object: Option<&'a str>, context: Context<'a>) -> Self {
        Call {
            method,
            api,
            object,
            bucket: None,
            suffix: Cow::Borrowed(""),
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

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn suffix(mut self, suffix: &'static str) -> Self {
        self.suffix = Cow::Borrowed(suffix);
        self
    }

    /// The call's object in `bucket` rather than the store's.
    pub fn in_bucket(mut self, bucket: &'a str) -> Self {
        self.bucket = Some(bucket);
        self
    }

    /// A rewrite of the call's object into `name` of the same bucket
    /// (`POST …/o/SOURCE/rewriteTo/b/BUCKET/o/NAME`).
    pub fn rewrite_to(mut self, bucket: &str, name: &str) -> Self {
        self.suffix = Cow::Owned(format!(
            "/rewriteTo/b/{}/o/{}",
            utf8_percent_encode(bucket, COMPONENT),
            utf8_percent_encode(name, COMPONENT)
        ));
        self
    }

    pub fn body(mut self, body: Outgoing, len: u64) -> Self {
        self.body = Some((body, len));
        self
    }

    /// A JSON body.
    pub fn json(self, value: &serde_json::Value) -> Self {
        let bytes = bytes::Bytes::from(serde_json::to_vec(value).expect("JSON serializes"));
        let len = bytes.len() as u64;
        self.header("content-type", "application/json")
            .body(crate::rest::body::in_memory(bytes), len)
    }

    /// `ifGenerationMatch`: 0 for "does not exist".
    pub fn if_generation(self, generation: Option<u64>) -> Self {
        match generation {
            Some(generation) => self.query("ifGenerationMatch", generation.to_string()),
            None => self,
        }
    }
}

impl Client {
    pub fn new(
        endpoint: &str,
        bucket: String,
        credential: GcsCredential,
        connect_timeout: Duration,
        stall_timeout: Option<Duration>,
    ) -> Result<Client, StoreError> {
        let endpoint = endpoint.trim_end_matches('/').to_string();
        // An access token is a bearer secret: never over plain http, but to
        // this machine (an emulator, a test's token endpoint).
        let signed = !matches!(credential, GcsCredential::Anonymous);
        if signed && endpoint.starts_with("http://") && !loopback(&endpoint) {
            return Err(StoreError::InvalidCredentials(format!(
                "{endpoint} is plain http: an access token is sent only over https, or to loopback \
                 (for an emulator, set STORAGE_EMULATOR_HOST or pass --no-sign-request)"
            )));
        }
        Ok(Client {
            http: Http::new(&endpoint, connect_timeout, stall_timeout)?,
            endpoint,
            bucket,
            tokens: Tokens::new(credential),
        })
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The URL of a call to `bucket`, without its query.
    fn url_in(&self, bucket: &str, api: Api, object: Option<&str>, suffix: &str) -> String {
        let bucket = utf8_percent_encode(bucket, COMPONENT);
        let mut url = match api {
            Api::Objects => format!("{}/storage/v1/b/{bucket}/o", self.endpoint),
            Api::Upload => format!("{}/upload/storage/v1/b/{bucket}/o", self.endpoint),
            Api::Download => format!("{}/download/storage/v1/b/{bucket}/o", self.endpoint),
            Api::Buckets => format!("{}/storage/v1/b", self.endpoint),
        };
        if let Some(object) = object {
            url.push('/');
            url.push_str(&utf8_percent_encode(object, COMPONENT).to_string());
        }
        url.push_str(suffix);
        url
    }

    /// Sends `call` once; an answer other than 2xx is the error it maps to.
    pub async fn send(&self, call: Call<'_>) -> Result<reqwest::Response, StoreError> {
        // GCS refuses these names, and a URL would resolve them to the bucket.
        if let Some(name) = call.object.filter(|o| *o == "." || *o == "..") {
            return Err(StoreError::InvalidKey {
                key: name.to_string(),
                reason: "an object on Google Cloud Storage cannot be named `.` or `..`",
            });
        }
        let Call {
            method,
            api,
            object,
            bucket,
            suffix,
            mut query,
            headers,
            body,
            context,
        } = call;
        if api == Api::Download {
            query.insert(0, ("alt", "media".into()));
        }
        let mut url = self.url_in(bucket.unwrap_or(&self.bucket), api, object, &suffix);
        for (i, (name, value)) in query.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(name);
            url.push('=');
            url.push_str(&utf8_percent_encode(value, COMPONENT).to_string());
        }
        let mut request = self.http.request(method.clone(), &url);
        for (name, value) in &headers {
            request = request.header(*name, value.as_str());
        }
        if let Some(authorization) = self.tokens.authorization(&self.http).await? {
            request = request.header("authorization", authorization);
        }
        match &body {
            Some((_, len)) => request = request.header("content-length", len.to_string()),
            None if method == Method::POST || method == Method::PUT => {
                request = request.header("content-length", "0")
            }
            None => {}
        }
        let answer = self.http.send(request, body.map(|(body, _)| body)).await?;
        let status = answer.status();
        if status.is_success() {
            return Ok(answer);
        }
        if status == reqwest::StatusCode::UNAUTHORIZED {
            self.tokens.forget().await;
        }
        let retry_after = header_text(&answer, "retry-after")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let text = if method == Method::HEAD {
            String::new()
        } else {
            self.http.text(answer).await.unwrap_or_default()
        };
        let said = errors::Said::read(&text);
        tracing::debug!(
            status = status.as_u16(),
            reason = %said.reason,
            object = object.unwrap_or(""),
            "gcs answered an error"
        );
        Err(errors::map(status.as_u16(), &said, retry_after, context))
    }

    /// A small answer's body as text, within the stall timeout.
    pub async fn text(&self, answer: reqwest::Response) -> Result<String, StoreError> {
        self.http.text(answer).await
    }

    /// A JSON answer.
    pub async fn json<T: serde::de::DeserializeOwned>(
        &self,
        answer: reqwest::Response,
    ) -> Result<T, StoreError> {
        let text = self.text(answer).await?;
        serde_json::from_str(&text).map_err(|e| StoreError::Service {
            status: 200,
            code: "UnreadableAnswer".into(),
            message: e.to_string(),
        })
    }

    /// An answer's body as a stream, watched for stalls.
    pub fn body_stream(&self, answer: reqwest::Response) -> crate::types::ByteStream {
        self.http.body_stream(answer)
    }
}

/// Whether a URL's host is this machine.
fn loopback(url: &str) -> bool {
    let host = url
        .split("://")
        .nth(1)
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("");
    let host = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_go_over_https_or_to_loopback_only() {
        let key = GcsCredential::AuthorizedUser(super::super::auth::AuthorizedUser {
            client_id: "c".into(),
            client_secret: "s".into(),
            refresh_token: "r".into(),
            token_uri: None,
            quota_project_id: None,
        });
        // (endpoint, credential, accepted)
        let cases = [
            ("https://storage.googleapis.com", key.clone(), true),
            ("http://127.0.0.1:4443", key.clone(), true),
            ("http://[::1]:4443", key.clone(), true),
            ("http://localhost:4443", key.clone(), true),
            ("http://gcs.internal:4443", key.clone(), false),
            ("http://10.0.0.7", key, false),
            ("http://gcs.internal:4443", GcsCredential::Anonymous, true),
        ];
        for (endpoint, credential, accepted) in cases {
            let made = Client::new(
                endpoint,
                "b".into(),
                credential,
                Duration::from_secs(1),
                None,
            );
            assert_eq!(made.is_ok(), accepted, "{endpoint}");
        }
    }

    #[test]
    fn urls_escape_whole_names() {
        let client = Client::new(
            "http://127.0.0.1:4443/",
            "b".into(),
            GcsCredential::Anonymous,
            Duration::from_secs(1),
            None,
        )
        .unwrap();
        // (api, object, suffix, url)
        let cases = [
            (
                Api::Objects,
                Some("a b/ü+%.txt"),
                "",
                "http://127.0.0.1:4443/storage/v1/b/b/o/a%20b%2F%C3%BC%2B%25.txt",
            ),
            (
                Api::Objects,
                Some("d/k"),
                "/compose",
                "http://127.0.0.1:4443/storage/v1/b/b/o/d%2Fk/compose",
            ),
            (
                Api::Upload,
                None,
                "",
                "http://127.0.0.1:4443/upload/storage/v1/b/b/o",
            ),
            (
                Api::Download,
                Some("x"),
                "",
                "http://127.0.0.1:4443/download/storage/v1/b/b/o/x",
            ),
            (Api::Buckets, None, "", "http://127.0.0.1:4443/storage/v1/b"),
        ];
        for (api, object, suffix, url) in cases {
            assert_eq!(client.url_in("b", api, object, suffix), url, "{object:?}");
        }
        let context = Context {
            key: "k",
            bucket: "b",
        };
        let rewrite = Call::new(Method::POST, Api::Objects, Some("p/a b"), context)
            .in_bucket("other")
            .rewrite_to("b", "p/ü");
        assert_eq!(
            client.url_in(
                rewrite.bucket.unwrap(),
                rewrite.api,
                rewrite.object,
                &rewrite.suffix
            ),
            "http://127.0.0.1:4443/storage/v1/b/other/o/p%2Fa%20b/rewriteTo/b/b/o/p%2F%C3%BC"
        );
    }
}
