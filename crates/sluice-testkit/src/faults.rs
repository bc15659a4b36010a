//! A store wrapper that injects failures and delays into chosen requests, for the
//! faults a real MinIO cannot be made to produce on demand (a 503 on part 3, a
//! part that finishes last, a store that never recovers).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use sluice_store::*;

/// An operation a fault can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Put,
    /// A whole-object server-side copy (CopyObject).
    Copy,
    Get,
    Head,
    Create,
    UploadPart,
    Complete,
    Abort,
    List,
}

/// The size of the pieces a cut body comes in.
const BODY_PIECE: usize = 64 * 1024;

fn pieces(chunk: Result<bytes::Bytes, StoreError>) -> Vec<Result<bytes::Bytes, StoreError>> {
    match chunk {
        Ok(chunk) if chunk.len() > BODY_PIECE => (0..chunk.len())
            .step_by(BODY_PIECE)
            .map(|at| Ok(chunk.slice(at..(at + BODY_PIECE).min(chunk.len()))))
            .collect(),
        other => vec![other],
    }
}

/// What happens to a matching request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fails with 503 SlowDown (transient).
    Throttle,
    /// Fails with 500 InternalError (transient).
    ServerError,
    /// Fails with 403 AccessDenied (permanent).
    Denied,
    /// Fails with 400 InvalidPart (permanent): a multipart upload a store can
    /// no longer complete (MinIO's, after a completion stopped midway).
    InvalidPart,
    /// Fails with 404 NoSuchBucket (permanent).
    NoSuchBucket,
    /// Fails with 403 InvalidAccessKeyId (permanent): credentials refused.
    BadCredentials,
    /// Waits this long, then goes through.
    Delay(Duration),
    /// A GET whose body breaks off (a reset) after this many bytes.
    CutBody(u64),
    /// A GET whose body stops after this many bytes and never goes on (a
    /// store frozen mid-answer): only a reader's own deadline ends it.
    StallBody(u64),
    /// The request is carried out, and its answer is lost (a reset).
    AnswerLost,
    /// The request is carried out, and answered 412 PreconditionFailed: what
    /// the retry of a conditional write whose answer was lost gets, when
    /// nothing above tells it that its own write is the one in place.
    LandsThenRefused,
    /// Waits this long, then fails with 500 InternalError, not carried out
    /// (a request that hangs, while others go on, and fails).
    FailsLate(Duration),
    /// Panics: a bug in a store's own code (its answer's parser, say).
    Panics,
}

/// What becomes of a GET's body after some bytes.
#[derive(Debug, Clone, Copy)]
enum BodyFault {
    Cut(u64),
    Stall(u64),
}

/// What a matching request does.
enum Effect {
    /// Goes through (a body fault, for the caller, if any).
    Pass(Option<BodyFault>),
    /// Goes through, then answers with this error.
    Answer(StoreError),
}

impl Fault {
    fn error(self) -> Option<StoreError> {
        match self {
            Fault::Throttle => Some(StoreError::Throttled { retry_after: None }),
            Fault::ServerError => Some(StoreError::Service {
                status: 500,
                code: "InternalError".into(),
                message: "injected".into(),
            }),
            Fault::Denied => Some(StoreError::AccessDenied("injected".into())),
            Fault::InvalidPart => Some(StoreError::InvalidPart("injected".into())),
            Fault::BadCredentials => Some(StoreError::InvalidCredentials("injected".into())),
            Fault::NoSuchBucket => Some(StoreError::NoSuchBucket {
                bucket: "injected".into(),
            }),
            Fault::FailsLate(_) => Fault::ServerError.error(),
            Fault::Delay(_)
            | Fault::CutBody(_)
            | Fault::StallBody(_)
            | Fault::AnswerLost
            | Fault::LandsThenRefused
            | Fault::Panics => None,
        }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    op: Op,
    part: Option<u32>,
    /// Only requests for keys that start with this, when given.
    under: Option<String>,
    /// How many matching requests it still applies to; `None` for all.
    remaining: Option<u32>,
    /// Matching requests it lets through before it applies.
    skip: u32,
    fault: Fault,
}

/// Requests seen, by operation and part number.
type AttemptCounts = HashMap<(Op, Option<u32>), u32>;

/// See the module documentation.
#[derive(Debug, Clone)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    rules: Arc<Mutex<Vec<Rule>>>,
    attempts: Arc<Mutex<AttemptCounts>>,
    /// Conditional writes are carried out as plain ones (`If-None-Match`
    /// and `If-Match` ignored), as some S3-compatible stores do.
    ignores_conditions: Arc<std::sync::atomic::AtomicBool>,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        FaultyStore {
            inner,
            rules: Arc::default(),
            attempts: Arc::default(),
            ignores_conditions: Arc::default(),
        }
    }

    /// From now on, carries out conditional writes as plain ones, as a store
    /// that ignores `If-None-Match` and `If-Match` does.
    pub fn ignore_conditions(&self) {
        self.ignores_conditions
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Applies `fault` to every request of `op` (for `UploadPart`, only part
    /// `part` when given), for the first `times` matches or forever.
    pub fn inject(self, op: Op, part: Option<u32>, times: Option<u32>, fault: Fault) -> Self {
        self.rules.lock().unwrap().push(Rule {
            op,
            part,
            under: None,
            remaining: times,
            skip: 0,
            fault,
        });
        self
    }

    /// Applies `fault` to requests of `op` for keys under `prefix`, for the
    /// first `times` matches or forever; takes effect at once on every clone.
    pub fn inject_under(&self, op: Op, prefix: &str, times: Option<u32>, fault: Fault) {
        self.rules.lock().unwrap().push(Rule {
            op,
            part: None,
            under: Some(prefix.to_owned()),
            remaining: times,
            skip: 0,
            fault,
        });
    }

    /// Applies `fault` once, to the `nth` request of `op` from now on (1 for
    /// the next one); takes effect at once on every clone.
    pub fn inject_nth(&self, op: Op, nth: u32, fault: Fault) {
        self.rules.lock().unwrap().push(Rule {
            op,
            part: None,
            under: None,
            remaining: Some(1),
            skip: nth.saturating_sub(1),
            fault,
        });
    }

    /// Requests of `op` (for one part, when given) that reached this wrapper.
    pub fn attempts(&self, op: Op, part: Option<u32>) -> u32 {
        let attempts = self.attempts.lock().unwrap();
        match part {
            Some(_) => attempts.get(&(op, part)).copied().unwrap_or(0),
            None => attempts
                .iter()
                .filter(|((o, _), _)| *o == op)
                .map(|(_, n)| n)
                .sum(),
        }
    }

    /// Counts the request and applies the fault that matches it; a body fault is
    /// handed back for the caller to apply.
    async fn before(&self, op: Op, part: Option<u32>, key: &str) -> Result<Effect, StoreError> {
        *self.attempts.lock().unwrap().entry((op, part)).or_insert(0) += 1;
        let fault = {
            let mut rules = self.rules.lock().unwrap();
            let rule = rules.iter_mut().find(|r| {
                r.op == op
                    && (r.part.is_none() || r.part == part)
                    && r.under
                        .as_deref()
                        .is_none_or(|under| key.starts_with(under))
                    && r.remaining != Some(0)
            });
            rule.and_then(|r| {
                if r.skip > 0 {
                    r.skip -= 1;
                    return None;
                }
                if let Some(n) = r.remaining.as_mut() {
                    *n -= 1;
                }
                Some(r.fault)
            })
        };
        match fault {
            Some(Fault::Delay(d)) => {
                tokio::time::sleep(d).await;
                Ok(Effect::Pass(None))
            }
            Some(Fault::FailsLate(d)) => {
                tokio::time::sleep(d).await;
                Err(Fault::FailsLate(d).error().expect("failing fault"))
            }
            Some(Fault::CutBody(after)) => Ok(Effect::Pass(Some(BodyFault::Cut(after)))),
            Some(Fault::StallBody(after)) => Ok(Effect::Pass(Some(BodyFault::Stall(after)))),
            Some(Fault::AnswerLost) => Ok(Effect::Answer(StoreError::transport(
                "injected: connection reset before the answer",
            ))),
            Some(Fault::LandsThenRefused) => Ok(Effect::Answer(StoreError::PreconditionFailed)),
            Some(Fault::Panics) => panic!("injected: a store's {op:?} panicked"),
            Some(f) => Err(f.error().expect("failing fault")),
            None => Ok(Effect::Pass(None)),
        }
    }

    /// Counts the request, applies its fault, and carries it out unless the
    /// fault says otherwise.
    async fn call<T>(
        &self,
        op: Op,
        part: Option<u32>,
        key: &str,
        request: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match self.before(op, part, key).await? {
            Effect::Pass(_) => request.await,
            Effect::Answer(error) => {
                request.await?;
                Err(error)
            }
        }
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    fn describe(&self) -> String {
        format!("faulty({})", self.inner.describe())
    }
    fn copy_object_limit(&self) -> u64 {
        self.inner.copy_object_limit()
    }
    async fn check_key(&self, key: &str) -> Result<(), StoreError> {
        self.inner.check_key(key).await
    }
    async fn put_object(&self, mut request: PutRequest) -> Result<PutOutput, StoreError> {
        if self
            .ignores_conditions
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            request.condition = None;
        }
        let key = request.key.clone();
        self.call(Op::Put, None, &key, self.inner.put_object(request))
            .await
    }
    async fn get_object(
        &self,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<GetOutput, StoreError> {
        let cut = match self.before(Op::Get, None, key).await? {
            Effect::Pass(cut) => cut,
            Effect::Answer(error) => {
                self.inner.get_object(key, range).await?;
                return Err(error);
            }
        };
        let mut output = self.inner.get_object(key, range).await?;
        if let Some(fault) = cut {
            use futures::StreamExt;
            let (after, stalls) = match fault {
                BodyFault::Cut(after) => (after, false),
                BodyFault::Stall(after) => (after, true),
            };
            // As a body comes off a socket: in pieces, the reset arriving in
            // place of the piece after the cut (or nothing ever arriving).
            let mut left = after;
            let body = output
                .body
                .flat_map(|chunk| futures::stream::iter(pieces(chunk)))
                .map(move |chunk| {
                    let chunk = chunk?;
                    if left == 0 {
                        return Err(StoreError::transport("injected: connection reset"));
                    }
                    let take = (chunk.len() as u64).min(left);
                    left -= take;
                    Ok(chunk.slice(..take as usize))
                });
            output.body = match stalls {
                false => body.boxed(),
                true => body
                    .take_while(|chunk| futures::future::ready(chunk.is_ok()))
                    .chain(futures::stream::pending())
                    .boxed(),
            };
        }
        Ok(output)
    }
    async fn head_object(&self, key: &str) -> Result<ObjectMeta, StoreError> {
        self.call(Op::Head, None, key, self.inner.head_object(key))
            .await
    }
    async fn delete_object(&self, key: &str) -> Result<(), StoreError> {
        self.inner.delete_object(key).await
    }
    async fn list_objects(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<ListPage, StoreError> {
        self.call(
            Op::List,
            None,
            prefix,
            self.inner.list_objects(prefix, cursor, limit),
        )
        .await
    }
    async fn create_multipart_upload(
        &self,
        request: CreateMultipartRequest,
    ) -> Result<String, StoreError> {
        let key = request.key.clone();
        self.call(
            Op::Create,
            None,
            &key,
            self.inner.create_multipart_upload(request),
        )
        .await
    }
    async fn upload_part(&self, request: UploadPartRequest) -> Result<UploadedPart, StoreError> {
        let key = request.key.clone();
        self.call(
            Op::UploadPart,
            Some(request.part_number),
            &key,
            self.inner.upload_part(request),
        )
        .await
    }
    async fn copy_object(&self, request: CopyObjectRequest) -> Result<PutOutput, StoreError> {
        let key = request.key.clone();
        self.call(Op::Copy, None, &key, self.inner.copy_object(request))
            .await
    }
    async fn upload_part_copy(&self, request: CopyPartRequest) -> Result<UploadedPart, StoreError> {
        let key = request.key.clone();
        self.call(
            Op::UploadPart,
            Some(request.part_number),
            &key,
            self.inner.upload_part_copy(request),
        )
        .await
    }
    async fn complete_multipart_upload(
        &self,
        request: CompleteMultipartRequest,
    ) -> Result<PutOutput, StoreError> {
        let key = request.key.clone();
        self.call(
            Op::Complete,
            None,
            &key,
            self.inner.complete_multipart_upload(request),
        )
        .await
    }
    async fn abort_multipart_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.call(
            Op::Abort,
            None,
            key,
            self.inner.abort_multipart_upload(key, upload_id),
        )
        .await
    }
    async fn list_parts(
        &self,
        key: &str,
        upload_id: &str,
    ) -> Result<Vec<UploadedPart>, StoreError> {
        self.inner.list_parts(key, upload_id).await
    }
    async fn check_upload(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.inner.check_upload(key, upload_id).await
    }
    async fn list_multipart_uploads(
        &self,
        prefix: &str,
    ) -> Result<Vec<MultipartUploadInfo>, StoreError> {
        self.inner.list_multipart_uploads(prefix).await
    }
}
