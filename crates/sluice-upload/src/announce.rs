//! Announcing the objects the engine makes. An upload that carries an
//! [`Origin`] (who started it, by which route, with what metadata) is
//! announced to the engine's one [`Announcer`] from inside the task that makes
//! its object, a task no caller can cancel: first [`Announcer::intend`], a
//! durable note written *before* the object is made (when it fails, nothing is
//! made and the upload fails), then [`Announcer::made`] once the store said the
//! object is there. A process killed between the two leaves the intent behind
//! for the announcer's reconciliation to settle: the object exists (announce
//! it) or it never will (drop the intent). So every object the engine makes
//! for an origin is announced, whoever goes away meanwhile.
//!
//! The engine knows nothing of what an announcement becomes (metrics, logs,
//! events); the gateway's completion point implements the trait.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use sluice_store::{Checksum, StoreError};

use crate::outcome::UploadOutcome;

/// How an object came into being.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum UploadKind {
    /// `PUT /v1/objects/{key}`.
    #[default]
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
    /// A creation of the IETF resumable-upload draft that carried every byte.
    ResumableCreation,
    /// An append of the IETF resumable-upload draft that brought the last byte.
    ResumableAppend,
    /// A browser's form POST straight to the bucket, seen there afterwards.
    DirectPost,
    /// A multipart upload straight to the bucket, completed through the gateway
    /// (or, signed one request at a time, seen in the bucket afterwards).
    DirectMultipart,
    /// An object a browser stored with temporary credentials, seen in the
    /// bucket afterwards.
    DirectCredentials,
    /// A batch of records of a stream (`POST /v1/streams/NAME`).
    StreamBatch,
    /// An object fetched from a URL by the gateway (`POST /v1/imports`).
    Import,
}

impl UploadKind {
    pub const ALL: [UploadKind; 13] = [
        UploadKind::Put,
        UploadKind::Form,
        UploadKind::TusPatch,
        UploadKind::TusCreation,
        UploadKind::TusConcatenation,
        UploadKind::TusRecovered,
        UploadKind::ResumableCreation,
        UploadKind::ResumableAppend,
        UploadKind::DirectPost,
        UploadKind::DirectMultipart,
        UploadKind::DirectCredentials,
        UploadKind::StreamBatch,
        UploadKind::Import,
    ];

    /// The name in events, metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            UploadKind::Put => "put",
            UploadKind::Form => "form",
            UploadKind::TusPatch => "tus_patch",
            UploadKind::TusCreation => "tus_creation",
            UploadKind::TusConcatenation => "tus_concatenation",
            UploadKind::TusRecovered => "tus_recovered",
            UploadKind::ResumableCreation => "resumable_creation",
            UploadKind::ResumableAppend => "resumable_append",
            UploadKind::DirectPost => "direct_post",
            UploadKind::DirectMultipart => "direct_multipart",
            UploadKind::DirectCredentials => "direct_credentials",
            UploadKind::StreamBatch => "stream_batch",
            UploadKind::Import => "import",
        }
    }

    /// The kind named `name` (see [`UploadKind::as_str`]).
    pub fn from_name(name: &str) -> Option<UploadKind> {
        UploadKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

/// Where an upload came from, carried from its begin to its completion.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// How it came.
    pub kind: UploadKind,
    /// The uploader's tenant, when the gateway authenticates.
    pub tenant: Option<String>,
    /// The protocol's upload id (tus, a direct multipart upload).
    pub upload_id: Option<String>,
    pub content_type: Option<String>,
    /// What the uploader said about the object (metadata headers, tus metadata).
    pub metadata: BTreeMap<String, String>,
    /// Metadata known only once the source ended (a record batch's totals),
    /// merged over `metadata` when the object is about to be made.
    pub late_metadata: Option<LateMetadata>,
    /// The object's content type and metadata are read from the store once it
    /// is made (an upload whose bytes never passed through here).
    pub described_by_store: bool,
}

/// Metadata filled in while an upload runs; see [`Origin::late_metadata`].
pub type LateMetadata = Arc<Mutex<BTreeMap<String, String>>>;

impl Origin {
    pub fn new(kind: UploadKind) -> Origin {
        Origin {
            kind,
            ..Origin::default()
        }
    }

    /// This origin with its late metadata merged in.
    fn settled(&self) -> Origin {
        let mut settled = self.clone();
        if let Some(late) = settled.late_metadata.take() {
            let late = late.lock().unwrap_or_else(|e| e.into_inner());
            settled
                .metadata
                .extend(late.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        settled
    }
}

/// How the object is being made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Making {
    /// One PutObject; `nonce` tells this attempt from any other at the key.
    Put { nonce: u128 },
    /// The completion of this multipart upload (the same intent however many
    /// requests or processes try to complete it).
    Multipart { upload_id: String },
    /// Stored already, the object joins the table whose root key is `table`
    /// by a commit its writer makes next: it comes into being for the table's
    /// readers once the table's log holds it (a stored file no commit takes
    /// is never announced).
    TableCommit { table: String },
}

/// An object about to be made (or found made, after a crash).
#[derive(Debug, Clone)]
pub struct Intent {
    pub origin: Origin,
    pub key: String,
    pub size: u64,
    /// The whole object's checksum, when known before it is made.
    pub checksum: Option<Checksum>,
    pub making: Making,
    /// When the intent was formed.
    pub at: SystemTime,
}

impl Intent {
    pub fn new(
        origin: &Origin,
        key: &str,
        size: u64,
        checksum: Option<Checksum>,
        making: Making,
    ) -> Intent {
        Intent {
            origin: origin.settled(),
            key: key.to_owned(),
            size,
            checksum,
            making,
            at: SystemTime::now(),
        }
    }
}

/// Who hears of every object the engine makes for an origin.
#[async_trait::async_trait]
pub trait Announcer: Send + Sync {
    /// Notes durably that the object may come to be; the object is made only
    /// after this returned Ok.
    async fn intend(&self, intent: &Intent) -> Result<(), StoreError>;

    /// The object is there. Never fails the upload: what cannot be recorded now
    /// is left to the intent's reconciliation.
    async fn made(&self, intent: &Intent, made: &UploadOutcome);

    /// The store refused to make the object (a definite answer, not a lost
    /// one): the intent will come to nothing.
    async fn abandoned(&self, _intent: &Intent) {}

    /// The object was found made by an earlier attempt whose answer was lost
    /// (a request stopped, a process killed), which wrote its intent before:
    /// announced now if that intent is still owed its announcement.
    async fn found(&self, intent: &Intent, made: &UploadOutcome);
}

/// The announcement of one object: the intent before, `made` after.
pub(crate) struct Announcement {
    announcer: Arc<dyn Announcer>,
    intent: Intent,
}

impl Announcement {
    /// The announcement of `intent`, when there is an origin and an announcer.
    pub(crate) fn of(
        announcer: Option<&Arc<dyn Announcer>>,
        origin: Option<&Arc<Origin>>,
        intent: impl FnOnce(&Origin) -> Intent,
    ) -> Option<Announcement> {
        Some(Announcement {
            announcer: announcer?.clone(),
            intent: intent(origin?),
        })
    }

    pub(crate) async fn intend(&self) -> Result<(), StoreError> {
        self.announcer.intend(&self.intent).await
    }

    pub(crate) async fn made(&self, outcome: &UploadOutcome) {
        self.announcer.made(&self.intent, outcome).await
    }

    /// After the attempts to make the object failed: when `definite` (the
    /// store refused, and no attempt before ended in a lost answer after
    /// which the object may be there), the intent is abandoned.
    pub(crate) async fn failed(&self, error: &crate::TransferError, definite: bool) {
        let refused = error.store_error().is_some_and(|e| !e.is_transient());
        if refused && definite {
            self.announcer.abandoned(&self.intent).await;
        }
    }
}

/// A random nonce for a single PutObject's intent.
pub(crate) fn put_nonce() -> u128 {
    rand::random()
}
