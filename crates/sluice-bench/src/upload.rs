//! One logical upload in the API the target speaks, with the retries a well-behaved
//! client makes: a 503 that carries Retry-After is retried after that many seconds
//! (jittered up to +50% so that a refused crowd does not come back as one), up to the
//! plan's count. Returns how the upload ended.

use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::Bytes;
use http::{header, Method, Request, StatusCode};
use sluice_upload::UploadSource;

use crate::http::{Answer, ChunkBody, ExchangeError, Pool};
use crate::plan::{Api, KeyScheme, LoadPlan};

const TUS_VERSION: &str = "1.0.0";
const FORM_BOUNDARY: &str = "sluice-bench-7f3a9c1e5b";
/// The longest Retry-After honoured; longer ones are cut to this.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// How one upload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The final answer's status (2xx is success).
    Status(StatusCode),
    /// A final 503 without Retry-After: the server gave the client no time to
    /// come back, which a gateway under load should never do.
    UnavailableWithoutRetryAfter,
    /// No answer.
    Failed(ExchangeError),
    /// The S3 APIs: the store refused or failed (its error kind).
    Store(&'static str),
}

/// One upload's record.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    pub ending: Ending,
    /// From the first request to the final answer, retries included.
    pub latency: Duration,
    /// 503 answers that were retried.
    pub retried_503: u32,
    pub bytes: u64,
}

impl Attempt {
    pub fn succeeded(&self) -> bool {
        matches!(self.ending, Ending::Status(s) if s.is_success())
    }
}

/// The S3 APIs' way of uploading: the engine without retries, set for one PUT or
/// for multipart.
pub struct StoreSender {
    pub engine: sluice_upload::Engine,
    pub prefix: String,
}

/// Sends uploads of one plan.
pub struct Uploader {
    pool: Pool,
    plan: LoadPlan,
    payload: Bytes,
    run_id: String,
    store: Option<StoreSender>,
}

impl Uploader {
    pub fn new(plan: LoadPlan, run_id: String, store: Option<StoreSender>) -> Uploader {
        Uploader {
            pool: Pool::new(plan.target.addr),
            payload: match plan.target.api {
                Api::Records => records(RECORD_POOL),
                _ => payload(plan.object_size as usize),
            },
            plan,
            run_id,
            store,
        }
    }

    async fn to_store(&self, seq: u64, body: &Bytes) -> Ending {
        let sender = self.store.as_ref().expect("S3 APIs have a store");
        let key = self.key(seq);
        let key = if sender.prefix.is_empty() {
            key
        } else {
            format!("{}/{key}", sender.prefix)
        };
        let source = UploadSource::Stream {
            stream: Box::pin(futures::stream::iter([Ok::<_, std::io::Error>(
                body.clone(),
            )])),
            length: Some(body.len() as u64),
        };
        match sender
            .engine
            .upload(sluice_upload::UploadRequest::new(key), source)
            .await
        {
            Ok(_) => Ending::Status(StatusCode::OK),
            Err(sluice_upload::TransferError::Store { source, .. }) => Ending::Store(source.kind()),
            Err(_) => Ending::Store("client"),
        }
    }

    /// Upload number `seq`.
    pub async fn upload(&self, seq: u64) -> Attempt {
        let body = self.body_for(seq);
        let start = Instant::now();
        if self.plan.target.api.is_s3() {
            let ending = self.to_store(seq, &body).await;
            return Attempt {
                ending,
                latency: start.elapsed(),
                retried_503: 0,
                bytes: body.len() as u64,
            };
        }
        let mut retried_503 = 0;
        loop {
            let ending = match self.plan.target.api {
                Api::Put => self.put(seq, &body).await,
                Api::Form => self.form(seq, &body).await,
                Api::Tus => self.resumable(Dialect::Tus, seq, &body).await,
                Api::Draft => self.resumable(Dialect::Draft, seq, &body).await,
                Api::Records => self.records(&body).await,
                Api::S3Put | Api::S3Multipart => unreachable!("handled above"),
            };
            let ending = match ending {
                Ok(answer) if answer.status == StatusCode::SERVICE_UNAVAILABLE => {
                    match retry_after(&answer) {
                        Some(wait) if retried_503 < self.plan.retries_after_503 => {
                            retried_503 += 1;
                            tokio::time::sleep(jitter(wait, seq)).await;
                            continue;
                        }
                        Some(_) => Ending::Status(answer.status),
                        None => Ending::UnavailableWithoutRetryAfter,
                    }
                }
                Ok(answer) => Ending::Status(answer.status),
                Err(error) => Ending::Failed(error),
            };
            return Attempt {
                ending,
                latency: start.elapsed(),
                retried_503,
                bytes: body.len() as u64,
            };
        }
    }

    /// The body of upload `seq`: the object size, or one drawn log-uniformly from
    /// the plan's range (the same for a given number, so runs repeat). Records:
    /// whole records from the pool, starting at a record chosen by `seq`.
    fn body_for(&self, seq: u64) -> Bytes {
        if self.plan.target.api == Api::Records {
            let want = (self.plan.object_size as usize).min(self.payload.len() / 2);
            let records = self.payload.len() / RECORD_BYTES;
            let start = (shard(seq, records as u32) as usize) * RECORD_BYTES;
            let start = start.min(self.payload.len() - want);
            let start = start - start % RECORD_BYTES;
            let end = start + want.div_ceil(RECORD_BYTES).max(1) * RECORD_BYTES;
            return self.payload.slice(start..end.min(self.payload.len()));
        }
        let max = self.plan.object_size;
        let size = match self.plan.min_object_size {
            Some(min) if min < max => {
                let u = shard(seq ^ 0x5bd1_e995, u32::MAX) as f64 / f64::from(u32::MAX);
                let (lo, hi) = ((min as f64).ln(), (max as f64).ln());
                ((lo + u * (hi - lo)).exp().round() as u64).clamp(min, max)
            }
            _ => max,
        };
        self.payload.slice(..size as usize)
    }

    fn key(&self, seq: u64) -> String {
        let (prefix, run) = (&self.plan.key_prefix, &self.run_id);
        match self.plan.key_scheme {
            KeyScheme::Common => format!("{prefix}/{run}/{seq:08}"),
            KeyScheme::Tenants(n) => {
                format!("{prefix}/tenant-{}/{run}/{seq:08}", seq % u64::from(n))
            }
            KeyScheme::Shards(n) => format!("{:04x}/{prefix}/{run}/{seq:08}", shard(seq, n)),
        }
    }

    /// The tenant header of form and tus uploads under [`KeyScheme::Tenants`].
    fn tenant(&self, seq: u64) -> Option<String> {
        match self.plan.key_scheme {
            KeyScheme::Tenants(n) => Some(format!("tenant-{}", seq % u64::from(n))),
            _ => None,
        }
    }

    async fn put(&self, seq: u64, body: &Bytes) -> Result<Answer, ExchangeError> {
        let uri = format!("{}/{}", self.plan.target.path, self.key(seq));
        let build = || {
            self.request(Method::PUT, &uri)
                .header(header::CONTENT_TYPE, "application/octet-stream")
                .header(header::CONTENT_LENGTH, body.len())
                .body(ChunkBody::new([body.clone()]))
                .expect("valid request")
        };
        self.pool.exchange(build, self.plan.request_timeout).await
    }

    async fn records(&self, body: &Bytes) -> Result<Answer, ExchangeError> {
        let build = || {
            self.request(Method::POST, &self.plan.target.path)
                .header(header::CONTENT_TYPE, "application/x-ndjson")
                .header(header::CONTENT_LENGTH, body.len())
                .body(ChunkBody::new([body.clone()]))
                .expect("valid request")
        };
        self.pool.exchange(build, self.plan.request_timeout).await
    }

    async fn form(&self, seq: u64, body: &Bytes) -> Result<Answer, ExchangeError> {
        let head = Bytes::from(format!(
            "--{FORM_BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{seq:08}.bin\"\r\n\
             Content-Type: application/octet-stream\r\n\r\n"
        ));
        let tail = Bytes::from(format!("\r\n--{FORM_BOUNDARY}--\r\n"));
        let build = || {
            let body = ChunkBody::new([head.clone(), body.clone(), tail.clone()]);
            with_tenant(
                self.request(Method::POST, &self.plan.target.path),
                self.tenant(seq),
            )
            .header(
                header::CONTENT_TYPE,
                format!("multipart/form-data; boundary={FORM_BOUNDARY}"),
            )
            .header(header::CONTENT_LENGTH, body.len())
            .body(body)
            .expect("valid request")
        };
        self.pool.exchange(build, self.plan.request_timeout).await
    }

    /// Creation (with the whole upload, unless the plan has a chunk size), then PATCH
    /// from the offset the server reports until the upload is complete, in tus
    /// or in the draft.
    async fn resumable(
        &self,
        dialect: Dialect,
        seq: u64,
        body: &Bytes,
    ) -> Result<Answer, ExchangeError> {
        let size = body.len() as u64;
        let chunk = self.plan.chunk_size.unwrap_or(u64::MAX);
        let carried = if self.plan.chunk_size.is_some() {
            Bytes::new()
        } else {
            body.clone()
        };
        let metadata = format!(
            "filename {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{}.bin", self.key(seq)))
        );
        let create = || {
            let builder = with_tenant(
                self.request(Method::POST, &self.plan.target.path),
                self.tenant(seq),
            )
            .header("Upload-Length", size)
            .header("Upload-Metadata", &metadata)
            .header(header::CONTENT_LENGTH, carried.len());
            let builder = match dialect {
                Dialect::Tus => builder
                    .header("Tus-Resumable", TUS_VERSION)
                    .header(header::CONTENT_TYPE, "application/offset+octet-stream"),
                Dialect::Draft => builder
                    .header("Upload-Draft-Interop-Version", DRAFT_INTEROP)
                    .header("Upload-Complete", complete(carried.len() as u64 == size)),
            };
            builder
                .body(ChunkBody::new([carried.clone()]))
                .expect("valid request")
        };
        let answer = self
            .pool
            .exchange(create, self.plan.request_timeout)
            .await?;
        if !answer.status.is_success() {
            return Ok(answer);
        }
        let Some(location) = answer
            .headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(location_path)
        else {
            return Err(ExchangeError::Transport);
        };
        let mut answer = answer;
        // Each PATCH must advance the offset; a server that stops taking bytes ends the upload.
        let mut previous = None;
        loop {
            let offset = match upload_offset(&answer) {
                Some(offset) if offset >= size => return Ok(answer),
                Some(offset) => offset,
                None if answer.status == StatusCode::CREATED => 0,
                None => return Err(ExchangeError::Transport),
            };
            if previous == Some(offset) {
                return Err(ExchangeError::Transport);
            }
            previous = Some(offset);
            let end = offset.saturating_add(chunk).min(size);
            let rest = body.slice(offset as usize..end as usize);
            let patch = || {
                let builder = self
                    .request(Method::PATCH, &location)
                    .header("Upload-Offset", offset)
                    .header(header::CONTENT_LENGTH, rest.len());
                let builder = match dialect {
                    Dialect::Tus => builder
                        .header("Tus-Resumable", TUS_VERSION)
                        .header(header::CONTENT_TYPE, "application/offset+octet-stream"),
                    Dialect::Draft => builder
                        .header("Upload-Draft-Interop-Version", DRAFT_INTEROP)
                        .header(header::CONTENT_TYPE, "application/partial-upload")
                        .header("Upload-Complete", complete(end == size)),
                };
                builder
                    .body(ChunkBody::new([rest.clone()]))
                    .expect("valid request")
            };
            answer = self.pool.exchange(patch, self.plan.request_timeout).await?;
            if !answer.status.is_success() {
                return Ok(answer);
            }
        }
    }

    fn request(&self, method: Method, path: &str) -> http::request::Builder {
        Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &self.plan.target.authority)
            .header(
                header::USER_AGENT,
                concat!("sluice-bench/", env!("CARGO_PKG_VERSION")),
            )
    }
}

fn with_tenant(builder: http::request::Builder, tenant: Option<String>) -> http::request::Builder {
    match tenant {
        Some(tenant) => builder.header("x-sluice-tenant", tenant),
        None => builder,
    }
}

/// Shard `0..n` of upload `seq` (FNV-1a of its number, so that neighbours spread).
fn shard(seq: u64, n: u32) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seq.to_le_bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash % u64::from(n)
}

/// A payload of `size` bytes that does not compress (xorshift output).
/// Bytes of one generated record, its newline included.
const RECORD_BYTES: usize = 1024;
/// Bytes of distinct records request bodies are cut from.
const RECORD_POOL: usize = 64 << 20;

/// `pool` bytes of NDJSON records of exactly [`RECORD_BYTES`] each: a sequence
/// number, a user, an event name and words drawn from a small vocabulary
/// (text that compresses about as well as application logs).
pub(crate) fn records(pool: usize) -> Bytes {
    const WORDS: [&str; 32] = [
        "click", "view", "scroll", "cart", "checkout", "search", "login", "logout", "error",
        "retry", "timeout", "mobile", "desktop", "tablet", "home", "product", "category", "banner",
        "video", "play", "pause", "share", "like", "comment", "follow", "signup", "promo",
        "coupon", "region", "europe", "america", "asia",
    ];
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::with_capacity(pool);
    let mut seq = 0u64;
    while out.len() + RECORD_BYTES <= pool {
        let mut record = format!(
            "{{\"seq\":{seq},\"user\":\"u{:06}\",\"event\":\"{}\",\"ts\":{},\"text\":\"",
            next() % 1_000_000,
            WORDS[(next() % 32) as usize],
            1_795_000_000_000u64 + seq * 7
        );
        while record.len() < RECORD_BYTES - 24 {
            record.push_str(WORDS[(next() % 32) as usize]);
            record.push(' ');
        }
        let fill = RECORD_BYTES - 3 - record.len();
        record.push_str(&"x".repeat(fill));
        record.push_str("\"}\n");
        debug_assert_eq!(record.len(), RECORD_BYTES);
        out.extend_from_slice(record.as_bytes());
        seq += 1;
    }
    Bytes::from(out)
}

pub(crate) fn payload(size: usize) -> Bytes {
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut bytes = Vec::with_capacity(size + 8);
    while bytes.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(size);
    Bytes::from(bytes)
}

fn retry_after(answer: &Answer) -> Option<Duration> {
    let seconds: u64 = answer
        .headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER))
}

/// `wait` stretched by 0–50%, spread by the upload's number.
fn jitter(wait: Duration, seq: u64) -> Duration {
    let spread = (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as f64 / 1024.0; // 0..1
    wait.mul_f64(1.0 + spread / 2.0)
}

fn upload_offset(answer: &Answer) -> Option<u64> {
    answer
        .headers
        .get("Upload-Offset")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The two resumable protocols the load client speaks.
#[derive(Debug, Clone, Copy)]
enum Dialect {
    Tus,
    Draft,
}

/// The draft's interop version the load client sends: 6, the newest tusd serves.
const DRAFT_INTEROP: &str = "6";

fn complete(done: bool) -> &'static str {
    if done {
        "?1"
    } else {
        "?0"
    }
}

/// The path of a Location header, which may be an absolute URL (tusd) or a path.
fn location_path(location: &str) -> String {
    match location.parse::<http::Uri>() {
        Ok(uri) if uri.scheme().is_some() => uri
            .path_and_query()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| "/".into()),
        _ => location.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_json_lines_of_one_kib() {
        let pool = records(1 << 20);
        assert_eq!(pool.len(), 1 << 20);
        for line in pool.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            assert_eq!(line.len() + 1, RECORD_BYTES);
            serde_json::from_slice::<serde_json::Value>(line).unwrap();
        }
    }

    #[test]
    fn payload_has_the_size_and_does_not_repeat() {
        for size in [0, 1, 7, 8, 9, 10 << 10] {
            assert_eq!(payload(size).len(), size);
        }
        let p = payload(1 << 16);
        assert_ne!(p.slice(0..4096), p.slice(4096..8192));
    }

    #[test]
    fn location_table() {
        let cases = [
            ("http://127.0.0.1:1080/files/abc", "/files/abc"),
            ("/v1/tus/abc", "/v1/tus/abc"),
            ("http://h/files/a?b=c", "/files/a?b=c"),
        ];
        for (location, path) in cases {
            assert_eq!(location_path(location), path);
        }
    }

    #[test]
    fn shards_spread_evenly() {
        let mut counts = [0u32; 16];
        for seq in 0..16_000 {
            counts[shard(seq, 16) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }

    #[test]
    fn jitter_stays_within_half_again() {
        let wait = Duration::from_secs(2);
        for seq in 0..1000 {
            let j = jitter(wait, seq);
            assert!(j >= wait && j <= wait.mul_f64(1.5), "{seq}: {j:?}");
        }
    }
}
