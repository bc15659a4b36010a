//! The one completion point. Every object that comes into being for an upload
//! is announced here by the engine, from inside the task that makes it (see
//! `sluice_upload::Announcer`): PUT, form, tus PATCH, creation-with-upload and
//! concatenation, direct multipart uploads, record batches, an upload the
//! janitor finished, and a completion found made after a crash. Direct form
//! POSTs, made by the browser, come through [`CompletionPoint::found`].
//!
//! With events on, it keeps the rule "an object that exists has its event, and
//! an event names an object that existed": an intent is written before the
//! object is made ([`intents`]); once it is made, the `upload.completed` event
//! goes to the outbox and the intent is removed. A gateway killed in between,
//! or an outbox write that failed, leaves the intent to [`reconcile`], which
//! every gateway runs at start-up and then periodically.
//!
//! [`Completion::of`] is the one place a completion record is built; metrics,
//! the log line and the event hang off it, never off a handler. A tus
//! termination is the point's one other entry (`upload.terminated`).

pub mod intents;
pub mod reconcile;

use std::collections::BTreeMap;

use sluice_store::{Checksum, ObjectStore, StoreError};
pub use sluice_upload::UploadKind;
use sluice_upload::{Intent, UploadOutcome};

use crate::events::{Event, EventData, EventType, Events};
use crate::metrics::Metrics;
use intents::{IntentRecord, Intents};

/// One object that came into being.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Completion {
    pub kind: UploadKind,
    pub key: String,
    pub size: u64,
    pub etag: String,
    /// The whole object's checksum, as the store verified it.
    pub checksum: Option<Checksum>,
    pub content_type: Option<String>,
    /// Object metadata (PUT's `x-sluice-meta-*`) or the tus upload's text metadata.
    pub metadata: BTreeMap<String, String>,
    /// The protocol's upload id (tus, direct multipart).
    pub upload_id: Option<String>,
    /// The uploader's tenant, when the gateway authenticates.
    pub owner: Option<String>,
    /// The intent it settles (the event's id is [`Completion::event_id`]).
    pub intent_id: String,
    /// When the intent was written (ms since the epoch).
    pub at_ms: u64,
}

/// What the store says of an object made.
pub struct Made<'a> {
    pub size: u64,
    pub etag: &'a str,
    pub checksum: Option<Checksum>,
    /// The stored content type and metadata, when the intent takes them from the store.
    pub described: Option<(Option<String>, BTreeMap<String, String>)>,
}

impl<'a> Made<'a> {
    pub fn from_outcome(outcome: &'a UploadOutcome) -> Made<'a> {
        Made {
            size: outcome.size,
            etag: &outcome.etag,
            checksum: outcome.checksum,
            described: None,
        }
    }
}

impl Completion {
    /// The completion of `intent`, made as `made` says: the one place a
    /// completion record is built.
    pub fn of(intent: &IntentRecord, made: &Made<'_>) -> Completion {
        let (content_type, metadata) = match (&made.described, intent.described_by_store) {
            (Some((content_type, metadata)), true) => (
                content_type.clone().or(intent.content_type.clone()),
                metadata.clone(),
            ),
            _ => (intent.content_type.clone(), intent.metadata.clone()),
        };
        Completion {
            kind: UploadKind::from_name(&intent.kind).unwrap_or_default(),
            key: intent.key.clone(),
            size: made.size,
            etag: made.etag.to_owned(),
            checksum: made.checksum.or(intent.checksum()),
            content_type,
            metadata,
            upload_id: intent.upload_id.clone(),
            owner: intent.tenant.clone(),
            intent_id: intent.id.clone(),
            at_ms: intent.at_ms,
        }
    }

    /// The id of its `upload.completed` event, from what the object is: its
    /// key and ETag, with the upload that made it: the protocol's upload id
    /// when there is one (a tus or direct upload, which many requests and
    /// gateways may finish), else the one request's intent (a PUT, a form
    /// file, a record batch). Every attempt at making or announcing the same
    /// object (a finishing request cut after the object was made and tried
    /// again through a new multipart upload, a reconciliation, a completion
    /// found after a crash) names one event; two requests that upload the
    /// same bytes to the same key are two uploads, and two events.
    pub fn event_id(&self) -> String {
        let (upload, id) = match &self.upload_id {
            Some(upload_id) => (&b"upload"[..], upload_id.as_bytes()),
            None => (&b"request"[..], self.intent_id.as_bytes()),
        };
        let etag = self.etag.trim_matches('"').as_bytes();
        let hex = crate::events::digest_hex(&[upload, id, self.key.as_bytes(), etag], 16);
        format!("evt_{hex}")
    }

    /// Its `upload.completed` event: the same id however often, and by
    /// whichever attempt, it is written.
    pub fn event(&self) -> Event {
        Event::with_id(
            self.event_id(),
            EventType::UploadCompleted,
            self.at_ms,
            EventData {
                key: self.key.clone(),
                size: self.size,
                etag: Some(self.etag.clone()),
                checksum: self.checksum.map(|c| c.to_string()),
                content_type: self.content_type.clone(),
                metadata: self.metadata.clone(),
                tenant: self.owner.clone(),
                upload_kind: self.kind.as_str().to_owned(),
                upload_id: self.upload_id.clone(),
            },
        )
    }
}

/// The one completion point: what every upload ends in.
#[derive(Clone)]
pub struct CompletionPoint {
    metrics: Metrics,
    events: Events,
    intents: Intents,
    /// The store handle, to read what the store says of an object.
    store: std::sync::Arc<dyn ObjectStore>,
}

impl std::fmt::Debug for CompletionPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionPoint")
            .field("events", &self.events)
            .finish()
    }
}

impl CompletionPoint {
    pub fn new(
        metrics: Metrics,
        events: Events,
        store: std::sync::Arc<dyn ObjectStore>,
    ) -> CompletionPoint {
        CompletionPoint {
            metrics,
            events,
            intents: Intents::new(store.clone()),
            store,
        }
    }

    /// The completion point of everything `engine` makes for an upload, with
    /// events as `settings` say: the engine announces to it from now on (the
    /// gateway's, and that of `sluice ingest` and `sluice janitor`).
    pub fn announcing_for(
        engine: &sluice_upload::Engine,
        settings: &crate::events::EventSettings,
        metrics: Metrics,
    ) -> Result<CompletionPoint, crate::events::EventConfigError> {
        let store: std::sync::Arc<dyn ObjectStore> = std::sync::Arc::new(engine.retrying_store());
        let events = Events::new(settings, store.clone(), metrics.clone())?;
        let point = CompletionPoint::new(metrics, events, store);
        engine.set_announcer(std::sync::Arc::new(point.clone()));
        Ok(point)
    }

    pub fn intents(&self) -> &Intents {
        &self.intents
    }

    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Counts and logs `completion`, writes its event and removes its intent.
    /// An error leaves the intent for the reconciliation.
    async fn record(&self, completion: &Completion) -> Result<(), StoreError> {
        if self.events.enabled() {
            self.events.record(&completion.event()).await?;
        }
        // Counted once its event is recorded: a completion recorded again
        // after a failed outbox write is counted once.
        self.metrics
            .upload_completed(completion.kind.as_str(), completion.size);
        tracing::info!(
            kind = completion.kind.as_str(),
            key = %completion.key,
            size = completion.size,
            upload_id = completion.upload_id.as_deref(),
            tenant = completion.owner.as_deref(),
            "upload completed"
        );
        if !self.events.enabled() {
            return Ok(());
        }
        self.intents.remove(&completion.intent_id).await
    }

    /// Announces an object made outside the engine (a direct form POST the
    /// gateway found in the bucket), as the engine announces its own: an
    /// error means its event is not recorded yet (the caller tries again).
    pub async fn made_outside(
        &self,
        intent: &Intent,
        outcome: &UploadOutcome,
    ) -> Result<(), StoreError> {
        let record = IntentRecord::of(intent);
        self.record(&Completion::of(&record, &Made::from_outcome(outcome)))
            .await
    }

    /// Records that a client cancelled its resumable upload before it finished.
    pub async fn terminated(
        &self,
        record: &sluice_resumable::UploadRecord,
    ) -> Result<(), StoreError> {
        tracing::info!(upload_id = record.id(), key = %record.key, "upload terminated");
        self.events.record(&Event::terminated(record)).await
    }

    /// The content type and metadata the store holds for `key`.
    async fn described(&self, key: &str) -> Option<(Option<String>, BTreeMap<String, String>)> {
        match self.store.head_object(key).await {
            Ok(meta) => Some((meta.content_type, meta.metadata.into_iter().collect())),
            Err(error) => {
                tracing::warn!(key, error = %sluice_store::error_chain(&error), "could not read an object's metadata for its event");
                None
            }
        }
    }
}

#[async_trait::async_trait]
impl sluice_upload::Announcer for CompletionPoint {
    async fn intend(&self, intent: &Intent) -> Result<(), StoreError> {
        if !self.events.enabled() {
            return Ok(());
        }
        let mut record = IntentRecord::of(intent);
        record.destination = self.events.destination_tag();
        self.intents.write(&record).await
    }

    async fn made(&self, intent: &Intent, outcome: &UploadOutcome) {
        let record = IntentRecord::of(intent);
        let mut made = Made::from_outcome(outcome);
        if record.described_by_store {
            made.described = self.described(&record.key).await;
        }
        let completion = Completion::of(&record, &made);
        if let Err(error) = self.record(&completion).await {
            tracing::warn!(
                key = %completion.key,
                intent = %completion.intent_id,
                error = %sluice_store::error_chain(&error),
                "the object is made; its event waits for the reconciliation"
            );
        }
    }

    async fn found(&self, intent: &Intent, outcome: &UploadOutcome) {
        if !self.events.enabled() {
            return self.made(intent, outcome).await;
        }
        // The intent says whether the event is still owed: gone, the earlier
        // attempt (or a reconciliation) recorded it.
        let id = IntentRecord::of(intent).id;
        let owed = match self.intents.get(&id).await {
            Ok(owed) => owed,
            Err(error) => {
                tracing::warn!(key = %intent.key, %id, error = %sluice_store::error_chain(&error), "could not read an intent; the reconciliation settles it");
                return;
            }
        };
        let Some(owed) = owed else {
            tracing::debug!(key = %intent.key, %id, "found made, its event recorded before");
            return;
        };
        let completion = Completion::of(&owed, &Made::from_outcome(outcome));
        if let Err(error) = self.record(&completion).await {
            tracing::warn!(key = %completion.key, %id, error = %sluice_store::error_chain(&error), "the object is made; its event waits for the reconciliation");
        }
    }

    async fn abandoned(&self, intent: &Intent) {
        if !self.events.enabled() {
            return;
        }
        let id = IntentRecord::of(intent).id;
        if let Err(error) = self.intents.remove(&id).await {
            tracing::debug!(key = %intent.key, %id, error = %sluice_store::error_chain(&error), "an abandoned intent stays for the reconciliation");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_upload::{Making, Origin};

    fn intent(kind: UploadKind, upload_id: Option<&str>, making: Making) -> IntentRecord {
        let mut origin = Origin::new(kind);
        origin.upload_id = upload_id.map(str::to_owned);
        IntentRecord::of(&Intent::new(&origin, "a/tus-98.bin", 3, None, making))
    }

    fn event_id(intent: &IntentRecord, etag: &str) -> String {
        let made = Made {
            size: 3,
            etag,
            checksum: None,
            described: None,
        };
        Completion::of(intent, &made).event().id
    }

    /// Issue 47: a tus upload whose finishing request was cut after its object
    /// was made, and finished again by a new request through a new multipart
    /// upload, was announced under two ids. An object's event id comes from
    /// what the object is (its upload, key and ETag), never from an attempt.
    #[test]
    fn an_objects_event_id_depends_on_the_object_not_the_attempt() {
        let multipart = |upload| Making::Multipart {
            upload_id: String::from(upload),
        };
        let put = |nonce| Making::Put { nonce };
        let tus = |making| intent(UploadKind::TusPatch, Some("u98"), making);
        let cases = [
            // (first attempt, its ETag, second attempt, its ETag, same id)
            (tus(multipart("m1")), "e", tus(multipart("m2")), "e", true),
            (tus(multipart("m1")), "e", tus(put(7)), "e", true),
            (tus(multipart("m1")), "e", tus(multipart("m1")), "f", false),
            (
                tus(multipart("m1")),
                "e",
                intent(UploadKind::TusPatch, Some("u99"), multipart("m1")),
                "e",
                false,
            ),
            // One PUT's attempts (its retries, its reconciliation) are one
            // event; two PUTs of the same bytes are two uploads.
            (
                intent(UploadKind::Put, None, put(1)),
                "e",
                intent(UploadKind::Put, None, put(1)),
                "e",
                true,
            ),
            (
                intent(UploadKind::Put, None, put(1)),
                "e",
                intent(UploadKind::Put, None, put(2)),
                "e",
                false,
            ),
        ];
        for (n, (first, first_etag, second, second_etag, same)) in cases.iter().enumerate() {
            let (a, b) = (event_id(first, first_etag), event_id(second, second_etag));
            assert_eq!(a == b, *same, "case {n}: {a} {b}");
            assert!(a.starts_with("evt_") && a.len() == 36, "{a}");
        }
    }
}
