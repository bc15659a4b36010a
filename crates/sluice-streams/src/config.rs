//! One stream's settings: when a batch is flushed (size before compression,
//! record count, age of its first record), how its object is compressed and
//! named, how many partitions may be open at once, and what happens to invalid
//! records. Validated once, before the stream takes a record.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};
use sluice_upload::parse_size;

pub use crate::compress::Compression;
use crate::error::StreamConfigError;
use crate::template::StreamKeyTemplate;

/// Everything one stream can be told (`[streams.NAME]` in the gateway's file,
/// flags of `sluice ingest`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StreamConfig {
    /// Object keys: `{stream}`, `{yyyy}` `{mm}` `{dd}` `{hh}` (arrival time, or
    /// `time_field`), `{field:NAME}` (a top-level field of the record),
    /// `{partition}` and `{offset}` (Kafka; for standard input the record's
    /// position), `{uuid}`. The compression's ending (`.ndjson.zst`) is added.
    pub key_template: String,
    /// Prefix keys with a short hash so that batches spread over S3 partitions.
    pub shard_prefix: bool,
    /// Flush a batch once it holds this many bytes of records (before compression).
    #[serde(deserialize_with = "size")]
    pub flush_bytes: u64,
    /// Flush a batch once it holds this many records.
    pub flush_records: u64,
    /// Flush a batch this long after its first record came in: the longest an
    /// HTTP client waits for its acknowledgement, less the store's time.
    #[serde(with = "humantime_serde")]
    pub flush_age: Duration,
    pub compression: Compression,
    /// Compression level (zstd 1–19, default 3; gzip 1–9, default 6).
    pub level: Option<i32>,
    /// A top-level record field holding the record's time (RFC 3339 text, or
    /// seconds or milliseconds since 1970) for the time placeholders; records
    /// without a usable one use their arrival time.
    pub time_field: Option<String>,
    /// Batches open at once; a record for one more partition first flushes the
    /// batch opened longest ago.
    pub max_open_partitions: usize,
    /// Where invalid records go. Unset: a request with an invalid record is
    /// refused whole (400 naming the line), and `sluice ingest` stops at it.
    /// Set: they are stored under this template (same placeholders, no fields)
    /// as they came, one per line, and the valid ones are taken.
    pub dead_letter_template: Option<String>,
    /// Largest record.
    #[serde(deserialize_with = "size")]
    pub max_record_bytes: u64,
    /// Largest HTTP request body once decompressed.
    #[serde(deserialize_with = "size")]
    pub max_request_bytes: u64,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            key_template: "{stream}/{yyyy}/{mm}/{dd}/{hh}/{uuid}".into(),
            shard_prefix: false,
            flush_bytes: 64 << 20,
            flush_records: 1_000_000,
            flush_age: Duration::from_secs(1),
            compression: Compression::Zstd,
            level: None,
            time_field: None,
            max_open_partitions: 64,
            dead_letter_template: None,
            max_record_bytes: 1 << 20,
            max_request_bytes: 64 << 20,
        }
    }
}

/// Largest flush size: a batch is one object, streamed as a multipart upload.
const MAX_FLUSH_BYTES: u64 = 1 << 40;

impl StreamConfig {
    /// The compression level in effect.
    pub fn level(&self) -> i32 {
        self.level
            .unwrap_or_else(|| self.compression.default_level())
    }

    /// Checks every setting; the templates are parsed for the check.
    pub fn validate(&self) -> Result<(), StreamConfigError> {
        let fail = |key, reason: String| Err(StreamConfigError { key, reason });
        if !(1..=MAX_FLUSH_BYTES).contains(&self.flush_bytes) {
            return fail("flush_bytes", "must be between 1 byte and 1 TiB".into());
        }
        if self.flush_records == 0 {
            return fail("flush_records", "must be at least 1".into());
        }
        if self.flush_age.is_zero() || self.flush_age > Duration::from_secs(24 * 3600) {
            return fail("flush_age", "must be between 1 ms and 24 h".into());
        }
        if let Some(level) = self.level {
            let levels = self.compression.levels();
            if !levels.contains(&level) {
                return fail(
                    "level",
                    format!(
                        "{level} is outside {}..={} for {:?}",
                        levels.start(),
                        levels.end(),
                        self.compression
                    ),
                );
            }
        }
        if self.max_open_partitions == 0 {
            return fail("max_open_partitions", "must be at least 1".into());
        }
        if self.max_record_bytes == 0 || self.max_record_bytes > self.max_request_bytes {
            return fail(
                "max_record_bytes",
                "must be at least 1 and at most max_request_bytes".into(),
            );
        }
        if matches!(&self.time_field, Some(f) if f.is_empty()) {
            return fail("time_field", "must not be empty".into());
        }
        StreamKeyTemplate::parse(&self.key_template, self.compression).map_err(|reason| {
            StreamConfigError {
                key: "key_template",
                reason,
            }
        })?;
        if let Some(template) = &self.dead_letter_template {
            let parsed =
                StreamKeyTemplate::parse(template, self.compression).map_err(|reason| {
                    StreamConfigError {
                        key: "dead_letter_template",
                        reason,
                    }
                })?;
            if !parsed.fields().is_empty() {
                return fail(
                    "dead_letter_template",
                    "cannot use {field:…}: invalid records have no fields".into(),
                );
            }
            if !parsed.uses_uuid() {
                return fail(
                    "dead_letter_template",
                    "needs {uuid}: dead letters have no offsets of their own".into(),
                );
            }
        }
        Ok(())
    }
}

fn size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Size {
        Number(u64),
        Text(String),
    }
    match Size::deserialize(deserializer)? {
        Size::Number(n) => Ok(n),
        Size::Text(text) => parse_size(&text).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_key() {
        let cases: Vec<(&str, StreamConfig, Option<&str>)> = vec![
            ("defaults", StreamConfig::default(), None),
            (
                "zero flush size",
                StreamConfig {
                    flush_bytes: 0,
                    ..Default::default()
                },
                Some("flush_bytes"),
            ),
            (
                "zero records",
                StreamConfig {
                    flush_records: 0,
                    ..Default::default()
                },
                Some("flush_records"),
            ),
            (
                "zero age",
                StreamConfig {
                    flush_age: Duration::ZERO,
                    ..Default::default()
                },
                Some("flush_age"),
            ),
            (
                "zstd level 22",
                StreamConfig {
                    level: Some(22),
                    ..Default::default()
                },
                Some("level"),
            ),
            (
                "gzip level 9",
                StreamConfig {
                    compression: Compression::Gzip,
                    level: Some(9),
                    ..Default::default()
                },
                None,
            ),
            (
                "no partitions",
                StreamConfig {
                    max_open_partitions: 0,
                    ..Default::default()
                },
                Some("max_open_partitions"),
            ),
            (
                "record larger than a request",
                StreamConfig {
                    max_record_bytes: 128 << 20,
                    ..Default::default()
                },
                Some("max_record_bytes"),
            ),
            (
                "unknown placeholder",
                StreamConfig {
                    key_template: "{stream}/{nope}/{uuid}".into(),
                    ..Default::default()
                },
                Some("key_template"),
            ),
            (
                "dead letters by field",
                StreamConfig {
                    dead_letter_template: Some("dead/{field:tenant}/{uuid}".into()),
                    ..Default::default()
                },
                Some("dead_letter_template"),
            ),
        ];
        for (name, config, key) in cases {
            assert_eq!(config.validate().err().map(|e| e.key), key, "{name}");
        }
    }

    #[test]
    fn reads_toml_sizes_and_durations() {
        let config: StreamConfig = serde_json::from_value(serde_json::json!({
            "flush_bytes": "8MiB",
            "flush_age": "250ms",
            "compression": "gzip",
        }))
        .unwrap();
        assert_eq!(config.flush_bytes, 8 << 20);
        assert_eq!(config.flush_age, Duration::from_millis(250));
        assert_eq!(config.level(), 6);
        let unknown = serde_json::from_value::<StreamConfig>(serde_json::json!({"flush": 1}));
        assert!(unknown.is_err());
    }
}
