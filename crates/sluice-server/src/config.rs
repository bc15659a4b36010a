//! The gateway's configuration: one serde tree (`deny_unknown_fields`), read by
//! the binary from a TOML file, `SLUICE_…` variables and flags, and validated
//! once at start-up with errors that name the key.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;
use serde::{Deserialize, Serialize};
use sluice_upload::settings::{optional_size, size};
use sluice_upload::{defaults, size_in, BreakerConfig, EngineConfig, EngineSettings, MAX_SETTING};

use std::ffi::OsStr;

use crate::values::{at_least, count_in, duration_in, flag_bool, non_negative, HOUR, SECOND};

/// Everything `sluice serve` can be told. Each field is one setting, defined
/// once: its clap attributes give the flag, the `SLUICE_…` variable, the
/// default and the doc, its `id` is its key in the TOML file (see
/// [`crate::settings`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Gateway")]
pub struct ServerConfig {
    /// Address to listen on.
    #[arg(
        id = "listen",
        long = "listen",
        env = "SLUICE_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: SocketAddr,
    /// Serve /metrics, the dashboard (/ui/dashboard) and /healthz, /readyz on
    /// this address only, e.g. a private one [default: on the main address].
    #[arg(
        id = "admin_listen",
        long = "admin-listen",
        env = "SLUICE_ADMIN_LISTEN",
        value_name = "ADDR"
    )]
    pub admin_listen: Option<SocketAddr>,
    /// The store: s3://bucket[/prefix], az://container[/prefix] (the account
    /// from AZURE_STORAGE_*), gs://bucket[/prefix] (the credential from
    /// GOOGLE_APPLICATION_CREDENTIALS) or a local directory.
    #[arg(id = "store", long = "store", env = "SLUICE_STORE", value_name = "STORE", default_value = "./sluice-data", value_parser = crate::values::store_location)]
    pub store: String,
    /// S3 endpoint URL for MinIO, Ceph RGW, R2 and others (path-style
    /// addressing then); for az://, the blob endpoint (Azurite:
    /// http://127.0.0.1:10000/devstoreaccount1); for gs://, the JSON API's
    /// origin (fake-gcs-server: http://127.0.0.1:4443).
    #[arg(
        id = "endpoint",
        long = "endpoint",
        env = "SLUICE_ENDPOINT",
        value_name = "URL"
    )]
    pub endpoint: Option<String>,
    /// S3 region [default: from the AWS configuration, else us-east-1].
    #[arg(
        id = "region",
        long = "region",
        env = "SLUICE_REGION",
        value_name = "REGION"
    )]
    pub region: Option<String>,
    /// Largest upload accepted (413 beyond) [default: S3's 5 TiB].
    #[arg(id = "max_upload_size", long = "max-upload-size", env = "SLUICE_MAX_UPLOAD_SIZE", value_name = "SIZE", value_parser = size_in(1, sluice_store::limits::MAX_OBJECT_SIZE))]
    #[serde(
        deserialize_with = "optional_size",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_upload_size: Option<u64>,
    /// Key template for uploads that do not name their key (form POSTs, tus).
    #[arg(id = "key_template", long = "key-template", env = "SLUICE_KEY_TEMPLATE", value_name = "TEMPLATE", default_value = "{yyyy}/{mm}/{dd}/{uuid}/{filename}", value_parser = crate::values::key_template)]
    pub key_template: String,
    /// Put a short hash in front of generated keys to spread one busy tenant
    /// over many S3 partitions.
    #[arg(id = "shard_prefix", long = "shard-prefix", env = "SLUICE_SHARD_PREFIX", value_name = "BOOL", num_args = 0..=1, default_value = "false", default_missing_value = "true", action = clap::ArgAction::Set, value_parser = flag_bool())]
    pub shard_prefix: bool,
    /// Browser origin allowed to upload (CORS), e.g. https://app.example, or `*`
    /// for any; repeat or separate with commas [default: none, no CORS headers].
    #[arg(id = "cors_origins", long = "cors-origin", env = "SLUICE_CORS_ORIGIN", value_name = "ORIGIN", value_delimiter = ',', value_parser = crate::values::cors_origin)]
    pub cors_origins: Vec<String>,
    #[command(flatten)]
    pub limits: Limits,
    #[command(flatten)]
    pub penalty: crate::offenders::PenaltySettings,
    #[command(flatten)]
    pub engine: EngineSettings,
    #[command(flatten)]
    pub tus: TusSettings,
    #[command(flatten)]
    pub form: FormSettings,
    #[command(flatten)]
    pub janitor: JanitorSettings,
    #[command(flatten)]
    pub auth: crate::auth::AuthSettings,
    #[command(flatten)]
    pub events: crate::events::EventSettings,
    #[command(flatten)]
    pub hooks: crate::hooks::HookSettings,
    #[command(flatten)]
    pub direct: crate::direct::DirectSettings,
    #[command(flatten)]
    pub imports: crate::imports::ImportSettings,
    #[command(flatten)]
    pub ui: crate::ui::UiSettings,
    #[command(flatten)]
    pub tls: crate::tls::TlsSettings,
    /// Record streams (`POST /v1/streams/NAME`), one `[streams.NAME]` table each
    /// (file only; see docs/STREAMS.md).
    #[arg(skip)]
    pub streams: std::collections::BTreeMap<String, sluice_streams::StreamConfig>,
}

/// Limits on `multipart/form-data` uploads (busboy's and multer's constraints):
/// what a form may make the gateway read before its file parts, so a hostile
/// form is answered 400 within a few KiB instead of being buffered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Forms")]
pub struct FormSettings {
    /// Longest part header block of a form (boundary line included); the form's
    /// preamble counts against the first part's.
    #[arg(id = "form.max_header_bytes", long = "form-max-header-bytes", env = "SLUICE_FORM_MAX_HEADER_BYTES", value_name = "SIZE", default_value = "16KiB", value_parser = size_in(1024, 1 << 20))]
    #[serde(deserialize_with = "size")]
    pub max_header_bytes: u64,
    /// Most parts of a form, file parts and plain fields together.
    #[arg(id = "form.max_parts", long = "form-max-parts", env = "SLUICE_FORM_MAX_PARTS", value_name = "N", default_value = "1000", value_parser = at_least::<usize>(1))]
    pub max_parts: usize,
    /// Longest plain (non-file) field value of a form; plain fields are read and
    /// dropped.
    #[arg(id = "form.max_field_bytes", long = "form-max-field-bytes", env = "SLUICE_FORM_MAX_FIELD_BYTES", value_name = "SIZE", default_value = "1MiB", value_parser = size_in(0, 1 << 30))]
    #[serde(deserialize_with = "size")]
    pub max_field_bytes: u64,
}

/// Resumable uploads (tus).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Resumable uploads (tus)")]
pub struct TusSettings {
    /// Resumable uploads idle this long expire and are removed (at least 1m).
    #[arg(id = "tus.expiry", long = "tus-expiry", env = "SLUICE_TUS_EXPIRY", value_name = "DURATION", default_value = "24h", value_parser = duration_in(60 * SECOND, Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub expiry: Duration,
    /// A resumable upload's writer holds a lease of this length, renewed every
    /// third of it while it writes; one left by a crashed gateway lapses within
    /// it. Short enough that a client's usual retries (Uppy's: 0, 1, 3, 5 s)
    /// outlast it (1s to 1h). A request of the IETF draft that ends an older
    /// one waits for it at most this long and a second.
    #[arg(id = "tus.lock_timeout", long = "tus-lock-timeout", env = "SLUICE_TUS_LOCK_TIMEOUT", value_name = "DURATION", default_value = "6s", value_parser = duration_in(SECOND, HOUR))]
    #[serde(with = "humantime_serde")]
    pub lock_timeout: Duration,
    /// Most partial uploads one tus concatenation may join (at most 10000).
    #[arg(id = "tus.max_partials", long = "tus-max-partials", env = "SLUICE_TUS_MAX_PARTIALS", value_name = "N", default_value = "1000", value_parser = crate::values::count_in::<usize>(1, u64::from(sluice_store::limits::MAX_PARTS)))]
    pub max_partials: usize,
    /// A PATCH storing fewer bytes than this without finishing its upload is
    /// small (see --tus-small-patches-per-second).
    #[arg(id = "tus.small_patch_bytes", long = "tus-small-patch-bytes", env = "SLUICE_TUS_SMALL_PATCH_BYTES", value_name = "SIZE", default_value = "64KiB", value_parser = size_in(0, MAX_SETTING))]
    #[serde(deserialize_with = "size")]
    pub small_patch_bytes: u64,
    /// Small PATCHes one upload may send per second, twice as many in a burst,
    /// before their answers wait; each costs the store three requests. 0 turns
    /// the pacing off.
    #[arg(id = "tus.small_patches_per_second", long = "tus-small-patches-per-second", env = "SLUICE_TUS_SMALL_PATCHES_PER_SECOND", value_name = "RATE", default_value = "4", value_parser = non_negative)]
    pub small_patches_per_second: f64,
}

/// The janitor that runs inside the gateway (see `sluice janitor`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Janitor")]
pub struct JanitorSettings {
    /// Time between janitor passes (expired resumable uploads, stale multipart
    /// uploads); 0s turns the janitor off.
    #[arg(id = "janitor.interval", long = "janitor-interval", env = "SLUICE_JANITOR_INTERVAL", value_name = "DURATION", default_value = "5m", value_parser = duration_in(Duration::ZERO, Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// The janitor aborts incomplete multipart uploads older than this that no
    /// live resumable upload owns; at least 1h while it runs in the gateway.
    #[arg(id = "janitor.older_than", long = "janitor-older-than", env = "SLUICE_JANITOR_OLDER_THAN", value_name = "DURATION", default_value = "24h", value_parser = duration_in(Duration::ZERO, Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub older_than: Duration,
}

/// Admission control and timeouts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Limits")]
pub struct Limits {
    /// Uploads streaming at once.
    #[arg(id = "limits.max_concurrent_uploads", long = "max-concurrent-uploads", env = "SLUICE_MAX_CONCURRENT_UPLOADS", value_name = "N", default_value = "256", value_parser = at_least::<usize>(1))]
    pub max_concurrent_uploads: usize,
    /// Uploads waiting for a slot; beyond it, 503 at once. Deep by default: a
    /// waiting upload costs a connection and a task, and a storm answered with
    /// 503s comes back as a storm of retries (measured: 10,000 simultaneous
    /// uploads went 516/s with 4,096 and 657/s with 16,384).
    #[arg(id = "limits.queue_length", long = "queue-length", env = "SLUICE_QUEUE_LENGTH", value_name = "N", default_value = "16384", value_parser = at_least::<usize>(0))]
    pub queue_length: usize,
    /// Longest wait for a slot before 503 + Retry-After.
    #[arg(id = "limits.queue_timeout", long = "queue-timeout", env = "SLUICE_QUEUE_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = duration_in(Duration::ZERO, Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub queue_timeout: Duration,
    /// Slots one tenant may hold at once, so that one busy tenant never holds
    /// them all [default: three quarters of --max-concurrent-uploads].
    #[arg(id = "limits.max_uploads_per_tenant", long = "max-uploads-per-tenant", env = "SLUICE_MAX_UPLOADS_PER_TENANT", value_name = "N", value_parser = at_least::<usize>(1))]
    pub max_uploads_per_tenant: Option<usize>,
    /// Slots the uploads to one store prefix (a key's first segment) may hold at
    /// once, so that a throttled prefix, whose uploads last, never holds them all
    /// [default: three quarters of --max-concurrent-uploads].
    #[arg(id = "limits.max_uploads_per_prefix", long = "max-uploads-per-prefix", env = "SLUICE_MAX_UPLOADS_PER_PREFIX", value_name = "N", value_parser = at_least::<usize>(1))]
    pub max_uploads_per_prefix: Option<usize>,
    /// Parts in flight per upload (`put`'s --concurrency counts the transfers
    /// of a whole run instead, hence another name).
    #[arg(id = "limits.parts_in_flight", long = "parts-in-flight", alias = "concurrency", env = "SLUICE_PARTS_IN_FLIGHT", value_name = "N", default_value = "8", value_parser = crate::values::count_in::<usize>(1, 1024))]
    pub parts_in_flight: usize,
    /// Seconds suggested in Retry-After (at most 3600).
    #[arg(id = "limits.retry_after_seconds", long = "retry-after-seconds", env = "SLUICE_RETRY_AFTER_SECONDS", value_name = "SECONDS", default_value = "1", value_parser = count_in::<u64>(0, 3600))]
    pub retry_after_seconds: u64,
    /// Requests to the store at once; more wait their turn.
    #[arg(id = "limits.store_concurrency", long = "store-concurrency", env = "SLUICE_STORE_CONCURRENCY", value_name = "N", default_value = "128", value_parser = at_least::<usize>(1))]
    pub store_concurrency: usize,
    /// Store failures in a row (no answer, a stall, a 5xx other than SlowDown)
    /// after which the store counts as down: uploads get 503 + Retry-After at
    /// once and store requests stop until a probe is answered. 0 turns the
    /// breaker off, and with it the start-up check, the heartbeat and the
    /// store's reasons in /readyz.
    #[arg(id = "limits.store_failures_to_open", long = "store-failures-to-open", env = "SLUICE_STORE_FAILURES_TO_OPEN", value_name = "N", default_value = "3", value_parser = at_least::<u32>(0))]
    pub store_failures_to_open: u32,
    /// While the store counts as down, it is probed this often; also the
    /// Retry-After of the 503s (100ms to 60s).
    #[arg(id = "limits.store_probe_interval", long = "store-probe-interval", env = "SLUICE_STORE_PROBE_INTERVAL", value_name = "DURATION", default_value = "1s", value_parser = duration_in(SECOND / 10, 60 * SECOND))]
    #[serde(with = "humantime_serde")]
    pub store_probe_interval: Duration,
    /// The longest a store request may make no progress (no body bytes taken,
    /// no answer) before it is cancelled and retried on a fresh connection. The
    /// deadline itself follows the store's recent waits: three times their 99th
    /// percentile, at least 5s, at most this. 0s turns the check off.
    #[arg(id = "limits.store_stall_timeout", long = "store-stall-timeout", env = "SLUICE_STORE_STALL_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = duration_in(Duration::ZERO, Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub store_stall_timeout: Duration,
    /// Time allowed for a request's headers to arrive: from the connection's
    /// start for its first request (protocol detection included), and from the
    /// end of the last response on an idle HTTP/1.1 keep-alive connection.
    #[arg(id = "limits.header_read_timeout", long = "header-read-timeout", env = "SLUICE_HEADER_READ_TIMEOUT", value_name = "DURATION", default_value = "10s", value_parser = duration_in(Duration::from_millis(1), Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// Longest pause while reading a request body.
    #[arg(id = "limits.body_idle_timeout", long = "body-idle-timeout", env = "SLUICE_BODY_IDLE_TIMEOUT", value_name = "DURATION", default_value = "30s", value_parser = duration_in(Duration::from_millis(1), Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub body_idle_timeout: Duration,
    /// Bytes per second a request body must average once --min-body-rate-grace
    /// has passed (time the gateway itself does not read is not counted); a
    /// slower upload is answered 408. 0 turns the check off.
    #[arg(id = "limits.min_body_rate", long = "min-body-rate", env = "SLUICE_MIN_BODY_RATE", value_name = "SIZE", default_value = "1KiB", value_parser = size_in(0, MAX_SETTING))]
    #[serde(deserialize_with = "size")]
    pub min_body_rate: u64,
    /// How long a request body may take before --min-body-rate applies.
    #[arg(id = "limits.min_body_rate_grace", long = "min-body-rate-grace", env = "SLUICE_MIN_BODY_RATE_GRACE", value_name = "DURATION", default_value = "10s", value_parser = duration_in(Duration::ZERO, Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub min_body_rate_grace: Duration,
    /// Open client connections; beyond it a connection is answered 503 with
    /// Retry-After and closed, without reading its request. Keep it below the
    /// process's open-file limit (`ulimit -n`), less what the store needs.
    #[arg(id = "limits.max_connections", long = "max-connections", env = "SLUICE_MAX_CONNECTIONS", value_name = "N", default_value = "20000", value_parser = at_least::<usize>(1))]
    pub max_connections: usize,
    /// Longest time a GET may take to send its body; past it the connection is
    /// closed (a reader that stops reading holds a store stream and memory)
    /// [default: no deadline].
    #[arg(id = "limits.download_deadline", long = "download-deadline", env = "SLUICE_DOWNLOAD_DEADLINE", value_name = "DURATION", value_parser = duration_in(Duration::from_millis(1), Duration::MAX))]
    #[serde(
        default,
        with = "humantime_serde::option",
        skip_serializing_if = "Option::is_none"
    )]
    pub download_deadline: Option<Duration>,
    /// Requests one HTTP/2 connection may have open at once.
    #[arg(id = "limits.http2_max_streams", long = "http2-max-streams", env = "SLUICE_HTTP2_MAX_STREAMS", value_name = "N", default_value = "100", value_parser = at_least::<u32>(1))]
    pub http2_max_streams: u32,
    /// Time between HTTP/2 pings on an otherwise quiet connection; one not
    /// answered within the same time closes it.
    #[arg(id = "limits.http2_keep_alive", long = "http2-keep-alive", env = "SLUICE_HTTP2_KEEP_ALIVE", value_name = "DURATION", default_value = "30s", value_parser = duration_in(Duration::from_millis(1), Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub http2_keep_alive: Duration,
    /// On SIGTERM, how long the gateway goes on taking new uploads while
    /// /readyz already answers 503 draining, so a load balancer notices before
    /// anything is refused (Ctrl-C skips it).
    #[arg(id = "limits.drain_delay", long = "drain-delay", env = "SLUICE_DRAIN_DELAY", value_name = "DURATION", default_value = "5s", value_parser = duration_in(Duration::ZERO, 3600 * SECOND))]
    #[serde(with = "humantime_serde")]
    pub drain_delay: Duration,
    /// Time in-flight uploads get to finish on SIGTERM or Ctrl-C, after the
    /// drain delay; what is still running then is cut (a resumable upload
    /// stays resumable from what was stored).
    #[arg(id = "limits.shutdown_grace", long = "shutdown-grace", env = "SLUICE_SHUTDOWN_GRACE", value_name = "DURATION", default_value = "30s", value_parser = duration_in(Duration::ZERO, Duration::MAX))]
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        defaults()
    }
}

impl Default for FormSettings {
    fn default() -> Self {
        defaults()
    }
}

impl Default for TusSettings {
    fn default() -> Self {
        defaults()
    }
}

impl Default for JanitorSettings {
    fn default() -> Self {
        defaults()
    }
}

impl Default for Limits {
    fn default() -> Self {
        defaults()
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

/// A setting refused at start-up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {key}: {reason}")]
pub struct ConfigError {
    /// The setting's key in the TOML file (its definition's id).
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            key: key.to_owned(),
            reason: reason.into(),
        }
    }
}

/// How long a probe of the store may take when stall detection is off (the
/// stall timeout's default).
const PROBE_TIMEOUT_WITHOUT_STALLS: Duration = Duration::from_secs(30);

impl ServerConfig {
    /// The engine configuration these settings describe.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            concurrency: self.limits.parts_in_flight,
            store_concurrency: Some(self.limits.store_concurrency),
            breaker: (self.limits.store_failures_to_open > 0).then_some(BreakerConfig {
                failures: self.limits.store_failures_to_open,
                probe_interval: self.limits.store_probe_interval,
                // A probe is cut by the store's own stall deadline (which grows
                // with the waits it sees); this bounds it when that is off.
                probe_timeout: match self.limits.store_stall_timeout {
                    timeout if timeout.is_zero() => PROBE_TIMEOUT_WITHOUT_STALLS,
                    timeout => timeout,
                },
                ..BreakerConfig::default()
            }),
            ..EngineConfig::default()
        }
        .with_settings(&self.engine)
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

    /// Checks every value: each through its own definition's parser (so a
    /// file's value meets the rule a flag's does), then the rules that join
    /// several settings. The error names the setting's key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.check_values()?;
        let fail = |key: &str, reason: &str| Err(ConfigError::new(key, reason));
        if !self.auth.enabled() && !self.listen.ip().is_loopback() && !self.auth.allow_anonymous {
            return fail(
                "auth.allow_anonymous",
                &format!(
                    "listening on {} with no authentication lets anyone write, read and delete; \
                     configure a JWT key (auth.jwt_secret_file or auth.jwt_public_key_file) or \
                     allow anonymous access explicitly (--allow-anonymous)",
                    self.listen
                ),
            );
        }
        for (name, stream) in &self.streams {
            sluice_streams::validate_stream_name(name)
                .and_then(|()| stream.validate())
                .and_then(|()| stream.check_source(sluice_streams::RecordSource::Requests))
                .map_err(|e| ConfigError::new("streams", format!("[streams.{name}]: {e}")))?;
            let template =
                sluice_streams::StreamKeyTemplate::parse(&stream.key_template, stream.compression);
            if !template.is_ok_and(|t| t.uses_uuid()) {
                return fail(
                    "streams",
                    &format!(
                        "[streams.{name}]: key_template needs {{uuid}}: HTTP offsets start again with every gateway"
                    ),
                );
            }
            // A request is held whole while it is read, in the stream's half
            // of the budget (RecordStream::memory): it must fit there, or it
            // would wait for memory it holds itself.
            if stream.max_request_bytes > self.engine.memory_limit / 2 {
                return fail(
                    "streams",
                    &format!(
                        "[streams.{name}]: max_request_bytes ({}) is more than half of engine.memory_limit ({}), \
                         the most a stream's records may hold: lower it or raise memory_limit",
                        stream.max_request_bytes, self.engine.memory_limit
                    ),
                );
            }
        }
        if self.auth.token_cookie.is_some() && self.cors_origins.iter().any(|o| o == "*") {
            return fail(
                "auth.token_cookie",
                "a token cookie cannot go with cors_origins = [\"*\"]: any site's page could then \
                 act with a user's cookie; list the origins",
            );
        }
        if self.direct.enabled
            && !matches!(
                sluice_store::StoreLocation::parse(&self.store),
                Ok(sluice_store::StoreLocation::Bucket {
                    service: sluice_store::Service::S3,
                    ..
                })
            )
        {
            return fail(
                "direct.enabled",
                "direct uploads need a bucket store (s3://bucket): browsers send bytes to the bucket itself",
            );
        }
        if !self.janitor.interval.is_zero() && self.janitor.older_than < HOUR {
            // Younger uploads may still be streaming through some gateway.
            return fail(
                "janitor.older_than",
                "must be at least 1h while the janitor runs in the gateway",
            );
        }
        self.engine_config()
            .validate()
            .map_err(|e| ConfigError::new(e.setting().unwrap_or("engine"), e.to_string()))
    }
}

impl ServerConfig {
    /// The settings as a clap command: what `sluice serve` flattens, and what
    /// `--help`, docs/CONFIG.md and the checks are read from.
    pub fn command() -> clap::Command {
        <ServerConfig as Args>::augment_args(clap::Command::new("serve").no_binary_name(true))
    }

    /// Puts every value through its definition's parser: the rules a flag must
    /// meet, a file's value meets too. The error names the key.
    fn check_values(&self) -> Result<(), ConfigError> {
        let table =
            toml::Table::try_from(self).map_err(|e| ConfigError::new("serve", e.to_string()))?;
        for arg in ServerConfig::command().get_arguments() {
            let key = arg.get_id().as_str();
            let Some(value) = value_at(&table, key) else {
                continue;
            };
            let texts = match value {
                toml::Value::Array(items) => items.iter().map(text_of).collect(),
                value => vec![text_of(value)],
            };
            // The definition's parser, alone (the relations between settings
            // are checked after it, by `validate`).
            let alone = clap::Command::new("check").no_binary_name(true).arg(
                clap::Arg::new("value")
                    .long("value")
                    .allow_hyphen_values(true)
                    .value_parser(arg.get_value_parser().clone()),
            );
            for text in texts {
                alone
                    .clone()
                    .try_get_matches_from([OsStr::new("--value"), OsStr::new(&text)])
                    .map_err(|error| ConfigError::new(key, reason_of(&error, &text)))?;
            }
        }
        Ok(())
    }
}

/// The value at a dotted key.
pub(crate) fn value_at<'a>(table: &'a toml::Table, key: &str) -> Option<&'a toml::Value> {
    let (head, rest) = match key.split_once('.') {
        Some((head, rest)) => (head, Some(rest)),
        None => (key, None),
    };
    match (table.get(head)?, rest) {
        (value, None) => Some(value),
        (toml::Value::Table(inner), Some(rest)) => value_at(inner, rest),
        _ => None,
    }
}

fn text_of(value: &toml::Value) -> String {
    match value {
        toml::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// What a parser said about `text`, without clap's decoration.
fn reason_of(error: &clap::Error, text: &str) -> String {
    match std::error::Error::source(error) {
        Some(source) => format!("{text:?}: {source}"),
        None => {
            let rendered = error.render().to_string();
            let line = rendered.lines().next().unwrap_or_default();
            line.trim_start_matches("error: ").to_owned()
        }
    }
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
            (|c| c.store = "wasb://bucket".into(), "store"),
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
            (
                |c| {
                    let stream = sluice_streams::StreamConfig {
                        key_template: "{stream}/{uuid}".into(),
                        dead_letter_template: Some("dead/{partition}/{offset}".into()),
                        ..Default::default()
                    };
                    c.streams.insert("replayed".into(), stream);
                },
                "streams",
            ),
        ];
        for (change, key) in cases {
            let mut config = ServerConfig::default();
            change(&mut config);
            assert_eq!(config.validate().map_err(|e| e.key), Err(key.to_owned()));
        }
    }
}
