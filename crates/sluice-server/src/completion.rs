//! The one completion point. Every way an object comes into being at the gateway
//! (PUT, form POST, tus PATCH, tus creation-with-upload, tus concatenation, and an
//! upload the janitor finished) ends in [`complete`], which turns what was stored
//! into one typed [`Completion`] record. Metrics, the log line and the
//! `upload.completed` event hang off it (a tus termination is its one other
//! entry: `upload.terminated`); handlers never count completions or write
//! events themselves. Reads, HEAD included, never reach it.

use std::collections::BTreeMap;

use sluice_store::Checksum;
use sluice_upload::UploadOutcome;

use crate::events::{Event, Events};
use crate::metrics::Metrics;

/// How an object came into being.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UploadKind {
    /// `PUT /v1/objects/{key}`.
    Put,
    /// One file part of `POST /v1/objects` (multipart/form-data).
    Form,
    /// A tus PATCH that brought the last byte.
    TusPatch,
    /// A tus creation (POST) that carried every byte, or an empty upload.
    TusCreation,
    /// A tus final upload made of partial uploads.
    TusConcatenation,
    /// A tus upload whose bytes were all in, finished by the janitor.
    TusRecovered,
    /// A browser's form POST straight to the bucket, seen there afterwards.
    DirectPost,
    /// A multipart upload straight to the bucket, completed through the gateway.
    DirectMultipart,
    /// A batch of records of a stream (`POST /v1/streams/NAME`).
    StreamBatch,
}

impl UploadKind {
    /// The label value in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            UploadKind::Put => "put",
            UploadKind::Form => "form",
            UploadKind::TusPatch => "tus_patch",
            UploadKind::TusCreation => "tus_creation",
            UploadKind::TusConcatenation => "tus_concatenation",
            UploadKind::TusRecovered => "tus_recovered",
            UploadKind::DirectPost => "direct_post",
            UploadKind::DirectMultipart => "direct_multipart",
            UploadKind::StreamBatch => "stream_batch",
        }
    }
}

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
    /// The tus upload id, for resumable uploads.
    pub upload_id: Option<String>,
    /// Who uploaded it, once the gateway authenticates (issue: tokens and tenants).
    pub owner: Option<String>,
}

impl Completion {
    /// A completion from what the engine stored; the caller fills in the rest.
    pub fn new(kind: UploadKind, outcome: &UploadOutcome) -> Completion {
        Completion {
            kind,
            key: outcome.key.clone(),
            size: outcome.size,
            etag: outcome.etag.clone(),
            checksum: outcome.checksum,
            content_type: None,
            metadata: BTreeMap::new(),
            upload_id: None,
            owner: None,
        }
    }

    /// A finished resumable upload's completion, from its record.
    pub fn resumable(
        kind: UploadKind,
        outcome: &UploadOutcome,
        record: &sluice_resumable::UploadRecord,
    ) -> Completion {
        let metadata = record
            .upload
            .metadata
            .0
            .keys()
            .filter_map(|k| Some((k.clone(), record.upload.metadata.text(k)?.to_owned())))
            .collect();
        Completion {
            content_type: record.content_type.clone(),
            metadata,
            upload_id: Some(record.id().to_owned()),
            owner: record.owner.clone(),
            ..Completion::new(kind, outcome)
        }
    }
}

/// The one completion point: what every upload ends in.
#[derive(Debug, Clone)]
pub struct CompletionPoint {
    metrics: Metrics,
    events: Events,
}

impl CompletionPoint {
    pub fn new(metrics: Metrics, events: Events) -> CompletionPoint {
        CompletionPoint { metrics, events }
    }

    /// Records that `completion` happened; returns once its event is in the
    /// outbox (the client is answered only then, so an event is never lost).
    pub async fn complete(&self, completion: &Completion) -> Result<(), sluice_store::StoreError> {
        self.metrics
            .upload_completed(completion.kind.as_str(), completion.size);
        tracing::info!(
            kind = completion.kind.as_str(),
            key = %completion.key,
            size = completion.size,
            upload_id = completion.upload_id.as_deref(),
            "upload completed"
        );
        self.events.record(&Event::completed(completion)).await
    }

    /// Records that a client cancelled its resumable upload before it finished.
    pub async fn terminated(
        &self,
        record: &sluice_resumable::UploadRecord,
    ) -> Result<(), sluice_store::StoreError> {
        tracing::info!(upload_id = record.id(), key = %record.key, "upload terminated");
        self.events.record(&Event::terminated(record)).await
    }
}
