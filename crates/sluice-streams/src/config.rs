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

/// Everything one stream can be told: one definition per setting, read as a
/// `[streams.NAME]` table of the gateway's file (serde) and as the flags of
/// `sluice ingest` (clap), with the defaults the definitions give (docs/STREAMS.md's
/// table is generated from them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(deny_unknown_fields, default)]
#[command(next_help_heading = "Stream settings (the keys of [streams.NAME])")]
pub struct StreamConfig {
    /// Object keys: `{stream}`, `{yyyy}` `{mm}` `{dd}` `{hh}` (arrival time, or
    /// `time_field`), `{field:NAME}` (a top-level field of the record),
    /// `{partition}` and `{offset}` (Kafka; for standard input the record's
    /// position), `{uuid}`. The compression's ending (`.ndjson.zst`) is added.
    /// `sluice ingest` from Kafka takes `{stream}/{partition}/{offset}` (into a
    /// table `{stream}/{partition}/{offset}-{uuid}`) when this is left as it is.
    #[arg(
        id = "key_template",
        long = "key-template",
        value_name = "TEMPLATE",
        default_value = "{stream}/{yyyy}/{mm}/{dd}/{hh}/{uuid}"
    )]
    pub key_template: String,
    /// Prefix keys with a short hash so that batches spread over S3 partitions.
    #[arg(
        id = "shard_prefix",
        long = "shard-prefix",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_value = "false",
        default_missing_value = "true",
        action = clap::ArgAction::Set,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub shard_prefix: bool,
    /// Flush a batch once it holds this many bytes of records (before compression).
    #[arg(
        id = "flush_bytes",
        long = "flush-bytes",
        value_name = "SIZE",
        default_value = "64MiB",
        value_parser = sluice_upload::size_in(1, MAX_FLUSH_BYTES)
    )]
    #[serde(deserialize_with = "size")]
    pub flush_bytes: u64,
    /// Flush a batch once it holds this many records.
    #[arg(
        id = "flush_records",
        long = "flush-records",
        value_name = "N",
        default_value = "1000000",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub flush_records: u64,
    /// Flush a batch this long after its first record came in: the longest an
    /// HTTP client waits for its acknowledgement, less the store's time.
    #[arg(
        id = "flush_age",
        long = "flush-age",
        value_name = "DURATION",
        default_value = "1s",
        value_parser = humantime::parse_duration
    )]
    #[serde(with = "humantime_serde")]
    pub flush_age: Duration,
    /// How a batch's object (or a Parquet file's columns) is compressed.
    #[arg(
        id = "compression",
        long = "compression",
        value_enum,
        default_value = "zstd"
    )]
    pub compression: Compression,
    /// What a batch is stored as: `ndjson` (compressed lines) or `parquet`
    /// (one Parquet file, its columns compressed with `compression`; its
    /// schema inferred from the records and widened as new fields appear).
    /// `sluice ingest --table delta|iceberg` takes `parquet` when this is not
    /// given.
    #[arg(id = "format", long = "format", value_enum, default_value = "ndjson")]
    pub format: RecordFormat,
    /// `delta`: each Parquet file is committed to the stream's Delta Lake
    /// table once stored (needs `format = "parquet"`; conditional writes,
    /// exactly once; readable at once by DuckDB, Spark, Polars, deltalake);
    /// `iceberg`: the same into an Apache Iceberg table (format version 2,
    /// unpartitioned so far; readable by pyiceberg, DuckDB, Spark from its
    /// metadata files); `none`: files only.
    #[arg(id = "table", long = "table", value_enum, default_value = "none")]
    pub table: TableFormat,
    /// The table's root key [default: the stream's name]. The key template
    /// must put files under it; its `name=…` directories become the table's
    /// partition columns.
    #[arg(id = "table_location", long = "table-location", value_name = "KEY")]
    pub table_location: Option<String>,
    /// Parquet: rows per row group (the unit a file is built in, in memory).
    #[arg(
        id = "row_group_records",
        long = "row-group-records",
        value_name = "N",
        default_value = "1048576",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub row_group_records: u64,
    /// Parquet: declared top-level fields and their types (`bool`, `int64`,
    /// `float64`, `string`); fields the records bring besides are inferred
    /// and added as they appear. In the file only (a table of NAME = TYPE).
    #[arg(skip)]
    pub schema: std::collections::BTreeMap<String, String>,
    /// Compression level (zstd 1–19, default 3; gzip 1–9, default 6).
    #[arg(id = "level", long = "level", value_name = "N")]
    pub level: Option<i32>,
    /// A top-level record field holding the record's time (RFC 3339 text, or
    /// seconds or milliseconds since 1970) for the time placeholders; records
    /// without a usable one use their arrival time (except into an Iceberg
    /// table partitioned by its day or hour, which requires a timestamp).
    #[arg(id = "time_field", long = "time-field", value_name = "FIELD")]
    pub time_field: Option<String>,
    /// Batches open at once; a record for one more partition first flushes the
    /// batch opened longest ago.
    #[arg(
        id = "max_open_partitions",
        long = "max-open-partitions",
        value_name = "N",
        default_value = "64",
        value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub max_open_partitions: usize,
    /// Where invalid records go. Unset: a request with an invalid record is
    /// refused whole (400 naming the line), and `sluice ingest` stops at it.
    /// Set: they are stored under this template (same placeholders, no fields)
    /// as they came, one per line, and the valid ones are taken. HTTP and
    /// standard input need `{uuid}` in it; Kafka needs `{partition}` and
    /// `{offset}` instead (one object per message, at the same key on a replay).
    #[arg(
        id = "dead_letter_template",
        long = "dead-letter-template",
        value_name = "TEMPLATE"
    )]
    pub dead_letter_template: Option<String>,
    /// Kafka messages without a value (tombstones, the delete markers of a
    /// compacted topic) or with only whitespace in it: `skip` them (counted),
    /// store them in the dead letter (`dead-letter`), or `stop` the run at the first.
    #[arg(
        id = "empty_messages",
        long = "empty-messages",
        value_enum,
        default_value = "skip"
    )]
    pub empty_messages: EmptyMessages,
    /// Largest record.
    #[arg(
        id = "max_record_bytes",
        long = "max-record-bytes",
        value_name = "SIZE",
        default_value = "1MiB",
        value_parser = sluice_upload::size_in(1, MAX_FLUSH_BYTES)
    )]
    #[serde(deserialize_with = "size")]
    pub max_record_bytes: u64,
    /// Largest HTTP request body once decompressed.
    #[arg(
        id = "max_request_bytes",
        long = "max-request-bytes",
        value_name = "SIZE",
        default_value = "64MiB",
        value_parser = sluice_upload::size_in(1, MAX_FLUSH_BYTES)
    )]
    #[serde(deserialize_with = "size")]
    pub max_request_bytes: u64,
}

impl Default for StreamConfig {
    /// What the definitions give when nothing is said.
    fn default() -> Self {
        sluice_upload::defaults()
    }
}

/// What a stream's batches are stored as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum RecordFormat {
    /// Compressed NDJSON, the records' bytes as they came.
    #[default]
    Ndjson,
    /// One Parquet file per batch, under the stream's schema.
    Parquet,
}

/// The table a stream's files join.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum TableFormat {
    /// None: the files are the output.
    #[default]
    None,
    /// A Delta Lake table, committed to with conditional writes.
    Delta,
    /// An Apache Iceberg table (format version 2), committed to with
    /// conditional writes of its metadata versions.
    Iceberg,
}

impl TableFormat {
    /// The format's name in messages; None for no table.
    pub fn name(self) -> Option<&'static str> {
        match self {
            TableFormat::None => None,
            TableFormat::Delta => Some("Delta"),
            TableFormat::Iceberg => Some("Iceberg"),
        }
    }
}

/// What becomes of a Kafka message with no value or an empty one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum EmptyMessages {
    /// Left out, and counted (`empty_skipped`).
    #[default]
    Skip,
    /// Stored in the dead letter like an invalid message (an empty line);
    /// `dead_letter` in the file.
    #[value(alias = "dead_letter")]
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
    /// Whether the stream's Iceberg table is partitioned by its records'
    /// time (a `NAME={yyyy}-{mm}-{dd}` or `…-{hh}` directory): each record's
    /// `time_field` is then read as its timestamp column reads it, and
    /// required.
    pub fn partitions_by_record_time(&self) -> bool {
        self.table == TableFormat::Iceberg
            && crate::table::iceberg_partitions::by_time(&self.key_template)
    }

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
                format!("{name} = {kind:?}: the types are bool, int64, float64, string, timestamp, timestamp_ntz, date and decimal(P,S)"),
            );
        }
        if !self.schema.is_empty() && self.format != RecordFormat::Parquet {
            return fail("schema", "a schema is for format = \"parquet\"".into());
        }
        if let Some(format) = self.table.name() {
            if self.format != RecordFormat::Parquet {
                return fail(
                    "table",
                    format!("a {format} table holds Parquet files: set format = \"parquet\""),
                );
            }
            if self.shard_prefix {
                return fail(
                    "shard_prefix",
                    format!(
                        "a {format} table's files sit under its location, not under hash prefixes"
                    ),
                );
            }
        } else if self.table_location.is_some() {
            return fail(
                "table_location",
                "is for a stream with a table (table = \"delta\" or \"iceberg\")".into(),
            );
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
                reason: "parquet from Kafka needs a table (table = \"delta\" or \"iceberg\"): the table keeps the schema \
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

/// docs/STREAMS.md's table of every stream setting, as the definitions make
/// it: key, `sluice ingest` flag, default, meaning (written by its test).
#[cfg(test)]
fn settings_table() -> String {
    use clap::Args as _;
    let command = StreamConfig::augment_args(clap::Command::new("stream"));
    let mut text = String::from(
        "| key | `sluice ingest` flag | default | what it does |\n| --- | --- | --- | --- |\n",
    );
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = match default.is_empty() {
            true => "none".to_owned(),
            false => format!("`{}`", default.join(",")),
        };
        let doc = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string().replace('\n', " ").replace('|', "\\|"))
            .unwrap_or_default();
        text.push_str(&format!(
            "| `{}` | `--{long}` | {default} | {doc} |\n",
            arg.get_id()
        ));
    }
    text.push_str(
        "| `schema` | (the file only) | none | Parquet: declared top-level fields and their types \
         (`bool`, `int64`, `float64`, `string`, `timestamp`, `timestamp_ntz`, `date`, `decimal(P,S)`), a table of NAME = TYPE; fields the records bring \
         besides are inferred and added as they appear. |\n",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAMS_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/STREAMS.md");
    const BEGIN: &str = "<!-- stream settings: generated from StreamConfig, do not edit -->\n";
    const END: &str = "<!-- end of stream settings -->\n";

    /// docs/STREAMS.md with its settings table as the definitions make it.
    #[test]
    fn the_docs_table_of_stream_settings_is_what_the_definitions_say() {
        let written = std::fs::read_to_string(STREAMS_DOC).unwrap();
        let (before, rest) = written
            .split_once(BEGIN)
            .expect("the table's opening marker");
        let (_, after) = rest.split_once(END).expect("the table's closing marker");
        let rendered = format!("{before}{BEGIN}{}{END}{after}", settings_table());
        sluice_testkit::assert_generated_file(
            STREAMS_DOC,
            &rendered,
            "cargo test -p sluice-streams the_docs_table",
        );
    }

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
