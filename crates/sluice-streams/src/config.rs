//! One stream's settings: when a batch is flushed (size before compression,
//! record count, age of its first record), how its object is compressed and
//! named, how many partitions may be open at once, and what happens to invalid
//! records and to empty Kafka messages. Validated once, before the stream
//! takes a record; [`StreamConfig::check_source`] adds what its source needs.

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
    /// What a batch is stored as: `ndjson` (compressed lines) or `parquet`
    /// (one Parquet file, its columns compressed with `compression`).
    pub format: RecordFormat,
    /// `delta`: each Parquet file is committed to the stream's Delta Lake
    /// table once stored (needs `format = "parquet"`); `none`: files only.
    pub table: TableFormat,
    /// The table's root key (default: the stream's name). The key template
    /// must put files under it; its `name=…` directories become the table's
    /// partition columns.
    pub table_location: Option<String>,
    /// Parquet: rows per row group (the unit a file is built in, in memory).
    pub row_group_records: u64,
    /// Parquet: declared top-level fields and their types (`bool`, `int64`,
    /// `float64`, `string`); fields the records bring besides are inferred
    /// and added as they appear.
    pub schema: std::collections::BTreeMap<String, String>,
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
    /// as they came, one per line, and the valid ones are taken. HTTP and
    /// standard input need `{uuid}` in it; Kafka needs `{partition}` and
    /// `{offset}` instead (one object per message, at the same key on a replay).
    pub dead_letter_template: Option<String>,
    /// Kafka messages without a value (tombstones, the delete markers of a
    /// compacted topic) or with only whitespace in it: `skip` them (counted),
    /// store them in the `dead_letter`, or `stop` the run at the first.
    pub empty_messages: EmptyMessages,
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
            format: RecordFormat::Ndjson,
            table: TableFormat::None,
            table_location: None,
            row_group_records: 1 << 20,
            schema: Default::default(),
            level: None,
            time_field: None,
            max_open_partitions: 64,
            dead_letter_template: None,
            empty_messages: EmptyMessages::Skip,
            max_record_bytes: 1 << 20,
            max_request_bytes: 64 << 20,
        }
    }
}

/// What a stream's batches are stored as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordFormat {
    /// Compressed NDJSON, the records' bytes as they came.
    #[default]
    Ndjson,
    /// One Parquet file per batch, under the stream's schema.
    Parquet,
}

/// The table a stream's files join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableFormat {
    /// None: the files are the output.
    #[default]
    None,
    /// A Delta Lake table, committed to with conditional writes.
    Delta,
}

/// What becomes of a Kafka message with no value or an empty one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmptyMessages {
    /// Left out, and counted (`empty_skipped`).
    #[default]
    Skip,
    /// Stored in the dead letter like an invalid message (an empty line).
    DeadLetter,
    /// The run stops at it, as at an invalid message.
    Stop,
}

/// Where a stream's records come from, for the settings that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordSource {
    /// HTTP requests and standard input: the stream numbers its records.
    Requests,
    /// A Kafka topic: records have partitions and offsets of their own.
    Kafka,
}

/// Largest flush size: a batch is one object, streamed as a multipart upload.
const MAX_FLUSH_BYTES: u64 = 1 << 40;

impl StreamConfig {
    /// What batch keys end with.
    pub fn extension(&self) -> &'static str {
        match self.format {
            RecordFormat::Ndjson => self.compression.extension(),
            RecordFormat::Parquet => ".parquet",
        }
    }

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
        if self.row_group_records == 0 {
            return fail("row_group_records", "must be at least 1".into());
        }
        if let Some((name, kind)) = self
            .schema
            .iter()
            .find(|(_, kind)| crate::table::schema::Shape::declared(kind).is_none())
        {
            return fail(
                "schema",
                format!("{name} = {kind:?}: the types are bool, int64, float64 and string"),
            );
        }
        if !self.schema.is_empty() && self.format != RecordFormat::Parquet {
            return fail("schema", "a schema is for format = \"parquet\"".into());
        }
        if self.table == TableFormat::Delta {
            if self.format != RecordFormat::Parquet {
                return fail(
                    "table",
                    "a Delta table holds Parquet files: set format = \"parquet\"".into(),
                );
            }
            if self.shard_prefix {
                return fail(
                    "shard_prefix",
                    "a Delta table's files sit under its location, not under hash prefixes".into(),
                );
            }
        } else if self.table_location.is_some() {
            return fail("table_location", "is for table = \"delta\"".into());
        }
        if let Some(location) = &self.table_location {
            let fine = !location.is_empty()
                && !location.starts_with('/')
                && !location.ends_with('/')
                && !location.contains('{')
                && !location
                    .split('/')
                    .any(|s| s.is_empty() || s == "." || s == "..");
            if !fine {
                return fail("table_location", format!("{location:?} is not a key prefix (segments separated by '/', no placeholders)"));
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
            if !parsed.uses_uuid() && !parsed.uses_offset() {
                return fail(
                    "dead_letter_template",
                    "needs {uuid} (HTTP, standard input) or {partition} and {offset} (Kafka)"
                        .into(),
                );
            }
        }
        if self.empty_messages == EmptyMessages::DeadLetter && self.dead_letter_template.is_none() {
            return fail(
                "empty_messages",
                "dead_letter needs a dead_letter_template".into(),
            );
        }
        Ok(())
    }

    /// Checks what depends on the records' source: dead letters of requests
    /// are keyed by `{uuid}` (their offsets are this process's count, reused
    /// by the next); a Kafka message's by its partition and offset, so that a
    /// replay finds it stored, apart from the batches' keys.
    pub fn check_source(&self, source: RecordSource) -> Result<(), StreamConfigError> {
        if source == RecordSource::Kafka
            && self.format == RecordFormat::Parquet
            && self.table == TableFormat::None
        {
            // A replay must judge each message as the run before did; with a
            // schema learned from the messages, that needs the schema kept in
            // the bucket, which is not done yet.
            return Err(StreamConfigError {
                key: "format",
                reason: "parquet from Kafka needs table = \"delta\": the table keeps the schema \
                         and each partition's offset, so a replay judges messages as the run \
                         before did"
                    .into(),
            });
        }
        let Some(text) = &self.dead_letter_template else {
            return Ok(());
        };
        let fail = |reason: String| {
            Err(StreamConfigError {
                key: "dead_letter_template",
                reason,
            })
        };
        let parsed = StreamKeyTemplate::parse(text, self.compression).map_err(|reason| {
            StreamConfigError {
                key: "dead_letter_template",
                reason,
            }
        })?;
        match source {
            RecordSource::Requests if !parsed.uses_uuid() => {
                fail("needs {uuid}: dead letters of requests have no offsets of their own".into())
            }
            RecordSource::Requests => Ok(()),
            RecordSource::Kafka => {
                if let Err(reason) = parsed.check_offset_layout() {
                    return fail(
                        reason.replace("a Kafka stream's keys", "a Kafka stream's dead letters"),
                    );
                }
                let records = StreamKeyTemplate::parse(&self.key_template, self.compression)
                    .map_err(|reason| StreamConfigError {
                        key: "key_template",
                        reason,
                    })?;
                let partition = crate::template::PartitionKey {
                    source_partition: Some(0),
                    ..Default::default()
                };
                let (dead, batches) = (
                    parsed.offset_prefix("s", &partition),
                    records.offset_prefix("s", &partition),
                );
                if dead.starts_with(&batches) || batches.starts_with(&dead) {
                    return fail(format!(
                        "its keys ({dead}…) must not sit among the batches' ({batches}…): \
                         a replay lists those to find what is stored"
                    ));
                }
                Ok(())
            }
        }
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
                "dead letters by offset",
                StreamConfig {
                    dead_letter_template: Some("dead/{partition}/{offset}".into()),
                    ..Default::default()
                },
                None,
            ),
            (
                "dead letters with neither",
                StreamConfig {
                    dead_letter_template: Some("dead/{yyyy}".into()),
                    ..Default::default()
                },
                Some("dead_letter_template"),
            ),
            (
                "empty messages to no dead letter",
                StreamConfig {
                    empty_messages: EmptyMessages::DeadLetter,
                    ..Default::default()
                },
                Some("empty_messages"),
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
    fn dead_letter_keys_suit_the_source() {
        // (dead letter template, source, error says)
        #[rustfmt::skip]
        let cases = [
            ("dead/{uuid}", RecordSource::Requests, None),
            ("dead/{partition}/{offset}", RecordSource::Requests, Some("{uuid}")),
            ("{stream}/dead/{partition}/{offset}", RecordSource::Kafka, None),
            ("dead/{uuid}", RecordSource::Kafka, Some("{offset}")),
            ("{stream}/{partition}/{offset}", RecordSource::Kafka, Some("among the batches")),
        ];
        for (template, source, says) in cases {
            let config = StreamConfig {
                key_template: "{stream}/{partition}/{offset}".into(),
                dead_letter_template: Some(template.into()),
                ..Default::default()
            };
            config.validate().unwrap();
            let got = config.check_source(source).err().map(|e| e.reason);
            match (got, says) {
                (None, None) => {}
                (Some(reason), Some(says)) if reason.contains(says) => {}
                (got, _) => panic!("{template} {source:?}: {got:?}"),
            }
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
