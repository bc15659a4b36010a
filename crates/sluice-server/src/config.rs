//! The gateway's configuration: one serde tree (`deny_unknown_fields`), read by
//! the binary from a TOML file, `SLUICE_…` variables and flags, and validated
//! once at start-up with errors that name the key.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use sluice_store::ChecksumAlgorithm;
use sluice_upload::{parse_size, BreakerConfig, EngineConfig};

/// Everything `sluice serve` can be told.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// A second address serving only `/metrics`, `/healthz` and `/readyz`; when
    /// set, `/metrics` leaves the main address.
    pub admin_listen: Option<SocketAddr>,
    /// `s3://bucket[/prefix]` or a local directory.
    pub store: String,
    /// S3 endpoint for S3-compatible servers (path-style addressing then).
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// Largest upload accepted; `None` for S3's 5 TiB.
    #[serde(deserialize_with = "optional_size")]
    pub max_upload_size: Option<u64>,
    /// Template for keys of uploads that do not name one (form POSTs).
    pub key_template: String,
    /// Prefix generated keys with a short hash so one busy tenant spreads over many
    /// S3 partitions.
    pub shard_prefix: bool,
    /// Origins browsers may upload from (CORS), e.g. `["https://app.example"]`, or
    /// `["*"]`; empty: no CORS headers.
    pub cors_origins: Vec<String>,
    pub limits: Limits,
    /// Penalties for addresses that keep sending malformed requests.
    pub penalty: crate::offenders::PenaltySettings,
    pub engine: EngineSettings,
    pub tus: TusSettings,
    pub form: FormSettings,
    pub janitor: JanitorSettings,
    pub auth: crate::auth::AuthSettings,
    pub events: crate::events::EventSettings,
    pub hooks: crate::hooks::HookSettings,
    pub direct: crate::direct::DirectSettings,
    pub ui: crate::ui::UiSettings,
    /// Record streams (`POST /v1/streams/NAME`), one `[streams.NAME]` table each.
    pub streams: std::collections::BTreeMap<String, sluice_streams::StreamConfig>,
}

/// Limits on `multipart/form-data` uploads (busboy's and multer's constraints):
/// what a form may make the gateway read before its file parts, so a hostile
/// form is answered 400 within a few KiB instead of being buffered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FormSettings {
    /// Longest part header block (boundary line included); the form's preamble
    /// counts against the first part's.
    #[serde(deserialize_with = "size")]
    pub max_header_bytes: u64,
    /// Most parts, file parts and plain fields together.
    pub max_parts: usize,
    /// Longest plain (non-file) field value; plain fields are read and dropped.
    #[serde(deserialize_with = "size")]
    pub max_field_bytes: u64,
}

impl Default for FormSettings {
    fn default() -> Self {
        FormSettings {
            max_header_bytes: 16 << 10,
            max_parts: 1000,
            max_field_bytes: 1 << 20,
        }
    }
}

/// Resumable uploads (tus).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TusSettings {
    /// An unfinished upload without activity for this long expires and is removed.
    #[serde(with = "humantime_serde")]
    pub expiry: Duration,
    /// A writer's lock is a lease of this length, renewed every third of it while
    /// the write runs; one left by a crashed gateway lapses within it. Short
    /// enough that a client's usual retries (Uppy's: 0, 1, 3, 5 s) outlast it.
    #[serde(with = "humantime_serde")]
    pub lock_timeout: Duration,
    /// Most partial uploads one concatenation may join.
    pub max_partials: usize,
    /// A PATCH storing fewer bytes than this without finishing its upload is
    /// small (see [`crate::small_patches`]).
    #[serde(deserialize_with = "size")]
    pub small_patch_bytes: u64,
    /// Small PATCHes one upload may make per second (twice as many in a burst)
    /// before their answers wait; 0 turns the pacing off.
    pub small_patches_per_second: f64,
}

/// The janitor that runs inside the gateway (see `sluice janitor`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JanitorSettings {
    /// Time between passes; 0 turns the janitor off.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Incomplete multipart uploads older than this, and not part of a live
    /// resumable upload, are aborted.
    #[serde(with = "humantime_serde")]
    pub older_than: Duration,
}

impl Default for JanitorSettings {
    fn default() -> Self {
        JanitorSettings {
            interval: Duration::from_secs(300),
            older_than: Duration::from_secs(24 * 3600),
        }
    }
}

impl Default for TusSettings {
    fn default() -> Self {
        TusSettings {
            expiry: Duration::from_secs(24 * 3600),
            lock_timeout: Duration::from_secs(6),
            max_partials: 1000,
            small_patch_bytes: 64 << 10,
            small_patches_per_second: 4.0,
        }
    }
}

/// Admission control and timeouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Uploads streaming at once.
    pub max_concurrent_uploads: usize,
    /// Uploads waiting for a slot; beyond it, 503 at once. Deep by default: a
    /// waiting upload costs a connection and a task, and a storm answered with
    /// 503s comes back as a storm of retries (measured: 10,000 simultaneous
    /// uploads went 516/s with 4,096 and 657/s with 16,384).
    pub queue_length: usize,
    /// Longest wait for a slot before 503 + Retry-After.
    #[serde(with = "humantime_serde")]
    pub queue_timeout: Duration,
    /// Slots one tenant may hold at once (unset: three quarters of
    /// `max_concurrent_uploads`), so that one busy tenant never holds them all.
    pub max_uploads_per_tenant: Option<usize>,
    /// Slots the uploads to one store prefix (a key's first segment) may hold at
    /// once (unset: three quarters of `max_concurrent_uploads`), so that a
    /// throttled prefix, whose uploads last, never holds them all.
    pub max_uploads_per_prefix: Option<usize>,
    /// Seconds suggested in Retry-After.
    pub retry_after_seconds: u64,
    /// Requests to the store at once; more wait their turn.
    pub store_concurrency: usize,
    /// Store failures in a row (no answer, a stall, a 5xx other than SlowDown)
    /// after which the store counts as down: uploads get 503 + Retry-After at
    /// once and store requests stop until a probe is answered. 0 turns it off.
    pub store_failures_to_open: u32,
    /// While the store counts as down, it is probed this often (each probe given
    /// as long to answer); also the Retry-After of the 503s.
    #[serde(with = "humantime_serde")]
    pub store_probe_interval: Duration,
    /// A store request with no progress for this long is cancelled and retried on
    /// a fresh connection; 0 turns the check off.
    #[serde(with = "humantime_serde")]
    pub store_stall_timeout: Duration,
    /// Time allowed for a request's headers to arrive: from the connection's
    /// start for its first request (protocol detection included), and from the
    /// end of the last response on an idle HTTP/1.1 keep-alive connection.
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Longest pause while reading a request body.
    #[serde(with = "humantime_serde")]
    pub body_idle_timeout: Duration,
    /// Bytes per second a request body must average once `min_body_rate_grace`
    /// has passed (time the gateway itself does not read is not counted); a
    /// slower upload is answered 408. 0 turns the check off.
    #[serde(deserialize_with = "size")]
    pub min_body_rate: u64,
    #[serde(with = "humantime_serde")]
    pub min_body_rate_grace: Duration,
    /// Open client connections; beyond it a connection is answered 503 with
    /// Retry-After and closed, without reading its request. Keep it below the
    /// process's open-file limit (`ulimit -n`), less what the store needs.
    pub max_connections: usize,
    /// Longest time a GET may take to send its body; past it the connection is
    /// closed (a reader that stops reading holds a store stream and memory).
    /// Unset: no deadline.
    #[serde(default, with = "humantime_serde::option")]
    pub download_deadline: Option<Duration>,
    /// Requests one HTTP/2 connection may have open at once.
    pub http2_max_streams: u32,
    /// Time between HTTP/2 pings on an otherwise quiet connection; one not
    /// answered within the same time closes it.
    #[serde(with = "humantime_serde")]
    pub http2_keep_alive: Duration,
    /// Time in-flight uploads get to finish on SIGTERM or Ctrl-C.
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

/// The transfer engine's settings (see `sluice put --help`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSettings {
    #[serde(deserialize_with = "size")]
    pub part_size: u64,
    #[serde(deserialize_with = "size")]
    pub threshold: u64,
    pub concurrency: usize,
    #[serde(deserialize_with = "size")]
    pub memory_limit: u64,
    /// The most one upload holds in memory at once (unset: a quarter of
    /// `memory_limit`, at least the threshold plus one part). It also bounds the
    /// part size, so uploads larger than 10,000 times it are refused with 413.
    #[serde(deserialize_with = "optional_size")]
    pub upload_memory_share: Option<u64>,
    pub checksum: ChecksumSetting,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumSetting {
    Crc32c,
    Crc64nvme,
    None,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: None,
            store: "./sluice-data".into(),
            endpoint: None,
            region: None,
            max_upload_size: None,
            key_template: "{yyyy}/{mm}/{dd}/{uuid}/{filename}".into(),
            shard_prefix: false,
            cors_origins: Vec::new(),
            limits: Limits::default(),
            penalty: Default::default(),
            engine: EngineSettings::default(),
            tus: TusSettings::default(),
            form: FormSettings::default(),
            janitor: JanitorSettings::default(),
            auth: crate::auth::AuthSettings::default(),
            events: crate::events::EventSettings::default(),
            hooks: crate::hooks::HookSettings::default(),
            direct: crate::direct::DirectSettings::default(),
            ui: crate::ui::UiSettings::default(),
            streams: Default::default(),
        }
    }
}

impl Limits {
    /// How request bodies must arrive.
    pub fn body_pace(&self) -> crate::body::BodyPace {
        crate::body::BodyPace {
            idle: self.body_idle_timeout,
            min_rate: self.min_body_rate,
            grace: self.min_body_rate_grace,
        }
    }
}

impl Limits {
    /// The caps admission enforces.
    pub fn admission(&self) -> crate::admission::AdmissionLimits {
        let max = self.max_concurrent_uploads;
        // Three quarters, and at least one, of the slots.
        let share = (max * 3).div_ceil(4).max(1);
        crate::admission::AdmissionLimits {
            max_uploads: max,
            per_tenant: self.max_uploads_per_tenant.unwrap_or(share).min(max),
            per_prefix: self.max_uploads_per_prefix.unwrap_or(share).min(max),
            queue_length: self.queue_length,
            queue_timeout: self.queue_timeout,
            retry_after: self.retry_after_seconds,
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_concurrent_uploads: 256,
            queue_length: 16384,
            queue_timeout: Duration::from_secs(30),
            max_uploads_per_tenant: None,
            max_uploads_per_prefix: None,
            retry_after_seconds: 1,
            store_concurrency: 128,
            store_stall_timeout: Duration::from_secs(30),
            store_failures_to_open: 3,
            store_probe_interval: Duration::from_secs(1),
            header_read_timeout: Duration::from_secs(10),
            body_idle_timeout: Duration::from_secs(30),
            min_body_rate: 1024,
            min_body_rate_grace: Duration::from_secs(10),
            max_connections: 20_000,
            download_deadline: None,
            http2_max_streams: 100,
            http2_keep_alive: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

/// The gateway's default part size. Twice the engine's 8 MiB: a relayed upload
/// costs the S3 server CPU per part (MinIO on two cores spent ~3.7 CPU-s/GiB with
/// 8 MiB parts and ~3.1 with 16 MiB, and relayed 4 GiB ~20% faster), while the
/// memory budget, not the part size, bounds what is buffered.
pub const GATEWAY_PART_SIZE: u64 = 16 * 1024 * 1024;

impl Default for EngineSettings {
    fn default() -> Self {
        let engine = EngineConfig::default();
        EngineSettings {
            part_size: GATEWAY_PART_SIZE,
            threshold: engine.threshold,
            concurrency: engine.concurrency,
            memory_limit: engine.memory_limit,
            upload_memory_share: None,
            checksum: ChecksumSetting::Crc32c,
        }
    }
}

/// A setting refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {key}: {reason}")]
pub struct ConfigError {
    pub key: &'static str,
    pub reason: String,
}

impl ServerConfig {
    /// The engine configuration these settings describe.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            part_size: self.engine.part_size,
            threshold: self.engine.threshold,
            concurrency: self.engine.concurrency,
            memory_limit: self.engine.memory_limit,
            upload_memory_share: self.engine.upload_memory_share,
            checksum: match self.engine.checksum {
                ChecksumSetting::Crc32c => Some(ChecksumAlgorithm::Crc32c),
                ChecksumSetting::Crc64nvme => Some(ChecksumAlgorithm::Crc64nvme),
                ChecksumSetting::None => None,
            },
            store_concurrency: Some(self.limits.store_concurrency),
            breaker: (self.limits.store_failures_to_open > 0).then_some(BreakerConfig {
                failures: self.limits.store_failures_to_open,
                probe_interval: self.limits.store_probe_interval,
                probe_timeout: self.limits.store_probe_interval,
            }),
            ..EngineConfig::default()
        }
    }

    /// The settings of resumable uploads.
    pub fn resumable_config(&self) -> sluice_resumable::ResumableConfig {
        sluice_resumable::ResumableConfig {
            expiry: self.tus.expiry,
            lock_lease: self.tus.lock_timeout,
            max_size: self
                .max_upload_size
                .unwrap_or(sluice_store::limits::MAX_OBJECT_SIZE),
            part_size: self.engine.part_size,
            threshold: self.engine.threshold,
            max_partials: self.tus.max_partials,
        }
    }

    /// Checks every value; the error names the offending key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |key: &'static str, reason: &str| {
            Err(ConfigError {
                key,
                reason: reason.to_string(),
            })
        };
        if !self.auth.enabled() && !self.listen.ip().is_loopback() && !self.auth.allow_anonymous {
            return fail(
                "auth",
                &format!(
                    "listening on {} with no authentication lets anyone write, read and delete; \
                     configure a JWT key (auth.jwt_secret_file or auth.jwt_public_key_file) or \
                     allow anonymous access explicitly (--allow-anonymous)",
                    self.listen
                ),
            );
        }
        if self.store.trim().is_empty() {
            return fail("store", "must name a directory or s3://bucket[/prefix]");
        }
        sluice_store::StoreLocation::parse(&self.store).map_err(|e| ConfigError {
            key: "store",
            reason: e.to_string(),
        })?;
        if self.max_upload_size == Some(0) {
            return fail("max_upload_size", "must be above 0");
        }
        crate::keys::KeyTemplate::parse(&self.key_template).map_err(|reason| ConfigError {
            key: "key_template",
            reason,
        })?;
        for (name, stream) in &self.streams {
            sluice_streams::validate_stream_name(name)
                .and_then(|()| stream.validate())
                .map_err(|e| ConfigError {
                    key: "streams",
                    reason: format!("[streams.{name}]: {e}"),
                })?;
            let template =
                sluice_streams::StreamKeyTemplate::parse(&stream.key_template, stream.compression);
            if !template.is_ok_and(|t| t.uses_uuid()) {
                return Err(ConfigError {
                    key: "streams",
                    reason: format!(
                        "[streams.{name}]: key_template needs {{uuid}}: HTTP offsets start again with every gateway"
                    ),
                });
            }
            // A request is held whole while it is read, in the stream's half
            // of the budget (RecordStream::memory): it must fit there, or it
            // would wait for memory it holds itself.
            if stream.max_request_bytes > self.engine.memory_limit / 2 {
                return Err(ConfigError {
                    key: "streams",
                    reason: format!(
                        "[streams.{name}]: max_request_bytes ({}) is more than half of engine.memory_limit ({}), \
                         the most a stream's records may hold: lower it or raise memory_limit",
                        stream.max_request_bytes, self.engine.memory_limit
                    ),
                });
            }
        }
        let limits = &self.limits;
        if limits.max_concurrent_uploads == 0 {
            return fail("limits.max_concurrent_uploads", "must be at least 1");
        }
        if limits.max_uploads_per_tenant == Some(0) {
            return fail("limits.max_uploads_per_tenant", "must be at least 1");
        }
        if limits.max_uploads_per_prefix == Some(0) {
            return fail("limits.max_uploads_per_prefix", "must be at least 1");
        }
        if limits.store_concurrency == 0 {
            return fail("limits.store_concurrency", "must be at least 1");
        }
        if limits.header_read_timeout.is_zero() {
            return fail("limits.header_read_timeout", "must be above 0");
        }
        if limits.body_idle_timeout.is_zero() {
            return fail("limits.body_idle_timeout", "must be above 0");
        }
        if limits.max_connections == 0 {
            return fail("limits.max_connections", "must be at least 1");
        }
        if limits.http2_max_streams == 0 {
            return fail("limits.http2_max_streams", "must be at least 1");
        }
        if limits.http2_keep_alive.is_zero() {
            return fail("limits.http2_keep_alive", "must be above 0");
        }
        for origin in &self.cors_origins {
            if origin != "*" && !(origin.starts_with("http://") || origin.starts_with("https://")) {
                return fail(
                    "cors_origins",
                    "each origin must be \"*\" or start with http:// or https://",
                );
            }
            if axum::http::HeaderValue::from_str(origin).is_err() {
                return fail("cors_origins", "an origin is not a valid header value");
            }
        }
        if self.auth.token_cookie.is_some() && self.cors_origins.iter().any(|o| o == "*") {
            return fail(
                "auth.token_cookie",
                "a token cookie cannot go with cors_origins = [\"*\"]: any site's page could then \
                 act with a user's cookie; list the origins",
            );
        }
        if let Err(reason) = self.ui.check() {
            return fail("ui", &reason);
        }
        if let Err(reason) = self.direct.check() {
            return fail("direct", &reason);
        }
        if self.direct.enabled
            && !matches!(
                sluice_store::StoreLocation::parse(&self.store),
                Ok(sluice_store::StoreLocation::S3 { .. })
            )
        {
            return fail(
                "direct",
                "direct uploads need a bucket store (s3://bucket): browsers send bytes to the bucket itself",
            );
        }
        if self.tus.expiry < Duration::from_secs(60) {
            return fail("tus.expiry", "must be at least 1m");
        }
        if self.tus.lock_timeout < Duration::from_secs(1)
            || self.tus.lock_timeout > Duration::from_secs(3600)
        {
            return fail("tus.lock_timeout", "must be between 1s and 1h");
        }
        if !(1..=sluice_store::limits::MAX_PARTS as usize).contains(&self.tus.max_partials) {
            return fail("tus.max_partials", "must be between 1 and 10000");
        }
        let rate = self.tus.small_patches_per_second;
        if !(rate.is_finite() && rate >= 0.0) {
            return fail(
                "tus.small_patches_per_second",
                "must be 0 (off) or a positive number",
            );
        }
        if self.penalty.after_offenses > 0 {
            let periods = [
                ("penalty.window", self.penalty.window),
                ("penalty.duration", self.penalty.duration),
            ];
            for (key, period) in periods {
                if period.is_zero() || period > crate::offenders::MAX_PERIOD {
                    return fail(
                        key,
                        "must be between 1s and 24h (after_offenses = 0 turns penalties off)",
                    );
                }
            }
        }
        if self.form.max_header_bytes < 1024 {
            return fail("form.max_header_bytes", "must be at least 1KiB");
        }
        if self.limits.store_probe_interval < Duration::from_millis(100)
            || self.limits.store_probe_interval > Duration::from_secs(60)
        {
            return fail(
                "limits.store_probe_interval",
                "must be between 100ms and 60s",
            );
        }
        if self.form.max_parts == 0 {
            return fail("form.max_parts", "must be at least 1");
        }
        if !self.janitor.interval.is_zero() && self.janitor.older_than < Duration::from_secs(3600) {
            // Younger uploads may still be streaming through some gateway.
            return fail(
                "janitor.older_than",
                "must be at least 1h while the janitor runs in the gateway",
            );
        }
        self.engine_config().validate().map_err(|e| {
            let key = match e {
                sluice_upload::ConfigError::PartSize(_) => "engine.part_size",
                sluice_upload::ConfigError::Threshold(_) => "engine.threshold",
                sluice_upload::ConfigError::Concurrency(_) => "engine.concurrency",
                sluice_upload::ConfigError::MemoryLimit { .. } => "engine.memory_limit",
                sluice_upload::ConfigError::MemoryShare { .. } => "engine.upload_memory_share",
                _ => "engine",
            };
            ConfigError {
                key,
                reason: e.to_string(),
            }
        })
    }
}

/// Accepts `8388608`, `"8MiB"` or `"8 M"`.
fn size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Bytes(u64),
        Text(String),
    }
    match Size::deserialize(deserializer)? {
        Size::Bytes(n) => Ok(n),
        Size::Text(text) => parse_size(&text).map_err(serde::de::Error::custom),
    }
}

fn optional_size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    size(deserializer).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_upload::MIB;

    #[test]
    fn defaults_are_valid() {
        assert_eq!(ServerConfig::default().validate(), Ok(()));
    }

    #[test]
    fn invalid_values_name_their_key() {
        type Change = fn(&mut ServerConfig);
        let cases: Vec<(Change, &str)> = vec![
            (|c| c.store = String::new(), "store"),
            (|c| c.store = "gs://bucket".into(), "store"),
            (|c| c.max_upload_size = Some(0), "max_upload_size"),
            (|c| c.key_template = "{nope}".into(), "key_template"),
            (
                |c| c.limits.max_concurrent_uploads = 0,
                "limits.max_concurrent_uploads",
            ),
            (
                |c| c.limits.store_concurrency = 0,
                "limits.store_concurrency",
            ),
            (
                |c| c.limits.body_idle_timeout = Duration::ZERO,
                "limits.body_idle_timeout",
            ),
            (|c| c.limits.max_connections = 0, "limits.max_connections"),
            (
                |c| c.limits.http2_max_streams = 0,
                "limits.http2_max_streams",
            ),
            (
                |c| c.limits.http2_keep_alive = Duration::ZERO,
                "limits.http2_keep_alive",
            ),
            (|c| c.form.max_header_bytes = 100, "form.max_header_bytes"),
            (|c| c.form.max_parts = 0, "form.max_parts"),
            (|c| c.penalty.window = Duration::ZERO, "penalty.window"),
            (|c| c.penalty.duration = Duration::ZERO, "penalty.duration"),
            (
                |c| c.penalty.duration = Duration::from_secs(u64::MAX),
                "penalty.duration",
            ),
            (
                |c| c.tus.small_patches_per_second = -1.0,
                "tus.small_patches_per_second",
            ),
            (
                |c| c.tus.small_patches_per_second = f64::NAN,
                "tus.small_patches_per_second",
            ),
            (|c| c.engine.part_size = MIB, "engine.part_size"),
            (|c| c.engine.memory_limit = MIB, "engine.memory_limit"),
            (
                |c| {
                    let stream = sluice_streams::StreamConfig {
                        key_template: "{stream}/{uuid}".into(),
                        max_request_bytes: c.engine.memory_limit / 2 + 1,
                        ..Default::default()
                    };
                    c.streams.insert("big".into(), stream);
                },
                "streams",
            ),
        ];
        for (change, key) in cases {
            let mut config = ServerConfig::default();
            change(&mut config);
            assert_eq!(config.validate().map_err(|e| e.key), Err(key));
        }
    }
}
