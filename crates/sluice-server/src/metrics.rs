//! Every metric the gateway exports, in one place (names documented in
//! docs/METRICS.md), rendered in the Prometheus text format at `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use sluice_streams::{StatsSnapshot, StreamStats};
use sluice_upload::Engine;

/// Labels of store request metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    pub operation: &'static str,
    /// `ok` or the error kind (`throttled`, `no_such_key`, `transport`, ...).
    pub status: &'static str,
}

/// Labels of the adaptive concurrency limit.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PrefixLabels {
    /// The key's first path segment (empty for keys without one).
    pub prefix: String,
}

/// An engine counter mirrored into a Prometheus counter at scrape time.
#[derive(Default)]
struct Mirrored {
    counter: Counter,
    seen: AtomicU64,
}

impl Mirrored {
    fn sync(&self, total: u64) {
        let seen = self.seen.swap(total, Ordering::Relaxed);
        self.counter.inc_by(total.saturating_sub(seen));
    }
}

/// Labels of record stream metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StreamLabels {
    pub stream: String,
}

/// How an upload ended.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: &'static str,
}

/// The kind of a completed upload.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

/// The gateway's metrics. Cheap to clone; clones share the values. They hold
/// no reference to the engine: its figures are read when `/metrics` renders.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

struct Inner {
    registry: Registry,
    uploads_started: Counter,
    uploads_ended: Family<OutcomeLabels, Counter>,
    uploads_completed: Family<KindLabels, Counter>,
    completed_bytes: Counter,
    bytes_received: Counter,
    bytes_sent: Counter,
    store_seconds: Histogram,
    upload_seconds: Histogram,
    uploads_in_flight: Gauge,
    memory_in_use: Gauge,
    memory_idle_buffers: Gauge,
    memory_limit: Gauge,
    queue_length: Gauge,
    rejections: Counter,
    connections_open: Gauge,
    connections_refused: Counter,
    offenses: Counter,
    penalties: Counter,
    connections_penalized: Counter,
    connections_timed_out: Counter,
    tls_handshakes_failed: Counter,
    tls_certificate_expiry: Gauge,
    events_pending: Gauge,
    downloads_cut: Counter,
    small_patches_waited: Counter,
    small_patch_wait_seconds: Counter<f64, AtomicU64>,
    events_recorded: Counter,
    events_delivered: Counter,
    event_delivery_failures: Counter,
    events_failed: Counter,
    store_requests: Family<StoreLabels, Counter>,
    store_throttled: Counter,
    retries: Mirrored,
    stalls: Mirrored,
    budget_exhausted: Mirrored,
    retry_budget_tokens: Gauge,
    store_down: Gauge,
    store_down_total: Mirrored,
    concurrency_limits: Family<PrefixLabels, Gauge>,
    rate_limits: Family<PrefixLabels, Gauge>,
    part_seconds: Histogram,
    stream_ack_seconds: Family<StreamLabels, Histogram>,
    /// The streams' own counters, read at scrape time.
    streams: std::sync::Mutex<Vec<(String, Arc<StreamStats>)>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let inner = Inner {
            uploads_started: Counter::default(),
            uploads_ended: Family::default(),
            uploads_completed: Family::default(),
            completed_bytes: Counter::default(),
            bytes_received: Counter::default(),
            bytes_sent: Counter::default(),
            store_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 18)),
            upload_seconds: Histogram::new(exponential_buckets(0.005, 2.0, 18)),
            uploads_in_flight: Gauge::default(),
            memory_in_use: Gauge::default(),
            memory_idle_buffers: Gauge::default(),
            memory_limit: Gauge::default(),
            queue_length: Gauge::default(),
            rejections: Counter::default(),
            connections_open: Gauge::default(),
            connections_refused: Counter::default(),
            offenses: Counter::default(),
            penalties: Counter::default(),
            connections_penalized: Counter::default(),
            connections_timed_out: Counter::default(),
            tls_handshakes_failed: Counter::default(),
            tls_certificate_expiry: Gauge::default(),
            events_pending: Gauge::default(),
            downloads_cut: Counter::default(),
            small_patches_waited: Counter::default(),
            small_patch_wait_seconds: Counter::default(),
            events_recorded: Counter::default(),
            events_delivered: Counter::default(),
            event_delivery_failures: Counter::default(),
            events_failed: Counter::default(),
            store_requests: Family::default(),
            store_throttled: Counter::default(),
            retries: Mirrored::default(),
            stalls: Mirrored::default(),
            budget_exhausted: Mirrored::default(),
            retry_budget_tokens: Gauge::default(),
            store_down: Gauge::default(),
            store_down_total: Mirrored::default(),
            concurrency_limits: Family::default(),
            rate_limits: Family::default(),
            part_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 18)),
            stream_ack_seconds: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.001, 2.0, 18))
            }),
            streams: std::sync::Mutex::new(Vec::new()),
            registry: Registry::default(),
        };
        registry.register(
            "sluice_uploads_started",
            "Uploads accepted and started",
            inner.uploads_started.clone(),
        );
        registry.register(
            "sluice_uploads_ended",
            "Uploads that ended, by outcome: completed, failed (client or store error) or aborted (client gone, shutdown)",
            inner.uploads_ended.clone(),
        );
        registry.register(
            "sluice_uploads_completed",
            "Objects that came into being, by kind: put, form, tus_patch, tus_creation, tus_concatenation, tus_recovered, resumable_creation, resumable_append, direct_post, direct_multipart, direct_credentials, stream_batch, import (counted at the one completion point)",
            inner.uploads_completed.clone(),
        );
        registry.register(
            "sluice_completed_bytes",
            "Bytes of the objects counted in sluice_uploads_completed",
            inner.completed_bytes.clone(),
        );
        registry.register(
            "sluice_received_bytes",
            "Request body bytes received for uploads",
            inner.bytes_received.clone(),
        );
        registry.register(
            "sluice_sent_bytes",
            "Object body bytes sent to readers (GET)",
            inner.bytes_sent.clone(),
        );
        registry.register(
            "sluice_store_request_duration_seconds",
            "Time each store request took, whatever its outcome",
            inner.store_seconds.clone(),
        );
        registry.register(
            "sluice_upload_duration_seconds",
            "Time from admission to the stored object",
            inner.upload_seconds.clone(),
        );
        registry.register(
            "sluice_uploads_in_flight",
            "Uploads streaming now",
            inner.uploads_in_flight.clone(),
        );
        registry.register(
            "sluice_memory_budget_in_use_bytes",
            "Bytes of the engine's memory budget reserved",
            inner.memory_in_use.clone(),
        );
        registry.register(
            "sluice_memory_idle_buffer_bytes",
            "Bytes of part buffers kept for reuse (within the budget together with what is reserved)",
            inner.memory_idle_buffers.clone(),
        );
        registry.register(
            "sluice_memory_budget_bytes",
            "Size of the engine's memory budget",
            inner.memory_limit.clone(),
        );
        registry.register(
            "sluice_admission_queue_length",
            "Uploads waiting for a slot",
            inner.queue_length.clone(),
        );
        registry.register(
            "sluice_admission_rejections",
            "Uploads answered 503 because the queue was full or the wait too long",
            inner.rejections.clone(),
        );
        registry.register(
            "sluice_connections_open",
            "Client connections open",
            inner.connections_open.clone(),
        );
        registry.register(
            "sluice_connections_refused",
            "Client connections answered 503 and closed at limits.max_connections",
            inner.connections_refused.clone(),
        );
        registry.register(
            "sluice_offenses",
            "Requests refused as malformed, counted against their client's address (penalty.after_offenses)",
            inner.offenses.clone(),
        );
        registry.register(
            "sluice_penalties",
            "Times a client address was penalized for its offenses (penalty.duration)",
            inner.penalties.clone(),
        );
        registry.register(
            "sluice_connections_penalized",
            "Connections from penalized addresses: held unread, then answered 429 and closed (or closed at once past the hold limit)",
            inner.connections_penalized.clone(),
        );
        registry.register(
            "sluice_connections_timed_out",
            "Client connections closed before their first request was in, at limits.header_read_timeout",
            inner.connections_timed_out.clone(),
        );
        registry.register(
            "sluice_tls_handshakes_failed",
            "Connections closed because their TLS handshake failed (not TLS, no shared protocol, a client refusing the certificate)",
            inner.tls_handshakes_failed.clone(),
        );
        registry.register(
            "sluice_events_pending",
            "Event deliveries waiting in the outbox (bucket-wide) at this gateway's last look, counted up to the 1,000 due ones a pass takes; 0 without events",
            inner.events_pending.clone(),
        );
        registry.register(
            "sluice_tls_certificate_expiry_timestamp_seconds",
            "When the TLS certificate in use expires (Unix seconds; 0 without TLS)",
            inner.tls_certificate_expiry.clone(),
        );
        registry.register(
            "sluice_downloads_cut",
            "GET responses whose connection was closed at limits.download_deadline",
            inner.downloads_cut.clone(),
        );
        registry.register(
            "sluice_tus_small_patches_waited",
            "tus PATCHes answered late because their upload sent small ones faster than tus.small_patches_per_second",
            inner.small_patches_waited.clone(),
        );
        registry.register(
            "sluice_tus_small_patch_wait_seconds",
            "Time answers to small tus PATCHes waited, summed",
            inner.small_patch_wait_seconds.clone(),
        );
        registry.register(
            "sluice_events_recorded",
            "Events written to the outbox (each once, whatever the number of endpoints)",
            inner.events_recorded.clone(),
        );
        registry.register(
            "sluice_events_delivered",
            "Event deliveries an endpoint answered 2xx, by this gateway",
            inner.events_delivered.clone(),
        );
        registry.register(
            "sluice_event_delivery_failures",
            "Event delivery attempts that failed and were rescheduled, by this gateway",
            inner.event_delivery_failures.clone(),
        );
        registry.register(
            "sluice_events_failed",
            "Event deliveries given up on after events.retry_for (kept under _sluice/events/failed/)",
            inner.events_failed.clone(),
        );
        registry.register(
            "sluice_store_requests",
            "Requests to the store, by operation and status",
            inner.store_requests.clone(),
        );
        registry.register(
            "sluice_store_throttled",
            "503 SlowDown answers from the store",
            inner.store_throttled.clone(),
        );
        registry.register(
            "sluice_store_retries",
            "Store requests sent again after a transient failure",
            inner.retries.counter.clone(),
        );
        registry.register(
            "sluice_store_stalls",
            "Store requests cancelled after making no progress for the stall timeout (then retried)",
            inner.stalls.counter.clone(),
        );
        registry.register(
            "sluice_retry_budget_exhausted",
            "Transient store failures not retried because the retry budget was empty",
            inner.budget_exhausted.counter.clone(),
        );
        registry.register(
            "sluice_retry_budget_tokens",
            "Tokens left in the retry budget (each retry costs 5, or 10 after a timeout; each success returns 1)",
            inner.retry_budget_tokens.clone(),
        );
        registry.register(
            "sluice_store_down",
            "1 while the store counts as down (circuit breaker open: uploads refused with 503, probes running), else 0",
            inner.store_down.clone(),
        );
        registry.register(
            "sluice_store_outages",
            "Times the store came to count as down (the circuit breaker opened)",
            inner.store_down_total.counter.clone(),
        );
        registry.register(
            "sluice_store_concurrency_limit",
            "Adaptive limit on store requests in flight, per key prefix, for prefixes throttled lately or busy now",
            inner.concurrency_limits.clone(),
        );
        registry.register(
            "sluice_store_rate_limit",
            "Pace of store requests per second, per key prefix, for prefixes throttled in the last 30 s",
            inner.rate_limits.clone(),
        );
        registry.register(
            "sluice_part_upload_duration_seconds",
            "Latency of UploadPart requests",
            inner.part_seconds.clone(),
        );
        registry.register(
            "sluice_stream_ack_seconds",
            "Record requests from admission to acknowledgement (every batch holding them stored)",
            inner.stream_ack_seconds.clone(),
        );
        let inner = Inner { registry, ..inner };
        Metrics {
            inner: Arc::new(inner),
        }
    }

    /// Counts one completion (see [`crate::completion`]).
    pub fn upload_completed(&self, kind: &'static str, size: u64) {
        self.inner
            .uploads_completed
            .get_or_create(&KindLabels { kind })
            .inc();
        self.inner.completed_bytes.inc_by(size);
    }

    pub fn upload_started(&self) {
        self.inner.uploads_started.inc();
        self.inner.uploads_in_flight.inc();
    }

    /// `outcome` is `completed`, `failed` or `aborted`.
    pub fn upload_ended(&self, outcome: &'static str, seconds: f64) {
        self.inner.uploads_in_flight.dec();
        self.inner
            .uploads_ended
            .get_or_create(&OutcomeLabels { outcome })
            .inc();
        if outcome == "completed" {
            self.inner.upload_seconds.observe(seconds);
        }
    }

    pub fn bytes_sent(&self, bytes: u64) {
        self.inner.bytes_sent.inc_by(bytes);
    }

    pub fn bytes_received(&self, bytes: u64) {
        self.inner.bytes_received.inc_by(bytes);
    }

    pub fn queue_changed(&self, delta: i64) {
        self.inner.queue_length.inc_by(delta);
    }

    pub fn rejected(&self) {
        self.inner.rejections.inc();
    }

    pub fn connections_changed(&self, by: i64) {
        self.inner.connections_open.inc_by(by);
    }

    pub fn connection_refused(&self) {
        self.inner.connections_refused.inc();
    }

    /// An offense by a client; `penalized`: it got the address penalized.
    pub fn offense(&self, penalized: bool) {
        self.inner.offenses.inc();
        if penalized {
            self.inner.penalties.inc();
        }
    }

    pub fn connection_penalized(&self) {
        self.inner.connections_penalized.inc();
    }

    pub fn connection_timed_out(&self) {
        self.inner.connections_timed_out.inc();
    }

    pub fn tls_handshake_failed(&self) {
        self.inner.tls_handshakes_failed.inc();
    }

    /// Entries in the event outbox at the delivery worker's last look.
    pub fn events_pending(&self, pending: u64) {
        self.inner.events_pending.set(pending as i64);
    }

    /// The certificate in use expires then (0: unknown or no TLS).
    pub fn tls_certificate_loaded(&self, expires: Option<std::time::SystemTime>) {
        let seconds = expires
            .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs() as i64);
        self.inner.tls_certificate_expiry.set(seconds);
    }

    pub fn download_cut(&self) {
        self.inner.downloads_cut.inc();
    }

    pub fn small_patch_waited(&self, wait: std::time::Duration) {
        self.inner.small_patches_waited.inc();
        self.inner
            .small_patch_wait_seconds
            .inc_by(wait.as_secs_f64());
    }

    pub fn event_recorded(&self) {
        self.inner.events_recorded.inc();
    }

    pub fn event_delivered(&self) {
        self.inner.events_delivered.inc();
    }

    pub fn event_delivery_failed(&self) {
        self.inner.event_delivery_failures.inc();
    }

    pub fn event_given_up(&self) {
        self.inner.events_failed.inc();
    }

    pub fn store_request(&self, operation: &'static str, status: &'static str, seconds: f64) {
        self.inner
            .store_requests
            .get_or_create(&StoreLabels { operation, status })
            .inc();
        self.inner.store_seconds.observe(seconds);
        if status == "throttled" {
            self.inner.store_throttled.inc();
        }
        if operation == "upload_part" && status == "ok" {
            self.inner.part_seconds.observe(seconds);
        }
    }

    /// The text exposition of every metric, with the engine's figures (memory
    /// budget, retries, adaptive limits) read now.
    /// Reads these streams' counters at every scrape.
    pub fn watch_streams(&self, streams: Vec<(String, Arc<StreamStats>)>) {
        *self.inner.streams.lock().unwrap_or_else(|e| e.into_inner()) = streams;
    }

    pub fn stream_acknowledged(&self, stream: &str, seconds: f64) {
        self.inner
            .stream_ack_seconds
            .get_or_create(&StreamLabels {
                stream: stream.to_string(),
            })
            .observe(seconds);
    }

    /// The per-stream lines, in the text format, before the closing `# EOF`.
    fn render_streams(&self, text: &mut String) {
        let streams = self
            .inner
            .streams
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if streams.is_empty() {
            return;
        }
        let snapshots: Vec<(&str, StatsSnapshot)> = streams
            .iter()
            .map(|(name, stats)| (name.as_str(), stats.snapshot()))
            .collect();
        let end = text.rfind("# EOF").unwrap_or(text.len());
        let lines = sluice_streams::prometheus_lines(&snapshots);
        text.insert_str(end, &lines);
    }

    pub fn render(&self, engine: &Engine) -> String {
        let inner = &self.inner;
        inner.memory_limit.set(engine.budget().capacity() as i64);
        inner.memory_in_use.set(engine.budget().in_use() as i64);
        inner
            .memory_idle_buffers
            .set(engine.budget().idle_bytes() as i64);
        let stats = engine.stats();
        inner.retries.sync(stats.retries.load(Ordering::Relaxed));
        inner.stalls.sync(stats.stalls.load(Ordering::Relaxed));
        inner
            .budget_exhausted
            .sync(stats.budget_exhausted.load(Ordering::Relaxed));
        inner
            .retry_budget_tokens
            .set(engine.retry_budget_available() as i64);
        if let Some(breaker) = engine.breaker() {
            inner.store_down.set(breaker.is_open() as i64);
            inner.store_down_total.sync(breaker.opened_total());
        }
        inner.concurrency_limits.clear();
        inner.rate_limits.clear();
        for limit in engine.prefix_limits() {
            let labels = PrefixLabels {
                prefix: limit.prefix,
            };
            if let Some(rate) = limit.rate {
                inner
                    .rate_limits
                    .get_or_create(&labels)
                    .set(rate.round() as i64);
            }
            inner
                .concurrency_limits
                .get_or_create(&labels)
                .set(limit.limit.floor() as i64);
        }
        let mut text = String::new();
        encode(&mut text, &self.inner.registry).expect("writing to a String cannot fail");
        self.render_streams(&mut text);
        text
    }
}
