//! Requests to an import's origin: every hop through [`ImportGuard`] (resolved
//! once, connected to the address checked), redirects followed by hand (at
//! most [`MAX_REDIRECTS`], each checked like the first), no proxy, ranged
//! reads with `If-Range` so a source that changed is noticed, a body that
//! stalls for [`STALL`] ends in an error, and one of another length than
//! announced too ([`exactly`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};

use super::guard::{ImportGuard, Refusal, Resolve};

/// Redirects followed at most.
pub const MAX_REDIRECTS: usize = 5;

/// A body that brings no byte for this long has stalled.
pub const STALL: Duration = Duration::from_secs(30);

/// How long connecting and the answer's headers may take, per hop.
const ANSWER: Duration = Duration::from_secs(10);

/// Why an origin request gave nothing to import.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The guard refused a hop: nothing was sent to it.
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error("more than {MAX_REDIRECTS} redirects")]
    TooManyRedirects,
    #[error("a redirect without a usable Location")]
    BadRedirect,
    /// The origin answered with an error status.
    #[error("the origin answered {status}")]
    Status { status: u16 },
    /// The origin cannot be reached or broke off (worth trying again).
    #[error("the origin could not be reached: {0}")]
    Transport(String),
}

impl FetchError {
    /// Worth another try later: the origin may recover.
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::Transport(_) => true,
            FetchError::Status { status } => *status >= 500 || *status == 408 || *status == 429,
            _ => false,
        }
    }
}

/// An origin's answer to a GET.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    response: reqwest::Response,
}

impl Answer {
    /// The body, counting each byte read into `fetched`; a stall is an error.
    pub fn body(self, fetched: Arc<AtomicU64>) -> BoxStream<'static, std::io::Result<Bytes>> {
        let stream = self.response.bytes_stream();
        futures::stream::unfold(stream, move |mut stream| {
            let fetched = fetched.clone();
            async move {
                match tokio::time::timeout(STALL, stream.next()).await {
                    Ok(Some(Ok(chunk))) => {
                        fetched.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                        Some((Ok(chunk), stream))
                    }
                    Ok(Some(Err(e))) => Some((Err(std::io::Error::other(e)), stream)),
                    Ok(None) => None,
                    Err(_) => Some((
                        Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("the origin sent nothing for {}s", STALL.as_secs()),
                        )),
                        stream,
                    )),
                }
            }
        })
        .boxed()
    }

    /// Where a 206's `Content-Range` starts.
    pub fn range_start(&self) -> Option<u64> {
        let range = self
            .header("content-range")?
            .trim()
            .strip_prefix("bytes ")?;
        range.split_once('-')?.0.trim().parse().ok()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The whole object's size: from `Content-Range` of a 206, or
    /// `Content-Length` of a 200.
    pub fn object_size(&self) -> Option<u64> {
        match self.status {
            206 => self
                .header("content-range")?
                .rsplit_once('/')?
                .1
                .trim()
                .parse()
                .ok(),
            200 => self.header("content-length")?.trim().parse().ok(),
            _ => None,
        }
    }

    /// What identifies this version of the source for `If-Range`: a strong
    /// ETag, or else `Last-Modified`.
    pub fn validator(&self) -> Option<String> {
        let etag = self.header("etag").filter(|e| !e.starts_with("W/"));
        etag.or_else(|| self.header("last-modified"))
            .map(str::to_owned)
    }

    pub fn content_type(&self) -> Option<String> {
        self.header("content-type").map(str::to_owned)
    }
}

/// `body` if it brings exactly `length` bytes: more is an error as soon as it
/// shows, fewer an error at its end (never a short object, never a longer one
/// than the origin announced and the caller's limit allowed).
pub fn exactly(
    body: BoxStream<'static, std::io::Result<Bytes>>,
    length: u64,
) -> BoxStream<'static, std::io::Result<Bytes>> {
    futures::stream::unfold(
        (body, 0u64, false),
        move |(mut body, seen, done)| async move {
            if done {
                return None;
            }
            match body.next().await {
                Some(Ok(chunk)) => {
                    let seen = seen + chunk.len() as u64;
                    if seen > length {
                        let error = std::io::Error::other(format!(
                            "the origin sent more than the {length} bytes it announced"
                        ));
                        return Some((Err(error), (body, seen, true)));
                    }
                    Some((Ok(chunk), (body, seen, false)))
                }
                Some(Err(e)) => Some((Err(e), (body, seen, true))),
                None if seen < length => {
                    let error = std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("the origin ended the body after {seen} of {length} bytes"),
                    );
                    Some((Err(error), (body, seen, true)))
                }
                None => None,
            }
        },
    )
    .boxed()
}

/// GETs `url` from byte `from` on (a range request when `from` > 0 or
/// `probe`), with `If-Range: validator` when given; redirects followed and
/// checked. `probe` asks for the first byte only (`bytes=0-0`), to learn the
/// size and whether ranges are served.
pub async fn get(
    guard: &ImportGuard,
    resolver: &dyn Resolve,
    url: &str,
    from: u64,
    probe: bool,
    validator: Option<&str>,
) -> Result<Answer, FetchError> {
    let mut next = guard.parse(url)?;
    for _ in 0..=MAX_REDIRECTS {
        let checked = guard.check(next.clone(), resolver).await?;
        let mut client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(ANSWER)
            .user_agent(concat!("sluice/", env!("CARGO_PKG_VERSION"), " (import)"));
        if let Some(url::Host::Domain(domain)) = checked.url.host() {
            // Connect to the address that was checked, never to a second lookup's.
            client = client.resolve(domain, checked.address);
        }
        let client = client
            .build()
            .map_err(|e| FetchError::Transport(e.to_string()))?;
        let mut request = client.get(checked.url.clone());
        if probe {
            request = request.header("range", "bytes=0-0");
        } else if from > 0 {
            request = request.header("range", format!("bytes={from}-"));
            if let Some(validator) = validator {
                request = request.header("if-range", validator);
            }
        }
        let response = tokio::time::timeout(ANSWER, request.send())
            .await
            .map_err(|_| FetchError::Transport(format!("no answer within {}s", ANSWER.as_secs())))?
            .map_err(|e| FetchError::Transport(sluice_store::error_chain(&e)))?;
        let status = response.status().as_u16();
        if response.status().is_redirection() {
            let location = response
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
                .ok_or(FetchError::BadRedirect)?;
            next = checked
                .url
                .join(location)
                .map_err(|_| FetchError::BadRedirect)?;
            continue;
        }
        if !(200..300).contains(&status) {
            return Err(FetchError::Status { status });
        }
        return Ok(Answer {
            status,
            headers: response.headers().clone(),
            response,
        });
    }
    Err(FetchError::TooManyRedirects)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (chunks, announced, bytes passed on, error)
    type Case<'a> = (&'a [&'a [u8]], u64, usize, Option<&'a str>);

    #[tokio::test]
    async fn a_body_of_another_length_than_announced_is_an_error() {
        let cases: [Case; 5] = [
            (&[b"abc", b"de"], 5, 5, None),
            (&[b"abc", b"de"], 4, 3, Some("more than the 4 bytes")),
            (&[b"abc"], 5, 3, Some("after 3 of 5 bytes")),
            (&[], 0, 0, None),
            (&[], 1, 0, Some("after 0 of 1 bytes")),
        ];
        for (chunks, announced, passed, error) in cases {
            let body = futures::stream::iter(
                chunks
                    .iter()
                    .map(|c| Ok(Bytes::copy_from_slice(c)))
                    .collect::<Vec<_>>(),
            )
            .boxed();
            let items: Vec<_> = exactly(body, announced).collect().await;
            let bytes: usize = items
                .iter()
                .filter_map(|i| i.as_ref().ok())
                .map(|b| b.len())
                .sum();
            let failed = items
                .iter()
                .find_map(|i| i.as_ref().err())
                .map(|e| e.to_string());
            assert_eq!(bytes, passed, "{chunks:?} {announced}");
            match (failed, error) {
                (None, None) => {}
                (Some(got), Some(want)) => assert!(got.contains(want), "{got}"),
                (got, want) => panic!("{chunks:?} {announced}: got {got:?}, want {want:?}"),
            }
        }
    }
}
