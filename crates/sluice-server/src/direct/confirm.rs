//! Confirming direct uploads the bucket finishes without the gateway. A
//! browser's form POST, a multipart upload it completes with a URL the gateway
//! signed (`POST /s3/sign`) and every object it stores with temporary
//! credentials (`GET /s3/sts`) never tell the gateway they finished. So what
//! was signed is recorded under `_sluice/direct/pending/` (the key, or for
//! credentials the prefix they are confined to; the owner, size limit, expiry
//! and the kind of upload), and every `direct.confirm_interval` each gateway
//! looks for those keys in the bucket (a prefix is listed). An object that
//! showed up is claimed (a conditional write of the record, so of several
//! gateways one goes on), checked against the size limit and put through the
//! completion point (`upload.completed` of the record's kind).
//!
//! S3 cannot make a POST policy single-use: until it expires it can store its
//! key again, replacing the object. So a confirmed record stays, holding the
//! ETag it announced, and is watched until its policy's lifetime (plus one
//! more, for a POST started just before) is over: an object with another ETag
//! is announced as well. Every object a policy made has its event. A record
//! whose policy expired an `expires` ago is dropped, with or without an
//! object (an unused signature: that upload never happened).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use futures::TryStreamExt;
use serde::{Deserialize, Serialize};
use sluice_store::{Metadata, ObjectMeta, ObjectStore, PutRequest, StoreError, WriteCondition};

use crate::AppState;
use sluice_upload::{Intent, Making, Origin, UploadKind, UploadOutcome};

pub const PENDING: &str = sluice_store::reserved_key!("direct/pending/");

/// How far the store's clock may be behind the gateway's.
const CLOCK_SKEW: Duration = Duration::from_secs(60);

/// Records looked at per pass.
const PER_PASS: usize = 1000;

/// How long a gateway holds a record it is confirming: long enough for the
/// few store requests a confirmation makes, short enough that an upload whose
/// gateway died while confirming it is announced within seconds of another
/// look. A confirmation slower than this may be repeated by another gateway;
/// it announces the same event (same intent, same id), which receivers
/// de-duplicate as every redelivery.
const CLAIM: Duration = Duration::from_secs(10);

/// What a record watches for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Watched {
    /// One key (a form POST, a multipart completion).
    Key(String),
    /// Every key under a prefix (temporary credentials confined to it).
    Prefix(String),
}

/// An upload that was signed and is looked for in the bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    /// The key, or with `prefix` the prefix whose keys are watched.
    pub key: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefix: bool,
    /// How the objects came (`UploadKind::as_str`; a form POST when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    pub owner: Option<String>,
    pub max_size: u64,
    pub content_type: Option<String>,
    pub metadata: Metadata,
    /// When the policy was signed (seconds since the epoch): an object older
    /// than that (a key the hook chose that was already taken) is not the upload.
    #[serde(default)]
    pub signed_at: u64,
    /// When the signed policy stops working (seconds since the epoch).
    pub expires_at: u64,
    /// A gateway is confirming it until then (seconds since the epoch).
    pub claimed_until: u64,
    /// The ETag of the object last announced for a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub announced_etag: Option<String>,
    /// The ETags last announced under a prefix, by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub announced: BTreeMap<String, String>,
}

impl Pending {
    /// A record of `kind` for `watched`, signed now, good until `expires_at`.
    pub fn new(
        kind: UploadKind,
        watched: Watched,
        owner: Option<String>,
        max_size: u64,
        expires_at: SystemTime,
    ) -> Pending {
        let (key, prefix) = match watched {
            Watched::Key(key) => (key, false),
            Watched::Prefix(prefix) => (prefix, true),
        };
        Pending {
            key,
            prefix,
            kind: Some(kind.as_str().to_owned()),
            owner,
            max_size,
            content_type: None,
            metadata: Metadata::new(),
            signed_at: now(),
            expires_at: expires_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            claimed_until: 0,
            announced_etag: None,
            announced: BTreeMap::new(),
        }
    }

    fn kind(&self) -> UploadKind {
        self.kind
            .as_deref()
            .and_then(UploadKind::from_name)
            .unwrap_or(UploadKind::DirectPost)
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn encode(pending: &Pending) -> Bytes {
    Bytes::from(serde_json::to_vec(pending).expect("records serialise"))
}

/// Records a signed upload before its signature is handed out.
pub async fn record(store: &Arc<dyn ObjectStore>, pending: &Pending) -> Result<(), StoreError> {
    record_as(store, &uuid::Uuid::new_v4().to_string(), pending).await
}

/// Records a signed upload under a name of its own (`{PENDING}{name}`),
/// once: signing the same thing again (a multipart upload's completion,
/// asked twice) finds its record there and leaves it as it is, so the object
/// has one record and one event id.
pub async fn record_as(
    store: &Arc<dyn ObjectStore>,
    name: &str,
    pending: &Pending,
) -> Result<(), StoreError> {
    let mut request = PutRequest::new(format!("{PENDING}{name}"), encode(pending));
    request.content_type = Some("application/json".into());
    request.condition = Some(WriteCondition::IfNoneMatch);
    match store.put_object(request).await {
        Ok(_) | Err(StoreError::PreconditionFailed) => Ok(()),
        Err(e) => Err(e),
    }
}

async fn read(
    store: &Arc<dyn ObjectStore>,
    name: &str,
) -> Result<Option<(Pending, String)>, StoreError> {
    let output = match store.get_object(name, None).await {
        Ok(output) => output,
        Err(StoreError::NoSuchKey { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let etag = output.meta.etag.clone();
    let bytes: BytesMut = output.body.try_collect().await?;
    match serde_json::from_slice(&bytes) {
        Ok(pending) => Ok(Some((pending, etag))),
        Err(e) => {
            tracing::warn!(name, error = %e, "dropping an unreadable direct-upload record");
            store.delete_object(name).await?;
            Ok(None)
        }
    }
}

/// What one look at a record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Confirmed,
    /// Announced earlier and unchanged; the policy may still be used again.
    Watching,
    /// The object is larger than was allowed: removed, no event.
    Oversized,
    /// The policy's lifetime and grace are over: the record is gone.
    Expired,
    /// Not there yet, or another gateway has it.
    Waiting,
}

/// One pass over the pending records; what each came to.
pub async fn pass(state: &AppState) -> Result<Vec<Outcome>, StoreError> {
    let Some(direct) = &state.direct else {
        return Ok(Vec::new());
    };
    let grace = direct.settings.expires.as_secs();
    // 1,000 records a pass, going on where the last pass stopped, so every
    // record is looked at however many there are.
    let cursor = direct.confirm_cursor.lock().expect("cursor lock").clone();
    let page = state
        .store
        .list_objects(PENDING, cursor.as_deref(), PER_PASS)
        .await?;
    *direct.confirm_cursor.lock().expect("cursor lock") = page.next_cursor.clone();
    let mut outcomes = Vec::with_capacity(page.objects.len());
    for entry in page.objects {
        let outcome = match look(state, &entry.key, grace).await {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::warn!(record = entry.key, error = %e, "could not confirm a direct upload");
                Outcome::Waiting
            }
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

async fn look(state: &AppState, name: &str, grace: u64) -> Result<Outcome, StoreError> {
    let store = &state.store;
    let Some((mut pending, etag)) = read(store, name).await? else {
        return Ok(Outcome::Waiting);
    };
    let now = now();
    if pending.claimed_until > now {
        return Ok(Outcome::Waiting);
    }
    let over = now > pending.expires_at + grace;
    let found = match pending.prefix {
        false => found_at_key(store.as_ref(), &pending).await?,
        true => found_under_prefix(store.as_ref(), &pending).await?,
    };
    if found.is_empty() {
        if over {
            store.delete_object(name).await?;
            return Ok(Outcome::Expired);
        }
        let announced = pending.announced_etag.is_some() || !pending.announced.is_empty();
        return Ok(match announced {
            true => Outcome::Watching,
            false => Outcome::Waiting,
        });
    }
    pending.claimed_until = now + CLAIM.as_secs();
    let mut claim = PutRequest::new(name, encode(&pending));
    claim.condition = Some(WriteCondition::IfMatch(etag));
    let mut claimed = match store.put_object(claim).await {
        Ok(written) => written.etag,
        Err(StoreError::PreconditionFailed) => return Ok(Outcome::Waiting),
        Err(e) => return Err(e),
    };
    let mut outcome = Outcome::Confirmed;
    for object in found {
        if object.size > pending.max_size {
            tracing::warn!(
                key = object.key,
                size = object.size,
                limit = pending.max_size,
                "a direct upload is larger than was allowed; removing it"
            );
            store.delete_object(&object.key).await?;
            if !pending.prefix {
                store.delete_object(name).await?;
                return Ok(Outcome::Oversized);
            }
            outcome = Outcome::Oversized;
            continue;
        }
        let (key, etag) = (object.key.clone(), object.etag.clone());
        if let Err(e) = announce(state, name, &pending, object).await {
            tracing::warn!(key, error = %e, "could not record a direct upload's completion; will retry");
            return Ok(Outcome::Waiting);
        }
        match pending.prefix {
            false => pending.announced_etag = Some(etag),
            true => {
                // Written down at once: a later object's failure does not
                // make this one announced again.
                pending.announced.insert(key, etag);
                let mut step = PutRequest::new(name, encode(&pending));
                step.condition = Some(WriteCondition::IfMatch(claimed.clone()));
                claimed = match store.put_object(step).await {
                    Ok(written) => written.etag,
                    Err(StoreError::PreconditionFailed) => return Ok(Outcome::Waiting),
                    Err(e) => return Err(e),
                };
            }
        }
    }
    if over {
        store.delete_object(name).await?;
        return Ok(outcome);
    }
    pending.claimed_until = 0;
    let mut watch = PutRequest::new(name, encode(&pending));
    watch.condition = Some(WriteCondition::IfMatch(claimed));
    match store.put_object(watch).await {
        // Lost only if the claim ran out meanwhile: another gateway's look
        // then finds the same intent and announces nothing twice.
        Ok(_) | Err(StoreError::PreconditionFailed) => Ok(outcome),
        Err(e) => Err(e),
    }
}

/// The object at a record's key, if it is new: not the one announced last,
/// not older than the signature.
async fn found_at_key(
    store: &dyn ObjectStore,
    pending: &Pending,
) -> Result<Vec<ObjectMeta>, StoreError> {
    let object = match store.head_object(&pending.key).await {
        Ok(object) => object,
        Err(StoreError::NoSuchKey { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let announced = pending
        .announced_etag
        .as_deref()
        .is_some_and(|etag| etag.trim_matches('"') == object.etag.trim_matches('"'));
    let fresh = !announced && made_since_signed(object.last_modified, pending);
    Ok(if fresh { vec![object] } else { Vec::new() })
}

/// Objects under a record's prefix that are new: not announced with their
/// ETag, not older than the credentials.
async fn found_under_prefix(
    store: &dyn ObjectStore,
    pending: &Pending,
) -> Result<Vec<ObjectMeta>, StoreError> {
    let mut found = Vec::new();
    let mut cursor = None;
    loop {
        let page = store
            .list_objects(&pending.key, cursor.as_deref(), PER_PASS)
            .await?;
        for entry in page.objects {
            let announced = pending.announced.get(&entry.key) == Some(&entry.etag);
            if announced || !made_since_signed(entry.last_modified, pending) {
                continue;
            }
            match store.head_object(&entry.key).await {
                Ok(object) => found.push(object),
                Err(StoreError::NoSuchKey { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        match page.next_cursor {
            Some(next) if found.len() < PER_PASS => cursor = Some(next),
            _ => return Ok(found),
        }
    }
}

/// Clocks of store and gateway may differ a little.
fn made_since_signed(modified: SystemTime, pending: &Pending) -> bool {
    let modified = modified
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    modified + CLOCK_SKEW.as_secs() >= pending.signed_at
}

/// Puts one object the record watched for through the completion point.
async fn announce(
    state: &AppState,
    name: &str,
    pending: &Pending,
    object: ObjectMeta,
) -> Result<(), StoreError> {
    let origin = Origin {
        kind: pending.kind(),
        tenant: pending.owner.clone(),
        content_type: object.content_type.or_else(|| pending.content_type.clone()),
        metadata: object.metadata,
        ..Origin::default()
    };
    // The record's name and the object's ETag (and key, under a prefix) make
    // the intent's, so a retried confirmation has one event, and each object
    // the record saw has its own.
    let nonce = match pending.prefix {
        false => nonce(name, &object.etag),
        true => nonce(&format!("{name}\n{}", object.key), &object.etag),
    };
    let intent = Intent::new(
        &origin,
        &object.key,
        object.size,
        object.checksum,
        Making::Put { nonce },
    );
    let outcome = UploadOutcome {
        key: object.key,
        size: object.size,
        etag: object.etag,
        checksum: object.checksum,
        parts: 0,
    };
    state.completion.made_outside(&intent, &outcome).await
}

/// The record name of a multipart upload's completion: the same for every
/// signature of it.
pub fn upload_record_name(key: &str, upload_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(key.as_bytes())
        .chain_update([0])
        .chain_update(upload_id.as_bytes())
        .finalize();
    format!("upload-{}", hex::encode(&digest[..16]))
}

/// One object's intent nonce: from the record's name and the object's ETag.
fn nonce(record: &str, etag: &str) -> u128 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(record.as_bytes())
        .chain_update([0])
        .chain_update(etag.trim_matches('"').as_bytes())
        .finalize();
    u128::from_be_bytes(digest[..16].try_into().expect("a SHA-256 has 16 bytes"))
}

/// Confirms pending direct uploads every `direct.confirm_interval`.
pub fn spawn(state: AppState) -> Option<tokio::task::JoinHandle<()>> {
    let interval = state.direct.as_ref()?.settings.confirm_interval;
    Some(tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            if let Err(e) = pass(&state).await {
                tracing::warn!(error = %e, "could not list pending direct uploads");
            }
        }
    }))
}
