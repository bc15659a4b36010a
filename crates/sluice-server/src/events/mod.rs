//! Upload events: what the one completion point (and a tus termination) tells
//! the application, durably and at least once.
//!
//! [`Events::record`] writes one outbox entry per configured endpoint into the
//! store (under `_sluice/events/pending/`) before the client gets its answer; the
//! [`delivery`] worker of every gateway on the bucket claims entries with
//! conditional writes (like the tus lock), POSTs them signed ([`signature`]),
//! retries with exponential backoff until `events.retry_for` has passed since
//! the event, then moves the entry to `_sluice/events/failed/`. Every event has a
//! unique id; a receiver de-duplicates by it. docs/EVENTS.md is the receiver's
//! view.

pub mod delivery;
pub mod outbox;
pub mod signature;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sluice_store::ObjectStore;

use crate::metrics::Metrics;

/// `[events]`: where events go and how hard the gateway tries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Upload events")]
pub struct EventSettings {
    /// POST signed upload events (upload.completed, upload.terminated) to URL;
    /// repeat or separate with commas; see docs/EVENTS.md. `serve` delivers
    /// them; `ingest` and `janitor` put theirs in the store's outbox for the
    /// gateways on the store to deliver [default: no events].
    #[arg(id = "events.urls", long = "event-url", env = "SLUICE_EVENT_URL", value_name = "URL", value_delimiter = ',', value_parser = crate::values::http_url)]
    pub urls: Vec<String>,
    /// The secret in FILE events are signed with (HMAC-SHA256; at least 32 bytes;
    /// required with --event-url).
    #[arg(
        id = "events.secret_file",
        long = "event-secret-file",
        env = "SLUICE_EVENT_SECRET_FILE",
        value_name = "FILE"
    )]
    pub secret_file: Option<PathBuf>,
    /// How long an event is retried before it is given up on and kept under
    /// _sluice/events/failed/.
    #[arg(id = "events.retry_for", long = "event-retry-for", env = "SLUICE_EVENT_RETRY_FOR", value_name = "DURATION", default_value = "24h", value_parser = crate::values::duration_in(std::time::Duration::ZERO, std::time::Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub retry_for: Duration,
    /// How long one delivery attempt may take (a gateway's delivery).
    #[arg(id = "events.timeout", long = "event-timeout", env = "SLUICE_EVENT_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = crate::values::duration_in(std::time::Duration::from_millis(1), std::time::Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// How often the outbox is scanned for events that are due (a gateway's
    /// delivery).
    #[arg(id = "events.poll_interval", long = "event-poll-interval", env = "SLUICE_EVENT_POLL_INTERVAL", value_name = "DURATION", default_value = "1s", value_parser = crate::values::duration_in(std::time::Duration::from_millis(1), std::time::Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// How often intents left by interrupted completions are reconciled (turned
    /// into events, or dropped when their object cannot come).
    #[arg(id = "events.reconcile_interval", long = "event-reconcile-interval", env = "SLUICE_EVENT_RECONCILE_INTERVAL", value_name = "DURATION", default_value = "30s", value_parser = crate::values::duration_in(std::time::Duration::from_millis(1), std::time::Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub reconcile_interval: Duration,
    /// How old an intent must be before a reconciliation settles it (younger
    /// ones belong to completions still running).
    #[arg(id = "events.reconcile_after", long = "event-reconcile-after", env = "SLUICE_EVENT_RECONCILE_AFTER", value_name = "DURATION", default_value = "30s", value_parser = crate::values::duration_in(std::time::Duration::ZERO, std::time::Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub reconcile_after: Duration,
}

impl EventSettings {
    /// Checks the settings of a gateway with event URLs and reads the secret
    /// (at start-up, before anything is opened).
    pub fn check(&self) -> Result<Vec<u8>, EventConfigError> {
        let fail = |key, reason: String| EventConfigError { key, reason };
        for url in &self.urls {
            let parsed: Result<http::Uri, _> = url.parse();
            match parsed {
                Ok(uri)
                    if matches!(uri.scheme_str(), Some("http" | "https"))
                        && uri.host().is_some() => {}
                _ => {
                    return Err(fail(
                        "events.urls",
                        format!("{url:?} is not an http(s) URL"),
                    ))
                }
            }
        }
        if self.timeout.is_zero() || self.poll_interval.is_zero() {
            return Err(fail(
                "events.timeout",
                "timeout and poll_interval must be above 0".into(),
            ));
        }
        if self.reconcile_interval.is_zero() {
            return Err(fail(
                "events.reconcile_interval",
                "must be above 0 (intents of interrupted completions would never become events)"
                    .into(),
            ));
        }
        let path = self.secret_file.as_deref().ok_or_else(|| {
            fail(
                "events.secret_file",
                "events are signed: give a secret file (--event-secret-file)".into(),
            )
        })?;
        crate::auth::read_secret("events.secret_file", path)
            .map_err(|e| fail("events.secret_file", e.reason))
    }
}

impl Default for EventSettings {
    fn default() -> Self {
        sluice_upload::defaults()
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventType {
    #[serde(rename = "upload.completed")]
    UploadCompleted,
    #[serde(rename = "upload.terminated")]
    UploadTerminated,
}

/// One event, as POSTed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// `evt_` and 32 hex digits; the same on every delivery of this event.
    pub id: String,
    #[serde(rename = "type")]
    pub kind: EventType,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub data: EventData,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventData {
    /// The object's key (for a terminated upload: the key it would have had).
    pub key: String,
    pub size: u64,
    pub etag: Option<String>,
    /// `algorithm:base64`, as in `x-sluice-checksum`.
    pub checksum: Option<String>,
    pub content_type: Option<String>,
    pub metadata: BTreeMap<String, String>,
    /// The uploader's tenant, when the gateway authenticates.
    pub tenant: Option<String>,
    /// `put`, `form`, `tus_patch`, `tus_creation`, `tus_concatenation`,
    /// `tus_recovered`, `resumable_creation`, `resumable_append`, ... (see
    /// `UploadKind::as_str`); `tus_terminated` or `resumable_cancelled` for an
    /// upload its client deleted.
    pub upload_kind: String,
    /// The tus upload id, for resumable uploads.
    pub upload_id: Option<String>,
}

impl Event {
    /// An event whose id and time are given (the same on every write of it).
    pub fn with_id(id: String, kind: EventType, at_ms: u64, data: EventData) -> Event {
        let at = time::OffsetDateTime::UNIX_EPOCH + time::Duration::milliseconds(at_ms as i64);
        Event {
            id,
            kind,
            created_at: at
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            data,
        }
    }

    /// A resumable upload cancelled by its client before it finished: one id
    /// for the upload, however often a termination of it is recorded (one
    /// whose removal failed, tried again by its client).
    pub fn terminated(record: &sluice_resumable::UploadRecord) -> Event {
        let hex = digest_hex(&[b"terminated", record.id().as_bytes()], 16);
        Event::with_id(
            format!("evt_{hex}"),
            EventType::UploadTerminated,
            crate::events::outbox::now_ms(),
            EventData {
                key: record.key.clone(),
                size: record.upload.offset,
                etag: None,
                checksum: None,
                content_type: record.content_type.clone(),
                metadata: BTreeMap::new(),
                tenant: record.owner.clone(),
                upload_kind: match record.protocol {
                    sluice_resumable::Protocol::Tus => "tus_terminated",
                    sluice_resumable::Protocol::IetfDraft => "resumable_cancelled",
                }
                .into(),
                upload_id: Some(record.id().to_owned()),
            },
        )
    }
}

/// The first `bytes` bytes of the SHA-256 of `parts` joined by 0 bytes, in
/// hex: the stable names of events, intents, outbox entries and endpoints.
pub fn digest_hex(parts: &[&[u8]], bytes: usize) -> String {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    for (n, part) in parts.iter().enumerate() {
        if n > 0 {
            hasher.update([0]);
        }
        hasher.update(part);
    }
    hasher.finalize()[..bytes]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Why events cannot be set up; names the setting.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct EventConfigError {
    pub key: &'static str,
    pub reason: String,
}

/// The gateway's events: the outbox and what delivery needs.
#[derive(Clone)]
pub struct Events {
    inner: Option<Arc<EventsInner>>,
}

struct EventsInner {
    outbox: outbox::Outbox,
    settings: EventSettings,
    secret: Vec<u8>,
    metrics: Metrics,
    /// Wakes the local worker when an entry is written.
    written: tokio::sync::Notify,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field(
                "urls",
                &self.inner.as_ref().map(|i| i.settings.urls.clone()),
            )
            .finish()
    }
}

impl Events {
    /// Events for `settings` on `store` (the gateway's one store handle); none
    /// without URLs. Reads the secret file now.
    pub fn new(
        settings: &EventSettings,
        store: Arc<dyn ObjectStore>,
        metrics: Metrics,
    ) -> Result<Events, EventConfigError> {
        if settings.urls.is_empty() {
            return Ok(Events { inner: None });
        }
        let secret = settings.check()?;
        Ok(Events {
            inner: Some(Arc::new(EventsInner {
                outbox: outbox::Outbox::new(store),
                settings: settings.clone(),
                secret,
                metrics,
                written: tokio::sync::Notify::new(),
            })),
        })
    }

    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// The settings, when events are on.
    pub fn settings(&self) -> Option<&EventSettings> {
        self.inner.as_ref().map(|inner| &inner.settings)
    }

    /// A short tag of where these events go (the endpoint URLs, in any
    /// order), when events are on: an intent carries its writer's, so that a
    /// reconciliation sends an event only where its writer would have.
    pub fn destination_tag(&self) -> Option<String> {
        let settings = self.settings()?;
        let mut urls: Vec<&[u8]> = settings.urls.iter().map(|u| u.as_bytes()).collect();
        urls.sort_unstable();
        urls.dedup();
        Some(digest_hex(&urls, 6))
    }

    /// Writes `event` into the outbox, one entry per endpoint, each under a
    /// name fixed by the event (written again, it is not written twice);
    /// returns once every entry is stored.
    pub async fn record(&self, event: &Event) -> Result<(), sluice_store::StoreError> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let give_up_at_ms = outbox::now_ms() + inner.settings.retry_for.as_millis() as u64;
        for url in &inner.settings.urls {
            inner.outbox.add(event, url, give_up_at_ms).await?;
        }
        inner.metrics.event_recorded();
        inner.written.notify_one();
        Ok(())
    }

    /// Starts this gateway's delivery worker (none without events).
    pub fn spawn_delivery(&self) -> Option<tokio::task::JoinHandle<()>> {
        let inner = self.inner.clone()?;
        Some(tokio::spawn(delivery::run(inner)))
    }
}
